#!/usr/bin/env bash
# Installs the real ACP coding agent the tests drive against a fake model
# (@zed-industries/claude-agent-acp: Claude Code over the Agent Client
# Protocol, SPEC §26) into an npm prefix, and prints that prefix; the tests
# find it through HERALD_ACP_NPM (scripts/test.sh exports it). Without npm
# it says so and exits 0 (the real-agent tests then skip with that reason).
set -euo pipefail
cd "$(dirname "$0")/.."

PKG="@zed-industries/claude-agent-acp@0.23.1"
PREFIX="${HERALD_ACP_NPM:-${XDG_CACHE_HOME:-$HOME/.cache}/herald/acp-agents}"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
	echo "acp-agents.sh: npm/node not found; the real ACP agent tests will skip (install Debian's nodejs and npm)" >&2
	exit 0
fi
mkdir -p "$PREFIX"
if [ -x "$PREFIX/node_modules/.bin/claude-agent-acp" ] && grep -q '"version": "0.23.1"' "$PREFIX/node_modules/@zed-industries/claude-agent-acp/package.json" 2>/dev/null; then
	echo "$PREFIX"
	exit 0
fi
if timeout 300 npm install --no-audit --no-fund --prefix "$PREFIX" "$PKG" >&2; then
	echo "acp-agents.sh: $PKG ready in $PREFIX" >&2
	echo "$PREFIX"
else
	echo "acp-agents.sh: could not install $PKG (registry unreachable?); the real ACP agent tests will skip" >&2
fi
