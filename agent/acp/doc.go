// Package acp runs an external coding agent (Codex, Claude Code, Gemini
// CLI…) as a sub-agent over the Agent Client Protocol (SPEC §26).
//
// It owns the agent's process (started in the sandbox of SPEC §17 with
// the conversation workspace as its working directory and only the
// configured environment), the client side of the protocol (initialize,
// session/new or session/load, session/prompt, session/cancel), the client
// methods Herald serves (text files confined to the workspace with
// os.Root, permission requests decided by the caller's Authorizer as calls
// of the tool "acp", terminals run in a sandbox like the agent's), and the
// translation of session/update notifications into the child's transcript
// lines, the same lines the model loop writes.
//
// It must not import subagent or gateway: package subagent adapts it to
// its Runner, and the gateway wires the policy.
package acp
