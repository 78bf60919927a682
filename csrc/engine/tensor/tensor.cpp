#include "engine/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "engine/runtime/device.h"
#include "engine/schedule/realize.h"

namespace tiny {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("tiny engine: " + msg); }

DType result_dtype(Op op, DType in) {
  if (is_comparison(op) || op == Op::IsNan) return DType::Bool;
  return in;
}

bool is_const(const Tensor& t) { return t.node()->op == Op::Const; }

// Scalar arithmetic for constant folding; nullopt when not folded.
std::optional<Scalar> fold(Op op, DType dt, const Scalar& a, const Scalar* b) {
  bool f = is_float(dt);
  auto num = [&](double v) { return (f ? Scalar::from_double(v) : Scalar::from_int(int64_t(v))).cast(dt); };
  auto integer = [&](int64_t v) { return Scalar::from_int(v).cast(dt); };
  switch (op) {
    case Op::Neg: return f ? num(-a.to_double()) : integer(int64_t(0ULL - uint64_t(a.to_int())));
    case Op::Add: return f ? num(a.to_double() + b->to_double()) : integer(int64_t(uint64_t(a.to_int()) + uint64_t(b->to_int())));
    case Op::Sub: return f ? num(a.to_double() - b->to_double()) : integer(int64_t(uint64_t(a.to_int()) - uint64_t(b->to_int())));
    case Op::Mul: return f ? num(a.to_double() * b->to_double()) : integer(int64_t(uint64_t(a.to_int()) * uint64_t(b->to_int())));
    case Op::Max: return f ? num(std::isnan(a.to_double()) || std::isnan(b->to_double()) ? NAN : std::max(a.to_double(), b->to_double()))
                           : integer(std::max(a.to_int(), b->to_int()));
    case Op::Min: return f ? num(std::isnan(a.to_double()) || std::isnan(b->to_double()) ? NAN : std::min(a.to_double(), b->to_double()))
                           : integer(std::min(a.to_int(), b->to_int()));
    default: return std::nullopt;
  }
}

// ---------------------------------------------------------------- sums of contractions

// A sum over one axis of a product (what matmul builds), maybe seen through a view.
struct Contraction {
  const Node* reduce = nullptr;
  const ShapeTracker* view = nullptr;  // over the reduce; nullptr: none
};

std::optional<Contraction> as_contraction(const NodeRef& n) {
  Contraction c;
  const Node* r = n.get();
  if (r->op == Op::View && !r->realized()) {
    c.view = &r->args.st;
    r = r->src[0].get();
  }
  if (r->op != Op::Reduce || r->realized() || r->args.rop != ReduceOp::Sum || r->args.axes.size() != 1) return std::nullopt;
  const Node* m = r->src[0].get();
  if (m->op != Op::Mul || m->realized()) return std::nullopt;
  c.reduce = r;
  return c;
}

// Concat chains longer than this are stored before they grow (an element never selects
// among more loads).
constexpr int kConcatChain = 16;

// Each element's index along `dim`.
Tensor positions(const Shape& shape, int dim) {
  Shape along(shape.size(), 1);
  along[size_t(dim)] = shape[size_t(dim)];
  return Tensor::arange(shape[size_t(dim)], Scalar::from_int(0), Scalar::from_int(1), DType::Int64).reshape(along).expand(shape);
}

