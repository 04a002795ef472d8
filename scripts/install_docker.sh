#!/usr/bin/env bash
# A Docker engine and Compose v2 for the docker runtime and its tests (docs/docker.md,
# "Engine and images"). Called by `scripts/install.sh --dev`, so CI's fresh machine gets both.
#   scripts/install_docker.sh          make sure an engine answers and `docker compose` is v2
#   scripts/install_docker.sh status   say what is there (engine, compose, who started dockerd)
#   scripts/install_docker.sh stop     stop the dockerd this script started, and nothing else
#
# What is already there is kept: an engine that answers (Docker 20.10 or newer, local socket
# or DOCKER_HOST) and a `docker compose` that says v2 are used as they are. Otherwise, as
# root with apt: Debian's docker.io is installed, and `dockerd` is started in the background
# when no engine answers; its PID goes to $MQBENCH_DOCKER_DIR/dockerd.pid, the only engine
# `stop` ever stops. The test run leaves it running (images and build cache stay warm for
# the next run, and other users of the machine may share it; CI's machine ends with the run).
# Compose v2 is built once from the Go module proxy (Debian's docker-compose is v1) into
# $MQBENCH_DOCKER_DIR/compose-$COMPOSE_VERSION/docker-compose, version-stamped, and copied
# into the CLI plugin folder (${DOCKER_CONFIG:-~/.docker}/cli-plugins).
# As root with apt it also installs debootstrap and busybox-static, which
# `mqbench brokers build-images` builds the local images from (no registry needed).
# Without root/apt or Go: one line saying what is missing and how to install it, exit 0
# (the docker runtime and its tests then say the same).
set -euo pipefail

COMPOSE_VERSION=2.40.3
MIN_ENGINE=20.10
DIR="${MQBENCH_DOCKER_DIR:-$HOME/.cache/mqbench/docker}"
PID_FILE="$DIR/dockerd.pid"
LOG_FILE="$DIR/dockerd.log"
PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
START_WAIT_S=60

say() { printf 'mqbench install: %s\n' "$*"; }

is_root_with_apt() { [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; }

# The server version when an engine answers, else nothing.
engine_version() {
    command -v docker >/dev/null 2>&1 || return 0
    timeout 20 docker version --format '{{.Server.Version}}' 2>/dev/null || true
}

# The compose plugin's version without a leading v ("2.40.3"), else nothing.
compose_version() {
    command -v docker >/dev/null 2>&1 || return 0
    local v
    v="$(timeout 20 docker compose version --short 2>/dev/null || true)"
    printf '%s' "${v#v}"
}

# True when version $1 >= version $2 (dotted numbers; suffixes like +dfsg1 are ignored).
version_at_least() {
    local a b
    a="$(printf '%s' "$1" | sed 's/[^0-9.].*//')"
    b="$2"
    [[ "$(printf '%s\n%s\n' "$b" "$a" | sort -V | head -n1)" == "$b" ]]
}

# The PID of the dockerd this script started, when it still runs; else nothing.
our_dockerd() {
    [[ -f "$PID_FILE" ]] || return 0
    local pid
    pid="$(cat "$PID_FILE")"
    if [[ "$pid" =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]]; then
        printf '%s' "$pid"
    fi
}

# Debian packages missing from "$@" (by dpkg status).
missing_debs() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || printf '%s ' "$pkg"
    done
}

install_debs() {
    export DEBIAN_FRONTEND=noninteractive
    # No service start while installing (install.sh's policy-rc.d may already say so):
    # this script starts dockerd itself and records what it started.
    local policy_made=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_made=1
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
    ((policy_made)) && rm -f /usr/sbin/policy-rc.d
    return "$rc"
}

install_engine_package() {
    if ! is_root_with_apt; then
        say "WARNING: no Docker CLI; the docker runtime and its tests need Docker Engine $MIN_ENGINE+"
        say "         install it with: sudo apt-get install docker.io (or Docker's own packages)"
        return 1
    fi
    say "installing Debian's docker.io (Docker Engine)"
    install_debs docker.io
}

# debootstrap (the Debian base of the local images) and busybox-static (the shell of the
# FROM-scratch ones).
ensure_image_tools() {
    local need
    need="$(missing_debs debootstrap busybox-static)"
    [[ -z "$need" ]] && return 0
    if ! is_root_with_apt; then
        say "WARNING: missing $need; \`mqbench brokers build-images\` needs them"
        say "         install them with: sudo apt-get install $need"
        return 0
    fi
    # shellcheck disable=SC2086 # a list of package names
    install_debs $need || say "WARNING: could not install $need"
}

