package spend

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// Amount is spend and tokens over some period.
type Amount struct {
	USD       float64 `json:"usd"`
	TokensIn  int64   `json:"tokensIn"`
	TokensOut int64   `json:"tokensOut"`
	Calls     int64   `json:"calls"`
}

func (a *Amount) add(t store.SpendTotal) {
	a.USD += t.USD
	a.TokensIn += t.TokensIn
	a.TokensOut += t.TokensOut
	a.Calls += t.Calls
}

// Line is one agent's, conversation's or model's spend today and this month.
type Line struct {
	ID    string `json:"id"`
	Today Amount `json:"today"`
	Month Amount `json:"month"`
}

// Run is one of the costliest runs of the month.
type Run struct {
	RunID        string    `json:"runId"`
	Conversation string    `json:"conversation"`
	AgentID      string    `json:"agentId"`
	Label        string    `json:"label"`
	USD          float64   `json:"usd"`
	Tokens       int64     `json:"tokens"`
	Started      time.Time `json:"started"`
}

// Usage is a spend report (herald usage, /usage).
type Usage struct {
	Day           string `json:"day"`   // YYYY-MM-DD, UTC
	Month         string `json:"month"` // YYYY-MM
	Today         Amount `json:"today"`
	ThisMonth     Amount `json:"thisMonth"`
	Agents        []Line `json:"agents"`
	Conversations []Line `json:"conversations"`
	Models        []Line `json:"models"`
	TopRuns       []Run  `json:"topRuns"`
}

// TopRuns is how many runs a report lists.
const TopRuns = 5

// Report sums this month's spend from the store; conversation, if set,
// limits it to one conversation (its runs included).
func Report(ctx context.Context, st store.Spend, now time.Time, conversation string) (*Usage, error) {
	day, month := periods(now)
	totals, err := st.SpendTotals(ctx, month+"-01")
	if err != nil {
		return nil, err
	}
	u := &Usage{Day: day, Month: month, Agents: []Line{}, Conversations: []Line{}, Models: []Line{}, TopRuns: []Run{}}
	agents, convs, models := map[string]*Line{}, map[string]*Line{}, map[string]*Line{}
	line := func(m map[string]*Line, id string) *Line {
		if m[id] == nil {
			m[id] = &Line{ID: id}
		}
		return m[id]
	}
	for _, t := range totals {
		if conversation != "" && t.Conversation != conversation {
			continue
		}
		if t.Day[:7] != month {
			continue
		}
		u.ThisMonth.add(t)
		line(agents, t.AgentID).Month.add(t)
		line(convs, t.Conversation).Month.add(t)
		line(models, t.Model).Month.add(t)
		if t.Day == day {
			u.Today.add(t)
			line(agents, t.AgentID).Today.add(t)
			line(convs, t.Conversation).Today.add(t)
			line(models, t.Model).Today.add(t)
		}
	}
	for _, x := range []struct {
		m   map[string]*Line
		out *[]Line
	}{{agents, &u.Agents}, {convs, &u.Conversations}, {models, &u.Models}} {
		for _, l := range x.m {
			*x.out = append(*x.out, *l)
		}
		sort.Slice(*x.out, func(i, j int) bool {
			a, b := (*x.out)[i], (*x.out)[j]
			if a.Month.USD != b.Month.USD {
				return a.Month.USD > b.Month.USD
			}
			return a.ID < b.ID
		})
	}
	runs, err := st.TopSpendRuns(ctx, month+"-01", conversation, TopRuns)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		u.TopRuns = append(u.TopRuns, Run{RunID: r.RunID, Conversation: r.Conversation, AgentID: r.AgentID, Label: r.Label,
			USD: r.USD, Tokens: r.Tokens, Started: r.First})
	}
	return u, nil
}

// lineOf finds id's line.
func lineOf(ls []Line, id string) Line {
	for _, l := range ls {
		if l.ID == id {
			return l
		}
	}
	return Line{ID: id}
}

// ChatReply renders /usage for one conversation: its spend and its
// agent's, today and this month, the budgets that apply, and the
// conversation's costliest runs. conv is the conversation's own report,
// all the whole Herald's (for the agent's line).
func ChatReply(conv, all *Usage, conversation, agentID string, b config.Budgets) string {
	var s strings.Builder
	s.WriteString("💸 Usage (UTC day " + conv.Day + ")\n")
	fmt.Fprintf(&s, "This conversation: today %s · this month %s\n", Money(conv.Today.USD), Money(conv.ThisMonth.USD))
	a := lineOf(all.Agents, agentID)
	fmt.Fprintf(&s, "Agent %s: today %s · this month %s", agentID, Money(a.Today.USD), Money(a.Month.USD))
	var budgets []string
	add := func(which string, lim config.BudgetLimit, day, month float64) {
		if lim.DailyUSD > 0 {
			budgets = append(budgets, fmt.Sprintf("%s %s of %s today", which, Money(day), Money(lim.DailyUSD)))
		}
		if lim.MonthlyUSD > 0 {
			budgets = append(budgets, fmt.Sprintf("%s %s of %s this month", which, Money(month), Money(lim.MonthlyUSD)))
		}
	}
	add("conversation", b.Conversation, conv.Today.USD, conv.ThisMonth.USD)
	add("agent "+agentID, b.Agent, a.Today.USD, a.Month.USD)
	add("total", b.Total, all.Today.USD, all.ThisMonth.USD)
	if len(budgets) > 0 {
		s.WriteString("\nBudgets: " + strings.Join(budgets, " · "))
	}
	if len(conv.TopRuns) == 0 {
		s.WriteString("\nCostliest runs: none this month.")
		return s.String()
	}
	s.WriteString("\nCostliest runs this month:")
	for i, r := range conv.TopRuns {
		fmt.Fprintf(&s, "\n%d) %s · %s · %s", i+1, Money(r.USD), runName(r), cut(r.Label, 60))
	}
	return s.String()
}

// runName is "turn" for a top-level turn, else "run <first 8 of the id>".
func runName(r Run) string {
	if strings.HasPrefix(r.RunID, "turn:") {
		return "turn"
	}
	id := r.RunID
	if len(id) > 8 {
		id = id[:8]
	}
	return "run " + id
}

// Text renders herald usage for an operator.
func (u *Usage) Text() string {
	var s strings.Builder
	fmt.Fprintf(&s, "Spend (UTC)     today %s (%d calls)   this month (%s) %s (%d calls)\n", Money(u.Today.USD), u.Today.Calls,
		u.Month, Money(u.ThisMonth.USD), u.ThisMonth.Calls)
	for _, x := range []struct {
		title string
		ls    []Line
	}{{"AGENT", u.Agents}, {"CONVERSATION", u.Conversations}, {"MODEL", u.Models}} {
		fmt.Fprintf(&s, "\n%-56s %12s %12s\n", x.title, "TODAY", "MONTH")
		if len(x.ls) == 0 {
			s.WriteString("(none)\n")
		}
		for _, l := range x.ls {
			fmt.Fprintf(&s, "%-56s %12s %12s\n", cut(l.ID, 56), Money(l.Today.USD), Money(l.Month.USD))
		}
	}
	s.WriteString("\nCOSTLIEST RUNS THIS MONTH\n")
	if len(u.TopRuns) == 0 {
		s.WriteString("(none)\n")
	}
	for i, r := range u.TopRuns {
		fmt.Fprintf(&s, "%d) %s · %s · %s · %s · %s\n", i+1, Money(r.USD), runName(r), r.AgentID, r.Conversation, cut(r.Label, 60))
	}
	return s.String()
}
