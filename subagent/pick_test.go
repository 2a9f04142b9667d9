package subagent

import (
	"errors"
	"testing"

	"github.com/heraldhq/herald/store"
)

// One runId in 43 starts with eight decimal digits; its prefix must still
// find it (TestSteerRunningAndOneMoreTurn failed that way, issue 10.16).
func TestPickDigitOnlyRunIDPrefix(t *testing.T) {
	runs := []store.Run{
		{ID: "a1b2c3d4-0000-4000-8000-000000000001", ChildKey: "agent:main:subagent:x1", Label: "fetch"},
		{ID: "12345678-0000-4000-8000-000000000002", ChildKey: "agent:main:subagent:x2"},
	}
	cases := []struct {
		target string
		want   string // run ID; "" = ErrNoMatch
	}{
		{"12345678", runs[1].ID}, // digits only, past the list: a runId prefix
		{"1234", runs[1].ID},
		{"1", runs[0].ID}, // within the list: the list number
		{"#2", runs[1].ID},
		{"2", runs[1].ID},
		{"#12345678", ""}, // "#" is always a list number
		{"3", ""},         // a list number past the list, not the prefix of a run
		{"123", ""},       // short digit strings are list numbers
		{"a1b2", runs[0].ID},
		{"fetch", runs[0].ID},
		{"last", runs[0].ID},
	}
	for _, c := range cases {
		got, err := pick(runs, c.target)
		switch {
		case c.want == "" && !errors.Is(err, ErrNoMatch):
			t.Errorf("pick(%q) = %v, %v; want ErrNoMatch", c.target, got, err)
		case c.want != "" && (err != nil || got.ID != c.want):
			t.Errorf("pick(%q) = %v, %v; want run %s", c.target, got, err, c.want)
		}
	}
}
