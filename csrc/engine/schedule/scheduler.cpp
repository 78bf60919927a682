#include "engine/schedule/scheduler.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "engine/codegen/index_walk.h"
#include "engine/codegen/register_tile.h"
#include "engine/tensor/subgraph.h"
#include "engine/tensor/tensor.h"
#include "engine/runtime/device.h"

namespace tiny {
namespace {

bool is_transcendental(Op op) {
  switch (op) {
    case Op::Exp: case Op::Log: case Op::Sin: case Op::Cos: case Op::Tan: case Op::Erf: case Op::Tanh:
    case Op::Asin: case Op::Acos: case Op::Atan: case Op::Sinh: case Op::Cosh: case Op::Asinh: case Op::Acosh:
    case Op::Atanh: case Op::Expm1: case Op::Log1p: case Op::Erfinv: case Op::Pow: case Op::Atan2: case Op::Hypot:
    case Op::Erfc: case Op::Exp2: case Op::Log2: case Op::Log10: case Op::Lgamma: case Op::Sigmoid:
    case Op::Rand:
      return true;
    default:
      return false;
  }
}

bool is_size_changing_bitcast(const Node* n) {
  return n->op == Op::Bitcast && itemsize(n->dtype) != itemsize(n->src[0]->dtype);
}

}  // namespace

namespace {

// The computed value a CONTIGUOUS copies (through reshapes, which keep the
// row-major order), or null when it copies stored data or moves elements.
const Node* copied_value(const Node* n) {
  const Node* s = n->src[0].get();
  while (s->op == Op::View && !s->realized() && s->args.st.is_contiguous()) s = s->src[0].get();
  if (s->realized() || s->op == Op::View || s->op == Op::Buffer || s->op == Op::Const || s->op == Op::Param)
    return nullptr;
  return s->numel() == n->numel() && s->dtype == n->dtype ? s : nullptr;
}

// How view `w` reads a row-major array of shape `base` where it only permutes base's dims,
// each of its own dims merging consecutive ones (no mask, offset or broadcast): for each
// non-unit dim of base, the dim of w it lies in and its weight there. None otherwise.
std::optional<std::vector<std::pair<size_t, int64_t>>> placement(const View& w, const Shape& base) {
  if (w.mask || w.offset != 0) return std::nullopt;
  const Shape base_strides = contiguous_strides(base);
  std::vector<std::pair<size_t, int64_t>> at(base.size(), {SIZE_MAX, 0});
  for (size_t e = 0; e < w.shape.size(); e++) {
    // w's dim e reads base's dims, innermost first, from the one of stride w.strides[e]
    int64_t left = w.shape[e], stride = w.strides[e], weight = 1;
    while (left > 1) {
      size_t d = 0;
      while (d < base.size() && (at[d].first != SIZE_MAX || base[d] == 1 || base_strides[d] != stride)) d++;
      if (d == base.size() || left % base[d] != 0) return std::nullopt;
      at[d] = {e, weight};
      left /= base[d];
      stride *= base[d];
      weight *= base[d];
    }
  }
  for (size_t d = 0; d < base.size(); d++)
    if (base[d] != 1 && at[d].first == SIZE_MAX) return std::nullopt;
  return at;
}

// The store that puts a reduce's values (iteration shape v->shape) where t, a
// permutation of v, reads them row-major: the reduce's buffer then is t's storage.
// t's views may merge consecutive dims (a strided transposed convolution's output phases,
// (Q, 2) -> 2Q, then permuted channels-last). None unless every view only permutes so.
std::optional<ShapeTracker> permutation_store(const Node* t, const Node* v) {
  Views views = t->args.st.views();
  // a contiguous top view only reshapes the one below: the same row-major order
  while (views.size() > 1 && views.back().is_contiguous() && numel(views.back().shape) == numel(views[views.size() - 2].shape))
    views.pop_back();
  // each non-unit dim of v: the dim of the current view it lies in, and its weight there
  std::vector<std::pair<size_t, int64_t>> at(v->shape.size());
  for (size_t d = 0; d < at.size(); d++) at[d] = {d, 1};
  const Shape* base = &v->shape;
  for (const View& w : views) {
    auto step = placement(w, *base);
    if (!step) return std::nullopt;
    for (size_t d = 0; d < at.size(); d++)
      if (v->shape[d] != 1) at[d] = {(*step)[at[d].first].first, at[d].second * (*step)[at[d].first].second};
    base = &w.shape;
  }
  const Shape t_strides = contiguous_strides(*base);
  Shape store(v->shape.size(), 0);
  for (size_t d = 0; d < at.size(); d++)
    if (v->shape[d] != 1) store[d] = t_strides[at[d].first] * at[d].second;
  return ShapeTracker({View::make(v->shape, store, 0, std::nullopt)});
}

// The most levels of operations a kernel's expression may have, from its stored values down
// to what it loads: deeper, a value on the way is stored. The code generators and the
// scheduler's rewrites walk an expression recursively, a few stack frames per level, and a
// loop that never reads its values (`x = x + 1` 6000 times, before printing x) overflowed an
// 8 MiB stack; threads may have 2 MiB. Models' kernels stay far below (their longest chains
// are stored by kLargeExpression's rule first).
constexpr int kMaxFusedDepth = 512;

struct Planner {
  std::unordered_map<const Node*, NodeRef> refs;  // keep nodes alive and find their refs
  std::unordered_map<const Node*, std::string> roots;  // realize point -> reason
  std::unordered_map<const Node*, BufferRef> buffers;
  // A CONTIGUOUS of a computed value stores that value and shares its buffer,
  // so other readers of the value (a saved activation read by a backward op)
  // load it instead of computing it again.
  std::unordered_map<const Node*, const Node*> copy_of;
  // A reduce read only through views that put it in one permuted order (a weight
  // gradient: the requested one, its flat storage, the optimizer's read): its kernel
  // stores it in that order (permuted_store) and each such view is its buffer.
  std::unordered_map<const Node*, const Node*> permutation_of;  // view -> reduce
  std::unordered_map<const Node*, ShapeTracker> permuted_store;  // reduce -> its store
  std::unordered_map<const Node*, std::vector<const Node*>> permuted_readers;  // reduce -> views

  // Realize points every schedule must have, whatever fusion decides.
  void forced_roots(const std::vector<NodeRef>& targets, const std::vector<const Node*>& order) {
    std::unordered_map<const Node*, std::vector<const Node*>> readers;  // a target reads itself
    for (const Node* n : order)
      for (auto& s : n->src) readers[s.get()].push_back(n);
    for (auto& t : targets) readers[t.get()].push_back(nullptr);
    for (auto& t : targets) {
      roots[t.get()] = "requested";
      // A requested reshape of a computed value: the value itself is stored
      // (the reshape aliases it), so other kernels can read it too.
      const Node* n = t.get();
      while (n->op == Op::View && n->args.st.is_contiguous() && !n->src[0]->realized() &&
             n->src[0]->op != Op::Buffer) {
        n = n->src[0].get();
        if (!roots.count(n)) roots[n] = "requested (as a reshape)";
      }
      // A requested permutation of a sizable reduce (a weight gradient
      // computed channels-last): the reduce is computed in its own order, where
      // the code generator can tile it, and stored in the requested order (or,
      // where that is no plain permutation, stored and copied).
      const Node* v = t.get();
      while (v->op == Op::View && !v->src[0]->realized()) v = v->src[0].get();
      if (v != t.get() && v->op == Op::Reduce && !roots.count(v) && v->numel() == t->numel() &&
          v->src[0]->numel() >= 16 * v->numel()) {
        roots[v] = "requested (through a permutation)";
        auto store = t->src[0].get() == v ? permutation_store(t.get(), v) : std::nullopt;
        store_permuted(v, store, readers[v]);
      }
    }
    for (const Node* n : order) {
      if (roots.count(n)) continue;
      std::string asked = *n->origin ? std::string(", asked by ") + n->origin : "";
      if (n->op == Op::Contiguous)
        roots[n] = "contiguous copy of " + std::to_string(n->numel()) + " elements" + asked;
      else if (n->op == Op::Write)
        roots[n] = "partial write of " + std::to_string(n->src[1]->numel()) + " of a storage's " +
                   std::to_string(n->numel()) + " elements" + asked;
      else if (n->op == Op::Scatter)
        roots[n] = "scatter of " + std::to_string(n->src[2]->numel()) + " values into " + std::to_string(n->numel()) +
                   " elements" + asked;
      else if (is_size_changing_bitcast(n)) roots[n] = "bitcast to another itemsize";
    }
    for (const Node* n : order)
      if (is_size_changing_bitcast(n) && !roots.count(n->src[0].get()))
        roots[n->src[0].get()] = "source of a bitcast to another itemsize";
    for (const Node* n : order)
      if (n->op == Op::Contiguous && roots.count(n))
        if (const Node* v = copied_value(n)) {
          copy_of[n] = v;
          if (!roots.count(v)) roots[v] = roots[n];
        }
    // A contiguous copy of a permuted sizable reduce (a convolution's input gradient copied
    // channels-last for the weight gradient before it): iterated in the copy's order the
    // reduce was read through the permutation and not tiled (190 ms for a 3x3 128->64 one
    // of 16x64x16x16, 2 ms tiled). As for a requested permutation, the reduce is computed in
    // its own order and stored in the copy's; the copy is its buffer.
    for (const Node* n : order) {
      if (n->op != Op::Contiguous || !roots.count(n) || copy_of.count(n)) continue;
      const Node* t = n->src[0].get();
      if (t->op != Op::View || t->realized()) continue;
      const Node* v = t->src[0].get();
      if (v->op != Op::Reduce || v->realized() || roots.count(v) || v->numel() != n->numel() ||
          v->src[0]->numel() < 16 * v->numel())
        continue;
      if (store_permuted(v, permutation_store(t, v), readers[v])) {
        roots[v] = roots[n] + " (through a permutation)";
        permutation_of[n] = v;
      }
    }
    permuted_reduces(order, readers);
  }

