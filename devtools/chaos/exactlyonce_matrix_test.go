package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	// A request a killed gateway hung up on is not an error worth a log line.
	hp.proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() == nil {
			t.Logf("proxy: %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	proxy := httptest.NewServer(hp)
	// Closed after the rig's cleanups have killed the gateway (cleanups run
	// last-registered first): a running gateway holds a /sync long poll
	// open through the proxy, and Close waits for it (30 s).
	t.Cleanup(proxy.Close)

	r := newRig(t, 0, harness.Config{MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2,
		Channels: fmt.Sprintf("matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q }",
			proxy.URL, bot.UserID, bot.AccessToken)})
	start, waitUntil := r.start, r.waitUntil
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
	waitUntil("the outbox to settle after the restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if n := replies(); n != 1 {
		t.Fatalf("the room shows the reply %d times, want once", n)
	}
}
