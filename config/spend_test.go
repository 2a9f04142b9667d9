package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestModelSettingsAndBudgetsLoad(t *testing.T) {
	src := `{
  models: { providers: {
    anthropic: { api: "anthropic", apiKeys: ["${KEY_A}", '${KEY_B}'], models: [{ id: "claude-sonnet-4-20250514", cost: { input: 3, output: 15 } }] },
    openai: { api: "openai", apiKey: "${KEY_C}", models: [{ id: "gpt-4o" }, { id: "gpt-4o-mini" }] },
  } },
  agents: {
    defaults: { model: { primary: "anthropic/claude-sonnet-4-20250514", fallbacks: ['openai/gpt-4o'] },
      subagents: { model: "openai/gpt-4o-mini" } },
    list: [{ id: "main" }, { id: "cheap", model: "openai/gpt-4o-mini" }],
  },
  budgets: { conversation: { dailyUSD: 5 }, agent: { dailyUSD: 50, monthlyUSD: 500 }, total: { monthlyUSD: 1000 } },
}`
	cfg, err := Parse("spend.json5", []byte(src), mapEnv(map[string]string{"KEY_A": "ka", "KEY_B": "kb", "KEY_C": "kc"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.AgentModelSetting("main"); !reflect.DeepEqual(got.Refs(), []string{"anthropic/claude-sonnet-4-20250514", "openai/gpt-4o"}) {
		t.Errorf("main's chain = %v", got.Refs())
	}
	if got := cfg.AgentModel("cheap"); got != "openai/gpt-4o-mini" {
		t.Errorf("cheap's model = %q", got)
	}
	if got := cfg.ModelChain("main", "anthropic/claude-sonnet-4-20250514"); len(got.Fallbacks) != 1 {
		t.Errorf("the configured primary has no fallbacks: %+v", got)
	}
	if got := cfg.ModelChain("main", "openai/gpt-4o-mini"); len(got.Fallbacks) != 0 || got.Primary != "openai/gpt-4o-mini" {
		t.Errorf("a model picked by hand: %+v", got)
	}
	keys := cfg.Models.Providers["anthropic"].Keys()
	if len(keys) != 2 || keys[0].Value() != "ka" || keys[1].Value() != "kb" {
		t.Errorf("keys = %v", keys)
	}
	if k := cfg.Models.Providers["openai"].Keys(); len(k) != 1 || k[0].Value() != "kc" {
		t.Errorf("apiKey as keys = %v", k)
	}
	b := cfg.Budgets
	if b.Conversation.DailyUSD != 5 || b.Agent.MonthlyUSD != 500 || b.Total.MonthlyUSD != 1000 || b.Warn() != 80 || !b.Any() {
		t.Errorf("budgets = %+v", b)
	}
	if s := strings.Join([]string{keys[0].String(), keys[1].String()}, ","); strings.Contains(s, "ka") {
		t.Errorf("a key printed: %s", s)
	}
}
