package chaos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/devtools/harness"
)

// TestKillDuringSlackFileDownloadAndUpload: a person shares chart.png in a
// Slack thread and asks for it back. The gateway is killed twice: while it
// downloads the file (so the message is neither stored nor acknowledged),
// and after Slack shared the file it sends back but before the gateway heard
// so (the outbox did not mark the part). Slack sends the unacknowledged
// message again after the first restart. In the end the turn ran once with
// the file, the thread shows the reply once and the file once: the second
// restart found the share in the thread instead of uploading it again.
func TestKillDuringSlackFileDownloadAndUpload(t *testing.T) {
	sf := slackfake.New(t)
	r := newRig(t, 0, harness.Config{MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2, Extra: smallDiskFloor,
		Channels: fmt.Sprintf("slack: { enabled: true, botToken: %q, appToken: %q, apiUrl: %q, groups: { C1: {} } }",
			slackfake.BotToken, slackfake.AppToken, sf.URL())})
	start, waitUntil := r.start, r.waitUntil
	const thread = "1700000000.000700"
	chart := chartPNG(t)
	sum := sha256.Sum256(chart)
	chartSHA := hex.EncodeToString(sum[:])
	file := sf.AddFile("chart.png", "image/png", chart)
	ts := sf.NextTS()
	// mention sends the person's message; Slack sends the same event
	// again when the first envelope was never acknowledged.
	mention := func() string {
		m := slackfake.MentionEvent("C1", slackfake.UserID, "<@"+slackfake.BotUserID+"> SENDBACK chart.png", ts, thread)
		m["files"], m["upload"] = []map[string]any{sf.FileObject(file)}, true
		env := sf.SendEvent(m)
		if env == "" {
			t.FailNow()
		}
		return env
	}
	inThread := func(text string) (n int) {
		for _, p := range sf.Posted() {
			if p.ThreadTS == thread && strings.Contains(p.Text, text) {
				n++
			}
		}
		return n
	}
	shares := func() (n int) {
		for _, u := range sf.Uploads() {
			if u.Channel == "C1" && u.ThreadTS == thread && u.SHA256 == chartSHA {
				n++
			}
		}
		return n
	}
	kill := func(gw *harness.Gateway) {
		t.Helper()
		if err := gw.Kill(); err != nil {
			t.Fatal(err)
		}
		waitUntil("Slack to see the connection gone", func() bool { return !sf.Connected() })
	}

	// 1. Killed while the file downloads.
	gw := start()
	waitUntil("the Slack connection", sf.Connected)
	sf.StallDownloads(1)
	first := mention()
	waitUntil("the gateway to start downloading the file", func() bool { return sf.StalledDownloads() == 1 })
	kill(gw)
	if sf.Acked(first) {
		t.Fatal("the gateway acknowledged the message before its file was stored: Slack would not send it again, and it is lost")
	}

	// 2. Slack sends the message again; killed once Slack shared the file
	// going back, before the gateway heard so.
	sf.HoldNextCompletes(1)
	gw = start()
	waitUntil("the Slack connection after the restart", sf.Connected)
	mention()
	waitUntil("the file going back to reach Slack", func() bool { return shares() == 1 })
	kill(gw)

	// 3. The outbox resumes: the share is looked up, not uploaded again.
	gw = start()
	waitUntil("the outbox to settle after the second restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if v := metric(t, gw.Base, `herald_outbox_uncertain_total{action="found",channel="slack"}`); v != 1 {
		t.Errorf("herald_outbox_uncertain_total{found,slack} = %v, want 1 (the share looked up in the thread)", v)
	}
	if n := shares(); n != 1 {
		t.Errorf("the thread shows chart.png %d times, want once", n)
	}
	if n := inThread("sent chart.png"); n != 1 {
		t.Errorf("the thread shows the reply %d times, want once; posts: %+v", n, sf.Posted())
	}
	if n := inThread("no file") + inThread("📎"); n != 0 {
		t.Errorf("the file did not reach the turn whole: %+v", sf.Posted())
	}
	if n := r.model.SendBackAnswers("chart.png"); n != 1 {
		t.Errorf("the model was asked about the message %d times, want once", n)
	}
	if served, _ := sf.Downloads(); served != 1 {
		t.Errorf("the file was downloaded whole %d times, want once (after the first restart)", served)
	}
}

