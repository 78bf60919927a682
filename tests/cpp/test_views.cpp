// ShapeTracker against a materialized reference: every movement op is applied
// to an explicit array of element ids, and for every index the tracker's
// eval_index and its symbolic index/validity (run by the test's interpreter)
// must name the same element (or none, for padding). The same chains then run
// through the engine on real data.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

// ---- the reference: an explicit array of base element ids (-1 = padding zero)

struct Ref {
  Shape shape;
  std::vector<int64_t> ids;  // row-major
};

int64_t flat_of(const Shape& s, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); d++) f = f * s[d] + idx[d];
  return f;
}

Ref ref_base(const Shape& s) {
  Ref r{s, std::vector<int64_t>(size_t(numel(s)))};
  std::iota(r.ids.begin(), r.ids.end(), 0);
  return r;
}

template <typename F>
Ref ref_map(const Shape& out, F&& src_id) {
  Ref r{out, {}};
  for_each_index(out, [&](const std::vector<int64_t>& idx) { r.ids.push_back(src_id(idx)); });
  return r;
}

// ---- one movement op, applicable to the reference, a ShapeTracker and a Tensor

struct MoveOp {
  enum Kind { Reshape, Permute, Expand, Pad, Shrink, Flip, AsStrided } kind = Reshape;
  Shape shape;               // Reshape, Expand, AsStrided
  std::vector<int> order;    // Permute
  Ranges ranges;             // Pad (before, after), Shrink [begin, end)
  std::vector<bool> flips;   // Flip
  Shape strides;             // AsStrided
  int64_t offset = 0;        // AsStrided

  static MoveOp make(Kind k) {
    MoveOp o;
    o.kind = k;
    return o;
  }
  static MoveOp reshape(Shape s) { MoveOp o = make(Reshape); o.shape = std::move(s); return o; }
  static MoveOp permute(std::vector<int> order) { MoveOp o = make(Permute); o.order = std::move(order); return o; }
  static MoveOp expand(Shape s) { MoveOp o = make(Expand); o.shape = std::move(s); return o; }
  static MoveOp pad(Ranges r) { MoveOp o = make(Pad); o.ranges = std::move(r); return o; }
  static MoveOp shrink(Ranges r) { MoveOp o = make(Shrink); o.ranges = std::move(r); return o; }
  static MoveOp flip(std::vector<bool> f) { MoveOp o = make(Flip); o.flips = std::move(f); return o; }
  static MoveOp as_strided(Shape s, Shape st, int64_t off) {
    MoveOp o = make(AsStrided);
    o.shape = std::move(s);
    o.strides = std::move(st);
    o.offset = off;
    return o;
  }

  std::string str() const {
    std::ostringstream os;
    auto rs = [&] {
      for (auto& r : ranges) os << "(" << r.first << "," << r.second << ")";
    };
    switch (kind) {
      case Reshape: os << "reshape" << shape_str(shape); break;
      case Permute:
        os << "permute(";
        for (int o : order) os << o << ",";
        os << ")";
        break;
      case Expand: os << "expand" << shape_str(shape); break;
      case Pad: os << "pad"; rs(); break;
      case Shrink: os << "shrink"; rs(); break;
      case Flip:
        os << "flip(";
        for (bool f : flips) os << f;
        os << ")";
        break;
      case AsStrided: os << "as_strided" << shape_str(shape) << shape_str(strides) << "+" << offset; break;
    }
    return os.str();
  }
};

Ref apply(const Ref& a, const MoveOp& op) {
  const Shape& in = a.shape;
  auto at = [&](const std::vector<int64_t>& idx) { return a.ids[size_t(flat_of(in, idx))]; };
  switch (op.kind) {
    case MoveOp::Reshape: return Ref{op.shape, a.ids};
    case MoveOp::Permute: {
      Shape out;
      for (int o : op.order) out.push_back(in[size_t(o)]);
      return ref_map(out, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> s(in.size());
        for (size_t i = 0; i < idx.size(); i++) s[size_t(op.order[i])] = idx[i];
        return at(s);
      });
    }
    case MoveOp::Expand:
      return ref_map(op.shape, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> s = idx;
        for (size_t d = 0; d < s.size(); d++)
          if (in[d] == 1) s[d] = 0;
        return at(s);
      });
    case MoveOp::Pad: {
      Shape out = in;
      for (size_t d = 0; d < in.size(); d++) out[d] += op.ranges[d].first + op.ranges[d].second;
      return ref_map(out, [&](const std::vector<int64_t>& idx) -> int64_t {
        std::vector<int64_t> s = idx;
        for (size_t d = 0; d < s.size(); d++) {
          s[d] -= op.ranges[d].first;
          if (s[d] < 0 || s[d] >= in[d]) return -1;
        }
        return at(s);
      });
    }
    case MoveOp::Shrink: {
      Shape out;
      for (auto& r : op.ranges) out.push_back(r.second - r.first);
      return ref_map(out, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> s = idx;
        for (size_t d = 0; d < s.size(); d++) s[d] += op.ranges[d].first;
        return at(s);
      });
    }
    case MoveOp::Flip:
      return ref_map(in, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> s = idx;
        for (size_t d = 0; d < s.size(); d++)
          if (op.flips[d]) s[d] = in[d] - 1 - s[d];
        return at(s);
      });
    case MoveOp::AsStrided:
      return ref_map(op.shape, [&](const std::vector<int64_t>& idx) {
        int64_t f = op.offset;
        for (size_t d = 0; d < idx.size(); d++) f += idx[d] * op.strides[d];
        return a.ids[size_t(f)];
      });
  }
  return a;
}

