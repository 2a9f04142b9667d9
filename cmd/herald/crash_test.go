package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/store"
)

// The crash scenario: the main agent spawns eight sub-agents on a lane of
// two. k1 and k2 finish and are announced; k3 is running (its second model
// call hangs); k4 is announcing (its announce step hangs); k5…k8 wait
// queued. k4 and k8 use cleanup "delete", so they are archived right after
// their end. Then the gateway gets SIGKILL and is started again.
var crashLabels = []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}

const (
	crashClient    = "c1"
	crashUserText  = "spawn the crew"
	crashMainReply = "Spawned 8 helpers."
	crashRunning   = "k3" // running at the kill
	crashAnnounce  = "k4" // announcing at the kill
	crashWait      = 30 * time.Second
)

var (
	crashDone   = []string{"k1", "k2"}             // done and announced before the kill
	crashQueued = []string{"k5", "k6", "k7", "k8"} // queued at the kill
	crashDelete = []string{"k4", "k8"}             // cleanup: "delete"
	labelLine   = regexp.MustCompile(`(?m)^- Label: (\S+)$`)
)

// crashLLM is the fake model. Before the kill it hangs k3's second call and
// k4's announce step (until the request's connection dies); after the kill
// everything answers at once. It records every answer it gave per session
// ("main" or the child's label), so the test can look for each one in the
// transcripts.
type crashLLM struct {
	mu         sync.Mutex
	restarted  bool
	answered   map[string][]string // label → assistant texts delivered
	hung       map[string]bool     // label → a call is hanging
	callsAfter map[string]int      // label → calls received after the restart
}

func newCrashLLM() *crashLLM {
	return &crashLLM{answered: map[string][]string{}, hung: map[string]bool{}, callsAfter: map[string]int{}}
}

func (f *crashLLM) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarted = true
}

func (f *crashLLM) isHung(label string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hung[label]
}

func (f *crashLLM) snapshot() (answered map[string][]string, callsAfter map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answered = map[string][]string{}
	for k, v := range f.answered {
		answered[k] = slices.Clone(v)
	}
	callsAfter = map[string]int{}
	for k, v := range f.callsAfter {
		callsAfter[k] = v
	}
	return answered, callsAfter
}

func (f *crashLLM) handle(c llmtest.Call) llmtest.Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	label := "main"
	if m := labelLine.FindStringSubmatch(c.System); m != nil && strings.Contains(c.System, "Sub-agent context") {
		label = m[1]
	}
	if f.restarted {
		f.callsAfter[label]++
	}
	var last agent.Message
	if len(c.Messages) > 0 {
		last = c.Messages[len(c.Messages)-1]
	}
	answer := func(r llmtest.Reply) llmtest.Reply {
		if r.Text != "" {
			f.answered[label] = append(f.answered[label], r.Text)
		}
		return r
	}
	// hang holds the reply back until the gateway hangs up (it is killed).
	hang := func() llmtest.Reply {
		f.hung[label] = true
		return llmtest.Reply{Text: "never delivered", Delay: 10 * time.Minute}
	}

	if label == "main" {
		if last.Role == agent.RoleTool {
			return answer(llmtest.Reply{Text: crashMainReply})
		}
		if !strings.Contains(c.LastUser(), crashUserText) || !slices.Contains(c.Tools, "sessions_spawn") {
			return llmtest.Reply{Status: 400, Message: "crash test: unexpected main call"}
		}
		var calls []agent.ToolCall
		for _, l := range crashLabels {
			args := map[string]string{"task": "task " + l, "label": l}
			if slices.Contains(crashDelete, l) {
				args["cleanup"] = "delete"
			}
			b, _ := json.Marshal(args)
			calls = append(calls, agent.ToolCall{Name: "sessions_spawn", Args: b})
		}
		return answer(llmtest.Reply{Text: "Spawning the crew.", ToolCalls: calls})
	}

	if last.Role == agent.RoleUser && strings.Contains(last.Text, "Announce step") {
		if label == crashAnnounce && !f.restarted {
			return hang()
		}
		return answer(llmtest.Reply{Text: fmt.Sprintf("Result:\n%s result\n\nNotes:\n(none)", label)})
	}
	if label == crashRunning {
		steps := 0
		for _, m := range c.Messages {
			if m.Role == agent.RoleAssistant {
				steps++
			}
		}
		if steps == 0 {
			return answer(llmtest.Reply{Text: label + " step 1: listing the workspace",
				ToolCalls: []agent.ToolCall{{Name: "list_files", Args: json.RawMessage(`{}`)}}})
		}
		if !f.restarted {
			return hang()
		}
	}
	return answer(llmtest.Reply{Text: label + " answer"})
}

