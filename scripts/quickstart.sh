#!/usr/bin/env bash
# Install everything, then run scenarios/quickstart.yaml (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/mqbench run scenarios/quickstart.yaml "$@"
