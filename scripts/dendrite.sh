#!/usr/bin/env bash
# dendrite.sh — build, start and stop a throwaway Dendrite homeserver for the
# Matrix channel's integration tests. Nothing here touches the network beyond
# the Go module proxy (build) and 127.0.0.1 (start).
#
#   scripts/dendrite.sh build               build the binaries once into the cache
#   scripts/dendrite.sh bindir              print the cache folder holding the binaries
#   scripts/dendrite.sh start <dir> <port>  generate keys+config in <dir>, run on 127.0.0.1:<port>
#   scripts/dendrite.sh stop <dir>          stop the server started in <dir>
#
# The cache lives outside the repo: ${HERALD_CACHE:-$HOME/.cache/herald}/dendrite-v0.15.2/bin
set -euo pipefail

DENDRITE_VERSION=v0.15.2
DENDRITE_MODULE=github.com/element-hq/dendrite
CACHE_ROOT="${HERALD_CACHE:-$HOME/.cache/herald}"
BIN_DIR="$CACHE_ROOT/dendrite-$DENDRITE_VERSION/bin"
BINARIES=(dendrite generate-keys generate-config create-account)

die() { echo "dendrite.sh: $*" >&2; exit 1; }

have_binaries() {
	local b
	for b in "${BINARIES[@]}"; do
		[[ -x "$BIN_DIR/$b" ]] || return 1
	done
}

cmd_build() {
	if have_binaries; then
		echo "dendrite.sh: $DENDRITE_VERSION already built in $BIN_DIR"
		return 0
	fi
	command -v go >/dev/null || die "go is not on PATH"
	command -v gcc >/dev/null || command -v cc >/dev/null || die "a C compiler is needed (Dendrite's SQLite driver uses cgo)"
	mkdir -p "$BIN_DIR"
	local pkgs=() b
	for b in "${BINARIES[@]}"; do
		pkgs+=("$DENDRITE_MODULE/cmd/$b@$DENDRITE_VERSION")
	done
	echo "dendrite.sh: building Dendrite $DENDRITE_VERSION into $BIN_DIR (takes a few minutes the first time)"
	# Build in a throwaway module outside the repo so Herald's go.mod is
	# neither read nor touched. (A plain `go install pkg@version` would also
	# ask the proxy for the module's version list to look for deprecations,
	# which this workplace's proxy refuses; `go get` of a pinned version in a
	# temp module does not.)
	local mod="$CACHE_ROOT/dendrite-$DENDRITE_VERSION/buildmod"
	rm -rf "$mod"
	mkdir -p "$mod"
	(
		cd "$mod"
		export GOFLAGS=-buildvcs=false CGO_ENABLED=1 GOTOOLCHAIN=local GOWORK=off
		go mod init herald-dendrite-build >/dev/null 2>&1
		go get "${pkgs[@]}"
		local b
		for b in "${BINARIES[@]}"; do
			GOBIN="$BIN_DIR" go install "$DENDRITE_MODULE/cmd/$b"
		done
	) || die "build of Dendrite $DENDRITE_VERSION failed"
	have_binaries || die "build finished but binaries are missing in $BIN_DIR"
	echo "dendrite.sh: built ${BINARIES[*]}"
}

cmd_bindir() { echo "$BIN_DIR"; }

cmd_start() {
	local dir="${1:-}" port="${2:-}"
	[[ -n "$dir" && -n "$port" ]] || die "usage: dendrite.sh start <dir> <port>"
	have_binaries || die "binaries missing in $BIN_DIR: run 'scripts/dendrite.sh build' first"
	command -v curl >/dev/null || die "curl is needed to wait for Dendrite to answer"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	if [[ -f "$dir/dendrite.pid" ]] && kill -0 "$(cat "$dir/dendrite.pid")" 2>/dev/null; then
		die "a Dendrite is already running from $dir (pid $(cat "$dir/dendrite.pid"))"
	fi
	if [[ ! -f "$dir/matrix_key.pem" ]]; then
		"$BIN_DIR/generate-keys" -private-key "$dir/matrix_key.pem" >/dev/null \
			|| die "generate-keys failed in $dir"
	fi
	"$BIN_DIR/generate-config" -ci -server "localhost:$port" -dir "$dir" >"$dir/dendrite.yaml.tmp" \
		|| die "generate-config failed in $dir"
	# Federation off, key file inside <dir>, quieter logs than the CI default (trace).
	sed -e 's|^\(\s*\)disable_federation: false|\1disable_federation: true|' \
		-e "s|^\(\s*\)private_key: .*|\1private_key: $dir/matrix_key.pem|" \
		-e 's|^\(\s*\)level: trace|\1level: warn|' \
		"$dir/dendrite.yaml.tmp" >"$dir/dendrite.yaml"
	rm -f "$dir/dendrite.yaml.tmp"
	grep -q 'disable_federation: true' "$dir/dendrite.yaml" || die "could not set disable_federation in $dir/dendrite.yaml"

	(cd "$dir" && exec "$BIN_DIR/dendrite" -config "$dir/dendrite.yaml" \
		-http-bind-address "127.0.0.1:$port" -really-enable-open-registration \
		>"$dir/dendrite.log" 2>&1) &
	local pid=$!
	echo "$pid" >"$dir/dendrite.pid"

	local url="http://127.0.0.1:$port/_matrix/client/versions" i
	for i in $(seq 1 300); do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$dir/dendrite.log" >&2 || true
			die "Dendrite exited during startup; log: $dir/dendrite.log"
		fi
		if curl -fsS -o /dev/null "$url" 2>/dev/null; then
			echo "dendrite.sh: Dendrite $DENDRITE_VERSION up at http://127.0.0.1:$port (pid $pid, dir $dir)"
			return 0
		fi
		sleep 0.2
	done
	kill "$pid" 2>/dev/null || true
	die "Dendrite did not answer $url within 60s; log: $dir/dendrite.log"
}

cmd_stop() {
	local dir="${1:-}"
	[[ -n "$dir" ]] || die "usage: dendrite.sh stop <dir>"
	local pidfile="$dir/dendrite.pid"
	[[ -f "$pidfile" ]] || { echo "dendrite.sh: no pid file in $dir, nothing to stop"; return 0; }
	local pid i
	pid="$(cat "$pidfile")"
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for i in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	echo "dendrite.sh: stopped Dendrite (pid $pid)"
}

case "${1:-}" in
build) cmd_build ;;
bindir) cmd_bindir ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
*) die "usage: dendrite.sh build | bindir | start <dir> <port> | stop <dir>" ;;
esac
