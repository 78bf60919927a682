#!/usr/bin/env bash
# Everything worth checking in one short lease of a GPU machine, cut off at its time:
#   1. builds tiny there (scripts/gpu_setup.sh: no LLVM, no GoogleTest on those machines);
#   2. scripts/gpu_mmcheck.py: products on shared tiles and tensor cores against eager CUDA;
#      bench/bench_gpu.py: the kernel rows against eager CUDA and torch.compile, the model rows
#      against eager CUDA;
#      with TINY_CUDA_ON=async, gpu_mmcheck again and bench_gpu's --try of the float16 matmul;
#   3. a traced resnet18 step at batch 64 (top kernels and an HTML report), ncu's view of one of its
#      convolutions, a part of pytest on the GPU, then bench_gpu's ablation of the tiled rows.
# Logs go to $1 (default gpu_out/), one per step; the steps share TINY_GPU_SECONDS (default 540).
# (The engine's GoogleTests need the CPU JIT for their reference results; a test binary built
# on a Debian machine with LLVM 14 and carried to the lent H100 crashed inside ORC's lookup
# there, so they run on the emulated device only.)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_out}
mkdir -p "$out"
end=$(($(date +%s) + ${TINY_GPU_SECONDS:-540}))
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

# step NAME SECONDS CMD...: CMD for at most SECONDS (or the time left), its log in $out/NAME.log
step() {
  local name=$1 budget=$2 left
  shift 2
  left=$((end - $(date +%s)))
  [ "$budget" -gt "$left" ] && budget=$left
  if [ "$budget" -lt 20 ]; then
    echo "== $name: not run, time is up"
    return
  fi
  echo "== $name (at most ${budget}s) =="
  local start=$(date +%s)
  timeout -k 5 "$budget" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? after $(($(date +%s) - start))s"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} | tee "$out/machine.log"

step setup 240 env TINY_BUILD_JOBS="$(nproc)" bash scripts/gpu_setup.sh
step mmcheck 60 $PY scripts/gpu_mmcheck.py
step bench 150 $PY bench/bench_gpu.py --rows chain,sum,mm1024,mm4096,mm4096h,mm4096tf32,conv --reps 5
# optimizations still off by default (TINY_CUDA_ON): right on this GPU, then faster or not
step mmcheck_async 60 env TINY_CUDA_ON=async $PY scripts/gpu_mmcheck.py
step trial 90 $PY bench/bench_gpu.py --rows mm4096h --reps 3 --no-compile --try async
step bench_models 150 $PY bench/bench_gpu.py --rows r18,r18b64,mnist,r18train,mnistloop,r18trainloop --reps 5 --no-compile
# where a resnet18 step's kernel time goes (the trace's summary: top kernels, by module) and the report
step profile 60 $PY examples/resnet18.py --batch 64 --size 224 --steps 2 --report "$out/resnet18.html"
# why a convolution runs at half the matmul's rate: ncu's stall reasons for layer2's 3x3 forward
# convolution (128 x 50176 outputs, 8 x 8 tiles) in a resnet18 step at batch 64
step ncu 90 ncu --kernel-name-base function --kernel-name regex:^r_64_1_128_28_28 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  $PY examples/resnet18.py --batch 64 --size 224 --steps 1
step pytest 120 env TINY_DEVICE=cuda TINY_STRICT=1 $PY -m pytest -q -p no:cacheprovider \
  tests/test_device.py tests/test_linalg.py tests/test_conv.py
step ablate 150 $PY bench/bench_gpu.py --rows mm4096,mm4096h,conv --reps 3 --no-compile --ablate vstage,ldmatrix,balance,occupancy,mma
[ -f "$out/profile.log" ] && grep -A 12 "^top [0-9]* kernels by time" "$out/profile.log"
for f in bench trial bench_models ablate ncu; do
  [ -f "$out/$f.log" ] && { echo "---- $f"; grep -v "^  (\|[Ww]arn" "$out/$f.log"; }
done
[ -f "$out/pytest.log" ] && tail -n 5 "$out/pytest.log"
for f in mmcheck mmcheck_async; do [ -f "$out/$f.log" ] && grep -v "^ok " "$out/$f.log"; done
