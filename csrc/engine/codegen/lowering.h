// Lowering: how a kernel's loops run on a device, decided once from the
// device's description, for the code generators to print.
//
// A Kernel says what to compute (outputs over an iteration shape, expressions
// of loads and reduces). How it runs is a set of choices the two code
// generators used to make inside their emitters: which output dims the
// threads split, whether a reduction is split across threads or blocks, which
// tiling a reduce takes (the CPU's vector register tiles and output-channel
// tiles with packed panels; a GPU thread's register tile, a block's shared-memory
// tile, tensor cores), vector lanes. They are made here, per device, from a
// description of the device (CpuTarget: vector width, registers, threads;
// CudaRenderOptions: multiprocessors, compute capability, switches), and
// recorded in a plan (CpuPlan, CudaPlan) that llvm_codegen.cpp and
// cuda_renderer.cpp follow without deciding again. The analyses both devices
// share (which reduce a tile serves and whether tiling it pays, which reduces
// can be hoisted) are register_tile.h and index_walk.h. Where loops split at
// mask boundaries stays with the CPU emitter: it depends on the ranges the
// enclosing segments give their variables as the loops are emitted.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/codegen/cuda_renderer.h"
#include "engine/codegen/kernel.h"

namespace tiny {

// ---------------------------------------------------------------- CPU

// The CPU kernels are generated for (the JIT's vector unit) and the threads that run them.
struct CpuTarget {
  int64_t lanes = 8;       // float32 lanes of the widest vector register used
  int64_t registers = 16;  // vector registers
  int threads = 1;         // threads running a kernel's slices
};

// A kernel that reduces everything to one value is split across threads:
// each computes a partial over a chunk of the first reduce axis into a
// scratch slot, then one finishing function combines the partials and
// applies whatever follows the reduce. Chunks are fixed (not per machine) so
// results do not depend on the thread count.
struct SplitPlan {
  const Node* reduce = nullptr;
  std::vector<Expr> idx;  // the reduce's context (no variables: one output)
  Expr valid;
  int axis = 0;           // the reduce axis that is chunked
  int64_t chunks = 1;
};

// Output-channel tiling. A convolution's output (N, OC, OH, OW) has a short innermost
// dim (7, 14) or one its input moves along by the stride (2): poor vectors for the
// register tiles (VectorTile). Its output channels make good ones: the input does not
// move along them. A tile is kChanVecs vectors of channels x up to kChanMaxRows
// positions of the last dim; per reduce step it takes one broadcast input value per row
// and one weight vector per vector of channels, emitted as explicit vector FMAs (the SLP
// vectorizer is unreliable at this size). The weight moves by C*K along the channels, so
// the kernel first copies its slice of channels (once per call) into panels where a
// tile's channels are contiguous per reduce step. Matmuls take the same tiles with the
// last output dim as the channels (see plan_channel_tile in lowering.cpp), 4 vectors by 6
// rows where their channels are whole such tiles (widen_matmul_tile).
struct ChannelTile {
  int j = -1, i = -1;       // the channel (column) dim and the row dim (the last)
  std::vector<int> mid;     // non-unit dims between them, looped per tile
  // A row dim too short for whole tiles continues into `row_outer`, dims before it
  // (outermost first): the rows run over (row_outer..., i) flattened (a tile of 2 rows
  // loads one weight vector per 2 FMAs). The outermost may be the parallel dim: a
  // thread's rows are then its slice of that dim times the rows inside it.
  std::vector<int> row_outer;
  // One of row_outer flattened innermost instead (the images of a 2x2 convolution output):
  // a tile's rows then share their position, so the reduce skips the padding taps of that
  // position alone (see tap_ranges in llvm_codegen.cpp).
  int row_fastest = -1;
  // `a` is read through a mask that moves with a reduce loop (a convolution's padding): the
  // code generator skips the steps where a tile's rows read only padding (see "Static taps" in
  // llvm_codegen.cpp).
  bool padding_taps = false;
  // The row dims as flattened, outermost first: (row_outer..., i), row_fastest moved last.
  std::vector<int> row_dims() const;
  int first_dim() const { return std::min({i, j, row_outer.empty() ? i : row_outer.front()}); }  // where the tiles begin
  int64_t cols = 0;              // channels per tile: kChanVecs vectors (or kWideVecs)
  const Node* reduce = nullptr;
  const Node* a = nullptr;       // the reduce's product: a (not moving along j) ...
  const Node* packed = nullptr;  // ... times views of this leaf, copied into panels
  Expr packed_flat;              // the leaf's flat index over var j and `kvars`
  int jvar = -1;                 // var id of dim j in packed_flat
  std::vector<Expr> kvars;       // one per non-unit reduce axis
  std::vector<int64_t> kext, kstrides;  // their extents, row-major strides
  int64_t ck = 1, rows = 1;
  const Node* b = nullptr;  // the product's other operand (views of `packed`, or computed)
  // b computed from j and the reduce loops alone (a linear layer's ReLU output in its
  // weight gradient): evaluated at b_idx (over var j and `kvars`) into the panels
  bool computed = false;
  std::vector<Expr> b_idx;
  bool unit = false;        // b moves by 1 along j already: read in place, no panels
  bool packable = false;    // b depends on j and the reduce loops only
  bool uses_i = false;      // b moves along the rows
  bool outer_packable = false;  // b depends on j, the reduce loops and dims before i and j
  bool pack_inner = false;  // packed per index of those dims (bmm's transposed b)
  bool jstride1 = false;    // b moves by 1 along j (packed or not)
  std::vector<int> outer_vars;
  std::vector<int> b_outer_vars;  // the outer_vars b moves with
  // pack_inner: the panels are packed before the loop of this dim; b moves with none of the
  // dims from it to the tiles (a transposed convolution's phases (s, N, ...): once per
  // phase, not per image). The tiles' first dim where b moves with the last outer dim.
  int pack_at = -1;
  int par_hint = -1;  // pack_inner rows continued over outer dims: their first is the parallel dim
  // Each panel packed right before its tiles, into one panel's buffer, rather than all of them
  // first: where nothing outside the tiles reuses a panel, it is then written and read in cache
  // instead of making three more trips through memory (16 rows through VGG's first classifier
  // layer, 25088 -> 4096: 58 -> 38 ms; 4096 -> 4096: 10.1 -> 9.0 ms).
  bool pack_per_tile = false;
  // The row tiles outside the column tiles: each row tile's outputs are then stored (and what
  // follows the reduce loads) along whole rows of the thread's channels, rather than down a
  // column strip of kChanCols floats, one strip per row, each 128 bytes from another page.
  // Where all panels stay in cache (a linear layer's weight gradient over its batch, AdamW's
  // update fused: five such streams), the strips bound the kernel.
  bool rows_outside = false;
  // `a` read in place even where its rows lie a multiple of 2 KiB apart: a wide matmul tile's
  // 6 rows fit an L1 set's ways beside b's lines (8 ways on Zen 4, 12 on Golden Cove), where
  // each thread otherwise copied all of `a` (widen_matmul_tile).
  bool a_in_place = false;
  // rows_outside with several outputs and only element-wise work after the reduce (an
  // optimizer's update after a weight gradient): the epilogue runs once per row tile, row by
  // row along the thread's channels (the code generator's RowTileBuffer); per tile, 14 rows x
  // 7 streams of 128 bytes were more streams than the prefetchers follow. Such tiles keep the
  // rows outside for panels up to 4 MiB (read from L3).
  bool epilogue_per_row_tile = false;
  // Rows of the tile's output: dim i's times the dims they continue into.
  int64_t row_count(const Shape& shape) const;
  // The flat reduce step of the reduce variables' values `kv`.
  Expr kflat(const std::vector<Expr>& kv) const;
};

// Reduce blocking of a channel tile that reads b in place (a weight gradient: b is
// grad_output channels-last, the reduce runs over the batch and every position), which
// would stream all of b once per tile: far more than the caches hold. Instead the reduce
// runs in blocks of its first axis, every tile of the thread per block, so the block's slice
// of b stays in cache across tiles; between blocks the accumulators wait in a scratch buffer.
struct ReduceBlocking {
  int axis = -1;  // the blocked axis of the reduce's source (its outermost loop)
  int64_t extent = 0, step = 0, count = 0;
};

// A register tile of the last non-unit output dim (`d`, `cols` wide: whole vectors) and
// the one before it (`d2`, `rows` tall; -1: one row), replacing the loops from dim `at`:
// when its single reduce's loads are unit-stride or constant along `d` but not along the
// reduce loop (matmul, convolution, column sums), the tile's outputs accumulate at once
// and the operand that stays put along `d` is read once per row.
struct VectorTile {
  int at = -1, d2 = -1, d = -1;
  int64_t rows = 1, cols = 1;
};

// An elementwise kernel's trailing dims [from, last] that every load and store reads and
// writes as one contiguous run (and no mask looks at): one loop over their `count` elements,
// variable `var`, with dims from..last-1 at 0 and dim `last` at the variable (the indices are
// affine in it). A narrow last dim (a 3x3 kernel's) then vectorizes like a flat tensor.
struct FlatTail {
  int from = -1, last = -1, var = -1;
  int64_t count = 0;
};

// `idx` with the tail's dims replaced: from..last-1 by 0, last by the tail's variable.
std::vector<Expr> flat_tail_index(std::vector<Expr> idx, const FlatTail& t);

// An elementwise kernel whose loads and stores run contiguously along another dim than the
// last (the batch-norm backward that writes grad_output channels-last for a weight gradient:
// it reads NCHW along the width, writes along the channels) runs that dim's loop innermost.
struct InnerLoop {
  int dim = -1;
};

// An elementwise kernel that stores along its last dim (`dim`) what it loads along the dims
// before it (a run, flattened as a FlatTail: NCHW values stored NHWC for a weight gradient)
// runs in blocks of lanes x lanes: each block is computed along the run into a buffer, then
// transposed in registers and stored along `dim`. Element by element, one side of the copy
// would be strided.
struct TransposeTile {
  FlatTail run;
  int dim = -1;
  // Dims between the run and `dim`, looped around the blocks: a run that does not flatten with
  // them (an NHWC value stored NCHW: the channels the run, the height between, the width stored).
  std::vector<int> mid;
};

struct CpuPlan {
  std::optional<SplitPlan> split;  // else one function over [begin, end) of parallel_dim
  int parallel_dim = -1;           // the dim whose range the threads split (-1: none)
  int64_t parallel_grain = 1;      // its slices start at multiples of this
  std::optional<ChannelTile> channel;
  std::optional<ReduceBlocking> blocks;
  std::optional<VectorTile> vector_tile;
  std::optional<FlatTail> flat_tail;
  std::optional<TransposeTile> transpose;
  std::optional<InnerLoop> inner_loop;
  // The plan's expressions use variables 0..num_vars-1, the output dims' first (0..ndim-1);
  // the code generator binds them and numbers its own after them.
  int num_vars = 0;
};

CpuPlan lower_cpu(const Kernel& k, const CpuTarget& target);
// One line saying how the loops run (TINY_DEBUG=3): "plain loops" where no tiling applies.
std::string describe(const CpuPlan& p);

// Whether what `k` computes from `reduce` is element-wise only: no other reduce, gather or
// scatter after it (a channel tile's epilogue then runs as one loop over its outputs).
bool elementwise_epilogue(const Kernel& k, const Node* reduce);

// ---------------------------------------------------------------- CUDA

enum class CudaMma { None, F16, BF16, TF32 };  // the factors' type on tensor cores

// One factor of a shared tile's product.
struct SharedFactor {
  const Node* node = nullptr;
  bool along_k = false;  // staged with consecutive threads along k (the factor's unit stride)
};

struct CudaPlan {
  // The kernel as the plan sees it: a tiled product regrouped as a matrix product
  // (matrix_view), or null where the kernel stays as it is. The plan's dims are its dims.
  std::shared_ptr<const Kernel> view;
  // per block (a shared-memory tree per output) or per thread; `split` slices of the reduce
  // per output: blocks of a block reduce, or (split_threads) threads of a register tile, each
  // taking a range of the reduce's outermost axis, or blocks of a shared tile, each taking
  // split_steps of its flat steps
  bool block_reduce = false;
  int split = 1;
  bool split_threads = false;
  int64_t split_steps = 0;  // a split shared tile's reduce steps per slice (whole chunks)
  int block_size = 256;
  int min_blocks_per_sm = 0;  // __launch_bounds__' second value: caps registers per thread (0: none)
  // register tile: tile_rows x tile_cols outputs per thread along dims tile_d2 (or none:
  // -1) and tile_d
  int tile_d = -1, tile_d2 = -1;
  int64_t tile_rows = 1, tile_cols = 1;
  // shared-memory tile: a block of shared_ty x shared_tx threads (or of warps on tensor
  // cores) stages the reduce's two factors, chunk by chunk of its shared_k flat steps
  bool shared = false;
  int64_t shared_tx = 1, shared_ty = 1, shared_k = 0;
  SharedFactor row_factor, col_factor;
  CudaMma mma = CudaMma::None;
  int64_t mma_warps_m = 0, mma_warps_n = 0;  // a block's warps along its rows and columns
  int64_t mma_m = 0, mma_n = 0;              // a warp's m16 x n8 pieces along them
  // vector lanes of an elementwise kernel: `lanes` neighbouring outputs along dim lanes_d
  int64_t lanes = 1;
  int lanes_d = -1;
  int64_t launch_outputs = 0;  // the launch range: outputs, or tiles, lane groups or blocks of them

