package gateway_test

import (
	"context"

	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/store"
)

// threeParts is a message Telegram takes in three parts.
var threeParts = strings.Repeat("a", 4000) + "\n" + strings.Repeat("b", 4000) + "\n" + strings.Repeat("c", 4000)

func partsConfig(tf *tgfake.Server, uncertain string) string {
	return fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { demo: { api: "demo" } } },
  channels: {
    telegram: { enabled: true, botToken: %q, apiUrl: %q, uncertainDelivery: %q },
    web: { enabled: false },
  },
}`, tgToken, tf.URL(), uncertain)
}

// seedOutbox queues text to Telegram chat 555 in a fresh state dir, with
// progress as a crashed gateway would have left it: partsSent parts on the
// platform and, if sending ≥ 0, that part's send started with no outcome.
func seedOutbox(t *testing.T, text string, partsSent, sending int) string {
	t.Helper()
	return seedOutboxTo(t, channels.Origin{Channel: "telegram", ChatID: "555", ChatType: channels.ChatDM}, text, partsSent, sending)
}

func seedOutboxTo(t *testing.T, to channels.Origin, text string, partsSent, sending int) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db := openTestStore(t, dir)
	defer db.Close()
	it := &store.OutboxItem{Origin: to, Kind: channels.KindReply, Text: text}
	if _, err := db.EnqueueOutbox(ctx, it); err != nil {
		t.Fatal(err)
	}
	for p := range partsSent {
		if err := db.EndPart(ctx, it.ID, p, fmt.Sprint(p+1)); err != nil {
			t.Fatal(err)
		}
	}
	if sending >= 0 {
		if err := db.BeginPart(ctx, it.ID, sending); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sentTexts(sent []tgfake.Sent) []string {
	var out []string
	for _, s := range sent {
		out = append(out, s.Text[:1])
	}
	return out
}

// TestE2EOutboxResumesPartsAfterARateLimit: a 429 on the second part of a
// three-part message is waited out and the message resumes at that part —
// each part on Telegram once, in order.
func TestE2EOutboxResumesPartsAfterARateLimit(t *testing.T) {
	t.Parallel()
	tf := tgfake.New(t, tgToken)
	tf.FailNextAfter(1, 1, 429, 1)
	tg := newTestGatewayIn(t, seedOutbox(t, threeParts, 0, -1), partsConfig(tf, "resend"), nil)
	sent := waitTelegram(t, tf, 3)
	tg.waitDelivered(t, 1)
	if got := strings.Join(sentTexts(tf.Sent()), ""); got != "abc" {
		t.Errorf("parts on Telegram: %s (from %d sends), want abc", got, len(sent))
	}
}

// TestE2EUncertainPartOnTelegram: after a crash during the send of part 2
// (part 1 recorded, part 2 started), channels.telegram.uncertainDelivery
// decides: "resend" sends parts 2 and 3, "skip" only part 3; both are
// counted in herald_outbox_uncertain_total.
func TestE2EUncertainPartOnTelegram(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ setting, want string }{{"resend", "bc"}, {"skip", "c"}} {
		t.Run(tc.setting, func(t *testing.T) {
			tf := tgfake.New(t, tgToken)
			tg := newTestGatewayIn(t, seedOutbox(t, threeParts, 1, 1), partsConfig(tf, tc.setting), nil)
			tg.waitDelivered(t, 1)
			if got := strings.Join(sentTexts(tf.Sent()), ""); got != tc.want {
				t.Errorf("parts sent after the restart: %s, want %s", got, tc.want)
			}
			if v := tg.metric(t, fmt.Sprintf(`herald_outbox_uncertain_total{action=%q,channel="telegram"}`, tc.setting)); v != 1 {
				t.Errorf("uncertain metric = %v, want 1", v)
			}
			it, err := tg.G.Store().(*store.DB).GetOutbox(context.Background(), 1)
			if err != nil || it.PartsSent != 3 || it.SendingPart != -1 || len(it.PartIDs) != 3 {
				t.Errorf("outbox row after delivery: %+v, %v; want 3 parts recorded", it, err)
			}
		})
	}
}

// TestE2EUncertainPartOnSlackIsLookedUp: the gateway died after Slack
// accepted a post but before the outbox recorded it. After the restart the
// post is found by its metadata and not posted again; a post Slack never
// got is sent.
func TestE2EUncertainPartOnSlackIsLookedUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		onSlack    bool
		wantPosts  int
		wantAction string
	}{{"accepted before the crash", true, 1, "found"}, {"never reached Slack", false, 1, "resend"}} {
		t.Run(tc.name, func(t *testing.T) {
			sf := slackfake.New(t)
			to := channels.Origin{Channel: "slack", ChatID: "C1", ChatType: channels.ChatGroup, ThreadID: "1700000001.000100"}
			dir := seedOutboxTo(t, to, "the answer", 0, 0)
			if tc.onSlack {
				sf.Remember(slackfake.Post{Channel: "C1", ThreadTS: to.ThreadID, Text: "the answer",
					Metadata: `{"event_type":"herald_message","event_payload":{"outbox_id":"1","part":1}}`})
			}
			tg := newTestGatewayIn(t, dir, fmt.Sprintf(`{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { demo: { api: "demo" } } },
  channels: {
    slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } },
    web: { enabled: false },
  },
}`, slackfake.BotToken, slackfake.AppToken, sf.URL()), nil)
			tg.waitDelivered(t, 1)
			if n := len(sf.Posted()); n != tc.wantPosts {
				t.Errorf("Slack shows %d posts of the message, want %d", n, tc.wantPosts)
			}
			if v := tg.metric(t, fmt.Sprintf(`herald_outbox_uncertain_total{action=%q,channel="slack"}`, tc.wantAction)); v != 1 {
				t.Errorf("uncertain metric (%s) = %v, want 1", tc.wantAction, v)
			}
		})
	}
}

// The outbox's "rate limited" line names the session and agent.
func TestE2EOutboxLogLinesNameTheSession(t *testing.T) {
	tf := tgfake.New(t, tgToken)
	tf.FailNext(1, 429, 1)
	core, logs := observer.New(zapcore.InfoLevel)
	testLogger = zap.New(core)
	tg := newTestGatewayIn(t, t.TempDir(), partsConfig(tf, "resend"), nil)
	testLogger = nil
	tf.SendText(555, "private", 0, 555, "hello")
	waitTelegram(t, tf, 1)
	tg.waitDelivered(t, 1)
	lines := logs.FilterMessage("rate limited; will retry").All()
	if len(lines) == 0 {
		t.Fatal("no rate-limited line was logged")
	}
	f := lines[0].ContextMap()
	if f["sessionKey"] != "agent:main:telegram:dm:555" || f["agentId"] != "main" || f["channel"] != "telegram" {
		t.Errorf("rate-limited line fields %v, want sessionKey, agentId and channel", f)
	}
}
