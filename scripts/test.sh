#!/usr/bin/env bash
# The project's test command (`make test`, and what .ci/run calls): installs
# what the tests need (Chromium, Dendrite, PostgreSQL, bubblewrap), then runs every Go test
# (the fuzz targets' seed corpora included; `make fuzz` fuzzes). Needs the Go
# module proxy and Debian's packages (and, when npx is present, the npm
# registry for the reference MCP server and the real ACP agents).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== headless Chromium for the web chat browser tests"
bash scripts/chromium.sh

echo "== Dendrite (a real Matrix homeserver) for the Matrix integration tests"
bash scripts/dendrite.sh build

echo "== PostgreSQL (Debian's package) for the store's contract suite and the replica tests"
bash scripts/postgres.sh install
# The tests start their own throwaway clusters; here a missing server is a failure, not a skip.
export HERALD_REQUIRE_POSTGRES=1

echo "== bubblewrap (Debian's package) for the exec sandbox tests"
bash scripts/bubblewrap.sh install
# Where user namespaces are not allowed the sandbox tests run on Landlock alone.
bash scripts/bubblewrap.sh check || true

echo "== the reference MCP server (@modelcontextprotocol/server-everything) when npx is present"
bash scripts/mcp-everything.sh

echo "== the real ACP coding agents (@zed-industries/claude-agent-acp, @zed-industries/codex-acp) when npm is present"
HERALD_ACP_NPM=$(bash scripts/acp-agents.sh)
export HERALD_ACP_NPM

# goolm: mautrix's pure-Go Olm (Matrix end-to-end encryption) — no libolm,
# no cgo needed for it. Passed here so a clean checkout needs no GOFLAGS.
TAGS=goolm

echo "== go vet"
go vet -tags "$TAGS" ./...

echo "== go test (with the race detector: Herald is a daemon built of goroutines)"
# -race needs cgo (gcc is on every machine that builds Dendrite). Measured on
# 2 cores: see docs/performance.md ("make test").
go test -tags "$TAGS" -race -count=1 -timeout 45m ./...
# The fuzz targets' seed corpora (f.Add and testdata/fuzz) ran above as
# ordinary test cases; real fuzzing rebuilds everything with coverage
# instrumentation, so it is its own command: make fuzz.

echo "== the exec sandbox as it is shipped: static (CGO_ENABLED=0), so libcap's psx goes through syscall.AllThreadsSyscall"
# -race above needs cgo, which links libpsx instead; the gateway binary the
# Makefile, releases and the harness build is static (~10 s).
CGO_ENABLED=0 go test -tags "$TAGS" -count=1 ./agent/sandbox
