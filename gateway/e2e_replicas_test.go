package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
)

const replicaConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" } },
  security: { toolPolicy: { default: "allow", tools: { read_file: "supervised" } } },
}`

// replicaModel: "hang" waits for minutes (until its call is cut), so a
// message after it is answered only once the hung turn is stopped; "spawn
// two" starts sub-agents r1 and r2, which hang the same way; "read the
// secret" calls the supervised read_file; a tool result is reported back;
// anything else gets "plain answer to: <text>". Every call's last user text
// is sent to seen.
func replicaModel(seen chan<- string) llmtest.Handler {
	return func(c llmtest.Call) llmtest.Reply {
		last := c.LastUser()
		select {
		case seen <- last:
		default:
		}
		if strings.Contains(c.System, "Sub-agent context") {
			return llmtest.Reply{Text: "never", Delay: 10 * time.Minute}
		}
		if m := c.Messages[len(c.Messages)-1]; m.Role == agent.RoleTool || len(m.ToolResults) > 0 {
			var parts []string
			for _, r := range m.ToolResults {
				parts = append(parts, r.Name+" => "+r.Content)
			}
			return llmtest.Reply{Text: "tool said: " + strings.Join(parts, " | ")}
		}
		switch last {
		case "hang":
			return llmtest.Reply{Text: "too late", Delay: 10 * time.Minute}
		case "spawn two":
			return llmtest.Reply{ToolCalls: []agent.ToolCall{
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"wait a long time","label":"r1"}`)},
				{Name: "sessions_spawn", Args: json.RawMessage(`{"task":"wait a long time","label":"r2"}`)},
			}}
		case "read the secret":
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "read_file", Args: json.RawMessage(`{"path":"secret.txt"}`)}}}
		}
		return llmtest.Reply{Text: "plain answer to: " + last}
	}
}

// startReplicas starts n gateways in this process on one PostgreSQL
// database, replicas gw-0 … gw-<n-1>, each with its own state dir and fake
// model (handler h). It skips in the SQLite run of the suite: replicas
// need PostgreSQL.
func startReplicas(t *testing.T, n int, h llmtest.Handler) []*testGW {
	t.Helper()
	return startReplicasWith(t, n, replicaConfig, h)
}

// startReplicasWith is startReplicas with the config src.
func startReplicasWith(t *testing.T, n int, src string, h llmtest.Handler) []*testGW {
	t.Helper()
	if !pgtest.OnPostgres() {
		t.Skip("replicas share a PostgreSQL state (the PostgreSQL run of the suite)")
	}
	url := pgtest.URL(t)
	var gws []*testGW
	for i := range n {
		dir := t.TempDir()
		pgURLs.Store(dir, url)
		gws = append(gws, newTestGatewayIn(t, dir, src, h, func(c *config.Config) {
			c.Gateway.ReplicaID = fmt.Sprintf("gw-%d", i)
			c.State.LeaseSeconds = 2
		}))
	}
	return gws
}

// waitSeen waits until the model got a call whose last user text is want.
func waitSeen(t *testing.T, seen <-chan string, want string) {
	t.Helper()
	deadline := time.After(e2eWait)
	for {
		select {
		case got := <-seen:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("the model never got %q", want)
		}
	}
}

