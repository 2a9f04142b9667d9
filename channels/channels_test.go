package channels

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSplitKeepsStatsLast(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 50; i++ {
		b.WriteString(strings.Repeat("x", 30) + "\n")
	}
	b.WriteString("Stats: runtime 1s • tokens 10")
	parts := Split(b.String(), 200)
	if len(parts) < 2 {
		t.Fatalf("want several parts, got %d", len(parts))
	}
	for i, p := range parts {
		if n := len([]rune(p)); n > 200 {
			t.Errorf("part %d has %d chars, limit 200", i, n)
		}
	}
	last := parts[len(parts)-1]
	if !strings.HasSuffix(last, "Stats: runtime 1s • tokens 10") {
		t.Errorf("stats line not last: %q", last)
	}
	if got := strings.Join(parts, "\n"); got != b.String() {
		t.Errorf("joined parts differ from the input")
	}
}

func TestSplitLongLine(t *testing.T) {
	parts := Split(strings.Repeat("é", 25), 10)
	if len(parts) != 3 || parts[2] != "ééééé" {
		t.Fatalf("got %q", parts)
	}
}

func TestAccessAdmit(t *testing.T) {
	a := Access{AllowFrom: []string{"u1"}, Groups: map[string]GroupRule{"g1": {RequireMention: true}, "g2": {}}}
	cases := []struct {
		name             string
		chatType, chat   string
		sender           string
		mentioned, admit bool
	}{
		{"dm allowed", ChatDM, "d", "u1", false, true},
		{"dm stranger", ChatDM, "d", "u2", false, false},
		{"group unlisted", ChatGroup, "g9", "u1", true, false},
		{"group needs mention", ChatGroup, "g1", "u1", false, false},
		{"group mentioned", ChatGroup, "g1", "u1", true, true},
		{"group no mention needed", ChatGroup, "g2", "u1", false, true},
		{"group stranger", ChatGroup, "g1", "u2", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := a.Admit(c.chatType, c.chat, c.sender, c.mentioned); got != c.admit {
				t.Errorf("Admit = %v, want %v", got, c.admit)
			}
		})
	}
	open := Access{GroupPolicy: GroupOpen}
	if !open.Admit(ChatGroup, "any", "anyone", true) || open.Admit(ChatGroup, "any", "anyone", false) {
		t.Error("open policy: want mentioned-only admission in unlisted groups")
	}
	if (Access{GroupPolicy: GroupDisabled}).Admit(ChatGroup, "g", "u", true) {
		t.Error("disabled policy admitted a group message")
	}
}

// TestAdmitInThreadAsksOnlyWhereItDecides: the binding lookup (a store
// read per message) runs only for an un-mentioned group message that a
// mention would admit; everywhere else its answer cannot change admission.
func TestAdmitInThreadAsksOnlyWhereItDecides(t *testing.T) {
	a := Access{AllowFrom: []string{"u1"}, Groups: map[string]GroupRule{"g1": {RequireMention: true}, "g2": {}}}
	cases := []struct {
		name                 string
		chatType, chat       string
		sender               string
		mentioned, bound     bool
		asked, admit, asMent bool
	}{
		{"bound thread, no mention", ChatGroup, "g1", "u1", false, true, true, true, true},
		{"unbound thread, no mention", ChatGroup, "g1", "u1", false, false, true, false, false},
		{"mentioned", ChatGroup, "g1", "u1", true, true, false, true, true},
		{"group needs no mention", ChatGroup, "g2", "u1", false, true, false, true, false},
		{"sender not allowed", ChatGroup, "g1", "u2", false, true, false, false, false},
		{"group not listed", ChatGroup, "g9", "u1", false, true, false, false, false},
		{"dm", ChatDM, "d", "u2", false, true, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			admit, asMent := a.AdmitInThread(c.chatType, c.chat, c.sender, c.mentioned, func() bool { asked = true; return c.bound })
			if asked != c.asked || admit != c.admit || asMent != c.asMent {
				t.Errorf("asked %v, admit %v, mentioned %v; want %v, %v, %v", asked, admit, asMent, c.asked, c.admit, c.asMent)
			}
		})
	}
	if admit, _ := a.AdmitInThread(ChatGroup, "g1", "u1", false, nil); admit {
		t.Error("no lookup (not a thread) admitted an un-mentioned message")
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct{ mime, want string }{
		{"image/png", KindImage},
		{"audio/ogg", KindAudio},
		{"video/mp4", KindVideo},
		{"application/pdf", KindFile},
		{"", KindFile},
		{"IMAGE/PNG", KindFile}, // no case folding: a caller that wants it folds first
	} {
		t.Run(tc.mime, func(t *testing.T) {
			if got := KindOf(tc.mime); got != tc.want {
				t.Errorf("KindOf(%q) = %q, want %q", tc.mime, got, tc.want)
			}
		})
	}
}

func TestThreadNameAndRefused(t *testing.T) {
	for in, want := range map[string]string{
		"  research \n the   docs ": "research the docs",
		"":                          "Sub-agent",
		" \t ":                      "Sub-agent",
		strings.Repeat("é", 21):     strings.Repeat("é", 19) + "…",
	} {
		if got := ThreadName(in, 20); got != want {
			t.Errorf("ThreadName(%q, 20) = %q, want %q", in, got, want)
		}
	}
	perm := ThreadRefused("x: open a topic in 1", fmt.Errorf("not a forum: %w", ErrPermanent))
	if !errors.Is(perm, ErrNoThreads) || !errors.Is(perm, ErrPermanent) || !strings.HasPrefix(perm.Error(), "x: open a topic in 1: not a forum") {
		t.Errorf("permanent refusal = %v, want ErrNoThreads and ErrPermanent wrapped", perm)
	}
	if tmp := ThreadRefused("x", ErrUnavailable); errors.Is(tmp, ErrNoThreads) || !errors.Is(tmp, ErrUnavailable) {
		t.Errorf("temporary failure = %v, want it wrapped without ErrNoThreads", tmp)
	}
}
