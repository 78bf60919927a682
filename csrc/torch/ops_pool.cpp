// Pooling and resampling with their backward: max_pool{2,3}d_with_indices,
// avg_pool{2,3}d, adaptive avg/max pooling, nearest and (bi/tri)linear
// upsampling, pixel_shuffle / pixel_unshuffle. 1-d variants are ATen
// composites over the 2-d ops.
//
// Regular pools read a window view (pad + as_strided, free) and reduce over
// the window in one kernel. Their backward sums, for every input element, the
// windows that cover it: the gradient interleaved with stride-1 zeros, padded,
// and seen through stride-1 windows (the transposed-convolution pattern), so
// it stays one parallel reduce without scatter. Irregular maps (adaptive
// pools, interpolation) use per-dim tap tables computed on the host from the
// sizes: out[o] = sum_t w[o, t] * in[idx[o, t]], a gather and a reduce; their
// backward uses the inverted tables the same way.
#include <ATen/core/Tensor.h>
#include <ATen/native/UpSample.h>
#include <torch/library.h>

#include <string>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/nn_util.h"
#include "torch/ops_util.h"

namespace torch_tiny {
namespace {

using namespace nn;
using Dims = std::vector<int64_t>;

Dims expand_arg(c10::IntArrayRef a, size_t D, const char* name, std::optional<Dims> dflt = std::nullopt) {
  if (a.empty() && dflt) return *dflt;
  TORCH_CHECK(a.size() == 1 || a.size() == D, "max_pool", D, "d: ", name, " must either be a single int, or a tuple of ",
              D, " ints");
  Dims out(D);
  for (size_t i = 0; i < D; i++) out[i] = a.size() == 1 ? a[0] : a[i];
  return out;
}

int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t o = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil && (o - 1) * stride >= in + pad) o--;
  return o;
}

// The input as (B, S...) with the last D dims spatial.
struct Layout {
  size_t D;
  int64_t B;
  Dims S;
  c10::DimVector lead;  // leading (batch, channel) sizes
};
Layout layout(const at::Tensor& x, size_t D, const char* name) {
  TORCH_CHECK(x.dim() == int64_t(D) + 1 || x.dim() == int64_t(D) + 2, name, ": Expected ", D + 1, "D or ", D + 2,
              "D (batch mode) tensor for input, but got: ", x.sizes());
  Layout l;
  l.D = D;
  l.B = 1;
  for (int64_t i = 0; i < x.dim() - int64_t(D); i++) {
    l.B *= x.size(i);
    l.lead.push_back(x.size(i));
  }
  for (int64_t i = x.dim() - int64_t(D); i < x.dim(); i++) l.S.push_back(x.size(i));
  for (int64_t i = 1; i < x.dim(); i++)
    TORCH_CHECK(x.size(i) > 0, name, ": Expected input's non-batch dimensions to have positive length, but input has a shape of ",
                x.sizes(), " and non-batch dimension ", x.size(i), " has length zero!");
  return l;
}
c10::DimVector out_sizes(const Layout& l, const Dims& O) {
  c10::DimVector s = l.lead;
  s.insert(s.end(), O.begin(), O.end());
  return s;
}

// (B, P...) -> (B, O..., K...) windows at o*s + k*d
T windows(const T& xp, const Dims& O, const Dims& K, const Dims& s, const Dims& d) {
  const auto& ps = xp.shape();
  size_t D = O.size();
  Dims pstr(ps.size(), 1);
  for (int i = int(ps.size()) - 2; i >= 0; i--) pstr[size_t(i)] = pstr[size_t(i) + 1] * ps[size_t(i) + 1];
  tiny::Shape shape{ps[0]}, str{pstr[0]};
  for (size_t i = 0; i < D; i++) { shape.push_back(O[i]); str.push_back(s[i] * pstr[1 + i]); }
  for (size_t i = 0; i < D; i++) { shape.push_back(K[i]); str.push_back(d[i] * pstr[1 + i]); }
  return xp.as_strided(shape, str, 0);
}

// Pads the spatial dims of (B, S...) by `before` and enough after for windows
// of O outputs (negative: crop).
T pad_for(const T& x, const Dims& O, const Dims& K, const Dims& s, const Dims& d, const Dims& before) {
  T y = x;
  for (size_t i = 0; i < O.size(); i++) {
    int64_t need = (O[i] - 1) * s[i] + d[i] * (K[i] - 1) + 1;
    y = pad_dim(y, int(1 + i), before[i], need - x.shape()[1 + i] - before[i]);
  }
  return y;
}

T iota(int64_t n, int64_t start, int64_t step) {
  return T::arange(n, tiny::Scalar::from_int(start), tiny::Scalar::from_int(step), tiny::DType::Int64);
}
// v (n,) placed at dim `at` of a rank-`rank` shape, broadcast to `full`
T along(const T& v, int at, const tiny::Shape& full) {
  tiny::Shape s(full.size(), 1);
  s[size_t(at)] = v.shape()[0];
  return v.reshape(s).expand(full);
}

// Sum over a window of the input positions each output of a strided window
// op covers, as in the transposed convolution: g (B, O...) -> (B, S...) with
// out[j] = sum_k g'[j + p - k*d] where g' is g with (s-1) zeros interleaved.
// `fn(gw, full)` turns the window values into the summands.
template <class F>
T scatter_windows(const T& g, const Dims& S, const Dims& K, const Dims& s, const Dims& p, const Dims& d, F fn) {
  size_t D = S.size();
  T y = g;
  for (size_t i = 0; i < D; i++) {
    int64_t st = s[i], n = y.shape()[1 + i];
    int dim = int(1 + i);
    if (st > 1 && n > 0) {
      tiny::Shape s1 = y.shape();
      s1.insert(s1.begin() + dim + 1, 1);
      tiny::Ranges pads(s1.size(), {0, 0});
      pads[size_t(dim) + 1] = {0, st - 1};
      tiny::Shape s2 = y.shape();
      s2[size_t(dim)] = n * st;
      y = y.reshape(s1).pad(pads).reshape(s2);
      tiny::Ranges r;
      for (auto v : s2) r.push_back({0, v});
      r[size_t(dim)] = {0, (n - 1) * st + 1};
      y = y.shrink(r);
    }
    int64_t L = y.shape()[1 + i], a = d[i] * (K[i] - 1) - p[i];
    y = pad_dim(y, dim, a, S[i] + d[i] * (K[i] - 1) - L - a);
  }
  Dims one(D, 1);
  T w = windows(y, S, K, one, d);
  return fn(w);
}

// y's dim `d` of O windows (stride s, padding p) spread over the S input
// positions: position i gets window (i + p) / s, positions past the last
// window 0.
T spread_windows(const T& y, int d, int64_t s, int64_t p, int64_t S) {
  tiny::Shape sh = y.shape(), s1 = sh;
  int64_t O = sh[size_t(d)];
  s1.insert(s1.begin() + d + 1, 1);
  tiny::Shape s2 = s1;
  s2[size_t(d) + 1] = s;
  tiny::Shape s3 = sh;
  s3[size_t(d)] = O * s;
  return pad_dim(y.reshape(s1).expand(s2).reshape(s3), d, -p, S + p - O * s);
}

// flat spatial index of every element of (B, S...) broadcast to `full` (B, S..., extra...)
T flat_spatial(const Dims& S, const tiny::Shape& full) {
  size_t D = S.size();
  T idx;
  int64_t stride = 1;
  for (int i = int(D) - 1; i >= 0; i--) {
    T a = along(iota(S[size_t(i)], 0, stride), 1 + i, full);
    idx = idx.defined() ? add(idx, a) : a;
    stride *= S[size_t(i)];
  }
  return idx;
}