// `parts` (at least two) joined along `dim` by a chain of selects over zero-padded views.
Tensor select_chain(const std::vector<Tensor>& parts, int dim) {
  Shape shape = parts[0].shape();
  int rank = int(shape.size());
  std::vector<int64_t> begins;
  int64_t total = 0;
  for (auto& p : parts) {
    if (p.ndim() != rank || p.dtype() != parts[0].dtype()) fail("concat: parts differ in rank or dtype");
    begins.push_back(total);
    total += p.shape()[size_t(dim)];
  }
  shape[size_t(dim)] = total;
  Tensor pos = positions(shape, dim);
  auto padded = [&](const Tensor& p, int64_t begin) {
    Ranges pads(size_t(rank), {0, 0});
    pads[size_t(dim)] = {begin, total - begin - p.shape()[size_t(dim)]};
    return p.pad(pads);
  };
  Tensor result = padded(parts.back(), begins.back());
  for (size_t k = parts.size() - 1; k-- > 0;) {
    Tensor inside = pos.binary(Op::CmpLt, Tensor::full(shape, Scalar::from_int(begins[k + 1]), DType::Int64));
    result = Tensor::where(inside, padded(parts[k], begins[k]), result);
  }
  return result;
}

// The parts `t` joins along `dim` where it is a select chain as select_chain builds it
// (each select's padded part valid exactly from where the previous one ends); else {t}.
std::vector<Tensor> chain_parts(const Tensor& t, int dim) {
  std::vector<Tensor> parts;
  int64_t begin = 0;
  auto take = [&](const NodeRef& padded, int64_t end) {
    if (padded->op != Op::View || padded->realized()) return false;
    const View& v = padded->args.st.views().back();
    if (!v.mask) return false;
    Ranges valid(padded->shape.size());
    for (size_t d = 0; d < valid.size(); d++) valid[d] = {0, padded->shape[d]};
    valid[size_t(dim)] = {begin, end};
    if (*v.mask != valid) return false;
    parts.push_back(Tensor(padded).shrink(valid));
    begin = end;
    return true;
  };
  NodeRef pos = positions(t.shape(), dim).node();
  auto is_select = [&](const Node& w) {  // where(position < bound, ...)
    return w.op == Op::Where && !w.realized() && w.src[0]->op == Op::CmpLt && !w.src[0]->realized() &&
           w.src[0]->src[0] == pos && w.src[0]->src[1]->op == Op::Const;
  };
  NodeRef n = t.node();
  for (; is_select(*n); n = n->src[2])
    if (!take(n->src[1], n->src[0]->src[1]->args.value.to_int())) return {t};
  if (parts.empty() || !take(n, t.shape()[size_t(dim)])) return {t};
  return parts;
}

// `parts` with runs stored so that a chain stays short: the newest kConcatChain parts, once
// of one extent along `dim`, become one stored part (a counter in base kConcatChain: each
// part is copied about log(T) / log(kConcatChain) times over T joins), and the oldest
// kConcatChain where the chain is still twice that long.
std::vector<Tensor> short_chain(std::vector<Tensor> parts, int dim) {
  auto store = [&](size_t from) {
    std::vector<Tensor> run(parts.begin() + long(from), parts.begin() + long(from + kConcatChain));
    parts.erase(parts.begin() + long(from), parts.begin() + long(from + kConcatChain));
    parts.insert(parts.begin() + long(from), select_chain(run, dim).contiguous());
  };
  while (parts.size() >= size_t(kConcatChain)) {
    size_t from = parts.size() - size_t(kConcatChain);
    bool even = true;
    for (size_t i = from; i < parts.size(); i++) even &= parts[i].shape()[size_t(dim)] == parts[from].shape()[size_t(dim)];
    if (even) store(from);
    else if (parts.size() >= 2 * size_t(kConcatChain)) store(0);
    else break;
  }
  return parts;
}

// Contractions over at most this many steps are joined with the others they are added to.
constexpr int64_t kShortContraction = 64;