  // Stores a chain deeper than `limit` levels (order: producers first) at the first node past
  // it that is computed elementwise and is no reduce's operand: stored, a matmul's broadcast
  // product (an LSTM step's h @ W_hh as (2, 32, 8)) would be materialized and its reduce
  // untiled (a 50-step LSTM's backward went from seconds to over 10 minutes). A chain without
  // such nodes (x = x[idx], gathers only) is stored where it passes the limit by an eighth.
  void bound_depth(const std::vector<const Node*>& order, int limit) {
    std::unordered_set<const Node*> reduced;  // operands of reduces
    for (const Node* n : order)
      if (n->op == Op::Reduce) reduced.insert(n->src[0].get());
    std::unordered_map<const Node*, int> depth;  // levels below a node, down to loads (0: loaded)
    depth.reserve(order.size());
    for (const Node* n : order) {
      int d = 1;
      for (auto& s : n->src)
        if (auto it = depth.find(s.get()); it != depth.end()) d = std::max(d, it->second + 1);
      const bool cut_here = (is_elementwise(n->op) || n->op == Op::Reduce) && !reduced.count(n);
      if (!roots.count(n) && d >= limit && (cut_here || d >= limit + limit / 8))
        roots[n] = "expression " + std::to_string(d) + " operations deep (kernels stay within " +
                   std::to_string(limit) + ")";
      depth[n] = roots.count(n) ? 0 : d;
    }
  }

  // A sizable reduce that every reader reads through one permutation of its dims (a strided
  // transposed convolution computed per output phase, (phases, N, C, Q...), where the code
  // generator tiles it as a convolution, and read as (N, C, Q1, phase1, ...)): computed in its
  // own order and stored in theirs. Fused into a reader it would be evaluated in the reader's
  // order, untiled (a 3x3 stride-2 input gradient of 16x64x16x16: 300 ms, not 1).
  void permuted_reduces(const std::vector<const Node*>& order,
                        std::unordered_map<const Node*, std::vector<const Node*>>& readers) {
    for (const Node* v : order) {
      if (v->op != Op::Reduce || roots.count(v) || v->src[0]->numel() < 16 * v->numel()) continue;
      const auto& rs = readers[v];
      if (rs.empty() || !rs[0] || rs[0]->op != Op::View) continue;
      auto store = permutation_store(rs[0], v);
      if (!store || store->views()[0].strides == contiguous_strides(v->shape)) continue;  // a reshape: its own order
      if (store_permuted(v, store, rs)) roots[v] = "read through a permutation of its dims";
    }
  }