void check_positive(const Dims& K, const Dims& s, const Dims& d) {
  for (size_t i = 0; i < K.size(); i++) {
    TORCH_CHECK(K[i] > 0, "kernel size should be greater than zero, but got kernel size ", K[i]);
    TORCH_CHECK(s[i] > 0, "stride should be greater than zero, but got stride ", s[i]);
    TORCH_CHECK(d[i] > 0, "dilation should be greater than zero, but got dilation ", d[i]);
  }
}
void check_pool(const Dims& K, const Dims& s, const Dims& p, const Dims& d, const Dims& O, const Dims& S) {
  for (size_t i = 0; i < K.size(); i++) {
    TORCH_CHECK(K[i] / 2 >= p[i], "pad should be at most half of effective kernel size, but got pad=", p[i],
                ", kernel_size=", K[i], " and dilation=", d[i]);
    TORCH_CHECK(O[i] >= 1, "Given input size: (", c10::IntArrayRef(S), "). Calculated output size: (",
                c10::IntArrayRef(O), "). Output size is too small");
  }
}

// ---------------------------------------------------------------- max pool
// The index (from `pos`, below `positions`) of each window's maximum `mx` as the CPU
// picks it: the last NaN where the window has one (a NaN replaces the running maximum
// each time it is met), else the first position equal to the maximum. `valid` (if given)
// leaves padding taps out.
T window_argmax(const T& xw, const T& mx, const T& pos, int64_t positions, const std::vector<int>& kaxes,
                const T& valid = T()) {
  const tiny::Shape& full = xw.shape();
  T hit = xw.binary(Op::CmpEq, mx.expand(full));
  if (valid.defined()) hit = hit.binary(Op::And, valid);
  // Keys in 32 bits where the positions allow: twice the SIMD lanes of 64-bit ones, and
  // x86 has no 64-bit integer max below AVX-512.
  const int bits = positions < (int64_t(1) << 28) ? 30 : 62;
  const tiny::DType kdt = bits == 30 ? tiny::DType::Int32 : tiny::DType::Int64;
  auto full_of = [&](const tiny::Shape& shape, int64_t v) { return T::full(shape, tiny::Scalar::from_int(v), kdt); };
  T p = pos.cast(kdt);
  if (!tiny::is_float(xw.dtype()))
    return T::where(hit, p, full_of(full, bits == 30 ? std::numeric_limits<int32_t>::max()
                                                     : std::numeric_limits<int64_t>::max()))
        .reduce(ReduceOp::Min, kaxes, false)
        .cast(tiny::DType::Int64);
  // One pass over the window instead of two: a key whose maximum names the answer. NaNs
  // rank above every hit, the last NaN highest (kNan + pos); hits rank by position, the
  // first highest (kHit - pos); the rest below (-1).
  const int64_t kHit = int64_t(1) << (bits - 2), kNan = int64_t(1) << (bits - 1);
  T key = T::where(xw.unary(Op::IsNan), add(p, double(kNan)),
                   T::where(hit, full_of(full, kHit).binary(Op::Sub, p), full_of(full, -1)));
  T best = key.reduce(ReduceOp::Max, kaxes, false);
  const tiny::Shape& os = best.shape();
  T index = T::where(full_of(os, kNan).binary(Op::CmpLe, best), best.binary(Op::Sub, full_of(os, kNan)),
                     full_of(os, kHit).binary(Op::Sub, best));
  T found = full_of(os, 0).binary(Op::CmpLt, best);
  return T::where(found, index.cast(tiny::DType::Int64),
                  T::full(os, tiny::Scalar::from_int(std::numeric_limits<int64_t>::max()), tiny::DType::Int64));
}

// The fill of padding for a max: -inf, or the dtype's minimum for integers.
T lowest(const tiny::Shape& shape, c10::ScalarType dt) {
  tiny::DType e = to_engine(dt);
  if (c10::isFloatingType(dt)) return cnst(shape, -INFINITY, e);
  int64_t v = 0;
  switch (dt) {
    case c10::kChar: v = std::numeric_limits<int8_t>::min(); break;
    case c10::kShort: v = std::numeric_limits<int16_t>::min(); break;
    case c10::kInt: v = std::numeric_limits<int32_t>::min(); break;
    case c10::kLong: v = std::numeric_limits<int64_t>::min(); break;
    default: v = 0;  // unsigned
  }
  return T::full(shape, tiny::Scalar::from_int(v), e);
}
struct PoolArgs {
  Dims K, s, p, d, O;
};
PoolArgs pool_args(const Layout& l, c10::IntArrayRef k, c10::IntArrayRef st, c10::IntArrayRef pad,
                   c10::IntArrayRef dil, bool ceil) {
  PoolArgs a;
  a.K = expand_arg(k, l.D, "kernel_size");
  a.s = expand_arg(st, l.D, "stride", a.K);
  a.p = expand_arg(pad, l.D, "padding");
  a.d = expand_arg(dil, l.D, "dilation");
  check_positive(a.K, a.s, a.d);
  for (size_t i = 0; i < l.D; i++) a.O.push_back(pool_out(l.S[i], a.K[i], a.p[i], a.s[i], a.d[i], ceil));
  check_pool(a.K, a.s, a.p, a.d, a.O, l.S);
  return a;
}

std::tuple<at::Tensor, at::Tensor> max_pool_impl(const at::Tensor& self, size_t D, c10::IntArrayRef k,
                                                 c10::IntArrayRef st, c10::IntArrayRef pad, c10::IntArrayRef dil,
                                                 bool ceil) {
  TinyOp op("max_pool");
  const char* name = D == 2 ? "max_pool2d" : "max_pool3d";
  Layout l = layout(self, D, name);
  TORCH_CHECK(self.scalar_type() != c10::kBool, "\"", name, "\" not implemented for 'Bool'");
  PoolArgs a = pool_args(l, k, st, pad, dil, ceil);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType edt = to_engine(dt);
  tiny::Shape bs{l.B};
  bs.insert(bs.end(), l.S.begin(), l.S.end());
  if (l.B == 0) {
    tiny::Shape o{0};
    o.insert(o.end(), a.O.begin(), a.O.end());
    return {make_result(cnst(o, 0, edt).reshape(to_shape(out_sizes(l, a.O))), dt),
            make_result(cnst(to_shape(out_sizes(l, a.O)), 0, tiny::DType::Int64), c10::kLong)};
  }
  T x = read(self).reshape(bs);
  T valid = cnst(bs, 1, tiny::DType::Bool);
  T xw = windows(pad_for(x, a.O, a.K, a.s, a.d, a.p), a.O, a.K, a.s, a.d);
  T vw = windows(pad_for(valid, a.O, a.K, a.s, a.d, a.p), a.O, a.K, a.s, a.d);
  const tiny::Shape& full = xw.shape();
  xw = T::where(vw, xw, lowest(full, self.scalar_type()));
  std::vector<int> kaxes = range_axes(int(1 + D), int(1 + 2 * D));
  T mx = xw.reduce(ReduceOp::Max, kaxes, true);
  // first position of the maximum (a NaN counts as the maximum, as on the CPU)
  T pos;
  int64_t stride = 1;
  for (int i = int(D) - 1; i >= 0; i--) {
    size_t u = size_t(i);
    T o = along(iota(a.O[u], -a.p[u] * stride, a.s[u] * stride), 1 + i, full);
    T kk = along(iota(a.K[u], 0, a.d[u] * stride), int(1 + D) + i, full);
    T t = add(o, kk);
    pos = pos.defined() ? add(pos, t) : t;
    stride *= l.S[u];
  }
  T idx = window_argmax(xw, mx, pos, tiny::numel(l.S), kaxes);
  // the engine's MAX propagates NaN: the values need no second pass over the windows
  c10::DimVector os = out_sizes(l, a.O);
  return {make_result(mx.reshape(to_shape(os)), dt), make_result(idx.reshape(to_shape(os)), c10::kLong)};
}

