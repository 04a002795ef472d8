#!/usr/bin/env bash
# Install everything (with test tools), then lint, type-check and run the whole test suite:
# unit tests and integration tests against real brokers started on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --dev
.venv/bin/ruff check mqbench tests benchmarks
.venv/bin/ruff format --check mqbench tests benchmarks
.venv/bin/mypy
# The compiled core's own tests (framing, records, schedule; no Python needed), where
# install found a Rust toolchain; without one every cell runs on the Python engine.
cargo="$(command -v cargo || true)"
[[ -z "$cargo" && -x "$HOME/.cargo/bin/cargo" ]] && cargo="$HOME/.cargo/bin/cargo"
if [[ -n "$cargo" ]]; then
    CARGO_TARGET_DIR="$PWD/target" "$cargo" test --quiet --locked --no-default-features \
        --manifest-path core/Cargo.toml
fi
exec .venv/bin/pytest "$@"