  // Stores reduce `v` permuted by `store` when every reader reads it through views with that
  // permutation (each reader then is its buffer); false, and nothing noted, otherwise.
  bool store_permuted(const Node* v, std::optional<ShapeTracker> store, const std::vector<const Node*>& readers) {
    for (const Node* r : readers)
      if (store && !(r && r->op == Op::View && permutation_store(r, v) == store)) store.reset();
    if (!store || permuted_store.count(v)) return false;
    permuted_store[v] = *store;
    permuted_readers[v] = readers;
    for (const Node* r : readers) permutation_of[r] = v;
    return true;
  }
};

// What the kernel of root `n` computes: a reshape of a computed value is
// stored in the same row-major order, so its kernel iterates in the shape the
// value was computed in, keeping that layout's loops (and the reduces hoisted
// out of them).
const Node* kernel_value(const Planner& p, const Node* n) {
  while (n->op == Op::View && n->args.st.is_contiguous() && !n->src[0]->realized() && !p.roots.count(n->src[0].get()))
    n = n->src[0].get();
  return n;
}

// The dims other than 1 (reshapes between shapes with equal ones are free).
Shape non_unit(const Shape& s) {
  Shape r;
  for (auto d : s)
    if (d != 1) r.push_back(d);
  return r;
}

// A value read row-major through a final flattening of a multi-view tracker (a permuted
// copy requested as flat storage: x.permute(0, 2, 3, 1).contiguous(), attention's
// transpose(1, 2).contiguous()) iterates in the shape before the flattening: the same
// row-major order, each index affine per loop instead of divisions and remainders of one
// flat index (a 16x64x16x16 channels-last copy ran 5-10x slower flat).
NodeRef unflattened(const NodeRef& v) {
  if (v->op != Op::View || v->realized()) return v;
  const Views& views = v->args.st.views();
  if (views.size() < 2 || !views.back().is_contiguous()) return v;
  const Shape& inner = views[views.size() - 2].shape;
  if (numel(inner) != v->numel() || non_unit(inner).size() <= non_unit(v->shape).size()) return v;
  return Tensor(v->src[0]).view(ShapeTracker(Views(views.begin(), views.end() - 1))).node();
}

// The expression trees (value, iteration shape) the kernel(s) of root `n` evaluate.
std::vector<std::pair<const Node*, Shape>> kernel_trees(const Planner& p, const Node* n) {
  if (n->op == Op::Write) return {{n->src[0].get(), n->shape}, {n->src[1].get(), n->src[1]->shape}};
  if (n->op == Op::Scatter)
    return {{n->src[0].get(), n->shape}, {n->src[1].get(), n->src[1]->shape}, {n->src[2].get(), n->src[2]->shape}};
  if (p.copy_of.count(n) || p.permutation_of.count(n)) return {};  // its value's kernel stores it
  if (n->op == Op::Contiguous) return {{n->src[0].get(), n->shape}};
  const Node* v = kernel_value(p, n);
  return {{v, v->shape}};
}

// Whether reduce `r` sums a product whose one factor stays put along an output dim the other
// moves along (a matmul, a convolution): what a register tile serves.
bool is_contraction(const Node& r) {
  if (r.args.rop != ReduceOp::Sum || r.src[0]->op != Op::Mul || r.src[0]->realized()) return false;
  const Node& m = *r.src[0];
  auto a = constant_dims(*m.src[0]), b = constant_dims(*m.src[1]);
  for (size_t d = 0; d < r.shape.size(); d++)
    if (r.shape[d] > 1 && a[d] != b[d]) return true;
  return false;
}

// An elementwise value with this many operations below it is recomputed per reader at most
// kLargeExpressionReads times per element: beyond that it is stored, as an expensive one is.
// (Fewer reads come from tiles, whose packing evaluates an operand once per element anyway.)
constexpr int64_t kLargeExpression = 96;
constexpr double kLargeExpressionReads = 32.0001;

// The operations a reader that recomputes elementwise `top` evaluates, down to what kernels
// load and to reduces, counted up to `limit`.
int64_t expression_ops(const Planner& p, const Node* top, int64_t limit) {
  std::unordered_set<const Node*> ops{top};
  std::vector<const Node*> todo{top};
  while (!todo.empty() && int64_t(ops.size()) < limit) {
    const Node* n = todo.back();
    todo.pop_back();
    for (auto& s : n->src) {
      const Node* c = s.get();
      if (c->op != Op::Reduce && !c->realized() && !p.roots.count(c) && !c->src.empty() && ops.insert(c).second)
        todo.push_back(c);
    }
  }
  return int64_t(ops.size());
}

// A recurrence's state: an elementwise value loading this many buffers of its own size,
// evaluated by at least kHeavyValueKernels kernels (see heavy_values).
constexpr int64_t kHeavyLoads = 4;
constexpr int kHeavyValueKernels = 3;
constexpr int64_t kShortProductTerms = 32;  // a product of fewer terms counts as a load

// The states of recurrences to store, each mapped to where (the top of the chain of
// elementwise nodes that read only it) and the count of kernels that evaluate it. An LSTM's
// cell c = f * c_prev + i * g is never requested, and each step's kernel is separated from
// the next by a product: every step recomputed the whole chain of earlier steps, O(T^2)
// loads and a new, longer program per step. The merged-kernel walk of
// realize_repeated_reduces sees such a value once per group of kernels of one size; here
// each kernel counts, since a recurrence's steps never merge.
std::unordered_map<const Node*, int> heavy_values(const Planner& p, const std::vector<const Node*>& order,
                                                  const std::unordered_map<const Node*, int>& position,
                                                  const std::unordered_map<const Node*, const Node*>& only_reader) {
  auto loads_stop = [&](const Node* n) { return n->realized() || p.roots.count(n) > 0; };
  // Whether `top` loads kHeavyLoads buffers of its size, down to what kernels load and to
  // reduces, from the load sets of the nodes below it, each kept to kHeavyLoads entries and
  // computed once per (node, size): a chain of T steps costs O(T), where a walk from every
  // node cost O(T^2).
  struct LoadSet {
    std::array<const Node*, kHeavyLoads> loads{};
    int64_t count = 0;
    void add(const Node* n) {
      if (count == kHeavyLoads || std::find(loads.begin(), loads.begin() + count, n) != loads.begin() + count) return;
      loads[size_t(count++)] = n;
    }
  };
  struct SizedNode {
    const Node* n;
    int64_t size;
    bool operator==(const SizedNode& o) const { return n == o.n && size == o.size; }
  };
  struct SizedNodeHash {
    size_t operator()(const SizedNode& k) const { return std::hash<const Node*>()(k.n) * 31 + size_t(k.size); }
  };
  // A product of a few terms, fused into the value, costs a reader what a load does: an RNN
  // cell of 8 units whose products were fused loaded only its input product and biases, and
  // was never stored (every step recomputed all earlier cells).
  auto fused_short_product = [&](const Node* r) {
    return !loads_stop(r) && is_contraction(*r) && r->src[0]->numel() < kShortProductTerms * r->numel();
  };
  std::unordered_map<SizedNode, LoadSet, SizedNodeHash> below;  // what a node's sources load
  auto computed = [&](const Node* c) { return c->op != Op::Reduce && !loads_stop(c) && !c->src.empty(); };
  auto loads_below = [&](const Node* top, int64_t size) -> const LoadSet& {
    std::vector<std::pair<const Node*, bool>> todo{{top, false}};  // (node, sources done)
    while (!todo.empty()) {
      auto [n, ready] = todo.back();
      todo.pop_back();
      if (below.count({n, size})) continue;
      if (!ready) {
        todo.push_back({n, true});
        for (auto& s : n->src)
          if (computed(s.get()) && !below.count({s.get(), size})) todo.push_back({s.get(), false});
        continue;
      }
      LoadSet set;
      for (auto& s : n->src) {
        const Node* c = s.get();
        if (c->op == Op::Reduce) {
          if (fused_short_product(c) && c->numel() >= size) set.add(c);
        } else if (loads_stop(c)) {
          if (c->numel() >= size) set.add(c);
        } else if (computed(c)) {
          for (int64_t i = 0; i < below.at({c, size}).count; i++) set.add(below.at({c, size}).loads[size_t(i)]);
        }
      }
      below[{n, size}] = set;
    }
    return below.at({top, size});
  };
  auto is_heavy = [&](const Node* top) { return loads_below(top, top->numel()).count >= kHeavyLoads; };
  // The walks below run over positions in `order` (producers first, so a reverse scan sees
  // every reader of a node before the node): the sources a walk enters, skipping what
  // kernels load.
  std::vector<size_t> first_source(order.size() + 1);
  std::vector<int> sources;
  for (size_t i = 0; i < order.size(); i++) {
    first_source[i] = sources.size();
    for (auto& s : order[i]->src) {
      auto it = position.find(s.get());
      if (it != position.end() && !loads_stop(s.get())) sources.push_back(it->second);
    }
  }
  first_source[order.size()] = sources.size();
  // The kernels evaluating each node: each kernel's walk from its trees, 64 kernels at a time
  // as bits OR-ed from readers to sources (a walk per kernel cost O(T^2) over a T-step
  // recurrence's unstored chain).
  std::vector<std::vector<int>> kernel_starts;
  for (size_t i = 0; i < order.size(); i++) {
    if (!p.roots.count(order[i])) continue;
    std::vector<int> starts;
    for (auto& tree : kernel_trees(p, order[i])) {
      auto it = position.find(tree.first);
      if (it != position.end() && (tree.first == order[i] || !loads_stop(tree.first))) starts.push_back(it->second);
    }
    kernel_starts.push_back(std::move(starts));
  }
  std::vector<int> evaluating(order.size(), 0);
  std::vector<uint64_t> reached(order.size());
  for (size_t block = 0; block < kernel_starts.size(); block += 64) {
    std::fill(reached.begin(), reached.end(), 0);
    int highest = -1;
    for (size_t k = block; k < std::min(block + 64, kernel_starts.size()); k++)
      for (int start : kernel_starts[k]) {
        reached[size_t(start)] |= uint64_t(1) << (k - block);
        highest = std::max(highest, start);
      }
    for (int i = highest; i >= 0; i--) {
      uint64_t bits = reached[size_t(i)];
      if (!bits) continue;
      evaluating[size_t(i)] += __builtin_popcountll(bits);
      for (size_t e = first_source[size_t(i)]; e < first_source[size_t(i) + 1]; e++) reached[size_t(sources[e])] |= bits;
    }
  }
  std::unordered_map<const Node*, int> kernels;  // heavy value -> kernels evaluating it
  for (size_t i = 0; i < order.size(); i++)
    if (evaluating[i] && is_elementwise(order[i]->op) && is_heavy(order[i])) kernels[order[i]] = evaluating[i];
  // What to store: a heavy value below another one, evaluated by more kernels than that one,
  // is computed elsewhere too (the previous step's state): each step's kernels would recompute
  // a longer chain of them. A value read whole by a few kernels (an LSTM cell's gate gradients,
  // read by products and by a weight gradient's join) costs a bounded recompute, and stored it
  // would need a kernel of its own: it stays. Each node gets the fewest kernels of a heavy
  // value above it (down sources other than reduces), passed from readers to sources.
  constexpr int kNone = INT32_MAX;
  std::vector<int> fewest_above(order.size(), kNone);
  std::unordered_set<const Node*> shared;
  for (size_t i = order.size(); i-- > 0;) {
    int above = fewest_above[i];
    auto it = kernels.find(order[i]);
    if (it != kernels.end()) {
      if (it->second >= kHeavyValueKernels && it->second > above) shared.insert(order[i]);
      if (it->second >= kHeavyValueKernels - 1) above = std::min(above, it->second);
    }
    if (above == kNone) continue;
    for (size_t e = first_source[i]; e < first_source[i + 1]; e++)
      if (order[size_t(sources[e])]->op != Op::Reduce)
        fewest_above[size_t(sources[e])] = std::min(fewest_above[size_t(sources[e])], above);
  }
  std::unordered_map<const Node*, int> tops;
  for (const Node* n : shared) {
    const Node* top = n;
    for (auto it = only_reader.find(top); it != only_reader.end(); it = only_reader.find(top)) {
      const Node* up = it->second;
      if (p.roots.count(up) || !is_elementwise(up->op) || up->shape != n->shape) break;
      top = up;
    }
    if (!p.roots.count(top)) tops[top] = std::max(tops[top], kernels.at(n));
  }
  return tops;
}

// Fusing a reduce into the kernel that reads it is free when the generated
// code computes it once per output element: the code generator evaluates a
// reduce once per iteration of the innermost loop its index depends on
// (hoisting it above the others). This counts those evaluations, for every
// reduce, over every kernel, and makes a realize point of each reduce that
// would be computed more often than it has elements (topmost first, then
// again, since a new kernel changes what is below it). An expensive elementwise value is
// realized at the top of the chain of elementwise nodes that read only it (a GELU's whole
// value, not its erf), and a reduce nested under that top waits for the next round: there it
// is the top's own kernel's reduce (a linear layer with its GELU as epilogue), where else
// the reduce, the erf and the GELU reading both took a kernel each.

void realize_repeated_reduces(Planner& p, const std::vector<const Node*>& order) {
  std::unordered_map<const Node*, int> position;
  for (size_t i = 0; i < order.size(); i++) position[order[i]] = int(i);
  std::unordered_map<const Node*, int> readers;  // distinct nodes reading each node
  std::unordered_map<const Node*, const Node*> only_reader;  // for nodes with one reader
  for (auto* n : order)
    for (size_t i = 0; i < n->src.size(); i++) {
      bool again = false;
      for (size_t j = 0; j < i; j++) again |= n->src[j] == n->src[i];
      if (!again && readers[n->src[i].get()]++ == 0) only_reader[n->src[i].get()] = n;
    }
  for (auto& [n, count] : readers)
    if (count > 1) only_reader.erase(n);
  for (int round = 0; round < 64; round++) {
    std::unordered_map<const Node*, double> evals;
    std::unordered_map<const Node*, std::vector<const Node*>> enclosing;  // reduce -> reduces around it
    std::unordered_set<const Node*> nested;
    std::unordered_set<const Node*> across;  // sizable reduces evaluated across their order
    std::unordered_set<const Node*> several;  // products evaluated beside other reduces in one kernel
    std::vector<const Node*> tree_reduces;     // the sizable reduces one kernel evaluates, per context
    // An elementwise value of at least kLargeExpression operations below it, stopping at
    // what kernels load and at reduces (a residual network's gradient, one add and ReLU mask
    // per block, down every later block): recomputed per reader like an expensive one.
    // A 1x1 weight gradient of RegNet's last stage, 16 steps in plain loops, recomputed it
    // for each of its 400 channels: 13-66 ms each.
    std::unordered_map<const Node*, bool> large;
    auto large_expression = [&](const Node* top) {
      if (!is_elementwise(top->op)) return false;
      auto it = large.find(top);
      if (it != large.end()) return it->second;
      return large[top] = expression_ops(p, top, kLargeExpression) >= kLargeExpression;
    };
    std::unordered_map<const Node*, const Node*> chain_top;  // expensive elementwise -> where to realize it
    std::unordered_map<const Node*, std::vector<const Node*>> nested_path;  // nested reduce -> nodes above it
    // Kernels with the same number of elements are merged into one (see
    // create_schedule), which evaluates what they share once: walk each such
    // group with one walker, every tree seen in the group's shape.
    struct Group {
      Shape shape;
      std::vector<std::pair<const Node*, NodeRef>> trees;  // (root, tree), each seen in `shape`
    };
    std::map<std::pair<int64_t, int>, Group> groups;
    int unique = 0;
    for (auto* root : order) {
      if (!p.roots.count(root)) continue;
      auto trees = kernel_trees(p, root);
      for (size_t t = 0; t < trees.size(); t++) {
        auto [tree, shape] = trees[t];
        bool region = t > 0 && (root->op == Op::Write || root->op == Op::Scatter);
        Group& g = groups[{numel(shape), region ? ++unique : 0}];
        if (g.trees.empty()) g.shape = shape;
        NodeRef ref = p.refs.count(tree) ? p.refs.at(tree) : NodeRef();
        if (ref) g.trees.emplace_back(root, ref);
      }
    }
    for (auto& [key, g] : groups) {
      {
        const Node* root = nullptr;
        const Shape& shape = g.shape;
        struct VarInfo { double extent; int parent; int depth; bool in_reduce; };
        std::vector<VarInfo> vars;
        std::vector<const Node*> stack;
        int parent_for_next = -1;
        bool in_reduce_loop = false;  // whether the next variables belong to a reduce's loops
        auto make_var = [&](int64_t size) {
          int id = int(vars.size());
          int depth = parent_for_next < 0 ? 0 : vars[size_t(parent_for_next)].depth + 1;
          vars.push_back({double(size), parent_for_next, depth, in_reduce_loop});
          parent_for_next = id;
          return size > 1 ? var(id, size) : cnst(0);
        };
        std::vector<Expr> idx;
        for (auto d : shape) idx.push_back(d > 1 ? make_var(d) : cnst(0));
        int last_var = -1;  // the kernel's fastest-moving index
        for (auto& e : idx)
          if (e->op == EOp::Var) last_var = int(e->value);
        // whether the kernel's last index moves `n` along a dim, but not along its last
        auto transposed = [&](const Node* n, const std::vector<Expr>& ix) {
          if (last_var < 0) return false;
          int d_last = -1;
          for (size_t d = 0; d < n->shape.size(); d++)
            if (n->shape[d] > 1) d_last = int(d);
          bool moves_other = false;
          for (size_t d = 0; d < ix.size(); d++) {
            std::vector<int> used;
            collect_vars(ix[d], used);
            bool moves = std::find(used.begin(), used.end(), last_var) != used.end();
            if (int(d) == d_last && moves) return false;
            moves_other |= moves;
          }
          return moves_other;
        };
        Expr flat_index = cnst(0);
        for (size_t d = 0; d < shape.size(); d++) flat_index = add(mul(flat_index, shape[d]), idx[d]);
        in_reduce_loop = true;
        std::vector<const Node*> path;  // the nodes being descended, the root first
        IndexWalker w;
        w.is_leaf = [&](const Node* n) { return n->realized() || (n != root && p.roots.count(n)); };
        w.fresh_var = make_var;
        w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
          bool costly = n->op == Op::Reduce || is_transcendental(n->op) || large_expression(n);
          if (!costly && n->op != Op::Gather) {
            path.push_back(n);
            return true;
          }
          std::vector<int> used;
          collect_vars(v, used);
          for (auto& e : ix) collect_vars(e, used);
          int inner = -1;
          for (int id : used)
            if (inner < 0 || vars[size_t(id)].depth > vars[size_t(inner)].depth) inner = id;
          if (costly && n != root) {
            double e = 1;
            for (int id = inner; id >= 0; id = vars[size_t(id)].parent) e *= vars[size_t(id)].extent;
            evals[n] += e;
            enclosing[n].insert(enclosing[n].end(), stack.begin(), stack.end());
            // A sizable reduce running inside another reduce's loop loses the
            // tiling and threading its own kernel would get (matmul then sum).
            if (n->op == Op::Reduce && inner >= 0 && vars[size_t(inner)].in_reduce &&
                n->src[0]->numel() / std::max<int64_t>(1, n->numel()) >= 16 && nested.insert(n).second)
              nested_path[n] = path;
            // A sizable reduce whose last dim does not move with the kernel's last one is
            // evaluated across its own order (a convolution's output read back channels-last
            // through an elementwise gradient): untiled there, as its own kernel tiled.
            if (n->op == Op::Reduce && n != root && (inner < 0 || !vars[size_t(inner)].in_reduce) &&
                n->src[0]->numel() / std::max<int64_t>(1, n->numel()) >= 16) {
              if (transposed(n, ix)) across.insert(n);
              if (stack.empty()) tree_reduces.push_back(n);  // side by side, not one below another
            }
            if (n->op != Op::Reduce && !chain_top.count(n)) {
              const Node* top = n;
              for (size_t i = path.size(); i-- > 0 && readers[top] == 1;) {
                const Node* up = path[i];
                // (not through a widening cast: a wider buffer, and the reader no longer sees
                // that its factors are 16-bit values, as the GPU's tensor cores need)
                if (up == root || !is_elementwise(up->op) || up->shape != n->shape ||
                    itemsize(up->dtype) > itemsize(top->dtype))
                  break;
                top = up;
              }
              chain_top[n] = top;
            }
            // Already its own kernel this round (or inside one that is): what
            // lies below is counted again next round, from its own kernel.
            // Descending here would multiply the contexts of everything below
            // per path (residual blocks double them), exponentially in depth.
            if (n->op == Op::Reduce &&
                (nested.count(n) || evals[n] > double(std::max<int64_t>(1, n->numel())) * 1.0001))
              return false;
            // So too a large elementwise value read more often than it may be: it (or the
            // top of its chain) is stored this round. An RNN's gradient recurrence reached
            // each step's from every later step's kernel, each time in new loop variables:
            // 1.1M contexts for 64 steps, and a 128-step LSTM scheduled in 14-22 s (now 3.5-4).
            // (Not at a transcendental one: stopped at each step's tanh, an RNN's input product
            // fused into every step, a program per step, where stored it let the steps share one.)
            if (n->op != Op::Reduce && !is_transcendental(n->op) &&
                evals[n] > double(std::max<int64_t>(1, n->numel())) * kLargeExpressionReads)
              return false;
          }
          parent_for_next = inner;  // its loops (or runtime index) nest here
          if (n->op == Op::Reduce) stack.push_back(n);
          path.push_back(n);
          return true;
        };
        w.leave = [&](const Node* n) {
          if (n->op == Op::Reduce) stack.pop_back();
          path.pop_back();
        };
        std::unordered_map<const Node*, int> group_contexts;  // sizable reduce -> contexts it is evaluated at
        for (auto& [r, tree] : g.trees) {
          root = r;
          tree_reduces.clear();
          // A tree of another shape is seen at the group's index taken row-major (as its
          // merged kernel reshapes it). Not through a reshape node: that may be a node of
          // the graph, another root (a requested reshape of this value), walked as a leaf.
          w.walk(tree.get(), tree->shape == shape ? idx : unflatten(flat_index, tree->shape), cnst(1));
          // A kernel tiles a single reduce: where it would evaluate several (two products
          // added), a product stays only as the kernel's one reduce; the others are stored
          // by tiled kernels of their own.
          if (tree_reduces.size() >= 2) {
            bool keep_one = true;
            for (auto* n : tree_reduces) keep_one &= is_contraction(*n);
            for (auto* n : tree_reduces)
              if (is_contraction(*n) && !(keep_one && n == tree_reduces.back())) several.insert(n);
          }
          for (auto* n : tree_reduces) group_contexts[n]++;
        }
        // Nor where the group's kernel would evaluate one product at several places (an
        // LSTM's gates, four slices of one product, each read by its activation).
        for (auto& [n, count] : group_contexts)
          if (count >= 2 && is_contraction(*n)) several.insert(n);
      }
    }
    // A reduce may be computed once per element; an expensive elementwise
    // value twice (recomputing beats a round trip through memory).
    std::vector<const Node*> repeated;
    for (auto& [n, e] : evals) {
      double limit = double(std::max<int64_t>(1, n->numel())) *
                     (n->op == Op::Reduce ? 1.0001 : is_transcendental(n->op) ? 2.0001 : kLargeExpressionReads);
      if (e > limit) repeated.push_back(n);
    }
    for (auto* n : nested)
      if (!evals.count(n) || evals[n] <= double(std::max<int64_t>(1, n->numel())) * 1.0001) repeated.push_back(n);
    for (auto* n : across)
      if (!nested.count(n) && (!evals.count(n) || evals[n] <= double(std::max<int64_t>(1, n->numel())) * 1.0001))
        repeated.push_back(n);
    for (auto* n : several)
      if (!nested.count(n) && !across.count(n) &&
          (!evals.count(n) || evals[n] <= double(std::max<int64_t>(1, n->numel())) * 1.0001))
        repeated.push_back(n);
    auto heavy = heavy_values(p, order, position, only_reader);
    if (repeated.empty() && heavy.empty()) return;
    for (auto& [top, count] : heavy)
      p.roots[top] = "recurrence state would be recomputed by " + std::to_string(count) + " kernels";
    auto realize_at = [&](const Node* n) { return chain_top.count(n) ? chain_top[n] : n; };  // reduces: n
    std::unordered_set<const Node*> rep(repeated.begin(), repeated.end()), tops;
    for (auto* n : repeated)
      if (n->op != Op::Reduce) tops.insert(realize_at(n));
    for (auto* n : repeated) {
      bool inside = false;
      for (auto* outer : enclosing[n]) inside |= rep.count(outer) > 0;
      if (nested.count(n))
        for (auto* above : nested_path[n]) inside |= tops.count(above) > 0;
      if (!inside) {
        double times = evals[n] / double(std::max<int64_t>(1, n->numel()));
        char count[32];  // 1.5x, 64x
        std::snprintf(count, sizeof count, times < 10 ? "%.1fx" : "%.0fx", times);
        p.roots[realize_at(n)] =
            nested.count(n) ? std::string("reduce inside another reduce's loop (its own kernel is tiled and threaded)") :
            across.count(n) && times <= 1.0001 ? std::string("reduce read across its own order (its own kernel is tiled)") :
            several.count(n) && times <= 1.0001 ? std::string("product beside other reduces in one kernel (its own kernel is tiled)") :
            std::string(n->op == Op::Reduce ? "reduce" : "expensive value") + " would be computed " + count +
                " per element if fused (read through a broadcast or by several kernels)";
      }
    }
  }
}

// Whether `k` reads `buffers` only element for element: every load of them
// is reached (the way the code generator evaluates, reduces and views
// included) at exactly the kernel's own element.
bool reads_in_place(const Kernel& k, const std::unordered_set<const Buffer*>& buffers) {
  int next = 0;
  auto fresh = [&](int64_t size) { return size > 1 ? var(next++, size) : cnst(0); };
  std::vector<Expr> idx;
  for (auto d : k.shape) idx.push_back(fresh(d));
  Expr flat = cnst(0);
  Shape st = contiguous_strides(k.shape);
  for (size_t d = 0; d < idx.size(); d++) flat = add(flat, mul(idx[d], st[d]));
  bool ok = true;
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = fresh;
  w.visit = [&](const Node*, const std::vector<Expr>&, const Expr&) { return ok; };
  w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    if (!buffers.count(k.buffers[size_t(k.loads.at(n))].get())) return;
    std::vector<Expr> own = unflatten(flat, n->shape);
    if (!is_true(v) || own.size() != ix.size()) ok = false;
    for (size_t d = 0; ok && d < ix.size(); d++) ok = to_string(own[d]) == to_string(ix[d]);
  };
  for (auto& o : k.outputs) {
    w.walk(o.value.get(), idx, cnst(1));
    if (o.scatter_index) ok = false;
  }
  return ok;
}

