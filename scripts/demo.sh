#!/usr/bin/env bash
# Sets everything up, then trains on "tiny": a small classifier side by side with the CPU
# (examples/demo.py: losses, accuracy, kernels per step), then the beautiful-MNIST CNN on
# synthetic digits (examples/mnist.py, shortened: progress bar, kernels per step, accuracy).
# Arguments go to examples/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
${PYTHON:-python3} examples/demo.py "$@"
echo
echo "== beautiful-MNIST CNN (examples/mnist.py --steps 100 --batch 256; run it alone for the full 300 x 512)"
exec ${PYTHON:-python3} examples/mnist.py --steps 100 --batch 256 --train-size 16384 --test-size 2048
