package gateway_test

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
)

var updateGolden = flag.Bool("update-spend", false, "rewrite gateway/testdata/usage*.golden")

// spendConfig: the Anthropic fake ({{llm}}) as the primary with the OpenAI
// fake ({{openai}}) as its fallback, both priced so one call costs $0.11
// (1000 tokens in, 100 out at $100 per 1M), and the given budgets.
func spendConfig(openaiURL, budgets, subModel string) string {
	return strings.ReplaceAll(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: {
    anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-20250514", cost: { input: 100, output: 100 } }] },
    openai: { api: "openai", baseUrl: "{{openai}}/v1", apiKey: "k", models: [{ id: "gpt-4o", cost: { input: 100, output: 100 } }] },
  } },
  agents: { defaults: { model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ["openai/gpt-4o"] }`+subModel+` },
    list: [{ id: "main" }] },
  budgets: `+budgets+`,
  channels: { web: { enabled: true } },
}`, "{{openai}}", openaiURL)
}

var priced = agent.Usage{Input: 1000, Output: 100} // $0.11 at the test's prices

// spawnerModel answers "research …" with one sessions_spawn, a sub-agent's
// work and announce step in form, and anything else with "answer to: …".
func spawnerModel(c llmtest.Call) llmtest.Reply {
	last := c.LastUser()
	switch {
	case strings.Contains(c.System, "Sub-agent context") && strings.Contains(last, "Announce step"):
		return llmtest.Reply{Text: "Result:\nfindings\n\nNotes:\n(none)", Usage: priced}
	case strings.Contains(c.System, "Sub-agent context"):
		return llmtest.Reply{Text: "worked", Usage: priced}
	case len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool:
		return llmtest.Reply{Text: "Started a researcher.", Usage: priced}
	case strings.Contains(last, "research"):
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"read the docs","label":"alpha"}`)}}, Usage: priced}
	}
	return llmtest.Reply{Text: "answer to: " + last, Usage: priced}
}

func overloaded(llmtest.Call) llmtest.Reply {
	return llmtest.Reply{Status: 529, Message: "Overloaded"}
}

const fallbackNote = "Answered by openai/gpt-4o: anthropic/claude-sonnet-4-20250514 failed (HTTP 529 overloaded)."

// TestE2EFallbackAnswers: the primary answers 529 after every retry; the
// conversation is answered by the fallback, and /status says which model
// answered and why, and that the primary cools down after failing again.
func TestE2EFallbackAnswers(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAI(t, spawnerModel)
	tg := newTestGateway(t, spendConfig(oa.URL, "{}", ""), overloaded)
	const client = "fallback"
	seq := webPost(t, tg.URL, client, "hello")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "answer to: hello" })
	if tg.LLM.Count() != providers5() || oa.Count() != 1 {
		t.Errorf("calls: primary %d (want %d: one and its retries), fallback %d", tg.LLM.Count(), providers5(), oa.Count())
	}
	seq = webPost(t, tg.URL, client, "/status")
	st := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "📊 Status") })
	if !strings.Contains(st.Text, "\n"+fallbackNote+"\n") {
		t.Errorf("/status does not say which model answered and why:\n%s", st.Text)
	}

	seq = webPost(t, tg.URL, client, "again")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "answer to: again" })
	seq = webPost(t, tg.URL, client, "/status")
	st = waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "📊 Status") })
	if !regexp.MustCompile(`\n🧊 anthropic/claude-sonnet-4-20250514 cools down until \d\d:\d\d UTC \(2 failed calls in a row, last: HTTP 529 overloaded\)`).MatchString(st.Text) {
		t.Errorf("/status does not show the primary cooling down:\n%s", st.Text)
	}
	before := tg.LLM.Count()
	seq = webPost(t, tg.URL, client, "third")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "answer to: third" })
	if tg.LLM.Count() != before {
		t.Errorf("the primary was called while cooling down (%d → %d calls)", before, tg.LLM.Count())
	}
	// /status says why the fallback answered though the primary was not asked.
	seq = webPost(t, tg.URL, client, "/status")
	st = waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "📊 Status") })
	if want := "\nAnswered by openai/gpt-4o: anthropic/claude-sonnet-4-20250514 cools down after failing (HTTP 529 overloaded).\n"; !strings.Contains(st.Text, want) {
		t.Errorf("/status while the primary cools down does not say why the fallback answered:\n%s", st.Text)
	}
}

func providers5() int { return 5 } // providers.DefaultMaxRetries + 1

