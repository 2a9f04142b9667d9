package command

import (
	"context"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/store"
)

// fakeSession keeps /model and /think in the real store and answers /new
// and /compact with fixed outcomes (the gateway's end-to-end tests check
// what they really do).
type fakeSession struct {
	db   *store.DB
	news *[]string
}

func (f fakeSession) NewSession(_ context.Context, key string) error {
	*f.news = append(*f.news, key)
	return nil
}

func (f fakeSession) Compact(_ context.Context, key, focus string) (int, int, error) {
	if key == sessC {
		return 900, 900, agent.ErrNothingToCompact
	}
	if focus != "" {
		return 12345, 3456, nil
	}
	return 12345, 2345, nil
}

func (f fakeSession) Settings(ctx context.Context, key string) (store.ConversationSettings, error) {
	return f.db.ConversationSettings(ctx, key)
}

func (f fakeSession) SetSettings(ctx context.Context, key string, s store.ConversationSettings) error {
	return f.db.SetConversationSettings(ctx, key, s)
}

// TestSessionCommandGoldens: the replies of /new, /reset, /compact, /model
// and /think, in order (settings persist between the steps).
func TestSessionCommandGoldens(t *testing.T) {
	h := newHarness(t, "", slowOrEcho)
	var news []string
	env := h.env()
	env.Session = fakeSession{db: h.db, news: &news}
	steps := []struct{ golden, session, text string }{
		{"new", sessA, "/new"},
		{"new", sessA, "/reset please"},
		{"compact", sessA, "/compact"},
		{"compact_focus", sessA, "/compact the deploy plan"},
		{"compact_nothing", sessC, "/compact"},
		{"model_show", sessA, "/model"},
		{"model_unknown", sessA, "/model openai/gpt-nope"},
		{"usage_model", sessA, "/model a b"},
		{"model_set", sessA, "/model anthropic/claude-test"},
		{"model_show_set", sessA, "/model"},
		{"status_model_set", sessA, "/status"},
		{"model_default", sessA, "/model DEFAULT"},
		{"think_show", sessA, "/think"},
		{"think_unknown", sessA, "/think extreme"},
		{"usage_think", sessA, "/think very high"},
		{"think_set", sessA, "/THINK High"},
		{"think_show_set", sessA, "/thinking"},
		{"think_default", sessA, "/think default"},
	}
	for _, s := range steps {
		golden(t, s.golden, h.doEnv(env, s.session, s.text))
	}
	if len(news) != 2 || news[0] != sessA {
		t.Errorf("NewSession calls = %q, want two for %s", news, sessA)
	}
	// The settings are the conversation's own: B's are untouched.
	if set, _ := h.db.ConversationSettings(context.Background(), sessB); set != (store.ConversationSettings{}) {
		t.Errorf("B's settings = %+v", set)
	}
	// Without a gateway to act on, the commands say so.
	if got := h.do(sessA, "/new"); got != replySessionUnavailable {
		t.Errorf("/new without Session = %q", got)
	}
}
