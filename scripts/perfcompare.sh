#!/usr/bin/env bash
# Compare an older commit with this tree, interleaved, on this machine:
# start → /readyz 200 (median of 5 starts), idle RSS (RssAnon and RssFile),
# one plain turn and SPAWN 8 → all announced, each round measuring the old
# build then the new one (herald-load -compare; docs/performance.md).
#
#   scripts/perfcompare.sh [OLD_REF [NEW_REF]]    # defaults: 67a26c2 and the working tree
#   ROUNDS=3 STARTS=7 scripts/perfcompare.sh 67a26c2 main
#   IDLE_TURNS=1 scripts/perfcompare.sh       # each turn and SPAWN 8 starts on an idle gateway
#
# Both are built the same way (go build -tags goolm, not stripped) into a
# temp dir, from git archive of the ref (the working tree as it is for the
# new side when NEW_REF is not given), static (CGO_ENABLED=0) as releases
# and make build are; CGO_ENABLED=1 builds both with cgo, as the harness
# built them before 2026-11-27 (the issue's 67a26c2 figures are such a build).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-67a26c2}
new=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/herald-perfcompare-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

build() { # build SRC_DIR OUT
	(cd "$1" && CGO_ENABLED=${CGO_ENABLED:-0} go build -tags goolm -o "$2" ./cmd/herald)
}
mkdir -p "$tmp/old"
git archive "$old" | tar -x -C "$tmp/old"
echo "== building $old" >&2
build "$tmp/old" "$tmp/herald-old"
if [ -n "$new" ]; then
	mkdir -p "$tmp/new"
	git archive "$new" | tar -x -C "$tmp/new"
	echo "== building $new" >&2
	build "$tmp/new" "$tmp/herald-new"
	newName=$(git rev-parse --short "$new")
else
	echo "== building the working tree" >&2
	build . "$tmp/herald-new"
	newName="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +)"
fi
# Copy each binary once: the Go linker writes its output through mmap,
# and Linux 6.x then caches the file in 2 MB folios, so a process running
# a freshly linked binary has nearly all of it resident whatever it runs
# (docs/performance.md). An installed binary is written with write(2).
for b in old new; do
	cp "$tmp/herald-$b" "$tmp/herald-$b.cp" && mv "$tmp/herald-$b.cp" "$tmp/herald-$b"
done
ls -l "$tmp/herald-old" "$tmp/herald-new" | awk '{ printf "%s %.0f MB\n", $NF, $5/1e6 }' >&2
go run ./cmd/herald-load -compare "$tmp/herald-old,$tmp/herald-new" \
	-compare-names "$(git rev-parse --short "$old"),$newName" \
	-rounds "${ROUNDS:-2}" -starts "${STARTS:-5}" -timeout 30m \
	${IDLE_TURNS:+-idle-turns}