ShapeTracker apply(const ShapeTracker& st, const MoveOp& op) {
  switch (op.kind) {
    case MoveOp::Reshape: return st.reshape(op.shape);
    case MoveOp::Permute: return st.permute(op.order);
    case MoveOp::Expand: return st.expand(op.shape);
    case MoveOp::Pad: return st.pad(op.ranges);
    case MoveOp::Shrink: return st.shrink(op.ranges);
    case MoveOp::Flip: return st.flip(op.flips);
    case MoveOp::AsStrided: return st.as_strided(op.shape, op.strides, op.offset);
  }
  return st;
}

Tensor apply(const Tensor& t, const MoveOp& op) {
  switch (op.kind) {
    case MoveOp::Reshape: return t.reshape(op.shape);
    case MoveOp::Permute: return t.permute(op.order);
    case MoveOp::Expand: return t.expand(op.shape);
    case MoveOp::Pad: return t.pad(op.ranges);
    case MoveOp::Shrink: return t.shrink(op.ranges);
    case MoveOp::Flip: return t.flip(op.flips);
    case MoveOp::AsStrided: return t.as_strided(op.shape, op.strides, op.offset);
  }
  return t;
}

// What Tensor::view does with a chain: each op is a fresh tracker over the
// current shape, composed onto the tracker so far.
ShapeTracker apply_composed(const ShapeTracker& below, const MoveOp& op) {
  Shape cur = below.shape();
  ShapeTracker top = op.kind == MoveOp::AsStrided ? ShapeTracker::from_shape({numel(cur)})
                                                 : ShapeTracker::from_shape(cur);
  return apply(top, op).compose_onto(below);
}

std::string chain_str(const Shape& base, const std::vector<MoveOp>& ops) {
  std::string s = "base" + shape_str(base);
  for (auto& o : ops) s += " -> " + o.str();
  return s;
}

// Checks eval_index and the symbolic index_valid of `st` against `ref` at every index.
// Returns false (after one failure message) on the first mismatch.
bool check_tracker(const ShapeTracker& st, const Ref& ref, const std::string& what) {
  if (st.shape() != ref.shape) {
    ADD_FAILURE() << what << ": shape " << shape_str(st.shape()) << " != " << shape_str(ref.shape);
    return false;
  }
  std::vector<Expr> vars;
  for (size_t d = 0; d < ref.shape.size(); d++) vars.push_back(var(int(d), ref.shape[d]));
  auto [ix, valid] = st.index_valid(vars);
  bool ok = true;
  for_each_index(ref.shape, [&](const std::vector<int64_t>& idx) {
    if (!ok) return;
    int64_t want = ref.ids[size_t(flat_of(ref.shape, idx))];
    int64_t got = st.eval_index(idx);
    int64_t v = eval_expr(valid, idx);
    int64_t i = v ? eval_expr(ix, idx) : -1;
    if (got != want || v != (want >= 0) || i != want) {
      std::ostringstream os;
      for (auto x : idx) os << x << ",";
      ADD_FAILURE() << what << "\n  tracker " << st.str() << "\n  at (" << os.str() << "): want " << want
                    << " eval_index " << got << " valid " << v << " index " << i << "\n  index expr "
                    << to_string(ix) << "\n  valid expr " << to_string(valid);
      ok = false;
    }
  });
  return ok;
}

// ---- enumerating ops

std::vector<Shape> small_shapes(int max_rank, std::vector<int64_t> dims) {
  std::vector<Shape> out{{}};
  std::vector<Shape> frontier{{}};
  for (int r = 1; r <= max_rank; r++) {
    std::vector<Shape> next;
    for (auto& s : frontier)
      for (auto d : dims) {
        Shape t = s;
        t.push_back(d);
        next.push_back(t);
      }
    out.insert(out.end(), next.begin(), next.end());
    frontier = next;
  }
  return out;
}

// Every shape of rank <= max_rank (dims >= 1) with the given numel.
std::vector<Shape> factorizations(int64_t n, int max_rank) {
  std::vector<Shape> out;
  std::function<void(int64_t, Shape&)> rec = [&](int64_t rest, Shape& cur) {
    if (rest == 1) out.push_back(cur);
    if (int(cur.size()) == max_rank) return;
    for (int64_t d = 1; d <= rest; d++) {
      if (rest % d) continue;
      cur.push_back(d);
      rec(rest / d, cur);
      cur.pop_back();
    }
  };
  Shape cur;
  if (n == 0) {
    for (auto s : std::vector<Shape>{{0}, {2, 0}, {0, 3}, {1, 0, 1}}) out.push_back(s);
    return out;
  }
  rec(n, cur);
  return out;
}

