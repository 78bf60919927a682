// Random lazy graphs (elementwise ops, movement ops, reductions broadcast
// back, casts, contiguous, values realized midway) against a host
// evaluation of the same graph: whatever the scheduler fuses or splits, the
// values must not change.
#include <random>
#include <sstream>

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

// A host tensor: float32 values and, per element, a bound on the magnitudes
// that went into it (for the tolerance of reassociated sums).
struct Host {
  Shape shape;
  std::vector<float> v;
  std::vector<double> scale;
};

int64_t flat_index(const Shape& s, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); d++) f = f * s[d] + idx[d];
  return f;
}

// out[idx] = in[src(idx)] (src returns -1 for padding zeros)
template <typename F>
Host host_move(const Host& in, const Shape& out_shape, F&& src) {
  Host r{out_shape, {}, {}};
  for_each_index(out_shape, [&](const std::vector<int64_t>& idx) {
    int64_t s = src(idx);
    r.v.push_back(s < 0 ? 0.f : in.v[size_t(s)]);
    r.scale.push_back(s < 0 ? 0.0 : in.scale[size_t(s)]);
  });
  return r;
}

struct Item {
  Tensor t;
  Host h;
  std::string desc;
};

class GraphBuilder {
 public:
  explicit GraphBuilder(uint32_t seed) : rng_(seed) {}

  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  Item input(const Shape& s) {
    Host h{s, {}, {}};
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t i = 0; i < numel(s); i++) {
      h.v.push_back(u(rng_));
      h.scale.push_back(std::fabs(h.v.back()));
    }
    return {from(h.v, s), h, "in" + shape_str(s)};
  }

  Item unary(const Item& x) {
    static const Op ops[] = {Op::Neg, Op::Abs, Op::Tanh, Op::Sin};
    Op op = ops[pick(0, 3)];
    Host h = x.h;
    for (size_t i = 0; i < h.v.size(); i++) {
      float a = x.h.v[i];
      h.v[i] = op == Op::Neg ? -a : op == Op::Abs ? std::fabs(a) : op == Op::Tanh ? std::tanh(a) : std::sin(a);
    }
    return {x.t.unary(op), h, std::string(op_name(op)) + "(" + x.desc + ")"};
  }

  Item binary(const Item& x, const Item& y) {
    static const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Max, Op::Min};
    Op op = ops[pick(0, 4)];
    Host h = x.h;
    for (size_t i = 0; i < h.v.size(); i++) {
      float a = x.h.v[i], b = y.h.v[i];
      switch (op) {
        case Op::Add: h.v[i] = a + b; break;
        case Op::Sub: h.v[i] = a - b; break;
        case Op::Mul: h.v[i] = a * b; break;
        case Op::Max: h.v[i] = std::max(a, b); break;
        default: h.v[i] = std::min(a, b); break;
      }
      double sa = x.h.scale[i], sb = y.h.scale[i];
      h.scale[i] = op == Op::Mul ? sa * sb : (op == Op::Add || op == Op::Sub) ? sa + sb : std::max(sa, sb);
    }
    return {x.t.binary(op, y.t), h, std::string(op_name(op)) + "(" + x.desc + ", " + y.desc + ")"};
  }

  // sum or max over random axes, kept as size 1, then broadcast back (or not)
  Item reduce(const Item& x, bool broadcast_back) {
    const Shape& s = x.h.shape;
    std::vector<int> axes;
    for (int d = 0; d < int(s.size()); d++)
      if (pick(0, 1)) axes.push_back(d);
    if (axes.empty() && !s.empty()) axes.push_back(int(pick(0, int64_t(s.size()) - 1)));
    bool sum = pick(0, 1);
    Shape out = s;
    for (int a : axes) out[size_t(a)] = 1;
    Host h{out, std::vector<float>(size_t(numel(out))), std::vector<double>(size_t(numel(out)), 0.0)};
    std::vector<double> acc(h.v.size(), sum ? 0.0 : -INFINITY);
    for_each_index(s, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> o = idx;
      for (int a : axes) o[size_t(a)] = 0;
      size_t oi = size_t(flat_index(out, o)), ii = size_t(flat_index(s, idx));
      acc[oi] = sum ? acc[oi] + x.h.v[ii] : std::max(acc[oi], double(x.h.v[ii]));
      h.scale[oi] = sum ? h.scale[oi] + x.h.scale[ii] : std::max(h.scale[oi], x.h.scale[ii]);
    });
    for (size_t i = 0; i < acc.size(); i++) h.v[i] = float(acc[i]);
    Tensor t = x.t.reduce(sum ? ReduceOp::Sum : ReduceOp::Max, axes, true);
    std::string desc = std::string(sum ? "sum" : "max") + "(" + x.desc + ")";
    Item r{t, h, desc};
    if (!broadcast_back) return r;
    Host b = host_move(h, s, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> o = idx;
      for (int a : axes) o[size_t(a)] = 0;
      return flat_index(out, o);
    });
    return {t.expand(s), b, "expand(" + desc + ")"};
  }

  Item move(const Item& x, bool shape_changes) {
    const Shape& s = x.h.shape;
    int r = int(s.size());
    for (;;) {
      switch (pick(0, shape_changes ? 7 : 4)) {
        case 0: {  // permute
          if (r < 2) break;
          std::vector<int> order(static_cast<size_t>(r));
          for (int i = 0; i < r; i++) order[size_t(i)] = i;
          std::shuffle(order.begin(), order.end(), rng_);
          Shape out;
          for (int o : order) out.push_back(s[size_t(o)]);
          Host h = host_move(x.h, out, [&](const std::vector<int64_t>& idx) {
            std::vector<int64_t> in(idx.size());
            for (size_t i = 0; i < idx.size(); i++) in[size_t(order[i])] = idx[i];
            return flat_index(s, in);
          });
          return {x.t.permute(order), h, "permute(" + x.desc + ")"};
        }
        case 1: {  // flip
          std::vector<bool> f;
          for (int i = 0; i < r; i++) f.push_back(pick(0, 1));
          Host h = host_move(x.h, s, [&](const std::vector<int64_t>& idx) {
            std::vector<int64_t> in = idx;
            for (size_t d = 0; d < in.size(); d++)
              if (f[d]) in[d] = s[d] - 1 - in[d];
            return flat_index(s, in);
          });
          return {x.t.flip(f), h, "flip(" + x.desc + ")"};
        }
        case 2: {  // pad then shrink back to the same shape: a shifted window with zeros
          if (r == 0) break;
          Ranges pads, window;
          for (int d = 0; d < r; d++) {
            int64_t b = pick(0, 2), e = pick(0, 2);
            pads.push_back({b, e});
            int64_t start = pick(0, b + e);
            window.push_back({start, start + s[size_t(d)]});
          }
          Host h = host_move(x.h, s, [&](const std::vector<int64_t>& idx) -> int64_t {
            std::vector<int64_t> in = idx;
            for (size_t d = 0; d < in.size(); d++) {
              in[d] += window[d].first - pads[d].first;
              if (in[d] < 0 || in[d] >= s[d]) return -1;
            }
            return flat_index(s, in);
          });
          return {x.t.pad(pads).shrink(window), h, "shift(" + x.desc + ")"};
        }
        case 3: {  // reshape to the flat shape and back (a realized or merged view)
          Shape flat{numel(s)};
          return {x.t.reshape(flat).reshape(s), x.h, x.desc};
        }
        case 5: {  // reshape to another factorization (merges and splits)
          int64_t n = numel(s);
          Shape out;
          int64_t rest = n;
          while (rest > 1 && out.size() < 3) {
            std::vector<int64_t> divs;
            for (int64_t d = 2; d <= rest; d++)
              if (rest % d == 0) divs.push_back(d);
            int64_t d = divs[size_t(pick(0, int64_t(divs.size()) - 1))];
            out.push_back(d);
            rest /= d;
          }
          if (rest > 1) out.back() *= rest;
          if (pick(0, 2) == 0) out.insert(out.begin() + pick(0, int64_t(out.size())), 1);
          Host h = x.h;
          h.shape = out;
          return {x.t.reshape(out), h, "reshape" + shape_str(out) + "(" + x.desc + ")"};
        }
        case 6: {  // shrink to a sub-window
          if (r == 0) break;
          Ranges w;
          Shape out;
          for (int d = 0; d < r; d++) {
            int64_t b = pick(0, s[size_t(d)] - 1), e = pick(b + 1, s[size_t(d)]);
            w.push_back({b, e});
            out.push_back(e - b);
          }
          Host h = host_move(x.h, out, [&](const std::vector<int64_t>& idx) {
            std::vector<int64_t> in = idx;
            for (size_t d = 0; d < in.size(); d++) in[d] += w[d].first;
            return flat_index(s, in);
          });
          return {x.t.shrink(w), h, "shrink(" + x.desc + ")"};
        }
        case 7: {  // expand the size-1 dims
          Shape out = s;
          bool any = false;
          for (auto& d : out)
            if (d == 1) { d = pick(2, 3); any = true; }
          if (!any) break;
          Host h = host_move(x.h, out, [&](const std::vector<int64_t>& idx) {
            std::vector<int64_t> in = idx;
            for (size_t d = 0; d < in.size(); d++)
              if (s[d] == 1) in[d] = 0;
            return flat_index(s, in);
          });
          return {x.t.expand(out), h, "expand(" + x.desc + ")"};
        }
        case 4: {  // contiguous or a cast round trip through float64
          if (pick(0, 1)) return {x.t.contiguous(), x.h, "contig(" + x.desc + ")"};
          return {x.t.cast(DType::Float64).cast(DType::Float32), x.h, "f64(" + x.desc + ")"};
        }
      }
    }
  }

  std::mt19937 rng_;
};

