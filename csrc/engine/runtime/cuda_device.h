// The CUDA device: the driver API loaded with dlopen("libcuda.so.1"), so the
// engine needs no CUDA toolkit to build and runs unchanged without a GPU.
// No driver, no GPU, or a failing cuInit make cuda_available() false with a
// reason; nothing here crashes for lack of CUDA.
//
// $TINY_LIBCUDA names the driver library to load instead of libcuda.so.1;
// $TINY_DISABLE_CUDA=1 makes the device unavailable on purpose.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/device.h"

namespace tiny {

struct CudaInfo {
  bool available = false;
  std::string reason;  // why not, when not available
  std::string name;    // the GPU's name
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int driver_version = 0;  // e.g. 13000
};

// Initializes the driver once (thread-safe) and reports what happened.
const CudaInfo& cuda_info();
bool cuda_available();
// The device, or nullptr when CUDA is not available.
Device* cuda_device();

// How a compiled kernel is launched: `block_size` threads per block, each
// block covering `elements_per_block` elements of the range per grid pass.
struct CudaLaunchShape {
  int block_size = 256;
  int64_t elements_per_block = 256;
  int num_buffers = 0;
};

// Loads a CUBIN or PTX image and returns its function `fn` as a Program whose
// run(buffers, begin, end) launches elements [begin, end) of [0, parallel_size)
// with buffers[i] device pointers. Throws std::runtime_error with the driver's
// message on failure (also when CUDA is not available).
std::unique_ptr<Program> cuda_load_program(const std::string& image, const std::string& fn,
                                           const CudaLaunchShape& shape, int64_t parallel_size);

}  // namespace tiny