// A scalar kernel may ride along an independent kernel of at most this many
// iterations (each computes and stores the scalar again: cheap up to here).
constexpr int64_t kRideAlongMaxNumel = int64_t(1) << 16;

// Visits each node kernel `k` evaluates (not its loads) once, from its outputs down, descending
// into a node's sources where `visit` says so.
void each_computed(const Kernel& k, const std::function<bool(const Node*)>& visit) {
  std::vector<const Node*> stack;
  std::unordered_set<const Node*> seen;
  for (auto& o : k.outputs) stack.push_back(o.value.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second || k.loads.count(n)) continue;
    if (visit(n))
      for (auto& s : n->src) stack.push_back(s.get());
  }
}

// The most levels of operations kernel `k` evaluates between a stored value and a load.
int expression_depth(const Kernel& k) {
  std::unordered_map<const Node*, int> depth;  // of each node evaluated, once its sources' are known
  std::vector<std::pair<const Node*, bool>> todo;  // (node, sources done)
  for (auto& o : k.outputs) {
    todo.push_back({o.value.get(), false});
    if (o.scatter_index) todo.push_back({o.scatter_index.get(), false});
  }
  int deepest = 0;
  while (!todo.empty()) {
    auto [n, ready] = todo.back();
    todo.pop_back();
    if (k.loads.count(n) || depth.count(n)) continue;
    if (!ready) {
      todo.push_back({n, true});
      for (auto& s : n->src)
        if (!depth.count(s.get())) todo.push_back({s.get(), false});
      continue;
    }
    int d = 1;
    for (auto& s : n->src)
      if (auto it = depth.find(s.get()); it != depth.end()) d = std::max(d, it->second + 1);
    deepest = std::max(deepest, depth[n] = d);
  }
  return deepest;
}