start_engine() {
    if ! command -v dockerd >/dev/null 2>&1 || ! is_root_with_apt; then
        say "WARNING: no Docker engine answers and this script cannot start one (needs root and"
        say "         dockerd); start yours (e.g. sudo systemctl start docker) or set DOCKER_HOST"
        return 1
    fi
    mkdir -p "$DIR"
    say "starting dockerd (log $LOG_FILE, pid file $PID_FILE)"
    setsid dockerd >>"$LOG_FILE" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    local waited=0
    while [[ -z "$(engine_version)" ]]; do
        if [[ -z "$(our_dockerd)" ]]; then
            say "WARNING: dockerd exited at start; last log lines:"
            tail -n 5 "$LOG_FILE" | sed 's/^/    /'
            rm -f "$PID_FILE"
            return 1
        fi
        if ((waited >= START_WAIT_S)); then
            say "WARNING: dockerd did not answer within ${START_WAIT_S} s (log $LOG_FILE)"
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

ensure_engine() {
    command -v docker >/dev/null 2>&1 || install_engine_package || return 1
    local version
    version="$(engine_version)"
    if [[ -z "$version" ]]; then
        start_engine || return 1
        version="$(engine_version)"
    fi
    if ! version_at_least "$version" "$MIN_ENGINE"; then
        say "WARNING: Docker Engine $version is older than $MIN_ENGINE; the docker runtime needs $MIN_ENGINE+"
        return 1
    fi
}

find_go() {
    local go="${GO:-$(command -v go || true)}"
    [[ -z "$go" && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
    printf '%s' "$go"
}

# Build docker-compose $COMPOSE_VERSION from the Go module proxy into the cache (once).
build_compose() {
    local out="$DIR/compose-$COMPOSE_VERSION/docker-compose"
    if [[ -x "$out" ]]; then
        printf '%s' "$out"
        return 0
    fi
    local go
    go="$(find_go)"
    if [[ -z "$go" ]]; then
        say "WARNING: Compose v2 is missing and there is no Go toolchain to build it; install" >&2
        say "         it with: sudo apt-get install golang (then rerun this script) or docker-compose-plugin" >&2
        return 1
    fi
    say "building Docker Compose v$COMPOSE_VERSION from the Go module proxy (once; ~4 CPU-minutes)" >&2
    local work src
    work="$(mktemp -d)"
    # go mod download, not go install: the module's go.mod has exclude directives, which
    # `go install pkg@version` refuses.
    src="$(cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json \
        "github.com/docker/compose/v2@v$COMPOSE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
    if [[ -z "$src" || ! -d "$src" ]]; then
        rm -rf "$work"
        say "WARNING: could not download github.com/docker/compose/v2@v$COMPOSE_VERSION" >&2
        return 1
    fi
    cp -r "$src" "$work/src"
    chmod -R u+w "$work/src"
    mkdir -p "$(dirname "$out")"
    if ! (cd "$work/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -trimpath \
        -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=v$COMPOSE_VERSION" \
        -o "$out.tmp" ./cmd) >&2; then
        rm -rf "$work" "$out.tmp"
        say "WARNING: building Docker Compose failed (above)" >&2
        return 1
    fi
    mv "$out.tmp" "$out"
    rm -rf "$work"
    printf '%s' "$out"
}

ensure_compose() {
    local version
    version="$(compose_version)"
    if [[ -n "$version" ]] && version_at_least "$version" 2.0; then
        return 0
    fi
    local built
    built="$(build_compose)" || return 1
    mkdir -p "$PLUGINS"
    install -m 0755 "$built" "$PLUGINS/docker-compose"
    version="$(compose_version)"
    if [[ -z "$version" ]]; then
        say "WARNING: $PLUGINS/docker-compose does not answer \`docker compose version\`"
        return 1
    fi
    say "Docker Compose v$version installed as a CLI plugin ($PLUGINS/docker-compose)"
}

status() {
    local pid
    pid="$(our_dockerd)"
    printf 'engine: %s\n' "$(engine_version || true)"
    printf 'compose: %s\n' "$(compose_version || true)"
    if [[ -n "$pid" ]]; then
        printf 'dockerd: started by this script, pid %s (log %s)\n' "$pid" "$LOG_FILE"
    else
        printf 'dockerd: not started by this script\n'
    fi
}

stop() {
    local pid
    pid="$(our_dockerd)"
    if [[ -z "$pid" ]]; then
        say "no dockerd started by this script runs; nothing to stop"
        rm -f "$PID_FILE"
        return 0
    fi
    say "stopping dockerd $pid (started by this script)"
    kill -TERM "$pid"
    local waited=0
    while [[ -n "$(our_dockerd)" ]] && ((waited < 30)); do
        sleep 1
        waited=$((waited + 1))
    done
    rm -f "$PID_FILE"
}

case "${1:-}" in
    "")
        ensure_image_tools
        ensure_engine && ensure_compose || true
        ;;
    status) status ;;
    stop) stop ;;
    *)
        echo "usage: scripts/install_docker.sh [status|stop]" >&2
        exit 2
        ;;
esac
