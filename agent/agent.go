// Package agent runs one agent session: the model loop (provider call →
// tools → transcript), the provider implementations (Anthropic and OpenAI
// SDKs, the offline demo model), the tool registry and the built-in workspace
// tools, and usage and cost accounting.
//
// It must not import gateway, subagent or any channels/<name> package: the
// session tools that reach other sessions are registered into it from above.
package agent
