package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/store"
)

const tgToken = "4242:chaos"

func tgConversation(chat int64) string { return fmt.Sprintf("telegram:%d", chat) }

func slackConversation(thread string) string { return "slack:C1:" + thread }

// make test runs the bounded default; `make chaos K=100` the long one.
var (
	flagKills   = flag.Int("kills", 10, "SIGKILLs of the gateway")
	flagLatency = flag.Duration("latency", 300*time.Millisecond, "the fake model's latency per call")
	flagClients = flag.Int("clients", 4, "web conversations posting at once")
	flagChats   = flag.Int("chats", 2, "Telegram chats posting at once (their sends fail with 429 and 500 now and then)")
	flagThreads = flag.Int("threads", 2, "Slack threads posting at once (Socket Mode; posts fail with 429 and 500 now and then)")
	flagSeed    = flag.Uint64("seed", 0, "random seed (0: from the clock; printed either way)")
	flagLife    = flag.Duration("life", 2*time.Second, "longest life of the gateway between kills")
)

// TestChaos runs a real gateway process under load — several web
// conversations posting plain messages and spawn requests to a fake model
// with latency, so turns and runs are in flight — and kills it with
// SIGKILL at random moments, restarting it each time. Then it lets the
// last life finish and checks what a user would: every acknowledged
// message answered exactly once and in order per conversation, every
// spawn requested made once and announced once, every transcript line
// valid JSON, and the database intact.
func TestChaos(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: seed %d (-args -seed=%d to replay the same schedule), %d kills, model latency %s", seed, seed, *flagKills, *flagLatency)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	tg := tgfake.New(t, tgToken)
	sf := slackfake.New(t)
	r := newRig(t, *flagLatency, harness.Config{MainConcurrent: 4, Subagents: 4, Children: 1000, GraceSeconds: 3,
		Channels: fmt.Sprintf("telegram: { enabled: true, botToken: %q, apiUrl: %q }, slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }",
			tgToken, tg.URL(), slackfake.BotToken, slackfake.AppToken, sf.URL()),
		Extra: chaosSchedule})
	ctx, model, addr, stateDir, start := r.ctx, r.model, r.addr, r.stateDir, r.start
	defer func() {
		if t.Failed() {
			t.Logf("last lines of the gateway log:\n%s", r.tail(40))
		}
	}()

	// The conversations post until the kills are over.
	web := harness.NewWeb("http://"+addr, *flagClients)
	web.HTTP.Timeout = 5 * time.Second
	d := &driver{acked: map[string][]posted{}}
	driveCtx, stopDriving := context.WithCancel(ctx)
	var drivers sync.WaitGroup
	for c := range *flagClients {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(c)))
		drivers.Go(func() {
			d.drive(driveCtx, fmt.Sprintf("chaos-%d", c), r, func(text string) error {
				_, err := web.Post(driveCtx, fmt.Sprintf("chaos-%d", c), text)
				return err
			})
		})
	}
	// Telegram keeps an update until the bot confirms it with a later
	// offset, so every message queued there is owed an answer, and its
	// sends fail now and then with 429 (retry_after 1) or 500.
	for c := range *flagChats {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(100+c)))
		chat := int64(1001 + c)
		drivers.Go(func() {
			d.drive(driveCtx, tgConversation(chat), r, func(text string) error {
				if r.IntN(6) == 0 {
					tg.FailNext(1, []int{429, 500}[r.IntN(2)], 1)
				}
				tg.SendText(chat, "private", 0, chat, text)
				return nil
			})
		})
	}

	// Slack acknowledges what the gateway acked over Socket Mode (after
	// storing it); an envelope sent while the gateway is down or dying is
	// not acknowledged and does not count.
	for c := range *flagThreads {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(200+c)))
		thread := fmt.Sprintf("1700000000.%06d", 100+c)
		drivers.Go(func() {
			d.drive(driveCtx, slackConversation(thread), r, func(text string) error {
				if r.IntN(6) == 0 {
					sf.FailNext(1, []int{429, 500}[r.IntN(2)], "1")
				}
				id, err := sf.TryMention("C1", "U1", text, thread)
				if err != nil {
					return err
				}
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
					if sf.Acked(id) {
						return nil
					}
					select {
					case <-driveCtx.Done():
						return driveCtx.Err()
					case <-time.After(10 * time.Millisecond):
					}
				}
				return errors.New("not acknowledged")
			})
		})
	}

	gw := start()
	for k := range *flagKills {
		life := time.Duration(rng.Int64N(int64(*flagLife)-int64(100*time.Millisecond))) + 100*time.Millisecond
		select {
		case <-time.After(life):
		case <-gw.Exited():
			t.Fatalf("life %d: the gateway exited on its own", k+1)
		}
		if err := gw.Kill(); err != nil {
			t.Fatal(err)
		}
		gw = start()
	}
	stopDriving()
	drivers.Wait()
	defer func() { _ = gw.Kill() }()

	// The last life runs until everything owed has arrived (or a bound).
	want := d.snapshot()
	got := map[string][]string{}
	deadline := time.Now().Add(2*time.Minute + 20**flagLatency)
	for {
		missing := 0
		sent := tg.Sent()
		slackPosts := sf.Posted()
		for conv, posts := range want {
			if thread, ok := strings.CutPrefix(conv, "slack:C1:"); ok {
				got[conv] = nil
				for _, p := range slackPosts {
					if p.Channel == "C1" && p.ThreadTS == thread {
						got[conv] = append(got[conv], p.Text)
					}
				}
			} else if chat, ok := strings.CutPrefix(conv, "telegram:"); ok {
				got[conv] = nil
				for _, m := range sent {
					if fmt.Sprint(m.ChatID) == chat {
						got[conv] = append(got[conv], m.Text)
					}
				}
			} else {
				msgs, err := web.Messages(ctx, conv, 0)
				if err != nil {
					t.Fatalf("GET /api/messages %s: %v", conv, err)
				}
				got[conv] = nil
				for _, m := range msgs {
					if m.Role != "user" {
						got[conv] = append(got[conv], m.Text)
					}
				}
			}
			missing += len(check(posts, got[conv]).missing)
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-gw.Exited():
			t.Fatal("the gateway exited during the final life")
		}
	}
	if err := gw.Term(30 * time.Second); err != nil {
		t.Error(err)
	}

	// Everything a user would notice.
	var total report
	tgResent := 0
	for client, posts := range want {
		r := check(posts, got[client])
		if strings.HasPrefix(client, "telegram:") {
			// Telegram has no way to look a post up: a send cut by a kill
			// after Telegram took it is sent again (uncertainDelivery
			// "resend", the default; SPEC §12). A repeat there is that
			// documented at-least-once, counted, not a failure.
			tgResent += len(r.duplicated)
			r.duplicated, r.annDup = nil, 0
		}
		total.add(r)
		for _, p := range r.missing {
			t.Errorf("%s: %s", client, p)
		}
		if len(r.missing) > 0 {
			t.Logf("%s shows:\n%s", client, strings.Join(got[client], "\n---\n"))
		}
		for _, p := range r.duplicated {
			t.Errorf("%s: %s", client, p)
		}
		for _, p := range r.reordered {
			t.Errorf("%s: %s", client, p)
		}
	}
	var per []string
	for conv, posts := range want {
		per = append(per, fmt.Sprintf("%s=%d", conv, len(posts)))
	}
	slices.Sort(per)
	t.Logf("chaos: acknowledged per conversation: %s", strings.Join(per, " "))
	runs := runsByLabel(t, stateDir)
	for client, posts := range want {
		for _, p := range posts {
			if p.spawn == 0 {
				continue
			}
			for i := 1; i <= p.spawn; i++ {
				label := fmt.Sprintf("%s.%d", p.tag, i)
				if n := runs[label]; n != 1 {
					total.spawnErrors++
					t.Errorf("%s: spawn %s made %d times, want once", client, label, n)
				}
			}
		}
	}
	total.badTranscripts = checkTranscripts(t, stateDir)
	checkSchedule(t, stateDir)
	checkIntegrity(t, stateDir)
	t.Logf("chaos: kills=%d acknowledged=%d (spawn requests %d, runs %d) lost=%d duplicated=%d reordered=%d announces lost=%d duplicated=%d spawn errors=%d bad transcripts=%d telegram re-sends after an uncertain send=%d model calls=%d runs resumed=%d unknown=%d",
		*flagKills, total.acked, total.spawnReqs, total.runs, len(total.missing), len(total.duplicated), len(total.reordered),
		total.annMissing, total.annDup, total.spawnErrors, total.badTranscripts, tgResent, model.Calls(), total.resumed, total.unknown)
}

