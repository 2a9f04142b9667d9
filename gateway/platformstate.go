package gateway

import (
	"context"
	"strconv"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/store"
)

// matrixSyncStore keeps the Matrix /sync tokens in the store (SPEC §12:
// Matrix next_batch persisted), so a restart continues from the last
// token instead of skipping what arrived while the gateway was down.
type matrixSyncStore struct{ db store.KV }

var _ mautrix.SyncStore = matrixSyncStore{}

func (m matrixSyncStore) SaveFilterID(ctx context.Context, userID id.UserID, filterID string) error {
	return m.db.SetKV(ctx, "matrix.filter."+string(userID), filterID)
}

func (m matrixSyncStore) LoadFilterID(ctx context.Context, userID id.UserID) (string, error) {
	v, _, err := m.db.GetKV(ctx, "matrix.filter."+string(userID))
	return v, err
}

func (m matrixSyncStore) SaveNextBatch(ctx context.Context, userID id.UserID, token string) error {
	return m.db.SetKV(ctx, "matrix.next_batch."+string(userID), token)
}

func (m matrixSyncStore) LoadNextBatch(ctx context.Context, userID id.UserID) (string, error) {
	v, _, err := m.db.GetKV(ctx, "matrix.next_batch."+string(userID))
	return v, err
}

// telegramOffsets keeps the Telegram getUpdates offset in the store (SPEC
// §12: Telegram update_id, offset persisted).
type telegramOffsets struct{ db store.KV }

func (t telegramOffsets) LoadOffset(ctx context.Context) (int, error) {
	v, found, err := t.db.GetKV(ctx, "telegram.offset")
	if err != nil || !found {
		return 0, err
	}
	return strconv.Atoi(v)
}

func (t telegramOffsets) SaveOffset(ctx context.Context, offset int) error {
	return t.db.SetKV(ctx, "telegram.offset", strconv.Itoa(offset))
}

// slackReplays records the Slack slash commands taken in the store's kv
// table (SPEC §17), so a replayed signed request runs nothing on any
// replica or after a restart. Keys past their window are swept at most
// once a minute.
type slackReplays struct {
	db interface {
		ClaimKV(ctx context.Context, key, value string) (bool, error)
		DeleteKVBefore(ctx context.Context, prefix string, t time.Time) (int64, error)
	}
	mu        sync.Mutex
	lastSweep time.Time
}

const slackReplayPrefix = "slack.slash:"

func (s *slackReplays) TakeOnce(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	now := time.Now()
	s.mu.Lock()
	sweep := now.Sub(s.lastSweep) > time.Minute
	if sweep {
		s.lastSweep = now
	}
	s.mu.Unlock()
	if sweep {
		// Every key is recorded at most one window (5 min, and as much
		// again for a timestamp ahead of the clock) before it lapses.
		if _, err := s.db.DeleteKVBefore(ctx, slackReplayPrefix, now.Add(-11*time.Minute)); err != nil {
			return false, err
		}
	}
	return s.db.ClaimKV(ctx, key, now.Add(ttl).UTC().Format(time.RFC3339))
}
