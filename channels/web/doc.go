// Package web is Herald's built-in local web chat: one static chat page and
// the JSON/SSE API of SPEC §9 (POST /api/messages, GET /api/messages,
// GET /api/events), mounted on the gateway's HTTP listener through
// channels.HTTPMounter.
//
// It owns request validation, the token check, the per-client broadcast that
// feeds the event streams and the rendering of the page. It must not know
// about config, agents, runs or the store: the gateway hands it a Log (the
// conversation's persistence) and a SessionKey function, and receives inbound
// messages through the channels.Sink.
package web
