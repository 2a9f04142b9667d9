package command

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
)

var fuzzSeeds = []string{
	"/subagents", "/subagents list", "/subagents@herald_bot LIST", "<@U1> /subagents ls",
	"/subagents stop all", "/subagents stop #1", "/subagents kill 3f2a", "/subagents log 1 50 tools",
	"/subagents log last tools 999", "/subagents info agent:main:subagent:x", "/subagents send 1 hi\nthere",
	"/stop", "/approve K3F9", "/deny `q7`", "/status", "/help", "/subagents log 1 0", "/approve \"",
	"hello", "/", "@a @b /stop", "/subagents send\t1\t \u00a0", "/subagents log 1 +5", "/x@y",
	"/new", "/reset now", "/compact", "/compact the API design\n and names", "/model", "/model anthropic/claude-x",
	"/model DEFAULT", "/model a b", "/think", "/think HIGH", "/thinking off", "/think very high",
}

// FuzzParse checks that Parse never panics, that a command's canonical
// form parses back to the same command, that usages are one line, and that
// IsCommand agrees with Parse.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := Parse(text)
		var ue *UsageError
		switch {
		case errors.Is(err, ErrNotCommand):
			if IsCommand(text) {
				t.Fatalf("IsCommand(%q) = true, Parse says not a command", text)
			}
		case errors.As(err, &ue):
			if !strings.HasPrefix(ue.Usage, "Usage: /") || strings.Contains(ue.Usage, "\n") {
				t.Fatalf("Parse(%q) usage %q is not one line", text, ue.Usage)
			}
			if !IsCommand(text) {
				t.Fatalf("IsCommand(%q) = false for a usage error", text)
			}
		case err != nil:
			t.Fatalf("Parse(%q) unexpected error %v", text, err)
		default:
			if !IsCommand(text) {
				t.Fatalf("IsCommand(%q) = false, Parse gave %+v", text, c)
			}
			checkCommand(t, text, c)
			back, err := Parse(c.String())
			if err != nil || back != c {
				t.Fatalf("Parse(%q) = %+v; its canonical form %q parses to %+v, %v", text, c, c.String(), back, err)
			}
		}
	})
}

func checkCommand(t *testing.T, text string, c Command) {
	t.Helper()
	switch c.Name {
	case NameStop, NameStatus, NameHelp, NameNew, NameReset, NameCompact:
	case NameModel, NameThink:
		if strings.ContainsFunc(c.Arg, unicode.IsSpace) {
			t.Fatalf("Parse(%q) arg %q", text, c.Arg)
		}
	case NameApprove, NameDeny:
		if c.Code == "" || strings.ContainsFunc(c.Code, unicode.IsSpace) {
			t.Fatalf("Parse(%q) code %q", text, c.Code)
		}
	case NameSubagents:
		switch c.Action {
		case ActionList:
		case ActionStop, ActionInfo:
			if c.Target == "" {
				t.Fatalf("Parse(%q) has no target", text)
			}
		case ActionLog:
			if c.Target == "" || c.Limit < 1 || c.Limit > MaxLogLimit {
				t.Fatalf("Parse(%q) = %+v", text, c)
			}
		case ActionSend:
			if c.Target == "" || strings.TrimSpace(c.Message) == "" {
				t.Fatalf("Parse(%q) = %+v", text, c)
			}
		default:
			t.Fatalf("Parse(%q) action %q", text, c.Action)
		}
	default:
		t.Fatalf("Parse(%q) name %q", text, c.Name)
	}
}

// FuzzHandle runs any text as a command, with an empty Env and with a real
// store and Manager holding fixture runs: no panic, and every handled
// command gets a reply.
func FuzzHandle(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	h := newHarness(f, "", slowOrEcho)
	h.fixtures()
	old := sendTimeout
	sendTimeout = 50 * time.Millisecond
	f.Cleanup(func() { sendTimeout = old })
	f.Fuzz(func(t *testing.T, text string, real bool) {
		env := Env{}
		if real {
			env = h.env()
		}
		for _, session := range []string{sessA, ""} {
			reply, handled := Handle(context.Background(), env, Request{SessionKey: session, Text: text})
			if handled != IsCommand(text) {
				t.Fatalf("Handle(%q) handled = %v, IsCommand = %v", text, handled, !handled)
			}
			if handled == (reply == "") {
				t.Fatalf("Handle(%q) = %q, handled %v", text, reply, handled)
			}
		}
	})
}