// x + y, both sums of products over one short axis with the same result (autograd adding
// up a weight's gradient from every time step of an RNN, each a product over one step's
// batch), as one sum over both axes joined: its kernel then tiles one product instead of
// running each short one in plain loops. Each factor is joined with the other's factor
// that is broadcast along the same dims, without its broadcast (one step's rows, not
// their product with the columns).
std::optional<Tensor> joined_contraction(const Tensor& x, const Tensor& y) {
  auto cx = as_contraction(x.node()), cy = as_contraction(y.node());
  if (!cx || !cy) return std::nullopt;
  const Node &rx = *cx->reduce, &ry = *cy->reduce;
  if (rx.shape != ry.shape || rx.dtype != ry.dtype || rx.args.axes != ry.args.axes || rx.args.tf32 != ry.args.tf32)
    return std::nullopt;
  if (bool(cx->view) != bool(cy->view) || (cx->view && !(*cx->view == *cy->view))) return std::nullopt;
  const Node &mx = *rx.src[0], &my = *ry.src[0];
  int axis = rx.args.axes[0];
  int64_t kx = mx.shape[size_t(axis)], ky = my.shape[size_t(axis)];
  if (std::min(kx, ky) > kShortContraction || mx.numel() == 0 || my.numel() == 0) return std::nullopt;
  std::vector<bool> bx[2], by[2];
  for (int f = 0; f < 2; f++) {
    bx[f] = constant_dims(*mx.src[size_t(f)]);
    by[f] = constant_dims(*my.src[size_t(f)]);
    bx[f][size_t(axis)] = by[f][size_t(axis)] = false;
  }
  // Factors pair up where one is broadcast along a subset of the other's broadcast dims (a
  // zero initial state is broadcast along all); they are joined broadcast along the subset.
  auto common = [](const std::vector<bool>& a, const std::vector<bool>& b) -> std::optional<std::vector<bool>> {
    std::vector<bool> both(a.size());
    for (size_t d = 0; d < a.size(); d++) both[d] = a[d] && b[d];
    if (both != a && both != b) return std::nullopt;
    return both;
  };
  int pair_of_first = -1;  // y's factor that pairs with x's first
  std::vector<bool> unbroadcast[2];
  for (int p = 0; p < 2 && pair_of_first < 0; p++) {
    auto first = common(bx[0], by[p]), second = common(bx[1], by[1 - p]);
    if (!first || !second) continue;
    pair_of_first = p;
    unbroadcast[0] = *first;
    unbroadcast[1] = *second;
  }
  if (pair_of_first < 0) return std::nullopt;
  Shape joined_shape = mx.shape;
  joined_shape[size_t(axis)] = kx + ky;
  Tensor factors[2];
  for (int f = 0; f < 2; f++) {
    auto part = [&](const NodeRef& n, int64_t k) {
      Ranges r;
      for (size_t d = 0; d < mx.shape.size(); d++) r.push_back({0, unbroadcast[f][d] ? 1 : mx.shape[d]});
      r[size_t(axis)] = {0, k};
      return Tensor(n).shrink(r);
    };
    std::vector<Tensor> parts = chain_parts(part(mx.src[size_t(f)], kx), axis);
    for (Tensor& p : chain_parts(part(my.src[size_t(f == 0 ? pair_of_first : 1 - pair_of_first)], ky), axis))
      parts.push_back(p);
    factors[f] = select_chain(short_chain(std::move(parts), axis), axis).expand(joined_shape);
  }
  Tensor sum = factors[0].binary(Op::Mul, factors[1]).reduce(ReduceOp::Sum, {axis}, true, rx.args.tf32);
  return cx->view ? sum.view(*cx->view) : sum;
}

}  // namespace

