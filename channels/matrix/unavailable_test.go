package matrix

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"maunium.net/go/mautrix"

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
	a, err := New(Options{
		Homeserver:  f.srv.URL,
		AccessToken: "bot-token",
		Access:      channels.Access{GroupPolicy: channels.GroupOpen},
		Logger:      zaptest.NewLogger(t),
		SyncStore:   syncStore,
	})
	if err != nil {
		t.Fatal(err)
	}
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
	if err := a.Start(context.Background(), sink); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	f.queueSync(joinedRooms(map[string][]map[string]any{
		"!d:test": {
			msg("$a", "@alice:test", "one", nil),
			msg("$b", "@alice:test", "two", nil),
			msg("$c", "@alice:test", "three", nil),
		},
	}))
	var got []string
	for len(got) < 3 {
		select {
		case id := <-handed:
			got = append(got, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("handed over %v; want $a, then $b and $c when the batch comes again", got)
		}
	}
	if want := []string{"$a", "$b", "$c"}; !slices.Equal(got, want) {
		t.Fatalf("handed over %v, want %v", got, want)
	}
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
