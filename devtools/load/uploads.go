package load

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strconv"
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
	// Attachments are more fields of the attachments config (e.g.
	// "maxStoredMB: 50, maxTotalMB: 500").
	Attachments string
}

// UploadResult is the gateway process during the uploads.
type UploadResult struct {
	Baseline, Peak harness.Proc  // before the first post; the highest RSS sampled until every message was answered
	Stored         time.Duration // first post → every post answered 202 (files stored with their messages)
	Answered       time.Duration // first post → every reply delivered
	// PeakDisk is the most the state dir held (files, spool, workspace
	// copies), sampled every 100 ms; Bytes the file bytes the posts sent
	// and the gateway took (202).
	PeakDisk, Bytes int64
	// Retried counts answers 429 (busy: retried after Retry-After);
	// Refused posts answered 507 (the disk floor: not retried).
	Retried, Refused int
}

func (r UploadResult) String() string {
	return fmt.Sprintf("baseline RSS %.1f MiB, peak %.1f MiB (+%.1f MiB), all stored in %s (%.1f MB/s), all answered in %s, peak state dir %.1f MB, %d retried (429), %d refused (507)",
		mib(r.Baseline.RSS), mib(r.Peak.RSS), mib(r.Peak.RSS-r.Baseline.RSS), r.Stored.Round(time.Millisecond),
		float64(r.Bytes)/1e6/max(r.Stored.Seconds(), 1e-3), r.Answered.Round(time.Millisecond), float64(r.PeakDisk)/1e6, r.Retried, r.Refused)
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Uploads runs the measure. Each file is distinct (a seeded pseudo-random
// stream, so nothing is de-duplicated) and streamed by the client: only
// the gateway's memory is measured, sampled every 20 ms from /proc.
func Uploads(ctx context.Context, o UploadOptions) (UploadResult, error) {
	var res UploadResult
	o.Conversations, o.Bytes = max(o.Conversations, 1), max(o.Bytes, 1)
	extra := fmt.Sprintf("attachments: { maxBytes: %d, %s },", o.Bytes, o.Attachments)
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
	every := func(d time.Duration, sample func()) {
		sampler.Go(func() {
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				sample()
			}
		})
	}
	every(20*time.Millisecond, func() {
		if p, err := harness.ReadProc(gw.Pid()); err == nil {
			peakMu.Lock()
			if p.RSS > res.Peak.RSS {
				res.Peak = p
			}
			peakMu.Unlock()
		}
	})
	every(100*time.Millisecond, func() {
		n := dirBytes(r.state)
		peakMu.Lock()
		res.PeakDisk = max(res.PeakDisk, n)
		peakMu.Unlock()
	})
	defer func() { close(stop); sampler.Wait() }()

	logf("posting %d messages with a %.1f MB file each, at once …", o.Conversations, float64(o.Bytes)/1e6)
	client := &http.Client{Timeout: 5 * time.Minute}
	start := time.Now()
	errs := make(chan error, o.Conversations)
	var posts sync.WaitGroup
	var countMu sync.Mutex
	taken := 0
	for i := range o.Conversations {
		posts.Go(func() {
			for attempt := 1; ; attempt++ {
				status, wait, err := postUpload(ctx, client, gw.Base, fmt.Sprintf("upload-%d", i), uint64(i), o.Bytes)
				if err != nil && status == 0 && ctx.Err() == nil && attempt < 100 {
					// The gateway answered (429) before reading the body
					// and closed the connection while it was still being
					// written: the client saw the broken pipe, not the
					// answer. Sent again a second later, as a client would.
					status, wait, err = http.StatusTooManyRequests, time.Second, nil
				}
				countMu.Lock()
				switch {
				case err != nil:
				case status == http.StatusAccepted:
					taken++
					res.Bytes += o.Bytes
				case status == http.StatusInsufficientStorage:
					res.Refused++
				case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
					res.Retried++
					countMu.Unlock()
					select {
					case <-ctx.Done():
						errs <- ctx.Err()
						return
					case <-time.After(wait):
					}
					continue
				}
				countMu.Unlock()
				errs <- err
				return
			}
		})
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
	if err := waitMetric(ctx, gw.Base, `herald_outbox_delivered_total{kind="assistant"}`, func(v float64) bool { return v >= float64(taken) }); err != nil {
		return res, err
	}
	res.Answered = time.Since(start)
	return res, nil
}

// postUpload streams one multipart post with a file of n pseudo-random
// bytes (seeded by seed). It returns the answer's status and, for 429 and
// 503, its Retry-After; another status than those and 202 and 507 is an
// error.
func postUpload(ctx context.Context, client *http.Client, base, id string, seed uint64, n int64) (int, time.Duration, error) {
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
		return 0, 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("post %s: %w", id, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusInsufficientStorage:
		return resp.StatusCode, 0, nil
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return resp.StatusCode, time.Duration(max(secs, 1)) * time.Second, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, 0, fmt.Errorf("post %s: %s: %s", id, resp.Status, b)
}
