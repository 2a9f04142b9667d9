// Package ids holds Herald's typed identifiers — session keys and run ids —
// and is the one place they are built and taken apart (SPEC §2). It does no
// I/O and imports nothing of Herald but channels, so every package can use
// it.
package ids

import (
	"strings"

	"github.com/google/uuid"

	"github.com/heraldhq/herald/channels"
)

// SessionKey names a session: agent:<agentId>:<rest>. A requester
// session's rest names its conversation (Requester); a sub-agent's is
// subagent:<uuid>, a delegate's delegate:<uuid>.
type SessionKey string

// RunID names a sub-agent run (a UUID).
type RunID string

// Kinds of session a key names (SessionKey.Kind).
const (
	KindRequester = "requester" // a conversation on a channel
	KindSubagent  = "subagent"  // agent:<id>:subagent:<uuid>
	KindDelegate  = "delegate"  // agent:<id>:delegate:<uuid>
)

// Requester is the requester session key of the conversation at o with
// agentID: agent:<agentId>:<channel>:<chatType>:<chatId>[:thread:<threadId>],
// where a chat type other than group counts as dm.
func Requester(agentID string, o channels.Origin) SessionKey {
	chatType := o.ChatType
	if chatType != channels.ChatGroup {
		chatType = channels.ChatDM
	}
	k := "agent:" + agentID + ":" + string(o.Channel) + ":" + chatType + ":" + o.ChatID
	if o.ThreadID != "" {
		k += ":thread:" + o.ThreadID
	}
	return SessionKey(k)
}

// NewSubagent is a new sub-agent session key of agentID:
// agent:<agentId>:subagent:<uuid>.
func NewSubagent(agentID string) SessionKey {
	return SessionKey("agent:" + agentID + ":" + KindSubagent + ":" + uuid.NewString())
}

// NewDelegate is a new delegate session key of agentID:
// agent:<agentId>:delegate:<uuid>.
func NewDelegate(agentID string) SessionKey {
	return SessionKey("agent:" + agentID + ":" + KindDelegate + ":" + uuid.NewString())
}

// NewRunID is a new run id.
func NewRunID() RunID { return RunID(uuid.NewString()) }

// parse splits agent:<agentId>:<rest>; ok is false for a key of another
// shape (an empty agent id or rest included).
func (k SessionKey) parse() (agentID, rest string, ok bool) {
	after, found := strings.CutPrefix(string(k), "agent:")
	if !found {
		return "", "", false
	}
	agentID, rest, found = strings.Cut(after, ":")
	if !found || agentID == "" || rest == "" {
		return "", "", false
	}
	return agentID, rest, true
}

// AgentID is the agent the key names; "" when k is not agent:<id>:….
func (k SessionKey) AgentID() string {
	id, _, _ := k.parse()
	return id
}

// Rest is what follows agent:<agentId>: — the conversation of a requester
// key, subagent:<uuid> or delegate:<uuid>; k itself when k is not
// agent:<id>:….
func (k SessionKey) Rest() string {
	if _, rest, ok := k.parse(); ok {
		return rest
	}
	return string(k)
}

// Kind is KindSubagent, KindDelegate or KindRequester; "" when k is not
// agent:<id>:….
func (k SessionKey) Kind() string {
	_, rest, ok := k.parse()
	switch {
	case !ok:
		return ""
	case strings.HasPrefix(rest, KindSubagent+":"):
		return KindSubagent
	case strings.HasPrefix(rest, KindDelegate+":"):
		return KindDelegate
	}
	return KindRequester
}

func (k SessionKey) String() string { return string(k) }

func (r RunID) String() string { return string(r) }
