#!/usr/bin/env bash
# Fetches the official reference MCP server (@modelcontextprotocol/server-
# everything, the version pinned in agent/mcptools/everything_test.go) into
# npx's cache, so its test runs without waiting for the registry. Without
# npx it says so and exits 0 (the test then skips); with --install-node it
# first installs Debian's nodejs and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

PKG=$(sed -n 's/^const EverythingPackage = "\(.*\)"$/\1/p' agent/mcptools/everything_test.go)
if [ -z "$PKG" ]; then
	echo "mcp-everything.sh: EverythingPackage not found in agent/mcptools/everything_test.go" >&2
	exit 1
fi

if ! command -v npx >/dev/null 2>&1; then
	if [ "${1:-}" != "--install-node" ]; then
		echo "mcp-everything.sh: npx not found; the reference MCP server test will skip (run with --install-node to install Debian's nodejs and npm)" >&2
		exit 0
	fi
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		SUDO="sudo"
	fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update >&2
	$SUDO apt-get install -y nodejs npm >&2
fi

# The server speaks MCP on stdin and exits at EOF: starting it once with an
# empty stdin fills the cache.
if timeout 300 npx -y "$PKG" </dev/null >/dev/null 2>&1; then
	echo "mcp-everything.sh: $PKG ready"
else
	echo "mcp-everything.sh: could not fetch $PKG (registry unreachable?); its test will skip" >&2
fi