at::Tensor max_pool_backward_impl(const at::Tensor& grad_output, const at::Tensor& self, size_t D,
                                  c10::IntArrayRef k, c10::IntArrayRef st, c10::IntArrayRef pad, c10::IntArrayRef dil,
                                  bool ceil, const at::Tensor& indices) {
  TinyOp op("max_pool_backward");
  Layout l = layout(self, D, D == 2 ? "max_pool2d_backward" : "max_pool3d_backward");
  PoolArgs a = pool_args(l, k, st, pad, dil, ceil);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  if (l.B == 0) return make_result(cnst(to_shape(self.sizes()), 0, to_engine(dt)), dt);
  tiny::Shape bo{l.B};
  bo.insert(bo.end(), a.O.begin(), a.O.end());
  bool undilated = true;
  for (size_t i = 0; i < D; i++) undilated &= a.d[i] == 1;
  // Overlapping windows read each gradient and index several times per input element (16
  // times for a 3x3 stride-2 pool): computed ones are stored once (an extra output of the
  // kernels that compute them, no kernel of their own in resnet18) instead of recomputed
  // with their batch norm, ReLU mask and index decoding: resnet18's pool backward 11.7 -> 2.8 ms.
  bool overlapping = false;
  for (size_t i = 0; i < D; i++) overlapping |= a.K[i] > a.s[i];
  auto reread = [&](const T& t) { return overlapping && undilated ? stored(t) : t; };
  T g = reread(read(grad_output)).cast(acc).reshape(bo);
  // Positions compared in 32 bits where they fit (x86 has half the lanes for 64-bit ones):
  // the indices are the forward's, inside them (the CPU's kernel does not check them either).
  const tiny::DType pos_dt = tiny::numel(l.S) < (int64_t(1) << 30) ? tiny::DType::Int32 : tiny::DType::Int64;
  T id1 = add(reread(read(indices)).cast(pos_dt).reshape(bo), 1.0);  // interleaved zeros never match
  if (undilated) {
    // Without dilation, input position i (along a dim) lies in windows
    // (i + p) / s - t for t < ceil(K / s) only, and a window's index names i
    // only if i is inside it: the gradient is elementwise, a sum of at most
    // ceil(K / s) per dim terms, each the gradient of one candidate window
    // where that window's index names i (one term for disjoint windows). No
    // sum over masked, zero-interleaved window loads (9 per element for a
    // 3x3 stride-2 pool, with divisions: resnet18's backward ran 22 ms). The
    // terms are added in the CPU's order (windows ascending).
    const tiny::Shape grid = [&] {
      tiny::Shape s{l.B};
      s.insert(s.end(), l.S.begin(), l.S.end());
      return s;
    }();
    T target = add(flat_spatial(l.S, grid).cast(pos_dt), 1.0);
    Dims T_(D), t(D);
    for (size_t i = 0; i < D; i++) T_[i] = (a.K[i] + a.s[i] - 1) / a.s[i];
    for (size_t i = 0; i < D; i++) t[i] = T_[i] - 1;
    T gi;
    while (true) {
      T gu = g, iu = id1;
      for (size_t i = 0; i < D; i++) {  // window (i + p) / s - t[i]: pad t[i] windows before
        gu = spread_windows(pad_dim(gu, int(1 + i), t[i], 0), int(1 + i), a.s[i], a.p[i], l.S[i]);
        iu = spread_windows(pad_dim(iu, int(1 + i), t[i], 0), int(1 + i), a.s[i], a.p[i], l.S[i]);
      }
      T term = T::where(iu.binary(Op::CmpEq, target), gu, cnst(grid, 0.0, acc));
      gi = gi.defined() ? add(gi, term) : term;
      int j = int(D) - 1;  // the next combination, t descending in row-major order
      while (j >= 0 && t[size_t(j)] == 0) j--;
      if (j < 0) break;
      t[size_t(j)]--;
      for (size_t q = size_t(j) + 1; q < D; q++) t[q] = T_[q] - 1;
    }
    // several terms: stored once rather than recomputed in every consumer
    // (a batch norm's backward reduce and its elementwise part both read it)
    if (tiny::numel(T_) > 1) gi = gi.contiguous();
    return make_result(gi.cast(to_engine(dt)).reshape(to_shape(self.sizes())), dt);
  }
  T gw = scatter_windows(g, l.S, a.K, a.s, a.p, a.d, [](const T& w) { return w; });
  T iw = scatter_windows(id1, l.S, a.K, a.s, a.p, a.d, [](const T& w) { return w; });
  const tiny::Shape& full = gw.shape();
  T target = add(flat_spatial(l.S, full).cast(pos_dt), 1.0);
  T v = T::where(iw.binary(Op::CmpEq, target), gw, cnst(full, 0.0, acc));
  T gi = v.reduce(ReduceOp::Sum, range_axes(int(1 + D), int(1 + 2 * D)), false);
  return make_result(gi.cast(to_engine(dt)).reshape(to_shape(self.sizes())), dt);
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self, c10::IntArrayRef k,
                                                           c10::IntArrayRef s, c10::IntArrayRef p,
                                                           c10::IntArrayRef d, bool ceil) {
  return max_pool_impl(self, 2, k, s, p, d, ceil);
}
std::tuple<at::Tensor, at::Tensor> max_pool3d_with_indices(const at::Tensor& self, c10::IntArrayRef k,
                                                           c10::IntArrayRef s, c10::IntArrayRef p,
                                                           c10::IntArrayRef d, bool ceil) {
  return max_pool_impl(self, 3, k, s, p, d, ceil);
}
at::Tensor max_pool2d_with_indices_backward(const at::Tensor& g, const at::Tensor& self, c10::IntArrayRef k,
                                            c10::IntArrayRef s, c10::IntArrayRef p, c10::IntArrayRef d, bool ceil,
                                            const at::Tensor& idx) {
  return max_pool_backward_impl(g, self, 2, k, s, p, d, ceil, idx);
}
at::Tensor max_pool3d_with_indices_backward(const at::Tensor& g, const at::Tensor& self, c10::IntArrayRef k,
                                            c10::IntArrayRef s, c10::IntArrayRef p, c10::IntArrayRef d, bool ceil,
                                            const at::Tensor& idx) {
  return max_pool_backward_impl(g, self, 3, k, s, p, d, ceil, idx);
}

