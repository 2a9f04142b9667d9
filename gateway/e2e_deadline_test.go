package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
)

const deadlineConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", timeoutSeconds: PROVIDER, models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", maxConcurrent: 4, turnTimeoutSeconds: TURN } },
}`

// hangOn answers "answer to <text>" except for texts starting with "hang",
// whose calls never answer (until the request is cancelled).
func hangOn(c llmtest.Call) llmtest.Reply {
	if strings.HasPrefix(c.LastUser(), "hang") {
		return llmtest.Reply{Text: "never", Delay: time.Hour}
	}
	return llmtest.Reply{Text: "answer to " + c.LastUser()}
}

// TestE2EHungProviderDoesNotStarveOthers: four conversations whose model
// calls never answer fill the main lane; each call ends at the provider's
// timeoutSeconds with a line saying so, and a fifth conversation is then
// answered instead of waiting for a /stop.
func TestE2EHungProviderDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	cfg := strings.NewReplacer("PROVIDER", "1", "TURN", "600").Replace(deadlineConfig)
	tg := newTestGateway(t, cfg, hangOn)
	for _, c := range []string{"h1", "h2", "h3", "h4"} {
		webPost(t, tg.URL, c, "hang please")
	}
	seq := webPost(t, tg.URL, "h5", "are you there?")
	waitWeb(t, tg, "h5", seq, "assistant", func(s string) bool { return s == "answer to are you there?" })
	for _, c := range []string{"h1", "h2", "h3", "h4"} {
		got := waitText(t, tg, c, "did not answer within 1s")
		if !strings.Contains(got, "models.providers.anthropic.timeoutSeconds") {
			t.Errorf("%s was told %q; want the setting named", c, got)
		}
	}
}

// TestE2ETurnTimeout: a turn longer than agents.defaults.turnTimeoutSeconds
// is stopped and the person told so in one line.
func TestE2ETurnTimeout(t *testing.T) {
	cfg := strings.NewReplacer("PROVIDER", "300", "TURN", "1").Replace(deadlineConfig)
	tg := newTestGateway(t, cfg, hangOn)
	webPost(t, tg.URL, "t1", "hang on")
	got := waitText(t, tg, "t1", "took longer than 1s")
	if !strings.Contains(got, "agents.defaults.turnTimeoutSeconds") {
		t.Errorf("told %q; want the setting named", got)
	}
}
