#!/usr/bin/env bash
# Sets everything up, then trains a small model on "tiny" and prints results and kernel counts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ${PYTHON:-python3} examples/demo.py "$@"
