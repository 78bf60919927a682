// Factories that compute their values on the device: arange, linspace,
// logspace, eye, and the triangle masks tril / triu.
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <ATen/Dispatch.h>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
  TinyOp op("arange");
  c10::ScalarType dt = out.scalar_type();
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(c10::kHalf, c10::kBFloat16, dt, "arange_tiny",
                             [&] { size = at::native::compute_arange_size<scalar_t>(start, end, step); });
  at::native::resize_output(out, {size});
  tiny::Scalar s0 = c10::isFloatingType(dt) ? tiny::Scalar::from_double(start.to<double>()) : tiny::Scalar::from_int(start.to<int64_t>());
  tiny::Scalar s1 = c10::isFloatingType(dt) ? tiny::Scalar::from_double(step.to<double>()) : tiny::Scalar::from_int(step.to<int64_t>());
  write(out, tiny::Tensor::arange(size, s0, s1, to_engine(dt)));
  return out;
}

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;

T f64(double v, const tiny::Shape& s) { return T::full(s, tiny::Scalar::from_double(v), DType::Float64); }

// The CPU's formula: start + step * i for the first half, end - step * (steps - 1 - i)
// for the second (so both ends are exact), in double precision.
T linspace_exponent(double start, double end, int64_t steps) {
  tiny::Shape s{steps};
  double step = (end - start) / double(steps - 1);
  T i = T::arange(steps, tiny::Scalar::from_double(0), tiny::Scalar::from_double(1), DType::Float64);
  T lo = f64(start, s).binary(Op::Add, i.binary(Op::Mul, f64(step, s)));
  T hi = f64(end, s).binary(Op::Sub, f64(double(steps - 1), s).binary(Op::Sub, i).binary(Op::Mul, f64(step, s)));
  return T::where(i.binary(Op::CmpLt, f64(double(steps / 2), s)), lo, hi);
}

at::Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  TinyOp op("linspace");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  DType dt = to_engine(out.scalar_type());
  bool integral = !c10::isFloatingType(out.scalar_type());
  // integer outputs take start and end as integers, as the CPU converts them
  double a = integral ? double(start.to<int64_t>()) : start.to<double>();
  double b = integral ? double(end.to<int64_t>()) : end.to<double>();
  T v = steps == 1 ? f64(a, {1}) : linspace_exponent(a, b, steps);
  write(out, v.cast(dt));
  return out;
}

at::Tensor& logspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  TinyOp op("logspace");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  DType dt = to_engine(out.scalar_type());
  bool integral = !c10::isFloatingType(out.scalar_type());
  double a = integral ? double(start.to<int64_t>()) : start.to<double>();
  double b = integral ? double(end.to<int64_t>()) : end.to<double>();
  T e = steps == 1 ? f64(a, {1}) : linspace_exponent(a, b, steps);
  write(out, f64(base, {steps}).binary(Op::Pow, e).cast(dt));
  return out;
}

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  TinyOp op("eye");
  at::native::resize_output(out, {n, m});
  if (n == 0 || m == 0) return out;
  tiny::Shape s{n, m};
  T rows = place_dims(T::arange(n, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64), 2, 0).expand(s);
  T cols = place_dims(T::arange(m, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64), 2, 1).expand(s);
  write(out, rows.binary(Op::CmpEq, cols).cast(to_engine(out.scalar_type())));
  return out;
}
at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

// ---------------------------------------------------------------- tril / triu

// Keeps elements with col - row <= diagonal (tril) or >= diagonal (triu).
T triangle(const at::Tensor& self, int64_t diagonal, bool lower) {
  T v = read(self);
  tiny::Shape s = to_shape(self.sizes());
  int nd = int(s.size());
  if (self.numel() == 0) return v;
  int64_t rows = s[size_t(nd - 2)], cols = s[size_t(nd - 1)];
  T r = place_dims(T::arange(rows, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64), nd, nd - 2).expand(s);
  T c = place_dims(T::arange(cols, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64), nd, nd - 1).expand(s);
  T diff = c.binary(Op::Sub, r), d = i64(diagonal, s);
  T keep = lower ? diff.binary(Op::CmpLe, d) : d.binary(Op::CmpLe, diff);
  return T::where(keep, v, T::full(s, tiny::Scalar::from_int(0), v.dtype()));
}

template <bool Lower>
void triangle_meta(const at::Tensor& self, int64_t diagonal, const at::Tensor& out) {
  if (Lower) {
    MetaOnly<at::meta::structured_tril> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
    m.meta(self, diagonal);
  } else {
    MetaOnly<at::meta::structured_triu> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
    m.meta(self, diagonal);
  }
}
template <bool Lower>
at::Tensor tri(const at::Tensor& self, int64_t diagonal) {
  TinyOp op(Lower ? "tril" : "triu");
  triangle_meta<Lower>(self, diagonal, {});
  return make_result(triangle(self, diagonal, Lower), self.scalar_type());
}
template <bool Lower>
at::Tensor& tri_(at::Tensor& self, int64_t diagonal) {
  TinyOp op(Lower ? "tril_" : "triu_");
  triangle_meta<Lower>(self, diagonal, self);
  write(self, triangle(self, diagonal, Lower));
  return self;
}
template <bool Lower>
at::Tensor& tri_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  TinyOp op(Lower ? "tril" : "triu");
  triangle_meta<Lower>(self, diagonal, out);
  // the structured out= wrapper's check (the meta function alone does not make it)
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.dtype(),
              ", but got ", out.dtype(), " instead");
  return assign_out(out, triangle(self, diagonal, Lower), self.scalar_type(), {self});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("logspace.out", logspace_out);
  m.impl("eye.out", eye_out);
  m.impl("eye.m_out", eye_m_out);
  m.impl("tril", tri<true>);
  m.impl("tril_", tri_<true>);
  m.impl("tril.out", tri_out<true>);
  m.impl("triu", tri<false>);
  m.impl("triu_", tri_<false>);
  m.impl("triu.out", tri_out<false>);
}

}  // namespace torch_tiny