// TestE2EFallbackNoteInAnnounce: a sub-agent whose model setting's primary
// is overloaded is answered by the fallback, and its announce's Notes say so.
func TestE2EFallbackNoteInAnnounce(t *testing.T) {
	oa := llmtest.NewOpenAI(t, spawnerModel)
	cfg := strings.Replace(spendConfig(oa.URL, "{}", `, subagents: { model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ["openai/gpt-4o"] } }`),
		`model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ["openai/gpt-4o"] }, subagents`, `model: "openai/gpt-4o", subagents`, 1)
	// The primary is priced 100 times lower: the Stats line must count the
	// calls at the fallback's price, the model that made them.
	cfg = strings.Replace(cfg, `cost: { input: 100, output: 100 }`, `cost: { input: 1, output: 1 }`, 1)
	tg := newTestGateway(t, cfg, overloaded)
	const client = "fallback-announce"
	seq := webPost(t, tg.URL, client, "research the docs")
	ann := waitWeb(t, tg, client, seq, "announce", func(string) bool { return true })
	if !strings.HasPrefix(ann.Text, "Status: success\nTask: alpha\n\nResult:\nfindings\n\nNotes:\n"+fallbackNote+"\n") {
		t.Errorf("announce does not note the fallback:\n%s", ann.Text)
	}
	if !strings.Contains(ann.Text, " • est $0.22 • ") {
		t.Errorf("announce stats do not count two calls at the fallback's $0.11:\n%s", ann.Text)
	}
}

// TestE2EBudgetStopsConversation: a conversation budget of $0.10 a day and
// calls of $0.11: the first call is made; every later one — the rest of
// the turn, the sub-agent it spawned, the next turns — is refused with the
// 💸 line and no model call (the fake counts them); the conversation is
// warned once.
func TestE2EBudgetStopsConversation(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAI(t, spawnerModel)
	tg := newTestGateway(t, spendConfig(oa.URL, `{ conversation: { dailyUSD: 0.10 } }`, ""), spawnerModel)
	const client = "budget"
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02")
	line := regexp.QuoteMeta("💸 Budget reached: conversation $0.11 of $0.10 today (resets " + tomorrow + " 00:00 UTC).")

	seq := webPost(t, tg.URL, client, "research the docs")
	reply := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸 Budget reached") })
	if !regexp.MustCompile("^" + line + "$").MatchString(reply.Text) {
		t.Errorf("turn reply %q, want %s", reply.Text, line)
	}
	ann := waitWeb(t, tg, client, seq, "announce", func(string) bool { return true })
	if !regexp.MustCompile(`^Status: error\nTask: alpha\n\nResult:\n\(not available\)\n\nNotes:\n` + line + `\n`).MatchString(ann.Text) {
		t.Errorf("sub-agent announce:\n%s", ann.Text)
	}
	seq = webPost(t, tg.URL, client, "hello")
	reply = waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸") })
	if !regexp.MustCompile("^" + line + "$").MatchString(reply.Text) {
		t.Errorf("next turn %q, want %s", reply.Text, line)
	}
	// /compact over the budget answers exactly the line.
	seq = webPost(t, tg.URL, client, "/compact")
	reply = waitWeb(t, tg, client, seq, "system", func(string) bool { return true })
	if !regexp.MustCompile("^" + line + "$").MatchString(reply.Text) {
		t.Errorf("/compact %q, want %s", reply.Text, line)
	}
	if n := tg.LLM.Count() + oa.Count(); n != 1 {
		t.Errorf("%d model calls, want 1: none past the budget", n)
	}
	var warnings int
	for _, m := range webMessages(t, tg.URL, client, 0) {
		if strings.HasPrefix(m.Text, "💸 Budget warning: conversation $0.11 of $0.10 today (110%).") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d budget warnings, want 1", warnings)
	}
	// Another conversation has its own budget.
	seq = webPost(t, tg.URL, "budget-other", "hello")
	waitWeb(t, tg, "budget-other", seq, "assistant", func(s string) bool { return s == "answer to: hello" })
}