std::vector<MoveOp> all_single_ops(const Shape& s, int max_reshape_rank = 4) {
  std::vector<MoveOp> ops;
  int r = int(s.size());
  for (auto& t : factorizations(numel(s), max_reshape_rank)) ops.push_back(MoveOp::reshape(t));
  std::vector<int> order(static_cast<size_t>(r));
  std::iota(order.begin(), order.end(), 0);
  do {
    MoveOp o = MoveOp::make(MoveOp::Permute);
    o.order = order;
    ops.push_back(o);
  } while (std::next_permutation(order.begin(), order.end()));
  // expand every subset of size-1 dims to 3
  for (int mask = 1; mask < (1 << r); mask++) {
    Shape t = s;
    bool ok = true;
    for (int d = 0; d < r; d++)
      if (mask >> d & 1) {
        if (s[size_t(d)] != 1) ok = false;
        t[size_t(d)] = 3;
      }
    if (ok) ops.push_back(MoveOp::expand(t));
  }
  for (int mask = 0; mask < (1 << r); mask++) {
    MoveOp o = MoveOp::make(MoveOp::Flip);
    for (int d = 0; d < r; d++) o.flips.push_back(mask >> d & 1);
    ops.push_back(o);
  }
  // every shrink and every pad with (before, after) in [0,2] x [0,1]
  std::function<void(int, Ranges&, bool)> rec = [&](int d, Ranges& cur, bool pad) {
    if (d == r) {
      MoveOp o = MoveOp::make(pad ? MoveOp::Pad : MoveOp::Shrink);
      o.ranges = cur;
      ops.push_back(o);
      return;
    }
    if (pad) {
      for (int64_t b = 0; b <= 2; b++)
        for (int64_t e = 0; e <= 1; e++) {
          cur.push_back({b, e});
          rec(d + 1, cur, pad);
          cur.pop_back();
        }
    } else {
      for (int64_t b = 0; b <= s[size_t(d)]; b++)
        for (int64_t e = b; e <= s[size_t(d)]; e++) {
          cur.push_back({b, e});
          rec(d + 1, cur, pad);
          cur.pop_back();
        }
    }
  };
  Ranges cur;
  rec(0, cur, true);
  rec(0, cur, false);
  // a few strided windows: overlapping, broadcasting, transposing, offset
  int64_t n = numel(s);
  if (n >= 1) {
    ops.push_back(MoveOp::as_strided({n}, {1}, 0));
    ops.push_back(MoveOp::as_strided({2, 3}, {0, 0}, n - 1));
    if (n >= 2) ops.push_back(MoveOp::as_strided({n - 1, 2}, {1, 1}, 0));
    if (n >= 4) ops.push_back(MoveOp::as_strided({2, 2}, {1, 2}, n - 4));
    if (n >= 6) ops.push_back(MoveOp::as_strided({3, 2}, {1, 3}, 0));
  }
  return ops;
}

// A random op valid for shape `s`, keeping sizes small.
MoveOp random_op(const Shape& s, std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int r = int(s.size());
  int64_t n = numel(s);
  for (;;) {
    switch (pick(0, 7)) {
      case 0:
      case 7: {  // reshape: a random factorization, with size-1 dims sprinkled in
        auto f = factorizations(n, 4);
        Shape t = f[size_t(pick(0, int64_t(f.size()) - 1))];
        std::shuffle(t.begin(), t.end(), rng);
        if (pick(0, 2) == 0 && t.size() < 5) t.insert(t.begin() + pick(0, int64_t(t.size())), 1);
        return MoveOp::reshape(t);
      }
      case 1: {
        if (r < 2) break;
        MoveOp o = MoveOp::make(MoveOp::Permute);
        o.order.resize(size_t(r));
        std::iota(o.order.begin(), o.order.end(), 0);
        std::shuffle(o.order.begin(), o.order.end(), rng);
        return o;
      }
      case 2: {
        Shape t = s;
        bool any = false;
        for (auto& d : t)
          if (d == 1 && pick(0, 1)) { d = pick(2, 3); any = true; }
        if (!any || n * 3 > 400) break;
        return MoveOp::expand(t);
      }
      case 3: {
        if (r == 0 || n > 150) break;
        MoveOp o = MoveOp::make(MoveOp::Pad);
        for (int d = 0; d < r; d++) o.ranges.push_back({pick(0, 2), pick(0, 2)});
        return o;
      }
      case 4: {
        if (r == 0) break;
        MoveOp o = MoveOp::make(MoveOp::Shrink);
        for (int d = 0; d < r; d++) {
          int64_t b = pick(0, s[size_t(d)] / 2), e = pick(std::min(s[size_t(d)], b + 1), s[size_t(d)]);
          o.ranges.push_back({b, e});
        }
        return o;
      }
      case 5: {
        if (r == 0) break;
        MoveOp o = MoveOp::make(MoveOp::Flip);
        for (int d = 0; d < r; d++) o.flips.push_back(pick(0, 1));
        return o;
      }
      case 6: {  // in-bounds strided window with non-negative strides
        if (n < 2) break;
        MoveOp o = MoveOp::make(MoveOp::AsStrided);
        int rank = int(pick(1, 3));
        int64_t span = 0;
        for (int d = 0; d < rank; d++) {
          o.shape.push_back(pick(1, 4));
          o.strides.push_back(pick(0, 3));
          span += (o.shape.back() - 1) * o.strides.back();
        }
        if (span >= n) break;
        o.offset = pick(0, n - 1 - span);
        return o;
      }
    }
  }
}

}  // namespace

