package agent

// interruptedResult is the tool result given to the model for a tool call
// whose result never reached the transcript (the gateway died mid-call).
const interruptedResult = `{"status":"error","error":"the gateway stopped before this tool call finished; its result is unknown"}`

// closeOpenToolCalls gives every assistant tool call without a result an
// error result, so a history cut by a crash between a tool call and its
// result is still a valid conversation: provider APIs reject a tool call
// that is not followed by its result.
func closeOpenToolCalls(msgs []Message) []Message {
	var out []Message
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		out = append(out, m)
		if m.Role != RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		var results Message
		if i+1 < len(msgs) && msgs[i+1].Role == RoleTool {
			i++
			results = msgs[i]
			results.ToolResults = append([]ToolResult(nil), results.ToolResults...)
		} else {
			results = Message{Role: RoleTool}
		}
		have := make(map[string]bool, len(results.ToolResults))
		for _, r := range results.ToolResults {
			have[r.CallID] = true
		}
		for _, c := range m.ToolCalls {
			if !have[c.ID] {
				results.ToolResults = append(results.ToolResults, ToolResult{CallID: c.ID, Name: c.Name, Content: interruptedResult, IsError: true})
			}
		}
		out = append(out, results)
	}
	return out
}

// splitPendingCalls separates the tool calls of the history's last message
// that have no result (the gateway died while running them) from the rest,
// which closeOpenToolCalls makes valid. A resumed turn runs the pending
// calls; any other use of the history closes them as interrupted.
func splitPendingCalls(msgs []Message) (history []Message, pending []ToolCall) {
	if n := len(msgs); n > 0 && msgs[n-1].Role == RoleAssistant && len(msgs[n-1].ToolCalls) > 0 {
		return closeOpenToolCalls(msgs[:n-1]), msgs[n-1].ToolCalls
	}
	return closeOpenToolCalls(msgs), nil
}
