package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

func plainSniff(head []byte) (string, error) { return "application/octet-stream", nil }

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func putFile(t *testing.T, s Store, data []byte) store.FileRef {
	t.Helper()
	ref, err := s.PutFile(context.Background(), bytes.NewReader(data), int64(len(data)), plainSniff)
	if err != nil {
		t.Fatalf("PutFile: %v", err)
	}
	return ref
}

// readFile reads a stored file back whole.
func readFile(t *testing.T, s Store, id string) ([]byte, store.FileRef, error) {
	t.Helper()
	rc, ref, err := s.OpenFile(context.Background(), id)
	if err != nil {
		return nil, ref, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read file %s: %v", id, err)
	}
	return b, ref, nil
}

// A file is stored once by its content (its id is its SHA-256), streamed
// back byte-identical, held by the message that names it and named only by
// that message's conversation.
func testFilesStoredOnce(t *testing.T, s Store) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("herald file \x00\xff"), 250_000) // 3.5 MB: many chunks, not a multiple of any
	want := sha(data)
	var heads [][]byte
	sniff := func(head []byte) (string, error) {
		heads = append(heads, bytes.Clone(head))
		return "text/plain", nil
	}
	a, err := s.PutFile(ctx, bytes.NewReader(data), 10<<20, sniff)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.PutFile(ctx, bytes.NewReader(data), 10<<20, sniff)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != want || b.ID != want || a.Size != int64(len(data)) || a.MIME != "text/plain" {
		t.Fatalf("PutFile = %+v and %+v; want id %s, size %d, text/plain", a, b, want, len(data))
	}
	if len(heads) != 2 || len(heads[0]) != 64<<10 || !bytes.Equal(heads[0], data[:64<<10]) {
		t.Errorf("sniff saw %d heads of %d bytes; want the first 64 KiB", len(heads), len(heads[0]))
	}
	got, ref, err := readFile(t, s, want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || ref.Size != int64(len(data)) || ref.MIME != "text/plain" || ref.ID != want {
		t.Fatalf("read back %d bytes (ref %+v); want %d identical bytes", len(got), ref, len(data))
	}
	small := []byte("tiny")
	if got, _, err := readFile(t, s, putFile(t, s, small).ID); err != nil || !bytes.Equal(got, small) {
		t.Errorf("a small file reads back %q, %v", got, err)
	}
	empty := putFile(t, s, nil)
	if got, ref, err := readFile(t, s, empty.ID); err != nil || len(got) != 0 || ref.Size != 0 || empty.ID != sha(nil) {
		t.Errorf("the empty file: %q %+v, %v", got, ref, err)
	}

	a.Name, a.Kind = "report.txt", "file"
	in := intake("agent:main:web:dm:c1", "f1", "see file")
	in.Files = []store.FileRef{a}
	if _, err := s.AddIntake(ctx, in); err != nil {
		t.Fatal(err)
	}
	files, err := s.IntakeFiles(ctx, in.ID)
	if err != nil || len(files) != 1 || files[0] != a {
		t.Fatalf("IntakeFiles = %+v, %v; want %+v", files, err, a)
	}
	if ok, err := s.FileNamed(ctx, want, in.SessionKey); err != nil || !ok {
		t.Errorf("FileNamed by its conversation = %v, %v", ok, err)
	}
	if ok, err := s.FileNamed(ctx, want, "agent:main:web:dm:other"); err != nil || ok {
		t.Errorf("FileNamed by a conversation that never had it = %v, %v", ok, err)
	}
	// For the quotas a conversation's bytes are its files'; the total
	// counts every stored file once.
	room := func(scope string, q store.FileQuota) int64 {
		t.Helper()
		got, _, err := s.HoldFileBytes(ctx, store.FileHold{ID: "probe", Scope: scope, Conv: 1000, Total: 1000, Until: time.Now().Add(time.Hour)}, q)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetFileHold(ctx, "probe", 0, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := room(in.SessionKey, store.FileQuota{Conversation: int64(len(data)) + 5, Total: 1 << 40}); got != 5 {
		t.Errorf("room left in a conversation with a %d-byte file under a %d-byte quota = %d, want 5", len(data), len(data)+5, got)
	}
	if got := room("agent:main:web:dm:other", store.FileQuota{Conversation: 7, Total: 1 << 40}); got != 7 {
		t.Errorf("room left in a conversation without files under a 7-byte quota = %d", got)
	}
	if got := room("agent:main:web:dm:other", store.FileQuota{Conversation: 1 << 40, Total: int64(len(data)+len(small)) + 9}); got != 9 {
		t.Errorf("room left under a total of the stored files + 9 = %d, want 9", got)
	}
	if files, err := s.IntakeFiles(ctx, in.ID+1000); err != nil || len(files) != 0 {
		t.Errorf("IntakeFiles of an unknown message = %+v, %v", files, err)
	}

	// A reply's files keep their order and captions; its conversation
	// names them.
	x, y := putFile(t, s, []byte("x")), putFile(t, s, []byte("y"))
	x.Name, x.Caption = "x.txt", "the x"
	y.Name = "y.txt"
	o := &store.OutboxItem{Origin: origin, Kind: channels.KindReply, Text: "two files", SessionKey: "agent:main:web:dm:c2",
		Files: []store.FileRef{y, x}, CreatedAt: t0, NextAttemptAt: t0}
	id, err := s.EnqueueOutbox(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if files, err := s.OutboxFiles(ctx, id); err != nil || len(files) != 2 || files[0] != y || files[1] != x {
		t.Errorf("OutboxFiles = %+v, %v; want y then x", files, err)
	}
	if ok, _ := s.FileNamed(ctx, x.ID, "agent:main:web:dm:c2"); !ok {
		t.Error("a reply's file is not named by its conversation")
	}
	// A test-only reference names a file for another conversation.
	if err := s.RefFiles(ctx, "agent:main:web:dm:c3", []store.FileRef{x}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.FileNamed(ctx, x.ID, "agent:main:web:dm:c3"); !ok {
		t.Error("RefFiles did not name the file")
	}

	for _, id := range []string{sha([]byte("never stored")), "not-an-id", want[:63], ""} {
		if _, _, err := s.OpenFile(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("OpenFile(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

// PutFile reads at most limit bytes and stores nothing of a longer file,
// nor of one its sniff refuses.
func testFilesRefused(t *testing.T, s Store) {
	ctx := context.Background()
	big := bytes.Repeat([]byte{7}, 1001)
	if _, err := s.PutFile(ctx, bytes.NewReader(big), 1000, plainSniff); !errors.Is(err, store.ErrFileTooLarge) {
		t.Fatalf("over the limit: %v, want ErrFileTooLarge", err)
	}
	if _, _, err := s.OpenFile(ctx, sha(big)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a file over the limit was stored: %v", err)
	}
	if ref, err := s.PutFile(ctx, bytes.NewReader(big[:1000]), 1000, plainSniff); err != nil || ref.Size != 1000 {
		t.Fatalf("a file of exactly the limit: %+v, %v", ref, err)
	}
	refused := errors.New("executables are not accepted")
	exe := []byte("MZ\x90\x00 not really")
	if _, err := s.PutFile(ctx, bytes.NewReader(exe), 1000, func([]byte) (string, error) { return "", refused }); !errors.Is(err, refused) {
		t.Fatalf("sniff refusing: %v, want its error", err)
	}
	if _, _, err := s.OpenFile(ctx, sha(exe)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused file was stored: %v", err)
	}
}

// The same file received on several connections at once is stored once
// and reads back whole.
func testFilesConcurrentPut(t *testing.T, s Store) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("same bytes "), 40_000)
	var wg sync.WaitGroup
	ids := make([]string, 6)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref, err := s.PutFile(ctx, bytes.NewReader(data), 1<<20, plainSniff)
			if err != nil {
				t.Error(err)
			}
			ids[i] = ref.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != sha(data) {
			t.Fatalf("ids %v, want %s each", ids, sha(data))
		}
	}
	if got, _, err := readFile(t, s, sha(data)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want %d identical", len(got), err, len(data))
	}
}

// Quotas across replicas: a file being stored holds bytes against its
// conversation's and the total quota; parallel holds (two replicas taking
// uploads at once) never pass a quota together; a hold that shrinks or
// goes frees its bytes; an expired hold (its replica died) counts no more.
func testFileHolds(t *testing.T, s Store) {
	ctx := context.Background()
	conv, other := "agent:main:web:dm:q1", "agent:main:web:dm:q2"
	if err := s.RefFiles(ctx, conv, []store.FileRef{putFile(t, s, bytes.Repeat([]byte("s"), 100))}); err != nil {
		t.Fatal(err)
	}
	q := store.FileQuota{Conversation: 1000, Total: 1500}
	later := time.Now().Add(time.Hour)
	hold := func(id, scope string, want int64) (int64, string) {
		t.Helper()
		got, limit, err := s.HoldFileBytes(ctx, store.FileHold{ID: id, Scope: scope, Conv: want, Total: want, Until: later}, q)
		if err != nil {
			t.Fatalf("HoldFileBytes(%s, %d): %v", id, want, err)
		}
		return got, limit
	}

	// Ten holds of 200 at once: 900 bytes are left in the conversation.
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[string]int64{}
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("h%d", i)
			got, limit, err := s.HoldFileBytes(ctx, store.FileHold{ID: id, Scope: conv, Conv: 200, Total: 200, Until: later}, q)
			if err != nil {
				t.Error(err)
			}
			if got < 200 && limit != store.QuotaConversation || got == 200 && limit != "" {
				t.Errorf("hold %s granted %d, limit %q", id, got, limit)
			}
			mu.Lock()
			granted[id] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	var sum int64
	for _, g := range granted {
		sum += g
	}
	if sum != 900 {
		t.Fatalf("parallel holds granted %d bytes in all (%v); want the 900 left under the conversation's quota", sum, granted)
	}
	// Another conversation meets the total: 1500 - 100 stored - 900 held.
	if got, limit := hold("o1", other, 800); got != 500 || limit != store.QuotaTotal {
		t.Fatalf("a hold of 800 in another conversation = %d, %q; want 500, %q", got, limit, store.QuotaTotal)
	}
	// The holds end: one shrinks to its stored file's 10 bytes (its row
	// now counts in the total), the others go.
	kept := ""
	for id, g := range granted {
		switch {
		case g > 0 && kept == "":
			kept = id
			if err := s.SetFileHold(ctx, id, 10, 0, later); err != nil {
				t.Fatal(err)
			}
		default:
			if err := s.SetFileHold(ctx, id, 0, 0, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.SetFileHold(ctx, "o1", 0, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFileHold(ctx, "never-held", 0, 0, time.Time{}); err != nil {
		t.Errorf("SetFileHold of an unknown hold: %v", err)
	}
	if got, limit := hold("big", conv, 2000); got != 890 || limit != store.QuotaConversation {
		t.Fatalf("after the holds ended a hold of 2000 = %d, %q; want 890 (1000 - 100 stored - 10 held)", got, limit)
	}
	// An expired hold counts no more.
	if err := s.SetFileHold(ctx, "big", 890, 890, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := hold("big2", conv, 2000); got != 890 {
		t.Fatalf("with the first hold expired a hold of 2000 = %d; want 890", got)
	}
	if got, limit := hold("none", conv, 5); got != 0 || limit != store.QuotaConversation {
		t.Errorf("a hold with the conversation full = %d, %q; want 0, %q", got, limit, store.QuotaConversation)
	}
}

// Retention: SweepFiles removes the files no conversation named since the
// cut, with their references, and counts them; a file named after the cut
// stays. A removed file can be stored again.
func testFilesSweep(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now()
	oldData, keptData := []byte("old file"), []byte("kept file")
	old, kept := putFile(t, s, oldData), putFile(t, s, keptData)
	// old was named two days ago (that leaves its upload time as its last
	// reference); kept is named by a message an hour after the cut.
	cut := now.Add(time.Minute)
	in := intake("agent:main:web:dm:old", "o1", "old")
	in.Files, in.CreatedAt = []store.FileRef{old}, now.Add(-48*time.Hour)
	if _, err := s.AddIntake(ctx, in); err != nil {
		t.Fatal(err)
	}
	in = intake("agent:main:web:dm:kept", "k1", "kept")
	in.Files, in.CreatedAt = []store.FileRef{kept}, cut.Add(time.Hour)
	if _, err := s.AddIntake(ctx, in); err != nil {
		t.Fatal(err)
	}
	n, err := s.SweepFiles(ctx, cut)
	if err != nil || n != 1 {
		t.Fatalf("SweepFiles = %d, %v; want 1", n, err)
	}
	if _, _, err := s.OpenFile(ctx, old.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old file is still there: %v", err)
	}
	if ok, _ := s.FileNamed(ctx, old.ID, "agent:main:web:dm:old"); ok {
		t.Error("the swept file is still named")
	}
	if got, _, err := readFile(t, s, kept.ID); err != nil || !bytes.Equal(got, keptData) {
		t.Errorf("the kept file: %q, %v", got, err)
	}
	if ok, _ := s.FileNamed(ctx, kept.ID, "agent:main:web:dm:kept"); !ok {
		t.Error("the kept file lost its reference")
	}
	if n, err := s.SweepFiles(ctx, cut); err != nil || n != 0 {
		t.Errorf("second sweep = %d, %v; want 0", n, err)
	}
	if again := putFile(t, s, oldData); again.ID != old.ID {
		t.Fatalf("stored again as %s", again.ID)
	}
	if got, _, err := readFile(t, s, old.ID); err != nil || !bytes.Equal(got, oldData) {
		t.Errorf("the file stored again after its sweep: %q, %v", got, err)
	}
}
