#include "engine/codegen/lowering.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <unordered_set>

#include "engine/codegen/index_walk.h"
#include "engine/codegen/register_tile.h"
#include "engine/tensor/tensor.h"

namespace tiny {

// ---------------------------------------------------------------- shared

bool lane_run(const Expr& e, int lane, int64_t lanes) {
  if (e->op == EOp::Bounded) return lane_run(e->src[0], lane, lanes);
  std::vector<Expr> terms = e->op == EOp::Add ? e->src : std::vector<Expr>{e};
  int lanes_seen = 0;
  for (auto& t : terms) {
    if (t->op == EOp::Var && t->value == lane) lanes_seen++;
    else if (uses_vars(t, lane, INT32_MAX) || !multiple_of(t, lanes)) return false;
  }
  return lanes_seen == 1;
}

namespace {

// Variables for the analyses: ids in the order they are made (only the ids matter here).
struct Vars {
  int next = 0;
  Expr make(int64_t size) { return var(next++, size); }
  std::vector<Expr> index(const Shape& shape) {
    std::vector<Expr> idx;
    for (int64_t e : shape) idx.push_back(make(e));
    return idx;
  }
  std::function<Expr(int64_t)> fresh() {
    return [this](int64_t size) { return make(size); };
  }
};

// How many reduces (index contexts) the outputs evaluate, none inside another, else 0: the
// kernels a split block reduce can serve (its blocks meet once, after every reduce; a nested
// reduce would be recomputed by every slice). Tiles and their splits serve exactly one.
int flat_reduces(const Kernel& k, Vars& vars) {
  // nesting by the graph, not by index contexts: a reduce whose value another one's source
  // reads may also be an output, walked first (a batch norm's statistics and its backward)
  std::unordered_set<const Node*> seen[2];  // walked outside any reduce, inside one
  std::function<bool(const Node*, bool)> nests = [&](const Node* n, bool inside) {
    if (k.loads.count(n) || !seen[inside].insert(n).second) return false;
    if (n->op == Op::Reduce && inside) return true;
    for (auto& s : n->src)
      if (nests(s.get(), inside || n->op == Op::Reduce)) return true;
    return false;
  };
  for (auto& o : k.outputs)
    for (const NodeRef& root : {o.value, o.scatter_index})
      if (root && nests(root.get(), false)) return 0;
  int contexts = 0;
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = vars.fresh();
  w.visit = [&](const Node* n, const std::vector<Expr>&, const Expr&) {
    contexts += n->op == Op::Reduce;
    return true;
  };
  std::vector<Expr> idx = vars.index(k.shape);
  for (auto& o : k.outputs) {
    w.walk(o.value.get(), idx, cnst(1));
    if (o.scatter_index) w.walk(o.scatter_index.get(), idx, cnst(1));
  }
  return contexts;
}

bool one_flat_reduce(const Kernel& k, Vars& vars) { return flat_reduces(k, vars) == 1; }

// ---------------------------------------------------------------- CPU

std::optional<SplitPlan> plan_split(const Kernel& k) {
  if (k.serial || numel(k.shape) != 1) return std::nullopt;
  std::vector<SplitPlan> found;
  bool nested = false, other = false;
  int next = 1 << 20;
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = [&](int64_t size) { return var(next++, size); };
  int depth = 0;
  w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    if (n->op == Op::Gather || n->op == Op::Rand) other = true;
    if (n->op != Op::Reduce) return true;
    if (depth > 0) {
      nested = true;
      return false;
    }
    SplitPlan p;
    p.reduce = n;
    p.idx = ix;
    p.valid = v;
    found.push_back(p);
    depth++;
    return true;
  };
  w.leave = [&](const Node* n) {
    if (n->op == Op::Reduce) depth--;
  };
  for (auto& o : k.outputs) w.walk(o.value.get(), std::vector<Expr>(k.shape.size(), cnst(0)), cnst(1));
  if (found.size() != 1 || nested || other) return std::nullopt;
  SplitPlan p = found[0];
  const Node* r = p.reduce;
  const Node* src = r->src[0].get();
  if (r->args.rop == ReduceOp::Any || r->args.rop == ReduceOp::All || r->dtype == DType::Bool) return std::nullopt;
  if (src->numel() < (int64_t(1) << 16)) return std::nullopt;
  for (auto& e : p.idx)
    if (!e->is_const()) return std::nullopt;
  int axis = -1;
  for (int a : r->args.axes)
    if (src->shape[a] > 1) { axis = a; break; }
  if (axis < 0) return std::nullopt;
  p.axis = axis;
  p.chunks = std::min<int64_t>(src->shape[axis], 32);
  if (p.chunks < 2) return std::nullopt;
  return p;
}

// The dim whose range the thread pool splits, unless a channel tile's threads split its
// channels instead (CpuLowering::lower): the first non-unit dim, none for a serial kernel.
int first_parallel_dim(const Kernel& k) {
  if (k.serial) return -1;
  for (size_t d = 0; d < k.shape.size(); d++)
    if (k.shape[d] > 1) return int(d);
  return -1;
}

class CpuLowering {
  const Kernel& k_;
  const CpuTarget target_;  // before the constants made from it

 public:
  CpuLowering(const Kernel& k, const CpuTarget& target) : k_(k), target_(target) {}

  CpuPlan lower() {
    CpuPlan p;
    p.split = plan_split(k_);
    if (p.split) return p;  // the partial and finishing functions need nothing more
    const Shape& shape = k_.shape;
    int par = first_parallel_dim(k_);
    // the register tile replaces the loops of the last two non-unit dims (or of the only one)
    size_t last = shape.size(), tile_outer = shape.size();
    for (size_t d = 0; d < shape.size(); d++)
      if (shape[d] > 1) {
        tile_outer = last < shape.size() ? last : d;
        last = d;
      }
    if (last < shape.size() && tile_outer == shape.size()) tile_outer = last;
    if (k_.serial) tile_outer = shape.size();
    // the output dims' variables first, as the code generator numbers them
    std::vector<Expr> idx = vars_.index(shape);
    std::optional<ChannelTile> ct;
    if (par >= 0) ct = plan_channel_tile(idx, par);
    if (ct && threads_over_channels(*ct, par)) {
      // Every thread packs the weight panels of the channels it computes: split over the
      // batch, each packed all of them (a convolution with few output positions per
      // image, resnet18's layer4: the strided packing cost as much as the FMAs).
      // (A weight read in place may take its rows from another dim there: a product of few rows
      // kept its reduce as a unit dim, the tile's rows over it and the rows before.)
      auto over_channels = plan_channel_tile(idx, ct->j);
      if (over_channels && over_channels->j == ct->j &&
          (over_channels->i == ct->i || (over_channels->unit && ct->unit && k_.shape[size_t(ct->i)] == 1))) {
        par = ct->j;
        ct = over_channels;
      }
    }
    if (ct && ct->ck < kChanMinReduce && !ct->unit) ct.reset();  // (see kChanMinReduce)
    // A channel tile of one row holds kChanVecs accumulators, bound by the FMA latency; a
    // vector tile of several rows where its rows move both operands (a depthwise convolution's
    // channels, its positions as one run: see rows_as_one_run in ops_conv.cpp) holds more.
    if (ct && ct->row_count(shape) == 1 && tile_outer < shape.size() && tile_outer != last) {
      auto vt = plan_vector_tile(idx, int(tile_outer), int(tile_outer), int(last));
      if (vt && vt->rows > 1 && vt->cols >= kChanCols) {
        ct.reset();
        p.vector_tile = vt;
      }
    }
    if (ct && ct->pack_inner) par = pack_outside(*ct, idx, par);
    if (ct) widen_matmul_tile(*ct, idx, par);
    p.parallel_dim = par;
    if (ct && ct->j == par) p.parallel_grain = ct->cols;
    if (ct) {
      p.blocks = plan_reduce_blocks(*ct, par);
    } else if (tile_outer < shape.size() && !p.vector_tile) {  // the channel tile comes first where there is one
      p.vector_tile = plan_vector_tile(idx, int(tile_outer), tile_outer != last ? int(tile_outer) : -1, int(last));
      // All rows in one tile (a product of an RNN step's batch): the threads split the columns,
      // each reading its share of the operand that moves along them, where split over the rows
      // each read all of it with part of the tile's rows.
      const std::optional<VectorTile>& vt = p.vector_tile;
      if (vt && vt->d2 >= 0 && vt->d2 == par && vt->rows >= shape[size_t(par)] &&
          shape[size_t(vt->d)] >= vt->cols * target_.threads) {
        par = vt->d;
        p.parallel_dim = par;
        p.parallel_grain = vt->cols;
      }
    }
    if (ct) ct->padding_taps = has_padding_taps(*ct, idx);
    if (ct) {  // panels that all fit in cache: the rows outermost
      const int64_t panel_bytes = ct->ck * ((shape[size_t(ct->j)] + ct->cols - 1) / ct->cols * ct->cols) * 4;
      const bool row_epilogue = k_.outputs.size() > 1 && elementwise_epilogue(k_, ct->reduce);
      const int64_t cached = row_epilogue ? kCachedPanelBytesRowEpilogue : kCachedPanelBytes;
      ct->rows_outside = panel_bytes <= cached && !ct->unit && !ct->pack_inner &&
                         !p.blocks && ct->mid.empty() && !ct->padding_taps && ct->i != par &&
                         ct->row_dims().front() != par;
      ct->epilogue_per_row_tile = ct->rows_outside && row_epilogue;
    }
    if (ct) {  // panels read by one pass of the tiles: no blocks, no outer loop around them
      bool once = !ct->unit && !ct->pack_inner && !ct->jstride1 && !p.blocks && !ct->rows_outside;
      for (int d = 0; d < ct->first_dim(); d++) once &= shape[size_t(d)] == 1;
      ct->pack_per_tile = once;
    }
    p.channel = ct;
    if (!ct && !p.vector_tile && par >= 0 && !k_.serial) p.flat_tail = plan_flat_tail(idx, par);
    if (!ct && !p.vector_tile && !p.flat_tail && par >= 0 && !k_.serial) p.transpose = plan_transpose_tile(idx, par);
    if (p.transpose && p.transpose->run.from == par) p.parallel_grain = kLanes;
    if (!ct && !p.vector_tile && !p.flat_tail && !p.transpose && par >= 0 && !k_.serial)
      p.inner_loop = plan_inner_loop(idx, par);
    p.num_vars = vars_.next;
    return p;
  }

