package matrix

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// TestRefusedBatchIsHandedOverAgain: when the gateway cannot store a
// message of a /sync batch (its store is away), the batch's token is not
// kept as the sync position: after a short wait the same batch is fetched
// again and handed over from the refused message on: the messages before
// it, already taken, are not handed over twice, and those after it wait
// for the batch to come again.
func TestRefusedBatchIsHandedOverAgain(t *testing.T) {
	f := newFakeHS(t)
	f.members["!d:test"] = 2
	syncStore := mautrix.NewMemorySyncStore()
	var mu sync.Mutex
	var calls []string
	handed := make(chan string, 16)
	sink := func(_ context.Context, in channels.Inbound) error {
		mu.Lock()
		calls = append(calls, in.Origin.MessageID)
		first := in.Origin.MessageID == "$b" && !slices.Contains(calls[:len(calls)-1], "$b")
		mu.Unlock()
		if first {
			return &channels.UnavailableError{RetryAfter: 10 * time.Millisecond, Reason: "store down"}
		}
		handed <- in.Origin.MessageID
		return nil
	}
	startFakeSink(t, f, func(o *Options) { o.SyncStore = syncStore }, sink)

	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!d:test": {
			msg("$a", "@alice:test", "one", nil),
			msg("$b", "@alice:test", "two", nil),
			msg("$c", "@alice:test", "three", nil),
		},
	}))
	waitHanded(t, handed, "$a", "$b", "$c")
	mu.Lock()
	if want := []string{"$a", "$b", "$b", "$c"}; !slices.Equal(calls, want) {
		t.Errorf("sink calls %v, want %v ($a once; nothing after the refused $b until the batch comes again)", calls, want)
	}
	mu.Unlock()
	// The batch was asked for again from its own token.
	sinces := f.syncSinces()
	var batchSince string
	for i, s := range sinces {
		if s != "" && slices.Contains(sinces[i+1:], s) {
			batchSince = s
			break
		}
	}
	if batchSince == "" {
		t.Fatalf("no /sync asked for the same batch again; sinces %v", sinces)
	}
}

// TestBatchTokenSavedOnlyAfterItsMessages: mautrix saves a /sync batch's
// next_batch before it processes the batch. While the batch's messages are
// being handed over, the saved position must still be the one before the
// batch, so a gateway killed then resumes with the whole batch (intake takes
// a message id once) instead of past the messages it never handed over;
// once they are all handed over the position moves on.
func TestBatchTokenSavedOnlyAfterItsMessages(t *testing.T) {
	f := newFakeHS(t)
	f.members["!d:test"] = 2
	syncStore := &lockedSyncStore{MemorySyncStore: mautrix.NewMemorySyncStore()}
	inB, release := make(chan struct{}), make(chan struct{})
	var once, releasing sync.Once
	handed := make(chan string, 16)
	sink := func(_ context.Context, in channels.Inbound) error {
		if in.Origin.MessageID == "$b" {
			once.Do(func() { close(inB) })
			<-release
		}
		handed <- in.Origin.MessageID
		return nil
	}
	a := startFakeSink(t, f, func(o *Options) { o.SyncStore = syncStore }, sink)
	t.Cleanup(func() { releasing.Do(func() { close(release) }) }) // runs before the stop

	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!d:test": {
			msg("$a", "@alice:test", "one", nil),
			msg("$b", "@alice:test", "two", nil),
			msg("$c", "@alice:test", "three", nil),
		},
	}))
	select {
	case <-inB:
	case <-time.After(10 * time.Second):
		t.Fatal("$b was never handed over")
	}
	var since, next string
	f.mu.Lock()
	for s, body := range f.answered {
		var m struct {
			NextBatch string `json:"next_batch"`
		}
		if strings.Contains(string(body), `"$b"`) && json.Unmarshal(body, &m) == nil {
			since, next = s, m.NextBatch
		}
	}
	f.mu.Unlock()
	if since == "" || next == "" {
		t.Fatal("the fake answered no batch holding $b")
	}
	ctx := context.Background()
	if saved, _ := syncStore.LoadNextBatch(ctx, a.client.UserID); saved != since {
		t.Fatalf("while $b was being handed over the saved sync position was %q (the batch's own next_batch is %q); want %q, the position before the batch", saved, next, since)
	}
	releasing.Do(func() { close(release) })
	waitHanded(t, handed, "$a", "$b", "$c")
	deadline := time.After(10 * time.Second)
	for saved := since; saved == since; saved, _ = syncStore.LoadNextBatch(ctx, a.client.UserID) {
		select {
		case <-deadline:
			t.Fatalf("the batch was handed over but the saved position stayed %q", since)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// lockedSyncStore is mautrix's MemorySyncStore (no lock of its own) made
// safe to read from the test while the sync loop writes it.
type lockedSyncStore struct {
	mu sync.Mutex
	*mautrix.MemorySyncStore
}

func (s *lockedSyncStore) SaveNextBatch(ctx context.Context, u id.UserID, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemorySyncStore.SaveNextBatch(ctx, u, token)
}

func (s *lockedSyncStore) LoadNextBatch(ctx context.Context, u id.UserID) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemorySyncStore.LoadNextBatch(ctx, u)
}

// waitHanded waits up to 10 s for len(want) message ids on handed and
// checks they are want, in order.
func waitHanded(t *testing.T, handed <-chan string, want ...string) {
	t.Helper()
	var got []string
	for len(got) < len(want) {
		select {
		case id := <-handed:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("handed over %v; want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handed over %v, want %v", got, want)
	}
}
