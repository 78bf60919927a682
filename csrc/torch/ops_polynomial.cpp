// Orthogonal polynomials of a tensor degree n (torch.special.*_polynomial_*),
// as ATen computes them: special values, a closed form for large n inside the
// interval of orthogonality, otherwise the three-term recurrence run n times.
// The recurrence is unrolled up to the largest degree present, read on the
// host (the degrees are usually a Python number or a small input tensor); each
// element stops at its own degree.
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/result_type.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "torch/pointwise.h"

namespace torch_tiny {

using namespace pw;

namespace {

constexpr int64_t kMaxDegree = 1024;  // the recurrence is unrolled: keep kernels a sane size

struct Degree {
  T n;         // int64, ATen's static_cast<int64_t>(n) of the promoted n
  T nf;        // the same in the compute dtype
  int64_t max; // the largest degree present (for the unrolled loop)
};

T i64(const T& like, int64_t v) { return T::full(like.shape(), tiny::Scalar::from_int(v), tiny::DType::Int64); }

// x86's conversion of NaN or an out-of-range value to int64 gives INT64_MIN (a
// negative degree: the polynomial is 0); the engine's cast saturates, so those
// are mapped explicitly.
T to_degree(const T& nf) {
  T ok = lt(un(Op::Abs, nf), 9.2233720368547758e18);
  return where(ok, nf.cast(tiny::DType::Int64), i64(nf, -1));
}

int64_t host_max_degree(const at::Tensor& n, c10::ScalarType dt) {
  if (n.numel() == 0) return 0;
  at::Tensor h = n.device().is_cpu() ? n : at::_to_copy(n, c10::TensorOptions().device(c10::kCPU));
  h = h.to(dt).to(c10::kDouble).contiguous();
  const double* p = h.const_data_ptr<double>();
  int64_t m = 0;
  for (int64_t i = 0; i < h.numel(); i++) {
    double v = p[i];
    if (std::abs(v) < 9.2233720368547758e18) m = std::max(m, int64_t(v));
  }
  return m;
}

struct Poly {
  T x;
  Degree d;
  c10::ScalarType dt;
};
Poly poly_inputs(const at::Tensor& x, const at::Tensor& n, const char* kernel, const char* name) {
  c10::ScalarType dt = float_type_for(at::result_type(x, n));
  check_dtype(dt, kFloatOnly, kernel);
  if (dt == c10::kHalf || dt == c10::kBFloat16) not_implemented_for(kernel, dt);
  int64_t max = host_max_degree(n, dt);
  TORCH_CHECK_NOT_IMPLEMENTED(max <= kMaxDegree, "tiny: ", name, " of degree ", max,
                              " exceeds the unrolled recurrence limit (", kMaxDegree, ")");
  tiny::Shape shape = broadcast_shape({x, n});
  T xv = operand(x, dt, shape);
  T nf = operand(n, dt, shape);
  T ni = to_degree(nf);
  return {xv, {ni, ni.cast(xv.dtype()), max}, dt};
}

T even(const T& n) { return eq(n.binary(Op::Fmod, i64(n, 2)), i64(n, 0)); }
T deg_is(const T& n, int64_t v) { return eq(n, i64(n, v)); }
T deg_gt(const T& n, int64_t v) { return gt(n, i64(n, v)); }

// q_k = step(k, q_{k-1}, q_{k-2}) for k = first..last(n), starting from (p, q);
// elements whose degree is smaller keep their value.
template <typename Step>
T recurrence(const T& n, int64_t max_iter, T p, T q, int64_t first, int64_t offset, Step step) {
  // iteration j runs while j + offset <= n
  for (int64_t k = first; k - first < max_iter; k++) {
    T active = le(i64(n, k + offset), n);
    T r = step(k, q, p);
    p = where(active, q, p);
    q = where(active, r, q);
  }
  return q;
}

// common tail: n < 0 -> 0, n == 0 -> 1, n == 1 -> one, else the recurrence
T finish(const Degree& d, const T& one, const T& rec) {
  T r = where(deg_is(d.n, 1), one, rec);
  r = where(deg_is(d.n, 0), 1.0, r);
  return where(lt(d.n, i64(d.n, 0)), 0.0, r);
}

T chebyshev_rec(const Poly& P, const T& y, const T& q0) {
  // r = (y + y) q - p for k = 2..n
  return recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(y, 1.0), q0, 2, 0,
                    [&](int64_t, const T& q, const T& p) { return (y + y) * q - p; });
}

Computed cheb_t(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "chebyshev_polynomial_t_cpu", "chebyshev_polynomial_t");
  const T& v = P.x;
  T r = finish(P.d, v, chebyshev_rec(P, v, v));
  r = where(land(deg_gt(P.d.n, 6), lt(un(Op::Abs, v), 1.0)), un(Op::Cos, P.d.nf * un(Op::Acos, v)), r);
  T pm1 = where(lor(gt(v, 0.0), even(P.d.n)), cnst(v, 1.0), cnst(v, -1.0));
  r = where(eq(un(Op::Abs, v), 1.0), pm1, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed cheb_u(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "chebyshev_polynomial_u_cpu", "chebyshev_polynomial_u");
  const T& v = P.x;
  T n1 = P.d.nf + 1.0;
  T r = finish(P.d, v + v, chebyshev_rec(P, v, v + v));
  T a = un(Op::Acos, v);
  T s = un(Op::Sin, a);
  T closed = where(ne(s, 0.0), un(Op::Sin, n1 * a) / s, n1 * un(Op::Cos, n1 * a) / v);
  r = where(land(deg_gt(P.d.n, 8), lt(un(Op::Abs, v), 1.0)), closed, r);
  r = where(eq(un(Op::Abs, v), 1.0), where(lor(gt(v, 0.0), even(P.d.n)), n1, -n1), r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed cheb_v(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "chebyshev_polynomial_v_cpu", "chebyshev_polynomial_v");
  const T& v = P.x;
  T odd_val = where(even(P.d.n), P.d.nf + P.d.nf + 1.0, -(P.d.nf + P.d.nf + 1.0));
  T r = finish(P.d, v + v - 1.0, chebyshev_rec(P, v, v + v - 1.0));
  T a = un(Op::Acos, v);
  T closed = where(ne(un(Op::Sin, a / 2.0), 1.0), un(Op::Cos, (P.d.nf + 0.5) * a) / un(Op::Cos, a / 2.0), odd_val);
  r = where(land(deg_gt(P.d.n, 8), lt(un(Op::Abs, v), 1.0)), closed, r);
  r = where(eq(un(Op::Abs, v), 1.0), where(gt(v, 0.0), cnst(v, 1.0), odd_val), r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed cheb_w(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "chebyshev_polynomial_w_cpu", "chebyshev_polynomial_w");
  const T& v = P.x;
  T two_n1 = P.d.nf + P.d.nf + 1.0;
  T alt = where(even(P.d.n), cnst(v, 1.0), cnst(v, -1.0));
  T r = finish(P.d, v + v + 1.0, chebyshev_rec(P, v, v + v + 1.0));
  T a = un(Op::Acos, v);
  T closed = where(ne(un(Op::Cos, a / 2.0), 1.0), un(Op::Sin, (P.d.nf + 0.5) * a) / un(Op::Sin, a / 2.0),
                   where(gt(v, 0.0), two_n1, alt));
  r = where(land(deg_gt(P.d.n, 8), lt(un(Op::Abs, v), 1.0)), closed, r);
  r = where(eq(un(Op::Abs, v), 1.0), where(gt(v, 0.0), two_n1, alt), r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed hermite_h(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "hermite_polynomial_h_cpu", "hermite_polynomial_h");
  const T& v = P.x;
  // r = (x + x) q - k p for k = 2, 4, ..., 2n - 2
  T rec = recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(v, 1.0), v + v, 1, 1,
                     [&](int64_t j, const T& q, const T& p) { return (v + v) * q - double(2 * j) * p; });
  return {finish(P.d, v + v, rec), P.dt};
}

Computed hermite_he(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "hermite_polynomial_he_cpu", "hermite_polynomial_he");
  const T& v = P.x;
  // r = x q - k p for k = 1..n-1. ATen's compiled loop is fma(x, q, -(k p)) (GCC contracts it in
  // the AVX2/AVX-512 kernels); for float the product x q is exact in double, so the
  // difference rounded from double is the fused result (bit-identical over the OpInfo samples).
  bool f32 = v.dtype() == tiny::DType::Float32;
  T vd = f32 ? v.cast(tiny::DType::Float64) : v;
  T rec = recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(v, 1.0), v, 1, 1,
                     [&](int64_t k, const T& q, const T& p) {
                       if (!f32) return v * q - double(k) * p;
                       T kp = double(k) * p;
                       return (vd * q.cast(tiny::DType::Float64) - kp.cast(tiny::DType::Float64)).cast(v.dtype());
                     });
  return {finish(P.d, v, rec), P.dt};
}

Computed laguerre_l(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "laguerre_polynomial_l_cpu", "laguerre_polynomial_l");
  const T& v = P.x;
  T one_minus = 1.0 - v;
  // r = ((k + k) + (1 - x)) q - k p) / (k + 1) for k = 1..n-1
  T rec = recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(v, 1.0), one_minus, 1, 1,
                     [&](int64_t k, const T& q, const T& p) {
                       return ((double(k + k) + one_minus) * q - double(k) * p) / double(k + 1);
                     });
  T r = finish(P.d, one_minus, rec);
  r = where(land(eq(un(Op::Abs, v), 0.0), ge(P.d.n, i64(P.d.n, 0))), 1.0, r);
  return {r, P.dt};
}

