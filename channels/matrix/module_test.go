package matrix

import (
	"context"
	"testing"

	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// TestSyncStoreKeys: the /sync tokens go to the channel's store under the
// keys earlier releases used (the gateway adds the "matrix." namespace:
// matrix.next_batch.<user>, matrix.filter.<user>), so a state from before
// the registry resumes from its token.
func TestSyncStoreKeys(t *testing.T) {
	ctx := context.Background()
	kv := &channels.MemoryKV{}
	if err := kv.Set(ctx, "next_batch.@bot:example.org", "s123_old"); err != nil {
		t.Fatal(err)
	}
	s := kvSyncStore{kv}
	if got, err := s.LoadNextBatch(ctx, id.UserID("@bot:example.org")); err != nil || got != "s123_old" {
		t.Fatalf("LoadNextBatch = %q, %v; want the stored token", got, err)
	}
	if err := s.SaveNextBatch(ctx, "@bot:example.org", "s124"); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveFilterID(ctx, "@bot:example.org", "f1"); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"next_batch.@bot:example.org": "s124", "filter.@bot:example.org": "f1"} {
		if v, ok, _ := kv.Get(ctx, key); !ok || v != want {
			t.Errorf("%s = %q (%v), want %q", key, v, ok, want)
		}
	}
}