 private:
  Expr placeholder_var(int64_t size) { return vars_.make(size); }
  std::optional<TiledReduce> find_tiled_reduce(const std::vector<Expr>& idx, int jid) {
    return tiny::find_tiled_reduce(k_, idx, jid, vars_.fresh());
  }

  // ---- flat tails (FlatTail)
  // Every index the outputs read or write (loads, stores, arange and random counters),
  // walked at `idx`; false where a reduce or gather makes indices that are not the output's.
  bool accesses(const std::vector<Expr>& idx, const std::function<bool(const Expr&, const Expr&)>& ok) {
    bool good = true;
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = vars_.fresh();
    w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      if (n->op == Op::Reduce || n->op == Op::Gather) good = false;
      if (good && (n->op == Op::Arange || n->op == Op::Rand)) good = ok(row_major(ix, n->shape), v);
      return good;
    };
    w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      good = good && ok(row_major(ix, n->shape), v);
    };
    for (auto& o : k_.outputs) {
      if (!good || o.scatter_index) return false;
      auto [flat, valid] = o.store.index_valid(idx);
      good = ok(flat, valid);
      if (good) w.walk(o.value.get(), idx, cnst(1));
    }
    return good;
  }

  // The dims `run` (increasing, every non-unit dim from the first to the last) as one
  // FlatTail, where every access is affine along them with strides in row-major proportion
  // and no mask looks at them; `coefficients` gets each access's stride along the run, in
  // the order accesses() visits them.
  std::optional<FlatTail> flatten(const std::vector<Expr>& idx, const std::vector<int>& run,
                                  std::vector<int64_t>& coefficients) {
    const Shape& shape = k_.shape;
    const int lid = int(idx[size_t(run.back())]->value);
    coefficients.clear();
    // at the output's own index
    auto proportional = [&](const Expr& flat, const Expr& valid) {
      auto c_last = linear_coefficient(flat, lid);
      if (!c_last) return false;
      int64_t stride = 1;
      for (size_t q = run.size(); q-- > 0;) {
        int id = int(idx[size_t(run[q])]->value);
        auto c = linear_coefficient(flat, id);
        if (!c || *c != *c_last * stride || uses_vars(valid, id, id + 1)) return false;
        stride *= shape[size_t(run[q])];
      }
      coefficients.push_back(*c_last);
      return true;
    };
    if (!accesses(idx, proportional)) return std::nullopt;
    // and at the flat loop's index, the same run: the code generator evaluates that one
    FlatTail t;
    t.from = run.front();
    t.last = run.back();
    t.count = 1;
    for (int d : run) t.count *= shape[size_t(d)];
    Expr f = vars_.make(t.count);
    t.var = int(f->value);
    size_t seen = 0;
    auto same_run = [&](const Expr& flat, const Expr& valid) {
      auto c = linear_coefficient(flat, t.var);
      return c && seen < coefficients.size() && *c == coefficients[seen++] && !uses_vars(valid, t.var, t.var + 1);
    };
    if (!accesses(flat_tail_index(idx, t), same_run) || seen != coefficients.size()) return std::nullopt;
    return t;
  }

  std::optional<FlatTail> plan_flat_tail(const std::vector<Expr>& idx, int par) {
    const Shape& shape = k_.shape;
    std::vector<int> tail;  // non-unit dims after the parallel one
    for (int d = par + 1; d < int(shape.size()); d++)
      if (shape[size_t(d)] > 1) tail.push_back(d);
    if (tail.size() < 2 || shape[size_t(tail.back())] >= 2 * kLanes) return std::nullopt;  // wide enough as it is
    std::vector<int64_t> coefficients;
    for (size_t first = 0; first + 1 < tail.size(); first++) {
      auto t = flatten(idx, std::vector<int>(tail.begin() + long(first), tail.end()), coefficients);
      if (t) return t;
    }
    return std::nullopt;
  }

  // ---- transposed blocks (TransposeTile)
  // The run may be the parallel dim itself where it is the only dim before the stored one (a
  // matrix's transpose, x.t().contiguous()): each thread's slice of it, whole blocks.
  std::optional<TransposeTile> plan_transpose_tile(const std::vector<Expr>& idx, int par) {
    const Shape& shape = k_.shape;
    std::vector<int> dims;  // non-unit dims after the parallel one: the run, then the stored dim
    for (int d = par + 1; d < int(shape.size()); d++)
      if (shape[size_t(d)] > 1) dims.push_back(d);
    if (dims.size() == 1) dims.insert(dims.begin(), par);
    if (dims.size() < 2) return std::nullopt;
    const int s = dims.back();
    const int sid = int(idx[size_t(s)]->value);
    if (shape[size_t(s)] < kLanes) return std::nullopt;  // a partial block's positions one by one
    dims.pop_back();
    for (auto& o : k_.outputs) {  // 4-byte elements (the vectors transposed), stored along s
      if (o.scatter_index || itemsize(k_.buffers[size_t(o.buffer)]->dtype()) != 4) return std::nullopt;
      auto c = linear_coefficient(o.store.index_valid(idx).first, sid);
      if (!c || *c != 1) return std::nullopt;
    }
    // the run: the dims before s that flatten, the longest first; those after it looped around,
    // not for masked reads (padded copies: their masks per element made them slower so)
    bool masked = false;
    accesses(idx, [&](const Expr&, const Expr& valid) {
      masked |= !is_true(valid);
      return true;
    });
    for (size_t n = dims.size(); n > 0 && (n == dims.size() || !masked); n--) {
      const std::vector<int> run_dims(dims.begin(), dims.begin() + long(n));
      const int lid = int(idx[size_t(run_dims.back())]->value);
      bool stored_along_run = false;  // (then not a transposition)
      for (auto& o : k_.outputs) stored_along_run |= linear_coefficient(o.store.index_valid(idx).first, lid) == 1;
      if (stored_along_run) return std::nullopt;
      std::vector<int64_t> coefficients;
      auto run = flatten(idx, run_dims, coefficients);
      if (!run || run->count % kLanes) continue;
      // a load along the run that moves along s too (the stores do not move along the run); a
      // table of the run's dims (a batch norm's per-channel terms) is read from cache in either
      // order, and where it was the only one, a batch norm's backward over (16, 96, 1024) took
      // transposed blocks and ran 10x slower than along its rows
      bool transposed_load = false;
      accesses(idx, [&](const Expr& flat, const Expr&) {
        auto c = linear_coefficient(flat, lid);
        transposed_load |= c && *c == 1 && uses_vars(flat, sid, sid + 1);
        return true;
      });
      if (!transposed_load) continue;
      return TransposeTile{*run, s, std::vector<int>(dims.begin() + long(n), dims.end())};
    }
    return std::nullopt;
  }

  // ---- the innermost loop (InnerLoop)
  std::optional<InnerLoop> plan_inner_loop(const std::vector<Expr>& idx, int par) {
    const Shape& shape = k_.shape;
    int last = -1;
    for (int d = par + 1; d < int(shape.size()); d++)
      if (shape[size_t(d)] > 1) last = d;
    if (last < 0) return std::nullopt;
    // per dim, the loads and stores that run along it with unit stride; a table indexed by
    // that dim alone (a per-channel scale) is read from cache whatever the order
    std::vector<int> unit(shape.size(), 0);
    auto count = [&](const Expr& flat, const Expr&) {
      for (int d = par + 1; d < int(shape.size()); d++) {
        int id = int(idx[size_t(d)]->value);
        auto c = linear_coefficient(flat, id);
        if (!c || *c != 1) continue;
        bool table = true;
        for (int q = 0; q < int(shape.size()); q++)
          if (q != d && shape[size_t(q)] > 1 && uses_vars(flat, int(idx[size_t(q)]->value), int(idx[size_t(q)]->value) + 1))
            table = false;
        if (!table) unit[size_t(d)]++;
      }
      return true;
    };
    if (!accesses(idx, count)) return std::nullopt;  // reduces and gathers keep the order
    int best = last;
    for (int d = par + 1; d < last; d++)
      if (shape[size_t(d)] > 1 && unit[size_t(d)] > unit[size_t(best)]) best = d;
    if (best == last) return std::nullopt;
    return InnerLoop{best};
  }

  // ---- register tiles (VectorTile): kTileCols wide, and where there is a row dim kTileRows
  // tall, or more for a narrow tile (as many vector accumulators)
  const int64_t kLanes = target_.lanes;
  const int64_t kTileCols = 2 * kLanes;
  const int64_t kTileRows = target_.registers / 4;
  static constexpr int64_t kMinTileCols = 4;  // narrower output rows are not tiled

  std::optional<VectorTile> plan_vector_tile(const std::vector<Expr>& idx, int at, int d2, int d) {
    const Shape& shape = k_.shape;
    if (shape[size_t(d)] < kMinTileCols) return std::nullopt;
    int jid = int(idx[size_t(d)]->value);
    auto cand = find_tiled_reduce(idx, jid);
    if (!cand || !worth_tiling(k_, *cand, jid, TileKind::Vectors, vars_.fresh())) return std::nullopt;
    // A last dim narrower than kTileCols (a convolution's output width) gets
    // a tile as wide as itself and more rows: as many vector accumulators.
    VectorTile t;
    t.at = at;
    t.d2 = d2;
    t.d = d;
    t.cols = std::min(kTileCols, shape[size_t(d)]);
    const int64_t row_vectors = (t.cols + kLanes - 1) / kLanes;
    t.rows = d2 < 0 ? 1 : std::max<int64_t>(1, std::min(shape[size_t(d2)], kTileCols / kLanes * kTileRows / row_vectors));
    // Over a short reduce (a weight gradient over a batch of 8 images at 1x1, a 5x5 depthwise
    // convolution, a 1x1 one from 16 channels) a tile's rows share little work, while every
    // output of the unrolled tile is code of its own: 8 x 32 or 16 x 16 of them took LLVM
    // 0.4-0.7 s each to optimize (MobileNetV3's), the kernels running microseconds.
    int64_t reduce_steps = 1;
    for (int a : cand->reduce->args.axes) reduce_steps *= cand->reduce->src[0]->shape[size_t(a)];
    if (reduce_steps < kShortReduceSteps) t.rows = std::min(t.rows, kShortReduceRows);
    return t;
  }

  static constexpr int64_t kShortReduceSteps = 32, kShortReduceRows = 2;

  // A b packed per index of the dims before the tiles (pack_inner): the first dim after those
  // it moves with, where its panels are packed (ChannelTile::pack_at).
  int pack_level(const ChannelTile& ct, const std::vector<Expr>& idx) const {
    int at = 0;
    for (int d = 0; d < ct.first_dim(); d++)
      if (std::find(ct.b_outer_vars.begin(), ct.b_outer_vars.end(), int(idx[size_t(d)]->value)) != ct.b_outer_vars.end())
        at = d + 1;
    return at;
  }

  // The parallel dim of a pack_inner tile: where `par` moves b, the next dim that does not
  // (the images, after a transposed convolution's phases), so that each thread packs each
  // panel once rather than once per image; else `par`.
  int pack_outside(ChannelTile& ct, const std::vector<Expr>& idx, int par) {
    if (ct.pack_at < 0) ct.pack_at = pack_level(ct, idx);
    if (ct.par_hint >= 0) return ct.par_hint;
    if (par < 0 || par >= ct.pack_at) return par;
    for (int d = ct.pack_at; d < ct.first_dim(); d++)
      if (k_.shape[size_t(d)] > 1) return d;
    return par;
  }

  // ---- output-channel tiles (ChannelTile)
  static constexpr int64_t kChanVecs = 2;
  const int64_t kChanCols = kChanVecs * kLanes;
  // Rows per tile, measured: with 32 registers (AVX-512) 14 rows, 28
  // accumulators; with 16 (AVX2) 4 rows: at 6 (12 accumulators, the weight
  // vectors and the broadcast in 15 of 16 ymm) a 5x5 convolution with 24-wide
  // rows ran 2x slower than at 4 or 5 (spills), and 4 was fastest on both
  // the convolutions and the matmuls measured.
  const int64_t kChanMaxRows = target_.registers >= 32 ? 14 : 4;
  // Shorter reduces are store-bound: tiled only with b read in place, from kChanMinReduceInPlace
  // steps, where plain loops were worse (resnet18's weight gradients over 2 images at 2x2, 8
  // steps, took 3-6 ms each so: a 2-image SGD step at 32x32 47 -> 22-29 ms of kernels). Packed
  // panels of fewer steps than a vector come out wrong (pack_panel_transposed's runs), so those
  // stay untiled. From 16 steps on, packed tiles beat plain loops and vector tiles: MobileNetV2's
  // stride-2 3x3 stem over 3 channels (27 steps) 0.42 -> 0.10 ms, its 1x1 convolutions from 16
  // and 24 channels about 2x (the bound was 32).
  static constexpr int64_t kChanMinReduce = 16;
  static constexpr int64_t kChanMinReduceInPlace = 8;
  static constexpr int64_t kCachedPanelBytes = int64_t(1) << 20;
  static constexpr int64_t kCachedPanelBytesRowEpilogue = int64_t(4) << 20;  // (epilogue_per_row_tile)
  static constexpr int64_t kMinRowsLastDim = 8;
  static constexpr int64_t kMinRowsReduce = 128;  // reduce steps for rows over the input channels

  std::optional<ChannelTile> plan_channel_tile(const std::vector<Expr>& idx, int par) {
    const Shape& shape = k_.shape;
    std::vector<int> nu;
    for (size_t d = 0; d < shape.size(); d++)
      if (shape[d] > 1) nu.push_back(int(d));
    if (nu.size() < 2) return std::nullopt;
    // the last dim as the channels, rows the one before: only where b is
    // unit-stride already and the rows are too few for the tiling above (a
    // weight gradient's kernel width, with the output channels last)
    int j_last = nu.back(), i_prev = nu[nu.size() - 2];
    int64_t flat_rows = 1;  // the non-unit dims before the last, flattened
    for (size_t q = 0; q + 1 < nu.size(); q++) flat_rows *= shape[size_t(nu[q])];
    if (shape[size_t(j_last)] >= kChanCols && shape[size_t(i_prev)] < kMinRowsLastDim && i_prev != par) {
      auto ct = check_channel_tile(idx, j_last, i_prev);
      // Not a matmul over a small map's positions in several images (one reduce axis, dims
      // before the rows): those tiles would leave the images outside, streaming b once per
      // image; its rows continue over all the dims before, below (ConvNeXt's MLP input
      // gradients at 4x4, 8 images: an SGD step 469 -> 391-412 ms).
      const bool images_outside = nu.size() >= 4 && ct && ct->kvars.size() == 1 && ct->packable;
      if (ct && ct->unit && !(images_outside && flat_rows >= kMinRowsLastDim)) {
        // a 5x5 or 7x7 weight gradient: 5 rows are a tile of 4 and one of 1 (2 loads per
        // 2 FMAs); over (kh, kw) they are 6 tiles of 4 and one of 1 (MNIST's conv2: 87 -> 67 ms)
        if (nu.size() >= 3 && nu[nu.size() - 3] != par &&
            (shape[size_t(i_prev)] % ct->rows || ct->rows < kChanMaxRows)) {
          std::vector<int> outer = {nu[nu.size() - 3]};
          int64_t rows = shape[size_t(i_prev)] * shape[size_t(outer[0])];
          int64_t r = tile_rows(rows);
          // A 3x3 kernel's 9 rows are 3 tiles of 3: 6 accumulators, one FMA each per step,
          // bound by the FMA latency at 3/4 of the peak. Continued over the input channels
          // they are whole tiles of kChanMaxRows, where the reduce is long enough to repay
          // each tile's rows starting at unrelated places (resnet18's weight gradients at
          // 64x64: 16x16 and 8x8 outputs 8-14 % faster, 2x2 ones, 64 steps, 11 % slower).
          if ((rows % kChanMaxRows || r < kChanMaxRows) && nu.size() >= 4 && ct->ck >= kMinRowsReduce) {
            int64_t all = rows * shape[size_t(nu[nu.size() - 4])];
            if (all % kChanMaxRows == 0) {
              outer.insert(outer.begin(), nu[nu.size() - 4]);
              r = kChanMaxRows;
            }
          }
          if (r > ct->rows || shape[size_t(i_prev)] % ct->rows) {
            ct->row_outer = outer;
            ct->rows = r;
          }
        }
        return ct;
      }
    }
    // A matmul-like reduce (one reduce axis, b not moving along the rows: a
    // @ b, a @ w.t(), bmm) takes the last dim as the channels, so the output
    // is stored by rows. b is packed when it can be (a strided weight; also
    // a unit-stride one: panel rows N*4 bytes apart alias in L1 for N = 1024),
    // but for a few rows.
    // Fewer channels than a tile (a classifier's 10) take one partial tile
    // from a packed b, where there are rows enough (a full block per thread)
    // to repay the packing.
    const bool wide = shape[size_t(j_last)] >= kChanCols;
    const int64_t min_rows = wide ? kMinRowsLastDim : 2 * kChanMaxRows;
    // Rows too few along i_prev alone continue over the dims before it where b moves with none
    // of them (a linear layer over a 7x7 map's positions, channels last: ConvNeXt's last stage
    // ran its MLP in plain loops, 600 ms for 0.9 GFLOP).
    const bool short_rows = shape[size_t(i_prev)] < min_rows;
    if (shape[size_t(j_last)] >= kMinRowsLastDim && (short_rows ? flat_rows : shape[size_t(i_prev)]) >= min_rows) {
      auto ct = check_channel_tile(idx, j_last, i_prev);
      // b read in place (unit-stride, moving with a batch dim) needs whole tiles
      if (ct && ct->kvars.size() == 1 && !ct->uses_i && (ct->packable || !ct->unit || wide) &&
          (!short_rows || ct->packable)) {
        ct->pack_inner = !ct->unit && !ct->packable;
        // Fewer rows sharing b than 16 (an RNN step's batch) read a unit-stride b in place:
        // packing all of b for so few rows cost more than the product (8 x 512 x 512: 45-54 us
        // packed, 21-39 in place; 8 x 2048 x 2048: 1.2 ms, 0.6-0.9).
        if (ct->packable && !(ct->unit && flat_rows < 2 * kMinRowsLastDim)) ct->unit = false;
        ct->rows = kChanMaxRows;
        if (short_rows) ct->row_outer.assign(nu.begin(), nu.end() - 2);
        return ct;
      }
    }
    if (auto ct = plan_channels_before_rows(idx, par, nu)) return ct;
    // Channels last among the non-unit dims (a convolution's 1x1 outputs: resnet18's layer4 at
    // 32x32 input ran its plain loops 10x slower than a tile): the rows are the unit dim after
    // them, continued over the dims before.
    const int last_dim = int(shape.size()) - 1;
    if (last_dim > nu.back()) {
      nu.push_back(last_dim);
      return plan_channels_before_rows(idx, par, nu);
    }
    return std::nullopt;
  }

  // A channel dim nu[q] before the rows, the last of the non-unit dims `nu`; dims between them
  // are looped per tile (mid).
  std::optional<ChannelTile> plan_channels_before_rows(const std::vector<Expr>& idx, int par,
                                                       const std::vector<int>& nu) {
    const Shape& shape = k_.shape;
    for (size_t q = nu.size() - 1; q-- > 0;) {
      if (shape[size_t(nu[q])] < kChanCols) continue;
      auto ct = check_channel_tile(idx, nu[q], nu.back());
      if (!ct || (!ct->unit && !ct->packable && !ct->outer_packable)) continue;
      // a weight that moves with dims before the tile (a strided transposed convolution's
      // output phases) is packed per index of those: each panel serves the tile's rows
      ct->pack_inner = !ct->unit && !ct->packable;
      if (ct->pack_inner) ct->pack_at = pack_level(*ct, idx);
      ct->mid.assign(nu.begin() + long(q) + 1, nu.end() - 1);
      // Rows shorter than a tile (a 2x2 convolution output) or not dividing into whole
      // tiles continue into the mid dim before: the weight stream bounds the kernel
      // (resnet18's layer4 at 64x64 input ran at a third of layer3's speed; 14-wide rows
      // took tiles of 2 rows, 4 accumulators, at half the speed of 28-wide ones).
      if (!ct->mid.empty() && shape[size_t(nu.back())] % kChanMaxRows != 0 && nu.back() != par &&
          ct->mid.back() != par) {
        ct->row_outer = {ct->mid.back()};
        ct->rows = tile_rows(shape[size_t(nu.back())] * shape[size_t(ct->mid.back())]);
      }
      // Few rows per image (a 2x2 convolution output) continue over the images too: a
      // channel tile's weight panel then serves every image while it is in cache, instead of
      // all panels streaming from memory once per image. Measured at 16 images, 512 channels
      // at 2x2: 3.9 -> 1.7-2.1 ms with AVX-512 (3.3 -> 2.2 ms for AVX2); at 4x4 (16 rows) the
      // same or slower, so only below kMinRowsLastDim. The rows may start at the parallel dim
      // (a thread's slice of them), not pass through it.
      int64_t inner_rows = 1;
      bool par_inside = false;
      for (size_t r = 1; r < nu.size(); r++) {
        if (r > q) inner_rows *= shape[size_t(nu[r])];
        par_inside |= r != q && nu[r] == par;
      }
      // A b packed per index of the dims before (pack_inner) continues over those after the
      // ones it moves with only, the first of them then the parallel dim (par_hint).
      const int from = ct->pack_inner ? ct->pack_at : 0;
      size_t first_row = 0;
      while (first_row < q && nu[first_row] < from) first_row++;
      if ((ct->packable || ct->pack_inner) && first_row < q && inner_rows < kMinRowsLastDim && !par_inside) {
        ct->row_outer.assign(nu.begin() + long(first_row), nu.begin() + long(q));
        ct->row_outer.insert(ct->row_outer.end(), ct->mid.begin(), ct->mid.end());
        int64_t all = inner_rows;
        for (size_t r = first_row; r < q; r++) all *= shape[size_t(nu[r])];
        ct->rows = tile_rows(all);
        if (ct->pack_inner) ct->par_hint = ct->row_outer.front();
        // Where `a` has padding taps, the images go innermost, in tiles that divide them: a
        // tile's rows are then one position of several images, and its reduce skips the taps
        // that position reads from the padding (a 2x2 output's 3x3 taps: 4 of 9 are not).
        const int images = ct->row_outer.front();
        if (!ct->pack_inner && images != par && has_padding_taps(*ct, idx))
          for (int64_t r = kChanMaxRows; r >= kChanMaxRows / 2; r--)
            if (shape[size_t(images)] % r == 0) {
              ct->row_fastest = images;
              ct->rows = r;
              break;
            }
      }
      return ct;
    }
    return std::nullopt;
  }

  // Whether the channel tile's `a` is read through a mask that moves with a reduce loop (a
  // convolution's padding: zero_masks).
  bool has_padding_taps(const ChannelTile& ct, const std::vector<Expr>& idx) {
    auto cand = find_tiled_reduce(idx, ct.jvar);
    if (!cand || cand->reduce != ct.reduce) return false;
    const Node* src = ct.reduce->src[0].get();
    std::vector<Expr> sub = cand->idx;
    size_t k = 0;
    for (int a : ct.reduce->args.axes)
      if (src->shape[a] > 1) sub[size_t(a)] = ct.kvars[k++];
    for (const MaskAtom& at : zero_masks(ct.a, sub))
      for (auto& kv : ct.kvars)
        if (uses_vars(at.x, int(kv->value), int(kv->value) + 1)) return true;
    return false;
  }

  // The single reduce depending on dim j must be a float32 SUM of a product
  // a * b, where no load under a moves along j and b is a view of a leaf that
  // depends on j and the reduce loops only (the weight), unmasked.
  std::optional<ChannelTile> check_channel_tile(const std::vector<Expr>& idx, int j, int i) {
    int jid = int(idx[size_t(j)]->value);
    auto cand = find_tiled_reduce(idx, jid);
    if (!cand) return std::nullopt;
    const Node* r = cand->reduce;
    const Node* src = r->src[0].get();
    if (r->args.rop != ReduceOp::Sum || r->dtype != DType::Float32 || src->op != Op::Mul ||
        src->dtype != DType::Float32)
      return std::nullopt;
    ChannelTile ct;
    ct.cols = kChanCols;
    ct.j = j;
    ct.i = i;
    for (int d = 0; d < std::min(i, j); d++) ct.outer_vars.push_back(int(idx[size_t(d)]->value));
    ct.jvar = jid;
    ct.reduce = r;
    std::vector<Expr> sub = cand->idx;
    for (int a : r->args.axes)
      if (src->shape[a] > 1) {
        sub[a] = placeholder_var(src->shape[a]);
        ct.kvars.push_back(sub[a]);
        ct.kext.push_back(src->shape[a]);
        ct.ck *= src->shape[a];
      }
    if (ct.kvars.empty() || ct.ck < kChanMinReduceInPlace) return std::nullopt;
    ct.kstrides.assign(ct.kvars.size(), 1);
    for (size_t q = ct.kvars.size() - 1; q-- > 0;) ct.kstrides[q] = ct.kstrides[q + 1] * ct.kext[q + 1];
    for (int side = 0; side < 2; side++) {
      if (check_packed_side(ct, src, side, sub, cand->valid)) {
        int ivar = int(idx[size_t(i)]->value);
        ct.uses_i = uses_vars(ct.packed_flat, ivar, ivar + 1);
        return ct;
      }
      ct.packed_flat = nullptr;
    }
    for (int side = 0; side < 2; side++)
      if (is_true(cand->valid) && check_computed_side(ct, src, side, sub)) return ct;
    return std::nullopt;
  }

  // Whether src->src[side] can be a computed b: it reads nothing but what j, the reduce loops
  // and the dims before i and j index (no gather, random numbers or reduce) and the other factor
  // nothing that moves along j. Packing then evaluates it once per (channel, step) instead of
  // once per tile row.
  bool check_computed_side(ChannelTile& ct, const Node* src, int side, const std::vector<Expr>& sub) {
    const Node* b = src->src[size_t(side)].get();
    const Node* a = src->src[size_t(1 - side)].get();
    if (b->dtype != DType::Float32 || k_.loads.count(b)) return false;
    std::vector<int> allowed = {ct.jvar};
    for (auto& kv : ct.kvars) allowed.push_back(int(kv->value));
    // the dims before i and j too (attention's v + its bias, per batch and head): then packed
    // per index of those (pack_inner)
    allowed.insert(allowed.end(), ct.outer_vars.begin(), ct.outer_vars.end());
    bool outer = false;
    ct.b_outer_vars.clear();
    auto only_allowed = [&](const Expr& e) {
      std::vector<int> ids;
      collect_vars(e, ids);
      for (int id : ids) {
        if (std::find(allowed.begin(), allowed.end(), id) == allowed.end()) return false;
        if (std::find(ct.outer_vars.begin(), ct.outer_vars.end(), id) != ct.outer_vars.end()) {
          outer = true;
          ct.b_outer_vars.push_back(id);
        }
      }
      return true;
    };
    bool ok = true;
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = [&](int64_t size) {
      Expr v = placeholder_var(size);  // a reduce's own loops would be these: refused below anyway
      allowed.push_back(int(v->value));
      return v;
    };
    w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      if (n->op == Op::Gather || n->op == Op::Rand || n->op == Op::Reduce) ok = false;
      if (n->op == Op::Arange) ok &= only_allowed(row_major(ix, n->shape)) && only_allowed(v);
      return ok;
    };
    w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      ok &= only_allowed(row_major(ix, n->shape)) && only_allowed(v);
    };
    w.walk(b, sub, cnst(1));
    if (!ok) return false;
    // a: nothing under it moves along j
    IndexWalker wa;
    wa.is_leaf = w.is_leaf;
    wa.fresh_var = [&](int64_t size) { return placeholder_var(size); };
    wa.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      if (n->op == Op::Gather || n->op == Op::Rand) ok = false;
      return ok;
    };
    wa.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      auto sj = linear_coefficient(row_major(ix, n->shape), ct.jvar);
      ok &= sj && *sj == 0 && !uses_vars(v, ct.jvar, ct.jvar + 1);
    };
    wa.walk(a, sub, cnst(1));
    if (!ok) return false;
    ct.a = a;
    ct.b = b;
    ct.b_idx = sub;
    ct.computed = ct.outer_packable = true;
    ct.packable = !outer;
    ct.unit = ct.jstride1 = ct.uses_i = false;
    ct.rows = tile_rows(k_.shape[size_t(ct.i)]);
    return true;
  }

  // Whether src->src[side] can be b: views down to a float32 leaf.
  bool check_packed_side(ChannelTile& ct, const Node* src, int side, const std::vector<Expr>& sub, const Expr& valid) {
    const Node* n = src->src[size_t(side)].get();
    while (!k_.loads.count(n) && n->op == Op::View) n = n->src[0].get();
    if (!k_.loads.count(n) || k_.buffers[k_.loads.at(n)]->dtype() != DType::Float32) return false;
    ct.packed = n;
    ct.b = src->src[size_t(side)].get();
    ct.a = src->src[size_t(1 - side)].get();
    int jid = ct.jvar;
    bool ok = true;
    auto moves = [&](const Expr& e) {  // along j or the reduce
      bool m = uses_vars(e, jid, jid + 1);
      for (auto& kv : ct.kvars) m |= uses_vars(e, int(kv->value), int(kv->value) + 1);
      return m;
    };
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = [&](int64_t size) { return placeholder_var(size); };
    w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      if (n->op == Op::Gather || n->op == Op::Rand) ok = false;
      if (n->op == Op::Reduce) {
        // a row statistic under a (a LayerNorm's mean, a softmax's sum) is computed once per
        // tile row, before the reduce loops; one that moves with them is not tiled
        bool row_only = !moves(v);
        for (auto& e : ix) row_only &= !moves(e);
        ok &= row_only;
        return false;
      }
      return ok;
    };
    w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      Expr flat = row_major(ix, n->shape);
      if (n != ct.packed) {  // under a: must not move along j
        auto sj = linear_coefficient(flat, jid);
        ok &= sj && *sj == 0;
        return;
      }
      ok &= is_true(v) && (!ct.packed_flat || to_string(ct.packed_flat) == to_string(flat));
      ct.packed_flat = flat;
    };
    w.walk(src, sub, valid);
    if (!ok || !ct.packed_flat || !uses_vars(ct.packed_flat, jid, jid + 1)) return false;
    auto sj = linear_coefficient(ct.packed_flat, jid);
    ct.unit = ct.jstride1 = sj && *sj == 1;
    std::vector<int> ids;
    collect_vars(ct.packed_flat, ids);
    ct.packable = ct.outer_packable = true;
    ct.b_outer_vars.clear();
    for (int id : ids) {
      bool known = id == jid;
      for (auto& kv : ct.kvars) known |= id == int(kv->value);
      ct.packable &= known;
      for (int o : ct.outer_vars)
        if (id == o) {
          known = true;
          ct.b_outer_vars.push_back(id);
        }
      ct.outer_packable &= known;
    }
    if (!ct.unit && !ct.outer_packable) return false;
    ct.rows = tile_rows(k_.shape[size_t(ct.i)]);
    return true;
  }

  // Whether threads should split a tile's channels rather than dim `par` before them: where
  // the weight is packed and there are few rows per channel, so that packing all channels
  // in every thread costs a large part of the FMAs' time, or where `par` is the tile's rows
  // (a matmul's), so that each thread packs and streams only its share of b (there every
  // thread needs 2 panels or more: a matmul has rows enough to split instead).
  // Measured on AVX2 (4 rows per tile): 2x2 outputs (64 rows per channel) gain 1.4x, 4x4
  // (256) neither gain nor lose; a 1024^3 matmul went from 155 to 172 GFLOP/s.
  bool threads_over_channels(const ChannelTile& ct, int par) const {
    if (ct.pack_inner || par < 0 || par > ct.j) return false;
    const int64_t channels = k_.shape[size_t(ct.j)];
    const int64_t rows = numel(k_.shape) / channels;  // outputs per channel
    // b read in place, at most one tile of rows: split over the rows' images, each thread read
    // all of b (a 1x1 convolution's input gradient at 2x2 over 2 images, 1280 -> 320 channels:
    // 0.22 -> 0.07 ms with the channels split)
    if (ct.unit) return channels >= 4 * kChanCols && rows <= kChanMaxRows;
    // So too where `par` is a dim before a matmul's rows that b does not move with (a linear
    // layer over (batch, tokens, features)): a transformer block's 8 x 128 x 512 -> 2048 took
    // 1.09x the CPU's time split over the batch, 0.97x split over the channels.
    const bool rows_of_a_matmul =
        ct.j > ct.i && ct.mid.empty() && ct.row_outer.empty() && ct.packable && par < ct.i;
    if (par == ct.i || rows_of_a_matmul) return channels >= 2 * kChanCols * std::max(2, target_.threads);
    return channels >= 4 * kChanCols && rows <= 16 * kChanMaxRows;
  }

  // A matmul's tile (one row dim, no window, b in panels): kWideVecs vectors x kWideRows rows
  // instead of 2 x 14, where the channels are whole wide tiles and b serves many rows. Per
  // reduce step it loads 6 broadcasts and 4 vectors for 24 FMAs rather than 14 and 2 for 28,
  // and its rows read `a` in place (a_in_place) instead of each thread copying all of it.
  // Measured in one process against the 2 x 14 tile (2 threads, Intel Xeon EMR): 1024^3
  // 0.75-0.87 of its time, 1024 x 512 x 2048 0.81, 16 x 4096 x 4096 (b not transposed) 0.60.
  // Convolutions keep 2 x 14 (with 4 x 6 everywhere, resnet18's inference took 1.25-1.45x as
  // long, MNIST's step 3.5x), as do 16 rows through a linear layer's transposed weight (1.07x:
  // packing 64 columns streams 64 rows of it). Where the threads split the channels, the wide
  // tiles split evenly or are many (3 tiles over 2 threads would leave one idle a third of
  // the time).
  static constexpr int64_t kWideVecs = 4, kWideRows = 6, kWideMinRows = 64;
  void widen_matmul_tile(ChannelTile& ct, const std::vector<Expr>& idx, int par) {
    const int64_t cols = kWideVecs * kLanes, channels = k_.shape[size_t(ct.j)], tiles = channels / cols;
    if (target_.registers < 32 || ct.unit || !ct.mid.empty() || !ct.row_outer.empty() ||
        numel(k_.shape) / channels < kWideMinRows || channels % cols != 0 || has_padding_taps(ct, idx))
      return;
    if (par == ct.j && tiles % target_.threads != 0 && tiles < 4 * target_.threads) return;
    ct.cols = cols;
    ct.rows = kWideRows;
    ct.a_in_place = true;  // with the copy, 1024^3 took 1.07x as long, 128 x 1024 x 1024 1.18x
  }

  // Rows per tile for `w_rows` rows: all up to kChanMaxRows, else a divisor near it.
  int64_t tile_rows(int64_t w_rows) const {
    for (int64_t r = kChanMaxRows; r >= kChanMaxRows * 4 / 7 && w_rows > kChanMaxRows; r--)
      if (w_rows % r == 0) return r;
    return std::min(w_rows, kChanMaxRows);
  }

  // ---- reduce blocking (see ReduceBlocking)
  static constexpr int64_t kBlockBytes = 128 << 10;  // b's slice per block (L2)

  std::optional<ReduceBlocking> plan_reduce_blocks(const ChannelTile& ct, int par) {
    if (!ct.unit || ct.j == par || ct.i == par) return std::nullopt;
    const Node* src = ct.reduce->src[0].get();
    ReduceBlocking rb;
    for (int a : ct.reduce->args.axes)
      if (src->shape[a] > 1) {
        rb.axis = a;
        break;
      }
    if (rb.axis < 0) return std::nullopt;
    rb.extent = src->shape[rb.axis];
    const int64_t per_index = ct.ck / rb.extent * k_.shape[size_t(ct.j)] * 4;  // b's bytes per index of the axis
    if (per_index * rb.extent <= 8 * kBlockBytes) return std::nullopt;  // b stays in L2 across tiles anyway
    rb.step = std::max<int64_t>(1, kBlockBytes / per_index);
    rb.count = (rb.extent + rb.step - 1) / rb.step;
    if (rb.count < 2) return std::nullopt;
    return rb;
  }

  Vars vars_;
};

