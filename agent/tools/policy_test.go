package tools

import (
	"testing"

	"github.com/heraldhq/herald/agent"
)

func TestPolicyDecide(t *testing.T) {
	full := Policy{
		Default: "allow",
		Groups:  map[string]string{"files": "supervised", "web": "deny", "exec": "allow"},
		Tools:   map[string]string{"read_file": "allow", "web_fetch": "supervised", "delegate": "deny"},
	}
	tests := []struct {
		name  string
		p     Policy
		tool  string
		group string
		want  Decision
	}{
		{"empty policy allows", Policy{}, "read_file", agent.GroupFiles, Allow},
		{"empty policy: exec supervised", Policy{}, "exec", agent.GroupExec, Supervised},
		{"default allow: exec still supervised", Policy{Default: "allow"}, "exec", agent.GroupExec, Supervised},
		{"default deny beats exec floor", Policy{Default: "deny"}, "exec", agent.GroupExec, Deny},
		{"default applies to ungrouped", Policy{Default: "supervised"}, "delegate", "", Supervised},
		{"group beats default", full, "write_file", agent.GroupFiles, Supervised},
		{"tool beats group", full, "read_file", agent.GroupFiles, Allow},
		{"tool beats group (stricter)", full, "web_fetch", agent.GroupWeb, Supervised},
		{"group entry for exec overrides floor", full, "exec", agent.GroupExec, Allow},
		{"tool entry for exec overrides floor", Policy{Tools: map[string]string{"exec": "allow"}}, "exec", agent.GroupExec, Allow},
		{"ungrouped tool entry", full, "delegate", "", Deny},
		{"unlisted group falls to default", full, "sessions_spawn", agent.GroupSessions, Allow},
		{"case and space ignored", Policy{Tools: map[string]string{"x": " Supervised "}}, "x", "", Supervised},
		{"invalid value fails closed", Policy{Tools: map[string]string{"x": "yes"}}, "x", "", Deny},
		{"invalid default fails closed", Policy{Default: "maybe"}, "x", "", Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Decide(tt.tool, tt.group); got != tt.want {
				t.Fatalf("Decide(%q, %q) = %q, want %q", tt.tool, tt.group, got, tt.want)
			}
		})
	}
}

func TestSubagentToolAllowed(t *testing.T) {
	tests := []struct {
		name        string
		tool        string
		allow, deny []string
		want        bool
	}{
		{"default: ordinary tool", "read_file", nil, nil, true},
		{"default: exec", "exec", nil, nil, true},
		{"default: sessions_spawn removed", "sessions_spawn", nil, nil, false},
		{"default: sessions_send removed", "sessions_send", nil, nil, false},
		{"default: sessions_list removed", "sessions_list", nil, nil, false},
		{"default: sessions_history removed", "sessions_history", nil, nil, false},
		{"deny", "exec", nil, []string{"exec"}, false},
		{"deny other", "read_file", nil, []string{"exec"}, true},
		{"allow-only: listed", "web_fetch", []string{"web_fetch", "read_file"}, nil, true},
		{"allow-only: not listed", "exec", []string{"web_fetch", "read_file"}, nil, false},
		{"deny wins over allow", "exec", []string{"exec"}, []string{"exec"}, false},
		{"allow may grant a session tool", "sessions_list", []string{"sessions_list"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SubagentToolAllowed(tt.tool, tt.allow, tt.deny); got != tt.want {
				t.Fatalf("SubagentToolAllowed(%q, %v, %v) = %v, want %v", tt.tool, tt.allow, tt.deny, got, tt.want)
			}
		})
	}
	for _, n := range SessionTools {
		if !IsSessionTool(n) {
			t.Fatalf("IsSessionTool(%q) = false", n)
		}
	}
	if IsSessionTool("subagents") {
		t.Fatal("subagents is not a session tool")
	}
}
