// Package tools holds Herald's built-in non-session tools and the rules that
// decide which tools a call may use.
//
// It owns the workspace tools read_file, write_file and list_files (confined
// to the agent workspace with os.Root), exec (sh -c in the workspace, confined by
// package sandbox, with a timeout and an output cap), web_fetch (GET only, size
// and time capped), web_search (a search provider behind SearchProvider, one
// file each, reached by the gateway itself), the security.toolPolicy decision (Policy.Decide), the
// sub-agent tool filter (SubagentToolAllowed) and the bootstrap files that
// are appended to a session's system prompt (LoadBootstrap).
//
// It must not import gateway, subagent or any channels/<name> package, must
// not ask for approvals itself (the caller acts on a Decision), and must never
// let a tool touch a path outside the workspace it was called with.
package tools