// gatewayProc is one `herald gateway` child process.
type gatewayProc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func startGateway(t *testing.T, bin, cfgPath, stateDir, logPath string) *gatewayProc {
	t.Helper()
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "gateway", "--config", cfgPath, "--state-dir", stateDir, "--log-format", "json")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(stateDir))
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &gatewayProc{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	// Runs before the fake LLM's Close, which waits for hanging requests.
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *gatewayProc) kill(t *testing.T) {
	select {
	case <-p.exited:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("kill gateway: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(crashWait):
		t.Errorf("gateway pid %d did not exit within %s of SIGKILL", p.cmd.Process.Pid, crashWait)
	}
}

// dumpLog shows the tail of a gateway's log when the test failed.
func (p *gatewayProc) dumpLog(t *testing.T) {
	if !t.Failed() {
		return
	}
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("last lines of %s:\n%s", filepath.Base(p.log), strings.Join(lines[max(0, len(lines)-40):], "\n"))
}

// waitFor polls cond until it holds, the gateway exits, or crashWait passes.
func waitFor(t *testing.T, p *gatewayProc, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	state := ""
	for {
		ok, s := cond()
		if ok {
			return
		}
		state = s
		select {
		case <-p.exited:
			t.Fatalf("gateway exited while waiting for %s (last state: %s)", what, state)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", crashWait, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var crashHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func waitReady(t *testing.T, p *gatewayProc, base string) {
	t.Helper()
	waitFor(t, p, "/readyz", func() (bool, string) {
		resp, err := crashHTTP.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

type webMessage struct {
	Seq   int64  `json:"seq"`
	Role  string `json:"role"`
	Text  string `json:"text"`
	RunID string `json:"runId"`
}

func webMessages(t *testing.T, base string) ([]webMessage, error) {
	t.Helper()
	resp, err := crashHTTP.Get(base + "/api/messages?client=" + crashClient + "&after=0")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/messages: %s", resp.Status)
	}
	var body struct {
		Messages []webMessage `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET /api/messages: %w", err)
	}
	return body.Messages, nil
}

// runsByLabel reads the runs the way `herald runs list` does: through the
// store, while the gateway may be running.
func runsByLabel(stateDir string) (map[string]store.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, stateDir)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	runs, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		return nil, err
	}
	out := map[string]store.Run{}
	for _, r := range runs {
		out[r.Label] = r
	}
	return out, nil
}

func statusLine(runs map[string]store.Run) string {
	var parts []string
	for _, l := range crashLabels {
		r, ok := runs[l]
		switch {
		case !ok:
			parts = append(parts, l+"=missing")
		case r.Outcome != "":
			parts = append(parts, l+"="+r.Status+"/"+r.Outcome)
		default:
			parts = append(parts, l+"="+r.Status)
		}
	}
	return strings.Join(parts, " ")
}

// freeAddr is harness.FreeAddr: a loopback address of its own where the
// system has one, so a gateway killed and started again finds its port free.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// buildHerald is the herald binary of this tree, built once for the
// package's tests (harness.BuildOnce).
func buildHerald(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := harness.BuildOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// transcriptOf finds a run's transcript, also after it was archived
// (renamed to <file>.deleted.<timestamp>).
func transcriptOf(t *testing.T, stateDir string, r store.Run) string {
	t.Helper()
	base, matches := transcriptFiles(stateDir, r)
	if len(matches) != 1 {
		t.Fatalf("run %s (%s): want one transcript file %s[.deleted.*], found %v", r.Label, r.ID, base, matches)
	}
	return matches[0]
}

// transcriptFiles returns the path of run r's transcript and the files
// there are for it (live or archived as .deleted.*).
func transcriptFiles(stateDir string, r store.Run) (base string, files []string) {
	base = filepath.Join(stateDir, "transcripts", r.AgentID, r.ChildSessionID+".jsonl")
	files, _ = filepath.Glob(base + "*")
	return base, files
}

// TestCrashKill9 kills a real gateway process with SIGKILL while sub-agent
// runs are done, running, announcing and queued, starts it again on the
// same state dir and port, and checks what the person and the operator see:
// every run announced exactly once with the right status, queued runs run,
// archive deadlines honoured, and every transcript line the model produced
// still on disk.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and runs it twice")
	}
	bin := buildHerald(t)

	fake := newCrashLLM()
	llm := llmtest.NewAnthropic(t, fake.handle)

	dir, stateDir, base, cfgPath := crashSetup(t, llm.URL)

	// First life.
	gw1 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway1.log"))
	defer gw1.dumpLog(t)
	waitReady(t, gw1, base)
	crashPost(t, base, crashUserText)

	// A single gateway keeps "announcing" in memory only (other replicas
	// are who would read it from the store): k4 is running in the store,
	// and its hanging announce call shows it is in its announce step.
	want := map[string]string{"k1": store.StatusDone, "k2": store.StatusDone,
		crashRunning: store.StatusRunning, crashAnnounce: store.StatusRunning}
	for _, l := range crashQueued {
		want[l] = store.StatusQueued
	}
	var atKill map[string]store.Run
	waitFor(t, gw1, "runs done, running, announcing and queued", func() (bool, string) {
		runs, err := runsByLabel(stateDir)
		if err != nil {
			return false, err.Error()
		}
		state := statusLine(runs)
		for l, s := range want {
			if runs[l].Status != s {
				return false, state
			}
		}
		// The hanging calls arrived, so every earlier answer was taken in.
		if !fake.isHung(crashRunning) || !fake.isHung(crashAnnounce) {
			return false, state + " (model calls not hanging yet)"
		}
		msgs, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		announced, mainReplied := map[string]bool{}, false
		for _, m := range msgs {
			announced[m.RunID] = announced[m.RunID] || m.Role == "announce"
			mainReplied = mainReplied || (m.Role == "assistant" && m.Text == crashMainReply)
		}
		for _, l := range crashDone {
			if !announced[runs[l].ID] {
				return false, state + " (announce of " + l + " not delivered yet)"
			}
		}
		if !mainReplied {
			return false, state + " (main reply not delivered yet)"
		}
		atKill = runs
		return true, state
	})
	counts := map[string]int{}
	for _, r := range atKill {
		counts[r.Status]++
	}
	t.Logf("at the kill: %s (%v)", statusLine(atKill), counts)

	gw1.kill(t)
	fake.restart()

	// Second life, same state dir and port.
	gw2 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway2.log"))
	defer gw2.dumpLog(t)
	waitReady(t, gw2, base)
	var final map[string]store.Run
	var msgs []webMessage
	waitFor(t, gw2, "every run done, announced and archived", func() (bool, string) {
		runs, err := runsByLabel(stateDir)
		if err != nil {
			return false, err.Error()
		}
		state := statusLine(runs)
		for _, l := range crashLabels {
			if runs[l].Status != store.StatusDone {
				return false, state
			}
		}
		for _, l := range crashDelete {
			if runs[l].ArchivedAt.IsZero() {
				return false, state + " (" + l + " not archived yet)"
			}
		}
		m, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, x := range m {
			if x.Role == "announce" {
				n++
			}
		}
		if n < len(crashLabels) {
			return false, fmt.Sprintf("%s (%d announces)", state, n)
		}
		final, msgs = runs, m
		return true, state
	})

	// Let any stray re-delivery land before counting.
	time.Sleep(500 * time.Millisecond)
	if m, err := webMessages(t, base); err == nil {
		msgs = m
	} else {
		t.Fatal(err)
	}

	// Every run succeeds: the running and the announcing one resume from
	// their transcripts (SPEC §25).
	wantOutcome := map[string]string{}
	for _, l := range crashLabels {
		wantOutcome[l] = store.OutcomeSuccess
	}
	for _, l := range crashLabels {
		r := final[l]
		if r.ID != atKill[l].ID {
			t.Errorf("%s: run id changed across the restart: %s → %s", l, atKill[l].ID, r.ID)
		}
		if r.Outcome != wantOutcome[l] {
			t.Errorf("%s: outcome %q, want %q", l, r.Outcome, wantOutcome[l])
		}
		// Exactly one announce per run: by run id and by the session key
		// printed in its stats line.
		var byID, byKey []webMessage
		for _, m := range msgs {
			if m.RunID == r.ID {
				byID = append(byID, m)
			}
			if strings.Contains(m.Text, "sessionKey "+r.ChildKey+" ") {
				byKey = append(byKey, m)
			}
		}
		if len(byID) != 1 || len(byKey) != 1 {
			t.Errorf("%s: %d messages with runId %s and %d naming %s, want exactly one announce", l, len(byID), r.ID, len(byKey), r.ChildKey)
			continue
		}
		a := byID[0]
		if a.Role != "announce" {
			t.Errorf("%s: message for run %s has role %q, want announce", l, r.ID, a.Role)
		}
		wantHead := fmt.Sprintf("Status: %s\nTask: %s\n", wantOutcome[l], l)
		if !strings.HasPrefix(a.Text, wantHead) {
			t.Errorf("%s: announce starts %q, want %q", l, a.Text[:min(len(a.Text), 40)], wantHead)
		}
		wantResult := l + " result"
		if !strings.Contains(a.Text, "Result:\n"+wantResult+"\n") {
			t.Errorf("%s: announce lacks result %q:\n%s", l, wantResult, a.Text)
		}
		resumed := strings.Contains(a.Text, "Resumed after the gateway stopped (1×).")
		if want := l == crashRunning || l == crashAnnounce; resumed != want {
			t.Errorf("%s: announce says resumed=%v, want %v:\n%s", l, resumed, want, a.Text)
		}
	}
	var announces int
	for _, m := range msgs {
		if m.Role == "announce" {
			announces++
		}
	}
	if announces != len(crashLabels) {
		t.Errorf("%d announce messages, want %d (one per run)", announces, len(crashLabels))
	}

	// Ended runs are not run again; the running one makes the call the
	// kill cut and its announce step, the announcing one its announce
	// step: nothing is asked twice.
	answered, callsAfter := fake.snapshot()
	for l, want := range map[string]int{"main": 0, "k1": 0, "k2": 0, crashRunning: 2, crashAnnounce: 1} {
		if callsAfter[l] != want {
			t.Errorf("%s: %d model calls after the restart, want %d", l, callsAfter[l], want)
		}
	}

	// No transcript line lost: every transcript parses line by line and
	// holds every answer the model gave that session, in order.
	for _, l := range crashLabels {
		r := final[l]
		path := transcriptOf(t, stateDir, r)
		if archived := strings.Contains(filepath.Base(path), ".deleted."); archived != slices.Contains(crashDelete, l) {
			t.Errorf("%s: transcript %s archived=%v, want %v", l, path, archived, !archived)
		}
		hdr, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), path)
		if err != nil {
			t.Errorf("%s: %v", l, err)
			continue
		}
		if hdr.SessionKey != r.ChildKey {
			t.Errorf("%s: transcript header sessionKey %q, want %q", l, hdr.SessionKey, r.ChildKey)
		}
		checkAnswers(t, l, path, entries, answered[l])
		if l == crashRunning && !hasToolResult(entries, "list_files") {
			t.Errorf("%s: transcript %s lost the list_files result written before the kill", l, path)
		}
	}
	sessions, err := filepath.Glob(filepath.Join(stateDir, "transcripts", "main", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var mainChecked bool
	for _, p := range sessions {
		hdr, entries, err := store.FileTranscripts{}.ReadTranscript(context.Background(), p)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if hdr.SessionKey == "agent:main:web:dm:"+crashClient {
			mainChecked = true
			if len(entries) == 0 || entries[0].Role != "user" || entries[0].Content != crashUserText {
				t.Errorf("main transcript %s does not start with the user's message %q", p, crashUserText)
			}
			checkAnswers(t, "main", p, entries, answered["main"])
		}
	}
	if !mainChecked {
		t.Errorf("no transcript of the requester session agent:main:web:dm:%s under %s", crashClient, filepath.Join(stateDir, "transcripts", "main"))
	}
}

// checkAnswers asserts that the assistant lines of a transcript are exactly
// the answers the fake gave that session, in order.
func checkAnswers(t *testing.T, label, path string, entries []store.TranscriptEntry, want []string) {
	t.Helper()
	var got []string
	for _, e := range entries {
		if e.Role == "assistant" {
			got = append(got, e.Content)
		}
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("%s: transcript %s has assistant lines %q, want the model's answers %q", label, path, got, want)
	}
}

func hasToolResult(entries []store.TranscriptEntry, tool string) bool {
	for _, e := range entries {
		var results []agent.ToolResult
		if e.Role == "tool" && json.Unmarshal(e.ToolResults, &results) == nil {
			for _, r := range results {
				if r.Name == tool && !r.IsError {
					return true
				}
			}
		}
	}
	return false
}

// TestCrashKill9AnyMoment kills the gateway a few milliseconds after the
// model answered the first announce step — somewhere between that answer,
// the end of the run in the store and the delivery of its announce — while
// the other runs are in whatever state they reached. Whatever the moment,
// after the restart every run ends once and is announced exactly once:
// runs queued at the kill run, runs in flight resume (SPEC §25), runs
// already ended keep their outcome and an undelivered announce is
// delivered.
func TestCrashKill9AnyMoment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and runs it twice")
	}
	bin := buildHerald(t)
	labels := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	firstAnnounce := make(chan struct{})
	var once sync.Once
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		m := labelLine.FindStringSubmatch(c.System)
		if m == nil || !strings.Contains(c.System, "Sub-agent context") {
			if len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool {
				return llmtest.Reply{Text: "Spawned."}
			}
			var calls []agent.ToolCall
			for _, l := range labels {
				calls = append(calls, agent.ToolCall{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"task ` + l + `","label":"` + l + `"}`)})
			}
			return llmtest.Reply{ToolCalls: calls}
		}
		if strings.Contains(c.LastUser(), "Announce step") {
			once.Do(func() { close(firstAnnounce) })
			return llmtest.Reply{Text: "Result:\n" + m[1] + " result\n\nNotes:\n(none)"}
		}
		n := int(m[1][1] - '0')
		return llmtest.Reply{Text: m[1] + " answer", Delay: time.Duration(n) * 30 * time.Millisecond}
	})

	dir, stateDir, base, cfgPath := crashSetup(t, llm.URL)

	gw1 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway1.log"))
	defer gw1.dumpLog(t)
	waitReady(t, gw1, base)
	ctx := context.Background()
	db, err := store.Open(ctx, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	crashPost(t, base, "spawn six")
	select {
	case <-firstAnnounce:
	case <-gw1.exited:
		t.Fatal("gateway exited before the first announce step")
	case <-time.After(crashWait):
		t.Fatalf("no announce step within %s", crashWait)
	}
	offset := rand.N(5 * time.Millisecond)
	time.Sleep(offset)
	gw1.kill(t)

	// The dead gateway's state is exactly the state at the kill.
	atKill, err := db.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := db.PendingOutbox(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	undelivered := map[string]bool{}
	for _, it := range pending {
		undelivered[it.RunID] = true
	}
	counts := map[string]int{}
	for _, r := range atKill {
		counts[r.Status]++
	}
	t.Logf("killed %s after the first announce answer: %d runs %v, %d undelivered announces", offset, len(atKill), counts, len(undelivered))
	if len(atKill) == 0 {
		t.Fatal("no runs in the store at the kill")
	}

	gw2 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway2.log"))
	defer gw2.dumpLog(t)
	waitReady(t, gw2, base)
	var final map[string]store.Run
	waitFor(t, gw2, "every run done and announced", func() (bool, string) {
		runs, err := runsByLabel(stateDir)
		if err != nil {
			return false, err.Error()
		}
		msgs, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		announced := map[string]bool{}
		for _, m := range msgs {
			announced[m.RunID] = m.Role == "announce"
		}
		for _, r := range atKill {
			if runs[r.Label].Status != store.StatusDone || !announced[r.ID] {
				return false, statusLine(runs)
			}
		}
		final = runs
		return true, statusLine(runs)
	})
	time.Sleep(500 * time.Millisecond)
	msgs, err := webMessages(t, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, before := range atKill {
		l := before.Label
		r := final[l]
		want := store.OutcomeSuccess // queued, and running or announcing (resumed)
		if before.Status == store.StatusDone {
			want = before.Outcome
		}
		if r.Outcome != want {
			t.Errorf("%s: was %s at the kill, outcome %q after the restart, want %q", l, before.Status, r.Outcome, want)
		}
		var found []webMessage
		for _, m := range msgs {
			if m.RunID == r.ID || strings.Contains(m.Text, "sessionKey "+r.ChildKey+" ") {
				found = append(found, m)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s (%s at the kill, undelivered=%v): %d messages for run %s, want exactly one announce", l, before.Status, undelivered[r.ID], len(found), r.ID)
		} else if head := "Status: " + want + "\n"; !strings.HasPrefix(found[0].Text, head) {
			t.Errorf("%s: announce starts %q, want %q", l, found[0].Text[:min(40, len(found[0].Text))], head)
		}
		// A run killed just after it started may not have created its
		// transcript, or written its first line, yet: nothing was lost,
		// and there is no file or it reads as not found. Any other error
		// is damage.
		justStarted := before.Status == store.StatusRunning
		base, files := transcriptFiles(stateDir, r)
		switch {
		case len(files) == 0 && justStarted:
		case len(files) != 1:
			t.Errorf("%s (%s at the kill): want one transcript file %s[.deleted.*], found %v", l, before.Status, base, files)
		default:
			if _, _, err := (store.FileTranscripts{}).ReadTranscript(context.Background(), files[0]); err != nil && !(justStarted && errors.Is(err, store.ErrNotFound)) {
				t.Errorf("%s: %v", l, err)
			}
		}
	}
}

// TestCrashKill9MidToolCall kills the gateway while a requester turn waits
// for a person to approve a supervised tool call: the transcript ends with
// the model's tool call and no result. After the restart the conversation
// must go on — the next message gets an answer, and the model is never sent
// a tool call without its result (which real APIs reject).
func TestCrashKill9MidToolCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and runs it twice")
	}
	bin := buildHerald(t)
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "hello again") {
			return llmtest.Reply{Text: "Hello again."}
		}
		if len(c.Messages) > 0 && c.Messages[len(c.Messages)-1].Role == agent.RoleTool {
			return llmtest.Reply{Text: "Done."}
		}
		return llmtest.Reply{Text: "Let me check.", ToolCalls: []agent.ToolCall{{Name: "exec", Args: json.RawMessage(`{"command":"echo hi"}`)}}}
	})
	dir, stateDir, base, cfgPath := crashSetup(t, llm.URL)
	post := func(_ *gatewayProc, text string) { t.Helper(); crashPost(t, base, text) }
	lastFrom := func(role string) func() (bool, string) {
		return func() (bool, string) {
			msgs, err := webMessages(t, base)
			if err != nil {
				return false, err.Error()
			}
			for _, m := range msgs[max(0, len(msgs)-1):] {
				if m.Role == role {
					return true, m.Text
				}
			}
			return false, fmt.Sprintf("%+v", msgs)
		}
	}

	gw1 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway1.log"))
	defer gw1.dumpLog(t)
	waitReady(t, gw1, base)
	post(gw1, "run something")
	waitFor(t, gw1, "the approval request", lastFrom("system"))
	gw1.kill(t)

	gw2 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway2.log"))
	defer gw2.dumpLog(t)
	waitReady(t, gw2, base)
	post(gw2, "hello again")
	// The turn cut short is continued after the restart (SPEC §25): its
	// tool call gets a result and the model says "Done." — before or
	// after "hello again" reaches the conversation, as the restart and
	// the post race. The new message is answered "Hello again.". Were the
	// model sent the tool call without its result, the fake would answer
	// 400 to every later call and no "Hello again." would come.
	waitFor(t, gw2, "an answer after the restart", func() (bool, string) {
		msgs, err := webMessages(t, base)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range msgs {
			if m.Role != "assistant" {
				continue
			}
			switch m.Text {
			case "Hello again.":
				return true, m.Text
			case "Let me check.", "Done.":
			default:
				t.Fatalf("after the restart the conversation answered %q; want %q (and the cut turn's %q)", m.Text, "Hello again.", "Done.")
			}
		}
		return false, fmt.Sprintf("%+v", msgs)
	})
	// Once nothing is left to send, each answer is there once: the resumed
	// turn's "Done." (none when "hello again" came during its model call
	// and was folded into it) and "Hello again." are not said twice.
	waitFor(t, gw2, "the outbox to settle", func() (bool, string) {
		n, err := outboxPending(stateDir)
		if err != nil {
			return false, err.Error()
		}
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	msgs, err := webMessages(t, base)
	if err != nil {
		t.Fatal(err)
	}
	said := map[string]int{}
	for _, m := range msgs {
		if m.Role == "assistant" {
			said[m.Text]++
		}
	}
	if said["Hello again."] != 1 || said["Done."] > 1 || said["Let me check."] > 1 {
		t.Errorf("answers after the restart %v; want \"Hello again.\" once, the others at most once: %+v", said, msgs)
	}
}

// outboxPending counts what the gateway on stateDir still has to send.
func outboxPending(stateDir string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, stateDir)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return db.OutboxPending(ctx)
}