Computed legendre_p(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "legendre_polynomial_p_cpu", "legendre_polynomial_p");
  const T& v = P.x;
  // r = ((k + k + 1) x q - k p) / (k + 1) for k = 1..n-1
  T rec = recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(v, 1.0), v, 1, 1,
                     [&](int64_t k, const T& q, const T& p) {
                       return (double(k + k + 1) * v * q - double(k) * p) / double(k + 1);
                     });
  T r = finish(P.d, v, rec);
  T pm1 = where(lor(gt(v, 0.0), even(P.d.n)), cnst(v, 1.0), cnst(v, -1.0));
  r = where(eq(un(Op::Abs, v), 1.0), pm1, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

// The shifted Chebyshev polynomials work in y = x + x - 1 (as ATen spells it).
Computed shifted_t(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "shifted_chebyshev_polynomial_t_cpu", "shifted_chebyshev_polynomial_t");
  const T& v = P.x;
  T y = v + v - 1.0;
  T r = finish(P.d, y, recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(y, 1.0), y, 2, 0,
                                  [&](int64_t, const T& q, const T& p) { return (y + y) * q - p; }));
  r = where(land(deg_gt(P.d.n, 6), lt(un(Op::Abs, y), 1.0)), un(Op::Cos, P.d.nf * un(Op::Acos, y)), r);
  r = where(eq(v, 0.0), where(even(P.d.n), cnst(v, 1.0), cnst(v, -1.0)), r);
  r = where(eq(v, 1.0), 1.0, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed shifted_u(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "shifted_chebyshev_polynomial_u_cpu", "shifted_chebyshev_polynomial_u");
  const T& v = P.x;
  T y = v + v - 1.0;
  T n1 = P.d.nf + 1.0;
  T r = finish(P.d, y + y, recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(y, 1.0), y + y, 2, 0,
                                      [&](int64_t, const T& q, const T& p) { return (y + y) * q - p; }));
  T a = un(Op::Acos, y);
  T s = un(Op::Sin, a);
  T closed = where(ne(s, 0.0), un(Op::Sin, n1 * a) / s, n1 * un(Op::Cos, n1 * a) / y);
  r = where(land(deg_gt(P.d.n, 6), lt(un(Op::Abs, y), 1.0)), closed, r);
  r = where(eq(v, 0.0), where(even(P.d.n), n1, -n1), r);
  r = where(eq(v, 1.0), n1, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed shifted_v(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "shifted_chebyshev_polynomial_v_cpu", "shifted_chebyshev_polynomial_v");
  const T& v = P.x;
  T y = v + v - 1.0;
  T odd_val = where(even(P.d.n), P.d.nf + P.d.nf + 1.0, -(P.d.nf + P.d.nf + 1.0));
  T r = finish(P.d, y + y - 1.0, recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(y, 1.0), y + y - 1.0, 2,
                                            0, [&](int64_t, const T& q, const T& p) { return (y + y) * q - p; }));
  T a = un(Op::Acos, y);
  T closed = where(ne(un(Op::Sin, a / 2.0), 1.0), un(Op::Cos, (P.d.nf + 0.5) * a) / un(Op::Cos, a / 2.0), odd_val);
  r = where(land(deg_gt(P.d.n, 6), lt(un(Op::Abs, y), 1.0)), closed, r);
  r = where(eq(v, 0.0), odd_val, r);
  r = where(eq(v, 1.0), 1.0, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

Computed shifted_w(const at::Tensor& x, const at::Tensor& n) {
  Poly P = poly_inputs(x, n, "shifted_chebyshev_polynomial_w_cpu", "shifted_chebyshev_polynomial_w");
  const T& v = P.x;
  T y = v + v - 1.0;
  T alt = where(even(P.d.n), cnst(v, 1.0), cnst(v, -1.0));
  T r = finish(P.d, y + y + 1.0, recurrence(P.d.n, std::max<int64_t>(0, P.d.max - 1), cnst(y, 1.0), y + y + 1.0, 2,
                                            0, [&](int64_t, const T& q, const T& p) { return (y + y) * q - p; }));
  T a = un(Op::Acos, y);
  T closed = where(ne(un(Op::Cos, a / 2.0), 1.0), un(Op::Sin, (P.d.nf + 0.5) * a) / un(Op::Sin, a / 2.0), alt);
  r = where(land(deg_gt(P.d.n, 4), lt(un(Op::Abs, y), 1.0)), closed, r);
  r = where(eq(v, 0.0), alt, r);
  r = where(eq(v, 1.0), P.d.nf + P.d.nf + 1.0, r);
  return {where(lt(P.d.n, i64(P.d.n, 0)), 0.0, r), P.dt};
}

}  // namespace

#define TINY_POLY(name, F)                          \
  m.impl(name, Kernels<name, F>::fn);               \
  m.impl(name ".out", Kernels<name, F>::out)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TINY_POLY("special_chebyshev_polynomial_t", cheb_t);
  TINY_POLY("special_chebyshev_polynomial_u", cheb_u);
  TINY_POLY("special_chebyshev_polynomial_v", cheb_v);
  TINY_POLY("special_chebyshev_polynomial_w", cheb_w);
  TINY_POLY("special_hermite_polynomial_h", hermite_h);
  TINY_POLY("special_hermite_polynomial_he", hermite_he);
  TINY_POLY("special_laguerre_polynomial_l", laguerre_l);
  TINY_POLY("special_legendre_polynomial_p", legendre_p);
  TINY_POLY("special_shifted_chebyshev_polynomial_t", shifted_t);
  TINY_POLY("special_shifted_chebyshev_polynomial_u", shifted_u);
  TINY_POLY("special_shifted_chebyshev_polynomial_v", shifted_v);
  TINY_POLY("special_shifted_chebyshev_polynomial_w", shifted_w);
}

}  // namespace torch_tiny