// ---------------------------------------------------------------- CUDA

// A tiled sum of products (a matmul, a convolution): the reduce, its product (through casts)
// and the product's context at the output index walked, the reduce's axes as fresh variables
// (`steps` of them in all); none where the tiled reduce adds something else or is masked.
struct TiledProduct {
  const Node* reduce;
  const Node* prod;
  std::vector<Expr> sub;
  int64_t steps;
};
std::optional<TiledProduct> tiled_product(const Kernel& k, const std::vector<Expr>& idx,
                                          const std::function<Expr(int64_t)>& fresh) {
  auto ctx = find_tiled_reduce(k, idx, -1, fresh);
  if (!ctx || ctx->reduce->args.rop != ReduceOp::Sum || !is_true(ctx->valid)) return std::nullopt;
  const Node* r = ctx->reduce;
  const Node* prod = r->src[0].get();
  while (prod->op == Op::Cast) prod = prod->src[0].get();
  if (prod->op != Op::Mul) return std::nullopt;
  TiledProduct t{r, prod, ctx->idx, 1};
  for (int a : r->args.axes) {
    t.steps *= r->src[0]->shape[size_t(a)];
    t.sub[size_t(a)] = fresh(r->src[0]->shape[size_t(a)]);
  }
  return t;
}

// The value of `e` with variable `id` at `at` and every other at 0.
int64_t value_at(const Expr& e, int id, int64_t at) {
  auto v = [&](size_t i) { return value_at(e->src[i], id, at); };
  auto floor_div = [](int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); };
  switch (e->op) {
    case EOp::Const: return e->value;
    case EOp::Var: return e->value == id ? at : 0;
    case EOp::Add: {
      int64_t sum = 0;
      for (size_t i = 0; i < e->src.size(); i++) sum += v(i);
      return sum;
    }
    case EOp::Mul: return v(0) * e->value;
    case EOp::Div: return floor_div(v(0), e->value);
    case EOp::Mod: return v(0) - floor_div(v(0), e->value) * e->value;
    case EOp::Lt: return v(0) < e->value;
    case EOp::And: return v(0) && v(1);
    case EOp::Bounded: return v(0);
  }
  return 0;
}

