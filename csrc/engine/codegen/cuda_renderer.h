// Kernel -> CUDA C++ source: one extern "C" __global__ function plus small
// self-contained device helpers (no #include, so NVRTC needs no include path).
//
// Semantics follow the CPU code generator (llvm_codegen.cpp) exactly: 16-bit
// floats compute in float32 and round after every op, integer division by zero
// gives 0, casts to integers go through a saturating int64, max/min propagate
// NaN, Philox random numbers are bit-identical, pure copies move bits.
//
// Launch shape: the kernel's output elements are flattened and walked with a
// grid-stride loop over [begin, end). Reductions run in one of two modes:
//   per thread: each thread owns an output element and loops over the reduce axes;
//   per block:  each block owns an output element; its threads stride over the
//               flattened reduce axes and combine through shared memory (chosen
//               for few outputs with long reductions, e.g. a full reduction);
//   split:      per block, with several blocks per output when the outputs are
//               too few to fill the GPU (see CudaKernelSource::split);
//   tiled:      per thread, each thread owning a tile of neighbouring outputs
//               with an accumulator each (a matmul's or convolution's loads
//               shared across the tile; register_tile.h decides when);
//   shared:     tiled, a block's threads owning a block of tiles and staging
//               the two factors of the reduced product through shared memory
//               (a matmul's rows of `a` and columns of `b`, a convolution's
//               weights and input) in chunks of the reduce axes; where both
//               factors are float16 (or bfloat16) values in a float32 sum, or
//               the user allowed TF32 for it, the block's warps multiply the
//               staged chunks on tensor cores (mma.sync, compute capability 8.0+).
// Kernels without reductions whose stores run along the last dim give each
// thread `lanes` neighbouring outputs: operands that run along with them are
// loaded, and the outputs stored, as one aligned vector (128 bits for 32-bit
// types) where the buffers' addresses allow, element by element elsewhere.
#pragma once
#include <cstdint>
#include <string>

#include "engine/codegen/kernel.h"

namespace tiny {

struct CudaRenderOptions {
  int block_reduce = -1;  // -1: choose, 0: reduce per thread, 1: reduce per block
  int block_size = 256;   // threads per block (a power of two)
  // The GPU's multiprocessors: a per-block reduction with too few outputs to
  // fill them is split across several blocks per output. 0 here: never split,
  // but cuda_programs fills in the device's count; < 0: never split anywhere.
  int multiprocessors = 0;
  bool register_tile = true;  // per-thread reductions may own a tile of outputs
  bool vector_lanes = true;   // elementwise kernels may give each thread vector lanes
  bool shared_tiles = true;   // tiled products may stage their factors in shared memory
  // The GPU's compute capability x 10 (90: sm_90). Tensor cores (mma.sync) need 80 or more;
  // 0 here: none, but cuda_programs fills in the device's.
  int arch = 0;
  bool tensor_cores = true;   // shared tiles of 16-bit (or allowed TF32) products may use mma.sync
  bool fused_multiply_add = true;  // a float sum adds a product of its dtype as one fma (as the CPU contracts it)
  bool occupancy = true;  // 8 x 8 shared tiles cap their registers so that two blocks share a multiprocessor
  // shared tiles load a factor that is a plain run of memory along its staged side 16 bytes at a time
  bool vector_staging = true;
  bool ldmatrix = true;  // tensor-core fragments come from shared memory by ldmatrix (else 32 bits per load)
  bool balanced_splits = true;  // shared tiles with few blocks split their reduce to even out multiprocessors
  // Tensor-core tiles of 16-bit data move their chunks by cp.async through a ring of shared-memory
  // stages. Off until a GPU has measured it (TINY_CUDA_ON=async switches it on).
  bool async_copies = false;
};

// Every option, as text: programs rendered with different options are different programs.
std::string cuda_options_key(const CudaRenderOptions& o);

struct CudaKernelSource {
  std::string name;     // the __global__ function
  std::string source;   // the whole translation unit: cuda_prelude() + kernel
  std::string kernel;   // the __global__ function alone
  int block_size = 256;
  bool block_reduce = false;
  int64_t outputs = 0;  // the launch range [0, outputs): output elements, or tiles or lane groups of them
  int64_t tile_rows = 1, tile_cols = 1;  // outputs per tile (1 x 1: not tiled)
  int64_t lanes = 1;    // neighbouring outputs per thread of an elementwise kernel
  bool vectors = false;  // some loads or stores move vectors (when the buffers are aligned)
  bool shared_tile = false;  // a block per block of tiles; the launch range counts those blocks
  std::string tensor_cores;  // "f16", "bf16" or "tf32": the shared tile's products run on tensor cores
  bool serial = false;  // one thread runs everything in order (launch one block of one thread)
  // Parameters: one pointer per Kernel::buffers entry, `num_params` u64 launch
  // words (Kernel::launch_params, two per Rand or Param node), then begin, end.
  int num_buffers = 0;
  int num_params = 0;
  // Blocks per output of a split reduction (1: not split). Each block reduces
  // its slice and stores the partial in a scratch array; the block that
  // finishes last (a ticket counter per output) combines the partials in slice
  // order, so the result does not depend on timing. The kernel then takes two
  // more pointers before begin and end: `split * outputs` u64 partial slots
  // and `outputs` u32 tickets, zero before a launch and left zero after it.
  int split = 1;
  // The split's slices run on threads of a register tile (one per tile and slice, the launch
  // covering each once) rather than blocks; the partial slots are `split * outputs * tile`.
  bool split_threads = false;
  // Partial slots per launch element and slice: 1 (a block reduce), a tile's outputs (split
  // threads), a block's outputs (a shared tile split across blocks, as a block reduce is).
  int64_t partial_slots = 1;
  // Output elements one block covers per pass of the grid-stride loop.
  int64_t elements_per_block() const { return cooperative() ? 1 : block_size; }
  // Whether the block's threads work together (they meet at barriers).
  bool cooperative() const { return block_reduce || shared_tile; }
  int64_t tile_outputs() const { return tile_rows * tile_cols; }
};

CudaKernelSource render_cuda(const Kernel& k, const CudaRenderOptions& opt = {});
// The typedefs and device helpers every rendered kernel relies on.
const char* cuda_prelude();

}  // namespace tiny
