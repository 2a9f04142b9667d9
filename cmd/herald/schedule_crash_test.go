package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/store"
)

// schedCrashConfig: a config schedule firing every second into web client
// "sched", catchUp all: every due time must get exactly one run, also
// across SIGKILLs.
const schedCrashConfig = `{
  gateway: { http: { listen: "%s" }, shutdownGraceSeconds: 5 },
  models: { providers: { fake: { api: "anthropic", baseUrl: "%s", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "fake/m" } },
  channels: { web: { enabled: true } },
  schedules: { minIntervalSeconds: 1, list: [
    { id: "tick", every: "1s", catchUp: "all", task: "tick", deliver: { channel: "web", chat: "sched" } },
  ] },
}`

// TestCrashKill9Schedules kills a real gateway with SIGKILL six times, each
// time between 60 ms before and 400 ms after a due time of a 1 s schedule
// whose runs take 600 ms (so most kills cut a run), and starts it again
// on the same state: with catchUp "all", every due time from the first to
// the last has exactly one run (none fired twice, none skipped), and every
// run is announced exactly once (Status: unknown for one the kill cut).
func TestCrashKill9Schedules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and kills it six times")
	}
	bin := buildHerald(t)
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "ANNOUNCE_SKIP") {
			return llmtest.Reply{Text: "Result:\nticked\n\nNotes:\n(none)"}
		}
		return llmtest.Reply{Text: "ticked", Delay: 600 * time.Millisecond}
	})
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	addr := freeAddr(t)
	base := "http://" + addr
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(schedCrashConfig, addr, llm.URL)), 0o600); err != nil {
		t.Fatal(err)
	}

	runsOf := func() ([]store.Run, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db, err := store.Open(ctx, stateDir)
		if err != nil {
			return nil, err
		}
		defer db.Close()
		var out []store.Run
		runs, err := db.ListRuns(ctx, store.RunFilter{})
		for _, r := range runs {
			if r.ScheduleID == "tick" {
				out = append(out, r)
			}
		}
		return out, err
	}

	const lives = 6
	var phase time.Duration // due times are whole seconds after the first one
	for i := range lives {
		gw := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, fmt.Sprintf("gateway%d.log", i)))
		waitReady(t, gw, base)
		if i == 0 {
			waitFor(t, gw, "the first run", func() (bool, string) {
				runs, err := runsOf()
				if err != nil || len(runs) == 0 {
					return false, fmt.Sprint(err)
				}
				phase = runs[0].ScheduleDue.Sub(runs[0].ScheduleDue.Truncate(time.Second))
				return true, ""
			})
		}
		// Let it fire a few times, then kill it near a due time.
		next := time.Now().Truncate(time.Second).Add(time.Duration(2+rand.IntN(3))*time.Second + phase)
		time.Sleep(time.Until(next) + time.Duration(rand.IntN(460)-60)*time.Millisecond) // the kill moment of this life
		gw.kill(t)
		gw.dumpLog(t)
		if runs, err := runsOf(); err == nil {
			active := 0
			for _, r := range runs {
				if r.Status != store.StatusDone {
					active++
				}
			}
			t.Logf("life %d killed at %s: %d runs, %d not ended", i+1, time.Now().Format("15:04:05.000"), len(runs), active)
		}
	}

	// Last life: it catches up every due time that passed, one at a time.
	gw := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway-last.log"))
	defer gw.dumpLog(t)
	waitReady(t, gw, base)
	caughtUp := time.Now()
	var runs []store.Run
	waitFor(t, gw, "runs for every due time up to the last start, all ended", func() (bool, string) {
		var err error
		if runs, err = runsOf(); err != nil {
			return false, err.Error()
		}
		var last time.Time
		for _, r := range runs {
			if r.Status != store.StatusDone {
				return false, fmt.Sprintf("%d runs, %s %s", len(runs), r.ScheduleDue.Format(time.TimeOnly), r.Status)
			}
			if r.ScheduleDue.After(last) {
				last = r.ScheduleDue
			}
		}
		return last.After(caughtUp), fmt.Sprintf("%d runs, last due %s", len(runs), last.Format(time.TimeOnly))
	})

	seen := map[time.Time]int{}
	first, last := runs[0].ScheduleDue, runs[0].ScheduleDue
	outcomes := map[string]int{}
	for _, r := range runs {
		seen[r.ScheduleDue]++
		outcomes[r.Outcome]++
		if r.ScheduleDue.Before(first) {
			first = r.ScheduleDue
		}
		if r.ScheduleDue.After(last) {
			last = r.ScheduleDue
		}
	}
	// A due time that came while the previous run still ran is skipped and
	// counted on the schedule (SPEC §19, catchUp "all" included); every
	// other due time has exactly one run, and none has two.
	var skipped int64
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a loaded machine is slow; nothing is measured here
		defer cancel()
		db, err := store.Open(ctx, stateDir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		s, err := db.GetSchedule(ctx, "tick")
		if err != nil {
			t.Fatal(err)
		}
		skipped = s.Skipped
	}()
	var empty []string
	for due := first; !due.After(last); due = due.Add(time.Second) {
		switch n := seen[due]; {
		case n == 0:
			empty = append(empty, due.Format(time.TimeOnly))
		case n > 1:
			t.Errorf("due time %s has %d runs, want 1", due.Format(time.TimeOnly), n)
		}
	}
	if int64(len(empty)) > skipped {
		t.Errorf("due times %v have no run, but the schedule counts only %d skipped (the previous run still ran)", empty, skipped)
	}
	t.Logf("%d due times from %s to %s across %d kills (%d skipped: the previous run still ran); outcomes %v", len(runs), first.Format(time.TimeOnly), last.Format(time.TimeOnly), lives, len(empty), outcomes)

	// Every run is announced exactly once in the web chat.
	announced := map[string]int{}
	statsRe := regexp.MustCompile(`• schedule tick @ \S+$`)
	waitFor(t, gw, "every run announced", func() (bool, string) {
		resp, err := crashHTTP.Get(base + "/api/messages?client=sched&after=0")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, resp.Status
		}
		var body struct{ Messages []webMessage }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err.Error()
		}
		clear(announced)
		for _, m := range body.Messages {
			if m.Role == "announce" && statsRe.MatchString(strings.TrimSpace(m.Text)) {
				announced[m.RunID]++
			}
		}
		return len(announced) >= len(runs), fmt.Sprintf("%d of %d runs announced", len(announced), len(runs))
	})
	for _, r := range runs {
		if announced[r.ID] != 1 {
			t.Errorf("run %s (due %s, %s) announced %d times", r.ID[:8], r.ScheduleDue.Format(time.TimeOnly), r.Outcome, announced[r.ID])
		}
	}
}
