package providers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent"
)

// A schema is parsed once and shared; building a tool from it twice gives
// the same tool both times (nothing is taken out of the shared map).
func TestToolSchemaSharedAcrossCalls(t *testing.T) {
	spec := agent.ToolSpec{Name: "grep", Schema: json.RawMessage(
		`{"type":"object","properties":{"pattern":{"type":"string"}},"required":["pattern"],"additionalProperties":false}`)}
	first, again := anthropicTool(spec), anthropicTool(spec)
	if !reflect.DeepEqual(first.InputSchema, again.InputSchema) {
		t.Fatalf("second build differs:\n%+v\n%+v", first.InputSchema, again.InputSchema)
	}
	s := again.InputSchema
	if !reflect.DeepEqual(s.Required, []string{"pattern"}) || s.ExtraFields["additionalProperties"] != false || s.Properties == nil {
		t.Errorf("input schema = %+v", s)
	}
	p := bodyBytes((&openAIProvider{}).body(agent.Request{Model: "m", Tools: []agent.ToolSpec{spec}}, false))
	p2 := bodyBytes((&openAIProvider{}).body(agent.Request{Model: "m", Tools: []agent.ToolSpec{spec}}, false))
	if string(p2) != string(p) || !strings.Contains(string(p2), `"required":["pattern"]`) {
		t.Errorf("openai bodies:\n%s\n%s", p, p2)
	}
	// A tool of the same name and description with another schema is
	// rendered anew.
	spec.Schema = json.RawMessage(`{"type":"object","properties":{"glob":{"type":"string"}}}`)
	if p3 := bodyBytes((&openAIProvider{}).body(agent.Request{Model: "m", Tools: []agent.ToolSpec{spec}}, false)); !strings.Contains(string(p3), `"glob"`) {
		t.Errorf("openai body after the schema changed: %s", p3)
	}
}
