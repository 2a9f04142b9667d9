package gateway

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/spend"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent"
)

// spentView is the panel's spend line of a conversation: nil until it has
// spent this month.
func (g *Gateway) spentView(key string) *web.SpendView {
	if g.spend == nil {
		return nil
	}
	if sp := g.spend.SpentOf(key, ""); sp.ConversationMonth > 0 {
		return &web.SpendView{Today: spend.Money(sp.ConversationDay), Month: spend.Money(sp.ConversationMonth)}
	}
	return nil
}

// panelRuns is how many runs the web chat's sub-agents panel shows.
const panelRuns = 20

// panelEvery is the least time between two refreshes of the panels: the
// changes of a burst of runs (each starts, announces and ends) meanwhile
// fold into one read per conversation.
const panelEvery = time.Second

// panel feeds the web chat's sub-agents panel: run changes mark their web
// conversation, and one goroutine (owned by the gateway) reads each marked
// conversation's runs and hands them to the web channel. Marks coalesce,
// so a burst of spawns costs one read.
type panel struct {
	panelDeps
	mu    sync.Mutex
	dirty map[string]bool // web session keys to refresh; guarded by mu
	shown map[string]bool // web session keys whose panel was shown; guarded by mu
	wake  chan struct{}
}

// panelDeps are the few things the panel uses; the Gateway wires them
// (New).
type panelDeps struct {
	// web is the web chat's adapter (nil: the web chat is off).
	web func() *web.Adapter
	// runs are a conversation's latest sub-agent runs, newest first;
	// schedules its schedules; spent its spend line (nil: none).
	runs      func(ctx context.Context, key string, limit int) ([]store.Run, error)
	schedules func(ctx context.Context, key string) []web.ScheduleView
	spent     func(key string) *web.SpendView
	log       *zap.Logger
}

func newPanel(deps panelDeps) *panel {
	return &panel{panelDeps: deps, dirty: make(map[string]bool), shown: make(map[string]bool), wake: make(chan struct{}, 1)}
}

// changed is subagent.Deps.OnChange: it never blocks.
func (p *panel) changed(rootKey string) {
	if p.web() == nil || !strings.Contains(rootKey, ":web:dm:") {
		return
	}
	p.mu.Lock()
	p.dirty[rootKey] = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// spentChanged is changed after a model call of the conversation's own
// turn: only its spend line can have moved (its runs report their own
// changes), so a conversation that shows no panel and has spent nothing
// is not read again.
func (p *panel) spentChanged(rootKey string) {
	if p.web() == nil || !strings.Contains(rootKey, ":web:dm:") {
		return
	}
	p.mu.Lock()
	shown := p.shown[rootKey]
	p.mu.Unlock()
	if !shown && p.spent(rootKey) == nil {
		return
	}
	p.changed(rootKey)
}

// run refreshes marked conversations, at most once per panelEvery, until
// ctx ends.
func (p *panel) run(ctx context.Context) {
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		keys := p.dirty
		p.dirty = make(map[string]bool)
		p.mu.Unlock()
		for key := range keys {
			p.refresh(ctx, key)
		}
		pause.Reset(panelEvery)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

func (p *panel) refresh(ctx context.Context, key string) {
	_, client, ok := strings.Cut(key, ":web:dm:")
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	runs, err := p.runs(rctx, key, panelRuns)
	if err != nil {
		p.log.Debug("sub-agents panel not refreshed", zap.String("sessionKey", key), zap.Error(err))
		return
	}
	scheds := p.schedules(rctx, key)
	sv := p.spent(key)
	p.mu.Lock()
	shown := p.shown[key]
	if len(runs) > 0 || len(scheds) > 0 || sv != nil {
		p.shown[key] = true
	}
	p.mu.Unlock()
	if len(runs) == 0 && len(scheds) == 0 && sv == nil && !shown {
		return // no panel until the conversation spawns, schedules or spends
	}
	views := make([]web.RunView, 0, len(runs))
	for i := range runs {
		r := &runs[i]
		status := subagent.DisplayStatus(r)
		if r.Status == store.StatusAnnouncing {
			status = store.StatusRunning
		}
		v := web.RunView{RunID: r.ID, Label: subagent.TaskTitle(r.Label, r.Task), Status: status,
			CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt, Tokens: r.TokensIn + r.TokensOut, Resumes: r.Resumes}
		if r.Batch != "" {
			v.Batch = r.Batch[:min(8, len(r.Batch))]
		}
		if r.Status == store.StatusRunning {
			v.Activity = r.Note
		}
		views = append(views, v)
	}
	waiting := ""
	if n := subagent.WaitingFor(runs, key); n > 0 {
		waiting = "This conversation: " + subagent.Waiting(n)
	}
	p.web().SetPanel(client, views, scheds, sv, waiting)
}
