#include "torch/reduce_util.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>

#include <cmath>
#include <limits>

#include "torch/tensor_value.h"

namespace torch_tiny {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

std::vector<int> reduce_axes(const at::Tensor& self, at::OptionalIntArrayRef dims) {
  std::vector<int> axes;
  int64_t nd = self.dim();
  if (!dims.has_value() || dims->empty()) {
    for (int64_t i = 0; i < nd; i++) axes.push_back(int(i));
    return axes;
  }
  auto bits = at::dim_list_to_bitset(*dims, nd);
  for (int64_t i = 0; i < nd; i++)
    if (bits[size_t(i)]) axes.push_back(int(i));
  return axes;
}

int wrap_dim(const at::Tensor& self, int64_t dim) { return int(at::maybe_wrap_dim(dim, self.dim())); }

int64_t reduced_count(const at::Tensor& self, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= self.size(a);
  return n;
}

T constant(const tiny::Shape& shape, double v, tiny::DType dt) {
  tiny::Scalar s;
  if (tiny::is_float(dt)) s = tiny::Scalar::from_double(v);
  else if (dt == tiny::DType::Bool) s = tiny::Scalar::from_bool(v != 0);
  else s = tiny::Scalar::from_int(int64_t(v));
  return T::full(shape, s, dt);
}

T constant_like(const T& x, double v) { return constant(x.shape(), v, x.dtype()); }

T scalar_like(const T& x, const c10::Scalar& s) { return T::full(x.shape(), to_engine(s), x.dtype()); }

namespace {
T limit_like(const T& x, bool high) {
  using L = std::numeric_limits<int64_t>;
  const double inf = std::numeric_limits<double>::infinity();
  switch (x.dtype()) {
    case tiny::DType::Bool: return constant_like(x, high ? 1 : 0);
    case tiny::DType::UInt8: return constant_like(x, high ? 255 : 0);
    case tiny::DType::Int8: return constant_like(x, high ? 127 : -128);
    case tiny::DType::Int16: return constant_like(x, high ? 32767 : -32768);
    case tiny::DType::Int32: return constant_like(x, high ? 2147483647.0 : -2147483648.0);
    case tiny::DType::Int64:  // exact: doubles cannot hold these
      return T::full(x.shape(), tiny::Scalar::from_int(high ? L::max() : L::min()), x.dtype());
    default: return constant_like(x, high ? inf : -inf);
  }
}
}  // namespace

T lowest_like(const T& x) { return limit_like(x, false); }
T highest_like(const T& x) { return limit_like(x, true); }

T iota(const tiny::Shape& shape, int axis) {
  tiny::Shape s(shape.size(), 1);
  s[size_t(axis)] = shape[size_t(axis)];
  T r = T::arange(shape[size_t(axis)], tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), tiny::DType::Int64);
  return r.reshape(s).expand(shape);
}

T squeeze_axes(const T& v, const std::vector<int>& axes, bool keepdim) {
  if (keepdim || axes.empty()) return v;
  tiny::Shape s;
  for (int i = 0; i < v.ndim(); i++)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) s.push_back(v.shape()[size_t(i)]);
  return v.reshape(s);
}

T is_nan(const T& x) {
  if (!tiny::is_float(x.dtype())) return constant(x.shape(), 0, tiny::DType::Bool);
  return x.unary(Op::IsNan);
}

T is_inf(const T& x) {
  if (!tiny::is_float(x.dtype())) return constant(x.shape(), 0, tiny::DType::Bool);
  return x.unary(Op::Abs).binary(Op::CmpEq, constant_like(x, std::numeric_limits<double>::infinity()));
}

T add(const T& a, const T& b) { return a.binary(Op::Add, b); }
T sub(const T& a, const T& b) { return a.binary(Op::Sub, b); }
T mul(const T& a, const T& b) { return a.binary(Op::Mul, b); }
T div(const T& a, const T& b) { return a.binary(Op::Div, b); }
T select(const T& cond, const T& a, const T& b) { return T::where(cond, a, b); }

