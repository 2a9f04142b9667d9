// Package agent runs one agent session: the model loop (provider call →
// tools → transcript, steering, resuming a cut turn), the neutral types the
// providers (package providers) and tools (package tools, MCP tools in
// package mcptools) implement, the tool registry, the model catalog, usage
// and cost accounting, and the per-run problem log and log fields that
// deeper layers report into.
//
// It must not import gateway, subagent or any channels/<name> package: the
// session tools that reach other sessions are registered into it from above.
package agent