  bool tiled() const { return tile_rows * tile_cols > 1; }
  int64_t block_rows() const { return mma != CudaMma::None ? mma_warps_m * mma_m * 16 : shared_ty * tile_rows; }
  int64_t block_cols() const { return mma != CudaMma::None ? mma_warps_n * mma_n * 8 : shared_tx * tile_cols; }
  int64_t shared_threads() const { return mma != CudaMma::None ? 32 * mma_warps_m * mma_warps_n : shared_ty * shared_tx; }
  Shape shared_grid(const Shape& shape) const;  // blocks along each output dim (tiles of tiles along the tile's two)
  std::string mma_name() const;                 // "f16", "bf16", "tf32"
};

// Reduce steps a shared tile stages per chunk: scalar tiles, tensor cores.
constexpr int64_t kSharedK = 16;
constexpr int64_t kMmaK = 32;
// Outputs per vector-lane group.
constexpr int64_t kCudaLanes = 4;

// A tiled sum of products (a convolution, a linear layer on batches) seen as a matrix product:
// its output dims regrouped into batch dims (where both factors move, or neither), rows (where
// only the row factor moves) and columns (where only the factor that moves along the last dim
// moves), each of rows and columns flattened into one dim. A convolution's outputs become
// (output channels) x (images x positions): blocks of tiles that fit any map size (a 7x7 map
// left 7 columns of a block's 64 or 128), rows and columns that divide into register tiles. A
// weight gradient's become (input channels x taps) x (output channels). The values and stores
// are the same, seen through a permute and a reshape; null where the kernel is already laid
// out so, or computes no such product.
std::shared_ptr<const Kernel> matrix_view(const Kernel& k);

// How `k` runs on a GPU: planned on its matrix_view where it has one (CudaPlan::view).
CudaPlan lower_cuda(const Kernel& k, const CudaRenderOptions& opt);

// Whether index `e` is variable `lane` plus terms that do not depend on it (or on variables
// made after it) and are multiples of `lanes`: the lanes read consecutive elements from an
// aligned start.
bool lane_run(const Expr& e, int lane, int64_t lanes);

}  // namespace tiny