std::vector<NodeRef> GraphRewrite::originals_of(const NodeRef& n) const {
  if (!changed()) return {n};
  std::vector<NodeRef> out;
  if (given.count(n.get())) out.push_back(n);
  if (auto it = originals.find(n.get()); it != originals.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  return out;
}

GraphRewrite rewrite_graph(const std::vector<NodeRef>& targets, const std::vector<const Node*>& order,
                           const std::function<std::optional<Tensor>(const Node&, const std::vector<NodeRef>&)>& replace) {
  GraphRewrite rewrite;
  rewrite.targets = targets;
  std::unordered_map<const Node*, NodeRef> image;  // of the nodes that changed
  std::unordered_map<const Node*, NodeRef> ref;
  for (auto& t : targets) ref.emplace(t.get(), t);
  KeepOrigin keep;
  for (const Node* n : order) {
    std::vector<NodeRef> src(n->src.begin(), n->src.end());
    bool changed = false;
    for (NodeRef& s : src) {
      ref.emplace(s.get(), s);
      auto it = image.find(s.get());
      if (it == image.end()) continue;
      s = it->second;
      changed = true;
    }
    keep.as(*n);
    std::optional<Tensor> rebuilt = replace(*n, src);
    if (!rebuilt && changed)  // a view through view(), which merges it into a view below
      rebuilt = n->op == Op::View ? Tensor(src[0]).view(n->args.st)
                                  : Tensor(make_node(n->op, n->dtype, n->shape, Sources(src.begin(), src.end()), n->args));
    if (rebuilt && rebuilt->node().get() != n) image.emplace(n, rebuilt->node());
  }
  for (NodeRef& t : rewrite.targets)
    if (auto it = image.find(t.get()); it != image.end()) t = it->second;
  for (auto& [n, img] : image) rewrite.originals[img.get()].push_back(ref.at(n));
  if (rewrite.changed()) rewrite.given.insert(order.begin(), order.end());
  return rewrite;
}

GraphRewrite join_contraction_sums(const std::vector<NodeRef>& targets) {
  std::vector<const Node*> order = toposort(targets);
  // The first join adds two products of the given graph: without one, nothing changes.
  auto is_product = [](const NodeRef& n) { return as_contraction(n).has_value(); };
  if (std::none_of(order.begin(), order.end(), [&](const Node* n) {
        return n->op == Op::Add && is_product(n->src[0]) && is_product(n->src[1]);
      }))
    return GraphRewrite{targets, {}, {}};
  return rewrite_graph(targets, order, [](const Node& n, const std::vector<NodeRef>& src) -> std::optional<Tensor> {
    if (n.op != Op::Add) return std::nullopt;
    return joined_contraction(Tensor(src[0]), Tensor(src[1]));
  });
}

Tensor Tensor::full(const Shape& shape, Scalar value, DType dtype) {
  NodeArgs a;
  a.value = value.cast(dtype);
  return Tensor(make_node(Op::Const, dtype, shape, {}, std::move(a)));
}

Tensor Tensor::param(const Shape& shape, Scalar value, DType dtype) {
  NodeArgs a;
  a.value = value.cast(dtype);
  return Tensor(make_node(Op::Param, dtype, shape, {}, std::move(a)));
}

Tensor Tensor::from_buffer(BufferRef buffer, const Shape& shape) {
  if (tiny::numel(shape) != buffer->numel()) fail("from_buffer: numel mismatch");
  NodeArgs a;
  DType dt = buffer->dtype();
  a.buffer = std::move(buffer);
  return Tensor(make_node(Op::Buffer, dt, shape, {}, std::move(a)));
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, Device& device) {
  auto buf = std::make_shared<Buffer>(&device, dtype, tiny::numel(shape));
  if (buf->nbytes()) buf->copy_in(data, buf->nbytes());
  return from_buffer(std::move(buf), shape);
}

Tensor Tensor::arange(int64_t n, Scalar start, Scalar step, DType dtype) {
  NodeArgs a;
  a.value = start;
  a.value2 = step;
  return Tensor(make_node(Op::Arange, dtype, {n}, {}, std::move(a)));
}

Tensor Tensor::rand(const Shape& shape, uint64_t seed, uint64_t offset) {
  NodeArgs a;
  a.seed = seed;
  a.offset = offset;
  return Tensor(make_node(Op::Rand, DType::Float32, shape, {}, std::move(a)));
}

Tensor Tensor::unary(Op op) const {
  if (!is_unary(op) || op == Op::Cast || op == Op::Bitcast) fail(std::string("not a unary op: ") + op_name(op));
  if (!op_accepts(op, dtype())) fail(std::string(op_name(op)) + " does not take " + dtype_name(dtype()));
  DType out = result_dtype(op, dtype());
  if (is_const(*this)) {
    if (auto v = fold(op, dtype(), node_->args.value, nullptr)) return full(shape(), *v, out);
  }
  return Tensor(make_node(op, out, shape(), {node_}));
}

Tensor Tensor::binary(Op op, const Tensor& other) const {
  if (!is_binary(op)) fail(std::string("not a binary op: ") + op_name(op));
  if (shape() != other.shape()) fail(std::string(op_name(op)) + ": shapes differ " + shape_str(shape()) + " vs " + shape_str(other.shape()));
  if (dtype() != other.dtype()) fail(std::string(op_name(op)) + ": dtypes differ");
  if (!op_accepts(op, dtype())) fail(std::string(op_name(op)) + " does not take " + dtype_name(dtype()));
  DType out = result_dtype(op, dtype());
  if (is_const(*this) && is_const(other)) {
    if (auto v = fold(op, dtype(), node_->args.value, &other.node_->args.value)) return full(shape(), *v, out);
  }
  return Tensor(make_node(op, out, shape(), {node_, other.node_}));
}

Tensor Tensor::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.shape() != a.shape() || a.shape() != b.shape()) fail("where: shapes differ");
  if (a.dtype() != b.dtype()) fail("where: dtypes differ");
  if (cond.dtype() != DType::Bool) fail("where: condition must be bool");
  if (is_const(cond)) return cond.node_->args.value.i ? a : b;
  return Tensor(make_node(Op::Where, a.dtype(), a.shape(), {cond.node_, a.node_, b.node_}));
}

