package subagent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
	"github.com/heraldhq/herald/subagent/subagenttest"
)

// fakeThreads is a chat platform that opens threads and, like Slack with
// the key on the starter's metadata, finds a thread opened for a key
// before when asked to retry.
type fakeThreads struct {
	mu     sync.Mutex
	byKey  map[string]channels.Thread
	opened int
}

func (f *fakeThreads) start(_ context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if th, ok := f.byKey[t.Key]; ok && t.Retry {
		return th, nil
	}
	f.opened++
	o := in
	o.ThreadID, o.MessageID, o.SenderID, o.SenderName = fmt.Sprintf("T%d", f.opened), "", "", ""
	th := channels.Thread{Origin: o, Link: "https://chat/" + o.ThreadID}
	f.byKey[t.Key] = th
	return th, nil
}

// TestThreadSurvivesAStop: a spawn with thread: true stopped (as a crash
// would) after its run was recorded, after the platform opened the
// thread, or after the thread was recorded, is taken up by the next
// gateway on the same state: the run works and is announced in exactly
// one thread, bound to its child, with exactly one link line in the
// requester's thread.
func TestThreadSurvivesAStop(t *testing.T) {
	for _, step := range []string{"recorded", "opened", "bound"} {
		t.Run(step, func(t *testing.T) {
			llm := llmtest.NewAnthropic(t, standard)
			p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "", ""), nil)
			platform := &fakeThreads{byKey: map[string]channels.Thread{}}
			newManager := func() *Manager {
				m := New(Deps{Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
					StartThread: platform.start, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
				if err := m.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				subagenttest.StopAtCleanup(t, m)
				return m
			}
			testHookThread = func(s string) error {
				if s == step {
					return errStopped
				}
				return nil
			}
			m1 := newManager()
			cc := caller("1700.1")
			cc.Origin.SenderID, cc.Origin.SenderName = "U1", "Ann"
			res := m1.Spawn(context.Background(), cc, SpawnParams{Task: "alpha: read it", Label: "alpha", Thread: true})
			testHookThread = nil
			if res.Status != "error" || !strings.Contains(res.Error, "stopped") {
				t.Fatalf("spawn stopped at %s = %+v", step, res)
			}
			m1.Shutdown(context.Background())

			newManager()
			runs, err := p.Store.ListRuns(context.Background(), store.RunFilter{RequesterKey: cc.SessionKey})
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs = %+v, %v", runs, err)
			}
			run := subagenttest.WaitDone(t, p.Store, runs[0].ID)
			items := subagenttest.WaitAnnounces(t, p.Store, 2)
			platform.mu.Lock()
			opened := platform.opened
			platform.mu.Unlock()
			if opened != 1 || run.Origin.ThreadID != "T1" {
				t.Errorf("%d threads opened, the run's origin %+v; want one, T1", opened, run.Origin)
			}
			var links, announces int
			for _, it := range items {
				switch {
				case it.Kind == channels.KindSystem && it.Text == "🧵 alpha works in its own thread: https://chat/T1" && it.Origin.ThreadID == "1700.1":
					links++
				case it.Kind == channels.KindAnnounce && it.Origin.ThreadID == "T1":
					announces++
				}
			}
			if links != 1 || announces != 1 {
				t.Errorf("outbox %+v: want one link line in 1700.1 and the announce in T1", items)
			}
			b, err := p.Store.ThreadBinding(context.Background(), run.Origin, run.CreatedAt)
			if err != nil || b.ChildKey != run.ChildKey || b.RunID != run.ID {
				t.Errorf("binding of T1 = %+v, %v; want the child", b, err)
			}
			if s, err := p.Store.GetSession(context.Background(), run.ChildKey); err != nil || s.Origin.ThreadID != "T1" {
				t.Errorf("child session origin = %+v, %v", s, err)
			}
		})
	}
}

// fakeProgress is a live view that keeps what it was shown; Stop returns
// the draft it went on with, or "D1" once it was shown text.
type fakeProgress struct {
	mu    sync.Mutex
	from  string
	texts []string
}

func (p *fakeProgress) Text(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.texts = append(p.texts, text)
}

func (p *fakeProgress) Stop() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.from == "" && len(p.texts) > 0 {
		return "D1"
	}
	return p.from
}

// TestThreadLiveDraftIsTheAnnounce: a run with a thread of its own is
// shown live from the draft its thread record holds (an earlier stretch's,
// before a stop) and its announce replaces that draft; a run without one
// is shown nothing live.
func TestThreadLiveDraftIsTheAnnounce(t *testing.T) {
	llm := llmtest.NewAnthropic(t, standard)
	p := subagenttest.New(t, fmt.Sprintf(baseConfig, llm.URL, "", ""), nil)
	platform := &fakeThreads{byKey: map[string]channels.Thread{}}
	var mu sync.Mutex
	views := map[string]*fakeProgress{}
	newManager := func() *Manager {
		m := New(Deps{Config: p.Config, Store: p.Store, Catalog: p.Catalog, Tools: p.Tools, Workspace: p.WorkspaceOf,
			StartThread: platform.start, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
			Live: func(run *store.Run, draftRef string) Progress {
				mu.Lock()
				defer mu.Unlock()
				v := &fakeProgress{from: draftRef}
				views[run.ID] = v
				return v
			}})
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		subagenttest.StopAtCleanup(t, m)
		return m
	}
	testHookThread = func(s string) error {
		if s == "bound" {
			return errStopped
		}
		return nil
	}
	m1 := newManager()
	res := m1.Spawn(context.Background(), caller("1700.1"), SpawnParams{Task: "alpha: read it", Label: "alpha", Thread: true})
	testHookThread = nil
	if res.Status != "error" {
		t.Fatalf("spawn = %+v, want it stopped after its thread was recorded", res)
	}
	m1.Shutdown(context.Background())
	runs, err := p.Store.ListRuns(context.Background(), store.RunFilter{RequesterKey: caller("1700.1").SessionKey})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	// What the gateway records while it shows the run live (liveReply).
	if err := p.Store.SetRunDraft(context.Background(), runs[0].ID, "D0"); err != nil {
		t.Fatal(err)
	}
	m2 := newManager()
	subagenttest.WaitDone(t, p.Store, runs[0].ID)
	plain := m2.Spawn(context.Background(), caller("1700.2"), SpawnParams{Task: "beta: read it", Label: "beta"})
	subagenttest.WaitDone(t, p.Store, plain.RunID)
	items := subagenttest.WaitAnnounces(t, p.Store, 3) // the link line, two announces
	mu.Lock()
	defer mu.Unlock()
	if v := views[runs[0].ID]; v == nil || v.from != "D0" {
		t.Errorf("live view of alpha = %+v, want it going on with the draft D0", v)
	}
	if v := views[plain.RunID]; v != nil {
		t.Errorf("beta has no thread of its own but was shown live: %+v", v)
	}
	for _, it := range items {
		if it.Kind != channels.KindAnnounce {
			continue
		}
		want := ""
		if it.RunID == runs[0].ID {
			want = "D0"
		}
		if it.DraftRef != want {
			t.Errorf("announce of run %s replaces draft %q, want %q", it.RunID, it.DraftRef, want)
		}
	}
}