// posted is one message a conversation got a 202 for.
type posted struct {
	tag   string
	spawn int // sub-agents asked for (0: a plain SAY)
}

func (p posted) String() string {
	if p.spawn > 0 {
		return fmt.Sprintf("SPAWN %d %s", p.spawn, p.tag)
	}
	return "SAY " + p.tag
}

// driver posts messages and remembers which were acknowledged, in order.
type driver struct {
	mu    sync.Mutex
	acked map[string][]posted
}

// drive posts to one conversation through post until ctx ends; a nil
// error from post means the message was acknowledged.
func (d *driver) drive(ctx context.Context, conv string, r *rand.Rand, post func(text string) error) {
	prefix := strings.ReplaceAll(conv, ":", "")
	for n := 1; ctx.Err() == nil; n++ {
		p := posted{tag: fmt.Sprintf("%s-%d", prefix, n)}
		if r.IntN(4) == 0 {
			p.spawn = 1 + r.IntN(3)
		}
		err := post(p.String())
		if err == nil {
			d.mu.Lock()
			d.acked[conv] = append(d.acked[conv], p)
			d.mu.Unlock()
		}
		// Pace a little slower than the model answers (a turn takes one or
		// two model calls and a conversation's turns run one at a time), so
		// the backlog stays bounded; while the gateway is down, retry soon.
		lat := max(*flagLatency, 50*time.Millisecond)
		pause := lat + time.Duration(r.Int64N(int64(2*lat)))
		if err != nil && !errors.Is(err, harness.ErrBusy) {
			pause = 30 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (d *driver) snapshot() map[string][]posted {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]posted{}
	for k, v := range d.acked {
		out[k] = slices.Clone(v)
	}
	return out
}

type report struct {
	acked, spawnReqs, runs                          int
	missing, duplicated, reordered                  []string
	annMissing, annDup, spawnErrors, badTranscripts int
	// resumed counts the announces of runs resumed after a kill (SPEC
	// §25), unknown those announced Status: unknown (past maxResumes).
	resumed, unknown int
}

func (r *report) add(o report) {
	r.acked += o.acked
	r.spawnReqs += o.spawnReqs
	r.runs += o.runs
	r.missing = append(r.missing, o.missing...)
	r.duplicated = append(r.duplicated, o.duplicated...)
	r.reordered = append(r.reordered, o.reordered...)
	r.annMissing += o.annMissing
	r.annDup += o.annDup
	r.resumed += o.resumed
	r.unknown += o.unknown
}

// check compares one conversation's acknowledged messages with what it
// shows: one answer each ("ack <tag>" or "spawned <tag>"), answers in the
// order of the messages, one announce per sub-agent asked for.
func check(posts []posted, texts []string) report {
	r := report{acked: len(posts)}
	answers := map[string]int{}
	var order []string
	announces := map[string]int{}
	for _, text := range texts {
		if tag, ok := strings.CutPrefix(text, "ack "); ok {
			answers[tag]++
			order = append(order, tag)
		} else if tag, ok := strings.CutPrefix(text, "spawned "); ok {
			answers[tag]++
			order = append(order, tag)
		} else if l := harness.AnnouncedLabel(text); l != "" {
			announces[l]++
			if strings.Contains(text, "Resumed after the gateway stopped (") {
				r.resumed++
			}
			if strings.HasPrefix(text, "Status: unknown\n") {
				r.unknown++
			}
		}
	}
	index := map[string]int{}
	for i, p := range posts {
		index[p.tag] = i
		switch n := answers[p.tag]; {
		case n == 0:
			r.missing = append(r.missing, fmt.Sprintf("acknowledged %q never answered", p))
		case n > 1:
			r.duplicated = append(r.duplicated, fmt.Sprintf("%q answered %d times", p, n))
		}
		if p.spawn > 0 {
			r.spawnReqs++
			r.runs += p.spawn
			for i := 1; i <= p.spawn; i++ {
				switch n := announces[fmt.Sprintf("%s.%d", p.tag, i)]; {
				case n == 0:
					r.annMissing++
					r.missing = append(r.missing, fmt.Sprintf("sub-agent %s.%d never announced", p.tag, i))
				case n > 1:
					r.annDup++
					r.duplicated = append(r.duplicated, fmt.Sprintf("sub-agent %s.%d announced %d times", p.tag, i, n))
				}
			}
		}
	}
	last, lastTag := -1, ""
	for _, tag := range order {
		i, ok := index[tag]
		if !ok {
			continue // answered although its POST got no 202 (stored, then killed): allowed
		}
		if i < last {
			r.reordered = append(r.reordered, fmt.Sprintf("answer to %q came after the answer to %q", tag, lastTag))
		}
		last, lastTag = max(last, i), tag
	}
	return r
}

func runsByLabel(t *testing.T, stateDir string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range runs {
		out[r.Label]++
	}
	return out
}

// checkTranscripts reads every transcript line as JSON.
func checkTranscripts(t *testing.T, stateDir string) (bad int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "transcripts", "*", "*.jsonl*"))
	if len(files) == 0 {
		t.Error("no transcripts were written")
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Error(err)
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for n := 1; sc.Scan(); n++ {
			if !json.Valid(sc.Bytes()) {
				bad++
				t.Errorf("%s:%d: not valid JSON: %.80q", f, n, sc.Text())
			}
		}
		fh.Close()
	}
	return bad
}

