// Package matrixtest runs a real Matrix homeserver (Dendrite v0.15.2, built
// by scripts/dendrite.sh into the cache) for tests, and drives it as a person
// would: register users, create rooms, post in threads, wait for replies.
//
// It is test support only: production code must not import it. It never
// reaches beyond 127.0.0.1, and when neither HERALD_DENDRITE_URL nor the
// cached binaries are available, Start skips the test and says how to enable
// it.
package matrixtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/devtools/loopback"
)

// Version is the Dendrite release the helpers expect.
const Version = "v0.15.2"

// EnvURL names an already-running homeserver to use instead of starting one.
// It must allow open registration with m.login.dummy.
const EnvURL = "HERALD_DENDRITE_URL"

// WaitTimeout bounds every wait in this package.
var WaitTimeout = 30 * time.Second

// EnableHint says how to make the Dendrite tests run.
const EnableHint = "run 'scripts/dendrite.sh build' once (builds Dendrite " + Version +
	" into ${HERALD_CACHE:-$HOME/.cache/herald}), or set " + EnvURL + " to a homeserver with open registration"

// Homeserver is a running Matrix homeserver for tests.
type Homeserver struct {
	URL string // base URL, e.g. http://127.0.0.1:40123
	Dir string // data folder of a Dendrite started here; empty for EnvURL

	cmd  *exec.Cmd
	exit chan error
}

// BinDir is where scripts/dendrite.sh build puts the Dendrite binaries.
func BinDir() string {
	root := os.Getenv("HERALD_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		root = filepath.Join(home, ".cache", "herald")
	}
	return filepath.Join(root, "dendrite-"+Version, "bin")
}

// Available reports whether a homeserver can be had, and if not, why.
func Available() (bool, string) {
	if os.Getenv(EnvURL) != "" {
		return true, ""
	}
	for _, b := range []string{"dendrite", "generate-keys", "generate-config"} {
		if _, err := os.Stat(filepath.Join(BinDir(), b)); err != nil {
			return false, fmt.Sprintf("Dendrite binaries not found in %s: %s", BinDir(), EnableHint)
		}
	}
	return true, ""
}

// Start gives the test a homeserver: the one at HERALD_DENDRITE_URL, or a
// fresh Dendrite in a temp folder, stopped when the test ends. Without
// either, it skips the test.
func Start(t testing.TB) *Homeserver {
	t.Helper()
	if ok, why := Available(); !ok {
		t.Skip(why)
	}
	hs, err := Launch(t.TempDir())
	if err != nil {
		t.Fatalf("start homeserver: %v", err)
	}
	t.Cleanup(func() {
		if err := hs.Close(); err != nil {
			t.Errorf("stop homeserver: %v", err)
		}
	})
	return hs
}

// Launch returns the homeserver at HERALD_DENDRITE_URL, or starts Dendrite
// from BinDir with its data in dir, on a free loopback port, and waits until
// it answers. For use in TestMain; call Close when done.
func Launch(dir string) (*Homeserver, error) {
	if u := os.Getenv(EnvURL); u != "" {
		hs := &Homeserver{URL: strings.TrimRight(u, "/")}
		if err := waitVersions(hs.URL, nil); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvURL, u, err)
		}
		return hs, nil
	}
	if ok, why := Available(); !ok {
		return nil, errors.New(why)
	}
	// A loopback address of its own: Dendrite binds it seconds after the
	// port is picked, and no other process takes it meanwhile.
	host, port, err := loopback.HostPort()
	if err != nil {
		return nil, err
	}
	bin := BinDir()
	key := filepath.Join(dir, "matrix_key.pem")
	if out, err := exec.Command(filepath.Join(bin, "generate-keys"), "-private-key", key).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("generate-keys in %s: %w: %s", dir, err, out)
	}
	cfg, err := exec.Command(filepath.Join(bin, "generate-config"), "-ci",
		"-server", fmt.Sprintf("localhost:%d", port), "-dir", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("generate-config in %s: %w", dir, err)
	}
	yaml, err := patchConfig(string(cfg), key)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "dendrite.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", cfgPath, err)
	}
	logf, err := os.Create(filepath.Join(dir, "dendrite.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "dendrite"), "-config", cfgPath,
		"-http-bind-address", net.JoinHostPort(host, fmt.Sprint(port)), "-really-enable-open-registration")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start dendrite: %w", err)
	}
	hs := &Homeserver{URL: "http://" + net.JoinHostPort(host, fmt.Sprint(port)), Dir: dir, cmd: cmd, exit: make(chan error, 1)}
	go func() {
		hs.exit <- cmd.Wait()
		logf.Close()
	}()
	if err := waitVersions(hs.URL, hs.exit); err != nil {
		_ = hs.Close()
		return nil, fmt.Errorf("dendrite on port %d (log %s): %w", port, filepath.Join(dir, "dendrite.log"), err)
	}
	return hs, nil
}

