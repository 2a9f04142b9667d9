#!/usr/bin/env bash
# The project's test command (`make test`, and what .ci/run calls): installs
# what the tests need, runs every Go test, then a bounded fuzz of the chat
# command parser. Needs only the Go module proxy and Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== headless Chromium for the web chat browser tests"
bash scripts/chromium.sh

echo "== Dendrite (a real Matrix homeserver) for the Matrix integration tests"
bash scripts/dendrite.sh build

echo "== go vet"
go vet ./...

echo "== go test"
go test -count=1 -timeout 20m ./...

echo "== fuzz the chat command parser (bounded)"
go test -run='^$' -fuzz='^FuzzParse$' -fuzztime=15s ./gateway/command
