#!/usr/bin/env bash
# Install everything (with test tools), then lint, type-check and run the whole test suite:
# unit tests and integration tests against real brokers started on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --dev
.venv/bin/ruff check mqbench tests benchmarks
.venv/bin/ruff format --check mqbench tests benchmarks
.venv/bin/mypy
exec .venv/bin/pytest "$@"
