#!/usr/bin/env bash
# Sets torch_tiny up on a GPU machine from what is already there: a CUDA build
# of PyTorch (2.11 or newer), CMake, ninja, pytest and a C++ compiler; no LLVM,
# no GoogleTest and no package registry (the lent H100 / H200 machines: Python
# 3.12, torch 2.11 + CUDA 13). Idempotent.
#
# Without LLVM the extension is built without the CPU JIT (TINY_CPU_JIT=OFF):
# every kernel runs on the GPU, which is what tiny picks when one answers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY - <<'EOF'
import torch
print(f"gpu_setup: torch {torch.__version__}, CUDA {torch.version.cuda}, GPU: {torch.cuda.is_available()}")
EOF

# a build folder configured with the CPU JIT is not reused
if [ -f build/CMakeCache.txt ] && ! grep -q "TINY_CPU_JIT:BOOL=OFF" build/CMakeCache.txt; then rm -rf build; fi
here=$(pwd -P)
installed=$(cd / && TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import importlib.util as u; s = u.find_spec('torch_tiny'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null || true)
# Python loads the system's C++ runtime (libstdc++.so.6) before the extension: a
# newer compiler ($CXX=/opt/gcc on the lent GPU machines) instantiates runtime
# internals into the extension that crash against the older runtime (iostreams).
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
export TINY_CPU_JIT=OFF TINY_BUILD_TESTS=OFF TINY_BUILD_JOBS=${TINY_BUILD_JOBS:-$(nproc)}
if [ "$installed" != "$here/torch_tiny" ]; then
  echo "gpu_setup: building and installing torch_tiny (without the CPU JIT)"
  # PEP 660 straight away: setuptools' legacy `develop` would start a nested pip
  # with build isolation, which needs a package registry.
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -m pip install -q --no-build-isolation --no-deps --no-index --use-pep517 -e .
else
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY setup.py -q build_ext --inplace >/dev/null
fi
TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import torch, torch_tiny; print('gpu_setup: tiny computes on', torch.tiny.get_backend(), '-', torch.tiny.get_device_name())"
