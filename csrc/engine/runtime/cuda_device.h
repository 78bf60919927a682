// CUDA devices: the GPU through the driver API loaded with dlopen("libcuda.so.1")
// (the engine needs no CUDA toolkit to build and runs unchanged without a GPU),
// and the emulated device (cuda_emu.h), which runs the same device code over
// the emulator's driver table. No driver, no GPU, or a failing cuInit make
// cuda_available() false with a reason; nothing here crashes for lack of CUDA.
//
// $TINY_LIBCUDA names the driver library to load instead of libcuda.so.1;
// $TINY_DISABLE_CUDA=1 makes the GPU unavailable on purpose.
//
// A CUDA device keeps its buffers in device memory under the caching
// allocator, copies on its own stream (copy_out waits for the stream), launches
// kernels on that stream, and replays a cached schedule as a CUDA graph:
// captured once, launched as one graph afterwards, updated in place when only
// buffer addresses or launch words change.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/cuda_emu.h"
#include "engine/runtime/device.h"

namespace tiny {

struct CudaInfo {
  bool available = false;
  std::string reason;  // why not, when not available
  std::string name;    // the GPU's name
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int driver_version = 0;  // e.g. 13000
  int64_t total_memory = 0;
};

// Initializes the driver once (thread-safe) and reports what happened.
const CudaInfo& cuda_info();
bool cuda_available();
// The GPU, or nullptr when CUDA is not available.
Device* cuda_device();
// The emulated CUDA device, or nullptr when it cannot run (cuda_emu_info()).
Device* cuda_emu_device();
bool is_cuda(const Device& d);  // a GPU or the emulator

// How a compiled kernel is launched: `block_size` threads per block, each
// block covering `elements_per_block` elements of the range per grid pass
// (one block of one thread when `serial`). The kernel's parameters are
// `num_buffers` device pointers, `num_params` 64-bit launch words, begin, end.
struct CudaLaunchShape {
  int block_size = 256;
  int64_t elements_per_block = 256;
  int num_buffers = 0;
  int num_params = 0;
  bool serial = false;
  int split = 1;  // slices per output (CudaKernelSource::split): the program owns partials and tickets
  bool split_threads = false;  // the slices run on threads (a thread per tile and slice), not blocks
  int64_t partial_slots = 1;   // partial slots per launch element and slice
};

// Loads a module image on `device` (CUBIN or PTX on a GPU, cuda_emu_compile's
// image on the emulator) and returns its functions `fns[i]` as Programs whose
// run(args, begin, end) launches elements [begin, end) of [0, parallel_sizes[i])
// with args = device pointers, then the address of the launch words. Throws
// std::runtime_error with the driver's message on failure.
std::vector<std::unique_ptr<Program>> cuda_load_programs(Device& device, const std::string& image,
                                                         const std::vector<std::string>& fns,
                                                         const std::vector<CudaLaunchShape>& shapes,
                                                         const std::vector<int64_t>& parallel_sizes);

}  // namespace tiny