// ---------------------------------------------------------------- avg pool
// The divisor of every output window, (B, O...) broadcast: per dim lazy
// integer arithmetic on the window bounds, as the CPU kernel computes them.
T avg_divisor(const PoolArgs& a, const Dims& S, bool count_include_pad, std::optional<int64_t> divisor_override,
              const tiny::Shape& full, tiny::DType acc) {
  if (divisor_override) return cnst(full, double(*divisor_override), acc);
  T div;
  for (size_t i = 0; i < S.size(); i++) {
    T start = iota(a.O[i], -a.p[i], a.s[i]);
    T end = add(start, double(a.K[i])).binary(Op::Min, cnst({a.O[i]}, double(S[i] + a.p[i]), tiny::DType::Int64));
    T n = sub(end, start);
    if (!count_include_pad) {
      T s0 = start.binary(Op::Max, cnst({a.O[i]}, 0, tiny::DType::Int64));
      T e0 = end.binary(Op::Min, cnst({a.O[i]}, double(S[i]), tiny::DType::Int64));
      n = sub(e0, s0);
    }
    T v = along(n.cast(acc), int(1 + i), full);
    div = div.defined() ? mul(div, v) : v;
  }
  return div;
}

PoolArgs avg_args(const Layout& l, c10::IntArrayRef k, c10::IntArrayRef st, c10::IntArrayRef pad, bool ceil,
                  std::optional<int64_t> divisor_override) {
  PoolArgs a;
  a.K = expand_arg(k, l.D, "kernel_size");
  a.s = expand_arg(st, l.D, "stride", a.K);
  a.p = expand_arg(pad, l.D, "padding");
  a.d = Dims(l.D, 1);
  check_positive(a.K, a.s, a.d);
  for (size_t i = 0; i < l.D; i++) a.O.push_back(pool_out(l.S[i], a.K[i], a.p[i], a.s[i], 1, ceil));
  check_pool(a.K, a.s, a.p, a.d, a.O, l.S);
  TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  return a;
}

at::Tensor avg_pool_impl(const at::Tensor& self, size_t D, c10::IntArrayRef k, c10::IntArrayRef st,
                         c10::IntArrayRef pad, bool ceil, bool count_include_pad, std::optional<int64_t> div_override) {
  TinyOp op("avg_pool");
  Layout l = layout(self, D, D == 2 ? "avg_pool2d" : "avg_pool3d");
  PoolArgs a = avg_args(l, k, st, pad, ceil, div_override);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  c10::DimVector os = out_sizes(l, a.O);
  if (l.B == 0) return make_result(cnst(to_shape(os), 0, to_engine(dt)), dt);
  tiny::Shape bs{l.B};
  bs.insert(bs.end(), l.S.begin(), l.S.end());
  T x = read(self).cast(acc).reshape(bs);
  T xw = windows(pad_for(x, a.O, a.K, a.s, a.d, a.p), a.O, a.K, a.s, a.d);
  T sum = xw.reduce(ReduceOp::Sum, range_axes(int(1 + D), int(1 + 2 * D)), false);
  T out = div(sum, avg_divisor(a, l.S, count_include_pad, div_override, sum.shape(), acc));
  return make_result(out.cast(to_engine(dt)).reshape(to_shape(os)), dt);
}

at::Tensor avg_pool_backward_impl(const at::Tensor& grad_output, const at::Tensor& self, size_t D,
                                  c10::IntArrayRef k, c10::IntArrayRef st, c10::IntArrayRef pad, bool ceil,
                                  bool count_include_pad, std::optional<int64_t> div_override) {
  TinyOp op("avg_pool_backward");
  Layout l = layout(self, D, D == 2 ? "avg_pool2d_backward" : "avg_pool3d_backward");
  PoolArgs a = avg_args(l, k, st, pad, ceil, div_override);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  if (l.B == 0) return make_result(cnst(to_shape(self.sizes()), 0, to_engine(dt)), dt);
  tiny::Shape bo{l.B};
  bo.insert(bo.end(), a.O.begin(), a.O.end());
  T g = read(grad_output).cast(acc).reshape(bo);
  g = div(g, avg_divisor(a, l.S, count_include_pad, div_override, bo, acc));
  T gi = scatter_windows(g, l.S, a.K, a.s, a.p, a.d, [&](const T& w) {
    return w.reduce(ReduceOp::Sum, range_axes(int(1 + D), int(1 + 2 * D)), false);
  });
  return make_result(gi.cast(to_engine(dt)).reshape(to_shape(self.sizes())), dt);
}

at::Tensor avg_pool2d(const at::Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p, bool ceil,
                      bool cip, std::optional<int64_t> dov) {
  return avg_pool_impl(self, 2, k, s, p, ceil, cip, dov);
}
at::Tensor avg_pool3d(const at::Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s, c10::IntArrayRef p, bool ceil,
                      bool cip, std::optional<int64_t> dov) {
  return avg_pool_impl(self, 3, k, s, p, ceil, cip, dov);
}
at::Tensor avg_pool2d_backward(const at::Tensor& g, const at::Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s,
                               c10::IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> dov) {
  return avg_pool_backward_impl(g, self, 2, k, s, p, ceil, cip, dov);
}
at::Tensor avg_pool3d_backward(const at::Tensor& g, const at::Tensor& self, c10::IntArrayRef k, c10::IntArrayRef s,
                               c10::IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> dov) {
  return avg_pool_backward_impl(g, self, 3, k, s, p, ceil, cip, dov);
}

// ---------------------------------------------------------------- tap tables
// out[o] = sum_t w[o][t] * in[idx[o][t]] along one dim (padding taps have w = 0).
struct Taps {
  int64_t out = 0, in = 0, n = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  void init(int64_t o, int64_t i, int64_t taps) {
    out = o;
    in = i;
    n = std::max<int64_t>(taps, 1);
    idx.assign(size_t(out * n), 0);
    w.assign(size_t(out * n), 0.0);
  }
  void set(int64_t o, int64_t t, int64_t i, double weight) {
    idx[size_t(o * n + t)] = i;
    w[size_t(o * n + t)] = weight;
  }
  // The transposed map: in[i] gathers from every o that read i.
  Taps inverse() const {
    std::vector<std::vector<std::pair<int64_t, double>>> from(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; o++)
      for (int64_t t = 0; t < n; t++)
        if (w[size_t(o * n + t)] != 0.0) from[size_t(idx[size_t(o * n + t)])].push_back({o, w[size_t(o * n + t)]});
    size_t m = 1;
    for (auto& f : from) m = std::max(m, f.size());
    Taps r;
    r.init(in, out, int64_t(m));
    for (int64_t i = 0; i < in; i++)
      for (size_t t = 0; t < from[size_t(i)].size(); t++) r.set(i, int64_t(t), from[size_t(i)][t].first, from[size_t(i)][t].second);
    return r;
  }
};

T host_table(const std::vector<int64_t>& v, int64_t rows, int64_t cols) {
  return T::from_host(v.data(), {rows, cols}, tiny::DType::Int64);
}
T host_table(const std::vector<double>& v, int64_t rows, int64_t cols, tiny::DType dt) {
  return T::from_host(v.data(), {rows, cols}, tiny::DType::Float64).cast(dt);
}