// ---- exhaustive: every single op on every small shape

TEST(ShapeTracker, EverySingleOpOnSmallShapes) {
  int checked = 0;
  for (auto& base : small_shapes(3, {1, 2, 3})) {
    Ref ref0 = ref_base(base);
    ShapeTracker st0 = ShapeTracker::from_shape(base);
    ASSERT_TRUE(check_tracker(st0, ref0, "base" + shape_str(base)));
    for (auto& op : all_single_ops(base)) {
      Ref ref = apply(ref0, op);
      std::string what = chain_str(base, {op});
      if (!check_tracker(apply(st0, op), ref, what)) return;
      if (!check_tracker(apply_composed(st0, op), ref, what + " (composed)")) return;
      checked++;
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(ShapeTracker, SizeZeroDims) {
  for (Shape base : std::vector<Shape>{{0}, {2, 0}, {0, 3}, {3, 0, 2}}) {
    Ref ref0 = ref_base(base);
    ShapeTracker st0 = ShapeTracker::from_shape(base);
    for (auto& op : all_single_ops(base)) {
      if (op.kind == MoveOp::AsStrided) continue;
      Ref ref = apply(ref0, op);
      ASSERT_TRUE(check_tracker(apply(st0, op), ref, chain_str(base, {op})));
      ASSERT_TRUE(check_tracker(apply_composed(st0, op), ref, chain_str(base, {op}) + " (composed)"));
    }
  }
  // an emptied view under a reshape: two views, the lower one empty
  ShapeTracker two = apply_composed(apply_composed(ShapeTracker::from_shape({1}), MoveOp::shrink({{0, 0}})),
                                    MoveOp::reshape({2, 0}));
  ASSERT_TRUE(check_tracker(two, ref_base({2, 0}), "shrink(0,0) -> reshape(2,0) (composed)"));
  ASSERT_TRUE(check_tracker(two.pad({{0, 0}, {1, 1}}), apply(ref_base({2, 0}), MoveOp::pad({{0, 0}, {1, 1}})),
                            "... -> pad"));
  // shrinking to nothing, then reshaping and padding the empty result
  ShapeTracker st = ShapeTracker::from_shape({2, 3}).shrink({{1, 1}, {0, 3}}).reshape({3, 0}).pad({{1, 0}, {1, 1}});
  EXPECT_EQ(st.shape(), (Shape{4, 2}));
  for_each_index(st.shape(), [&](const std::vector<int64_t>& idx) { EXPECT_EQ(st.eval_index(idx), -1); });
}

// ---- exhaustive pairs: any op, then any reshape (merges and splits over
// permuted, flipped, padded, shrunk and expanded views)

TEST(ShapeTracker, EveryOpThenEveryReshape) {
  int checked = 0;
  for (auto& base : small_shapes(3, {1, 2, 3})) {
    if (numel(base) > 12) continue;
    Ref ref0 = ref_base(base);
    ShapeTracker st0 = ShapeTracker::from_shape(base);
    for (auto& op1 : all_single_ops(base)) {
      if (op1.kind == MoveOp::Reshape) continue;
      Ref ref1 = apply(ref0, op1);
      if (numel(ref1.shape) > 24) continue;
      ShapeTracker st1 = apply(st0, op1), sc1 = apply_composed(st0, op1);
      for (auto& shape : factorizations(numel(ref1.shape), 3)) {
        MoveOp op2 = MoveOp::reshape(shape);
        Ref ref2 = apply(ref1, op2);
        std::string what = chain_str(base, {op1, op2});
        if (!check_tracker(apply(st1, op2), ref2, what)) return;
        if (!check_tracker(apply_composed(sc1, op2), ref2, what + " (composed)")) return;
        checked++;
      }
    }
  }
  EXPECT_GT(checked, 20000);
}

// ---- exhaustive: every single op on padded (masked) and on two-view trackers

TEST(ShapeTracker, EveryOpOnMaskedAndMultiViewTrackers) {
  int checked = 0;
  for (auto& base : small_shapes(2, {1, 2, 3})) {
    if (base.empty()) continue;
    Ranges pads;
    for (size_t d = 0; d < base.size(); d++) pads.push_back({int64_t(d % 2), 1});
    std::vector<MoveOp> firsts = {MoveOp::pad(pads)};
    // a transpose-then-flatten-then-split (two views), when there are two dims to swap
    if (base.size() == 2) {
      firsts = {MoveOp::pad(pads), MoveOp::permute({1, 0})};
    }
    for (size_t f = 0; f < firsts.size(); f++) {
      Ref ref1 = apply(ref_base(base), firsts[f]);
      ShapeTracker st1 = apply(ShapeTracker::from_shape(base), firsts[f]);
      ShapeTracker sc1 = apply_composed(ShapeTracker::from_shape(base), firsts[f]);
      std::vector<MoveOp> chain = {firsts[f]};
      if (f == 1) {  // flatten and split back: a second view
        MoveOp flat = MoveOp::reshape({numel(base)}), split = MoveOp::reshape(ref1.shape);
        ref1 = apply(apply(ref1, flat), split);
        st1 = apply(apply(st1, flat), split);
        sc1 = apply_composed(apply_composed(sc1, flat), split);
        chain.push_back(flat);
        chain.push_back(split);
      }
      for (auto& op : all_single_ops(ref1.shape, 3)) {
        std::vector<MoveOp> c = chain;
        c.push_back(op);
        Ref ref2 = apply(ref1, op);
        if (!check_tracker(apply(st1, op), ref2, chain_str(base, c))) return;
        if (!check_tracker(apply_composed(sc1, op), ref2, chain_str(base, c) + " (composed)")) return;
        checked++;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// ---- random stacks, masks included

TEST(ShapeTracker, RandomStacks) {
  std::mt19937 rng(1234);
  int multi_view = 0;
  for (int trial = 0; trial < 3000; trial++) {
    auto shapes = small_shapes(3, {1, 2, 3, 4});
    Shape base = shapes[std::uniform_int_distribution<size_t>(0, shapes.size() - 1)(rng)];
    Ref ref = ref_base(base);
    ShapeTracker st = ShapeTracker::from_shape(base), sc = st;
    std::vector<MoveOp> ops;
    int depth = std::uniform_int_distribution<int>(1, 7)(rng);
    for (int k = 0; k < depth; k++) {
      MoveOp op = random_op(ref.shape, rng);
      ops.push_back(op);
      ref = apply(ref, op);
      st = apply(st, op);
      sc = apply_composed(sc, op);
    }
    std::string what = chain_str(base, ops);
    ASSERT_TRUE(check_tracker(st, ref, what));
    ASSERT_TRUE(check_tracker(sc, ref, what + " (composed)"));
    multi_view += st.views().size() > 1;
  }
  EXPECT_GT(multi_view, 100);  // the stacks do exercise multi-view trackers
}

// ---- merges that must stay one view (no index math added)

TEST(ShapeTracker, ReshapesThatStayOneView) {
  auto one = [](const ShapeTracker& st) { return st.views().size() == 1; };
  ShapeTracker c = ShapeTracker::from_shape({2, 3, 4});
  EXPECT_TRUE(one(c.reshape({6, 4})));
  EXPECT_TRUE(one(c.reshape({2, 12})));
  EXPECT_TRUE(one(c.reshape({24})));
  EXPECT_TRUE(one(c.reshape({1, 2, 1, 3, 4, 1})));
  EXPECT_TRUE(one(c.reshape({4, 3, 2})));
  EXPECT_TRUE(c.reshape({4, 3, 2}).is_contiguous());
  // permuted: merging the untouched pair, splitting any dim
  ShapeTracker p = c.permute({2, 0, 1});  // (4, 2, 3), strides (1, 12, 4)
  EXPECT_TRUE(one(p.reshape({4, 6})));
  EXPECT_TRUE(one(p.reshape({2, 2, 2, 3})));
  EXPECT_FALSE(one(p.reshape({8, 3})));  // 4 and 2 are not adjacent in memory
  // expanded dims split and merge with stride 0
  ShapeTracker e = ShapeTracker::from_shape({1, 4}).expand({6, 4});
  EXPECT_TRUE(one(e.reshape({2, 3, 4})));
  EXPECT_TRUE(one(e.reshape({3, 2, 2, 2})));
  // flipped: negative strides merge
  ShapeTracker f = c.flip({true, true, true});
  EXPECT_TRUE(one(f.reshape({24})));
  // shrink of the outer dim keeps rows contiguous
  ShapeTracker s = c.shrink({{1, 2}, {0, 3}, {0, 4}});
  EXPECT_TRUE(one(s.reshape({12})));
}

TEST(ShapeTracker, ComposeKeepsOneView) {
  // A chain of simple views through compose_onto stays one view when it can.
  ShapeTracker st = ShapeTracker::from_shape({4, 6});
  auto step = [&](const MoveOp& op) { st = apply_composed(st, op); };
  step(MoveOp::reshape({2, 2, 6}));
  MoveOp perm = MoveOp::permute({2, 0, 1});
  step(perm);
  EXPECT_EQ(st.views().size(), 1u) << st.str();
  step(MoveOp::reshape({6, 4}));
  EXPECT_EQ(st.views().size(), 1u) << st.str();
}

// ---- through the engine: host data, the chain, copy back

namespace {

struct EngineCase {
  Shape base;
  std::vector<MoveOp> ops;
  Ref ref;
};

// Runs chains that end in the same shape together (one merged kernel per
// shape) and compares each with its reference; data is id + 1, padding 0.
void run_engine_cases(const std::vector<EngineCase>& cases, DType dt) {
  std::map<Shape, std::vector<size_t>> by_shape;
  for (size_t i = 0; i < cases.size(); i++) by_shape[cases[i].ref.shape].push_back(i);
  for (auto& [shape, ids] : by_shape) {
    std::vector<Tensor> outs;
    for (size_t i : ids) {
      const EngineCase& c = cases[i];
      std::vector<double> data(size_t(numel(c.base)));
      for (size_t k = 0; k < data.size(); k++) data[k] = double(k + 1);
      Tensor t = from_doubles(data, c.base, dt);
      for (auto& op : c.ops) t = apply(t, op);
      ASSERT_EQ(t.shape(), c.ref.shape) << chain_str(c.base, c.ops);
      outs.push_back(t.contiguous());
    }
    Tensor::realize_all(outs);
    for (size_t j = 0; j < ids.size(); j++) {
      const EngineCase& c = cases[ids[j]];
      auto got = to_doubles(outs[j]);
      for (size_t k = 0; k < got.size(); k++) {
        double want = double(c.ref.ids[k] + 1);
        if (got[k] != want) {
          ADD_FAILURE() << chain_str(c.base, c.ops) << " (" << dtype_name(dt) << "): element " << k << " is "
                        << got[k] << ", want " << want;
          break;
        }
      }
    }
  }
}

}  // namespace

TEST(ViewsEngine, SingleOps) {
  std::vector<EngineCase> cases;
  for (Shape base : std::vector<Shape>{{2, 3, 4}, {1, 3, 1}, {5}}) {
    for (auto& op : all_single_ops(base, 3)) {
      // one representative of each family keeps the kernel count small
      if (op.kind == MoveOp::Shrink && (op.ranges[0].first == op.ranges[0].second)) continue;
      cases.push_back({base, {op}, apply(ref_base(base), op)});
    }
  }
  // subsample deterministically to keep compile time bounded
  std::vector<EngineCase> picked;
  for (size_t i = 0; i < cases.size(); i += 7) picked.push_back(cases[i]);
  run_engine_cases(picked, DType::Int32);
}

TEST(ViewsEngine, RandomStacks) {
  std::mt19937 rng(99);
  std::vector<EngineCase> cases;
  auto shapes = small_shapes(3, {1, 2, 3, 4});
  for (int trial = 0; trial < 120; trial++) {
    Shape base = shapes[std::uniform_int_distribution<size_t>(0, shapes.size() - 1)(rng)];
    EngineCase c{base, {}, ref_base(base)};
    int depth = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int k = 0; k < depth; k++) {
      c.ops.push_back(random_op(c.ref.shape, rng));
      c.ref = apply(c.ref, c.ops.back());
    }
    // end on a flat shape so chains share kernels
    if (numel(c.ref.shape) > 0) {
      c.ops.push_back(MoveOp::reshape({numel(c.ref.shape)}));
      c.ref = apply(c.ref, c.ops.back());
    }
    cases.push_back(c);
  }
  run_engine_cases(cases, DType::Int32);
}

TEST(ViewsEngine, DtypesMoveBitsUnchanged) {
  // A transpose + pad + flip of every dtype: the data must arrive unchanged.
  MoveOp perm = MoveOp::permute({1, 0});
  MoveOp pad = MoveOp::pad({{1, 0}, {0, 2}});
  MoveOp flip = MoveOp::flip({true, false});
  Shape base{3, 4};
  Ref ref = apply(apply(apply(ref_base(base), perm), pad), flip);
  for (DType dt : all_dtypes()) {
    if (dt == DType::Bool) continue;  // ids don't fit
    run_engine_cases({{base, {perm, pad, flip}, ref}}, dt);
  }
}

TEST(ViewsEngine, ViewOfRealizedView) {
  // A view whose source is already realized composes onto the realized buffer.
  Tensor t = from(iota_f(24), {2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  p.realize();
  Tensor q = p.reshape({8, 3}).flip({true, false}).shrink({{1, 7}, {0, 2}});
  Ref ref = ref_base({2, 3, 4});
  MoveOp perm = MoveOp::permute({2, 0, 1});
  MoveOp flip = MoveOp::flip({true, false});
  MoveOp shr = MoveOp::shrink({{1, 7}, {0, 2}});
  ref = apply(apply(apply(apply(ref, perm), MoveOp::reshape({8, 3})), flip), shr);
  auto got = to_vec<float>(q);
  ASSERT_EQ(got.size(), ref.ids.size());
  for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], float(ref.ids[i])) << i;
}

TEST(ViewsEngine, PadOfComputedValueIsZeroOutside) {
  // Padding a computed (not loaded) value: the mask must zero it, not compute it.
  Tensor a = from(iota_f(6, 1), {2, 3});
  Tensor l = a.unary(Op::Log).pad({{1, 1}, {0, 2}});
  auto got = to_vec<float>(l);
  ASSERT_EQ(got.size(), 4u * 5u);
  for (int64_t r = 0; r < 4; r++)
    for (int64_t c = 0; c < 5; c++) {
      float want = (r >= 1 && r < 3 && c < 3) ? std::log(float((r - 1) * 3 + c + 1)) : 0.f;
      EXPECT_FLOAT_EQ(got[size_t(r * 5 + c)], want) << r << "," << c;
    }
}

TEST(ViewsEngine, EmptyTensors) {
  // Padding an empty tensor reads nothing: all zeros.
  Tensor e = Tensor::from_host(nullptr, {0, 2}, DType::Float32);
  auto p = to_vec<float>(e.pad({{2, 1}, {0, 0}}));
  EXPECT_EQ(p, std::vector<float>(6, 0.f));
  // A view chain over an emptied view (two views, the lower one empty).
  Tensor one = from(std::vector<float>{5.f}, {1});
  Tensor z = one.shrink({{0, 0}}).reshape({2, 0}).permute({1, 0});
  Tensor r = z.binary(Op::Add, Tensor::full({0, 2}, Scalar::from_double(1), DType::Float32));
  EXPECT_EQ(r.shape(), (Shape{0, 2}));
  EXPECT_TRUE(to_vec<float>(r).empty());
  auto padded = to_vec<float>(z.pad({{1, 0}, {0, 1}}));
  EXPECT_EQ(padded, std::vector<float>(3, 0.f));
}

// ---- index-set splitting: loops split at mask boundaries (padded loads
// unmasked in the middle segment) must give what the masked loops gave.

TEST(ViewsEngine, MaskSplitPadsShrinksAndStrides) {
  using M = MoveOp;
  std::vector<EngineCase> cases;
  auto add = [&](const Shape& base, std::vector<MoveOp> ops) {
    Ref r = ref_base(base);
    for (auto& o : ops) r = apply(r, o);
    cases.push_back({base, std::move(ops), r});
  };
  add({3, 30}, {M::pad({{0, 0}, {2, 3}})});                                 // both sides, innermost
  add({3, 30}, {M::pad({{1, 2}, {0, 0}})});                                 // a non-innermost dim only
  add({3, 30}, {M::shrink({{0, 3}, {3, 27}}), M::pad({{1, 1}, {5, 4}})});   // negative pad, then pad
  add({3, 30}, {M::pad({{2, 1}, {7, 1}}), M::shrink({{1, 5}, {3, 36}})});   // boundaries shifted
  add({2, 45}, {M::as_strided({2, 15}, {45, 3}, 1), M::pad({{1, 0}, {4, 6}})});  // strided
  add({3, 30}, {M::flip({false, true}), M::pad({{0, 1}, {1, 17}})});
  add({3, 30}, {M::permute({1, 0}), M::pad({{2, 2}, {1, 1}})});            // innermost stride 30
  add({3, 4}, {M::pad({{0, 0}, {20, 19}})});                                // pads wider than the data
  add({5, 7}, {M::pad({{1, 1}, {3, 2}})});                                  // odd sizes
  add({90}, {M::pad({{33, 20}})});                                          // the parallel dim itself
  add({3, 30}, {M::pad({{1, 1}, {1, 1}}), M::reshape({5 * 32})});           // flattened: not linear per row
  for (DType dt : all_dtypes()) {
    if (dt == DType::Bool) continue;  // ids don't fit
    run_engine_cases(cases, dt);
  }
  // large enough to be split across threads (runtime loop bounds)
  std::vector<EngineCase> big;
  auto add_big = [&](const Shape& base, std::vector<MoveOp> ops) {
    Ref r = ref_base(base);
    for (auto& o : ops) r = apply(r, o);
    big.push_back({base, std::move(ops), r});
  };
  add_big({200003}, {M::pad({{17, 29}})});
  add_big({64, 999}, {M::pad({{3, 0}, {1, 1}})});
  add_big({64, 999}, {M::shrink({{1, 63}, {2, 990}}), M::pad({{2, 2}, {0, 11}})});
  for (DType dt : {DType::Float32, DType::Int32, DType::Int64, DType::Float64}) run_engine_cases(big, dt);
}

TEST(ViewsEngine, MaskSplitSumOfPaddedViews) {
  // Two pads with different boundaries in one kernel (a concat's pattern),
  // over computed values: every segment mixes masked and unmasked parts.
  std::vector<float> a(3 * 20), b(3 * 13);
  for (size_t i = 0; i < a.size(); i++) a[i] = float(i % 11) - 5;
  for (size_t i = 0; i < b.size(); i++) b[i] = float(i % 7) + 0.5f;
  Tensor ta = from(a, {3, 20}), tb = from(b, {3, 13});
  Tensor pa = ta.binary(Op::Mul, Tensor::full({3, 20}, Scalar::from_double(2.0), DType::Float32)).pad({{0, 0}, {0, 13}});
  Tensor pb = tb.unary(Op::Neg).pad({{0, 0}, {20, 0}});
  Tensor shifted = ta.pad({{1, 0}, {5, 8}}).shrink({{0, 3}, {0, 33}});
  auto got = to_vec<float>(pa.binary(Op::Add, pb).binary(Op::Add, shifted));
  ASSERT_EQ(got.size(), 3u * 33u);
  for (int64_t r = 0; r < 3; r++)
    for (int64_t c = 0; c < 33; c++) {
      float want = c < 20 ? 2 * a[size_t(r * 20 + c)] : -b[size_t(r * 13 + c - 20)];
      if (r >= 1 && c >= 5 && c < 25) want += a[size_t((r - 1) * 20 + c - 5)];
      EXPECT_EQ(got[size_t(r * 33 + c)], want) << r << "," << c;
    }
}

TEST(ViewsEngine, MaskSplitConvolutionWindows) {
  // A 2-D convolution over a padded input, as windows (as_strided) of the
  // padded view: the masks depend on an output var plus a reduce var.
  for (DType dt : {DType::Float32, DType::Int32, DType::Float64}) {
    const int64_t N = 2, H = 9, W = 37, K = 3, P = 1, S = 1;
    const int64_t HP = H + 2 * P, WP = W + 2 * P;
    std::vector<double> x(size_t(N * H * W)), w(size_t(K * K));
    for (size_t i = 0; i < x.size(); i++) x[i] = double(i % 7) - 3;
    for (size_t i = 0; i < w.size(); i++) w[i] = double(i % 3) - 1 + double(i);
    Tensor tx = from_doubles(x, {N, H, W}, dt).pad({{0, 0}, {P, P}, {P, P}});
    for (int64_t stride : {S, int64_t(2)}) {
      const int64_t OH = (HP - K) / stride + 1, OW = (WP - K) / stride + 1;
      Tensor win = tx.as_strided({N, OH, OW, K, K}, {HP * WP, stride * WP, stride, WP, 1}, 0);
      Tensor tw = from_doubles(w, {K, K}, dt).reshape({1, 1, 1, K, K}).expand({N, OH, OW, K, K});
      auto got = to_doubles(win.binary(Op::Mul, tw).reduce(ReduceOp::Sum, {3, 4}, false));
      ASSERT_EQ(got.size(), size_t(N * OH * OW));
      for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            double want = 0;
            for (int64_t kh = 0; kh < K; kh++)
              for (int64_t kw = 0; kw < K; kw++) {
                int64_t h = oh * stride + kh - P, c = ow * stride + kw - P;
                if (h >= 0 && h < H && c >= 0 && c < W) want += x[size_t((n * H + h) * W + c)] * w[size_t(kh * K + kw)];
              }
            EXPECT_EQ(got[size_t((n * OH + oh) * OW + ow)], want)
                << dtype_name(dt) << " stride " << stride << " at " << n << "," << oh << "," << ow;
          }
    }
  }
}

// A view reading part of stored data reads an alias of that part: windows at
// other offsets (batch slices, flipped and padded windows, negative strides)
// compute what the CPU reference says and reuse one schedule and its programs.
TEST(ViewsEngine, WindowsOfStoredDataReuseTheSchedule) {
  const int64_t rows = 37, cols = 11;
  std::vector<float> host(size_t(rows * cols));
  for (size_t i = 0; i < host.size(); i++) host[i] = float(i % 97) * 0.25f - 7.0f;
  Tensor x = Tensor::from_host(host.data(), {rows * cols}, DType::Float32);
  auto batch = [&](int64_t lo, int64_t n) {  // rows [lo, lo+n), flipped, padded by one column, times a row index
    Tensor w = x.as_strided({n, cols}, {cols, 1}, lo * cols).flip({false, true}).pad({{0, 0}, {1, 0}});
    return w.binary(Op::Mul, Tensor::arange(cols + 1, Scalar::from_int(1), Scalar::from_int(1), DType::Float32)
                                 .reshape({1, cols + 1})
                                 .expand({n, cols + 1}))
        .reduce(ReduceOp::Sum, {1}, false);
  };
  auto reference = [&](int64_t lo, int64_t n) {
    std::vector<float> r(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 1; j <= cols; j++) r[size_t(i)] += host[size_t((lo + i) * cols + (cols - j))] * float(j + 1);
    return r;
  };
  std::vector<float> out(5);
  batch(0, 5).copy_to_host(out.data());  // schedules and compiles
  int64_t schedules = counters().schedules, compiles = counters().compiles;
  for (int64_t lo : {5, 17, 32, 1}) {
    batch(lo, 5).copy_to_host(out.data());
    std::vector<float> want = reference(lo, 5);
    for (int i = 0; i < 5; i++) EXPECT_FLOAT_EQ(out[size_t(i)], want[size_t(i)]) << "rows from " << lo << ", " << i;
  }
  EXPECT_EQ(counters().schedules, schedules);  // every offset replayed the first schedule
  EXPECT_EQ(counters().compiles, compiles);
  // a reversed window (negative stride) and one reaching the last element
  std::vector<float> rev(4);
  x.as_strided({4}, {-cols}, (rows - 1) * cols).copy_to_host(rev.data());
  for (int i = 0; i < 4; i++) EXPECT_EQ(rev[size_t(i)], host[size_t((rows - 1 - i) * cols)]);
  // two windows of one buffer in one kernel
  std::vector<float> diff(6);
  x.as_strided({6}, {1}, 1).binary(Op::Sub, x.as_strided({6}, {1}, 0)).copy_to_host(diff.data());
  for (int i = 0; i < 6; i++) EXPECT_EQ(diff[size_t(i)], host[size_t(i + 1)] - host[size_t(i)]);
}
