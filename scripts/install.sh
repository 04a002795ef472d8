#!/usr/bin/env bash
# Install everything mqbench needs: Debian packages (brokers, a JDK for Spark and the Java
# brokers, Maven) when run as root with apt, then a virtualenv in .venv with mqbench and its
# Python dependencies, then the Java brokers' jars from Maven Central (HiveMQ CE, Artemis;
# with --dev also Hadoop's MiniDFSCluster for the HDFS tests).
#   scripts/install.sh          runtime dependencies
#   scripts/install.sh --dev    plus test and lint tools, the reference toxiproxy-server, and
#                               a Docker engine with Compose v2 (scripts/install_docker.sh)
# Without root it installs what it can and lists what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1

# Debian packages: brokers with a native runtime, their command-line clients (used as
# interoperability peers in tests), Maven (fetches HiveMQ CE and Artemis), and a JDK for
# PySpark and the Java brokers (javac compiles their small launchers once).
APT_PACKAGES=(
    mosquitto mosquitto-clients          # target mosquitto; mosquitto_pub/sub as test peers
    redis-server                         # target redis; persistence for the built-in broker
    rabbitmq-server                      # targets rabbitmq-mqtt, rabbitmq-amqp
    activemq libmqtt-client-java         # target activemq (its MQTT connector needs the jar)
    postgresql                           # persistence backend of the built-in broker
    maven                                # targets hivemq, artemis: jars from Maven Central
    rt-tests                             # cyclictest: the wake-up floor beside mqbench's own
                                         #   probe in benchmarks/latency_sweep.py
)
JAVA_PACKAGE=openjdk-17-jdk-headless
# --dev only: a real Prometheus scrapes `run --metrics` in its test, and pdflatex compiles the
# report's LaTeX into a two-column paper (adds ~70 MB; docs/reports.md).
DEV_APT_PACKAGES=(prometheus texlive-latex-base texlive-latex-recommended)

say() { printf 'mqbench install: %s\n' "$*"; }

missing_packages() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || printf '%s\n' "$pkg"
    done
}

need=()
if command -v dpkg-query >/dev/null 2>&1; then
    mapfile -t need < <(missing_packages "${APT_PACKAGES[@]}")
    if ((DEV)); then
        mapfile -t -O "${#need[@]}" need < <(missing_packages "${DEV_APT_PACKAGES[@]}")
    fi
fi
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    need+=("$JAVA_PACKAGE")
fi

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    for candidate in python3.11 python3.12 python3.13 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            PYTHON="$candidate"
            break
        fi
    done
fi
if [[ -z "$PYTHON" ]]; then
    say "no Python >= 3.11 found (set PYTHON=/path/to/python3.11)"
    exit 1
fi
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    need+=("python3-venv")
fi

