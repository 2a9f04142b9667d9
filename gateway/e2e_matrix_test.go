package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
	"github.com/heraldhq/herald/store"
)

// matrixGatewayConfig is a gateway with only the Matrix channel, in open
// group mode (a mention is required in groups), thread replies on inbound
// threads, and one Anthropic provider served by the fake LLM.
const matrixGatewayConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: %q, apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q,
      autoJoin: true, threadReplies: "inbound", groupPolicy: "open" },
    web: { enabled: false },
  },
}`

// startMatrixGateway runs a whole gateway whose Matrix channel logs in as
// bot on hs, until the test ends.
func startMatrixGateway(t *testing.T, hs *matrixtest.Homeserver, bot *mautrix.Client, llm *llmtest.Server) *gateway.Gateway {
	t.Helper()
	g, _ := runMatrixGateway(t, fmt.Sprintf(matrixGatewayConfig, llm.URL, hs.URL, bot.UserID, bot.AccessToken), t.TempDir())
	return g
}

// runMatrixGateway runs a whole gateway on the config src with its state in
// dir; stop ends it and waits (also at the test's end), so a test can start
// another on the same state.
func runMatrixGateway(t *testing.T, src, dir string) (g *gateway.Gateway, stop func()) {
	t.Helper()
	cfg, err := config.Parse("e2e-matrix.json5", []byte(src), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err = gateway.New(context.Background(), gateway.Options{
		Config: cfg, StateDir: dir, Listener: ln,
		Logger:    zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		Providers: providers.Options{BackoffBase: time.Millisecond},
	})
	if err != nil {
		ln.Close()
		t.Fatalf("gateway.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("gateway did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	return g, stop
}

// relationsCounter puts a reverse proxy in front of hs that counts the
// thread-relations reads (GET …/relations/…) going through it; the gateway
// is pointed at the returned homeserver, the people's clients stay on hs.
func relationsCounter(t *testing.T, hs *matrixtest.Homeserver) (*matrixtest.Homeserver, func() int64) {
	t.Helper()
	var n atomic.Int64
	return proxiedHomeserver(t, hs, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/relations/") {
			n.Add(1)
		}
		return false
	}), n.Load
}

// proxiedHomeserver puts a reverse proxy in front of hs that shows each
// request to intercept first: when it returns true it has answered the
// request itself. The gateway is pointed at the returned homeserver.
func proxiedHomeserver(t *testing.T, hs *matrixtest.Homeserver, intercept func(http.ResponseWriter, *http.Request) bool) *matrixtest.Homeserver {
	t.Helper()
	target, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		w.WriteHeader(http.StatusBadGateway) // a /sync cancelled at the gateway's stop: nothing to log
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !intercept(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &matrixtest.Homeserver{URL: srv.URL}
}

// spawningModel is the fake LLM: asked to "research", the main agent spawns
// sub-agents alpha and beta and then says so; any other message gets a plain
// answer echoing it. Sub-agents answer their task and the announce step in
// the Result/Notes form.
func spawningModel(c llmtest.Call) llmtest.Reply {
	last := c.LastUser()
	if strings.Contains(c.System, "Sub-agent context") {
		if strings.Contains(last, "Announce step") {
			task := "?"
			if i := strings.Index(c.System, "- Task: "); i >= 0 {
				task, _, _ = strings.Cut(c.System[i+len("- Task: "):], "\n")
			}
			return llmtest.Reply{Text: "Result:\nfindings for " + task + "\n\nNotes:\n(none)"}
		}
		return llmtest.Reply{Text: "worked on " + last}
	}
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == agent.RoleTool {
		return llmtest.Reply{Text: "Started alpha and beta; their results will follow in this thread."}
	}
	if strings.Contains(last, "research") && slices.Contains(c.Tools, "sessions_spawn") {
		return llmtest.Reply{ToolCalls: []agent.ToolCall{
			{Name: "sessions_spawn", Args: []byte(`{"task":"A: look at the first half","label":"alpha"}`)},
			{Name: "sessions_spawn", Args: []byte(`{"task":"B: look at the second half","label":"beta"}`)},
		}}
	}
	return llmtest.Reply{Text: "plain answer to: " + last}
}

// groupRoom is a room alice made with carol and the bot in it (a third
// member makes it a group), once both have joined (the gateway auto-joins
// on invite).
func groupRoom(t *testing.T, alice, carol *mautrix.Client, bot id.UserID) id.RoomID {
	t.Helper()
	room := matrixtest.CreateRoomWith(t, alice, bot, carol.UserID)
	if _, err := carol.JoinRoomByID(t.Context(), room); err != nil {
		t.Fatalf("carol joins %s: %v", room, err)
	}
	matrixtest.WaitJoined(t, alice, room, carol.UserID)
	matrixtest.WaitJoined(t, alice, room, bot)
	return room
}

func matrixBody(evt *event.Event) string {
	if msg, ok := evt.Content.Parsed.(*event.MessageEventContent); ok {
		return msg.Body
	}
	return ""
}

// TestE2EMatrixThreads drives the whole gateway through a real Dendrite the
// way people in a group room would: a mention in a thread gets the agent's
// reply and both sub-agent announces in that thread and nowhere else, and a
// second thread in the same room is a separate conversation, given the
// thread's earlier messages on its first turn only.
func TestE2EMatrixThreads(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	carol := hs.RegisterUser(t, "carol") // a third member makes the room a group
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, spawningModel)
	proxied, relationReads := relationsCounter(t, hs)
	g := startMatrixGateway(t, proxied, bot, llm)

	room := groupRoom(t, alice, carol, bot.UserID)

	// Thread 1: a root nobody addresses to the bot, then a mention in its thread.
	root1 := matrixtest.Post(t, alice, room, "planning thread")
	matrixtest.PostInThread(t, alice, room, root1, "herald: please research both halves", bot.UserID)

	got := matrixtest.WaitThreadMessages(t, alice, room, root1, bot.UserID, 3)
	var reply, alpha, beta int
	for _, evt := range got {
		b := matrixBody(evt)
		switch {
		case strings.Contains(b, "Started alpha and beta"):
			reply++
		case strings.HasPrefix(b, "Status: success\nTask: alpha\n"):
			alpha++
			if !strings.Contains(b, "findings for A: look at the first half") {
				t.Errorf("alpha announce lacks its result:\n%s", b)
			}
		case strings.HasPrefix(b, "Status: success\nTask: beta\n"):
			beta++
			if !strings.Contains(b, "findings for B: look at the second half") {
				t.Errorf("beta announce lacks its result:\n%s", b)
			}
		default:
			t.Errorf("unexpected bot message in thread 1: %q", b)
		}
	}
	if reply != 1 || alpha != 1 || beta != 1 {
		t.Fatalf("thread 1 got reply×%d, alpha announce×%d, beta announce×%d; want one each", reply, alpha, beta)
	}

	// Thread 2 in the same room: its own session, its own answer. Alice
	// and Carol talk in it first; the bot, first addressed mid-thread, is
	// given their messages with their names (SPEC §21 thread context).
	root2 := matrixtest.Post(t, alice, room, "another topic")
	matrixtest.PostInThread(t, carol, room, root2, "I vote for the weather")
	matrixtest.PostInThread(t, alice, room, root2, "herald: what is the weather", bot.UserID)
	got2 := matrixtest.WaitThreadMessages(t, alice, room, root2, bot.UserID, 1)
	if b := matrixBody(got2[0]); !strings.HasPrefix(b, "plain answer to: ") || !strings.HasSuffix(b, "what is the weather") {
		t.Errorf("thread 2 reply = %q, want the answer to its own question", b)
	}
	asked := 0
	for _, c := range llm.Requests() {
		last := c.LastUser()
		if !strings.Contains(last, "what is the weather") {
			continue
		}
		asked++
		if len(c.Messages) != 1 {
			t.Errorf("thread 2's model call carries %d messages, want only its own question (no history from thread 1)", len(c.Messages))
		}
		a, b, q := strings.Index(last, "(alice): another topic"), strings.Index(last, "(carol): I vote for the weather"), strings.LastIndex(last, "what is the weather")
		if a < 0 || b < a || q < b || strings.Contains(last, "planning thread") {
			t.Errorf("thread 2's model call lacks its thread's earlier messages in order (or has thread 1's):\n%s", last)
		}
	}
	if asked != 1 {
		t.Errorf("thread 2's question reached the model %d times, want 1", asked)
	}

	// A second turn in thread 2: the earlier messages are in the first
	// turn's transcript already; they are not given again, and the thread
	// is not read again from the homeserver.
	reads := relationReads()
	if reads == 0 {
		t.Errorf("no thread relations were read through the homeserver for thread context")
	}
	matrixtest.PostInThread(t, alice, room, root2, "herald: and tomorrow?", bot.UserID)
	got2 = matrixtest.WaitThreadMessages(t, alice, room, root2, bot.UserID, 2)
	if b := matrixBody(got2[1]); !strings.HasPrefix(b, "plain answer to: ") || !strings.HasSuffix(b, "and tomorrow?") || strings.Contains(b, "weather") {
		t.Errorf("thread 2's second reply = %q, want the answer to its second question alone", b)
	}
	assertThreadContextOnce(t, llm, "and tomorrow?", "(carol): I vote for the weather")
	if now := relationReads(); now != reads {
		t.Errorf("the thread's relations were read %d more times on the second turn, want 0", now-reads)
	}

	// Nothing from the bot outside the two threads, nothing twice.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, err := matrixtest.RoomMessages(ctx, alice, room)
	if err != nil {
		t.Fatalf("read room %s: %v", room, err)
	}
	perRoot := map[id.EventID]int{}
	for _, evt := range all {
		if evt.Sender != bot.UserID {
			continue
		}
		root := matrixtest.ThreadRoot(evt)
		perRoot[root]++
		if strings.HasPrefix(matrixBody(evt), "Status:") && root != root1 {
			t.Errorf("announce outside thread 1 (thread %q): %q", root, matrixBody(evt))
		}
	}
	if perRoot[root1] != 3 || perRoot[root2] != 2 || len(perRoot) != 2 {
		t.Errorf("bot messages per thread = %v; want 3 in %s, 2 in %s, none elsewhere", perRoot, root1, root2)
	}

	// The store: two requester sessions, one per thread; both runs belong to thread 1.
	key1 := fmt.Sprintf("agent:main:matrix:group:%s:thread:%s", room, root1)
	key2 := fmt.Sprintf("agent:main:matrix:group:%s:thread:%s", room, root2)
	sessions, err := g.Store().ListSessions(ctx, store.SessionFilter{Kind: store.KindMain})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range sessions {
		keys = append(keys, s.Key)
	}
	slices.Sort(keys)
	want := []string{key1, key2}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("requester sessions = %q, want %q", keys, want)
	}
	runs, err := g.Store().ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, r := range runs {
		labels = append(labels, r.Label)
		if r.RequesterKey != key1 || r.Origin.ThreadID != string(root1) || r.Status != store.StatusDone || r.Outcome != store.OutcomeSuccess {
			t.Errorf("run %s (%s): requester %q thread %q %s/%s; want %q, thread %s, done/success",
				r.ID, r.Label, r.RequesterKey, r.Origin.ThreadID, r.Status, r.Outcome, key1, root1)
		}
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"alpha", "beta"}) {
		t.Errorf("run labels = %q, want alpha and beta", labels)
	}
}

// assertThreadContextOnce checks the model call for the turn whose message
// is question: the message reaches the model without thread context, and
// the thread's earlier message appears once in the people's messages of the
// whole call (in the first turn's message, kept in the transcript).
func assertThreadContextOnce(t *testing.T, llm *llmtest.Server, question, earlier string) {
	t.Helper()
	calls := 0
	for _, c := range llm.Requests() {
		last := c.LastUser()
		if !strings.Contains(last, question) {
			continue
		}
		calls++
		if strings.Contains(last, "Quoted context") || strings.Contains(last, earlier) {
			t.Errorf("the later turn's message was given the thread's earlier messages again:\n%s", last)
		}
		seen := 0
		for _, m := range c.Messages {
			if m.Role == agent.RoleUser {
				seen += strings.Count(m.Text, earlier)
			}
		}
		if seen != 1 {
			t.Errorf("the later turn's model call holds %q %d times, want once (from the first turn's transcript)", earlier, seen)
		}
	}
	if calls != 1 {
		t.Errorf("%q reached the model %d times, want 1", question, calls)
	}
}

// TestE2EMatrixDMKeyedByPerson: a Matrix DM is its person's conversation,
// not the room's (issue 35). Alice tells the bot a secret in a two-member
// room, invites Mallory and leaves; the room is a two-member room again.
// Mallory's message there starts a conversation of her own: the model sees
// none of Alice's history.
func TestE2EMatrixDMKeyedByPerson(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	mallory := hs.RegisterUser(t, "mallory")
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, spawningModel)
	startMatrixGateway(t, hs, bot, llm)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)

	matrixtest.Post(t, alice, room, "my secret word is pineapple")
	matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 1)

	matrixtest.HandOver(t, alice, mallory, room)
	matrixtest.Post(t, mallory, room, "what did alice tell you?")
	got := matrixtest.WaitThreadMessages(t, mallory, room, "", bot.UserID, 2)
	if b := matrixBody(got[1]); b != "plain answer to: what did alice tell you?" {
		t.Fatalf("the bot answered mallory %q", b)
	}
	asked := 0
	for _, c := range llm.Requests() {
		if !strings.Contains(c.LastUser(), "what did alice tell you?") {
			continue
		}
		asked++
		if strings.Contains(string(c.Body), "pineapple") {
			t.Errorf("mallory's turn was given alice's history:\n%s", c.Body)
		}
	}
	if asked != 1 {
		t.Errorf("mallory's message reached the model %d times, want 1", asked)
	}
}

// TestE2EMatrixDMReplyOutlastsMemberListError: a DM reply is posted only
// after the homeserver's member list shows the room is still a DM with the
// person. When that list cannot be read for a moment (a proxy answering
// 502 just as the reply goes out), the reply waits in the outbox and is
// delivered on a retry; it was marked failed for good before.
func TestE2EMatrixDMReplyOutlastsMemberListError(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")
	var (
		armed  atomic.Int64 // unix nanoseconds the outage began; 0 = none
		failed atomic.Int64
	)
	proxied := proxiedHomeserver(t, hs, func(w http.ResponseWriter, r *http.Request) bool {
		// The outage: every member-list read fails until two have failed
		// (the client retries once itself) and a second has passed.
		at := armed.Load()
		if at == 0 || !strings.HasSuffix(r.URL.Path, "/joined_members") ||
			(failed.Load() >= 2 && time.Since(time.Unix(0, at)) > time.Second) {
			return false
		}
		failed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(`{"errcode":"M_UNKNOWN","error":"bad gateway"}`))
		return true
	})
	llm := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		if strings.Contains(c.LastUser(), "during the outage") {
			armed.CompareAndSwap(0, time.Now().UnixNano())
		}
		return spawningModel(c)
	})
	startMatrixGateway(t, proxied, bot, llm)
	room := matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)

	matrixtest.Post(t, alice, room, "hello before")
	matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 1)
	matrixtest.Post(t, alice, room, "a question during the outage")
	got := matrixtest.WaitThreadMessages(t, alice, room, "", bot.UserID, 2)
	if b := matrixBody(got[1]); b != "plain answer to: a question during the outage" {
		t.Fatalf("the bot answered %q", b)
	}
	if n := failed.Load(); n < 2 {
		t.Fatalf("the member list failed %d times, want the reply's first attempt to meet the outage", n)
	}
}