// Whether index `e` moves by one element as variable `id` steps from 0 to 1: unit stride
// along it, or along its innermost part where it is a flattening of several dims.
bool unit_step(const Expr& e, int id) {
  auto stride = linear_coefficient(e, id);
  if (stride) return *stride == 1;
  return value_at(e, id, 1) - value_at(e, id, 0) == 1;
}

// How one factor of a tiled product reads: whether plainly (no gather, random numbers or
// reduce inside), and per output variable in `ids`, whether it moves along it and whether
// some load reads along it with unit stride.
struct FactorMotion {
  bool plain = true;
  std::vector<bool> moves, unit;
};
FactorMotion factor_motion(const Kernel& k, const Node* factor, const std::vector<Expr>& sub,
                           const std::vector<int>& ids, const std::function<Expr(int64_t)>& fresh) {
  FactorMotion m;
  m.moves.assign(ids.size(), false);
  m.unit.assign(ids.size(), false);
  auto note = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    Expr flat = k.loads.count(n) ? row_major(ix, n->shape) : nullptr;
    for (size_t i = 0; i < ids.size(); i++) {
      int id = ids[i];
      bool moves = uses_vars(v, id, id + 1);
      for (auto& e : ix) moves |= uses_vars(e, id, id + 1);
      m.moves[i] = m.moves[i] || moves;
      if (!flat) continue;
      m.unit[i] = m.unit[i] || unit_step(flat, id);
    }
  };
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = fresh;
  // where the factor reads (views between only transform the index)
  w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    if (n->op == Op::Gather || n->op == Op::Rand || n->op == Op::Reduce) m.plain = false;
    if (n->op == Op::Arange) note(n, ix, v);
    return m.plain;
  };
  w.on_leaf = note;
  w.walk(factor, sub, cnst(1));
  return m;
}

