// Package mcptools gives agents the tools of Model Context Protocol servers
// (SPEC §15). A Manager keeps one client session per configured server (a
// child process speaking stdio, or a streamable HTTP endpoint), restarts it
// with backoff when it fails, follows notifications/tools/list_changed, and
// offers each server tool to the agent loop as mcp__<server>__<tool>.
//
// It uses the official Go SDK, github.com/modelcontextprotocol/go-sdk.
package mcptools
