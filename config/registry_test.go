package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/heraldhq/herald/channels/all" // the channel modules register their sections
	"github.com/heraldhq/herald/config"
)

// testChan is a throwaway channel section registered by a test: the
// config loader knows it only through the registry.
type testChan struct {
	config.ChannelCommon
	Token config.Secret `json:"token"`
	Depth int           `json:"depth"`
}

func (c *testChan) Common() *config.ChannelCommon { return &c.ChannelCommon }
func (c *testChan) Defaults() {
	if c.Depth == 0 {
		c.Depth = 3
	}
}
func (c *testChan) Validate(s *config.Section) {
	if c.Depth > 9 {
		s.Add("depth", "must be at most 9 (got %d)", c.Depth)
	}
	if c.Enabled && c.Token == "" {
		s.Missing("token", "the enabled testchan channel needs a token")
	}
}

func openConfig(t *testing.T, src string, env map[string]string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.json5")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Open(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	return cfg, err
}

// TestRegisteredChannelSection: a section registered at run time is decoded
// strictly, gets ${VAR} substitution, its defaults and its validation, and
// its problems carry their key paths and positions, like any built-in key.
func TestRegisteredChannelSection(t *testing.T) {
	config.RegisterChannel("testchan", func() config.ChannelOptions { return &testChan{} })
	t.Cleanup(func() { config.UnregisterChannel("testchan") })

	cfg, err := openConfig(t, `{ channels: { testchan: { enabled: true, token: "${TC_TOKEN}" } } }`, map[string]string{"TC_TOKEN": "t-123"})
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Channels.Options("testchan").(*testChan)
	if o.Token.Value() != "t-123" || o.Depth != 3 || o.GroupPolicy != "allowlist" || !cfg.ChannelEnabled("testchan") || cfg.ChannelStreaming("testchan") != "edit" {
		t.Errorf("section = %+v (token %q), enabled %v", *o, o.Token.Value(), cfg.ChannelEnabled("testchan"))
	}

	// Off: its missing variables are not reported (as for every channel).
	if _, err := openConfig(t, `{ channels: { testchan: { token: "${NOPE}" } } }`, nil); err != nil {
		t.Errorf("disabled channel with a missing variable: %v", err)
	}

	_, err = openConfig(t, `{
  channels: {
    testchan: {
      enabled: true,
      tokn: "x",
      depth: 12,
      streaming: "fast",
      groupPolicy: "some",
    },
    irc: {},
  },
}`, nil)
	var probs *config.Problems
	if !errors.As(err, &probs) {
		t.Fatalf("want problems, got %v", err)
	}
	want := map[string]string{
		"channels.testchan.tokn": `5:7: channels.testchan.tokn: unknown key "tokn" (did you mean "token"?)`,
		"channels.irc":           `unknown channel "irc"`,
	}
	got := map[string]string{}
	for _, p := range probs.List {
		got[p.Path] = fmt.Sprintf("%d:%d: %s: %s", p.Line, p.Col, p.Path, p.Msg)
	}
	for path, w := range want {
		if !strings.Contains(got[path], w) {
			t.Errorf("%s: got %q, want %q\nall:\n%v", path, got[path], w, err)
		}
	}

	// Without the unknown keys, the module's and the common validation.
	_, err = openConfig(t, `{ channels: { testchan: { enabled: true, depth: 12, streaming: "fast", groupPolicy: "some" } } }`, nil)
	for _, w := range []string{
		"channels.testchan.depth: must be at most 9 (got 12)",
		"channels.testchan.token: missing: the enabled testchan channel needs a token",
		`channels.testchan.streaming: "fast" is not one of "edit" or "off"`,
		`channels.testchan.groupPolicy: "some" is not one of`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in\n%v", w, err)
		}
	}
}

// TestChannelNamesFromRegistry: bindings, schedules and approvers accept
// the registered channels and only them — a channel registered at run time
// included, without naming any channel here (a new channel module edits no
// test outside its package).
func TestChannelNamesFromRegistry(t *testing.T) {
	config.RegisterChannel("testchan", func() config.ChannelOptions { return &testChan{} })
	t.Cleanup(func() { config.UnregisterChannel("testchan") })
	names := config.ChannelNames()
	if !slices.Contains(names, "testchan") || names[len(names)-1] != "web" || len(names) < 4 {
		t.Fatalf("ChannelNames = %v, want the registered ones (testchan among them), then web", names)
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	oneOf := strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]

	if _, err := openConfig(t, `{ bindings: [{ agentId: "main", match: { channel: "testchan" } }] }`, nil); err != nil {
		t.Errorf("a binding to a registered channel: %v", err)
	}
	_, err := openConfig(t, `{ bindings: [{ agentId: "main", match: { channel: "irc" } }], security: { approvers: { web: ["x"], testchan: ["y"] } } }`, nil)
	for _, w := range []string{
		`bindings[0].match.channel: "irc" is not one of ` + oneOf,
		`security.approvers.web: unknown channel "web" (approvers can be listed for `,
		// testchan's options have no CheckApprover: it takes no approvers.
		`security.approvers.testchan: unknown channel "testchan"`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in\n%v", w, err)
		}
	}
}
