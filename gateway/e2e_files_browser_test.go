package gateway_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/web/webtest"
)

// TestE2EBrowserFiles drives the chat page in headless Chromium: a picture
// pasted into the message box, one chosen with the attach button and a CSV
// dropped on the page go with one message; the model gets both pictures as
// image blocks with their bytes; the page shows the pictures inline (loaded
// from GET /api/files) and the CSV as a download link. With
// HERALD_SCREENSHOTS=dir it saves a screenshot.
func TestE2EBrowserFiles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bctx := webtest.NewBrowser(t)
	tg := newTestGateway(t, filesE2EConfig, llmtest.Text("two pictures and a table"))
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	pic := testPNG(t)
	pic2 := testPNGSized(t, 6, 2)
	url := tg.URL + "/?client=browser-files"
	if err := webtest.Open(ctx, url); err != nil {
		t.Fatal(err)
	}
	if err := webtest.AddFiles(ctx, "paste", webtest.File{Name: "pasted.png", MIME: "image/png", Data: pic}); err != nil {
		t.Fatal(err)
	}
	if err := webtest.AddFiles(ctx, "attach", webtest.File{Name: "wide.png", MIME: "image/png", Data: pic2}); err != nil {
		t.Fatal(err)
	}
	if err := webtest.AddFiles(ctx, "drop", webtest.File{Name: "data.csv", MIME: "text/csv", Data: []byte("a,b\n1,2\n")}); err != nil {
		t.Fatal(err)
	}
	if err := webtest.Chat(ctx, url, "what are these?"); err != nil {
		t.Fatal(err)
	}
	if _, err := webtest.WaitMessages(ctx, "assistant", 1); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "both pictures loaded inline in the user's message",
		`Array.from(document.querySelectorAll("#messages .msg.user .files img")).filter(i => i.complete && i.naturalWidth > 0).length === 2`)
	imgs, err := webtest.Images(ctx, "user")
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || !slices.Equal(imgs[0], []int{4, 6}) {
		t.Errorf("inline image widths %v, want [[4 6]] (pasted, then attached)", imgs)
	}
	links, err := webtest.FileLinks(ctx, "user")
	if err != nil || len(links) != 1 || !strings.HasPrefix(links[0], "📎 data.csv · 8 B") {
		t.Errorf("download links %q (%v), want data.csv", links, err)
	}
	calls := tg.LLM.Requests()
	if len(calls) == 0 {
		t.Fatal("no model call")
	}
	blocks := calls[0].Blocks()
	if len(blocks) != 2 || !bytes.Equal(blocks[0].Data, pic) || !bytes.Equal(blocks[1].Data, pic2) {
		t.Errorf("model got %d blocks, want the two pictures in order", len(blocks))
	}
	if u := calls[0].LastUser(); !strings.Contains(u, "[file: attachments/data.csv · text/csv · 8 B]") {
		t.Errorf("user text %q does not name the CSV", u)
	}
	if dir := os.Getenv("HERALD_SCREENSHOTS"); dir != "" {
		if err := webtest.Screenshot(context.WithoutCancel(ctx), filepath.Join(dir, "web-files.png")); err != nil {
			t.Error(err)
		}
	}
}
