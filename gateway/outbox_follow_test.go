package gateway

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/store"
)

// countingWebLog counts the web chat's store writes.
type countingWebLog struct {
	*store.DB
	appends atomic.Int64
}

func (s *countingWebLog) AppendWeb(ctx context.Context, client string, m *store.WebMessage) (int64, error) {
	s.appends.Add(1)
	return s.DB.AppendWeb(ctx, client, m)
}

// TestWebChatBacklogGoesOutInOneCommit: the items queued for one web
// chat (a reply and the announces behind it, as 100 sub-agents ending at
// once leave them) reach the conversation in the order they were queued,
// each once, with the write that delivers the first — not one commit
// after another — and each is counted delivered. Another chat's item is
// not taken along.
func TestWebChatBacklogGoesOutInOneCommit(t *testing.T) {
	t.Parallel()
	db := openTestStore(t)
	wl := &countingWebLog{DB: db}
	rl := &recordingLog{webLog: webLog{db: wl}}
	ch, err := web.New(web.Options{Log: rl})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	to := channels.Origin{Channel: web.Name, ChatID: "c1", ChatType: channels.ChatDM}
	other := to
	other.ChatID = "c2"
	queue := func(o channels.Origin, kind channels.Kind, text, runID string) {
		t.Helper()
		if _, err := db.EnqueueOutbox(ctx, &store.OutboxItem{Origin: o, Kind: kind, Text: text, RunID: runID, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	queue(to, channels.KindReply, "spawned 5", "")
	var want []string
	want = append(want, "assistant:spawned 5")
	for i := range 5 {
		id := strconv.Itoa(i)
		queue(to, channels.KindAnnounce, "✅ run "+id, "run-"+id)
		want = append(want, "announce:✅ run "+id)
	}
	queue(to, channels.KindSystem, "/status", "")
	want = append(want, "system:/status")
	queue(other, channels.KindReply, "for c2", "")

	d := testDeliverer(t, wl, ch, 16)
	// Each item is counted once its send returned: wait for the count.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0.0
		for _, k := range []channels.Kind{channels.KindReply, channels.KindAnnounce, channels.KindSystem} {
			n += counted(t, d.metrics, "herald_outbox_delivered_total", string(k))
		}
		if n == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v of 8 items counted delivered after 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p, _, _, err := db.OutboxStats(ctx); err != nil || p != 0 {
		t.Fatalf("%d items pending, %v; want none", p, err)
	}
	msgs, err := db.WebAfter(ctx, "c1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Role+":"+m.Text)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("c1's conversation:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c2, _ := db.WebAfter(ctx, "c2", 0, 0); len(c2) != 1 || c2[0].Text != "for c2" {
		t.Errorf("c2's conversation = %+v; want its one reply", c2)
	}
	// c1's seven items in one write, c2's in its own.
	if n := wl.appends.Load(); n != 2 {
		t.Errorf("%d web log writes for 8 items to 2 chats; want 2 (one a chat)", n)
	}
	// The web chat is told the entries stored behind the first, to write
	// them to its open streams as they are.
	rl.mu.Lock()
	var carried []string
	for _, e := range rl.then["spawned 5"] {
		carried = append(carried, strconv.FormatInt(e.Seq, 10)+":"+e.Role+":"+e.Text)
	}
	added := rl.added["spawned 5"]
	rl.mu.Unlock()
	var wantCarried []string
	for i, w := range want[1:] {
		wantCarried = append(wantCarried, strconv.Itoa(i+2)+":"+w)
	}
	if !added || strings.Join(carried, "|") != strings.Join(wantCarried, "|") {
		t.Errorf("the first send's entry: added %v, then %v; want added, then %v", added, carried, wantCarried)
	}
	if delivered := counted(t, d.metrics, "herald_outbox_delivered_total", string(channels.KindAnnounce)); delivered != 5 {
		t.Errorf("announces counted delivered = %v, want 5", delivered)
	}
}

// recordingLog is the gateway's web Log, recording what each Append
// reported by the entry's text.
type recordingLog struct {
	webLog
	mu    sync.Mutex
	then  map[string][]web.Entry
	added map[string]bool
}

func (l *recordingLog) Append(ctx context.Context, client string, e *web.Entry) (int64, bool, error) {
	seq, added, err := l.webLog.Append(ctx, client, e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.then == nil {
		l.then, l.added = map[string][]web.Entry{}, map[string]bool{}
	}
	l.then[e.Text], l.added[e.Text] = e.Then, added
	return seq, added, err
}

// counted is the value of the counter name with the label value label in
// m's registry (0: none).
func counted(t *testing.T, m *metrics, name, label string) float64 {
	t.Helper()
	mfs, err := m.gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, c := range mf.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetValue() == label {
					return c.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
