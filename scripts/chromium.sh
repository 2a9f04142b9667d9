#!/usr/bin/env bash
# Installs Debian's chromium for the web chat's browser tests when it is not
# already there, then prints its path. Idempotent: a second run only prints.
set -euo pipefail

for p in /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome; do
	if [ -x "$p" ]; then
		echo "$p"
		exit 0
	fi
done

if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium.sh: no chromium found and apt-get is not available" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update >&2
$SUDO apt-get install -y chromium >&2

if [ ! -x /usr/bin/chromium ]; then
	echo "chromium.sh: apt-get installed chromium but /usr/bin/chromium is missing" >&2
	exit 1
fi
echo /usr/bin/chromium