class CudaLowering {
 public:
  CudaLowering(const Kernel& k, const CudaRenderOptions& opt) : k_(k), opt_(opt) {}

  CudaPlan lower() {
    const int64_t outputs = numel(k_.shape);
    bool inner = false;
    int64_t outer_r = 1;
    int64_t max_r = top_level_reduce_size(&inner, &outer_r);
    // A block per output when threads would otherwise be few or loop long, or
    // when the reduced axis is the contiguous one (a block's threads then read
    // neighbouring elements) and the outputs are not enough to fill the GPU
    // with threads anyway; long reductions over outer axes read neighbours
    // across threads, so they stay one thread per output. (Measured on an H100:
    // a 3x3 conv with 200k outputs of 576 terms took 490 us per block, 52 us per
    // thread; matmul 1024^3, 1M outputs, 7.5 ms against 0.38 ms.)
    if (k_.serial) p_.block_reduce = false;  // an accumulating scatter runs in index order on one thread
    else if (opt_.block_reduce == 1) p_.block_reduce = max_r > 0;
    else if (opt_.block_reduce == 0) p_.block_reduce = false;
    else
      p_.block_reduce = max_r >= 128 && (outputs <= 4096 || max_r >= 4 * outputs ||
                                         (inner && max_r >= 512 && outputs <= 32768));
    // Many outputs with long reduces of products (a convolution's weight gradient: 37k
    // outputs of 200k terms) read their factors one element per 32-byte sector a block apiece:
    // there register tiles, neighbouring threads on neighbouring outputs, with slices of the
    // reduce on separate threads (split_threads, below). (H100, resnet18's 3x3 64->64 weight
    // gradient at batch 64: 76 ms a block per output, 3.4 ms so.)
    // Where such a tile's factors can share shared memory, blocks of tiles with a split reduce
    // (below) do better still: a weight gradient's factors are read once per block, not per
    // tile, so shared tiles are tried from 16 tiles of outputs on (MNIST's first convolution:
    // 25 x 32 outputs of 295k products).
    bool long_tiles = false;
    if (p_.block_reduce && opt_.block_reduce < 0 && outputs >= 16 * kTileSide * kTileSide && opt_.register_tile &&
        opt_.multiprocessors > 0) {
      plan_register_tile();
      if (outputs <= 4096 && !p_.shared) {  // few outputs: a block reduce each, unless shared tiles
        p_ = CudaPlan{};
        p_.block_reduce = true;
      }
      long_tiles = p_.tiled() || p_.shared;
      if (long_tiles) p_.block_reduce = false;
    }
    if (!k_.serial && !p_.block_reduce && opt_.register_tile && !long_tiles) plan_register_tile();
    if (p_.tiled() && p_.tile_d2 >= 0 && opt_.shared_tiles && !p_.shared) plan_shared_tile();
    if (!k_.serial && !p_.block_reduce && !p_.tiled() && max_r == 0 && opt_.vector_lanes) plan_lanes();
    p_.launch_outputs = outputs;
    if (p_.shared) {  // the launch range counts blocks of tiles
      p_.launch_outputs = 1;
      for (int64_t g : p_.shared_grid(k_.shape)) p_.launch_outputs *= g;
    } else if (p_.tiled()) {
      p_.launch_outputs /= p_.tile_rows * p_.tile_cols;  // or tiles
    }
    p_.launch_outputs /= p_.lanes;  // or groups of lanes
    int p2 = 32;
    while (p2 < std::max(32, opt_.block_size) && p2 < 1024) p2 *= 2;
    int bs = p2;
    if (k_.serial) {
      bs = 1;
    } else if (p_.shared) {
      bs = int(p_.shared_threads());
    } else if (p_.block_reduce) {
      while (bs > 32 && bs / 2 >= max_r) bs /= 2;  // no idle halves for short reductions
    } else {
      while (bs > 32 && bs / 2 >= p_.launch_outputs) bs /= 2;
    }
    p_.block_size = bs;
    // An 8 x 8 scalar tile's 64 accumulators and staged factors took ~200 registers, one block
    // of 256 threads per multiprocessor; at most 128 lets two blocks share one (a few values
    // spill to local memory): H200, 4096^3 float32 matmul 4.72 -> 4.29 ms.
    if (p_.shared && p_.mma == CudaMma::None && p_.tile_rows == 8 && opt_.occupancy)
      p_.min_blocks_per_sm = std::max(1, 65536 / (128 * bs));  // a multiprocessor's 64k registers
    // Split per-block reductions when their outputs leave multiprocessors idle: aim at 8
    // blocks per multiprocessor (the loads in flight of 2048 threads: H200, x.sum() of 2^24
    // floats 33.6 us with 4, 29.0 with 8), each with at least 16 elements per thread to
    // reduce. Several reduces meet once, after all of them (a batch norm's backward: 64
    // outputs, two sums); one nested in another would need a meeting point inside it.
    if (p_.block_reduce && opt_.multiprocessors > 0 && flat_reduces(k_, vars_) > 0) {
      int64_t wanted = 8 * int64_t(opt_.multiprocessors) / std::max<int64_t>(p_.launch_outputs, 1);
      int64_t useful = max_r / (int64_t(bs) * 16);
      p_.split = int(std::max<int64_t>(1, std::min<int64_t>({wanted, useful, 1024})));
    }
    // A shared tile with few blocks per multiprocessor (a weight gradient: few outputs, long
    // reduces) splits its reduce into slices of whole chunks, a block per block of tiles and
    // slice, each slice at least kBlockSliceMin steps, so that the busiest multiprocessor's
    // steps are fewest: blocks spread unevenly otherwise (144 blocks on 132 multiprocessors put
    // two on 12 of them, which then take twice as long; 9 tiles in 30 slices, three on 6). Of
    // the slice counts within 3% of the best, the fewest (fewer partials to combine).
    if (p_.shared && opt_.multiprocessors > 0 && p_.launch_outputs < kFewBlocksPerSM * opt_.multiprocessors &&
        one_flat_reduce(k_, vars_)) {
      const int64_t chunk = p_.mma != CudaMma::None ? kMmaK : kSharedK, sms = opt_.multiprocessors;
      const int64_t blocks = std::max<int64_t>(p_.launch_outputs, 1), chunks = (p_.shared_k + chunk - 1) / chunk;
      const int64_t most = std::min<int64_t>({p_.shared_k / std::max(kBlockSliceMin, chunk), kMaxThreadSlices, chunks});
      auto steps_per_slice = [&](int64_t slices) { return (chunks + slices - 1) / slices * chunk; };
      auto busiest = [&](int64_t slices) {  // the steps of the multiprocessor with the most blocks
        int64_t steps = steps_per_slice(slices), actual = (p_.shared_k + steps - 1) / steps;
        return (blocks * actual + sms - 1) / sms * steps;
      };
      int64_t best = busiest(1);
      for (int64_t n = 2; n <= most; n++) best = std::min(best, busiest(n));
      int64_t slices = 1;
      while (slices < most && busiest(slices) * 100 > best * 103) slices++;
      // (TINY_CUDA_OFF=balance: below one block per multiprocessor, aim at two each)
      if (!opt_.balanced_splits) slices = blocks < sms ? std::min(most, (2 * sms + blocks - 1) / blocks) : 1;
      if (slices >= 2) {
        p_.split_steps = steps_per_slice(slices);
        p_.split = int((p_.shared_k + p_.split_steps - 1) / p_.split_steps);  // none empty
      }
    }
    // Likewise a register tile's reduce when its threads are too few to fill the GPU: slices of
    // the reduce's outermost axis on separate threads, aiming at kThreadsPerSM threads per
    // multiprocessor, each slice at least kThreadSliceMin steps long.
    if (p_.tiled() && !p_.shared && opt_.multiprocessors > 0 && one_flat_reduce(k_, vars_)) {
      int64_t wanted = kThreadsPerSM * int64_t(opt_.multiprocessors) / std::max<int64_t>(p_.launch_outputs, 1);
      int64_t useful = max_r / kThreadSliceMin;
      int64_t slices = std::min<int64_t>({wanted, useful, outer_r, kMaxThreadSlices});
      if (slices >= 2) {
        p_.split = int(slices);
        p_.split_threads = true;
        for (p_.block_size = p2; p_.block_size > 32 && p_.block_size / 2 >= p_.launch_outputs * slices;) p_.block_size /= 2;
      }
    }
    return p_;
  }

