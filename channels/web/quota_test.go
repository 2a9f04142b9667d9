package web_test

import (
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels/web"
)

// openUpload posts a multipart body whose file part never ends: the
// client field, then a file that keeps coming until the test ends. It
// returns the status the server answered while the body was still being
// sent (so the answer came before the file was read), or fails after a
// deadline.
func openUpload(t *testing.T, h *harness, client string, hdr map[string]string) (int, string) {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = mw.WriteField("client", client)
		fw, err := mw.CreateFormFile("file", "big.bin")
		if err != nil {
			return
		}
		chunk := make([]byte, 32<<10)
		for {
			if _, err := fw.Write(chunk); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrClosedPipe); wg.Wait() })
	req, _ := http.NewRequest("POST", h.srv.URL+"/api/messages", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	type answer struct {
		status int
		body   string
	}
	got := make(chan answer, 1)
	go func() {
		res, err := h.srv.Client().Do(req)
		if err != nil {
			got <- answer{0, err.Error()}
			return
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		res.Body.Close()
		got <- answer{res.StatusCode, string(b)}
	}()
	select {
	case a := <-got:
		return a.status, a.body
	case <-time.After(5 * time.Second):
		pw.CloseWithError(io.ErrClosedPipe)
		a := <-got
		t.Fatalf("no answer while the file was still coming (the server read the body first); after closing it: %d %s", a.status, a.body)
		return 0, ""
	}
}

// TestUploadRefusedBeforeItsFileIsRead: a post with files is refused
// before its file is read, so a refused client spools nothing: a stranger
// to a claimed client (403), a client over the rate limit (429), a post
// past MaxUploads at once that found no slot within UploadWait (429), and any post with files when the state
// disk is nearly full (507). Before, the whole body was spooled first.
func TestUploadRefusedBeforeItsFileIsRead(t *testing.T) {
	spool := t.TempDir()
	spooled := func() int { ents, _ := os.ReadDir(spool); return len(ents) }
	auth := map[string]string{"Authorization": "Bearer t"}
	h := newHarness(t, web.Options{Token: "t", OffLoopback: true, Files: oneFile{}, MaxFileBytes: 1 << 30, SpoolDir: spool,
		RateLimit: web.RateLimit{PerMinute: 1, Burst: 1}}, nil)
	r := h.do(t, "POST", "/api/messages", `{"client":"mine","text":"hi"}`, auth)
	secret, _ := r.body["clientSecret"].(string)
	if r.status != http.StatusAccepted || secret == "" {
		t.Fatalf("first post: %d %s", r.status, r.raw)
	}
	if status, body := openUpload(t, h, "mine", auth); status != http.StatusForbidden {
		t.Errorf("a stranger's upload to a claimed client: %d %s, want 403 before the file is read", status, body)
	}
	owner := map[string]string{"Authorization": "Bearer t", web.ClientSecretHeader: secret}
	if status, body := openUpload(t, h, "mine", owner); status != http.StatusTooManyRequests {
		t.Errorf("the owner's upload past the rate limit: %d %s, want 429 before the file is read", status, body)
	}
	if n := spooled(); n != 0 {
		t.Errorf("%d files spooled for refused posts", n)
	}

	// At most MaxUploads posts with files are read at once.
	h = newHarness(t, web.Options{Files: oneFile{}, MaxFileBytes: 1 << 30, SpoolDir: spool, UploadWait: 200 * time.Millisecond}, nil)
	started := make(chan struct{}, web.MaxUploads)
	var busy sync.WaitGroup
	var pipes []*io.PipeWriter
	for i := range web.MaxUploads {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		mw := multipart.NewWriter(pw)
		busy.Add(2)
		go func() {
			defer busy.Done()
			_ = mw.WriteField("client", fmt.Sprintf("busy%d", i))
			fw, _ := mw.CreateFormFile("file", "slow.bin")
			_, _ = fw.Write([]byte("x"))
			started <- struct{}{}
		}()
		go func() {
			defer busy.Done()
			req, _ := http.NewRequest("POST", h.srv.URL+"/api/messages", pr)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			if res, err := h.srv.Client().Do(req); err == nil {
				res.Body.Close()
			}
		}()
	}
	t.Cleanup(func() {
		for _, pw := range pipes {
			pw.CloseWithError(io.ErrClosedPipe)
		}
		busy.Wait()
	})
	for range web.MaxUploads {
		<-started
	}
	deadline := time.Now().Add(10 * time.Second)
	for spooled() < web.MaxUploads {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slow uploads spooling after 10 s", spooled(), web.MaxUploads)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, body := openUpload(t, h, "one-more", nil); status != http.StatusTooManyRequests || !strings.Contains(body, "posts with files") {
		t.Errorf("upload %d while %d are read: %d %s, want 429", web.MaxUploads+1, web.MaxUploads, status, body)
	}

	h = newHarness(t, web.Options{Files: oneFile{}, SpoolDir: t.TempDir(), UploadsRefused: func() string { return "the disk is nearly full" }}, nil)
	if status, body := openUpload(t, h, "full", nil); status != http.StatusInsufficientStorage || !strings.Contains(body, "nearly full") {
		t.Errorf("upload with the disk nearly full: %d %s, want 507", status, body)
	}
	if r := h.do(t, "POST", "/api/messages", `{"client":"full","text":"text still goes"}`, nil); r.status != http.StatusAccepted {
		t.Errorf("a text post with the disk nearly full: %d %s, want 202", r.status, r.raw)
	}
}