struct Gathered {
  T value;    // (B, Out..., taps...) source values at the taps
  T weight;   // same shape, product of the per-dim weights
  T flat;     // the flat spatial source index of each tap
};
// src (B, In...) read through the per-dim tap tables
Gathered gather_taps(const T& src, const std::vector<Taps>& taps, tiny::DType acc) {
  size_t D = taps.size();
  int64_t B = src.shape()[0], in_total = 1;
  for (auto& t : taps) in_total *= t.in;
  tiny::Shape full{B};
  for (auto& t : taps) full.push_back(t.out);
  for (auto& t : taps) full.push_back(t.n);
  T flat, weight;
  int64_t stride = 1;
  for (int i = int(D) - 1; i >= 0; i--) {
    const Taps& t = taps[size_t(i)];
    std::vector<int64_t> scaled(t.idx);
    for (auto& v : scaled) v *= stride;
    tiny::Shape s(full.size(), 1);
    s[size_t(1 + i)] = t.out;
    s[1 + D + size_t(i)] = t.n;
    T ix = host_table(scaled, t.out, t.n).reshape(s).expand(full);
    T wx = host_table(t.w, t.out, t.n, acc).reshape(s).expand(full);
    flat = flat.defined() ? add(flat, ix) : ix;
    weight = weight.defined() ? mul(weight, wx) : wx;
    stride *= t.in;
  }
  T base = along(iota(B, 0, in_total), 0, full);
  return {src.gather(add(base, flat)), weight, flat};
}
T apply_taps(const T& src, const std::vector<Taps>& taps, tiny::DType acc) {
  Gathered g = gather_taps(src, taps, acc);
  size_t D = taps.size();
  return mul(g.value, g.weight).reduce(ReduceOp::Sum, range_axes(int(1 + D), int(1 + 2 * D)), false);
}

// adaptive windows: [floor(o*in/out), ceil((o+1)*in/out))
Taps adaptive_taps(int64_t in, int64_t out, bool average) {
  int64_t m = 1;
  for (int64_t o = 0; o < out; o++) m = std::max(m, (((o + 1) * in + out - 1) / out) - (o * in) / out);
  Taps t;
  t.init(out, in, m);
  for (int64_t o = 0; o < out; o++) {
    int64_t s = (o * in) / out, e = ((o + 1) * in + out - 1) / out;
    for (int64_t k = 0; k < e - s; k++) t.set(o, k, s + k, average ? 1.0 / double(e - s) : 1.0);
  }
  return t;
}

Dims adaptive_out(c10::IntArrayRef output_size, size_t D, const char* name) {
  TORCH_CHECK(output_size.size() == D, name, ": output_size must be ", D);
  Dims o(output_size.begin(), output_size.end());
  for (auto v : o) TORCH_CHECK(v >= 0, name, ": elements of output_size must be greater than or equal to 0 but received {", c10::IntArrayRef(o), "}");
  return o;
}

// Adaptive pooling where every dim pools whole windows (in % out == 0) or repeats each input
// (out % in == 0: VGG's 7x7 pool of a 1x1 map at 32x32 input): per dim a window k and a repeat
// r, out = in / k * r. It is then views and a sum, no tap tables: those are gathers, and a
// weight gradient reading the pooled map recomputed them per output (9.6 s of a 1 s step, when
// only whole windows took this way).
struct WindowsAndRepeats {
  Dims k, r;
};
std::optional<WindowsAndRepeats> windows_and_repeats(const Dims& in, const Dims& out) {
  WindowsAndRepeats w{Dims(in.size(), 1), Dims(in.size(), 1)};
  for (size_t i = 0; i < in.size(); i++) {
    if (in[i] <= 0 || out[i] <= 0) return std::nullopt;
    if (in[i] % out[i] == 0) w.k[i] = in[i] / out[i];
    else if (out[i] % in[i] == 0) w.r[i] = out[i] / in[i];
    else return std::nullopt;
  }
  return w;
}

// x (B, a1, ..., aD) seen as (B, a1 / n1, n1, ...) and summed over the n's.
T sum_blocks(const T& x, const Dims& n) {
  tiny::Shape split{x.shape()[0]};
  std::vector<int> axes;
  for (size_t i = 0; i < n.size(); i++) {
    split.insert(split.end(), {x.shape()[1 + i] / n[i], n[i]});
    axes.push_back(int(2 + 2 * i));
  }
  return x.reshape(split).reduce(ReduceOp::Sum, axes, false);
}

// x (B, a1, ..., aD) with each element repeated n_i times along dim i (a view).
T repeat_each(const T& x, const Dims& n) {
  tiny::Shape one{x.shape()[0]}, rep{x.shape()[0]}, flat{x.shape()[0]};
  for (size_t i = 0; i < n.size(); i++) {
    one.insert(one.end(), {x.shape()[1 + i], 1});
    rep.insert(rep.end(), {x.shape()[1 + i], n[i]});
    flat.push_back(x.shape()[1 + i] * n[i]);
  }
  return x.reshape(one).expand(rep).reshape(flat);
}

at::Tensor adaptive_avg_pool_impl(const at::Tensor& self, c10::IntArrayRef output_size, size_t D) {
  TinyOp op("adaptive_avg_pool");
  const char* name = D == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
  Layout l = layout(self, D, name);
  Dims O = adaptive_out(output_size, D, name);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  c10::DimVector os = out_sizes(l, O);
  if (l.B == 0 || tiny::numel(O) == 0) return make_result(cnst(to_shape(os), 0, to_engine(dt)), dt);
  tiny::Shape bs{l.B};
  bs.insert(bs.end(), l.S.begin(), l.S.end());
  T x = read(self).cast(acc).reshape(bs);
  T out;
  if (auto w = windows_and_repeats(l.S, O)) {  // (a global pool is a mean)
    out = repeat_each(mul(sum_blocks(x, w->k), 1.0 / double(tiny::numel(w->k))), w->r);
  } else {
    std::vector<Taps> taps;
    for (size_t i = 0; i < D; i++) taps.push_back(adaptive_taps(l.S[i], O[i], true));
    out = apply_taps(x, taps, acc);
  }
  return make_result(out.cast(to_engine(dt)).reshape(to_shape(os)), dt);
}

at::Tensor adaptive_avg_pool_backward_impl(const at::Tensor& grad_output, const at::Tensor& self, size_t D) {
  TinyOp op("adaptive_avg_pool_backward");
  Layout l = layout(self, D, D == 2 ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool3d_backward");
  Dims O(grad_output.sizes().end() - int64_t(D), grad_output.sizes().end());
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  if (l.B == 0 || tiny::numel(O) == 0) return make_result(cnst(to_shape(self.sizes()), 0, to_engine(dt)), dt);
  tiny::Shape bo{l.B};
  bo.insert(bo.end(), O.begin(), O.end());
  T g = read(grad_output).cast(acc).reshape(bo);
  T gi;
  if (auto w = windows_and_repeats(l.S, O)) {  // each input gets its window's gradient / its size
    gi = repeat_each(mul(sum_blocks(g, w->r), 1.0 / double(tiny::numel(w->k))), w->k);
  } else {
    std::vector<Taps> taps;
    for (size_t i = 0; i < D; i++) taps.push_back(adaptive_taps(l.S[i], O[i], true).inverse());
    gi = apply_taps(g, taps, acc);
  }
  return make_result(gi.cast(to_engine(dt)).reshape(to_shape(self.sizes())), dt);
}

std::tuple<at::Tensor, at::Tensor> adaptive_max_pool_impl(const at::Tensor& self, c10::IntArrayRef output_size,
                                                          size_t D) {
  TinyOp op("adaptive_max_pool");
  const char* name = D == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d";
  Layout l = layout(self, D, name);
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "\"", name, "\" not implemented for '",
              c10::toString(self.scalar_type()), "'");
  Dims O = adaptive_out(output_size, D, name);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType edt = to_engine(dt);
  c10::DimVector os = out_sizes(l, O);
  if (l.B == 0 || tiny::numel(O) == 0)
    return {make_result(cnst(to_shape(os), 0, edt), dt), make_result(cnst(to_shape(os), 0, tiny::DType::Int64), c10::kLong)};
  tiny::Shape bs{l.B};
  bs.insert(bs.end(), l.S.begin(), l.S.end());
  T x = read(self).reshape(bs);
  std::vector<Taps> taps;
  for (size_t i = 0; i < D; i++) taps.push_back(adaptive_taps(l.S[i], O[i], false));
  Gathered g = gather_taps(x, taps, tiny::DType::Float32);
  const tiny::Shape& full = g.value.shape();
  T valid = g.weight.binary(Op::CmpNe, cnst(full, 0.0, tiny::DType::Float32));
  T xw = T::where(valid, g.value, cnst(full, -INFINITY, edt));
  std::vector<int> kaxes = range_axes(int(1 + D), int(1 + 2 * D));
  T mx = xw.reduce(ReduceOp::Max, kaxes, true);
  T idx = window_argmax(xw, mx, g.flat, tiny::numel(l.S), kaxes, valid);
  return {make_result(mx.reshape(to_shape(os)), dt), make_result(idx.reshape(to_shape(os)), c10::kLong)};
}