T reduce_keep(const T& x, ReduceOp op, const std::vector<int>& axes) {
  if (axes.empty()) return op == ReduceOp::Any || op == ReduceOp::All ? x.cast(tiny::DType::Bool) : x;
  return x.reduce(op, axes, true);
}

tiny::DType scan_acc_dtype(tiny::DType t) {
  if (t == tiny::DType::Float32) return tiny::DType::Float64;
  return tiny::compute_dtype(t);
}

T extreme(const T& x, bool is_max, const std::vector<int>& axes) {
  return reduce_keep(x, is_max ? ReduceOp::Max : ReduceOp::Min, axes);
}

T index_of(const T& x, const T& m, int axis) {
  // x == m marks the extreme; when m is NaN no element equals it and the
  // NaNs are the matches (if m is not NaN, x has no NaN along the axis).
  T hit = x.binary(Op::CmpEq, m.expand(x.shape()));
  if (tiny::is_float(x.dtype())) hit = hit.binary(Op::Or, x.unary(Op::IsNan));
  int64_t n = x.shape()[size_t(axis)];
  T idx = select(hit, iota(x.shape(), axis), constant(x.shape(), double(n), tiny::DType::Int64));
  return idx.reduce(ReduceOp::Min, {axis}, true);
}

T logsumexp_keep(const T& x, const std::vector<int>& axes, const T* mask) {
  const double inf = std::numeric_limits<double>::infinity();
  T xm = mask ? select(*mask, x, constant_like(x, -inf)) : x;
  T m = reduce_keep(xm, ReduceOp::Max, axes);
  // An infinite (or empty) maximum shifts by 0: exp(x - inf) would be NaN.
  m = select(is_inf(m), constant_like(m, 0), m);
  T e = sub(xm, m.expand(x.shape())).unary(Op::Exp);
  if (mask) e = select(*mask, e, constant_like(e, 0));
  return add(reduce_keep(e, ReduceOp::Sum, axes).unary(Op::Log), m);
}

T log_add_exp(const T& a, const T& b) {
  // ATen's log_add_exp_helper: max + log1p(exp(min - max)), and equal
  // infinities give the first operand (inf + inf = inf, -inf + -inf = -inf).
  T mx = a.binary(Op::Max, b), mn = a.binary(Op::Min, b);
  T general = add(mx, sub(mn, mx).unary(Op::Exp).unary(Op::Log1p));
  T both_inf = mn.binary(Op::CmpEq, mx).binary(Op::And, is_inf(mn));
  return select(both_inf, a, general);
}

void check_out_dtype(const at::Tensor& out, c10::ScalarType expected) {
  TORCH_CHECK(out.scalar_type() == expected, "Expected out tensor to have dtype ", c10::scalarTypeToTypeMeta(expected),
              ", but got ", out.dtype(), " instead");
}

namespace {
at::Tensor& deliver(at::Tensor& out, const T& v) {
  TORCH_CHECK(out.device().type() == c10::DeviceType::PrivateUse1,
              "Expected out tensor to have device tiny:0, but got ", out.device(), " instead");
  at::native::resize_output(out, c10::IntArrayRef(v.shape()));
  at::assert_no_internal_overlap(out);
  write(out, v.cast(to_engine(out.scalar_type())));
  return out;
}
}  // namespace

at::Tensor& assign_out_exact(at::Tensor& out, const T& v, c10::ScalarType expected) {
  check_out_dtype(out, expected);
  return deliver(out, v);
}

at::Tensor& assign_out_cast(at::Tensor& out, const T& v, c10::ScalarType computed) {
  TORCH_CHECK(c10::canCast(computed, out.scalar_type()), "result type ", computed,
              " can't be cast to the desired output type ", out.scalar_type());
  return deliver(out, v);
}

}  // namespace torch_tiny
