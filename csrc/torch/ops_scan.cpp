// Scans: cumsum, cumprod, cummax / cummin (values and indices), logcumsumexp.
// All are lazy engine graphs (see scan.h for the blocked formulation).
// cummax's index is the last position where the running extreme was reached
// (ties move it forward, NaN is the extreme), like the CPU kernel: with v the
// running extreme, position j is a "hit" when x[j] == v[j] or x[j] is NaN,
// and the index at i is the running max of the hit positions up to i.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/scan.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;

// ---------------------------------------------------------------- cumsum / cumprod
T cum_value(const at::Tensor& self, int64_t dim, c10::ScalarType dt, bool prod) {
  int axis = wrap_dim(self, dim);
  tiny::DType out = to_engine(dt);
  T x = read(self).cast(out).cast(scan_acc_dtype(out));
  return scan(x, axis, prod ? prod_rule() : sum_rule(), out);
}
const char* cum_name(bool prod) { return prod ? "cumprod" : "cumsum"; }

template <bool Prod>
at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
  TinyOp op(cum_name(Prod));
  c10::ScalarType dt = at::native::get_dtype_from_self(self, dtype, /*promote_integers=*/true);
  return make_result(cum_value(self, dim, dt, Prod), dt);
}
template <bool Prod>
at::Tensor& cumsum_(at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
  TinyOp op(cum_name(Prod));
  c10::ScalarType dt = dtype.value_or(self.scalar_type());
  TORCH_CHECK(dt == self.scalar_type(), "Bad in-place call: input tensor dtype ", self.dtype(),
              " and output tensor dtype ", c10::scalarTypeToTypeMeta(dt), " should match");
  TORCH_CHECK_NOT_IMPLEMENTED(dt != c10::kBool, "\"", cum_name(Prod), "_out_cpu\" not implemented for 'Bool'");
  return assign_inplace(self, cum_value(self, dim, dt, Prod), dt, {});
}
template <bool Prod>
at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op(cum_name(Prod));
  c10::ScalarType dt = dtype.value_or(out.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(dt != c10::kBool, "\"", cum_name(Prod), "_out_cpu\" not implemented for 'Bool'");
  return assign_out_exact(out, cum_value(self, dim, dt, Prod), dt);
}

// ---------------------------------------------------------------- cummax / cummin
void check_same_type(const at::Tensor& out, c10::ScalarType expected) {
  TORCH_CHECK(out.scalar_type() == expected, "expected scalar_type ", expected, " but found ", out.scalar_type());
}

std::pair<T, T> cumextreme_value(const at::Tensor& self, int64_t dim, bool is_max) {
  int axis = wrap_dim(self, dim);
  T x = read(self);
  if (self.dim() == 0) return {x, constant({}, 0, tiny::DType::Int64)};
  T v = scan(x, axis, is_max ? max_rule() : min_rule());
  T hit = x.binary(Op::CmpEq, v).binary(Op::Or, is_nan(x));
  T pos = select(hit, iota(x.shape(), axis), constant(x.shape(), 0, tiny::DType::Int64));
  return {v, scan(pos, axis, max_rule())};
}

template <bool IsMax>
std::tuple<at::Tensor, at::Tensor> cummax(const at::Tensor& self, int64_t dim) {
  TinyOp op(IsMax ? "cummax" : "cummin");
  auto [v, i] = cumextreme_value(self, dim, IsMax);
  return {make_result(v, self.scalar_type()), make_result(i, c10::kLong)};
}
template <bool IsMax>
std::tuple<at::Tensor&, at::Tensor&> cummax_out(const at::Tensor& self, int64_t dim, at::Tensor& values,
                                                at::Tensor& indices) {
  TinyOp op(IsMax ? "cummax" : "cummin");
  check_same_type(values, self.scalar_type());
  check_same_type(indices, c10::kLong);
  auto [v, i] = cumextreme_value(self, dim, IsMax);
  assign_out_exact(values, v, self.scalar_type());
  assign_out_exact(indices, i, c10::kLong);
  return {values, indices};
}
// what the CompositeExplicit cummax calls with preallocated outputs
template <bool IsMax>
void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cummax_out<IsMax>(self, dim, values, indices);
}

// ---------------------------------------------------------------- logcumsumexp
T logcumsumexp_value(const at::Tensor& self, int64_t dim) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"logcumsumexp_out_cpu\" not implemented for '",
                              self.scalar_type(), "'");
  int axis = wrap_dim(self, dim);
  tiny::DType dt = to_engine(self.scalar_type());
  return scan(read(self).cast(scan_acc_dtype(dt)), axis, logaddexp_rule(), dt);
}
at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  TinyOp op("logcumsumexp");
  return make_result(logcumsumexp_value(self, dim), self.scalar_type());
}
at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  TinyOp op("logcumsumexp");
  check_same_type(out, self.scalar_type());
  return assign_out_exact(out, logcumsumexp_value(self, dim), self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cumsum", cumsum<false>);
  m.impl("cumsum_", cumsum_<false>);
  m.impl("cumsum.out", cumsum_out<false>);
  m.impl("cumprod", cumsum<true>);
  m.impl("cumprod_", cumsum_<true>);
  m.impl("cumprod.out", cumsum_out<true>);
  m.impl("cummax", cummax<true>);
  m.impl("cummax.out", cummax_out<true>);
  m.impl("_cummax_helper", cummax_helper<true>);
  m.impl("cummin", cummax<false>);
  m.impl("cummin.out", cummax_out<false>);
  m.impl("_cummin_helper", cummax_helper<false>);
  m.impl("logcumsumexp", logcumsumexp);
  m.impl("logcumsumexp.out", logcumsumexp_out);
  m.impl("_logcumsumexp", logcumsumexp);
  m.impl("_logcumsumexp.out", logcumsumexp_out);
}

}  // namespace torch_tiny
