package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
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
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it := &store.OutboxItem{Origin: channels.Origin{Channel: "telegram", ChatID: "555", ChatType: channels.ChatDM}, Kind: channels.KindReply, Text: text}
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
			it, err := tg.G.Store().GetOutbox(context.Background(), 1)
			if err != nil || it.PartsSent != 3 || it.SendingPart != -1 || len(it.PartIDs) != 3 {
				t.Errorf("outbox row after delivery: %+v, %v; want 3 parts recorded", it, err)
			}
		})
	}
}
