package telegram

import "github.com/heraldhq/herald/channels"

// The capabilities of the Telegram adapter (SPEC §21: one delivery path,
// PartSender; a guard for each).
var (
	_ channels.Channel     = (*Adapter)(nil)
	_ channels.PartSender  = (*Adapter)(nil)
	_ channels.Healther    = (*Adapter)(nil)
	_ channels.HTTPMounter = (*Adapter)(nil)
	_ channels.Checker     = (*Adapter)(nil)
	_ channels.Typer       = (*Adapter)(nil)
	_ channels.Drafter     = (*Adapter)(nil)
	_ channels.FileSender  = (*Adapter)(nil)
)

// Limit is Telegram's message size in characters (SPEC §9): the outbox
// splits at it (PartLimit).
const Limit = 4096
