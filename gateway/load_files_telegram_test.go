package gateway_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// Load measures of files through Telegram (issue 26 "Figures to report"),
// skipped unless HERALD_LOAD=1; they print figures for docs/performance.md
// and assert nothing about time.
//
//	HERALD_LOAD=1 go test ./gateway -run TestLoadTelegramFiles -v -count=1
//
// HERALD_LOAD_FILES (default 20) and HERALD_LOAD_FILE_BYTES (default
// 20,000,000, under getFile's 20 MiB) change the concurrent upload.

const loadTelegramConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-5" }] } } },
  agents: { defaults: { model: "anthropic/claude-sonnet-4-5", maxConcurrent: 8 }, list: [{ id: "main" }] },
  attachments: { maxBytes: 60000000 },
  channels: {
    telegram: { enabled: true, botToken: %q, apiUrl: %q %s },
    web: { enabled: false },
  },
}`

func loadEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// procStatusKB reads a "Name:   N kB" line of /proc/self/status.
func procStatusKB(t *testing.T, name string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("%s not in /proc/self/status", name)
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
}

func loadJPEG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * y), uint8(x + y), uint8(x ^ y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 85}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// modelClock is a fake model handler that notes when each request arrived,
// keyed by the chat named in the message text.
type modelClock struct {
	mu  sync.Mutex
	at  map[string]time.Time
	got chan struct{}
}

func newModelClock() *modelClock {
	return &modelClock{at: map[string]time.Time{}, got: make(chan struct{}, 1000)}
}

func (m *modelClock) handler(c llmtest.Call) llmtest.Reply {
	now := time.Now()
	text := c.LastUser()
	key := ""
	if i := strings.Index(text, "load-"); i >= 0 {
		key = strings.Fields(text[i:])[0]
	}
	m.mu.Lock()
	if _, ok := m.at[key]; !ok {
		m.at[key] = now
		m.got <- struct{}{}
	}
	m.mu.Unlock()
	return llmtest.Reply{Text: "seen"}
}

func (m *modelClock) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for range n {
		select {
		case <-m.got:
		case <-deadline:
			t.Fatalf("only some of %d model requests arrived within %s", n, timeout)
		}
	}
}

// TestLoadTelegramFiles reports (1) the time from a photo in the Telegram
// fake to the model request that carries it, and (2) the peak RSS and time
// of N people each sending an S-byte document at once, by webhook (N
// concurrent intakes) and by long polling (one batch, taken in order).
func TestLoadTelegramFiles(t *testing.T) {
	if os.Getenv("HERALD_LOAD") != "1" {
		t.Skip("load measure: set HERALD_LOAD=1 to run")
	}
	files := loadEnvInt(t, "HERALD_LOAD_FILES", 20)
	size := int64(loadEnvInt(t, "HERALD_LOAD_FILE_BYTES", 20_000_000))

	for _, mode := range []string{"webhook", "polling"} {
		t.Run(fmt.Sprintf("%d x %d bytes by %s", files, size, mode), func(t *testing.T) {
			tf := tgfake.New(t, tgToken)
			tf.LocalServer(size > tgfake.DownloadLimit)
			clock := newModelClock()
			extra := ""
			if mode == "webhook" {
				extra = `, webhookUrl: "https://herald.example.org/telegram/webhook", webhookSecret: "load-secret"`
			}
			tg := newTestGateway(t, fmt.Sprintf(loadTelegramConfig, tgToken, tf.URL(), extra), clock.handler)
			// Freed heap goes back to the OS first, so what the uploads
			// allocate shows in the RSS instead of reusing resident pages.
			debug.FreeOSMemory()
			base := procStatusKB(t, "VmRSS")
			resetPeakRSS(t)
			start := time.Now()
			var posts sync.WaitGroup
			ins := make([]tgfake.In, files)
			for i := range files {
				ins[i] = tgfake.In{ChatID: int64(1000 + i), FromID: int64(1000 + i), Text: fmt.Sprintf("load-%d read this", i),
					Document: &tgfake.FileIn{Name: fmt.Sprintf("data-%d.bin", i), MIME: "application/octet-stream", Size: size, Gen: tgfake.Pattern(uint64(i + 1))}}
			}
			if mode == "webhook" {
				for i := range files {
					posts.Go(func() {
						if status := tf.PostUpdate(tg.URL+"/telegram/webhook", "load-secret", ins[i]); status != 200 {
							t.Errorf("webhook answered %d for file %d", status, i)
						}
					})
				}
			} else {
				for i := range files {
					tf.Queue(ins[i])
				}
			}
			clock.wait(t, files, 10*time.Minute)
			took := time.Since(start)
			posts.Wait()
			peak := procStatusKB(t, "VmHWM")
			t.Logf("FIGURE [%s] telegram %s: %d documents of %d bytes at once → all %d model requests in %s; RSS before %.1f MiB, peak %.1f MiB (+%.1f MiB)",
				storeName(), mode, files, size, files, took.Round(time.Millisecond), float64(base)/1024, float64(peak)/1024, float64(peak-base)/1024)
		})
	}
	t.Run("photo to model", func(t *testing.T) {
		tf := tgfake.New(t, tgToken)
		clock := newModelClock()
		newTestGateway(t, fmt.Sprintf(loadTelegramConfig, tgToken, tf.URL(), ""), clock.handler)
		photo := loadJPEG(t, 1280, 960)
		var took []time.Duration
		for i := range 20 {
			key := fmt.Sprintf("load-%d", i)
			sent := time.Now()
			chat := int64(5000 + i) // a new conversation each: no earlier images in the request
			tf.Queue(tgfake.In{ChatID: chat, FromID: chat, Text: key + " what is this?", Photo: &tgfake.FileIn{Data: photo}})
			clock.wait(t, 1, time.Minute)
			clock.mu.Lock()
			took = append(took, clock.at[key].Sub(sent))
			clock.mu.Unlock()
			tf.WaitSent(i+1, time.Minute)
		}
		slices.Sort(took)
		t.Logf("FIGURE [%s] telegram photo (%d bytes JPEG 1280x960) → model request: p50 %s, max %s over %d photos, one at a time",
			storeName(), len(photo), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(took))
	})
}

func storeName() string {
	if pgtest.OnPostgres() {
		return "PostgreSQL"
	}
	return "SQLite"
}
