package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/store"
)

// The attachment quotas (attachments.maxStoredMB, maxTotalMB) are held in
// the store: an inbound file being stored holds its bytes there (a
// store.FileHold) until its message is stored, so uploads on this process
// and on other replicas at once cannot each pass a quota on the same
// reading of the store. The disk floor (minFreeMB) is this machine's:
// inFlight counts the bytes of files this process is storing now.

const mb = 1_000_000

// holdSlack is how long a hold outlives what it waits for (the download,
// then the message's store write) before it counts no more: a replica
// that dies holding bytes frees them by then.
const holdSlack = time.Minute

// fileHolds holds inbound files' bytes in the store for one message and
// gives them back when it is stored.
type fileHolds struct {
	g   *Gateway
	key string
	ids []string
}

// hold holds up to want bytes for a file of the message (the disk floor
// taken off first): the bytes the file may have, and when that is nothing
// or less than want, why — the 📎 line's reason. A store that cannot say
// is an error (the message is then not taken).
func (h *fileHolds) hold(ctx context.Context, want int64) (id string, room int64, why string, err error) {
	g, conf := h.g, h.g.cfg().Attachments
	if free, ok := diskFree(g.stateDir); ok {
		if r := free - conf.MinFreeMB*mb - g.inFlight.Load(); r < want {
			want, why = max(r, 0), "the gateway's disk is nearly full (attachments.minFreeMB)"
		}
	}
	if want <= 0 {
		return "", 0, why, nil
	}
	id = uuid.NewString()
	room, limit, err := g.db.HoldFileBytes(ctx, store.FileHold{ID: id, Scope: h.key, Conv: want, Total: want,
		Until: time.Now().Add(AttachmentDeadline + holdSlack)},
		store.FileQuota{Conversation: conf.MaxStoredMB * mb, Total: conf.MaxTotalMB * mb})
	if err != nil {
		return "", 0, "", err
	}
	switch limit {
	case store.QuotaConversation:
		why = fmt.Sprintf("this conversation's files reached the %d MB limit (attachments.maxStoredMB)", conf.MaxStoredMB)
	case store.QuotaTotal:
		why = fmt.Sprintf("the gateway's stored files reached the %d MB limit (attachments.maxTotalMB)", conf.MaxTotalMB)
	}
	if room > 0 {
		h.ids = append(h.ids, id)
	}
	return id, room, why, nil
}

// stored shrinks hold id to the stored file's size: its row counts in the
// total now, and the conversation holds its bytes until the message names
// it. A failed write leaves the hold larger until it is released.
func (h *fileHolds) stored(ctx context.Context, id string, size int64, log *zap.Logger) {
	if err := h.g.db.SetFileHold(ctx, id, size, 0, time.Now().Add(holdSlack)); err != nil {
		log.Warn("a file's quota hold was not shrunk to its size", zap.Error(err))
	}
}

// release gives back every hold of the message (it is stored, or not
// taken). A hold that cannot be removed now expires.
func (h *fileHolds) release(log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range h.ids {
		if err := h.g.db.SetFileHold(ctx, id, 0, 0, time.Time{}); err != nil {
			log.Warn("a file's quota hold was not released; it expires", zap.Error(err))
			return
		}
	}
}

// uploadsRefused is the web API's check before it reads a post's files:
// the reason uploads are refused now (the disk floor), or "".
func (g *Gateway) uploadsRefused() string {
	free, ok := diskFree(g.stateDir)
	if !ok {
		return ""
	}
	if free < g.cfg().Attachments.MinFreeMB*mb {
		return "the gateway's disk is nearly full (attachments.minFreeMB); files are not taken now"
	}
	return ""
}
