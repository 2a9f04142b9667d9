package matrix

import (
	"context"
	"fmt"

	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// The capabilities of the Matrix adapter (SPEC §21: one delivery path,
// PartSender; a guard for each).
var (
	_ channels.Channel    = (*Adapter)(nil)
	_ channels.PartSender = (*Adapter)(nil)
	_ channels.Healther   = (*Adapter)(nil)
	_ channels.Checker    = (*Adapter)(nil)
	_ channels.Typer      = (*Adapter)(nil)
	_ channels.Drafter    = (*Adapter)(nil)
)

// Limit is the message size in characters the outbox splits Matrix
// messages at (SPEC §9).
const Limit = 16000

// PartLimit is Matrix's message size the outbox splits at (SPEC §9).
func (a *Adapter) PartLimit() int { return Limit }

// SendPart posts one part into the origin's room (in its thread when
// ThreadID is set) and returns its event id. The transaction id
// "herald-<ID>-<part>" makes a re-send after a crash return the event
// already sent instead of posting it twice (SPEC §12). A part with a
// DraftRef turns the draft into its final text (an m.replace edit).
func (a *Adapter) SendPart(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	a.mu.Lock()
	running := a.running
	a.mu.Unlock()
	if !running {
		return "", fmt.Errorf("matrix: send to %s: %w", to, ErrNotStarted)
	}
	to, err := a.inRoom(ctx, to, true)
	if err != nil {
		return "", fmt.Errorf("matrix: send: %w", err)
	}
	txn := ""
	if msg.ID != "" {
		txn = fmt.Sprintf("herald-%s-%d", msg.ID, max(msg.Part, 1))
	}
	if msg.DraftRef != "" {
		if err := a.edit(ctx, to, id.EventID(msg.DraftRef), msg.Text, txn); err != nil {
			return "", fmt.Errorf("matrix: finish the draft: %w", err)
		}
		return msg.DraftRef, nil
	}
	evt, err := a.sendText(ctx, to, msg.Text, txn)
	if err != nil {
		return "", fmt.Errorf("matrix: send part %d: %w", max(msg.Part, 1), err)
	}
	return string(evt), nil
}
