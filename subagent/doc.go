// Package subagent owns sub-agent runs: sessions_spawn and its limits, the
// run registry, child context and tool filtering, the announce step and
// template, the durable end-of-run (run row + outbox row in one transaction),
// restart recovery, stop cascades, steering, archive, and the session tools
// (sessions_*, session_status, subagents, agents_list, delegate).
//
// It must not import gateway or any channels/<name> package: announces leave
// through the store's outbox, which the gateway delivers.
package subagent