// TestCrashKill9DuringFirstModelCall kills the gateway while a turn's first
// model call is in flight, twice. The person's message goes into the
// transcript only with the first answer (agent.Turn.DeferInput), so the
// first time the transcript does not hold it yet; after the restart the
// message is answered once, by a model call, and the model is sent it
// once — in the turn run again and in the next turn's history. The second
// time the message repeats one the conversation already answered: the
// restarted turn still calls the model and does not give the older
// message's answer (or the latest one) for it.
func TestCrashKill9DuringFirstModelCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the herald binary and runs it three times")
	}
	bin := buildHerald(t)
	var (
		mu    sync.Mutex
		calls []llmtest.Call
		hang  string // the message whose model call hangs in this life
	)
	inFlight := make(chan struct{}, 1)
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
		if hang != "" && c.LastUser() == hang {
			select {
			case inFlight <- struct{}{}:
			default:
			}
			return llmtest.Reply{Text: "never", Delay: 10 * time.Minute}
		}
		return llmtest.Reply{Text: fmt.Sprintf("Answer %d to %s.", len(calls), c.LastUser())}
	})
	setHang := func(text string) {
		mu.Lock()
		hang = text
		mu.Unlock()
	}
	dir, stateDir, base, cfgPath := crashSetup(t, llm.URL)
	post := func(text string) { t.Helper(); crashPost(t, base, text) }
	answersIn := func(msgs []webMessage) []string {
		var out []string
		for _, m := range msgs {
			if m.Role == "assistant" {
				out = append(out, m.Text)
			}
		}
		return out
	}
	said := func() []string {
		t.Helper()
		msgs, err := webMessages(t, base)
		if err != nil {
			t.Fatal(err)
		}
		return answersIn(msgs)
	}
	answers := func(want int) func() (bool, string) {
		return func() (bool, string) {
			msgs, err := webMessages(t, base)
			if err != nil {
				return false, err.Error()
			}
			return len(answersIn(msgs)) >= want, fmt.Sprintf("%+v", msgs)
		}
	}
	cutDuringCall := func(p *gatewayProc, text string) {
		t.Helper()
		setHang(text)
		post(text)
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("the turn's model call never arrived")
		}
		p.kill(t)
		setHang("")
	}
	// callsSince returns the model calls made after the first n.
	callsSince := func(n int) []llmtest.Call {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls[n:])
	}
	callCount := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	history := func(c llmtest.Call) []string {
		var h []string
		for _, m := range c.Messages {
			h = append(h, string(m.Role)+": "+m.Text)
		}
		return h
	}

	gw1 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway1.log"))
	defer gw1.dumpLog(t)
	waitReady(t, gw1, base)
	cutDuringCall(gw1, "question one")
	before := callCount()

	gw2 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway2.log"))
	defer gw2.dumpLog(t)
	waitReady(t, gw2, base)
	waitFor(t, gw2, "the cut turn's answer", answers(1))
	post("question two")
	waitFor(t, gw2, "the next turn's answer", answers(2))
	after := callsSince(before)
	if len(after) != 2 {
		t.Fatalf("%d model calls after the restart, want 2 (the cut turn's, the next one's)", len(after))
	}
	one := fmt.Sprintf("Answer %d to question one.", before+1)
	two := fmt.Sprintf("Answer %d to question two.", before+2)
	if got, want := said(), []string{one, two}; !slices.Equal(got, want) {
		t.Errorf("answers %q, want %q", got, want)
	}
	if got, want := history(after[1]), []string{"user: question one", "assistant: " + one, "user: question two"}; !slices.Equal(got, want) {
		t.Errorf("the next turn's request held %q, want %q", got, want)
	}

	// The same text again, cut during its call.
	cutDuringCall(gw2, "question one")
	before = callCount()
	gw3 := startGateway(t, bin, cfgPath, stateDir, filepath.Join(dir, "gateway3.log"))
	defer gw3.dumpLog(t)
	waitReady(t, gw3, base)
	waitFor(t, gw3, "the repeated message's answer", answers(3))
	again := fmt.Sprintf("Answer %d to question one.", before+1)
	if got, want := said(), []string{one, two, again}; !slices.Equal(got, want) {
		t.Errorf("answers after the second restart %q, want %q (a model call for the repeated message)", got, want)
	}
	if after := callsSince(before); len(after) != 1 || history(after[0])[len(history(after[0]))-1] != "user: question one" {
		t.Errorf("model calls after the second restart: %d, want 1 ending with the repeated message", len(after))
	}
}

// crashSetup writes testdata/crash.json5 for a gateway on a free loopback
// port that calls the model at llmURL; it returns the test's dir, the
// state dir, the gateway's base URL and the config's path.
func crashSetup(t *testing.T, llmURL string) (dir, stateDir, base, cfgPath string) {
	t.Helper()
	dir = t.TempDir()
	stateDir = filepath.Join(dir, "state")
	addr := freeAddr(t)
	base = "http://" + addr
	tmpl, err := os.ReadFile(filepath.Join("testdata", "crash.json5"))
	if err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(dir, "herald.json5")
	src := strings.NewReplacer("{{LISTEN}}", addr, "{{LLM_URL}}", llmURL).Replace(string(tmpl))
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, stateDir, base, cfgPath
}

// crashPost posts text to the web chat at base as crashClient and wants 202.
func crashPost(t *testing.T, base, text string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"client": crashClient, "text": text})
	resp, err := crashHTTP.Post(base+"/api/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /api/messages: %s, want 202", resp.Status)
	}
}