 private:
  static constexpr int64_t kThreadsPerSM = 1024, kThreadSliceMin = 1024, kMaxThreadSlices = 64, kBlockSliceMin = 256;
  static constexpr int64_t kFewBlocksPerSM = 4;  // below this many blocks per multiprocessor, shared tiles may split

  // The largest flattened extent of a reduce not nested inside another reduce.
  // `inner`: whether that reduce covers its source's last non-unit dim (the
  // contiguous one for the usual row-major sources); `outer`: the extent of its
  // first non-unit axis (what split_threads slices).
  int64_t top_level_reduce_size(bool* inner, int64_t* outer) const {
    int64_t best = 0;
    *inner = false;
    *outer = 1;
    std::unordered_set<const Node*> seen;
    std::function<void(const Node*)> rec = [&](const Node* n) {
      if (!seen.insert(n).second || k_.loads.count(n)) return;
      if (n->op == Op::Reduce) {
        const Shape& ss = n->src[0]->shape;
        int64_t r = 1;
        for (int a : n->args.axes) r *= ss[size_t(a)];
        r = std::max<int64_t>(r, 1);
        if (r > best) {
          best = r;
          int last = int(ss.size()) - 1;
          while (last > 0 && ss[size_t(last)] == 1) last--;
          *inner = std::find(n->args.axes.begin(), n->args.axes.end(), last) != n->args.axes.end();
          *outer = 1;
          for (int a : n->args.axes)
            if (ss[size_t(a)] > 1) {
              *outer = ss[size_t(a)];
              break;
            }
        }
        return;  // reduces inside run sequentially per thread
      }
      for (auto& s : n->src) rec(s.get());
    };
    for (auto& o : k_.outputs) rec(o.value.get());
    return best;
  }