at::Tensor adaptive_max_pool_backward_impl(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& indices, size_t D) {
  TinyOp op("adaptive_max_pool_backward");
  Layout l = layout(self, D, D == 2 ? "adaptive_max_pool2d_backward" : "adaptive_max_pool3d_backward");
  Dims O(grad_output.sizes().end() - int64_t(D), grad_output.sizes().end());
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  if (l.B == 0 || tiny::numel(O) == 0) return make_result(cnst(to_shape(self.sizes()), 0, to_engine(dt)), dt);
  tiny::Shape bo{l.B};
  bo.insert(bo.end(), O.begin(), O.end());
  T g = read(grad_output).cast(acc).reshape(bo);
  T ix = read(indices).cast(tiny::DType::Int64).reshape(bo);
  std::vector<Taps> taps;
  for (size_t i = 0; i < D; i++) taps.push_back(adaptive_taps(l.S[i], O[i], false).inverse());
  Gathered gg = gather_taps(g, taps, acc), gx = gather_taps(ix, taps, acc);
  const tiny::Shape& full = gg.value.shape();
  T hit = gx.value.binary(Op::CmpEq, flat_spatial(l.S, full))
              .binary(Op::And, gg.weight.binary(Op::CmpNe, cnst(full, 0.0, acc)));
  T gi = T::where(hit, gg.value, cnst(full, 0.0, acc)).reduce(ReduceOp::Sum, range_axes(int(1 + D), int(1 + 2 * D)), false);
  return make_result(gi.cast(to_engine(dt)).reshape(to_shape(self.sizes())), dt);
}

// ---------------------------------------------------------------- upsampling
Taps nearest_taps(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  Taps t;
  t.init(out, in, 1);
  float s = (scale.has_value() && *scale > 0) ? float(1.0 / *scale) : float(in) / float(out);
  for (int64_t o = 0; o < out; o++) {
    int64_t i;
    if (exact) {
      i = std::min(int64_t(std::floor((float(o) + 0.5f) * s)), in - 1);
    } else if (out == in) {
      i = o;
    } else if (out == 2 * in) {
      i = o >> 1;
    } else {
      i = std::min(int64_t(std::floor(float(o) * s)), in - 1);
    }
    t.set(o, 0, i, 1.0);
  }
  return t;
}

Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps t;
  t.init(out, in, 2);
  float s = at::native::area_pixel_compute_scale<float>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; o++) {
    float src = at::native::area_pixel_compute_source_index<float>(s, o, align_corners, /*cubic=*/false);
    int64_t i0 = int64_t(src);
    int64_t off = i0 < in - 1 ? 1 : 0;
    float l1 = src - float(i0), l0 = 1.0f - l1;
    t.set(o, 0, i0, double(l0));
    if (off) t.set(o, 1, i0 + 1, double(l1));
    else t.set(o, 0, i0, double(l0) + double(l1));  // both taps on the last element
  }
  return t;
}

// Keys' cubic convolution (A = -0.75) over the 4 inputs around the source
// index, clamped at the borders, with ATen's coefficients and index rounding.
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  constexpr float A = -0.75f;
  auto near = [&](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };  // |x| <= 1
  auto far = [&](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 < |x| < 2
  Taps t;
  t.init(out, in, 4);
  float s = at::native::area_pixel_compute_scale<float>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; o++) {
    float src = at::native::area_pixel_compute_source_index<float>(s, o, align_corners, /*cubic=*/true);
    int64_t i0 = int64_t(std::floor(src));
    float f = src - float(i0);
    float w[4] = {far(f + 1), near(f), near(1 - f), far(2 - f)};
    for (int64_t k = 0; k < 4; k++) t.set(o, k, std::clamp<int64_t>(i0 - 1 + k, 0, in - 1), double(w[k]));
  }
  return t;
}

at::Tensor upsample_impl(const at::Tensor& self, c10::IntArrayRef output_size, std::vector<Taps> taps, size_t D,
                         const char* name) {
  TinyOp op(name);
  Layout l;
  l.D = D;
  TORCH_CHECK(self.dim() == int64_t(D) + 2, "Non-empty ", D + 2, "D data tensor expected but got a tensor with sizes ",
              self.sizes());
  l.B = self.size(0) * self.size(1);
  l.lead = {self.size(0), self.size(1)};
  for (size_t i = 0; i < D; i++) l.S.push_back(self.size(int64_t(2 + i)));
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  Dims O(output_size.begin(), output_size.end());
  c10::DimVector os = out_sizes(l, O);
  if (l.B == 0 || tiny::numel(O) == 0 || tiny::numel(l.S) == 0) return make_result(cnst(to_shape(os), 0, to_engine(dt)), dt);
  tiny::Shape bs{l.B};
  bs.insert(bs.end(), l.S.begin(), l.S.end());
  T x = read(self).reshape(bs);
  bool nearest = true;
  for (auto& t : taps) nearest &= t.n == 1;
  T out = nearest ? gather_taps(x, taps, acc).value : apply_taps(x.cast(acc), taps, acc);
  return make_result(out.cast(to_engine(dt)).reshape(to_shape(os)), dt);
}

at::Tensor upsample_backward_impl(const at::Tensor& grad_output, c10::IntArrayRef input_size, std::vector<Taps> taps,
                                  size_t D, const char* name) {
  TinyOp op(name);
  c10::ScalarType dt = grad_output.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  TORCH_CHECK(input_size.size() == D + 2, name, ": input_size must have ", D + 2, " elements");
  int64_t B = input_size[0] * input_size[1];
  Dims S(input_size.begin() + 2, input_size.end()), O;
  for (auto& t : taps) O.push_back(t.out);
  if (B == 0 || tiny::numel(O) == 0 || tiny::numel(S) == 0) return make_result(cnst(to_shape(input_size), 0, to_engine(dt)), dt);
  tiny::Shape bo{B};
  bo.insert(bo.end(), O.begin(), O.end());
  T g = read(grad_output).cast(acc).reshape(bo);
  std::vector<Taps> inv;
  for (auto& t : taps) inv.push_back(t.inverse());
  return make_result(apply_taps(g, inv, acc).cast(to_engine(dt)).reshape(to_shape(input_size)), dt);
}