func checkIntegrity(t *testing.T, stateDir string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(stateDir, "herald.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil {
		t.Fatal(err)
	}
	if res != "ok" {
		t.Errorf("PRAGMA integrity_check: %s", res)
	}
}

// chaosSchedule fires every second into the web client chaos-sched all
// through the kills; catchUp "all" owes a run to every due time.
const chaosSchedule = `schedules: { minIntervalSeconds: 1, list: [
    { id: "chaos", every: "1s", catchUp: "all", task: "scheduled tick", deliver: { channel: "web", chat: "chaos-sched" } },
  ] },`

// checkSchedule: every due time of the chaos schedule from its first to its
// last has exactly one run (none fired twice, none skipped by a kill), and
// every run that ended has exactly one announce, shown or still in the
// outbox (the last life may stop before it is delivered).
func checkSchedule(t *testing.T, stateDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	perDue := map[time.Time]int{}
	var first, last time.Time
	ended := map[string]bool{}
	for _, r := range runs {
		if r.ScheduleID != "chaos" {
			continue
		}
		perDue[r.ScheduleDue]++
		if first.IsZero() || r.ScheduleDue.Before(first) {
			first = r.ScheduleDue
		}
		if r.ScheduleDue.After(last) {
			last = r.ScheduleDue
		}
		if r.Status == store.StatusDone && r.Outcome != store.OutcomeStopped {
			ended[r.ID] = true
		}
	}
	if len(perDue) == 0 {
		t.Error("schedule chaos never fired")
		return
	}
	// A due time that came while the previous run still ran is skipped and
	// counted on the schedule (SPEC §19, catchUp "all" included); every
	// other due time has exactly one run, and none has two.
	sched, err := db.GetSchedule(ctx, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	var empty []string
	for due := first; !due.After(last); due = due.Add(time.Second) {
		switch n := perDue[due]; {
		case n == 0:
			empty = append(empty, due.Format(time.TimeOnly))
		case n > 1:
			t.Errorf("schedule chaos: due time %s has %d runs, want 1", due.Format(time.TimeOnly), n)
		}
	}
	if int64(len(empty)) > sched.Skipped {
		t.Errorf("schedule chaos: due times %v have no run, but the schedule counts only %d skipped (the previous run still ran)", empty, sched.Skipped)
	}
	announced := map[string]int{}
	shown, err := db.WebAfter(ctx, "chaos-sched", 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range shown {
		if m.RunID != "" {
			announced[m.RunID]++
		}
	}
	pending, err := db.ListOutbox(ctx, true, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range pending {
		if it.RunID != "" && it.Origin.ChatID == "chaos-sched" && announced[it.RunID] == 0 {
			announced[it.RunID]++
		}
	}
	lost, dup := 0, 0
	for id := range ended {
		switch n := announced[id]; {
		case n == 0:
			lost++
			t.Errorf("schedule chaos: run %s ended and was never announced", id[:8])
		case n > 1:
			dup++
			t.Errorf("schedule chaos: run %s announced %d times", id[:8], n)
		}
	}
	t.Logf("chaos: schedule chaos: %d due times from %s to %s (%d skipped: the previous run still ran), %d runs ended, announces lost=%d duplicated=%d",
		len(perDue), first.Format(time.TimeOnly), last.Format(time.TimeOnly), len(empty), len(ended), lost, dup)
}