void check(const Item& it, const std::string& graph) {
  auto got = to_vec<float>(it.t);
  ASSERT_EQ(got.size(), it.h.v.size()) << graph;
  for (size_t i = 0; i < got.size(); i++) {
    double tol = 2e-5 * it.h.scale[i] + 1e-6;
    if (!(std::fabs(double(got[i]) - double(it.h.v[i])) <= tol)) {
      ADD_FAILURE() << graph << "\n  output " << it.desc << "\n  element " << i << ": " << got[i] << " want "
                    << it.h.v[i];
      return;
    }
  }
}

}  // namespace

TEST(RandomGraphs, MatchHostEvaluation) {
  for (uint32_t seed = 1; seed <= 60; seed++) {
    GraphBuilder g(seed);
    Shape s;
    int rank = int(g.pick(1, 3));
    for (int d = 0; d < rank; d++) s.push_back(g.pick(1, 5));
    std::vector<Item> pool = {g.input(s), g.input(s)};
    int steps = int(g.pick(4, 14));
    for (int k = 0; k < steps; k++) {
      const Item x = pool[size_t(g.pick(0, int64_t(pool.size()) - 1))];
      // a partner of the same shape for binary ops
      std::vector<size_t> same;
      for (size_t i = 0; i < pool.size(); i++)
        if (pool[i].h.shape == x.h.shape) same.push_back(i);
      switch (g.pick(0, 6)) {
        case 0: pool.push_back(g.unary(x)); break;
        case 1:
        case 2: pool.push_back(g.binary(x, pool[same[size_t(g.pick(0, int64_t(same.size()) - 1))]])); break;
        case 3: pool.push_back(g.reduce(x, g.pick(0, 2) != 0)); break;
        case 4: pool.push_back(g.move(x, false)); break;
        case 5: pool.push_back(g.move(x, true)); break;
        case 6: x.t.realize(); break;  // realized midway: later kernels load it
      }
    }
    // request the last value, a few random ones and a reduce of something
    std::vector<Item> outs = {pool.back(), pool[size_t(g.pick(0, int64_t(pool.size()) - 1))],
                              pool[size_t(g.pick(0, int64_t(pool.size()) - 1))],
                              g.reduce(pool[size_t(g.pick(0, int64_t(pool.size()) - 1))], false)};
    std::vector<Tensor> ts;
    for (auto& o : outs) ts.push_back(o.t);
    Tensor::realize_all(ts);
    std::string graph = "seed " + std::to_string(seed) + " shape " + shape_str(s);
    for (auto& o : outs) check(o, graph);
  }
}
