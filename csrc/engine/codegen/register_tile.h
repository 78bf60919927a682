// Register tiling, decided once for every code generator.
//
// A reduce evaluated for neighbouring outputs (matmul, convolution, column
// sums) can run the other way round: for a tile of outputs, the reduce loop is
// outside and one accumulator per output is updated per step, so a load that
// stays put along a tile dim is read once for the whole tile. Which reduce a
// tile serves and whether tiling pays are properties of the kernel; how big a
// tile is follows the device (vector lanes and registers on a CPU, registers
// per thread on a GPU) and is left to each code generator.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "engine/codegen/kernel.h"

namespace tiny {

// The flat row-major index of `idx` in `shape`.
Expr row_major(const std::vector<Expr>& idx, const Shape& shape);

// What a kernel's outputs evaluate: each output's value and its scatter index.
std::vector<const Node*> output_roots(const Kernel& k);

struct TiledReduce {
  const Node* reduce = nullptr;
  std::vector<Expr> idx;  // the reduce's context at the output index walked
  Expr valid;
};

// The single reduce under the outputs at output index `idx` whose context
// depends on a variable numbered `jid` or above (the tiled output dims'; any
// reduce for jid < 0); none when there are several or a gather makes the
// context data-dependent.
std::optional<TiledReduce> find_tiled_reduce(const Kernel& k, const std::vector<Expr>& idx, int jid,
                                             const std::function<Expr(int64_t)>& fresh_var);

// How a tile's outputs are computed: as vectors along the tiled var (a CPU's
// SIMD lanes) or as scalars, one register each (a GPU thread).
enum class TileKind { Vectors, Scalars };

// Whether tiling `c` along var `jid` pays. Vectors: every load under the
// reduce's source moves by 0 or 1 element along `jid` (whole vectors) and
// some load is reused (stays put along `jid` and does not move by 1 along the
// innermost reduce var), or the reduce is too short to vectorize (a
// convolution's kernel width) and a load moves by 1 along `jid`. Scalars:
// some load stays put along `jid`, so the tile reads it once for all its columns.
bool worth_tiling(const Kernel& k, const TiledReduce& c, int jid, TileKind kind,
                  const std::function<Expr(int64_t)>& fresh_var);

// The output dim before `d` (idx: the output's variables, one per dim) to give a tile its
// rows: the nearest one along which a load that moves along `d` stays put, so the tile
// reuses loads both ways (a matmul's rows, where b stays put; a convolution's output
// channels, where the input does); -1 when there is none.
int tile_row_dim(const Kernel& k, const TiledReduce& c, const std::vector<Expr>& idx, int d,
                 const std::function<Expr(int64_t)>& fresh_var);

// Whether `k` has a single reduce that a register tile along one of the output dims would
// serve (a load under it stays put along that dim: a matmul, a convolution). Device-neutral:
// the scheduler asks it so that it never merges such a reduce with another one, which
// would leave the kernel with two reduces and neither tiled.
bool has_tileable_reduce(const Kernel& k);

}  // namespace tiny
