// The emulated CUDA device (TINY_DEVICE=cuda-emu): the engine's CUDA path end
// to end (rendering, launch-argument marshalling, device memory, streams, CUDA
// graphs) with the GPU replaced by host code, so machines without a GPU test it.
//
// - The driver API is a table (cuda_driver.h) the CUDA device uses exactly as
//   it uses libcuda's.
// - Device memory lives at addresses of a reserved, inaccessible range: the host
//   can reach it only through the copy calls (a host read of a device pointer
//   faults); kernels see it through the launch's address translation.
// - Modules are host builds of the rendered CUDA C (cuda_emu_compile): the
//   source is compiled by the host's C++ compiler with a small header that maps
//   the CUDA dialect to C++, blocks run across the thread pool, the threads of a
//   block one after another, or as fibers meeting at every __syncthreads.
// - Graph capture records launches; graph launches replay them.
// The device has $TINY_EMU_MEMORY bytes (default: half the host's memory), so
// running out of device memory can be tested too, and $TINY_EMU_MULTIPROCESSORS
// multiprocessors (default: the host's threads), so kernels can be planned and
// checked as for a GPU of that size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/cuda_driver.h"

namespace tiny {

struct CudaEmuInfo {
  bool available = false;
  std::string reason;    // why not (no host C++ compiler)
  std::string compiler;  // the host compiler kernels are built with
};
const CudaEmuInfo& cuda_emu_info();

// The emulator's driver API table.
const cu::Api& cuda_emu_api();

// One kernel of a module to build: its __global__ function's name and whether
// its blocks synchronize (__syncthreads: threads run as fibers).
struct EmuKernel {
  std::string name;
  bool cooperative = false;
};
// Builds CUDA C `source` (self-contained, as render_cuda makes it) for the host;
// returns the module image the emulator's cuModuleLoadDataEx takes. Builds are
// cached on disk by content. Throws std::runtime_error with the compiler's log
// and the path of the source it kept.
std::string cuda_emu_compile(const std::string& source, const std::vector<EmuKernel>& kernels);

// What the emulator did (for tests): launches run, graph work, live memory.
struct CudaEmuStats {
  int64_t kernel_launches = 0;  // kernels run (directly or in graphs)
  int64_t captured_launches = 0;
  int64_t graph_launches = 0;
  int64_t graph_instantiations = 0;
  int64_t graph_updates = 0;
  int64_t live_allocations = 0;
  int64_t used_bytes = 0;
};
CudaEmuStats cuda_emu_stats();

}  // namespace tiny
