package store

import (
	"context"
	"fmt"
	"time"
)

// PostponeOutbox moves an item's next attempt to next without counting an
// attempt: the item was not tried (it waits behind an earlier message to the
// same chat). ErrNotFound.
func (d *DB) PostponeOutbox(ctx context.Context, id int64, next time.Time) error {
	n, err := d.writer(ctx).execN(`UPDATE outbox SET next_attempt_at = ? WHERE id = ? AND delivered_at IS NULL`, msOrNow(next), id)
	return d.outboxResult(fmt.Sprintf("postpone outbox %d", id), n, err)
}
