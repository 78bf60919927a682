#!/usr/bin/env bash
# Sets everything up, then runs all tests: the engine's GoogleTest suite and pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
# On a GPU machine (TINY_DEVICE=cuda): built from what is there, without LLVM or GoogleTest.
if [ "${TINY_DEVICE:-}" = cuda ]; then bash scripts/gpu_setup.sh || exit 1; else bash scripts/setup.sh || exit 1; fi
PY=${PYTHON:-python3}
# Headless Chromium renders the debug HTML report in its test (where a package registry is).
if [ "${TINY_DEVICE:-}" != cuda ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null 2>&1 ||
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; } ||
    echo "test.sh: could not install chromium; the HTML report test will skip its rendering check"
fi

gtest_rc=0
if [ "${TINY_DEVICE:-}" = cuda ] && [ ! -x build/tiny_engine_tests ]; then
  echo "== GoogleTest (engine): not built on this machine (no LLVM / GoogleTest) =="
else
  echo "== GoogleTest (engine) =="
  ./build/tiny_engine_tests --gtest_brief=1
  gtest_rc=$?
  # The JIT picks instructions from the CPU it runs on; AVX2-only machines get their own run
  # (kernels generated for a generic x86-64-v3 CPU), whatever this machine has.
  if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    echo "== GoogleTest (engine), kernels for an AVX2 CPU without AVX-512 (TINY_CPU_TARGET=x86-64-v3) =="
    TINY_CPU_TARGET=x86-64-v3 ./build/tiny_engine_tests --gtest_brief=1 || gtest_rc=1
  fi
  # and the baseline: SSE2 vectors, half precision through the engine's conversion helpers
  echo "== GoogleTest (engine), kernels for a baseline x86-64 CPU (TINY_CPU_TARGET=x86-64) =="
  TINY_CPU_TARGET=x86-64 ./build/tiny_engine_tests --gtest_brief=1 || gtest_rc=1
fi

# One pytest process per core on the CPU (files stay whole: their tests share state in order);
# one process where tests share a GPU.
workers=()
if [ "${TINY_DEVICE:-}" != cuda ] && $PY -c "import xdist" 2>/dev/null; then
  workers=(-n "$(nproc)" --dist loadfile)
fi

echo "== pytest (torch) on ${TINY_DEVICE:-the default device} =="
TINY_STRICT=1 $PY -m pytest -q -p no:cacheprovider "${workers[@]}" tests "$@"
pytest_rc=$?

# The CUDA path end to end without a GPU: the emulated device (rendered CUDA C built
# for the host) runs the device, elementwise, reduction, view, indexing, conv,
# batch-norm, optimizer, client-code, model, trace and RNN tests with the kernel counts the CPU has
# (the emulator is slow: the big torchvision models, the resnet18 training run and the
# 16-bit variance sweeps stay on the CPU run; the engine tests cover every op and dtype).
emu_rc=0
if [ -z "${TINY_DEVICE:-}" ] && [ $# -eq 0 ]; then
  echo "== pytest (torch) on the emulated CUDA device (TINY_DEVICE=cuda-emu) =="
  TINY_DEVICE=cuda-emu TINY_STRICT=1 $PY -m pytest -q -p no:cacheprovider "${workers[@]}" \
    tests/test_device.py tests/test_unary.py tests/test_reductions.py tests/test_views.py tests/test_indexing.py \
    tests/test_conv.py tests/test_batchnorm.py tests/test_optim.py tests/test_client_code.py tests/test_models.py \
    tests/test_debug_trace.py tests/test_rnn.py \
    -k "not (densenet or efficientnet or mobilenet or vgg or resnet50 or sgd_training or (var_std and 16))"
  emu_rc=$?
  # and with an H100's 132 multiprocessors, so that kernels are planned as for that GPU: 8 x 8
  # shared tiles with their register cap, reduces split across blocks and threads, their partials
  echo "== pytest (torch) on the emulated CUDA device planned as an H100 (TINY_EMU_MULTIPROCESSORS=132) =="
  TINY_DEVICE=cuda-emu TINY_EMU_MULTIPROCESSORS=132 TINY_STRICT=1 $PY -m pytest -q -p no:cacheprovider "${workers[@]}" \
    tests/test_conv.py tests/test_batchnorm.py tests/test_linalg.py tests/test_reductions.py || emu_rc=1
fi

[ $gtest_rc -eq 0 ] && [ $pytest_rc -eq 0 ] && [ $emu_rc -eq 0 ]
