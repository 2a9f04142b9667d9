//go:build goolm

package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

// matrixE2EEConfig is matrixGatewayConfig with encryption on.
const matrixE2EEConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" }, shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: %q, apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m" }, list: [{ id: "main" }] },
  channels: {
    matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q,
      autoJoin: true, threadReplies: "inbound", groupPolicy: "open", encryption: true },
    web: { enabled: false },
  },
}`

// runE2EEGateway runs a gateway with an encrypting Matrix channel on the
// state in dir; the returned stop ends it and waits (also at the test's end).
func runE2EEGateway(t *testing.T, dir string, hs *matrixtest.Homeserver, bot *mautrix.Client, llm *llmtest.Server) (stop func()) {
	t.Helper()
	_, stop = runMatrixGateway(t, fmt.Sprintf(matrixE2EEConfig, llm.URL, hs.URL, bot.UserID, bot.AccessToken), dir)
	return stop
}

// finalText is what a person sees for a message: the last edit's text when
// it was edited (streaming), else its body.
func finalTexts(msgs []matrixtest.Decrypted) map[id.EventID]string {
	out := map[id.EventID]string{}
	for _, m := range msgs {
		msg := m.Content.AsMessage()
		if ref := msg.RelatesTo.GetReplaceID(); ref != "" && msg.NewContent != nil {
			out[ref] = msg.NewContent.Body
			continue
		}
		if _, edited := out[m.ID]; !edited {
			out[m.ID] = msg.Body
		}
	}
	return out
}

// TestE2EMatrixEncrypted drives the whole gateway through Dendrite in an
// encrypted group room, as Element users would: a mention in a thread gets
// the agent's reply and both sub-agent announces in that thread, every one
// of them encrypted. After a gateway restart the bot is the same device
// (same keys) and reads the next message in the thread on the Megolm
// session it got before the restart.
func TestE2EMatrixEncrypted(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "alice"))
	carol := matrixtest.NewE2EE(t, hs.RegisterUser(t, "carol")) // a third member makes the room a group
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, spawningModel)
	dir := t.TempDir()
	proxied, relationReads := relationsCounter(t, hs)
	stop := runE2EEGateway(t, dir, proxied, bot, llm)

	room := alice.CreateEncryptedRoom(t, bot.UserID, carol.UserID)
	if _, err := carol.JoinRoomByID(t.Context(), room); err != nil {
		t.Fatalf("carol joins %s: %v", room, err)
	}
	alice.WaitMember(t, room, carol.UserID)
	alice.WaitMember(t, room, bot.UserID) // the gateway auto-joins on invite

	root := alice.PostEncrypted(t, room, "", "planning thread")
	alice.PostEncrypted(t, room, root, "herald: please research both halves", bot.UserID)

	inThread := func(m matrixtest.Decrypted) bool { return matrixtest.ThreadRoot(m.Event) == root }
	var texts map[id.EventID]string
	var posts []matrixtest.Decrypted
	matrixtest.Eventually(t, "the reply and both announces, decrypted, in the thread", func(ctx context.Context) (bool, error) {
		all, _, err := alice.Messages(ctx, room)
		if err != nil {
			return false, err
		}
		posts = posts[:0]
		var mine []matrixtest.Decrypted
		for _, m := range all {
			if m.Sender != bot.UserID {
				continue
			}
			mine = append(mine, m)
			if inThread(m) {
				posts = append(posts, m)
			}
		}
		texts = finalTexts(mine)
		return spawnAnswered(posts, texts), nil
	})
	if len(posts) != 3 {
		t.Errorf("the bot posted %d messages in the thread, want 3 (reply, two announces)", len(posts))
	}
	for _, p := range posts {
		if !p.Encrypted {
			t.Errorf("bot message %s in the encrypted thread went out in clear text: %q", p.ID, texts[p.ID])
		}
	}
	// Carol, another member's device, reads them too.
	carolSees := carol.WaitMessages(t, room, bot.UserID, 3, func(m matrixtest.Decrypted) bool { return inThread(m) && m.Encrypted })
	if len(carolSees) < 3 {
		t.Fatalf("carol decrypted %d of the bot's thread messages", len(carolSees))
	}

	// Thread context: Carol and Alice talk in a second thread, encrypted;
	// the bot, first addressed mid-thread, is given their messages (the
	// keys it holds decrypt them) with their names.
	root2 := alice.PostEncrypted(t, room, "", "another topic")
	carol.WaitMember(t, room, bot.UserID)
	carol.PostEncrypted(t, room, root2, "I vote for the weather")
	alice.PostEncrypted(t, room, root2, "herald: what is the weather", bot.UserID)
	alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool {
		return matrixtest.ThreadRoot(m.Event) == root2 && strings.HasPrefix(m.Body(), "plain answer to: ")
	})
	asked := 0
	for _, c := range llm.Requests() {
		last := c.LastUser()
		if !strings.Contains(last, "what is the weather") {
			continue
		}
		asked++
		a, b, q := strings.Index(last, "(alice): another topic"), strings.Index(last, "(carol): I vote for the weather"), strings.LastIndex(last, "what is the weather")
		if a < 0 || b < a || q < b {
			t.Errorf("the encrypted thread's earlier messages did not reach the model in order:\n%s", last)
		}
	}
	if asked != 1 {
		t.Errorf("the second thread's question reached the model %d times, want 1", asked)
	}

	// A second turn in that thread: its earlier messages are not given
	// again, nor read again from the homeserver.
	reads := relationReads()
	if reads == 0 {
		t.Errorf("no thread relations were read through the homeserver for thread context")
	}
	alice.PostEncrypted(t, room, root2, "herald: and tomorrow?", bot.UserID)
	alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool {
		return matrixtest.ThreadRoot(m.Event) == root2 && strings.HasPrefix(m.Body(), "plain answer to: ") && strings.HasSuffix(m.Body(), "and tomorrow?")
	})
	assertThreadContextOnce(t, llm, "and tomorrow?", "(carol): I vote for the weather")
	if now := relationReads(); now != reads {
		t.Errorf("the thread's relations were read %d more times on the second turn, want 0", now-reads)
	}

	// Restart: the same device, keys and sessions. Alice's next message
	// goes out on her Megolm session the bot got before the restart, with
	// no key sent to anyone; the bot reads it and answers on its own
	// session from before the restart, so nobody needs a new room key.
	botSession := posts[0].SessionID
	for _, p := range posts {
		if p.SessionID != botSession {
			t.Errorf("the bot's thread messages came on sessions %s and %s, want one", botSession, p.SessionID)
		}
	}
	before := ownDevices(t, alice.Client, bot.UserID)
	stop()
	runE2EEGateway(t, dir, proxied, bot, llm)
	restartSessions(t, alice, room, root, bot.UserID, botSession, before)
}

// restartSessions checks, after a gateway restart, that the bot still
// reads person's Megolm session of room (a message on it, with no key sent,
// is answered in the thread rooted at root) and answers on its own
// session from before the restart (botSession), as the same device.
func restartSessions(t *testing.T, person *matrixtest.E2EE, room id.RoomID, root id.EventID, bot id.UserID, botSession id.SessionID, devices map[id.DeviceID]id.Ed25519) {
	t.Helper()
	_, personSession := person.PostOnSession(t, room, root, "herald: and after the restart?", bot)
	// It is the session of the person's messages before the restart.
	person.WaitMessages(t, room, person.UserID, 1, func(m matrixtest.Decrypted) bool {
		return m.Encrypted && m.SessionID == personSession && m.Body() != "herald: and after the restart?"
	})
	after := person.WaitMessages(t, room, bot, 1, func(m matrixtest.Decrypted) bool {
		return matrixtest.ThreadRoot(m.Event) == root && strings.HasPrefix(m.Body(), "plain answer to: ") && strings.HasSuffix(m.Body(), "and after the restart?")
	})[0]
	if !after.Encrypted {
		t.Fatalf("the answer after the restart went out in clear text")
	}
	if after.SessionID != botSession {
		t.Errorf("the bot answered after the restart on Megolm session %s, want its session from before the restart %s (the room key was not kept)", after.SessionID, botSession)
	}
	if now := ownDevices(t, person.Client, bot); len(devices) != 1 || fmt.Sprint(now) != fmt.Sprint(devices) {
		t.Fatalf("the bot's devices changed over the restart: before %v, after %v", devices, now)
	}
}

// TestE2EMatrixEncryptedDM drives the whole gateway through Dendrite in an
// encrypted DM (Element's default for a DM): a person's message is
// answered encrypted; asked to research, the agent's reply and both
// sub-agent announces come encrypted in the DM, top-level as the message
// was (threadReplies "inbound"); after a gateway restart the bot is the
// same device, reads her next message on the Megolm session it got before
// the restart, and answers on its own session from before, which she
// decrypts.
func TestE2EMatrixEncryptedDM(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "alice"))
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, spawningModel)
	dir := t.TempDir()
	stop := runE2EEGateway(t, dir, hs, bot, llm)

	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID) // the gateway auto-joins on invite

	alice.PostEncrypted(t, room, "", "hello there")
	hello := alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool {
		return m.Body() == "plain answer to: hello there"
	})[0]
	if !hello.Encrypted {
		t.Fatalf("the answer in the encrypted DM went out in clear text")
	}

	alice.PostEncrypted(t, room, "", "please research both halves")
	var texts map[id.EventID]string
	var posts []matrixtest.Decrypted
	matrixtest.Eventually(t, "the reply and both announces, decrypted, in the DM", func(ctx context.Context) (bool, error) {
		all, _, err := alice.Messages(ctx, room)
		if err != nil {
			return false, err
		}
		posts = posts[:0]
		for _, m := range all {
			if m.Sender == bot.UserID && m.Content.AsMessage().RelatesTo.GetReplaceID() == "" {
				posts = append(posts, m)
			}
		}
		var mine []matrixtest.Decrypted
		for _, m := range all {
			if m.Sender == bot.UserID {
				mine = append(mine, m)
			}
		}
		texts = finalTexts(mine)
		return spawnAnswered(posts, texts), nil
	})
	if len(posts) != 4 {
		t.Errorf("the bot posted %d messages in the DM, want 4 (hello's answer, the reply, two announces)", len(posts))
	}
	for _, p := range posts {
		if !p.Encrypted {
			t.Errorf("bot message %s in the encrypted DM went out in clear text: %q", p.ID, texts[p.ID])
		}
		if root := matrixtest.ThreadRoot(p.Event); root != "" {
			t.Errorf("bot message %s went to thread %s, want top-level in the DM as the message was: %q", p.ID, root, texts[p.ID])
		}
		if p.Encrypted && p.SessionID != hello.SessionID {
			t.Errorf("the bot's DM messages came on sessions %s and %s, want one", hello.SessionID, p.SessionID)
		}
	}

	before := ownDevices(t, alice.Client, bot.UserID)
	stop()
	runE2EEGateway(t, dir, hs, bot, llm)
	restartSessions(t, alice, room, "", bot.UserID, hello.SessionID, before)
}

// ownDevices is the ed25519 key of each device the homeserver lists for user.
func ownDevices(t *testing.T, c *mautrix.Client, user id.UserID) map[id.DeviceID]id.Ed25519 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.QueryKeys(ctx, &mautrix.ReqQueryKeys{DeviceKeys: map[id.UserID]mautrix.DeviceIDList{user: nil}})
	if err != nil {
		t.Fatalf("query keys of %s: %v", user, err)
	}
	out := map[id.DeviceID]id.Ed25519{}
	for dev, k := range resp.DeviceKeys[user] {
		out[dev] = k.Keys.GetEd25519(dev)
	}
	return out
}

// spawnAnswered reports whether posts (with their final texts) hold the
// SPAWN's reply and both sub-agents' announces.
func spawnAnswered(posts []matrixtest.Decrypted, texts map[id.EventID]string) bool {
	var reply, alpha, beta bool
	for _, p := range posts {
		b := texts[p.ID]
		reply = reply || strings.Contains(b, "Started alpha and beta")
		alpha = alpha || strings.HasPrefix(b, "Status: success\nTask: alpha\n") && strings.Contains(b, "findings for A: look at the first half")
		beta = beta || strings.HasPrefix(b, "Status: success\nTask: beta\n") && strings.Contains(b, "findings for B: look at the second half")
	}
	return reply && alpha && beta
}

// TestE2EMatrixPlaintextInEncryptedRoomRefused (issue 35): in an
// encrypted room a plaintext m.room.message is not the room's (anyone the
// homeserver lets send can put it there, and clients show it as
// unencrypted); the gateway refuses it, and answers the encrypted one.
func TestE2EMatrixPlaintextInEncryptedRoomRefused(t *testing.T) {
	hs := matrixtest.Start(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "alice"))
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, spawningModel)
	runE2EEGateway(t, t.TempDir(), hs, bot, llm)

	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	// The same account without its crypto machine: the event goes out as
	// plaintext m.room.message.
	plain, err := mautrix.NewClient(alice.Client.HomeserverURL.String(), alice.Client.UserID, alice.Client.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.SendMessageEvent(ctx, room, event.EventMessage, &event.MessageEventContent{MsgType: event.MsgText, Body: "forged in clear text"}); err != nil {
		t.Fatal(err)
	}
	alice.PostEncrypted(t, room, "", "hello there")
	alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool {
		return m.Body() == "plain answer to: hello there"
	})
	for _, c := range llm.Requests() {
		if strings.Contains(c.LastUser(), "forged in clear text") {
			t.Fatalf("a plaintext message in the encrypted room reached the model: %q", c.LastUser())
		}
	}
}
