package store

import (
	"time"

	"github.com/heraldhq/herald/channels"
)

// t0 is a fixed time with sub-millisecond digits, so tests see truncation.
var t0 = time.Date(2026, 11, 21, 20, 41, 26, 123456789, time.FixedZone("CET", 3600))

func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

var slackOrigin = channels.Origin{Channel: "slack", Account: "T1", ChatID: "C42", ChatType: channels.ChatGroup,
	ThreadID: "1700000000.000100", SenderID: "U7", MessageID: "1700000000.000200"}

// newRun returns a run and its child session for requester "agent:main:main".
func newRun(id string) (*Run, *Session) {
	r := &Run{
		ID:             id,
		ChildKey:       "agent:main:subagent:" + id,
		ChildSessionID: "sess-" + id,
		RequesterKey:   "agent:main:slack:group:C42",
		Depth:          1,
		AgentID:        "main",
		Task:           "summarise the thread",
		Label:          "summary",
		Model:          "anthropic/claude-haiku",
		Cleanup:        "keep",
		TimeoutSeconds: 60,
		MaxIterations:  12,
		AllowedTools:   []string{"read", "web_fetch"},
		Origin:         slackOrigin,
		CostUSD:        -1,
		CreatedAt:      t0,
	}
	return r, &Session{}
}