// TestKillDuringTelegramFileDownloadAndSend: the same on Telegram, with
// uncertainDelivery "skip". Killed while it downloads the person's file,
// the gateway had not confirmed the update, so Telegram hands it over again
// after the restart. Killed after Telegram posted the file going back but
// before the gateway heard so, the gateway cannot look the post up: by the
// skip policy it does not send it again. The chat shows the reply once and
// the file once, and the turn ran once.
func TestKillDuringTelegramFileDownloadAndSend(t *testing.T) {
	const chat = 555
	tf := tgfake.New(t, tgToken)
	r := newRig(t, 0, harness.Config{MainConcurrent: 2, Subagents: 2, Children: 5, GraceSeconds: 2, Extra: smallDiskFloor,
		Channels: fmt.Sprintf("telegram: { enabled: true, botToken: %q, apiUrl: %q, uncertainDelivery: \"skip\" }", tgToken, tf.URL())})
	start, waitUntil := r.start, r.waitUntil
	chart := chartPNG(t)
	sum := sha256.Sum256(chart)
	chartSHA := hex.EncodeToString(sum[:])
	files := func() (n int) {
		for _, f := range tf.SentFiles() {
			if f.ChatID == chat && f.SHA256 == chartSHA {
				n++
			}
		}
		return n
	}
	said := func(text string) (n int) {
		for _, s := range tf.Sent() {
			if s.ChatID == chat && strings.Contains(s.Text, text) {
				n++
			}
		}
		return n
	}

	// 1. Killed while the file downloads.
	gw := start()
	tf.StallDownloads(1)
	tf.Queue(tgfake.In{ChatID: chat, FromID: chat, Text: "SENDBACK chart.png", Document: &tgfake.FileIn{Name: "chart.png", MIME: "image/png", Data: chart}})
	waitUntil("the gateway to start downloading the file", func() bool { return tf.StalledDownloads() == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	// 2. The update comes again; killed once Telegram posted the file
	// going back, before the gateway heard so.
	tf.HoldNextFiles(1)
	gw = start()
	waitUntil("the file going back to reach Telegram", func() bool { return files() == 1 })
	if err := gw.Kill(); err != nil {
		t.Fatal(err)
	}

	// 3. The outbox resumes and, by the policy, skips the uncertain file.
	gw = start()
	waitUntil("the outbox to settle after the second restart", func() bool { return metric(t, gw.Base, `herald_outbox_pending`) == 0 })
	if v := metric(t, gw.Base, `herald_outbox_uncertain_total{action="skip",channel="telegram"}`); v != 1 {
		t.Errorf("herald_outbox_uncertain_total{skip,telegram} = %v, want 1", v)
	}
	if n := files(); n != 1 {
		t.Errorf("the chat shows chart.png %d times, want once", n)
	}
	if n := said("sent chart.png"); n != 1 {
		t.Errorf("the chat shows the reply %d times, want once; messages: %+v", n, tf.Sent())
	}
	if n := said("no file") + said("📎"); n != 0 {
		t.Errorf("the file did not reach the turn whole: %+v", tf.Sent())
	}
	if n := r.model.SendBackAnswers("chart.png"); n != 1 {
		t.Errorf("the model was asked about the message %d times, want once", n)
	}
	if _, served := tf.Downloads(); served != 1 {
		t.Errorf("the file was downloaded whole %d times, want once (after the first restart)", served)
	}
}

// smallDiskFloor keeps 1 MB free instead of attachments.minFreeMB's 1 GB:
// the gateway measures the host's disk, and these tests must not refuse
// files on a machine whose disk is merely full of other work.
const smallDiskFloor = `attachments: { minFreeMB: 1 },`

// chartPNG is a small valid PNG.
func chartPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 32, 24))
	for x := range 32 {
		img.Set(x, x%24, color.RGBA{R: 200, G: uint8(x * 7), A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
