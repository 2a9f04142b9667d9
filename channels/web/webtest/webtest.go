// Package webtest drives Herald's web chat page in a real headless Chromium
// through chromedp, for the web channel's browser test and the gateway's
// end-to-end tests.
//
// It only types, clicks and reads the page (#input, #send, #messages,
// .msg.<role>); it must not reach into the web package or the gateway.
package webtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// DefaultWait bounds Open, Chat and WaitMessages when ctx has no deadline.
const DefaultWait = 30 * time.Second

// EnvChromium names an environment variable that may point at the browser.
const EnvChromium = "HERALD_CHROMIUM"

// FindChromium returns the path of a Chromium (or Chrome) binary: $HERALD_CHROMIUM,
// then /usr/bin/chromium and the usual names on $PATH.
func FindChromium() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvChromium, p, err)
		}
		return p, nil
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium binary found (run scripts/chromium.sh, or set " + EnvChromium + ")")
}

// NewBrowser starts a headless Chromium with a fresh profile and returns a
// chromedp context for one tab; the browser is closed when the test ends.
// Without a browser the test is skipped, unless $CI is set: then it fails.
func NewBrowser(t testing.TB) context.Context {
	t.Helper()
	path, err := FindChromium()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("browser test: %v; CI is set, so this is a failure", err)
		}
		t.Skipf("browser test skipped: %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // the test may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.WindowSize(1000, 800),
		chromedp.UserDataDir(t.TempDir()),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	discard := func(string, ...any) {}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(discard), chromedp.WithErrorf(discard))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser, tied to ctx (not to a caller's timeout).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("browser test: start %s: %v", path, err)
	}
	return ctx
}

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultWait)
}

// Open navigates the tab to url and waits until the page has loaded the
// conversation and follows its events.
func Open(ctx context.Context, url string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#input")),
		chromedp.WaitReady(chromedp.CSS(`body[data-ready="true"]`)),
	); err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	return nil
}

// Chat opens url (unless the tab already shows it), types text into #input
// and clicks #send.
func Chat(ctx context.Context, url, text string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return fmt.Errorf("chat: read location: %w", err)
	}
	if loc != url {
		if err := Open(ctx, url); err != nil {
			return fmt.Errorf("chat: %w", err)
		}
	}
	if err := chromedp.Do(ctx,
		chromedp.Focus(chromedp.CSS("#input")),
		evalVoid(`document.querySelector("#input").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#input"), text),
		chromedp.Click(chromedp.CSS("#send")),
		// The page empties the input once the gateway accepted the message.
		chromedp.Poll[chromedp.Void](`document.querySelector("#input").value === ""`, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0)),
	); err != nil {
		return fmt.Errorf("chat %q at %s: %w", text, url, err)
	}
	return nil
}

// Messages returns the texts of the messages with role ("user", "assistant",
// "announce", "system"; "" for all) now on the page, oldest first.
func Messages(ctx context.Context, role string) ([]string, error) {
	texts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](textsJS(role)))
	if err != nil {
		return nil, fmt.Errorf("read %s messages: %w", roleName(role), err)
	}
	return texts, nil
}

// WaitMessages waits until at least n messages with role are on the page and
// returns the texts of all of them, oldest first.
func WaitMessages(ctx context.Context, role string, n int) ([]string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	sel, _ := json.Marshal(selector(role))
	cond := fmt.Sprintf(`document.querySelectorAll(%s).length >= %d`, sel, n)
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(0))); err != nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		have, _ := Messages(rctx, role)
		rcancel()
		return have, fmt.Errorf("wait for %d %s messages (have %d: %q): %w", n, roleName(role), len(have), have, err)
	}
	return Messages(ctx, role)
}

// Screenshot saves a PNG of the tab to path, for a person to look at.
func Screenshot(ctx context.Context, path string) error {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	return os.WriteFile(path, png, 0o644)
}

// selector matches the page's messages of role (every role when ""); the
// bubble of a reply still being written (.draft) is not a message yet.
func selector(role string) string {
	if role == "" {
		return "#messages .msg:not(.draft)"
	}
	return "#messages .msg." + strings.TrimPrefix(role, ".") + ":not(.draft)"
}

func textsJS(role string) string {
	sel, _ := json.Marshal(selector(role))
	return fmt.Sprintf(`Array.from(document.querySelectorAll(%s), m => { const t = m.querySelector(".text"); return (t || m).textContent; })`, sel)
}

func roleName(role string) string {
	if role == "" {
		return "any"
	}
	return role
}

// evalVoid runs a JavaScript expression whose value does not matter.
func evalVoid(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr+"; null")(ctx, t)
		return err
	})
}

// File is a file a test hands to the chat page.
type File struct {
	Name, MIME string
	Data       []byte
}

// AddFiles gives the page files the way a person does: "paste" pastes them
// into the message box, "drop" drops them on the page, "attach" picks them
// with the attach button's file chooser. They wait with the next message.
func AddFiles(ctx context.Context, how string, files ...File) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	list, _ := json.Marshal(func() []map[string]any {
		var out []map[string]any
		for _, f := range files {
			out = append(out, map[string]any{"name": f.Name, "mime": f.MIME, "b64": base64.StdEncoding.EncodeToString(f.Data)})
		}
		return out
	}())
	js := fmt.Sprintf(`(() => {
		const dt = new DataTransfer();
		for (const f of %s) {
			const bin = atob(f.b64), b = new Uint8Array(bin.length);
			for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
			dt.items.add(new File([b], f.name, { type: f.mime }));
		}
		switch (%q) {
		case "paste":
			document.querySelector("#input").dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
			break;
		case "drop":
			document.querySelector("#messages").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
			break;
		default:
			const input = document.querySelector("#file");
			input.files = dt.files;
			input.dispatchEvent(new Event("change", { bubbles: true }));
		}
	})()`, list, how)
	if err := chromedp.Do(ctx, evalVoid(js)); err != nil {
		return fmt.Errorf("%s %d files: %w", how, len(files), err)
	}
	return nil
}

// Images returns, per message with role, the natural widths of its inline
// images (0 = not loaded or not an image), oldest first.
func Images(ctx context.Context, role string) ([][]int, error) {
	sel, _ := json.Marshal(selector(role))
	js := fmt.Sprintf(`Array.from(document.querySelectorAll(%s), m => Array.from(m.querySelectorAll(".files img"), i => i.complete ? i.naturalWidth : 0))`, sel)
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[][]int](js))
	if err != nil {
		return nil, fmt.Errorf("read %s images: %w", roleName(role), err)
	}
	return out, nil
}

// FileLinks returns the texts of the download links of the messages with
// role, oldest first.
func FileLinks(ctx context.Context, role string) ([]string, error) {
	sel, _ := json.Marshal(selector(role))
	js := fmt.Sprintf(`Array.from(document.querySelectorAll(%s + " .files a[download]"), a => a.textContent)`, sel)
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
}
