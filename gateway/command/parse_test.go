package command

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		text  string
		want  Command
		usage string // the expected usage error, if any
	}{
		{text: "/subagents", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "/subagents list", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "  /Subagents   LIST  ", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "/subagents@herald_bot list", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "/subagents@herald_bot", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "<@U0BOT> /subagents ls", want: Command{Name: NameSubagents, Action: ActionList}},
		{text: "@herald /stop", want: Command{Name: NameStop}},
		{text: "/subagents\tstop\n#2", want: Command{Name: NameSubagents, Action: ActionStop, Target: "#2"}},
		{text: "/subagents stop All", want: Command{Name: NameSubagents, Action: ActionStop, Target: TargetAll}},
		{text: "/subagents KILL 3f2a9c1b", want: Command{Name: NameSubagents, Action: ActionStop, Target: "3f2a9c1b"}},
		{text: "/subagents stop last", want: Command{Name: NameSubagents, Action: ActionStop, Target: "last"}},
		{text: "/subagents info agent:main:subagent:0a1b", want: Command{Name: NameSubagents, Action: ActionInfo, Target: "agent:main:subagent:0a1b"}},
		{text: "/subagents inspect 1", want: Command{Name: NameSubagents, Action: ActionInfo, Target: "1"}},
		{text: "/subagents log 1", want: Command{Name: NameSubagents, Action: ActionLog, Target: "1", Limit: 20}},
		{text: "/subagents log 1 50 TOOLS", want: Command{Name: NameSubagents, Action: ActionLog, Target: "1", Limit: 50, Tools: true}},
		{text: "/subagents log #1 tools 5000", want: Command{Name: NameSubagents, Action: ActionLog, Target: "#1", Limit: 200, Tools: true}},
		{text: "/subagents send 2 please  also\ncheck X ", want: Command{Name: NameSubagents, Action: ActionSend, Target: "2", Message: "please  also\ncheck X"}},
		{text: "/subagents steer last go on", want: Command{Name: NameSubagents, Action: ActionSend, Target: "last", Message: "go on"}},
		{text: "/stop", want: Command{Name: NameStop}},
		{text: "/STOP@herald_bot now", want: Command{Name: NameStop}},
		{text: "/approve K3F9", want: Command{Name: NameApprove, Code: "K3F9"}},
		{text: "/approve `K3F9`", want: Command{Name: NameApprove, Code: "K3F9"}},
		{text: "/deny k3f9 too risky", want: Command{Name: NameDeny, Code: "k3f9"}},
		{text: "/status", want: Command{Name: NameStatus}},
		{text: "/help", want: Command{Name: NameHelp}},
		{text: "/subagents frob", usage: usageSubagents},
		{text: "/subagents stop", usage: usageStop},
		{text: "/subagents log", usage: usageLog},
		{text: "/subagents log 1 -1", usage: usageLog},
		{text: "/subagents log 1 many", usage: usageLog},
		{text: "/subagents info", usage: usageInfo},
		{text: "/subagents send", usage: usageSend},
		{text: "/subagents send 1", usage: usageSend},
		{text: "/approve", usage: usageApprove},
		{text: "/deny \"\"", usage: usageDeny},
	}
	for _, c := range cases {
		t.Run(c.text, func(t *testing.T) {
			got, err := Parse(c.text)
			if c.usage != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || ue.Usage != c.usage {
					t.Fatalf("Parse(%q) error = %v, want usage %q", c.text, err, c.usage)
				}
				if !IsCommand(c.text) {
					t.Errorf("IsCommand(%q) = false for a command with bad arguments", c.text)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", c.text, got, err, c.want)
			}
			if !IsCommand(c.text) {
				t.Errorf("IsCommand(%q) = false", c.text)
			}
		})
	}
}

func TestNotCommands(t *testing.T) {
	for _, text := range []string{"", "   ", "hello", "subagents list", "stop", "/", "//", "/ stop",
		"/stopp", "/unknown list", "please /stop", "@herald hello", "/@herald_bot", "\\stop", "／stop"} {
		if _, err := Parse(text); !errors.Is(err, ErrNotCommand) {
			t.Errorf("Parse(%q) error = %v, want ErrNotCommand", text, err)
		}
		if IsCommand(text) {
			t.Errorf("IsCommand(%q) = true", text)
		}
	}
}
