package gateway

import (
	"context"
	"strconv"
	"sync"
	"time"

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

// followingEntry is store.WebMessage.Then for the web chat client: the
// entry the web adapter's Send stores for an outbox item of the same
// chat, or nil for one it would not store as it is.
func followingEntry(client string) func(store.OutboxItem) *store.WebMessage {
	return func(it store.OutboxItem) *store.WebMessage {
		if it.Origin.Channel != web.Name || it.Origin.ChatID != client {
			return nil
		}
		m := outboxWebMessage(&it, time.Now().UTC())
		if m != nil {
			m.Key = "outbox:" + strconv.FormatInt(it.ID, 10)
		}
		return m
	}
}

// outboxWebMessage is the entry the web chat's Send stores for the outbox
// item it, at at, or nil for a kind the web chat does not show.
func outboxWebMessage(it *store.OutboxItem, at time.Time) *store.WebMessage {
	role, ok := web.RoleOf(it.Kind)
	if !ok {
		return nil
	}
	return &store.WebMessage{Role: role, Text: it.Text, RunID: it.RunID, At: at}
}

// webMessage is the store's row of e.
func webMessage(e *web.Entry) *store.WebMessage {
	m := &store.WebMessage{Role: e.Role, Text: e.Text, RunID: e.RunID, At: e.At, Key: e.Key}
	for _, f := range e.Files {
		m.Files = append(m.Files, store.FileRef{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size})
	}
	return m
}

// webEntry is the web chat's entry of the store's row m.
func webEntry(m *store.WebMessage) web.Entry {
	e := web.Entry{Seq: m.Seq, Role: m.Role, Text: m.Text, RunID: m.RunID, At: m.At, Key: m.Key}
	for _, f := range m.Files {
		e.Files = append(e.Files, web.File{ID: f.ID, Name: f.Name, MIME: f.MIME, Size: f.Size})
	}
	return e
}

func (l webLog) Append(ctx context.Context, client string, e *web.Entry) (int64, bool, error) {
	m := webMessage(e)
	// The outbox item this entry delivers whole is marked delivered in
	// the append's transaction (one commit, not two; and a crash between
	// them can no longer leave it stored but not marked).
	mark := deliveryOf(ctx)
	if mark != nil && e.Key == "outbox:"+strconv.FormatInt(mark.id, 10) {
		m.Delivers, m.DeliveredAt, m.Next = mark.id, mark.at, mark.next
		// The chat's items queued behind this one are stored with it, as
		// their sends would store them next (one commit, not one each).
		m.Then = followingEntry(client)
	} else {
		mark = nil
	}
	seq, err := l.db.AppendWeb(ctx, client, m)
	if err != nil {
		return 0, false, err
	}
	if l.told != nil {
		l.told(client)
	}
	e.Seq, e.At = seq, m.At
	added := m.Added
	if mark != nil {
		mark.done = true
	}
	for _, f := range m.Followed { // only with mark: m.Then is set with it
		mark.followed = append(mark.followed, f.Item)
		added = added && f.Message.Added
		e.Then = append(e.Then, webEntry(&f.Message))
	}
	return seq, added, nil
}

func (l webLog) After(ctx context.Context, client string, after int64, limit int) ([]web.Entry, error) {
	msgs, err := l.db.WebAfter(ctx, client, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]web.Entry, len(msgs))
	for i := range msgs {
		out[i] = webEntry(&msgs[i])
	}
	return out, nil
}

// webSecrets keeps the web clients' secret hashes in the store's kv table
// (SPEC §17), so they survive restarts and hold on every replica. A hash
// once claimed never changes (ClaimKV stores only the first, and nothing
// deletes it), so the hashes seen are kept in memory (at most
// maxKnownSecrets, then the set starts over): a client's post and event
// stream do not read the store for it again. A client with no hash yet is
// read every time when other replicas may claim it; with none (alone:
// SQLite, where only this process writes the store) this process makes
// every claim, so "no hash" is kept too (a loopback client never claims
// one: its post and stream then read nothing).
type webSecrets struct {
	db interface {
		ClaimKV(ctx context.Context, key, value string) (bool, error)
		GetKV(ctx context.Context, key string) (string, bool, error)
	}
	alone bool
	mu    sync.Mutex
	known map[string]string // client → claimed hash, "" = none; guarded by mu
	// claims counts the claims' beginnings and ends: a read that saw no
	// hash is kept only when no claim began or ended during it.
	claims uint64
}

// maxKnownSecrets bounds webSecrets' memory (~100 bytes a client).
const maxKnownSecrets = 4096

var _ web.ClientSecrets = (*webSecrets)(nil)

func (s *webSecrets) ClaimSecret(ctx context.Context, client, hash string) (bool, error) {
	s.mu.Lock()
	s.claims++
	delete(s.known, client)
	s.mu.Unlock()
	claimed, err := s.db.ClaimKV(ctx, "web.clientSecret:"+client, hash)
	s.mu.Lock()
	s.claims++ // a read that overlapped the claim keeps nothing
	s.mu.Unlock()
	if err == nil && claimed {
		s.keep(client, hash, 0)
	}
	return claimed, err
}

func (s *webSecrets) SecretHash(ctx context.Context, client string) (string, bool, error) {
	s.mu.Lock()
	hash, ok := s.known[client]
	claims := s.claims
	s.mu.Unlock()
	if ok {
		return hash, hash != "", nil
	}
	hash, ok, err := s.db.GetKV(ctx, "web.clientSecret:"+client)
	switch {
	case err == nil && ok:
		s.keep(client, hash, 0)
	case err == nil && s.alone:
		s.keep(client, "", claims)
	}
	return hash, ok, err
}

// keep remembers client's hash; "none" (hash "") only when no claim
// began or ended since claims was read.
func (s *webSecrets) keep(client, hash string, claims uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hash == "" && s.claims != claims {
		return
	}
	if s.known == nil || len(s.known) >= maxKnownSecrets {
		s.known = make(map[string]string)
	}
	s.known[client] = hash
}