// TestE2EBudgetSharedByGateways: the total budget is kept in the store: a
// second gateway on the same state (at the same time on PostgreSQL, after
// the first stopped on SQLite) refuses what the first one's spend used up.
func TestE2EBudgetSharedByGateways(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAI(t, spawnerModel)
	state := t.TempDir()
	cfg := spendConfig(oa.URL, `{ total: { dailyUSD: 0.10 } }`, "")
	first := func(t *testing.T) {
		a := newTestGatewayIn(t, state, cfg, spawnerModel, func(c *config.Config) { c.Gateway.ReplicaID = "gw-a" })
		seq := webPost(t, a.URL, "one", "hello")
		waitWeb(t, a, "one", seq, "assistant", func(s string) bool { return s == "answer to: hello" })
	}
	if pgtest.OnPostgres() {
		first(t) // keeps running while the second starts
	} else {
		t.Run("first", first) // stops at the end of the subtest
	}
	b := newTestGatewayIn(t, state, cfg, spawnerModel, func(c *config.Config) { c.Gateway.ReplicaID = "gw-b" })
	seq := webPost(t, b.URL, "two", "hello")
	reply := waitWeb(t, b, "two", seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸") })
	if !strings.HasPrefix(reply.Text, "💸 Budget reached: total $0.11 of $0.10 today (resets ") {
		t.Errorf("second gateway: %q", reply.Text)
	}
	if b.LLM.Count() != 0 {
		t.Errorf("second gateway made %d model calls past the shared budget", b.LLM.Count())
	}
}

// TestE2EUsageCommand: /usage after two turns and a sub-agent run matches
// testdata/usage.golden (the day and the run id normalised).
func TestE2EUsageCommand(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAI(t, spawnerModel)
	tg := newTestGateway(t, spendConfig(oa.URL, `{ conversation: { dailyUSD: 5 }, agent: { monthlyUSD: 100 } }`, ""), spawnerModel)
	const client = "usage"
	seq := webPost(t, tg.URL, client, "research the docs")
	waitWeb(t, tg, client, seq, "announce", func(string) bool { return true })
	seq = webPost(t, tg.URL, client, "hello")
	waitWeb(t, tg, client, seq, "assistant", func(s string) bool { return s == "answer to: hello" })
	seq = webPost(t, "http://"+tg.G.Addr(), "usage-other", "hello")
	waitWeb(t, tg, "usage-other", seq, "assistant", func(s string) bool { return s == "answer to: hello" })

	seq = webPost(t, tg.URL, client, "/usage")
	got := waitWeb(t, tg, client, seq, "system", func(s string) bool { return strings.HasPrefix(s, "💸 Usage") }).Text
	got = regexp.MustCompile(`\d{4}-\d\d-\d\d`).ReplaceAllString(got, "<day>")
	got = regexp.MustCompile(`run [0-9a-f]{8}`).ReplaceAllString(got, "run <id>")
	golden := filepath.Join("testdata", "usage.golden")
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./gateway -run TestE2EUsageCommand -update-spend)", err)
	}
	if got+"\n" != string(want) {
		t.Errorf("/usage differs from %s\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
	resp, err := http.Get(tg.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^herald_spend_usd_total\{agent="main",model="anthropic/claude-sonnet-4-20250514"\} 0\.6[56]\d*$`).Match(body) {
		t.Errorf("/metrics lacks the spend of six $0.11 calls:\n%s", regexp.MustCompile(`(?m)^herald_spend.*$`).FindAll(body, -1))
	}
}

// TestE2EFallbackAfterUnseenText: a sub-agent shown nowhere live (the web
// chat) whose primary's stream breaks after its first words is answered
// by the fallback: those words reached nobody, so nothing would be
// spliced. (dab78e1 streamed every child for /focus, and the first text
// then kept the call from its fallback: the run ended error.)
func TestE2EFallbackAfterUnseenText(t *testing.T) {
	oa := llmtest.NewOpenAI(t, spawnerModel)
	cfg := strings.Replace(spendConfig(oa.URL, "{}", `, subagents: { model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ["openai/gpt-4o"] } }`),
		`model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ["openai/gpt-4o"] }, subagents`, `model: "openai/gpt-4o", subagents`, 1)
	tg := newTestGateway(t, cfg, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.System, "Sub-agent context") && !strings.Contains(c.LastUser(), "Announce step") {
			return llmtest.Reply{Text: "the first words and then the connection breaks", CutAfter: 1}
		}
		return spawnerModel(c)
	})
	const client = "fallback-unseen"
	seq := webPost(t, tg.URL, client, "research the docs")
	ann := waitWeb(t, tg, client, seq, "announce", func(string) bool { return true })
	if !strings.HasPrefix(ann.Text, "Status: success\nTask: alpha\n") {
		t.Errorf("announce of a child whose primary broke after unseen text:\n%s", ann.Text)
	}
}

// TestE2EWebPanelShowsAPlainTurnsSpend: a conversation whose turn spawned
// nothing still gets the panel's spend line once its model call cost
// something (the panel is read after the conversation's own calls only
// when there is a spend line to show).
func TestE2EWebPanelShowsAPlainTurnsSpend(t *testing.T) {
	t.Parallel()
	oa := llmtest.NewOpenAI(t, spawnerModel)
	tg := newTestGateway(t, spendConfig(oa.URL, "{}", ""), spawnerModel)
	const client = "spender"
	events := openEvents(t, tg.URL, client)
	webPost(t, tg.URL, client, "hello")
	deadline := time.After(e2eWait)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("event stream ended before the panel showed the spend")
			}
			var panel struct {
				Spend *struct{ Today, Month string }
			}
			if ev.Name == "subagents" && json.Unmarshal([]byte(ev.Data), &panel) == nil && panel.Spend != nil {
				if panel.Spend.Today != "$0.11" {
					t.Errorf("spend line %+v, want $0.11 today", *panel.Spend)
				}
				return
			}
		case <-deadline:
			t.Fatal("the panel never showed the turn's spend")
		}
	}
}
