package agent

// InterruptedResult is the tool result given to the model for a tool call
// whose result never reached the transcript (the gateway stopped during the
// call) and that is not repeated on resume (SPEC §25): the model decides.
const InterruptedResult = `{"status":"interrupted","error":"interrupted: the gateway stopped during this call; it may or may not have taken effect"}`

// interruptedFor is the interrupted result of call.
func interruptedFor(call ToolCall) ToolResult {
	return ToolResult{CallID: call.ID, Name: call.Name, Content: InterruptedResult, IsError: true}
}

// appendMessage appends m to msgs, merging tool results into the tool
// message before it: the per-call journal writes one transcript line per
// tool result (SPEC §25), while the history — what providers get — holds
// one tool message after each assistant message with tool calls.
func appendMessage(msgs []Message, m Message) []Message {
	if n := len(msgs); n > 0 && m.Role == RoleTool && msgs[n-1].Role == RoleTool {
		last := msgs[n-1]
		last.ToolResults = append(append([]ToolResult(nil), last.ToolResults...), m.ToolResults...)
		msgs[n-1] = last
		return msgs
	}
	return append(msgs, m)
}

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
		results.ToolResults = append(results.ToolResults, missingResults(m.ToolCalls, results.ToolResults)...)
		out = append(out, results)
	}
	return out
}

// missingResults are the interrupted results of the calls that have none
// in results.
func missingResults(calls []ToolCall, results []ToolResult) []ToolResult {
	var out []ToolResult
	for _, c := range openCalls(calls, results) {
		out = append(out, interruptedFor(c))
	}
	return out
}

// openCalls are the calls without a result in results, in call order.
func openCalls(calls []ToolCall, results []ToolResult) []ToolCall {
	have := make(map[string]bool, len(results))
	for _, r := range results {
		have[r.CallID] = true
	}
	var out []ToolCall
	for _, c := range calls {
		if !have[c.ID] {
			out = append(out, c)
		}
	}
	return out
}

// splitPendingCalls separates the tool calls of the history's last
// assistant message that have no result (the gateway stopped while running
// them; the results of the calls that ended are in the tool message after
// it) from the rest, which closeOpenToolCalls makes valid. history ends
// with that assistant message (and its partial results). A resumed turn
// runs the pending calls; any other use of the history closes them as
// interrupted.
func splitPendingCalls(msgs []Message) (history []Message, pending []ToolCall) {
	n := len(msgs)
	tail := 1
	if n >= 2 && msgs[n-1].Role == RoleTool {
		tail = 2
	}
	if n < tail || msgs[n-tail].Role != RoleAssistant || len(msgs[n-tail].ToolCalls) == 0 {
		return closeOpenToolCalls(msgs), nil
	}
	var results []ToolResult
	if tail == 2 {
		results = msgs[n-1].ToolResults
	}
	pending = openCalls(msgs[n-tail].ToolCalls, results)
	if len(pending) == 0 {
		return closeOpenToolCalls(msgs), nil
	}
	return append(closeOpenToolCalls(msgs[:n-tail]), msgs[n-tail:]...), pending
}
