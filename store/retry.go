package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Transient reports whether a write that failed with err may succeed when
// tried again: the database restarting or unreachable, SQLITE_BUSY past the
// busy timeout, a full disk, an I/O error, no file descriptor free. Only a
// missing or duplicate row, a corrupt database, a newer schema and a
// cancelled call are not.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrCorrupt),
		errors.Is(err, ErrSchemaTooNew), errors.Is(err, ErrResolved), errors.Is(err, ErrNotQueued),
		errors.Is(err, ErrLeaseHeld), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// ErrOutage: a write kept failing for longer than the caller's bound.
var ErrOutage = errors.New("the state store could not be written")

// Retry backoff: the first wait and the longest.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

// RetryWrite runs write until it succeeds, fails with an error that is not
// Transient, or ctx ends; between tries it waits 100 ms doubling to 2 s and
// calls onFail (to log the failure and the wait). A write still failing
// giveUp after its first failure (0: no bound) ends with an error wrapping
// ErrOutage: the caller stops the process rather than wait without end.
func RetryWrite(ctx context.Context, giveUp time.Duration, onFail func(err error, attempt int, wait time.Duration), write func(context.Context) error) error {
	var first time.Time
	wait := retryFirst
	for attempt := 1; ; attempt++ {
		err := write(ctx)
		if err == nil || !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		if giveUp > 0 && time.Since(first) >= giveUp {
			return fmt.Errorf("%w for %s: %w", ErrOutage, time.Since(first).Round(time.Millisecond), err)
		}
		if onFail != nil {
			onFail(err, attempt, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(wait*2, retryMax)
	}
}
