#!/usr/bin/env bash
# Installs everything torch_tiny needs on a fresh machine and builds it.
# Idempotent: quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}

# --- Debian packages: LLVM 14 (the CPU JIT), GoogleTest, build tools, Graphviz (debug reports)
need=()
for pkg in llvm-14-dev libgtest-dev cmake ninja-build g++ graphviz; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
command -v ccache >/dev/null 2>&1 || need+=(ccache)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- Python packages: torch and torchvision from the local disk (never another torch)
if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import torch, torchvision, sys; sys.exit(0 if torch.__version__.startswith('2.14.1') and torchvision.__version__.startswith('0.29.1') else 1)" 2>/dev/null; then
  echo "setup: installing torch 2.14.1 and torchvision 0.29.1"
  $PY -m pip install -q torch==2.14.1 torchvision==0.29.1
fi
# transformers: the GPT-2 tests (a model built from a config; nothing is downloaded)
for mod in pytest numpy tqdm graphviz transformers; do
  $PY -c "import $mod" 2>/dev/null || $PY -m pip install -q "$mod"
done
# pytest-xdist: the test command runs pytest in one process per core (most of a cold run is
# compiling kernels, one at a time per test)
$PY -c "import xdist" 2>/dev/null || $PY -m pip install -q pytest-xdist
# expecttest and hypothesis are needed by PyTorch's OpInfo test database
$PY -c "import expecttest" 2>/dev/null || $PY -m pip install -q expecttest
$PY -c "import hypothesis" 2>/dev/null || $PY -m pip install -q hypothesis

# --- build (incremental) and install in development mode
# (re)install when torch_tiny is missing, installed from another checkout, or installed before
# it declared its entry points (torch.compile's backend="tiny")
here=$(pwd -P)
installed=$(cd / && TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import importlib.util as u; s = u.find_spec('torch_tiny'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null || true)
entry_point=$(cd / && $PY -c "from importlib.metadata import entry_points; print(any(e.name == 'tiny' for e in entry_points(group='torch_dynamo_backends')))" 2>/dev/null || true)
if [ "$installed" != "$here/torch_tiny" ] || [ "$entry_point" != True ]; then
  echo "setup: building and installing torch_tiny (the first build takes several minutes)"
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -m pip install -q --no-build-isolation --no-deps -e .
else
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY setup.py -q build_ext --inplace >/dev/null
fi
