// Kernels on a CUDA device: render (cuda_renderer.h), compile (NVRTC for the
// GPU's architecture, runtime/nvrtc.h; the host compiler for the emulated
// device, runtime/cuda_emu.h), load and launch (runtime/cuda_device.h).
#pragma once
#include <memory>
#include <vector>

#include "engine/codegen/cuda_renderer.h"
#include "engine/runtime/device.h"
#include "engine/runtime/nvrtc.h"

namespace tiny {

// The GPU's architecture (e.g. 90 for sm_90), or 80 when there is no GPU.
int cuda_default_arch();

// Compile only (works without a GPU): the rendered source and NVRTC's output.
struct CudaBuild {
  CudaKernelSource src;
  NvrtcOutput out;  // out.ok, out.code (PTX or CUBIN), out.log
  int arch = 80;
  bool cubin = false;
};
CudaBuild build_cuda(const Kernel& k, int arch = 0, bool cubin = false, const CudaRenderOptions& opt = {});

// Programs for `kernels` on a CUDA device (a GPU or the emulated one), in
// order: run(args, begin, end) takes device pointers, then the launch words.
// opt.multiprocessors == 0 means the device's count (split reductions).
// Cached in memory by kernel key, device and options; compiled images are
// cached on disk by source (and architecture and NVRTC version on a GPU).
// The emulated device builds all of a call's new kernels in one host compile.
// Throws std::runtime_error naming the kernel when compiling fails (its source
// is written to a file named in the message) or the driver refuses it.
std::vector<std::shared_ptr<Program>> cuda_programs(Device& device, const std::vector<const Kernel*>& kernels,
                                                    const CudaRenderOptions& opt = {});

// The renderer's options with the optimizations named in TINY_CUDA_OFF (a comma
// list: balance, fma, ldmatrix, lanes, mma, occupancy, shared, tiles, vstage) switched
// off, and those named in TINY_CUDA_ON (async) switched on: A/B measurements on a GPU,
// and a way around a suspect optimization. Read at every call.
CudaRenderOptions cuda_options_from_env();

}  // namespace tiny
