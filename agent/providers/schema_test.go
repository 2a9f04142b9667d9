package providers

import (
	"encoding/json"
	"reflect"
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
	p := (&openAIProvider{}).params(agent.Request{Model: "m", Tools: []agent.ToolSpec{spec}})
	p2 := (&openAIProvider{}).params(agent.Request{Model: "m", Tools: []agent.ToolSpec{spec}})
	if got := p2.Tools[0].GetFunction().Parameters; !reflect.DeepEqual(got, p.Tools[0].GetFunction().Parameters) || got["required"] == nil {
		t.Errorf("openai parameters = %v", got)
	}
}