// TestE2EReplicasCommandsReachTheHolder: /stop, /subagents stop and
// /approve sent to a replica other than the one running the turn, the
// runs or the waiting tool call take effect there: the turn is cut (the
// conversation answers its next message at once), the runs end stopped
// and are counted in the reply, the approved tool runs.
func TestE2EReplicasCommandsReachTheHolder(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 64)
	gws := startReplicas(t, 2, replicaModel(seen))
	a, b := gws[0], gws[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openTestStore(t, a.StateDir)
	defer db.Close()

	// /stop on b cuts the turn running on a.
	webPost(t, a.URL, "ann", "hang")
	waitSeen(t, seen, "hang")
	webPost(t, b.URL, "ann", "/stop")
	waitText(t, b, "ann", "⚙️ Agent was aborted. Stopped 0 sub-agents.")
	webPost(t, b.URL, "ann", "after the stop")
	// (The cut turn's message stays in the history, unanswered.)
	if got := waitText(t, b, "ann", "plain answer to:"); !strings.HasSuffix(got, "after the stop") {
		t.Errorf("the message after /stop got %q", got)
	}

	// /subagents stop all on b stops the two runs living on a.
	webPost(t, a.URL, "sam", "spawn two")
	var runs []store.Run
	if !waitFor(e2eWait, func() bool {
		var err error
		runs, err = db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusRunning}})
		return err == nil && len(runs) == 2
	}) {
		t.Fatalf("two running runs expected, have %+v", runs)
	}
	for _, r := range runs {
		if r.Owner != "gw-0" {
			t.Fatalf("run %s runs on %q, want gw-0 (where it was spawned)", r.Label, r.Owner)
		}
	}
	// Both runs in their model call, i.e. live on gw-0: this test is about
	// the stop reaching the holder; a stop that comes while a run is being
	// spawned has its own test (subagent TestStopWhileSpawnEachRecordsRuns).
	waitSeen(t, seen, "wait a long time")
	waitSeen(t, seen, "wait a long time")
	webPost(t, b.URL, "sam", "/subagents stop all")
	waitText(t, b, "sam", "⚙️ Stopped 2 subagents.")
	if !waitFor(e2eWait, func() bool {
		ended, err := db.ListRuns(ctx, store.RunFilter{Statuses: []string{store.StatusDone}})
		return err == nil && len(ended) == 2
	}) {
		t.Fatalf("the runs on gw-0 did not end after /subagents stop all on gw-1; %s", a.state(t))
	}
	for _, r := range runs {
		got, err := db.GetRun(ctx, r.ID)
		if err != nil || got.Outcome != store.OutcomeStopped {
			t.Errorf("run %s: %+v, %v; want outcome stopped", r.Label, got, err)
		}
	}

	// /approve on b lets the tool call waiting on a run.
	for _, g := range gws {
		ws := filepath.Join(g.StateDir, "workspace", "main")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("the answer is 42 on "+g.G.Addr()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	webPost(t, a.URL, "bea", "read the secret")
	req := waitText(t, b, "bea", "🔐 Approval needed")
	m := approvalCode.FindStringSubmatch(req)
	if m == nil {
		t.Fatalf("approval request without a code: %q", req)
	}
	webPost(t, b.URL, "bea", "/approve "+m[1])
	waitText(t, b, "bea", "✅ Approved "+m[1]+": read_file will run.")
	reply := waitText(t, b, "bea", "tool said:")
	if want := "the answer is 42 on " + a.G.Addr(); !strings.Contains(reply, want) {
		t.Errorf("the approved read_file did not run on gw-0, where its turn waited: %q (want %q)", reply, want)
	}
}

// TestE2EReplicasRecordTheirOwnReloads: replicas sharing a state record
// their config reloads apart, so `herald reload` reports what the replica
// it signalled did, not another's.
func TestE2EReplicasRecordTheirOwnReloads(t *testing.T) {
	t.Parallel()
	gws := startReplicas(t, 2, replicaModel(make(chan string, 64)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, g := range gws {
		g.G.Reload(ctx, func() (*config.Config, error) { return nil, fmt.Errorf("herald.json5:3:1: broken on gw-%d", i) })
	}
	for i, g := range gws {
		res, ok, err := gateway.LastReload(ctx, g.G.Store(), g.G.ReplicaID())
		want := fmt.Sprintf("herald.json5:3:1: broken on gw-%d", i)
		if err != nil || !ok || res.Seq != 1 || res.Result != "rejected" || len(res.Errors) != 1 || res.Errors[0] != want {
			t.Errorf("gw-%d's recorded reload = %+v, %v, %v; want its own rejection %q, the first", i, res, ok, err, want)
		}
	}
}

// TestE2EReplicaStandsBy: a second gateway started under the replicaId of
// one that runs listens and answers /readyz with 503 "standby" naming the
// holder, refuses messages with 503, and takes over once the first stops.
func TestE2EReplicaStandsBy(t *testing.T) {
	if !pgtest.OnPostgres() {
		t.Skip("replicas share a PostgreSQL state (the PostgreSQL run of the suite)")
	}
	url := pgtest.URL(t)
	same := func(c *config.Config) { c.Gateway.ReplicaID = "gw-same"; c.State.LeaseSeconds = 2 }
	h := replicaModel(make(chan string, 64))
	dirA, dirB := t.TempDir(), t.TempDir()
	pgURLs.Store(dirA, url)
	pgURLs.Store(dirB, url)
	a := newTestGatewayIn(t, dirA, replicaConfig, h, same)
	testNoWaitReady = true
	b := newTestGatewayIn(t, dirB, replicaConfig, h, same)
	testNoWaitReady = false

	waitReadyzStatus(t, b.URL, "standby", "another process runs as replica gw-same")
	resp, err := http.Post(b.URL+"/api/messages", "application/json", strings.NewReader(`{"client":"ann","text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("POST to the standby: %s, Retry-After %q; want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	a.Stop()
	b.waitReady(t)
	webPost(t, b.URL, "ann", "after the takeover")
	waitText(t, b, "ann", "plain answer to: after the takeover")
}