// The reduces kernel `k` evaluates (not just loads), outermost only.
std::set<const Node*> computed_reduces(const Kernel& k) {
  std::set<const Node*> reduces;
  each_computed(k, [&](const Node* n) {
    if (n->op != Op::Reduce) return true;
    reduces.insert(n);
    return false;
  });
  return reduces;
}

bool computes_reduce(const Kernel& k) { return !computed_reduces(k).empty(); }

// Whether kernel `k` evaluates a masked view (a padded part of a concatenation or a pad).
bool computes_masked_view(const Kernel& k) {
  bool masked = false;
  each_computed(k, [&](const Node* n) {
    masked |= n->op == Op::View && n->args.st.masked();
    return !masked;  // found: descend no further
  });
  return masked;
}

// Adds `n`'s expression tree to kernel `k`, turning realized nodes and other
// realize points into loads.
void collect_loads(Kernel& k, const NodeRef& root_value, const Node* self,
                   const std::unordered_map<const Node*, BufferRef>& buffers,
                   std::unordered_map<const Buffer*, int>& buffer_index) {
  std::vector<const Node*> stack{root_value.get()};
  std::unordered_set<const Node*> seen;
  auto buffer_id = [&](const BufferRef& b) {
    auto it = buffer_index.find(b.get());
    if (it != buffer_index.end()) return it->second;
    int id = int(k.buffers.size());
    k.buffers.push_back(b);
    buffer_index[b.get()] = id;
    return id;
  };
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    BufferRef b = n->realized();
    if (!b && n != self) {
      auto it = buffers.find(n);
      if (it != buffers.end()) b = it->second;
    }
    if (b) {
      k.loads[n] = buffer_id(b);
      continue;
    }
    for (auto& s : n->src) stack.push_back(s.get());
  }
}


// Whether a view's mask holds everywhere in its shape (1), nowhere (0), or in part (-1).
int mask_decided(const ShapeTracker& st) {
  if (numel(st.shape()) == 0) return -1;
  Expr valid = st.index_valid(vars_of(st.shape())).second;
  return is_true(valid) ? 1 : is_false(valid) ? 0 : -1;
}

// The range of values a pushed-down node takes: a constant, or a mask-free view of an integer
// arange (concatenation's positions); nothing for others.
std::optional<std::pair<int64_t, int64_t>> value_range(const Node& n) {
  if (n.op == Op::Const && !is_float(n.dtype)) {
    const int64_t v = n.args.value.to_int();
    return std::make_pair(v, v);
  }
  if (n.op != Op::View || n.src[0]->op != Op::Arange || is_float(n.dtype) || n.args.st.masked() ||
      numel(n.shape) == 0)
    return std::nullopt;
  const Expr flat = n.args.st.index_valid(vars_of(n.shape)).first;
  const Node& a = *n.src[0];
  const int64_t start = a.args.value.to_int(), step = a.args.value2.to_int();
  const int64_t first = start + step * flat->vmin, last = start + step * flat->vmax;
  return std::make_pair(std::min(first, last), std::max(first, last));
}

// A comparison of two value ranges where it comes out the same for every element.
std::optional<bool> decided_comparison(Op op, std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
  switch (op) {
    case Op::CmpLt:
      if (a.second < b.first) return true;
      if (a.first >= b.second) return false;
      break;
    case Op::CmpLe:
      if (a.second <= b.first) return true;
      if (a.first > b.second) return false;
      break;
    case Op::CmpEq:
    case Op::CmpNe: {
      const bool disjoint = a.second < b.first || b.second < a.first;
      const bool one_value = a.first == a.second && a == b;
      if (disjoint || one_value) return (op == Op::CmpEq) == one_value;
      break;
    }
    default:
      break;
  }
  return std::nullopt;
}