if ((${#need[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian packages: ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # Debian's packages would start system-wide brokers (mosquitto on 1883, RabbitMQ,
        # PostgreSQL, ActiveMQ); mqbench starts its own on free ports and never needs
        # them, so service start-up is denied while installing.
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
            chmod +x /usr/sbin/policy-rc.d
            trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        fi
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        say "WARNING: not root (or no apt-get); these Debian packages are missing: ${need[*]}"
        say "         install them with: sudo apt-get install ${need[*]}"
        say "         targets needing them will say so and refuse to run"
    fi
fi

if [[ ! -x .venv/bin/python ]]; then
    say "creating virtualenv .venv with $PYTHON"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
if ((DEV)); then
    .venv/bin/python -m pip install --quiet -e ".[dev]"
else
    .venv/bin/python -m pip install --quiet -e .
fi
# The compiled core (core/: Rust and PyO3, docs/performance.md "The compiled core"): cargo
# fetches its crates from crates.io (pinned by core/Cargo.lock), maturin from PyPI builds
# the wheel into target/ (kept, so a rebuild takes seconds). Without a Rust toolchain, or
# when the build fails, every cell runs on the Python engine: one line says so. The build
# bakes in the digest of the core/ sources it read (mqbench_core.__sources__), so a
# checkout updated without re-running this script never runs the old core's hot path
# (mqbench/workload/core_sources.py: such a core is stale and not used).
build_core() {
    local cargo sources log=target/core-build.log
    local digest='import pathlib, mqbench.workload.core_sources as s
print(s.sources_digest(pathlib.Path("core")))'
    cargo="$(command -v cargo || true)"
    [[ -z "$cargo" && -x "$HOME/.cargo/bin/cargo" ]] && cargo="$HOME/.cargo/bin/cargo"
    if [[ -z "$cargo" ]]; then
        .venv/bin/python -m pip uninstall --quiet --yes mqbench-core >/dev/null 2>&1 || true
        say "no Rust toolchain (cargo): the compiled core is not built; every cell runs on the Python engine"
        return 0
    fi
    mkdir -p target/wheels
    rm -f target/wheels/mqbench_core-*.whl
    if .venv/bin/python -m pip install --quiet "maturin>=1.5,<2" >"$log" 2>&1 &&
        sources="$(.venv/bin/python -c "$digest" 2>>"$log")" &&
        PATH="$(dirname "$cargo"):$PATH" CARGO_TARGET_DIR="$PWD/target" \
            MQBENCH_CORE_SOURCES="$sources" \
            .venv/bin/maturin build --release --locked -m core/Cargo.toml -o target/wheels \
            >>"$log" 2>&1 &&
        .venv/bin/python -m pip install --quiet --force-reinstall --no-deps \
            target/wheels/mqbench_core-*.whl >>"$log" 2>&1; then
        say "compiled core: $(.venv/bin/python -c 'import mqbench_core as c; print(c.__version__)') (core/ sources ${sources:0:12})"
    else
        .venv/bin/python -m pip uninstall --quiet --yes mqbench-core >/dev/null 2>&1 || true
        say "WARNING: the compiled core did not build (target/core-build.log); every cell runs on the Python engine"
    fi
}
build_core
# HiveMQ CE and ActiveMQ Artemis: pinned jars from Maven Central into ~/.cache/mqbench/maven
# (MQBENCH_MAVEN_CACHE), launchers compiled once; a no-op when they are already there.
if command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; then
    if ! .venv/bin/mqbench brokers fetch; then
        say "WARNING: could not fetch the Java brokers (above); targets hivemq and artemis"
        say "         will say so and refuse to run; retry with: .venv/bin/mqbench brokers fetch"
    fi
    # Tests only: Hadoop's MiniDFSCluster (a real HDFS on 127.0.0.1), the same fetch.
    if ((DEV)) && ! .venv/bin/python tests/integration/hdfs_minicluster.py fetch; then
        say "WARNING: could not fetch the HDFS minicluster (above); its tests will skip"
    fi
else
    say "WARNING: mvn or javac is missing; targets hivemq and artemis cannot be fetched"
    say "         install them with: sudo apt-get install maven $JAVA_PACKAGE"
fi
# Tests only. The Compose Specification's JSON schema (tests/unit/compose_schema.py
# validates the generated compose documents with it) ships in the Go module Docker Compose
# v2 loads files with; fetched once into Go's module cache. And the reference
# toxiproxy-server the built-in fault proxy is compared against (scripts/build_toxiproxy.sh).
if ((DEV)); then
    GO="$(command -v go || true)"
    [[ -z "$GO" && -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go
    if [[ -n "$GO" ]]; then
        if ! "$GO" mod download github.com/compose-spec/compose-go/v2@v2.16.2; then
            say "WARNING: could not fetch the Compose schema module; the compose schema tests fail"
        fi
        GO="$GO" scripts/build_toxiproxy.sh || say "WARNING: could not build toxiproxy-server (above)"
    else
        say "WARNING: Go is missing; the compose schema tests need it (apt-get install golang)"
        say "         and the fault proxy's comparison tests with toxiproxy-server will skip"
    fi
fi
# Tests only: a Docker engine (started when none answers) and Compose v2 (built once from
# the Go module proxy) for the docker runtime's tests (scripts/install_docker.sh; the
# images those tests run are built during the test run: docs/docker.md).
if ((DEV)); then
    GO="${GO:-}" scripts/install_docker.sh
fi
say "done: $(.venv/bin/mqbench version)"
