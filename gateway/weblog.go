package gateway

import (
	"context"
	"strconv"
	"sync"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/store"
)

// webLog keeps the web chat's conversations in the store. told (optional)
// is called after a new entry is stored, so streams of the client open on
// other replicas wake up.
type webLog struct {
	db   store.WebLog
	told func(client string)
	// intake is the gateway's intake with the entry to store alongside
	// (Gateway.intake).
	intake func(ctx context.Context, in channels.Inbound, keep *webKeep) error
}

var _ web.IntakeLog = webLog{}

// AppendInbound stores the person's message e and its intake in one
// transaction (store.Intake.Web): one commit where there were two, and a
// message the store did not take leaves no entry behind.
func (l webLog) AppendInbound(ctx context.Context, client string, e *web.Entry, in channels.Inbound) (int64, bool, error) {
	keep := &webKeep{m: webMessage(e), told: l.told}
	err := l.intake(ctx, in, keep)
	if keep.stored {
		e.Seq, e.At = keep.m.Seq, keep.m.At
	}
	return keep.m.Seq, keep.stored, err
}

// webMessage is the store's row of e.
func webMessage(e *web.Entry) *store.WebMessage {
	m := &store.WebMessage{Role: e.Role, Text: e.Text, RunID: e.RunID, At: e.At, Key: e.Key}
	for _, f := range e.Files {
		m.Files = append(m.Files, store.FileRef{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size})
	}
	return m
}

func (l webLog) Append(ctx context.Context, client string, e *web.Entry) (int64, bool, error) {
	m := webMessage(e)
	// The outbox item this entry delivers whole is marked delivered in
	// the append's transaction (one commit, not two; and a crash between
	// them can no longer leave it stored but not marked).
	mark := deliveryOf(ctx)
	if mark != nil && e.Key == "outbox:"+strconv.FormatInt(mark.id, 10) {
		m.Delivers, m.DeliveredAt, m.Next = mark.id, mark.at, mark.next
	} else {
		mark = nil
	}
	seq, err := l.db.AppendWeb(ctx, client, m)
	if err == nil && mark != nil {
		mark.done = true
	}
	if err == nil && l.told != nil {
		l.told(client)
	}
	if err != nil {
		return 0, false, err
	}
	e.Seq, e.At = seq, m.At
	return seq, m.Added, nil
}

func (l webLog) After(ctx context.Context, client string, after int64, limit int) ([]web.Entry, error) {
	msgs, err := l.db.WebAfter(ctx, client, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]web.Entry, len(msgs))
	for i, m := range msgs {
		out[i] = web.Entry{Seq: m.Seq, Role: m.Role, Text: m.Text, RunID: m.RunID, At: m.At}
		for _, f := range m.Files {
			out[i].Files = append(out[i].Files, web.File{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size})
		}
	}
	return out, nil
}

// webSecrets keeps the web clients' secret hashes in the store's kv table
// (SPEC §17), so they survive restarts and hold on every replica. A hash
// once claimed never changes (ClaimKV stores only the first, and nothing
// deletes it), so the hashes seen are kept in memory (at most
// maxKnownSecrets, then the set starts over): a client's post and event
// stream do not read the store for it again. A client with no hash yet is
// always read: another replica may claim it.
type webSecrets struct {
	db interface {
		ClaimKV(ctx context.Context, key, value string) (bool, error)
		GetKV(ctx context.Context, key string) (string, bool, error)
	}
	mu    sync.Mutex
	known map[string]string // client → claimed hash; guarded by mu
}

// maxKnownSecrets bounds webSecrets' memory (~100 bytes a client).
const maxKnownSecrets = 4096

var _ web.ClientSecrets = (*webSecrets)(nil)

func (s *webSecrets) ClaimSecret(ctx context.Context, client, hash string) (bool, error) {
	claimed, err := s.db.ClaimKV(ctx, "web.clientSecret:"+client, hash)
	if err == nil && claimed {
		s.keep(client, hash)
	}
	return claimed, err
}

func (s *webSecrets) SecretHash(ctx context.Context, client string) (string, bool, error) {
	s.mu.Lock()
	hash, ok := s.known[client]
	s.mu.Unlock()
	if ok {
		return hash, true, nil
	}
	hash, ok, err := s.db.GetKV(ctx, "web.clientSecret:"+client)
	if err == nil && ok {
		s.keep(client, hash)
	}
	return hash, ok, err
}

func (s *webSecrets) keep(client, hash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known == nil || len(s.known) >= maxKnownSecrets {
		s.known = make(map[string]string)
	}
	s.known[client] = hash
}