  // ---- register tiles (see register_tile.h)
  // One thread computes tile_rows x tile_cols outputs: dim tile_d (the last
  // non-unit one) by tile_cols and a dim before it, when a load moving along
  // the columns stays put along it (tile_row_dim), by tile_rows, with one
  // accumulator each in registers. A matmul's thread then loads rows + cols
  // values per step instead of two per product, a convolution's loads the input
  // once for 4 output channels and the weight once for 4 positions. Tiles divide
  // their dims: no partial tiles, no masks.
  static constexpr int64_t kTileSide = 4;

  void plan_register_tile(bool shared = true) {
    const Shape& shape = k_.shape;
    int d = int(shape.size()) - 1;
    while (d >= 0 && shape[size_t(d)] == 1) d--;
    if (d < 0 || k_.outputs.empty()) return;
    for (auto& o : k_.outputs)
      if (o.scatter_index) return;
    int first = vars_.next;
    std::vector<Expr> idx = vars_.index(shape);
    auto fresh = vars_.fresh();
    auto cand = find_tiled_reduce(k_, idx, first, fresh);  // moving with some output dim
    if (!cand || !worth_tiling(k_, *cand, first + d, TileKind::Scalars, fresh) || !one_flat_reduce(k_, vars_)) return;
    auto side = [](int64_t extent) {  // the largest tile side up to kTileSide dividing the extent
      int64_t t = kTileSide;
      while (t > 1 && extent % t) t /= 2;
      return t;
    };
    int d2 = tile_row_dim(k_, *cand, idx, d, fresh);
    int64_t cols = side(shape[size_t(d)]), rows = d2 >= 0 ? side(shape[size_t(d2)]) : 1;
    if (d2 >= 0 && opt_.shared_tiles && shared && (cols < kTileSide || rows < kTileSide) &&
        std::min(shape[size_t(d)], shape[size_t(d2)]) >= kTileSide) {
      // Shared tiles guard their stores one by one at ragged edges, so theirs need not divide
      // the dims (a 7x7 stem's weight gradient: 3 x 7 x 7 = 147 rows); tensor cores guard every
      // output anyway.
      CudaPlan before = p_;
      p_.tile_d = d;
      p_.tile_d2 = d2;
      p_.tile_rows = p_.tile_cols = kTileSide;
      plan_shared_tile();
      if (p_.shared) return;
      p_ = before;
    }
    if (cols < 2 || rows * cols < 4) {
      // no register tile divides the dims; tensor cores guard every output and need none
      if (d2 < 0 || !opt_.shared_tiles || !shared) return;
      p_.tile_d = d;
      p_.tile_d2 = d2;
      plan_shared_tile(/*tensor_cores_only=*/true);
      if (!p_.shared) p_.tile_d = p_.tile_d2 = -1;
      return;
    }
    p_.tile_d = d;
    p_.tile_d2 = rows > 1 ? d2 : -1;
    p_.tile_rows = rows;
    p_.tile_cols = cols;
  }

  // ---- shared-memory tiles
  // A register-tiled product sum(f(row, k) * g(col, k)) where one factor does
  // not move along the tile's columns and the other not along its rows (a
  // matmul's a and b, a convolution's weight and input): a block of
  // shared_ty x shared_tx threads owns that many tiles, and per chunk of
  // kSharedK reduce steps its threads stage both factors for the whole block
  // in shared memory (each value computed and loaded once per block instead of
  // once per thread), meet at a barrier, and run the chunk from there. Each
  // output still adds its products in reduce order, so the results equal the
  // untiled kernel's; steps past the reduce's end stage zeros (adding +0
  // changes no sum).
  void plan_shared_tile(bool tensor_cores_only = false) {
    const Shape& shape = k_.shape;
    std::vector<Expr> idx = vars_.index(shape);
    auto fresh = vars_.fresh();
    auto tp = tiled_product(k_, idx, fresh);
    if (!tp) return;
    const Node *r = tp->reduce, *prod = tp->prod;
    const std::vector<Expr>& sub = tp->sub;
    const int64_t K = tp->steps;
    if (K < kSharedK) return;  // too short to pay for the staging and barriers
    int rid = int(idx[size_t(p_.tile_d2)]->value), cid = int(idx[size_t(p_.tile_d)]->value);
    SharedFactor found[2];
    bool moves_row[2], moves_col[2];
    for (int f = 0; f < 2; f++) {
      FactorMotion m = factor_motion(k_, prod->src[size_t(f)].get(), sub, {rid, cid}, fresh);
      if (!m.plain) return;
      moves_row[f] = m.moves[0];
      moves_col[f] = m.moves[1];
      found[f].node = prod->src[size_t(f)].get();
      // staged with the factor's own output dim fastest where it is unit-stride there, else along k
      found[f].along_k = !(moves_row[f] ? m.unit[0] : m.unit[1]);
    }
    int row_f = !moves_col[0] ? 0 : !moves_col[1] ? 1 : -1;
    if (row_f < 0 || moves_row[1 - row_f]) return;  // no split into a row factor and a column factor
    p_.shared_k = K;
    p_.row_factor = found[row_f];
    p_.col_factor = found[1 - row_f];
    if (plan_mma(r, prod)) {
      p_.shared = true;
      return;
    }
    if (tensor_cores_only) return;
    // Threads: as many as tiles up to 16 x 16, at least 64. Tiles of 8 x 8
    // (64 products per 16 reads of shared memory, against 16 per 8) where both
    // dims divide by 8 and the blocks still fill the GPU's multiprocessors
    // twice over; else the register tile's 4 x 4.
    const int64_t M = shape[size_t(p_.tile_d2)], N = shape[size_t(p_.tile_d)];
    auto threads_for = [&](int64_t rows, int64_t cols, int64_t* tx, int64_t* ty) {
      auto pow2_up_to = [](int64_t n, int64_t cap) {
        int64_t p = 1;
        while (p < n && p < cap) p *= 2;
        return p;
      };
      *tx = pow2_up_to(N / cols, 16);
      *ty = pow2_up_to(M / rows, 256 / *tx);
      return *tx * *ty >= 64;
    };
    int64_t tx, ty, tx8, ty8;
    if (!threads_for(p_.tile_rows, p_.tile_cols, &tx, &ty)) return;
    if (M % 8 == 0 && N % 8 == 0 && opt_.multiprocessors > 0 && threads_for(8, 8, &tx8, &ty8)) {
      int64_t blocks = numel(shape) / (M * N) * ((M + ty8 * 8 - 1) / (ty8 * 8)) * ((N + tx8 * 8 - 1) / (tx8 * 8));
      if (blocks >= 2 * int64_t(opt_.multiprocessors)) {
        p_.tile_rows = p_.tile_cols = 8;
        tx = tx8;
        ty = ty8;
      }
    }
    p_.shared = true;
    p_.shared_tx = tx;
    p_.shared_ty = ty;
  }

