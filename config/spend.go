package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/titanous/json5"
)

// ModelSetting is a model setting (SPEC §20): a "provider/model" reference,
// or {primary, fallbacks} — the model to use and the ones to try, in order,
// when it fails with a retryable error. In the file it is either a string
// or an object; both decode into this type.
type ModelSetting struct {
	Primary   string   `json:"primary"`
	Fallbacks []string `json:"fallbacks"`
}

// Ref makes a setting of one reference.
func Ref(ref string) ModelSetting { return ModelSetting{Primary: ref} }

// IsZero reports whether no model is set.
func (m ModelSetting) IsZero() bool { return m.Primary == "" && len(m.Fallbacks) == 0 }

// String is the primary reference.
func (m ModelSetting) String() string { return m.Primary }

// Refs lists the primary then the fallbacks, each once.
func (m ModelSetting) Refs() []string {
	var out []string
	for _, r := range append([]string{m.Primary}, m.Fallbacks...) {
		r = strings.TrimSpace(r)
		if r != "" && !contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// UnmarshalJSON accepts "provider/model" or {"primary": …, "fallbacks": […]}.
func (m *ModelSetting) UnmarshalJSON(b []byte) error {
	// The JSON5 decoder hands over the value's JSON5 text (unquoted keys,
	// single quotes): decode it with JSON5 too.
	b = bytes.TrimSpace(b)
	if len(b) > 0 && (b[0] == '"' || b[0] == '\'') {
		var s string
		if err := json5.Unmarshal(b, &s); err != nil {
			return err
		}
		*m = ModelSetting{Primary: s}
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		*m = ModelSetting{}
		return nil
	}
	type plain ModelSetting
	var p plain
	dec := json5.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("a model is \"provider/model\" or {primary, fallbacks}: %w", err)
	}
	*m = ModelSetting(p)
	return nil
}

// MarshalJSON writes a plain reference when there are no fallbacks.
func (m ModelSetting) MarshalJSON() ([]byte, error) {
	if len(m.Fallbacks) == 0 {
		return json.Marshal(m.Primary)
	}
	type plain ModelSetting
	return json.Marshal(plain(m))
}

var modelSettingType = reflect.TypeOf(ModelSetting{})

// Budgets caps model spend (SPEC §20): each limit is in USD, 0 = none.
// Periods are UTC days and calendar months (UTC).
type Budgets struct {
	// Conversation: one requester conversation with every run it spawned
	// and its schedules.
	Conversation BudgetLimit `json:"conversation"`
	// Agent: everything one agent spent (each agent alike).
	Agent BudgetLimit `json:"agent"`
	// Total: everything this Herald spent.
	Total BudgetLimit `json:"total"`
	// WarnAtPercent: the conversation is told once per period when a budget
	// it counts against passes this share of its limit; default 80, 0 = never.
	WarnAtPercent *float64 `json:"warnAtPercent"`
}

// BudgetLimit is one budget's daily and monthly ceiling in USD (0 = none).
type BudgetLimit struct {
	DailyUSD   float64 `json:"dailyUSD"`
	MonthlyUSD float64 `json:"monthlyUSD"`
}

// Set reports whether either limit is set.
func (l BudgetLimit) Set() bool { return l.DailyUSD > 0 || l.MonthlyUSD > 0 }

// Any reports whether any budget is set.
func (b Budgets) Any() bool { return b.Conversation.Set() || b.Agent.Set() || b.Total.Set() }

// DefaultWarnAtPercent is budgets.warnAtPercent when unset.
const DefaultWarnAtPercent = 80

// Warn is budgets.warnAtPercent with its default (0 = no warning).
func (b Budgets) Warn() float64 {
	if b.WarnAtPercent == nil {
		return DefaultWarnAtPercent
	}
	return *b.WarnAtPercent
}

// Keys are the provider's API keys: apiKeys, else apiKey, else none.
func (p Provider) Keys() []Secret {
	if len(p.APIKeys) > 0 {
		return p.APIKeys
	}
	if p.APIKey != "" {
		return []Secret{p.APIKey}
	}
	return nil
}

// AgentModelSetting is the agent's model setting: its own, else
// agents.defaults.model.
func (c *Config) AgentModelSetting(agentID string) ModelSetting {
	if a, ok := c.Agent(agentID); ok && a.Model.Primary != "" {
		return a.Model
	}
	return c.Agents.Defaults.Model
}

// ChatModels are the models /model may set for a conversation of agentID
// (SPEC §8, issue 35): agents.list[].models, else the agent's chain
// (primary and fallbacks); a model without cost only with
// agents.list[].allowUnpriced. The second list is the allowed models left
// out for having no cost.
func (c *Config) ChatModels(agentID string) (allowed, unpriced []string) {
	refs, allowUnpriced := []string(nil), false
	if a, ok := c.Agent(agentID); ok {
		refs, allowUnpriced = a.Models, a.AllowUnpriced
	}
	if refs == nil {
		s := c.AgentModelSetting(agentID)
		refs = append([]string{s.Primary}, s.Fallbacks...)
	}
	for _, ref := range refs {
		_, _, m, ok := c.LookupModel(ref)
		switch {
		case !ok || slices.Contains(allowed, ref) || slices.Contains(unpriced, ref):
		case m.Cost == nil && !allowUnpriced:
			unpriced = append(unpriced, ref)
		default:
			allowed = append(allowed, ref)
		}
	}
	return allowed, unpriced
}

// ModelChain is the chain a call that chose ref uses: the configured model
// setting of agentID whose primary is ref (its sub-agent setting, the
// defaults' sub-agent setting, its own model, the default model — the
// first that matches), with its fallbacks; else ref alone. So a sub-agent
// or a conversation that runs the configured primary falls back as
// configured, and a model picked by hand (/model, sessions_spawn's model)
// is one reference.
func (c *Config) ModelChain(agentID, ref string) ModelSetting {
	cands := []ModelSetting{}
	if a, ok := c.Agent(agentID); ok {
		cands = append(cands, a.Subagents.Model, a.Model)
	}
	cands = append(cands, c.Agents.Defaults.Subagents.Model, c.Agents.Defaults.Model)
	for _, s := range cands {
		if s.Primary == ref && ref != "" {
			return s
		}
	}
	return ModelSetting{Primary: ref}
}

func (v *validator) budgets() {
	b := v.c.Budgets
	for _, l := range []struct {
		k string
		l BudgetLimit
	}{{"conversation", b.Conversation}, {"agent", b.Agent}, {"total", b.Total}} {
		for _, f := range []struct {
			k string
			x float64
		}{{"dailyUSD", l.l.DailyUSD}, {"monthlyUSD", l.l.MonthlyUSD}} {
			if f.x < 0 {
				v.add("budgets."+l.k+"."+f.k, "must not be negative (got %g); leave it out for no limit", f.x)
			}
		}
	}
	if w := b.WarnAtPercent; w != nil && (*w < 0 || *w > 100) {
		v.add("budgets.warnAtPercent", "must be from 0 to 100 (got %g)", *w)
	}
}

// modelSetting checks a model setting: its primary and every fallback.
func (v *validator) modelSetting(path string, m ModelSetting) {
	if len(m.Fallbacks) == 0 {
		v.modelRef(path, m.Primary)
		return
	}
	if m.Primary == "" {
		v.add(path+".primary", "missing: fallbacks need a primary model")
	}
	v.modelRef(path+".primary", m.Primary)
	for i, f := range m.Fallbacks {
		p := joinIndex(path+".fallbacks", i)
		if f == "" {
			v.add(p, "empty model reference")
			continue
		}
		v.modelRef(p, f)
	}
}