Tensor Tensor::cast(DType dt) const {
  if (dt == dtype()) return *this;
  if (is_const(*this)) return full(shape(), node_->args.value.cast(dt), dt);
  if (node_->op == Op::Param) return param(shape(), node_->args.value.cast(dt), dt);
  return Tensor(make_node(Op::Cast, dt, shape(), {node_}));
}

Tensor Tensor::bitcast(DType dt) const {
  if (dt == dtype()) return *this;
  Shape s = shape();
  if (itemsize(dt) != itemsize(dtype())) {
    if (s.size() != 1) fail("bitcast between itemsizes needs a 1-D tensor");
    size_t bytes = size_t(s[0]) * itemsize(dtype());
    if (bytes % itemsize(dt)) fail("bitcast: byte size not divisible");
    s[0] = int64_t(bytes / itemsize(dt));
  }
  return Tensor(make_node(Op::Bitcast, dt, s, {node_}));
}

BufferRef window_alias(const BufferRef& base, int64_t lo, int64_t n) {
  struct Key {
    const Buffer* base;
    int64_t lo, n;
    bool operator==(const Key& o) const { return base == o.base && lo == o.lo && n == o.n; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.base) ^ (std::hash<int64_t>()(k.lo) * 31) ^ (std::hash<int64_t>()(k.n) * 131);
    }
  };
  // A live alias keeps its base alive, so a live entry's base pointer is that base.
  static auto* windows = new std::unordered_map<Key, std::weak_ptr<Buffer>, KeyHash>();
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  Key key{base.get(), lo, n};
  auto it = windows->find(key);
  if (it != windows->end())
    if (BufferRef alive = it->second.lock()) return alive;
  // Expired entries go when the map has doubled since the last sweep: a sweep per call, once
  // more than a fixed count were alive (a 2000-step LSTM's windows), cost O(windows^2).
  static size_t sweep_at = 4096;
  if (windows->size() > sweep_at) {
    for (auto e = windows->begin(); e != windows->end();) e = e->second.expired() ? windows->erase(e) : std::next(e);
    sweep_at = std::max<size_t>(4096, 2 * windows->size());
  }
  auto alias = std::make_shared<Buffer>(base, base->dtype(), n, size_t(lo) * itemsize(base->dtype()));
  (*windows)[key] = alias;
  return alias;
}

