package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// schemaModel: "spawn scored" spawns a child with an outputSchema whose
// first announce reply is prose and whose correction is the JSON value;
// "spawn bad" spawns with an invalid schema. After a tool call the model
// says what the tool answered; any other message is answered with the
// Output: lines its history holds.
func schemaModel(c llmtest.Call) llmtest.Reply {
	last := c.LastUser()
	if strings.Contains(c.System, "Sub-agent context") {
		switch {
		case strings.HasPrefix(last, "That output does not match the schema"):
			return llmtest.Reply{Text: "```json\n{\"score\": 7}\n```"}
		case strings.Contains(last, "Announce step"):
			return llmtest.Reply{Text: "The score is seven."}
		}
		return llmtest.Reply{Text: "scored it"}
	}
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
		return llmtest.Reply{Text: "tool: " + c.Messages[n-1].ToolResults[0].Content}
	}
	schema := `{"type":"object","properties":{"score":{"type":"integer"}},"required":["score"]}`
	switch last {
	case "spawn scored":
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
			Args: json.RawMessage(`{"task":"score it","label":"scored","outputSchema":` + schema + `}`)}}}
	case "spawn bad":
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn",
			Args: json.RawMessage(`{"task":"score it","outputSchema":{"type":"nope"}}`)}}}
	}
	var outputs []string
	for _, m := range c.Messages {
		for _, line := range strings.Split(m.Text, "\n") {
			if out, ok := strings.CutPrefix(line, "Output: "); ok && m.Role == agent.RoleUser {
				outputs = append(outputs, out)
			}
		}
	}
	return llmtest.Reply{Text: "outputs: " + strings.Join(outputs, " | ")}
}

// TestE2EOutputSchema: through the web API, a child with an outputSchema
// that answers prose, then (after its one correction turn) the JSON value,
// is announced with the value fenced under Result:, and the parent's next
// turn holds it on the Output: line of the result; an invalid schema is
// refused at spawn with an error naming outputSchema.
func TestE2EOutputSchema(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, orchConfig, schemaModel)
	const client = "schema"
	seq := webPost(t, tg.URL, client, "spawn bad")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool {
		return strings.HasPrefix(s, "tool: ") && strings.Contains(s, `"status":"error"`) && strings.Contains(s, "outputSchema")
	})

	seq = webPost(t, tg.URL, client, "spawn scored")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.Contains(s, `"status":"accepted"`) })
	waitText(t, tg, client, "Result:\n```json\n{\n  \"score\": 7\n}\n```")
	seq = webPost(t, tg.URL, client, "what did it output?")
	if got := waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return strings.HasPrefix(s, "outputs:") }).Text; got != `outputs: {"score":7}` {
		t.Errorf("the parent's next turn saw %q, want the one Output line", got)
	}
}