  // ---- tensor cores
  // A shared tile whose float32 sum adds products of two float16 (or two bfloat16) values, or
  // of float32 factors the user let round to TF32 (NodeArgs::tf32), on a GPU with mma.sync
  // (compute capability 8.0 or newer): a block of 2 x 2 warps owns 64 x 64 outputs, each warp
  // 32 x 32 of them, or where 128 x 128 blocks still number twice the multiprocessors, 2 x 4
  // warps of 64 x 32 each; a warp's part is m16 x n8 pieces of mma.sync (see the renderer).
  static DType exact_16bit_of(const Node* n, const Kernel& k) {
    while (n->op == Op::View && !k.loads.count(n)) n = n->src[0].get();  // masked parts are zeros
    if (k.loads.count(n) || n->op != Op::Cast) return DType::Float32;
    DType from = n->src[0]->dtype;
    return from == DType::Float16 || from == DType::BFloat16 ? from : DType::Float32;
  }
  bool plan_mma(const Node* r, const Node* prod) {
    const Shape& shape = k_.shape;
    const int64_t M = shape[size_t(p_.tile_d2)], N = shape[size_t(p_.tile_d)];
    // at least one m16 x n8 piece of outputs
    if (!opt_.tensor_cores || opt_.arch < 80 || r->src[0].get() != prod || prod->dtype != DType::Float32 || M < 16 ||
        N < 8)
      return false;
    DType a = exact_16bit_of(p_.row_factor.node, k_), b = exact_16bit_of(p_.col_factor.node, k_);
    if (a == b && a != DType::Float32) p_.mma = a == DType::Float16 ? CudaMma::F16 : CudaMma::BF16;
    else if (r->args.tf32) p_.mma = CudaMma::TF32;
    else return false;
    int64_t big_blocks = numel(shape) / (M * N) * ((M + 127) / 128) * ((N + 127) / 128);
    bool big = opt_.multiprocessors > 0 && big_blocks >= 2 * int64_t(opt_.multiprocessors);
    p_.mma_warps_m = 2;
    p_.mma_warps_n = big ? 4 : 2;
    p_.mma_m = big ? 4 : 2;
    p_.mma_n = 4;
    return true;
  }

  // ---- vector lanes (see cuda_renderer.h)
  // Lanes when the last non-unit dim divides into them and every output is
  // stored as a run along them (stores decide: loads that do not run along the
  // lanes stay scalar, or are shared by the lanes when they do not move).
  void plan_lanes() {
    const Shape& shape = k_.shape;
    int d = int(shape.size()) - 1;
    while (d >= 0 && shape[size_t(d)] == 1) d--;
    if (d < 0 || k_.outputs.empty() || shape[size_t(d)] % kCudaLanes) return;
    std::vector<Expr> idx = vars_.index(shape);
    idx[size_t(d)] = vars_.make(shape[size_t(d)] / kCudaLanes);
    Expr lane = vars_.make(kCudaLanes);
    idx[size_t(d)] = add(mul(idx[size_t(d)], kCudaLanes), lane);
    for (auto& o : k_.outputs) {
      if (o.scatter_index) return;
      auto iv = o.store.index_valid(idx);
      if (!is_true(iv.second) || !lane_run(iv.first, int(lane->value), kCudaLanes)) return;
    }
    p_.lanes = kCudaLanes;
    p_.lanes_d = d;
  }

  const Kernel& k_;
  const CudaRenderOptions& opt_;
  Vars vars_;
  CudaPlan p_;
};

}  // namespace

Shape CudaPlan::shared_grid(const Shape& shape) const {
  Shape g = shape;
  int64_t bm = block_rows(), bn = block_cols();
  g[size_t(tile_d2)] = (g[size_t(tile_d2)] + bm - 1) / bm;
  g[size_t(tile_d)] = (g[size_t(tile_d)] + bn - 1) / bn;
  return g;
}

std::string CudaPlan::mma_name() const { return mma == CudaMma::F16 ? "f16" : mma == CudaMma::BF16 ? "bf16" : "tf32"; }

std::shared_ptr<const Kernel> matrix_view(const Kernel& k) {
  if (k.serial || k.outputs.empty()) return nullptr;
  for (auto& o : k.outputs)
    if (o.scatter_index) return nullptr;
  Vars vars;
  std::vector<Expr> idx = vars.index(k.shape);
  auto fresh = vars.fresh();
  auto tp = tiled_product(k, idx, fresh);
  if (!tp) return nullptr;
  std::vector<int> ids;
  for (auto& e : idx) ids.push_back(int(e->value));
  FactorMotion m[2];
  for (int f = 0; f < 2; f++) {
    m[f] = factor_motion(k, tp->prod->src[size_t(f)].get(), tp->sub, ids, fresh);
    if (!m[f].plain) return nullptr;
  }
  int last = int(k.shape.size()) - 1;
  while (last >= 0 && k.shape[size_t(last)] == 1) last--;
  if (last < 0 || m[0].moves[size_t(last)] == m[1].moves[size_t(last)]) return nullptr;
  const int col = m[0].moves[size_t(last)] ? 0 : 1;  // the factor that moves along the last dim
  std::vector<int> order, batch, rows, cols;          // unit dims first (they are free)
  for (int d = 0; d < int(k.shape.size()); d++) {
    bool c = m[col].moves[size_t(d)], r = m[1 - col].moves[size_t(d)];
    (k.shape[size_t(d)] == 1 ? order : c && !r ? cols : r && !c ? rows : batch).push_back(d);
  }
  // already a matrix product's layout: batch dims, then one row dim, then the column dim
  bool in_order = !rows.empty() && (batch.empty() || batch.back() < rows[0]);
  if (rows.empty() || (rows.size() == 1 && cols.size() == 1 && in_order)) return nullptr;
  Shape shape;
  for (int d : batch) shape.push_back(k.shape[size_t(d)]);
  int64_t m_rows = 1, n_cols = 1;
  for (int d : rows) m_rows *= k.shape[size_t(d)];
  for (int d : cols) n_cols *= k.shape[size_t(d)];
  shape.push_back(m_rows);
  shape.push_back(n_cols);
  for (auto* group : {&batch, &rows, &cols}) order.insert(order.end(), group->begin(), group->end());
  auto view = std::make_shared<Kernel>(k);
  view->shape = shape;
  for (auto& o : view->outputs) {
    o.value = Tensor(o.value).permute(order).reshape(shape).node();
    o.store = o.store.permute(order).reshape(shape);
  }
  return view;
}

CudaPlan lower_cuda(const Kernel& k, const CudaRenderOptions& opt) {
  if (std::shared_ptr<const Kernel> view = opt.register_tile ? matrix_view(k) : nullptr) {
    CudaPlan p = CudaLowering(*view, opt).lower();
    p.view = std::move(view);
    if (p.tiled() || p.shared) return p;  // else its divided indices buy nothing
  }
  return CudaLowering(k, opt).lower();
}

std::vector<Expr> flat_tail_index(std::vector<Expr> idx, const FlatTail& t) {
  for (int d = t.from; d < t.last; d++) idx[size_t(d)] = cnst(0);
  idx[size_t(t.last)] = var(t.var, t.count);
  return idx;
}

CpuPlan lower_cpu(const Kernel& k, const CpuTarget& target) { return CpuLowering(k, target).lower(); }

bool elementwise_epilogue(const Kernel& k, const Node* reduce) {
  bool plain = true;
  std::unordered_set<const Node*> seen;
  std::function<void(const Node*)> walk = [&](const Node* n) {
    if (!plain || n == reduce || k.loads.count(n) || !seen.insert(n).second) return;
    if (n->op == Op::Reduce || n->op == Op::Gather) plain = false;
    for (auto& s : n->src) walk(s.get());
  };
  for (auto& o : k.outputs) {
    if (o.scatter_index) return false;
    walk(o.value.get());
  }
  return plain;
}

std::string describe(const CpuPlan& p) {
  auto dims = [](const std::vector<int>& ds) {
    std::string s;
    for (int d : ds) s += (s.empty() ? "" : ",") + std::to_string(d);
    return "(" + s + ")";
  };
  if (p.split) return "reduce split in " + std::to_string(p.split->chunks) + " chunks of axis " + std::to_string(p.split->axis);
  std::string s = p.parallel_dim < 0 ? "one thread" : "threads over dim " + std::to_string(p.parallel_dim);
  if (p.parallel_grain > 1) s += " (grain " + std::to_string(p.parallel_grain) + ")";
  if (const auto& c = p.channel) {
    s += "; channel tile " + std::to_string(c->cols) + " x " + std::to_string(c->rows) + ": channels dim " +
         std::to_string(c->j) + ", rows dims " + dims(c->row_dims()) + ", b " +
         (c->computed ? "computed into panels" : c->unit ? "read in place" : "packed") +
         (c->rows_outside ? ", rows outside" : "") + (c->epilogue_per_row_tile ? ", epilogue per row tile" : "");
    if (c->padding_taps) s += ", padding taps skipped";
    if (p.blocks) s += "; reduce in blocks of " + std::to_string(p.blocks->step) + " along axis " + std::to_string(p.blocks->axis);
  } else if (const auto& v = p.vector_tile) {
    s += "; vector tile " + std::to_string(v->rows) + " x " + std::to_string(v->cols) + " of dims (" +
         std::to_string(v->d2) + "," + std::to_string(v->d) + ")";
  } else if (p.flat_tail) {
    s += "; dims " + std::to_string(p.flat_tail->from) + ".." + std::to_string(p.flat_tail->last) + " as one loop";
  } else if (p.transpose) {
    s += "; transposed blocks along dim " + std::to_string(p.transpose->dim);
    if (!p.transpose->mid.empty()) s += " around dims " + dims(p.transpose->mid);
  } else if (p.inner_loop) {
    s += "; dim " + std::to_string(p.inner_loop->dim) + " innermost";
  } else {
    s += "; plain loops";
  }
  return s;
}

int64_t ChannelTile::row_count(const Shape& shape) const {
  int64_t w = shape[size_t(i)];
  for (int d : row_outer) w *= shape[size_t(d)];
  return w;
}

std::vector<int> ChannelTile::row_dims() const {
  std::vector<int> dims;
  for (int d : row_outer)
    if (d != row_fastest) dims.push_back(d);
  dims.push_back(i);
  if (row_fastest >= 0) dims.push_back(row_fastest);
  return dims;
}

Expr ChannelTile::kflat(const std::vector<Expr>& kv) const {
  Expr f = cnst(0);
  for (size_t q = 0; q < kv.size(); q++) f = add(f, mul(kv[q], kstrides[q]));
  return f;
}

}  // namespace tiny