// Close stops a Dendrite started by Launch; a no-op for HERALD_DENDRITE_URL.
func (hs *Homeserver) Close() error {
	if hs.cmd == nil || hs.cmd.Process == nil {
		return nil
	}
	_ = hs.cmd.Process.Signal(os.Interrupt)
	select {
	case <-hs.exit:
	case <-time.After(10 * time.Second):
		_ = hs.cmd.Process.Kill()
		<-hs.exit
	}
	hs.cmd = nil
	return nil
}

var (
	reFederation = regexp.MustCompile(`(?m)^(\s*)disable_federation: false`)
	rePrivateKey = regexp.MustCompile(`(?m)^(\s*)private_key: .*$`)
	reTraceLevel = regexp.MustCompile(`(?m)^(\s*)level: trace`)
)

// patchConfig turns federation off, points at the key file and quiets the
// CI trace logging.
func patchConfig(cfg, keyPath string) (string, error) {
	if !reFederation.MatchString(cfg) {
		return "", errors.New("generate-config output has no 'disable_federation: false' line to patch")
	}
	cfg = reFederation.ReplaceAllString(cfg, "${1}disable_federation: true")
	cfg = rePrivateKey.ReplaceAllString(cfg, "${1}private_key: "+keyPath)
	cfg = reTraceLevel.ReplaceAllString(cfg, "${1}level: warn")
	return cfg, nil
}

// waitVersions polls /_matrix/client/versions until it answers 200.
func waitVersions(base string, exited <-chan error) error {
	deadline := time.Now().Add(WaitTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(base + "/_matrix/client/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s/_matrix/client/versions: %w", base, err)
		}
		select {
		case e := <-exited:
			return fmt.Errorf("homeserver exited during startup: %v", e)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var userSeq atomic.Int64

// Password is the password RegisterUser gives a user with this localpart.
func Password(localpart string) string { return localpart + "-herald-test-password" }

// RegisterUser registers a user through open registration (m.login.dummy)
// and returns a client logged in as them. If name is taken (a shared
// homeserver), a numeric suffix is added: read the user id from the client.
func (hs *Homeserver) RegisterUser(t testing.TB, name string) *mautrix.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	localpart := name
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			localpart = fmt.Sprintf("%s-%d", name, userSeq.Add(1))
		}
		c := hs.newClient(t, "", "")
		resp, err := c.RegisterDummy(ctx, &mautrix.ReqRegister[any]{
			Username: localpart, Password: Password(localpart), InitialDeviceDisplayName: "matrixtest",
		})
		if errors.Is(err, mautrix.MUserInUse) && attempt < 20 {
			continue
		}
		if err != nil {
			t.Fatalf("register %q on %s: %v", localpart, hs.URL, err)
		}
		c.UserID, c.AccessToken, c.DeviceID = resp.UserID, resp.AccessToken, resp.DeviceID
		return c
	}
}

// Client returns a client for an existing user id and access token.
func (hs *Homeserver) Client(t testing.TB, userID id.UserID, token string) *mautrix.Client {
	t.Helper()
	return hs.newClient(t, userID, token)
}

func (hs *Homeserver) newClient(t testing.TB, userID id.UserID, token string) *mautrix.Client {
	t.Helper()
	c, err := mautrix.NewClient(hs.URL, userID, token)
	if err != nil {
		t.Fatalf("mautrix client for %s: %v", hs.URL, err)
	}
	c.Log = zerolog.Nop()
	c.DefaultHTTPRetries = 0
	c.Client = &http.Client{Timeout: 60 * time.Second}
	t.Cleanup(c.Client.CloseIdleConnections)
	return c
}

// CreateRoomWith creates a private room as creator, invites the given users
// and returns its id.
func CreateRoomWith(t testing.TB, creator *mautrix.Client, invite ...id.UserID) id.RoomID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	resp, err := creator.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Invite: invite, Name: "herald test"})
	if err != nil {
		t.Fatalf("%s creates a room inviting %v: %v", creator.UserID, invite, err)
	}
	return resp.RoomID
}

