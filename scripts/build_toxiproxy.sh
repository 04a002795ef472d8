#!/usr/bin/env bash
# Build the reference Toxiproxy server (2.12.0, from the Go module proxy) that the fault
# proxy's integration tests compare the built-in proxy against (docs/faults.md), and its
# CLI; both static (CGO off) so the local toxiproxy image can hold them FROM scratch
# (`mqbench brokers build-images toxiproxy`, docs/docker.md).
# Writes ~/.cache/mqbench/toxiproxy-2.12.0/toxiproxy-server and toxiproxy-cli
# (MQBENCH_TOXIPROXY_DIR); a no-op when both are already there. Needs a Go toolchain (GO, else go on PATH, else
# /usr/local/go/bin/go); without one it says so and exits 0
# (the comparison tests then skip, naming the missing binary).
set -euo pipefail

VERSION=2.12.0
DIR="${MQBENCH_TOXIPROXY_DIR:-$HOME/.cache/mqbench/toxiproxy-$VERSION}"
BIN="$DIR/toxiproxy-server"
CLI="$DIR/toxiproxy-cli"

say() { printf 'mqbench install: %s\n' "$*"; }

if [[ -x "$BIN" && -x "$CLI" ]]; then
    exit 0
fi
GO="${GO:-$(command -v go || true)}"
[[ -z "$GO" && -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go
if [[ -z "$GO" ]]; then
    say "WARNING: no Go toolchain; the reference toxiproxy-server $VERSION is not built and"
    say "         the fault proxy's comparison tests will skip (docs/faults.md)"
    exit 0
fi
say "building toxiproxy-server $VERSION (reference for the fault proxy tests) into $DIR"
mkdir -p "$DIR"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
# GOFLAGS=-mod=mod: build from the module proxy, outside any Go workspace.
GOBIN="$build" GOFLAGS=-mod=mod CGO_ENABLED=0 "$GO" install \
    -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=$VERSION" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@v$VERSION" \
    "github.com/Shopify/toxiproxy/v2/cmd/cli@v$VERSION"
mv "$build/cli" "$CLI"
mv "$build/server" "$BIN"