// A kernel reading part of a buffer through a view (an RNN's backward step, its time step of
// the output's gradient; attention's q, k and v, slices of one projection) reads an alias of
// just that window, the view rebased onto it: kernels that differ only in where the part
// starts then have one key and share one program, the start passed as the alias's address.
// (Views of stored inputs get their windows as the graph is built: view_over in tensor.cpp.)
// Kernels reading one window read one alias (window_alias). `stands_for` gets each node made
// here and the kernel's node it stands for (a traced replay names that one's module).
void read_windows(Kernel& k, std::vector<std::pair<const Node*, const Node*>>& stands_for) {
  std::unordered_map<const Node*, const Node*> made;  // each new node and what it was made from
  std::unordered_map<const Buffer*, int> index;
  for (size_t i = 0; i < k.buffers.size(); i++) index.emplace(k.buffers[i].get(), int(i));
  std::function<NodeRef(const ShapeTracker&, const NodeRef&)> push_uncached;
  // A view (without masks) of an elementwise expression of loads is that expression of the
  // loads seen through the view: pushed down, the view of a computed value at an offset (the
  // x[:, t] of `(x @ w) * s`) becomes a window of what is stored. Not inside a reduce's loop,
  // where the views of a product's factors are what the register tile recognizes.
  std::unordered_map<const Node*, bool> pushable_memo;
  std::function<bool(const Node*)> pushable = [&](const Node* e) {
    if (k.loads.count(e) || e->op == Op::Const || e->op == Op::Param || e->op == Op::Arange) return true;
    auto it = pushable_memo.find(e);
    if (it != pushable_memo.end()) return it->second;
    bool ok;
    if (e->op == Op::View) {
      ok = k.loads.count(e->src[0].get()) || (!e->args.st.masked() && pushable(e->src[0].get()));
    } else {
      ok = is_elementwise(e->op);
      for (auto& src : e->src) ok = ok && src->shape == e->shape && pushable(src.get());
    }
    return pushable_memo[e] = ok;
  };
  std::unordered_map<const Node*, std::vector<std::pair<ShapeTracker, NodeRef>>> pushed_memo;  // shared sources once
  std::function<NodeRef(const ShapeTracker&, const NodeRef&)> push = [&](const ShapeTracker& st, const NodeRef& e) {
    auto& memo = pushed_memo[e.get()];
    for (auto& [seen, result] : memo)
      if (seen == st) return result;
    NodeRef result = push_uncached(st, e);
    pushed_memo[e.get()].emplace_back(st, result);
    if (result != e) made.emplace(result.get(), e.get());
    return result;
  };
  // Where the window decides a select (a concatenation's `where(position < end, part, rest)`,
  // its padded parts), only the part it reads is pushed: each time step's gradient of a stacked
  // output then reads its one part's window rather than every part's at its own offset.
  push_uncached = [&](const ShapeTracker& st, const NodeRef& e) -> NodeRef {
    if (e->op == Op::View && !k.loads.count(e.get())) {
      ShapeTracker through = st.compose_onto(e->args.st);
      if (e->args.st.masked()) {
        const int decided = mask_decided(through);
        if (decided == 0) return Tensor::full(st.shape(), Scalar::from_int(0), e->dtype).node();
        if (decided == 1) {  // read inside the valid part only: the mask is no matter
          Views views = e->args.st.views();
          for (View& v : views) v.mask.reset();
          through = st.compose_onto(ShapeTracker(std::move(views)));
        }
      }
      return push(through, e->src[0]);
    }
    if (e->op == Op::Const) return make_node(Op::Const, e->dtype, st.shape(), {}, e->args);
    NodeArgs view;
    view.st = st;
    int64_t lo, hi;  // a launch value reads the same anywhere: where the view starts is no matter
    if (e->op == Op::Param) st.window(e->numel(), &lo, &hi, &view.st);
    if (k.loads.count(e.get()) || e->op == Op::Param || e->op == Op::Arange)
      return make_node(Op::View, e->dtype, st.shape(), {e}, view);
    if (e->op == Op::Where) {
      NodeRef cond = push(st, e->src[0]);
      if (cond->op == Op::Const) return push(st, e->src[cond->args.value.to_int() != 0 ? 1 : 2]);
      return make_node(Op::Where, e->dtype, st.shape(), {cond, push(st, e->src[1]), push(st, e->src[2])}, e->args);
    }
    std::vector<NodeRef> src;
    for (auto& s : e->src) src.push_back(push(st, s));
    if (src.size() == 2)
      if (auto a = value_range(*src[0]), b = value_range(*src[1]); a && b)
        if (auto holds = decided_comparison(e->op, *a, *b))
          return Tensor::full(st.shape(), Scalar::from_bool(*holds), e->dtype).node();
    return make_node(e->op, e->dtype, st.shape(), std::move(src), e->args);
  };
  std::vector<NodeRef> pushed;  // alive while their addresses key `rebuilt`
  std::unordered_map<const Node*, NodeRef> rebuilt[2];  // node -> its copy reading windows (or itself),
                                                        // outside and inside a reduce's loop
  KeepOrigin keep;
  std::function<NodeRef(const NodeRef&, bool)> rebuild = [&](const NodeRef& n, bool in_reduce) -> NodeRef {
    auto done = rebuilt[in_reduce].find(n.get());
    if (done != rebuilt[in_reduce].end()) return done->second;
    NodeRef out = n;
    keep.as(*n);  // a copy is still the work of the op that made the node (traces)
    auto load = n->op == Op::View ? k.loads.find(n->src[0].get()) : k.loads.end();
    int64_t lo, hi;
    ShapeTracker rebased;
    if (k.loads.count(n.get())) {
    } else if (load != k.loads.end()) {
      const Node* src = load->first;
      const BufferRef& buf = k.buffers[size_t(load->second)];
      if (buf->dtype() == src->dtype && buf->numel() == src->numel() && zero_masks_key(src).empty() &&
          n->args.st.window(buf->numel(), &lo, &hi, &rebased)) {
        BufferRef alias = window_alias(buf, lo, hi - lo);
        NodeRef leaf = Tensor::from_buffer(alias, {hi - lo}).node();
        if (!index.count(alias.get())) {
          index[alias.get()] = int(k.buffers.size());
          k.buffers.push_back(alias);
        }
        k.loads[leaf.get()] = index.at(alias.get());
        NodeArgs args = n->args;
        args.st = rebased;
        out = make_node(Op::View, n->dtype, n->shape, {leaf}, std::move(args));
      }
    } else if (n->op == Op::View && !in_reduce && !n->args.st.is_contiguous() && !n->args.st.masked() &&
               (is_elementwise(n->src[0]->op) || n->src[0]->op == Op::View) && pushable(n->src[0].get())) {
      pushed.push_back(push(n->args.st, n->src[0]));
      out = rebuild(pushed.back(), in_reduce);
    } else {
      std::vector<NodeRef> src;
      bool changed = false;
      for (auto& s : n->src) {
        src.push_back(rebuild(s, in_reduce || n->op == Op::Reduce));
        changed |= src.back() != s;
      }
      if (changed) out = make_node(n->op, n->dtype, n->shape, std::move(src), n->args);
    }
    if (out != n) made.emplace(out.get(), n.get());
    return rebuilt[in_reduce][n.get()] = out;
  };
  for (auto& o : k.outputs) {
    o.value = rebuild(o.value, false);
    if (o.scatter_index) o.scatter_index = rebuild(o.scatter_index, false);
  }
  // loads no longer read (the whole buffers the windows replaced) leave the map
  std::unordered_set<const Node*> reached;
  std::vector<const Node*> todo;
  for (auto& o : k.outputs) {
    todo.push_back(o.value.get());
    if (o.scatter_index) todo.push_back(o.scatter_index.get());
  }
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!reached.insert(n).second || k.loads.count(n)) continue;
    for (auto& s : n->src) todo.push_back(s.get());
  }
  for (auto it = k.loads.begin(); it != k.loads.end();) it = reached.count(it->first) ? std::next(it) : k.loads.erase(it);
  for (const Node* n : reached) {  // (made from what, made from what: the first that was not made here)
    auto it = made.find(n);
    if (it == made.end()) continue;
    const Node* from = it->second;
    // (hash-consing may hand back a node met before: a chain may close on itself)
    std::unordered_set<const Node*> seen{n};
    for (auto m = made.find(from); m != made.end() && seen.insert(from).second; m = made.find(from)) from = m->second;
    stands_for.emplace_back(n, from);
  }
  // and so do their buffers: numbered by the buffers still used, in order, the kernels of
  // every window have one key
  std::vector<int> renumber(k.buffers.size(), -1);
  for (auto& o : k.outputs) renumber[size_t(o.buffer)] = 0;
  for (auto& [n, b] : k.loads) renumber[size_t(b)] = 0;
  std::vector<BufferRef> used;
  for (size_t b = 0; b < k.buffers.size(); b++)
    if (renumber[b] == 0) {
      renumber[b] = int(used.size());
      used.push_back(k.buffers[b]);
    }
  k.buffers = std::move(used);
  for (auto& o : k.outputs) o.buffer = renumber[size_t(o.buffer)];
  for (auto& [n, b] : k.loads) b = renumber[size_t(b)];
}

