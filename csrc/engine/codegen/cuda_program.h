// Kernels on the CUDA device: render (cuda_renderer.h), compile with NVRTC
// (runtime/nvrtc.h), load and launch through the driver (runtime/cuda_device.h).
// Not wired into realize(): callers pick the CUDA path explicitly.
#pragma once
#include <memory>
#include <unordered_map>
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

// A Program on the CUDA device: run(buffers, begin, end) takes device pointers.
// Throws std::runtime_error when CUDA or NVRTC is unavailable or compiling fails.
std::unique_ptr<Program> compile_cuda(const Kernel& k, const CudaRenderOptions& opt = {});
// compile_cuda through an in-memory cache keyed by the kernel's canonical key.
std::shared_ptr<Program> cuda_program(const Kernel& k);

// Runs `kernels` in order on the GPU with host-side copies of their buffers:
// `host` maps each buffer's owner (Buffer::owner()) to host memory of the
// owner's nbytes. Every owner is uploaded, the kernels run, and every owner a
// kernel stores to is downloaded back into its host memory.
void run_cuda_kernels(const std::vector<const Kernel*>& kernels, const std::unordered_map<const Buffer*, void*>& host,
                      const CudaRenderOptions& opt = {});
// One kernel; host[i] holds the bytes of k.buffers[i] (aliases may repeat a pointer).
void run_cuda(const Kernel& k, const std::vector<void*>& host, const CudaRenderOptions& opt = {});

}  // namespace tiny