namespace {

// A view reading only part of stored data reads an alias of just that part:
// a graph that differs only in where the part starts (a batch slice, a
// rolling window) then has the same key, so its schedule and programs are
// reused with the start passed as the alias's address. Returns false when the
// view reads the whole buffer (or nothing).
bool window_of_stored(const NodeRef& base, const ShapeTracker& st, NodeRef* window, ShapeTracker* rebased) {
  BufferRef buf = base->realized();
  if (!buf || buf->dtype() != base->dtype || buf->numel() != base->numel()) return false;
  int64_t lo, hi;
  if (!st.window(buf->numel(), &lo, &hi, rebased)) return false;
  *window = Tensor::from_buffer(window_alias(buf, lo, hi - lo), {hi - lo}).node();
  return true;
}

// `st` (over base's row-major elements) as a tensor: the base itself when it
// is the identity, a constant when the base is one and nothing is masked.
Tensor view_over(const NodeRef& base, const ShapeTracker& st) {
  if (st.is_contiguous() && st.shape() == base->shape) return Tensor(base);
  NodeRef window;
  ShapeTracker rebased;
  if (window_of_stored(base, st, &window, &rebased)) return view_over(window, rebased);
  if (base->op == Op::Const || base->op == Op::Param) {
    if (!st.masked()) return base->op == Op::Const ? Tensor::full(st.shape(), base->args.value, base->dtype)
                                              : Tensor::param(st.shape(), base->args.value, base->dtype);
  }
  NodeArgs a;
  a.st = st;
  return Tensor(make_node(Op::View, base->dtype, st.shape(), {base}, std::move(a)));
}

bool pending_view(const NodeRef& n) { return n->op == Op::View && !n->realized(); }

// A movement op on a pending view applies to its tracker directly (one
// tracker over the base, masks moved by the op itself); otherwise it starts
// from this tensor's shape.
template <typename F>
Tensor movement(const Tensor& t, F&& op) {
  const NodeRef& n = t.node();
  if (pending_view(n)) return view_over(n->src[0], op(n->args.st));
  return view_over(n, op(ShapeTracker::from_shape(t.shape())));
}

}  // namespace

Tensor Tensor::view(const ShapeTracker& st) const {
  // View of a view: one tracker over the innermost source.
  if (pending_view(node_)) return view_over(node_->src[0], st.compose_onto(node_->args.st));
  return view_over(node_, st);
}

Tensor Tensor::concat(std::vector<Tensor> parts, int dim) {
  parts.erase(std::remove_if(parts.begin(), parts.end(), [&](const Tensor& p) { return p.shape()[size_t(dim)] == 0; }),
              parts.end());
  if (parts.empty()) return Tensor();
  if (parts.size() == 1) return parts[0];
  // Long lists are joined in groups (each stored once): an element never selects among
  // more than kConcatChain loads.
  if (parts.size() > size_t(kConcatChain)) {
    std::vector<Tensor> groups;
    for (size_t i = 0; i < parts.size(); i += kConcatChain) {
      std::vector<Tensor> g(parts.begin() + long(i), parts.begin() + long(std::min(parts.size(), i + kConcatChain)));
      groups.push_back(g.size() == 1 ? g[0] : select_chain(g, dim).contiguous());
    }
    return concat(groups, dim);
  }
  return select_chain(parts, dim);
}

