// Package matrix is Herald's Matrix channel: it logs in to a homeserver with
// an access token or a password, follows /sync with mautrix, turns m.text and
// m.notice messages into channels.Inbound events (with the m.thread root as
// the thread), and posts replies back into the same room and thread.
//
// It owns the Matrix wire protocol and nothing else: it must not import
// config, gateway, agent, subagent or store, never calls an agent, and does
// no end-to-end encryption (encrypted rooms are not supported).
package matrix
