package web

import (
	"context"
	"time"

	"github.com/heraldhq/herald/channels"
)

// Typing shows (or clears) "the agent is writing" in the client's chat; a
// clear also drops the draft (the final reply follows as a message).
func (a *Adapter) Typing(_ context.Context, to channels.Origin, on bool) error {
	a.hub.setLive(to.ChatID, func(st *liveState) {
		st.typing = on
		if !on {
			st.draft = ""
		}
	})
	return nil
}

// Draft shows the reply written so far as an SSE delta event. The web chat
// needs no platform message to edit: the ref stays "" and the final reply
// arrives as the conversation's next message.
func (a *Adapter) Draft(_ context.Context, to channels.Origin, _ string, text string) (string, error) {
	a.hub.setLive(to.ChatID, func(st *liveState) { st.draft, st.typing = text, true })
	return "", nil
}

// DraftEvery: the page can take a delta every 100 ms.
func (a *Adapter) DraftEvery() time.Duration { return 100 * time.Millisecond }
