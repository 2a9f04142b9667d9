package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"unsafe"

	"github.com/heraldhq/herald/agent"
)

// rendered is a tool whose description is made when Spec is asked, as
// exec's and web_fetch's are from their settings.
type rendered struct {
	name  string
	limit int
}

func (r rendered) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: r.name, Description: fmt.Sprintf("does %s up to %d bytes", r.name, r.limit), Schema: json.RawMessage(`{"type":"object"}`)}
}
func (rendered) Group() string { return "" }
func (rendered) Call(context.Context, agent.CallContext, json.RawMessage) (string, error) {
	return "{}", nil
}

// A registry hands out its specs without a copy per request, in name
// order; a slice handed out stays as it was when the registry changes;
// registries built from equal tools share one copy of each description.
func TestRegistrySpecsShared(t *testing.T) {
	r := agent.NewRegistry(rendered{"write", 1}, rendered{"exec", 2})
	if n := testing.AllocsPerRun(100, func() { _ = r.Specs() }); n != 0 {
		t.Errorf("Specs allocates %v times, want 0", n)
	}
	before := r.Specs()
	if before[0].Name != "exec" || before[1].Name != "write" {
		t.Fatalf("specs %v, want name order", before)
	}
	r.Add(rendered{"read", 3})
	r.Add(rendered{"exec", 9})
	if len(before) != 2 || before[0].Description != "does exec up to 2 bytes" || before[1].Name != "write" {
		t.Errorf("a slice handed out changed with the registry: %v", before)
	}
	after := r.Specs()
	if len(after) != 3 || after[0].Description != "does exec up to 9 bytes" || after[1].Name != "read" {
		t.Errorf("specs after Add: %v", after)
	}
	if tl, ok := r.Get("exec"); !ok || tl.(rendered).limit != 9 {
		t.Errorf("Get(exec) = %v, %v", tl, ok)
	}
	kept := r.Filter(func(name string, _ agent.Tool) bool { return name != "read" })
	if s := kept.Specs(); len(s) != 2 || s[0].Name != "exec" || s[1].Name != "write" {
		t.Errorf("filtered specs %v", s)
	}

	other := agent.NewRegistry(rendered{"write", 1})
	a, b := r.Specs()[2].Description, other.Specs()[0].Description
	if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("two registries keep two copies of the description %q", a)
	}
}

// counted counts how often its spec is asked for.
type counted struct {
	rendered
	specs *int
}

func (c counted) Spec() agent.ToolSpec { *c.specs++; return c.rendered.Spec() }

// A clone has the registry's tools without asking them for their specs
// again, and each changes apart from the other.
func TestRegistryClone(t *testing.T) {
	var asked int
	r := agent.NewRegistry(counted{rendered{"write", 1}, &asked}, counted{rendered{"exec", 2}, &asked})
	asked = 0
	c := r.Clone()
	if asked != 0 {
		t.Errorf("Clone asked %d specs", asked)
	}
	c.Add(rendered{"read", 3})
	c.Add(rendered{"exec", 9})
	if s := r.Specs(); len(s) != 2 || s[0].Description != "does exec up to 2 bytes" || s[1].Name != "write" {
		t.Errorf("the registry changed with its clone: %v", s)
	}
	if s := c.Specs(); len(s) != 3 || s[0].Description != "does exec up to 9 bytes" || s[1].Name != "read" || s[2].Name != "write" {
		t.Errorf("the clone's specs: %v", s)
	}
}
