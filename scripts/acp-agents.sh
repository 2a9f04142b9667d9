#!/usr/bin/env bash
# Installs the real ACP coding agents the tests drive against fake models
# (SPEC §26) into an npm prefix, and prints that prefix; the tests find it
# through HERALD_ACP_NPM (scripts/test.sh exports it):
#   @zed-industries/claude-agent-acp  Claude Code over ACP (node)
#   @zed-industries/codex-acp         Codex over ACP: a node launcher and its
#                                     native binary, an optional dependency
#                                     per platform (from npm too)
# Without npm it says so and exits 0 (the real-agent tests then skip with
# that reason). Only the npm registry is reached.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=("@zed-industries/claude-agent-acp@0.23.1" "@zed-industries/codex-acp@0.16.0")
PREFIX="${HERALD_ACP_NPM:-${XDG_CACHE_HOME:-$HOME/.cache}/herald/acp-agents}"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
	echo "acp-agents.sh: npm/node not found; the real ACP agent tests will skip (install Debian's nodejs and npm)" >&2
	exit 0
fi
mkdir -p "$PREFIX"
# installed PKG@VERSION: its package.json under the prefix has that version.
installed() {
	local name="${1%@*}" version="${1##*@}"
	grep -q "\"version\": \"$version\"" "$PREFIX/node_modules/$name/package.json" 2>/dev/null
}
missing=()
for p in "${PKGS[@]}"; do
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "$PREFIX"
	exit 0
fi
if timeout 300 npm install --no-audit --no-fund --prefix "$PREFIX" "${PKGS[@]}" >&2; then
	echo "acp-agents.sh: ${PKGS[*]} ready in $PREFIX" >&2
	echo "$PREFIX"
else
	echo "acp-agents.sh: could not install ${missing[*]} (registry unreachable?); the real ACP agent tests of what is missing will skip" >&2
	echo "$PREFIX"
fi
