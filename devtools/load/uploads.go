package load

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"sync"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// UploadOptions of a file-upload measure (issue 26): Conversations web
// clients each post one message with a file of Bytes bytes at once,
// through POST /api/messages as multipart/form-data.
type UploadOptions struct {
	Conversations int
	Bytes         int64
	Bin, Dir      string
	Log           io.Writer
	PostgresURL   string // when set, the state (files included) is in this PostgreSQL database
}

// UploadResult is the gateway process during the uploads.
type UploadResult struct {
	Baseline, Peak harness.Proc  // before the first post; the highest RSS sampled until every message was answered
	Stored         time.Duration // first post → every post answered 202 (files stored with their messages)
	Answered       time.Duration // first post → every reply delivered
}

func (r UploadResult) String() string {
	return fmt.Sprintf("baseline RSS %.1f MiB, peak %.1f MiB (+%.1f MiB), all stored in %s, all answered in %s",
		mib(r.Baseline.RSS), mib(r.Peak.RSS), mib(r.Peak.RSS-r.Baseline.RSS), r.Stored.Round(time.Millisecond), r.Answered.Round(time.Millisecond))
}

// Uploads runs the measure. Each file is distinct (a seeded pseudo-random
// stream, so nothing is de-duplicated) and streamed by the client: only
// the gateway's memory is measured, sampled every 20 ms from /proc.
func Uploads(ctx context.Context, o UploadOptions) (UploadResult, error) {
	var res UploadResult
	o.Conversations, o.Bytes = max(o.Conversations, 1), max(o.Bytes, 1)
	extra := fmt.Sprintf("attachments: { maxBytes: %d },", o.Bytes)
	if o.PostgresURL != "" {
		extra += fmt.Sprintf("state: { driver: \"postgres\", url: %q },", o.PostgresURL)
	}
	r, err := startRig(ctx, o.Dir, o.Bin, o.Log, harness.ModelOptions{}, harness.Config{MainConcurrent: 4, GraceSeconds: 5, Extra: extra})
	if err != nil {
		return res, err
	}
	defer r.close()
	gw, logf := r.gw, r.logf
	time.Sleep(500 * time.Millisecond) // let the start-up settle before the baseline
	res.Baseline, _ = harness.ReadProc(gw.Pid())
	res.Peak = res.Baseline
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	var peakMu sync.Mutex
	sampler.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if p, err := harness.ReadProc(gw.Pid()); err == nil {
				peakMu.Lock()
				if p.RSS > res.Peak.RSS {
					res.Peak = p
				}
				peakMu.Unlock()
			}
		}
	})
	defer func() { close(stop); sampler.Wait() }()

	logf("posting %d messages with a %.1f MB file each, at once …", o.Conversations, float64(o.Bytes)/1e6)
	client := &http.Client{Timeout: 5 * time.Minute}
	start := time.Now()
	errs := make(chan error, o.Conversations)
	var posts sync.WaitGroup
	for i := range o.Conversations {
		posts.Go(func() { errs <- postUpload(ctx, client, gw.Base, fmt.Sprintf("upload-%d", i), uint64(i), o.Bytes) })
	}
	posts.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return res, err
		}
	}
	res.Stored = time.Since(start)
	logf("all %d stored in %s; waiting for the replies …", o.Conversations, res.Stored.Round(time.Millisecond))
	if err := waitMetric(ctx, gw.Base, `herald_outbox_delivered_total{kind="assistant"}`, func(v float64) bool { return v >= float64(o.Conversations) }); err != nil {
		return res, err
	}
	res.Answered = time.Since(start)
	return res, nil
}

// postUpload streams one multipart post with a file of n pseudo-random
// bytes (seeded by seed).
func postUpload(ctx context.Context, client *http.Client, base, id string, seed uint64, n int64) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			if err := mw.WriteField("client", id); err != nil {
				return err
			}
			if err := mw.WriteField("text", "SAY "+id); err != nil {
				return err
			}
			w, err := mw.CreateFormFile("file", id+".bin")
			if err != nil {
				return err
			}
			src := rand.New(rand.NewPCG(seed, seed+1))
			buf := make([]byte, 64<<10)
			for left := n; left > 0; {
				k := min(int64(len(buf)), left)
				for i := range buf[:k] {
					buf[i] = byte(src.Uint32())
				}
				if _, err := w.Write(buf[:k]); err != nil {
					return err
				}
				left -= k
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/messages", pr)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("post %s: %s: %s", id, resp.Status, b)
	}
	return nil
}
