package channels

import (
	"context"
	"time"
)

// Typer is a channel that can show that a reply is being written (SPEC
// §16): Telegram sendChatAction, Matrix typing, the web chat's indicator.
// The gateway calls Typing(on) every few seconds while a turn runs and
// Typing(off) when it ends.
type Typer interface {
	Typing(ctx context.Context, to Origin, on bool) error
}

// Drafter is a channel that shows a reply while it is written (SPEC §16,
// streaming "edit"). Draft shows text, the reply so far, at to: ref is what
// the previous Draft of this reply returned ("" for the first), and the
// returned ref goes to the next Draft and, as Message.DraftRef, to the final
// delivery, which turns the draft into the final text instead of posting
// again. DraftEvery is the least time between two Drafts of one reply.
type Drafter interface {
	Draft(ctx context.Context, to Origin, ref, text string) (newRef string, err error)
	DraftEvery() time.Duration
}
