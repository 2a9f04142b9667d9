package gateway

import (
	"context"
	"fmt"
	"sync"
)

// fileQuota holds the bytes of inbound files being stored now, until
// their message is stored, so parallel uploads cannot each pass
// attachments.maxStoredMB, maxTotalMB or the disk floor on the same
// reading of the store: by conversation until the message's references
// are written, and in all until the file's row is (its bytes then count
// in the store's total).
type fileQuota struct {
	mu    sync.Mutex
	conv  map[string]int64
	total int64
}

const mb = 1_000_000

// reserve holds conv more bytes for conversation key and total more in all
// (negative: gives them back).
func (q *fileQuota) reserve(key string, conv, total int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conv == nil {
		q.conv = map[string]int64{}
	}
	q.conv[key] += conv
	q.total += total
	if q.conv[key] <= 0 {
		delete(q.conv, key)
	}
}

func (q *fileQuota) held(key string) (conv, total int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.conv[key], q.total
}

// fileRoom is how many bytes of files conversation key may store now
// (attachments.maxStoredMB, maxTotalMB, minFreeMB, less what parallel
// uploads hold), and when that is nothing, why: the 📎 line's reason. A
// store that cannot say is an error (the message is then not taken).
func (g *Gateway) fileRoom(ctx context.Context, key string) (int64, string, error) {
	conf := g.cfg().Attachments
	conv, total, err := g.db.FileBytes(ctx, key)
	if err != nil {
		return 0, "", err
	}
	heldConv, heldTotal := g.quota.held(key)
	room, why := conf.MaxBytes, ""
	if r := conf.MaxStoredMB*mb - conv - heldConv; r < room {
		room, why = max(r, 0), fmt.Sprintf("this conversation's files reached the %d MB limit (attachments.maxStoredMB)", conf.MaxStoredMB)
	}
	if r := conf.MaxTotalMB*mb - total - heldTotal; r < room {
		room, why = max(r, 0), fmt.Sprintf("the gateway's stored files reached the %d MB limit (attachments.maxTotalMB)", conf.MaxTotalMB)
	}
	if free, ok := diskFree(g.stateDir); ok {
		if r := free - conf.MinFreeMB*mb - heldTotal; r < room {
			room, why = max(r, 0), "the gateway's disk is nearly full (attachments.minFreeMB)"
		}
	}
	return room, why, nil
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
