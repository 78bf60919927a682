// Reductions that return positions: max.dim / min.dim (values and indices),
// argmax, argmin. Built lazily from engine ops: the NaN-propagating extreme,
// broadcast back and compared, selects arange positions, and a MIN reduce
// keeps the first one. That gives the CPU's answer (first occurrence; NaN
// counts as the extreme) without a host round trip, in two kernels.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;

struct ValuesIndices {
  T values, indices;
};

// Extreme and its first index along `dim` of `self` (any rank; 0-d gives itself and 0).
ValuesIndices extreme_with_index(const at::Tensor& self, int64_t dim, bool keepdim, bool is_max, const char* name) {
  int axis = wrap_dim(self, dim);
  T x = read(self);
  if (self.dim() == 0) return {x, constant({}, 0, tiny::DType::Int64)};
  if (self.numel() == 0) at::native::zero_numel_check_dims(self, dim, name);
  T m = extreme(x, is_max, {axis});
  T idx = index_of(x, m, axis);
  return {squeeze_axes(m, {axis}, keepdim), squeeze_axes(idx, {axis}, keepdim)};
}

template <bool IsMax>
std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  TinyOp op(IsMax ? "max.dim" : "min.dim");
  auto r = extreme_with_index(self, dim, keepdim, IsMax, IsMax ? "max()" : "min()");
  return {make_result(r.values, self.scalar_type()), make_result(r.indices, c10::kLong)};
}
template <bool IsMax>
std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values,
                                                 at::Tensor& indices) {
  TinyOp op(IsMax ? "max.dim" : "min.dim");
  auto r = extreme_with_index(self, dim, keepdim, IsMax, IsMax ? "max()" : "min()");
  check_out_dtype(values, self.scalar_type());
  check_out_dtype(indices, c10::kLong);
  at::assert_no_partial_overlap(values, self);  // the CPU checks these two
  assign_out_exact(values, r.values, self.scalar_type());
  assign_out_exact(indices, r.indices, c10::kLong);
  return {values, indices};
}

// argmax/argmin: dim=None reduces the flattened tensor.
template <bool IsMax>
T arg_value(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  const char* name = IsMax ? "argmax()" : "argmin()";
  TORCH_CHECK(self.scalar_type() != c10::kBool, name, ": does not support bool input");
  if (dim) return extreme_with_index(self, *dim, keepdim, IsMax, name).indices;
  TORCH_CHECK_INDEX(self.numel() != 0, name, ": Expected reduction dim to be specified for input.numel() == 0.");
  T x = read(self).reshape({self.numel()});
  T idx = index_of(x, extreme(x, IsMax, {0}), 0);
  return idx.reshape(keepdim ? tiny::Shape(size_t(self.dim()), 1) : tiny::Shape{});
}
template <bool IsMax>
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  TinyOp op(IsMax ? "argmax" : "argmin");
  return make_result(arg_value<IsMax>(self, dim, keepdim), c10::kLong);
}
template <bool IsMax>
at::Tensor& argmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  TinyOp op(IsMax ? "argmax" : "argmin");
  check_out_dtype(out, c10::kLong);
  return assign_out_exact(out, arg_value<IsMax>(self, dim, keepdim), c10::kLong);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max.dim", max_dim<true>);
  m.impl("max.dim_max", max_dim_out<true>);
  m.impl("min.dim", max_dim<false>);
  m.impl("min.dim_min", max_dim_out<false>);
  m.impl("argmax", argmax<true>);
  m.impl("argmax.out", argmax_out<true>);
  m.impl("argmin", argmax<false>);
  m.impl("argmin.out", argmax_out<false>);
}

}  // namespace torch_tiny
