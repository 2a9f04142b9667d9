package web

import "github.com/heraldhq/herald/channels"

// The capabilities of the web chat adapter, a guard for each. It has no
// PartSender: the web chat takes a message whole (no size limit to split
// at) and stores it once per outbox id.
var (
	_ channels.Channel    = (*Adapter)(nil)
	_ channels.Typer      = (*Adapter)(nil)
	_ channels.Drafter    = (*Adapter)(nil)
	_ channels.FileSender = (*Adapter)(nil)
)