Tensor Tensor::reshape(const Shape& s) const {
  if (tiny::numel(s) != numel()) fail("reshape: " + shape_str(shape()) + " -> " + shape_str(s));
  if (s == shape()) return *this;
  return movement(*this, [&](const ShapeTracker& st) { return st.reshape(s); });
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  if (int(order.size()) != ndim()) fail("permute: wrong number of dims");
  std::vector<bool> seen(size_t(ndim()), false);
  for (int o : order) {
    if (o < 0 || o >= ndim() || seen[size_t(o)]) fail("permute: not a permutation");
    seen[size_t(o)] = true;
  }
  bool identity = true;
  for (int i = 0; i < ndim(); i++) identity &= order[i] == i;
  if (identity) return *this;
  return movement(*this, [&](const ShapeTracker& st) { return st.permute(order); });
}

Tensor Tensor::expand(const Shape& s) const {
  if (s == shape()) return *this;
  if (s.size() != shape().size()) fail("expand: rank mismatch");
  return movement(*this, [&](const ShapeTracker& st) { return st.expand(s); });
}

Tensor Tensor::pad(const Ranges& pads) const {
  if (int(pads.size()) != ndim()) fail("pad: one (before, after) per dim");
  for (auto& p : pads)
    if (p.first < 0 || p.second < 0) fail("pad: negative padding");
  return movement(*this, [&](const ShapeTracker& st) { return st.pad(pads); });
}

Tensor Tensor::shrink(const Ranges& ranges) const {
  if (int(ranges.size()) != ndim()) fail("shrink: one [begin, end) per dim");
  for (int i = 0; i < ndim(); i++)
    if (ranges[size_t(i)].first < 0 || ranges[size_t(i)].first > ranges[size_t(i)].second ||
        ranges[size_t(i)].second > shape()[size_t(i)])
      fail("shrink: range out of bounds");
  return movement(*this, [&](const ShapeTracker& st) { return st.shrink(ranges); });
}

Tensor Tensor::flip(const std::vector<bool>& dims) const {
  if (int(dims.size()) != ndim()) fail("flip: one flag per dim");
  return movement(*this, [&](const ShapeTracker& st) { return st.flip(dims); });
}

Tensor Tensor::as_strided(const Shape& s, const Shape& strides, int64_t offset) const {
  if (s.size() != strides.size()) fail("as_strided: shape and strides differ in rank");
  return movement(*this, [&](const ShapeTracker& st) { return st.as_strided(s, strides, offset); });
}