// WaitJoined waits until user is a joined member of room, as c sees it.
func WaitJoined(t testing.TB, c *mautrix.Client, room id.RoomID, user id.UserID) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to join %s", user, room), func(ctx context.Context) (bool, error) {
		resp, err := c.JoinedMembers(ctx, room)
		if err != nil {
			return false, err
		}
		_, ok := resp.Joined[user]
		return ok, nil
	})
}

// HandOver has from invite to into room, to join it and from leave it: a
// two-member room with the bot becomes a two-member room with someone
// else.
func HandOver(t testing.TB, from, to *mautrix.Client, room id.RoomID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if _, err := from.InviteUser(ctx, room, &mautrix.ReqInviteUser{UserID: to.UserID}); err != nil {
		t.Fatalf("%s invites %s to %s: %v", from.UserID, to.UserID, room, err)
	}
	if _, err := to.JoinRoomByID(ctx, room); err != nil {
		t.Fatalf("%s joins %s: %v", to.UserID, room, err)
	}
	if _, err := from.LeaveRoom(ctx, room); err != nil {
		t.Fatalf("%s leaves %s: %v", from.UserID, room, err)
	}
}

// Post sends a top-level m.text to room and returns its event id. mentions
// go into m.mentions.user_ids.
func Post(t testing.TB, c *mautrix.Client, room id.RoomID, text string, mentions ...id.UserID) id.EventID {
	t.Helper()
	return PostInThread(t, c, room, "", text, mentions...)
}

// PostInThread sends an m.text in the thread rooted at root (top-level when
// root is empty) as a thread-aware client does: an m.thread relation with an
// m.in_reply_to fallback to the root. It returns the new event's id.
func PostInThread(t testing.TB, c *mautrix.Client, room id.RoomID, root id.EventID, text string, mentions ...id.UserID) id.EventID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	resp, err := c.SendMessageEvent(ctx, room, event.EventMessage, textContent(root, text, mentions))
	if err != nil {
		t.Fatalf("%s posts %q in %s (thread %q): %v", c.UserID, text, room, root, err)
	}
	return resp.EventID
}

// textContent is an m.text in the thread rooted at root (top-level when
// root is empty), with mentions in m.mentions.
func textContent(root id.EventID, text string, mentions []id.UserID) *event.MessageEventContent {
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: text}
	if len(mentions) > 0 {
		content.Mentions = &event.Mentions{UserIDs: mentions}
	}
	if root != "" {
		content.RelatesTo = &event.RelatesTo{Type: event.RelThread, EventID: root, IsFallingBack: true,
			InReplyTo: &event.InReplyTo{EventID: root}}
	}
	return content
}

// RoomMessages returns up to the last 200 message events of room, oldest
// first, parsed.
func RoomMessages(ctx context.Context, c *mautrix.Client, room id.RoomID) ([]*event.Event, error) {
	resp, err := c.Messages(ctx, room, "", "", mautrix.DirectionBackward, nil, 200)
	if err != nil {
		return nil, err
	}
	var out []*event.Event
	for i := len(resp.Chunk) - 1; i >= 0; i-- {
		evt := resp.Chunk[i]
		if evt.Type != event.EventMessage {
			continue
		}
		evt.RoomID = room
		_ = evt.Content.ParseRaw(evt.Type)
		out = append(out, evt)
	}
	return out, nil
}

// ThreadRoot is the m.thread root of a message event, or "".
func ThreadRoot(evt *event.Event) id.EventID {
	if msg, ok := evt.Content.Parsed.(*event.MessageEventContent); ok {
		return msg.RelatesTo.GetThreadParent()
	}
	return ""
}

// WaitThreadMessages waits until room holds at least n messages from sender
// in the thread rooted at root (root "" means top-level messages), and
// returns all of them, oldest first.
func WaitThreadMessages(t testing.TB, c *mautrix.Client, room id.RoomID, root id.EventID, sender id.UserID, n int) []*event.Event {
	t.Helper()
	var got []*event.Event
	waitFor(t, fmt.Sprintf("%d message(s) from %s in %s thread %q", n, sender, room, root), func(ctx context.Context) (bool, error) {
		evts, err := RoomMessages(ctx, c, room)
		if err != nil {
			return false, err
		}
		got = got[:0]
		for _, evt := range evts {
			if evt.Sender == sender && ThreadRoot(evt) == root {
				got = append(got, evt)
			}
		}
		return len(got) >= n, nil
	})
	return got
}

// waitFor polls cond until it is true or WaitTimeout passes.
func waitFor(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last error: %v)", WaitTimeout, what, lastErr)
}

// Eventually polls cond until it is true, failing the test after
// WaitTimeout with what it waited for.
func Eventually(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	waitFor(t, what, cond)
}
