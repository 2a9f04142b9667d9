// Package command parses and runs the chat commands of SPEC §8 —
// /subagents list|stop|log|info|send, /stop, /approve, /deny, /status and
// /help — for every channel: one parser, one set of exact replies.
//
// It acts only on the requester session it is given and the sub-agent runs
// below it; it must not reach another conversation's runs, must not talk to
// a channel (the gateway posts the reply it returns), and must not panic on
// any input.
package command