Tensor Tensor::reduce(ReduceOp op, std::vector<int> axes, bool keepdim, bool tf32) const {
  for (auto& a : axes) {
    if (a < 0) a += ndim();
    if (a < 0 || a >= ndim()) fail("reduce: axis out of range");
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  Shape out = shape();
  for (int a : axes) out[a] = 1;
  DType dt = (op == ReduceOp::Any || op == ReduceOp::All) ? DType::Bool : dtype();
  if (op == ReduceOp::Xor && is_float(dt)) fail("reduce: XOR needs an integer or bool dtype");
  Tensor r;
  // Reducing only size-1 axes is the identity.
  bool trivial = true;
  for (int a : axes) trivial &= shape()[a] == 1;
  if (trivial && dt == dtype()) {
    r = *this;
  } else {
    NodeArgs args;
    args.axes = axes;
    args.rop = op;
    args.tf32 = tf32 && op == ReduceOp::Sum && dt == DType::Float32;
    r = Tensor(make_node(Op::Reduce, dt, out, {node_}, std::move(args)));
  }
  if (!keepdim) {
    Shape squeezed;
    for (int i = 0; i < ndim(); i++)
      if (!std::binary_search(axes.begin(), axes.end(), i)) squeezed.push_back(out[i]);
    r = r.reshape(squeezed);
  }
  return r;
}

Tensor Tensor::matmul(const Tensor& other, bool tf32) const {
  if (ndim() < 2 || other.ndim() != ndim()) fail("matmul: operands need the same rank >= 2");
  int n = ndim();
  int64_t rows = shape()[n - 2], k = shape()[n - 1], cols = other.shape()[n - 1];
  if (other.shape()[n - 2] != k) fail("matmul: inner dims differ");
  // (..., rows, 1, k) * (..., 1, cols, k) summed over k
  Shape a_shape = shape(), b_shape = other.shape();
  Shape ea(a_shape.begin(), a_shape.end() - 2), eb = ea;
  for (int i = 0; i < n - 2; i++)
    if (a_shape[i] != b_shape[i]) fail("matmul: batch dims differ");
  Shape full = ea;
  full.insert(full.end(), {rows, cols, k});
  ea.insert(ea.end(), {rows, 1, k});
  std::vector<int> perm;
  for (int i = 0; i < n - 2; i++) perm.push_back(i);
  perm.push_back(n - 1);
  perm.push_back(n - 2);
  eb.insert(eb.end(), {1, cols, k});
  // Each factor's movements applied to one tracker: one view node each, not one per movement
  // (half of a step's matmul nodes, each built, hashed and freed).
  Tensor a_full = movement(*this, [&](const ShapeTracker& st) { return st.reshape(ea).expand(full); });
  Tensor b_full = movement(other, [&](const ShapeTracker& st) { return st.permute(perm).reshape(eb).expand(full); });
  Tensor prod = a_full.binary(Op::Mul, b_full);
  return prod.reduce(ReduceOp::Sum, {n}, false, tf32);
}

Tensor Tensor::contiguous() const {
  if (node_->op == Op::Buffer || node_->realized()) return *this;
  // A row-major window of stored data is already contiguous: realizing it
  // aliases the stored bytes instead of copying them.
  if (node_->op == Op::View && node_->args.st.is_contiguous() && node_->src[0]->realized()) return *this;
  return Tensor(make_node(Op::Contiguous, dtype(), shape(), {node_}));
}

Tensor Tensor::write_strided(const Shape& s, const Shape& strides, int64_t offset, const Tensor& value) const {
  if (ndim() != 1) fail("write_strided: base must be 1-D");
  if (value.shape() != s) fail("write_strided: value shape mismatch");
  if (value.dtype() != dtype()) fail("write_strided: dtype mismatch");
  if (tiny::numel(s) == 0) return *this;
  NodeArgs a;
  a.st = ShapeTracker::from_shape(shape()).as_strided(s, strides, offset);
  return Tensor(make_node(Op::Write, dtype(), shape(), {node_, value.node_}, std::move(a)));
}

Tensor Tensor::gather(const Tensor& index) const {
  if (index.dtype() != DType::Int64) fail("gather: index must be int64");
  return Tensor(make_node(Op::Gather, dtype(), index.shape(), {node_, index.node_}));
}

Tensor Tensor::scatter(const Tensor& index, const Tensor& src, bool accumulate, ReduceOp op) const {
  if (ndim() != 1) fail("scatter: base must be 1-D");
  if (index.dtype() != DType::Int64) fail("scatter: index must be int64");
  if (index.shape() != src.shape()) fail("scatter: index and src shapes differ");
  if (src.dtype() != dtype()) fail("scatter: dtype mismatch");
  if (index.numel() == 0) return *this;
  NodeArgs a;
  a.accumulate = accumulate;
  a.rop = op;
  return Tensor(make_node(Op::Scatter, dtype(), shape(), {node_, index.node_, src.node_}, std::move(a)));
}

void Tensor::realize() const { realize_nodes({node_}); }

void Tensor::realize_all(const std::vector<Tensor>& tensors) {
  std::vector<NodeRef> nodes;
  for (auto& t : tensors) nodes.push_back(t.node_);
  realize_nodes(nodes);
}

void Tensor::copy_to_host(void* dst) const {
  copy_to_host(dst, 0, size_t(numel()) * itemsize(dtype()));
}

void Tensor::copy_to_host(void* dst, size_t offset, size_t nbytes) const {
  if (nbytes == 0) return;
  realize();
  node_->realized()->copy_out(dst, nbytes, offset);
}

}  // namespace tiny
