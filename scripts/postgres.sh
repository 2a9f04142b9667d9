#!/usr/bin/env bash
# postgres.sh — install PostgreSQL from Debian's packages when it is missing,
# and start / stop a throwaway cluster for the tests. The cluster lives in a
# folder of the caller's, listens on one loopback address only (127.0.0.1
# unless told), trusts local connections and is built for speed (fsync
# off): test data only.
#
#   scripts/postgres.sh install             apt-get install postgresql unless initdb is found
#   scripts/postgres.sh bindir              print the folder holding initdb and pg_ctl
#   scripts/postgres.sh start <dir> <port> [host]
#                                           initdb in <dir>/data, start on <host>:<port>
#                                           (host 127.0.0.1 unless given, a loopback
#                                           address), print the connection URL
#   scripts/postgres.sh stop <dir> [mode]   stop the cluster started in <dir> (pg_ctl -m mode:
#                                           immediate, the default, or fast: committed work kept)
#
# initdb refuses to run as root: as root the cluster runs as the `postgres`
# user the Debian package creates, and <dir> is handed to it.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			echo "$d"
			return 0
		fi
	done
	if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
		dirname "$(command -v pg_ctl)"
		return 0
	fi
	return 1
}

cmd_install() {
	if d=$(bindir); then
		echo "postgres.sh: PostgreSQL found in $d"
		return 0
	fi
	local sudo=()
	[[ $(id -u) -eq 0 ]] || sudo=(sudo)
	echo "postgres.sh: installing Debian's postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq >/dev/null || die "apt-get update failed"
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends postgresql >/dev/null ||
		die "apt-get install postgresql failed"
	# The package starts a system cluster; the tests use their own.
	"${sudo[@]}" service postgresql stop >/dev/null 2>&1 || true
	bindir >/dev/null || die "postgresql installed but initdb is not found"
}

# as_owner runs a command as the cluster's owner.
as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "user postgres is missing (install Debian's postgresql package: scripts/postgres.sh install)"
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

cmd_start() {
	local dir=${1:?usage: postgres.sh start <dir> <port> [host]} port=${2:?usage: postgres.sh start <dir> <port> [host]} host=${3:-127.0.0.1}
	local bin
	bin=$(bindir) || die "PostgreSQL is not installed: run scripts/postgres.sh install"
	mkdir -p "$dir"
	[[ $(id -u) -eq 0 ]] && chown postgres "$dir"
	if [[ ! -f "$dir/data/PG_VERSION" ]]; then
		as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
			die "initdb failed: $(tail -5 "$dir/initdb.log")"
	fi
	as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
		-o "-c listen_addresses=$host -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
		start >/dev/null || die "pg_ctl start failed: $(tail -5 "$dir/postgres.log" 2>/dev/null)"
	echo "postgres://postgres@$host:$port/postgres?sslmode=disable"
}

cmd_stop() {
	local dir=${1:?usage: postgres.sh stop <dir> [fast|immediate]}
	local bin
	bin=$(bindir) || die "PostgreSQL is not installed"
	[[ -f "$dir/data/postmaster.pid" ]] || return 0
	as_owner "$bin/pg_ctl" -D "$dir/data" -m "${2:-immediate}" -w stop >/dev/null
}

case "${1:-}" in
install) cmd_install ;;
bindir) bindir || die "PostgreSQL is not installed" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
*) die "usage: postgres.sh install | bindir | start <dir> <port> [host] | stop <dir>" ;;
esac