template <bool Exact>
at::Tensor upsample_nearest1d(const at::Tensor& self, c10::IntArrayRef os, std::optional<double> s) {
  return upsample_impl(self, os, {nearest_taps(self.size(2), os[0], s, Exact)}, 1, "upsample_nearest1d");
}
template <bool Exact>
at::Tensor upsample_nearest2d(const at::Tensor& self, c10::IntArrayRef os, std::optional<double> sh, std::optional<double> sw) {
  return upsample_impl(self, os, {nearest_taps(self.size(2), os[0], sh, Exact), nearest_taps(self.size(3), os[1], sw, Exact)},
                       2, "upsample_nearest2d");
}
template <bool Exact>
at::Tensor upsample_nearest3d(const at::Tensor& self, c10::IntArrayRef os, std::optional<double> sd, std::optional<double> sh,
                              std::optional<double> sw) {
  return upsample_impl(self, os,
                       {nearest_taps(self.size(2), os[0], sd, Exact), nearest_taps(self.size(3), os[1], sh, Exact),
                        nearest_taps(self.size(4), os[2], sw, Exact)},
                       3, "upsample_nearest3d");
}
template <bool Exact>
at::Tensor upsample_nearest1d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, std::optional<double> s) {
  return upsample_backward_impl(g, is, {nearest_taps(is[2], os[0], s, Exact)}, 1, "upsample_nearest1d_backward");
}
template <bool Exact>
at::Tensor upsample_nearest2d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, std::optional<double> sh,
                                       std::optional<double> sw) {
  return upsample_backward_impl(g, is, {nearest_taps(is[2], os[0], sh, Exact), nearest_taps(is[3], os[1], sw, Exact)}, 2,
                                "upsample_nearest2d_backward");
}
template <bool Exact>
at::Tensor upsample_nearest3d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, std::optional<double> sd,
                                       std::optional<double> sh, std::optional<double> sw) {
  return upsample_backward_impl(
      g, is, {nearest_taps(is[2], os[0], sd, Exact), nearest_taps(is[3], os[1], sh, Exact), nearest_taps(is[4], os[2], sw, Exact)},
      3, "upsample_nearest3d_backward");
}
at::Tensor upsample_linear1d(const at::Tensor& self, c10::IntArrayRef os, bool ac, std::optional<double> s) {
  return upsample_impl(self, os, {linear_taps(self.size(2), os[0], ac, s)}, 1, "upsample_linear1d");
}
at::Tensor upsample_bilinear2d(const at::Tensor& self, c10::IntArrayRef os, bool ac, std::optional<double> sh,
                               std::optional<double> sw) {
  return upsample_impl(self, os, {linear_taps(self.size(2), os[0], ac, sh), linear_taps(self.size(3), os[1], ac, sw)}, 2,
                       "upsample_bilinear2d");
}
at::Tensor upsample_trilinear3d(const at::Tensor& self, c10::IntArrayRef os, bool ac, std::optional<double> sd,
                                std::optional<double> sh, std::optional<double> sw) {
  return upsample_impl(self, os,
                       {linear_taps(self.size(2), os[0], ac, sd), linear_taps(self.size(3), os[1], ac, sh),
                        linear_taps(self.size(4), os[2], ac, sw)},
                       3, "upsample_trilinear3d");
}
at::Tensor upsample_bicubic2d(const at::Tensor& self, c10::IntArrayRef os, bool ac, std::optional<double> sh,
                             std::optional<double> sw) {
  return upsample_impl(self, os, {cubic_taps(self.size(2), os[0], ac, sh), cubic_taps(self.size(3), os[1], ac, sw)}, 2,
                       "upsample_bicubic2d");
}
at::Tensor upsample_bicubic2d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, bool ac,
                                      std::optional<double> sh, std::optional<double> sw) {
  return upsample_backward_impl(g, is, {cubic_taps(is[2], os[0], ac, sh), cubic_taps(is[3], os[1], ac, sw)}, 2,
                                "upsample_bicubic2d_backward");
}
at::Tensor upsample_linear1d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, bool ac,
                                      std::optional<double> s) {
  return upsample_backward_impl(g, is, {linear_taps(is[2], os[0], ac, s)}, 1, "upsample_linear1d_backward");
}
at::Tensor upsample_bilinear2d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, bool ac,
                                        std::optional<double> sh, std::optional<double> sw) {
  return upsample_backward_impl(g, is, {linear_taps(is[2], os[0], ac, sh), linear_taps(is[3], os[1], ac, sw)}, 2,
                                "upsample_bilinear2d_backward");
}
at::Tensor upsample_trilinear3d_backward(const at::Tensor& g, c10::IntArrayRef os, c10::IntArrayRef is, bool ac,
                                         std::optional<double> sd, std::optional<double> sh, std::optional<double> sw) {
  return upsample_backward_impl(
      g, is, {linear_taps(is[2], os[0], ac, sd), linear_taps(is[3], os[1], ac, sh), linear_taps(is[4], os[2], ac, sw)}, 3,
      "upsample_trilinear3d_backward");
}

// ---------------------------------------------------------------- pixel shuffle
at::Tensor pixel_shuffle(const at::Tensor& self, int64_t r) {
  TinyOp op("pixel_shuffle");
  TORCH_CHECK(self.dim() >= 3, "pixel_shuffle expects input to have at least 3 dimensions, but got input with ",
              self.dim(), " dimension(s)");
  TORCH_CHECK(r > 0, "pixel_shuffle expects a positive upscale_factor, but got ", r);
  int64_t c = self.size(-3), h = self.size(-2), w = self.size(-1);
  TORCH_CHECK(c % (r * r) == 0, "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, but input.size(-3)=", c, " is not divisible by ", r * r);
  int64_t B = self.numel() == 0 ? 0 : self.numel() / (c * h * w);
  c10::DimVector os(self.sizes().begin(), self.sizes().end() - 3);
  os.insert(os.end(), {c / (r * r), h * r, w * r});
  if (self.numel() == 0) return make_result(cnst(to_shape(os), 0, to_engine(self.scalar_type())), self.scalar_type());
  T x = read(self).reshape({B, c / (r * r), r, r, h, w}).permute({0, 1, 4, 2, 5, 3});
  return make_result(x.reshape(to_shape(os)), self.scalar_type());
}
at::Tensor pixel_unshuffle(const at::Tensor& self, int64_t r) {
  TinyOp op("pixel_unshuffle");
  TORCH_CHECK(self.dim() >= 3, "pixel_unshuffle expects input to have at least 3 dimensions, but got input with ",
              self.dim(), " dimension(s)");
  TORCH_CHECK(r > 0, "pixel_unshuffle expects a positive downscale_factor, but got ", r);
  int64_t c = self.size(-3), h = self.size(-2), w = self.size(-1);
  TORCH_CHECK(h % r == 0, "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=", h, " is not divisible by ", r);
  TORCH_CHECK(w % r == 0, "pixel_unshuffle expects width to be divisible by downscale_factor, but input.size(-1)=", w, " is not divisible by ", r);
  int64_t B = self.numel() == 0 ? 0 : self.numel() / (c * h * w);
  c10::DimVector os(self.sizes().begin(), self.sizes().end() - 3);
  os.insert(os.end(), {c * r * r, h / r, w / r});
  if (self.numel() == 0) return make_result(cnst(to_shape(os), 0, to_engine(self.scalar_type())), self.scalar_type());
  T x = read(self).reshape({B, c, h / r, r, w / r, r}).permute({0, 1, 3, 5, 2, 4});
  return make_result(x.reshape(to_shape(os)), self.scalar_type());
}

