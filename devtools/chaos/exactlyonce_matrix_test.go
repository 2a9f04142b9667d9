package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/devtools/harness"
)

// holdingProxy forwards to the homeserver; while hold is set, the first
// message send it sees reaches the homeserver but its answer is withheld
// until the caller hangs up (the gateway is killed meanwhile).
type holdingProxy struct {
	proxy *httputil.ReverseProxy
	hold  atomic.Bool
}

func (p *holdingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/send/m.room.message/") && p.hold.CompareAndSwap(true, false) {
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context()))) // the homeserver has it now
		<-r.Context().Done()
		return
	}
	p.proxy.ServeHTTP(w, r)
}

// TestKillBetweenMatrixPostAndMark: the gateway is killed after the real
// Dendrite accepted its reply but before the gateway heard so. After the
// restart the re-send carries the same transaction id, so the room shows
// the reply once.
func TestKillBetweenMatrixPostAndMark(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short")
	}
	hs := matrixtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := hs.RegisterUser(t, "alice")
	bot := hs.RegisterUser(t, "herald")
	target, err := url.Parse(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	hp := &holdingProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	proxy := httptest.NewServer(hp)
	defer proxy.Close()

	dir := t.TempDir()
	bin, err := harness.BuildHerald(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := harness.StartModel(harness.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, stateDir, logPath := filepath.Join(dir, "herald.json5"), filepath.Join(dir, "state"), filepath.Join(dir, "gateway.log")
	cfg := harness.Config{Listen: addr, ModelURL: model.URL, MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2,
		Channels: fmt.Sprintf("matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q }",
			proxy.URL, bot.UserID, bot.AccessToken)}
	if err := cfg.Write(cfgPath); err != nil {
		t.Fatal(err)
	}
	start := func() *harness.Gateway {
		gw, err := harness.StartGateway(bin, cfgPath, stateDir, logPath, "http://"+addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return gw
	}
	var room id.RoomID
	replies := func() int {
		evts, err := matrixtest.RoomMessages(ctx, alice, room)
		if err != nil {
			return -1
		}
		n := 0
		for _, e := range evts {
			if e.Sender == bot.UserID && e.Content.AsMessage().Body == "ack once" {
				n++
			}
		}
		return n
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; gateway log:\n%s", what, tail(logPath))
			}
		}
	}

	gw := start()
	room = matrixtest.CreateRoomWith(t, alice, bot.UserID)
	matrixtest.WaitJoined(t, alice, room, bot.UserID)
	hp.hold.Store(true)
	matrixtest.Post(t, alice, room, "SAY once")
	waitUntil("the reply to reach the homeserver", func() bool { return replies() == 1 })
	if err := gw.Kill(); err != nil { // Dendrite has the event; the gateway never heard
		t.Fatal(err)
	}

	gw = start()
	defer func() { _ = gw.Kill() }()
	waitUntil("the outbox to settle after the restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if n := replies(); n != 1 {
		t.Fatalf("the room shows the reply %d times, want once", n)
	}
}
