package gateway

import (
	"context"
	"sync"
	"testing"
)

// kvFake is a kv table that counts reads; during (optional) runs inside
// a read, after the value was looked up.
type kvFake struct {
	mu     sync.Mutex
	m      map[string]string
	reads  int
	during func()
}

func (f *kvFake) ClaimKV(_ context.Context, key, value string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[key]; ok {
		return false, nil
	}
	f.m[key] = value
	return true, nil
}

func (f *kvFake) GetKV(_ context.Context, key string) (string, bool, error) {
	f.mu.Lock()
	f.reads++
	v, ok := f.m[key]
	during := f.during
	f.during = nil
	f.mu.Unlock()
	if during != nil {
		during()
	}
	return v, ok, nil
}

// Alone (no other replica), a client without a secret is read once; its
// claim is seen at once, also by a read that overlapped the claim (which
// keeps nothing). With other replicas "none" is read every time.
func TestWebSecretsKeepNoneOnlyAlone(t *testing.T) {
	ctx := context.Background()
	for _, alone := range []bool{true, false} {
		db := &kvFake{m: map[string]string{}}
		s := &webSecrets{db: db, alone: alone}
		for range 3 {
			if _, found, err := s.SecretHash(ctx, "c1"); found || err != nil {
				t.Fatalf("alone=%v: SecretHash = found %v, %v; want none", alone, found, err)
			}
		}
		if want := map[bool]int{true: 1, false: 3}[alone]; db.reads != want {
			t.Errorf("alone=%v: %d reads for three looks at an unclaimed client, want %d", alone, db.reads, want)
		}
		// A read of c2 that finds nothing, during which c2 is claimed.
		db.during = func() {
			if ok, err := s.ClaimSecret(ctx, "c2", "h2"); !ok || err != nil {
				t.Errorf("claim c2 = %v, %v", ok, err)
			}
		}
		if _, found, _ := s.SecretHash(ctx, "c2"); found {
			t.Fatal("the overlapping read found the claim")
		}
		if ok, err := s.ClaimSecret(ctx, "c1", "h1"); !ok || err != nil {
			t.Fatalf("claim c1 = %v, %v", ok, err)
		}
		reads := db.reads
		for _, c := range []struct{ client, hash string }{{"c1", "h1"}, {"c2", "h2"}} {
			if hash, found, err := s.SecretHash(ctx, c.client); !found || hash != c.hash || err != nil {
				t.Errorf("alone=%v: %s after its claim = %q, %v, %v; want %q", alone, c.client, hash, found, err, c.hash)
			}
		}
		if db.reads != reads {
			t.Errorf("alone=%v: claimed hashes read again (%d reads)", alone, db.reads-reads)
		}
	}
}