Schedule schedule_graph(const std::vector<NodeRef>& targets, Device& device) {
  Schedule sched;
  auto order = toposort(targets);
  Planner p;
  for (auto& t : targets) p.refs.emplace(t.get(), t);
  for (auto* n : order)
    for (auto& s : n->src) p.refs.emplace(s.get(), s);
  p.forced_roots(targets, order);
  // The walks of realize_repeated_reduces recurse per level too, but in smaller frames: a
  // looser bound first, so that their own realize points (a recurrence's states) come first.
  p.bound_depth(order, 4 * kMaxFusedDepth);
  realize_repeated_reduces(p, order);
  p.bound_depth(order, kMaxFusedDepth);

  // Give every realize point a buffer; aliases share their source's memory.
  std::vector<const Node*> roots;  // producers first
  for (auto* n : order) {
    if (!p.roots.count(n)) continue;
    BufferRef buf;
    if (n->op == Op::Bitcast) {
      const Node* src = n->src[0].get();
      BufferRef base = src->realized() ? src->realized() : p.buffers.count(src) ? p.buffers.at(src) : nullptr;
      if (base) buf = std::make_shared<Buffer>(base, n->dtype, n->numel());
    }
    if (p.copy_of.count(n)) buf = p.buffers.at(p.copy_of.at(n));  // stored by its value's kernel
    if (p.permutation_of.count(n)) buf = p.buffers.at(p.permutation_of.at(n));  // by its reduce's kernel
    if (buf) {
    } else if (n->op == Op::View && n->args.st.is_contiguous() &&
               (n->src[0]->realized() || p.buffers.count(n->src[0].get()))) {
      // a reshape of stored data: the same bytes
      buf = n->src[0]->realized() ? n->src[0]->realized() : p.buffers.at(n->src[0].get());
    } else {
      buf = std::make_shared<Buffer>(&device, n->dtype, n->numel());
      roots.push_back(n);
    }
    p.buffers[n] = buf;
    if (!p.permuted_store.count(n)) {
      sched.realized.emplace_back(p.refs.at(n), buf);
      continue;
    }
    // Stored in its readers' permuted order, not in its own (later graphs recompute it):
    // the readers are its buffer, as each would be if it were stored.
    for (const Node* r : p.permuted_readers.at(n))
      if (!p.roots.count(r)) {
        p.buffers[r] = buf;
        sched.realized.emplace_back(p.refs.at(r), buf);
      }
  }

  // One kernel per realize point, then merge independent kernels that share
  // an iteration space.
  struct Pending {
    Kernel k;
    int level = 0;
    bool mergeable = true;
    std::vector<const Node*> produces;
  };
  std::vector<Pending> pending;
  std::unordered_map<const Buffer*, int> level_of;  // owning buffer -> level of its last writer
  auto add_kernel = [&](const NodeRef& value, const Node* self, const ShapeTracker& store, const BufferRef& out,
                        const std::string& reason, bool mergeable, const Node* scatter = nullptr) {
    Pending pk;
    pk.k.shape = value->shape;
    pk.k.reason = reason;
    std::unordered_map<const Buffer*, int> index;
    pk.k.buffers.push_back(out);
    index[out.get()] = 0;
    KernelOutput o;
    o.value = value;
    o.store = store;
    o.buffer = 0;
    if (scatter) {
      o.scatter_index = scatter->src[1];
      o.accumulate = scatter->args.accumulate;
      o.rop = scatter->args.rop;
      pk.k.serial = o.accumulate;
      collect_loads(pk.k, o.scatter_index, self, p.buffers, index);
    }
    pk.k.outputs.push_back(o);
    collect_loads(pk.k, value, self, p.buffers, index);
    // Run after whatever last wrote a buffer we touch (aliases count as their owner).
    int level = 0;
    for (auto& b : pk.k.buffers) {
      auto it = level_of.find(b->owner());
      if (it != level_of.end()) level = std::max(level, it->second + 1);
    }
    pk.level = level;
    pk.mergeable = mergeable;
    level_of[out->owner()] = level;
    pending.push_back(std::move(pk));
  };
  for (auto* n : roots) {
    const NodeRef& ref = p.refs.at(n);
    BufferRef out = p.buffers.at(n);
    const std::string& reason = p.roots.at(n);
    if (n->op == Op::Write) {
      add_kernel(n->src[0], n, ShapeTracker::from_shape(n->shape), out, "copy of the base of a partial write", true);
      add_kernel(n->src[1], n, n->args.st, out, reason, false);
    } else if (n->op == Op::Scatter) {
      add_kernel(n->src[0], n, ShapeTracker::from_shape(n->shape), out, "copy of the base of a scatter", true);
      add_kernel(n->src[2], n, ShapeTracker::from_shape(n->src[2]->shape), out, reason, false, n);
    } else if (n->op == Op::Contiguous) {
      NodeRef value = unflattened(n->src[0]);
      add_kernel(value, n, ShapeTracker::from_shape(value->shape), out, reason, true);
    } else {
      const Node* v = kernel_value(p, n);
      NodeRef value = v == n ? ref : p.refs.at(v);
      auto permuted = p.permuted_store.find(n);
      if (permuted != p.permuted_store.end()) {
        add_kernel(value, n, permuted->second, out, reason, true);
      } else {
        value = unflattened(value);
        add_kernel(value, n, ShapeTracker::from_shape(value->shape), out, reason, true);
      }
    }
  }

  // A kernel may run as late as the level before its first reader; within
  // that window it joins a kernel with as many elements (a reshape of its
  // values puts them in that kernel's iteration shape).
  std::unordered_map<const Buffer*, int> latest;
  constexpr int kNoReader = 1 << 30;
  for (auto& pk : pending) latest[pk.k.buffers[0]->owner()] = kNoReader;
  for (auto& q : pending)
    for (size_t x = 0; x < q.k.buffers.size(); x++) {
      const Buffer* owner = q.k.buffers[x]->owner();
      auto it = latest.find(owner);
      if (it == latest.end()) continue;
      bool own_output = false;
      for (auto& o : q.k.outputs) own_output |= q.k.buffers[size_t(o.buffer)]->owner() == owner;
      // the base-copy kernel of a partial write must come before its region kernel
      if (own_output && q.mergeable) continue;
      it->second = std::min(it->second, q.level - 1);
    }
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) { return a.level < b.level; });
  struct Group {
    Kernel k;
    int level;
    bool mergeable;
    std::unordered_set<const Buffer*> writes;  // output buffers
    std::set<const Node*> reduces;             // the reduces it computes
    bool tiles;                                // one a register tile serves
    Shape dims;                                // its shape's dims other than 1
    int64_t elements;                          // its shape's element count
    int depth;                                 // its expression's levels (expression_depth)
  };
  std::vector<Group> groups;
  // Scalars nothing here reads go last, so that every kernel they could ride
  // along (below) exists by then.
  auto is_scalar = [](const Pending& pk) {
    return pk.mergeable && numel(pk.k.shape) == 1 && pk.k.outputs.size() == 1 && !pk.k.outputs[0].scatter_index &&
           !computes_reduce(pk.k);
  };
  std::stable_partition(pending.begin(), pending.end(), [&](const Pending& pk) {
    return !is_scalar(pk) || latest.at(pk.k.buffers[0]->owner()) != kNoReader;
  });
  for (auto& pk : pending) {
    int last = latest.count(pk.k.buffers[0]->owner()) ? latest[pk.k.buffers[0]->owner()] : pk.level;
    std::unordered_set<const Buffer*> own;
    for (auto& o : pk.k.outputs) own.insert(pk.k.buffers[size_t(o.buffer)].get());
    Group* into = nullptr;
    bool inline_loads = false;
    // A lone scalar (nn.BatchNorm's num_batches_tracked += 1) rides along the
    // smallest independent kernel in its window instead of launching its own:
    // that kernel stores the same value at every iteration (see below).
    if (is_scalar(pk))
      for (auto& g : groups)
        if (g.mergeable && !g.k.outputs.empty() && g.elements > 1 && g.elements <= kRideAlongMaxNumel &&
            g.level >= pk.level && g.level <= last && (!into || g.elements < into->elements))
          into = &g;
    bool ride_along = into != nullptr;
    std::set<const Node*> pk_reduces = computed_reduces(pk.k);
    const bool reduces = !pk_reduces.empty(), tiles = reduces && has_tileable_reduce(pk.k);
    const Shape pk_dims = non_unit(pk.k.shape);
    const int64_t pk_elements = numel(pk.k.shape);
    const int pk_depth = expression_depth(pk.k);
    std::optional<bool> masked;
    auto pk_masked = [&] {
      if (!masked) masked = computes_masked_view(pk.k);
      return *masked;
    };
    if (pk.mergeable && !into) {
      int newest_read = -1;  // the level of the newest writer of what pk reads
      for (auto& b : pk.k.buffers) {
        auto it = level_of.find(b->owner());
        if (!own.count(b.get()) && it != level_of.end()) newest_read = std::max(newest_read, it->second);
      }
      for (auto& g : groups) {
        if (!g.mergeable || g.k.outputs.empty() || g.elements != pk_elements) continue;
        // Two reduces in one kernel leave the code generator nothing to tile: a matmul or
        // convolution merged with another (q, k and v projections of one input) ran 40x slower.
        // One reduce read by both (a weight gradient, its two Adam moments) is computed once.
        if (reduces && !g.reduces.empty() && (tiles || g.tiles) && pk_reduces != g.reduces) continue;
        // A reduce seen through a reshape into another iteration shape is
        // indexed by divisions: its loads stop being linear, and the code
        // generator can no longer tile it (a convolution ran 8x slower). So are
        // the masks of its padded views: the code generator can no longer split
        // its loops where they change, and evaluates every part of a
        // concatenation at every element (an LSTM's stacked gate gradients,
        // (16, 4, 512), beside their transposed copy for a weight gradient's
        // product, (512, 64): 240 us, where each alone took 10 and 14).
        if (g.dims != pk_dims && (!g.reduces.empty() || reduces || pk_masked())) continue;
        if (g.level >= pk.level && g.level <= last) {  // independent: run side by side
          into = &g;
          break;
        }
        if (g.level < pk.level) {
          // A consumer of this group's outputs (and of nothing newer) with the
          // same element count: evaluate those outputs inline instead of
          // loading them; in the merged kernel they are the same expressions
          // at the same indices, so nothing is computed twice.
          if (newest_read > g.level) continue;
          // (its expression then continues into the group's: kMaxFusedDepth holds for both)
          bool ok = g.depth + pk_depth <= kMaxFusedDepth + kMaxFusedDepth / 8;
          for (auto& b : pk.k.buffers) {
            if (own.count(b.get())) continue;
            auto it = level_of.find(b->owner());
            if (it == level_of.end() || it->second < g.level) continue;
            if (!g.writes.count(b.get())) ok = false;  // its last writer is g
          }
          for (auto& [node, bi] : pk.k.loads) {
            const Buffer* b = pk.k.buffers[size_t(bi)].get();
            if (g.writes.count(b) && (node->dtype != b->dtype() || node->realized() || node->op == Op::Write ||
                                      node->op == Op::Scatter))
              ok = false;
          }
          // ...and only where it reads them element for element (the same
          // index as it computes): through a reduce or a view that moves
          // elements, they would be recomputed at other indices.
          if (ok) ok = reads_in_place(pk.k, g.writes);
          if (ok) {
            into = &g;
            inline_loads = true;
            break;
          }
        }
      }
    }
    if (!into) {
      Group g{std::move(pk.k), pk.level, pk.mergeable, {}, std::move(pk_reduces),
              tiles, pk_dims, pk_elements, pk_depth};
      g.writes = own;
      groups.push_back(std::move(g));
      continue;
    }
    if (inline_loads)
      for (auto it = pk.k.loads.begin(); it != pk.k.loads.end();)
        it = into->writes.count(pk.k.buffers[size_t(it->second)].get()) ? pk.k.loads.erase(it) : std::next(it);
    into->writes.insert(own.begin(), own.end());
    // an inlined consumer's values are now written where the group runs: its own consumers
    // (an optimizer's parameter update, after its moments' updates) may join the group too
    if (inline_loads)
      for (const Buffer* b : own) level_of[b->owner()] = into->level;
    into->reduces.insert(pk_reduces.begin(), pk_reduces.end());
    into->tiles |= tiles;
    into->depth = inline_loads ? into->depth + pk_depth : std::max(into->depth, pk_depth + (ride_along ? 2 : 0));
    Kernel& a = into->k;
    Kernel& b = pk.k;
    std::unordered_map<const Buffer*, int> index;
    for (size_t x = 0; x < a.buffers.size(); x++) index[a.buffers[x].get()] = int(x);
    auto id = [&](const BufferRef& buf) {
      auto it = index.find(buf.get());
      if (it != index.end()) return it->second;
      int v = int(a.buffers.size());
      a.buffers.push_back(buf);
      index[buf.get()] = v;
      return v;
    };
    for (auto o : b.outputs) {
      o.buffer = id(b.buffers[size_t(o.buffer)]);
      if (ride_along) {
        // Every iteration computes the scalar and stores it at element 0.
        // Threads may store it concurrently, always the same bits: the inputs
        // are not written by this kernel.
        Shape ones(a.shape.size(), 1);
        o.value = Tensor(o.value).reshape(ones).expand(a.shape).node();
        o.store = ShapeTracker::from_shape(ones).expand(a.shape);
      } else if (b.shape != a.shape) {
        o.value = Tensor(o.value).reshape(a.shape).node();
        o.store = ShapeTracker::from_shape(a.shape);
      }
      a.outputs.push_back(o);
    }
    // b's loads numbered in its buffers' order: its loads map is keyed by node address, and
    // iterating it numbered the merged kernel's buffers differently from run to run (another
    // kernel key each time: recompiled in every process, missing the disk cache)
    std::vector<int> merged(b.buffers.size(), -1);
    for (auto& load : b.loads) merged[size_t(load.second)] = 0;
    for (size_t x = 0; x < b.buffers.size(); x++)
      if (merged[x] == 0) merged[x] = id(b.buffers[x]);
    for (auto& [node, bi] : b.loads) a.loads[node] = merged[size_t(bi)];
    if (a.reason.find(b.reason) == std::string::npos) a.reason += "; " + b.reason;
  }
  // execution order: by level (stable)
  std::stable_sort(groups.begin(), groups.end(), [](const Group& x, const Group& y) { return x.level < y.level; });
  for (auto& g : groups) sched.kernels.push_back(std::move(g.k));
  sched.kernels.erase(std::remove_if(sched.kernels.begin(), sched.kernels.end(),
                                     [](const Kernel& k) { return k.outputs.empty(); }),
                      sched.kernels.end());
  for (auto& k : sched.kernels) read_windows(k, sched.originals);
  return sched;
}

}  // namespace

