package providers

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// models.providers.<id>.maxConnections bounds the connections open to the
// provider: eight calls at once over at most two connections all answer,
// the others waiting for a free one, and the provider never sees more than
// two at a time.
func TestMaxConnectionsBoundsCallsInFlight(t *testing.T) {
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	srv := llmtest.NewAnthropic(t, func(c llmtest.Call) llmtest.Reply {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release // every call waits until the test lets them go
		return llmtest.Reply{Text: "ok"}
	})
	p, err := New("anthropic", config.Provider{API: "anthropic", BaseURL: srv.URL, APIKey: "k", Models: []config.Model{{ID: "m"}}, MaxConnections: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Complete(context.Background(), userReq("m", "hi"))
			errs <- err
		}()
	}
	// Let them go once two calls reached the provider (the other six are
	// started too: with no bound they would reach it as well).
	for inFlight.Load() < 2 {
		runtime.Gosched()
	}
	for range 100 {
		runtime.Gosched()
	}
	once.Do(func() { close(release) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("call: %v", err)
		}
	}
	if got := peak.Load(); got != 2 {
		t.Errorf("%d calls reached the provider at once, want at most 2 (maxConnections) and 2 seen", got)
	}
}

// TestDefaultMaxConnectionsIsAQuarterOfTheLimit: an unset maxConnections
// is a quarter of the open-file limit, at least 16 (docs/providers.md).
func TestDefaultMaxConnectionsIsAQuarterOfTheLimit(t *testing.T) {
	limit := store.DescriptorLimit()
	if limit == 0 || limit > 1<<30 {
		t.Skipf("open-file limit %d: the default is the fixed 1024", limit)
	}
	if got, want := DefaultMaxConnections(), max(int(limit/4), 16); got != want {
		t.Errorf("DefaultMaxConnections() = %d, want %d (limit %d)", got, want, limit)
	}
}
