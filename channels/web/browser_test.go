package web_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/channels/web/webtest"
)

// TestBrowserChat drives the chat page in a real headless Chromium: a typed
// message reaches the sink, the sink's reply and a later announce appear.
func TestBrowserChat(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)

	var a *web.Adapter
	sink := func(ctx context.Context, in channels.Inbound) error {
		if err := a.Send(ctx, in.Origin, channels.Message{Kind: channels.KindReply, Text: "echo: " + in.Text}); err != nil {
			t.Errorf("Send: %v", err)
		}
		return nil
	}
	a, err := web.New(web.Options{Log: web.NewMemoryLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		srv.Close()
	})

	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	url := srv.URL + "/?client=browser-1"
	if err := webtest.Chat(ctx, url, "hello there"); err != nil {
		t.Fatal(err)
	}
	got, err := webtest.WaitMessages(ctx, "assistant", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"echo: hello there"}) {
		t.Fatalf("assistant messages %q, want [echo: hello there]", got)
	}
	users, err := webtest.WaitMessages(ctx, "user", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(users, []string{"hello there"}) {
		t.Fatalf("user messages %q", users)
	}

	// An announce (sent twice, as a retried outbox would) shows once, as a card.
	announce := "Status: success\nTask: count files\n\nResult:\n42\n\nNotes:\n(none)\n\nStats: runtime 3s • tokens 1.2k (in 1.0k / out 200)"
	to := channels.Origin{Channel: "web", ChatID: "browser-1", ChatType: channels.ChatDM}
	for range 2 {
		if err := a.Send(ctx, to, channels.Message{Kind: channels.KindAnnounce, Text: announce, RunID: "3f2a9c1b-aaaa"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindSystem, Text: "⚙️ done"}); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitMessages(ctx, "system", 1); err != nil {
		t.Fatal(err)
	}
	cards, err := webtest.Messages(ctx, "announce")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cards, []string{announce}) {
		t.Fatalf("announce cards %q, want the announce once with its line breaks", cards)
	}

	// Enter sends too (Shift+Enter would add a line), and a reload shows the
	// whole conversation again.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#input"), "second\r")); err != nil {
		t.Fatal(err)
	}
	replies, err := webtest.WaitMessages(ctx, "assistant", 2)
	if err != nil {
		t.Fatal(err)
	}
	if replies[1] != "echo: second" {
		t.Fatalf("reply to Enter: %q", replies[1])
	}
	if err := webtest.Open(ctx, url); err != nil {
		t.Fatal(err)
	}
	all, err := webtest.WaitMessages(ctx, "", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("after reload %d messages, want 6: %q", len(all), all)
	}
	if dir := os.Getenv("HERALD_SCREENSHOTS"); dir != "" {
		if err := webtest.Screenshot(ctx, filepath.Join(dir, "web-chat.png")); err != nil {
			t.Error(err)
		}
	}
}

// TestBrowserChatWithToken opens the page with ?token= and chats: the page
// passes the token on every request, the event stream included.
func TestBrowserChatWithToken(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	var a *web.Adapter
	a, err := web.New(web.Options{Log: web.NewMemoryLog(), Token: "tok-123"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), func(ctx context.Context, in channels.Inbound) error {
		if err := a.Send(ctx, in.Origin, channels.Message{Kind: channels.KindReply, Text: "echo: " + in.Text}); err != nil {
			t.Errorf("Send: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
		srv.Close()
	})
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	url := srv.URL + "/?client=tok-client&token=tok-123"
	if err := webtest.Chat(ctx, url, "with token"); err != nil {
		t.Fatal(err)
	}
	got, err := webtest.WaitMessages(ctx, "assistant", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "echo: with token" {
		t.Fatalf("reply %q", got[0])
	}
	// A later message arrives over the event stream, which needs the token too.
	to := channels.Origin{Channel: "web", ChatID: "tok-client", ChatType: channels.ChatDM}
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindSystem, Text: "pushed"}); err != nil {
		t.Fatal(err)
	}
	if sys, err := webtest.WaitMessages(ctx, "system", 1); err != nil || sys[0] != "pushed" {
		t.Fatalf("pushed system message: %q, %v", sys, err)
	}
}

// TestBrowserChatOffLoopback opens the page off loopback with #token= and
// chats: the page trades the token for its cookie and drops it from the
// address, its first post makes it the client's owner (the clientSecret
// cookie), and the event stream then works on the cookies alone.
func TestBrowserChatOffLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	var a *web.Adapter
	a, err := web.New(web.Options{Log: web.NewMemoryLog(), Token: "tok-off", OffLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), func(ctx context.Context, in channels.Inbound) error {
		if err := a.Send(ctx, in.Origin, channels.Message{Kind: channels.KindReply, Text: "echo: " + in.Text}); err != nil {
			t.Errorf("Send: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
		srv.Close()
	})
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := webtest.Chat(ctx, srv.URL+"/?client=off-client#token=tok-off", "off loopback"); err != nil {
		t.Fatal(err)
	}
	got, err := webtest.WaitMessages(ctx, "assistant", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "echo: off loopback" {
		t.Fatalf("reply %q", got[0])
	}
	to := channels.Origin{Channel: "web", ChatID: "off-client", ChatType: channels.ChatDM}
	if err := a.Send(ctx, to, channels.Message{Kind: channels.KindSystem, Text: "pushed"}); err != nil {
		t.Fatal(err)
	}
	if sys, err := webtest.WaitMessages(ctx, "system", 1); err != nil || sys[0] != "pushed" {
		t.Fatalf("pushed system message: %q, %v", sys, err)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("herald.token") || ""`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(href, "tok-off") || stored != "" {
		t.Errorf("the page kept the token: address %q, storage %q", href, stored)
	}
	// The client id names the conversation: off loopback it leaves the
	// address too (proxy logs, history, shared links), and stays in the
	// browser's storage.
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem("herald.client") || ""`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(href, "off-client") || kept != "off-client" {
		t.Errorf("the page kept the client id in its address %q, or lost it from storage (%q)", href, kept)
	}
}