Schedule create_schedule(const std::vector<NodeRef>& targets, Device& device) {
  KeepNodesAlive keep;  // (the scheduler's maps are keyed by node addresses)
  const GraphRewrite expanded = expand_calls(targets);
  const GraphRewrite joined = join_contraction_sums(expanded.targets);
  Schedule sched = schedule_graph(joined.targets, device);
  if (!expanded.changed() && !joined.changed()) return sched;
  // The given graph's nodes a node of the scheduled one stands for
  auto originals_of = [&](const NodeRef& n) {
    std::vector<NodeRef> out;
    for (const NodeRef& e : joined.originals_of(n)) {
      std::vector<NodeRef> o = expanded.originals_of(e);
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  };
  // Buffers go to the given graph's nodes (rebuilt ones are the schedule's own).
  std::vector<std::pair<NodeRef, BufferRef>> realized;
  for (auto& [node, buf] : sched.realized) {
    std::vector<NodeRef> given = originals_of(node);
    for (const NodeRef& g : given) realized.emplace_back(g, buf);
    if (!given.empty()) continue;
    sched.internal.push_back(buf);
    for (const NodeRef& e : joined.originals_of(node))
      if (auto in = expanded.insides.find(e.get()); in != expanded.insides.end() && keeps_stored_values(in->second.first))
        sched.call_values.push_back({in->second.first, StoredValue{in->second.second, buf}});
  }
  // a call's output that is one of its arguments, stored already
  for (const NodeRef& t : joined.targets)
    if (t->realized())
      for (const NodeRef& g : originals_of(t)) realized.emplace_back(g, t->realized());
  sched.realized = std::move(realized);
  // (record() finds each kernel's work and launch values in the given graph through these; a
  // node made inside a call stands for the call, whose module a traced replay names)
  auto stand_in = [&](const NodeRef& e) -> const Node* {
    if (std::vector<NodeRef> o = expanded.originals_of(e); !o.empty()) return o[0].get();
    auto in = expanded.insides.find(e.get());
    return in != expanded.insides.end() ? in->second.first : nullptr;
  };
  std::vector<std::pair<const Node*, const Node*>> windows;  // read_windows' nodes, of the scheduled graph
  windows.swap(sched.originals);
  for (auto& [image, originals] : joined.originals)
    if (const Node* o = stand_in(originals[0])) sched.originals.emplace_back(image, o);
  for (auto& [image, originals] : expanded.originals) sched.originals.emplace_back(image, originals[0].get());
  for (auto& [image, inside] : expanded.insides) sched.originals.emplace_back(image, inside.first);
  for (auto& [made, from] : windows)
    for (const NodeRef& e : joined.originals_of(from->shared_from_this()))
      if (const Node* o = stand_in(e)) {
        sched.originals.emplace_back(made, o);
        break;
      }
  return sched;
}

}  // namespace tiny
