#!/usr/bin/env bash
# Build static release binaries: scripts/release.sh VERSION [os/arch ...]
# Writes dist/herald-VERSION-OS-ARCH and dist/SHA256SUMS. No cgo (the SQLite
# driver is pure Go; Matrix encryption uses mautrix's pure-Go Olm, the goolm
# tag), -trimpath, the version stamped into `herald version`.
set -euo pipefail
version=${1:?usage: scripts/release.sh VERSION [os/arch ...]}
shift
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux/amd64 linux/arm64 darwin/arm64)
cd "$(dirname "$0")/.."
mkdir -p dist
rm -f dist/SHA256SUMS
files=()
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  out="herald-$version-$os-$arch"
  echo "building dist/$out"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -tags goolm -trimpath \
    -ldflags "-s -w -X main.version=$version" -o "dist/$out" ./cmd/herald
  files+=("$out")
done
(cd dist && sha256sum "${files[@]}" > SHA256SUMS)
cat dist/SHA256SUMS
