package ids_test

import (
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/ids"
)

func TestRequesterKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    channels.Origin
		want ids.SessionKey
	}{
		{"dm", channels.Origin{Channel: "slack", ChatType: channels.ChatDM, ChatID: "D1"}, "agent:main:slack:dm:D1"},
		{"group thread", channels.Origin{Channel: "slack", ChatType: channels.ChatGroup, ChatID: "C1", ThreadID: "1700.1"}, "agent:main:slack:group:C1:thread:1700.1"},
		{"other chat types count as dm", channels.Origin{Channel: "telegram", ChatType: "channel", ChatID: "42"}, "agent:main:telegram:dm:42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := ids.Requester("main", tc.o)
			if k != tc.want {
				t.Fatalf("Requester = %q, want %q", k, tc.want)
			}
			if k.AgentID() != "main" || k.Kind() != ids.KindRequester || "agent:main:"+k.Rest() != string(k) {
				t.Fatalf("%q parsed as agent %q, kind %q, rest %q", k, k.AgentID(), k.Kind(), k.Rest())
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	sub, del := ids.NewSubagent("coder"), ids.NewDelegate("coder")
	if sub == ids.NewSubagent("coder") {
		t.Fatal("two sub-agent keys are the same")
	}
	for _, tc := range []struct {
		key         ids.SessionKey
		agent, kind string
	}{
		{sub, "coder", ids.KindSubagent},
		{del, "coder", ids.KindDelegate},
		{"agent:main:web:dm:c1", "main", ids.KindRequester},
		{"agent::slack:dm:D1", "", ""},
		{"agent:main", "", ""},
		{"agent:main:", "", ""},
		{"slack:dm:D1", "", ""},
		{"", "", ""},
	} {
		if got := tc.key.AgentID(); got != tc.agent {
			t.Errorf("%q: AgentID = %q, want %q", tc.key, got, tc.agent)
		}
		if got := tc.key.Kind(); got != tc.kind {
			t.Errorf("%q: Kind = %q, want %q", tc.key, got, tc.kind)
		}
	}
	if !strings.HasPrefix(string(sub), "agent:coder:subagent:") || len(sub.Rest()) != len("subagent:")+36 {
		t.Fatalf("sub-agent key %q", sub)
	}
	if r := ids.NewRunID(); len(r) != 36 || r == ids.NewRunID() {
		t.Fatalf("run id %q", r)
	}
}
