#!/usr/bin/env bash
# bubblewrap.sh — install Debian's bubblewrap package when bwrap is missing,
# and say whether it can start a sandbox here (the exec tool's first
# choice, SPEC §17; see docs/security.md).
#
#   scripts/bubblewrap.sh install   apt-get install bubblewrap unless bwrap is found
#   scripts/bubblewrap.sh check     exit 0 when bwrap can create the namespaces Herald uses
#
# bwrap needs user namespaces: in some containers and under systemd units
# with RestrictNamespaces= it cannot work, and Herald falls back to Landlock.
set -euo pipefail

die() { echo "bubblewrap.sh: $*" >&2; exit 1; }

cmd_install() {
	if command -v bwrap >/dev/null; then
		echo "bubblewrap.sh: bwrap found at $(command -v bwrap)"
		return 0
	fi
	local sudo=()
	[[ $(id -u) -eq 0 ]] || sudo=(sudo)
	echo "bubblewrap.sh: installing Debian's bubblewrap package"
	export DEBIAN_FRONTEND=noninteractive
	if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1; then
		"${sudo[@]}" apt-get update -qq >/dev/null || die "apt-get update failed"
		"${sudo[@]}" apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null ||
			die "apt-get install bubblewrap failed"
	fi
	command -v bwrap >/dev/null || die "bubblewrap installed but bwrap is not found"
}

cmd_check() {
	command -v bwrap >/dev/null || die "bwrap is not installed: run scripts/bubblewrap.sh install"
	if bwrap --unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-net --die-with-parent \
		--new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
		--proc /proc --dev /dev --tmpfs /tmp -- /usr/bin/true; then
		echo "bubblewrap.sh: bwrap works here"
	else
		die "bwrap cannot create its namespaces here (user namespaces not allowed?); Herald will use Landlock"
	fi
}

case "${1:-}" in
install) cmd_install ;;
check) cmd_check ;;
*) die "usage: bubblewrap.sh install | check" ;;
esac