// ---------------------------------------------------------------- max_unpool2d / 3d
// Zeros of (..., o1, .., on) with each plane's inputs written at their flat indices (a scatter;
// the indices are checked on the host, as the CPU checks them). n = 2 or 3 spatial dims.
T max_unpool_value(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size, int n) {
  const char* dims = n == 2 ? "two elements (height, width)" : "three elements (depth, height, width)";
  const char* name = n == 2 ? "max_unpooling2d" : "max_unpooling3d";
  TORCH_CHECK(indices.scalar_type() == c10::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(int64_t(output_size.size()) == n, "There should be exactly ", dims, " in output_size, but got ",
              output_size.size(), " elements.");
  TORCH_CHECK(self.dim() == n + 1 || self.dim() == n + 2, "Input to ", name, " should be a ", n + 1, "d or ", n + 2,
              "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (int64_t d = 1; d < self.dim(); d++)
    TORCH_CHECK(self.size(d) > 0, name, "_forward_out_cpu(): Expected input to have non-zero size for "
                "non-batch dimensions, but got ", self.sizes(), " with dimension ", d, " being empty.");
  int64_t plane = 1, per = 1;
  tiny::Shape out = to_shape(self.sizes());
  std::string volume;
  for (int i = 0; i < n; i++) {
    plane *= output_size[size_t(i)];
    per *= self.size(self.dim() - n + i);
    out[out.size() - size_t(n - i)] = output_size[size_t(i)];
    volume += (i ? "x" : "") + std::to_string(output_size[size_t(i)]);
  }
  const int64_t planes = per ? self.numel() / per : 0;
  const tiny::DType dt = to_engine(self.scalar_type());
  T zeros = T::full({planes * plane}, tiny::Scalar::from_int(0), dt);
  if (self.numel() == 0) return zeros.reshape(out);
  HostIndex idx = host_index(indices);
  if (const int64_t* bad = find_bad(idx, [&](int64_t i) { return i < 0 || i >= plane; }))
    TORCH_CHECK(false, "Found an invalid max index: ", *bad, " (output volumes are of size ", volume);
  T base = T::arange(planes, tiny::Scalar::from_int(0), tiny::Scalar::from_int(plane), tiny::DType::Int64)
               .reshape({planes, 1})
               .expand({planes, per});
  T target = base.binary(Op::Add, idx.value.reshape({planes, per}));
  return zeros.scatter(target.reshape({planes * per}), read(self).reshape({planes * per}), false).reshape(out);
}
at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  TinyOp op("max_unpool2d");
  return make_result(max_unpool_value(self, indices, output_size, 2), self.scalar_type());
}
at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::Tensor& out) {
  TinyOp op("max_unpool2d");
  return assign_out(out, max_unpool_value(self, indices, output_size, 2), self.scalar_type(), {self});
}
void check_unpool3d_args(at::IntArrayRef stride, at::IntArrayRef padding) {
  TORCH_CHECK(stride.size() == 3, "There should be exactly three elements (depth, height, width) in stride, but got: ",
              stride.size(), " elements.");
  TORCH_CHECK(padding.size() == 3, "There should be exactly three elements (depth, height, width) in padding, but "
              "got: ", padding.size(), " elements.");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0, "strides should be greater than zero, but got stride: ",
              stride);
}
at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  TinyOp op("max_unpool3d");
  T v = max_unpool_value(self, indices, output_size, 3);
  check_unpool3d_args(stride, padding);
  return make_result(v, self.scalar_type());
}
at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& out) {
  TinyOp op("max_unpool3d");
  T v = max_unpool_value(self, indices, output_size, 3);
  check_unpool3d_args(stride, padding);
  return assign_out(out, v, self.scalar_type(), {self});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_unpool2d", max_unpool2d);
  m.impl("max_unpool2d.out", max_unpool2d_out);
  m.impl("max_unpool3d", max_unpool3d);
  m.impl("max_unpool3d.out", max_unpool3d_out);
  m.impl("max_pool2d_with_indices", max_pool2d_with_indices);
  m.impl("max_pool3d_with_indices", max_pool3d_with_indices);
  m.impl("max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  m.impl("max_pool3d_with_indices_backward", max_pool3d_with_indices_backward);
  m.impl("avg_pool2d", avg_pool2d);
  m.impl("avg_pool3d", avg_pool3d);
  m.impl("avg_pool2d_backward", avg_pool2d_backward);
  m.impl("avg_pool3d_backward", avg_pool3d_backward);
  m.impl("_adaptive_avg_pool2d", [](const at::Tensor& s, c10::IntArrayRef o) { return adaptive_avg_pool_impl(s, o, 2); });
  m.impl("_adaptive_avg_pool3d", [](const at::Tensor& s, c10::IntArrayRef o) { return adaptive_avg_pool_impl(s, o, 3); });
  m.impl("_adaptive_avg_pool2d_backward", [](const at::Tensor& g, const at::Tensor& s) { return adaptive_avg_pool_backward_impl(g, s, 2); });
  m.impl("_adaptive_avg_pool3d_backward", [](const at::Tensor& g, const at::Tensor& s) { return adaptive_avg_pool_backward_impl(g, s, 3); });
  m.impl("adaptive_max_pool2d", [](const at::Tensor& s, c10::IntArrayRef o) { return adaptive_max_pool_impl(s, o, 2); });
  m.impl("adaptive_max_pool3d", [](const at::Tensor& s, c10::IntArrayRef o) { return adaptive_max_pool_impl(s, o, 3); });
  m.impl("adaptive_max_pool2d_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& i) { return adaptive_max_pool_backward_impl(g, s, i, 2); });
  m.impl("adaptive_max_pool3d_backward", [](const at::Tensor& g, const at::Tensor& s, const at::Tensor& i) { return adaptive_max_pool_backward_impl(g, s, i, 3); });
  m.impl("upsample_nearest1d", upsample_nearest1d<false>);
  m.impl("upsample_nearest2d", upsample_nearest2d<false>);
  m.impl("upsample_nearest3d", upsample_nearest3d<false>);
  m.impl("_upsample_nearest_exact1d", upsample_nearest1d<true>);
  m.impl("_upsample_nearest_exact2d", upsample_nearest2d<true>);
  m.impl("_upsample_nearest_exact3d", upsample_nearest3d<true>);
  m.impl("upsample_nearest1d_backward", upsample_nearest1d_backward<false>);
  m.impl("upsample_nearest2d_backward", upsample_nearest2d_backward<false>);
  m.impl("upsample_nearest3d_backward", upsample_nearest3d_backward<false>);
  m.impl("_upsample_nearest_exact1d_backward", upsample_nearest1d_backward<true>);
  m.impl("_upsample_nearest_exact2d_backward", upsample_nearest2d_backward<true>);
  m.impl("_upsample_nearest_exact3d_backward", upsample_nearest3d_backward<true>);
  m.impl("upsample_linear1d", upsample_linear1d);
  m.impl("upsample_bilinear2d", upsample_bilinear2d);
  m.impl("upsample_trilinear3d", upsample_trilinear3d);
  m.impl("upsample_linear1d_backward", upsample_linear1d_backward);
  m.impl("upsample_bilinear2d_backward", upsample_bilinear2d_backward);
  m.impl("upsample_bicubic2d", upsample_bicubic2d);
  m.impl("upsample_bicubic2d_backward", upsample_bicubic2d_backward);
  m.impl("upsample_trilinear3d_backward", upsample_trilinear3d_backward);
  m.impl("pixel_shuffle", pixel_shuffle);
  m.impl("pixel_unshuffle", pixel_unshuffle);
}

}  // namespace torch_tiny
