// Package gateway wires Herald together: it owns the router from channel
// inbound events to requester sessions and agents, the main lane and turns,
// chat commands, tool approvals, the outbox deliverer that posts replies and
// announces to channels, and the HTTP listener (/healthz, /readyz, /metrics,
// webhooks, web chat).
//
// Nothing but cmd/herald imports it.
package gateway
