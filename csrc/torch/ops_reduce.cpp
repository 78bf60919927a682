// Reductions and the linear algebra built on them (mm, bmm, addmm).
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

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

// sum / prod keep integer results in int64, as ATen does
c10::ScalarType sum_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(self.scalar_type(), true) ? c10::kLong : self.scalar_type();
}

T reduce_value(const at::Tensor& self, ReduceOp op, const std::vector<int>& axes, bool keepdim, c10::ScalarType dt) {
  T v = read(self).cast(to_engine(dt));
  if (self.dim() == 0) return v;
  return v.reduce(op, axes, keepdim);
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<c10::ScalarType> dtype) {
  TinyOp op("sum");
  c10::ScalarType dt = sum_dtype(self, dtype);
  return make_result(reduce_value(self, ReduceOp::Sum, reduce_axes(self, dims), keepdim, dt), dt);
}
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op("sum");
  c10::ScalarType dt = dtype ? *dtype : (out.defined() ? out.scalar_type() : sum_dtype(self, dtype));
  return assign_out(out, reduce_value(self, ReduceOp::Sum, reduce_axes(self, dims), keepdim, dt), dt, {self});
}
at::Tensor sum_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return sum_dim(self, c10::IntArrayRef{}, false, dtype);
}

T mean_value(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, c10::ScalarType dt) {
  auto axes = reduce_axes(self, dims);
  int64_t n = 1;
  for (int a : axes) n *= self.size(a);
  T s = reduce_value(self, ReduceOp::Sum, axes, keepdim, dt);
  return s.binary(Op::Div, T::full(s.shape(), tiny::Scalar::from_double(double(n)), s.dtype()));
}
c10::ScalarType mean_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType dt = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(dt) || c10::isComplexType(dt),
              "mean(): could not infer output dtype. ", (dtype ? "Optional" : "Input"),
              " dtype must be either a floating point or complex dtype. Got: ", dt);
  return dt;
}
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<c10::ScalarType> dtype) {
  TinyOp op("mean");
  c10::ScalarType dt = mean_dtype(self, dtype);
  return make_result(mean_value(self, dims, keepdim, dt), dt);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op("mean");
  c10::ScalarType dt = mean_dtype(self, dtype ? dtype : std::optional<c10::ScalarType>(out.scalar_type()));
  return assign_out(out, mean_value(self, dims, keepdim, dt), dt, {self});
}

void check_nonempty_reduce(const at::Tensor& self, const std::vector<int>& axes, const char* name) {
  if (self.numel() != 0) return;
  for (int a : axes)
    TORCH_CHECK_INDEX(self.size(a) != 0, name, "(): Expected reduction dim ", a, " to have non-zero size.");
  TORCH_CHECK(self.dim() != 0 || self.numel() != 0, name, "(): Expected reduction over a non-empty tensor");
}

template <ReduceOp R>
at::Tensor amax_like(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim) {
  TinyOp op(R == ReduceOp::Max ? "amax" : "amin");
  auto axes = reduce_axes(self, dims);
  check_nonempty_reduce(self, axes, R == ReduceOp::Max ? "amax" : "amin");
  return make_result(reduce_value(self, R, axes, keepdim, self.scalar_type()), self.scalar_type());
}
template <ReduceOp R>
at::Tensor& amax_like_out(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  TinyOp op(R == ReduceOp::Max ? "amax" : "amin");
  auto axes = reduce_axes(self, dims);
  check_nonempty_reduce(self, axes, R == ReduceOp::Max ? "amax" : "amin");
  return assign_out(out, reduce_value(self, R, axes, keepdim, self.scalar_type()), self.scalar_type(), {self});
}
template <ReduceOp R>
at::Tensor max_all(const at::Tensor& self) {
  TinyOp op(R == ReduceOp::Max ? "max" : "min");
  TORCH_CHECK(self.numel() > 0, R == ReduceOp::Max ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  return make_result(reduce_value(self, R, reduce_axes(self, c10::IntArrayRef{}), false, self.scalar_type()),
                     self.scalar_type());
}

at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  TinyOp op("prod");
  c10::ScalarType dt = sum_dtype(self, dtype);
  return make_result(reduce_value(self, ReduceOp::Prod, reduce_axes(self, c10::IntArrayRef{}), false, dt), dt);
}
at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
  TinyOp op("prod");
  c10::ScalarType dt = sum_dtype(self, dtype);
  return make_result(reduce_value(self, ReduceOp::Prod, reduce_axes(self, c10::IntArrayRef{dim}), keepdim, dt), dt);
}

template <ReduceOp R>
at::Tensor any_all_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  TinyOp op(R == ReduceOp::Any ? "any" : "all");
  c10::ScalarType out = self.scalar_type() == c10::kByte ? c10::kByte : c10::kBool;
  T v = read(self).cast(tiny::DType::Bool);
  if (self.dim() > 0) v = v.reduce(R, reduce_axes(self, dims), keepdim);
  return make_result(v, out);
}
template <ReduceOp R>
at::Tensor any_all(const at::Tensor& self) { return any_all_dims<R>(self, std::nullopt, false); }
template <ReduceOp R>
at::Tensor any_all_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return any_all_dims<R>(self, c10::IntArrayRef{dim}, keepdim);
}

bool equal(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "Cannot compare two tensors on different devices. Got: ", a.device(), " and ", b.device());
  if (a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  T eq;
  {
    TinyOp op("equal");
    c10::ScalarType common = c10::promoteTypes(a.scalar_type(), b.scalar_type());
    tiny::Shape shape = to_shape(a.sizes());
    eq = read(a).cast(to_engine(common)).binary(Op::CmpEq, read(b).cast(to_engine(common)));
    eq = eq.reduce(ReduceOp::All, reduce_axes(a, c10::IntArrayRef{}), false);
  }
  bool result = false;
  synchronize();
  eq.copy_to_host(&result);
  return result;
}

// ---------------------------------------------------------------- matmul
void check_mm(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, "self must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ",
              b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
}

T matmul_value(const T& a, const T& b) {
  // accumulate 16-bit floats in float32, as the CPU does
  tiny::DType dt = a.dtype();
  tiny::DType acc = tiny::compute_dtype(dt);
  return a.cast(acc).matmul(b.cast(acc)).cast(dt);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("mm");
  check_mm(a, b);
  return make_result(matmul_value(read(a), read(b)), a.scalar_type());
}
at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("mm");
  check_mm(a, b);
  return assign_out(out, matmul_value(read(a), read(b)), a.scalar_type(), {a, b});
}
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("bmm");
  TORCH_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "Expected size for first two dimensions of batch2 tensor to be: [",
              a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", a.scalar_type(), " but found ", b.scalar_type());
  return make_result(matmul_value(read(a), read(b)), a.scalar_type());
}

T addmm_value(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
              const c10::Scalar& alpha) {
  check_mm(a, b);
  c10::ScalarType dt = a.scalar_type();
  tiny::Shape shape{a.size(0), b.size(1)};
  T prod = matmul_value(read(a), read(b));
  if (!(alpha.toDouble() == 1.0)) prod = prod.binary(Op::Mul, scalar_operand(alpha, dt, shape));
  if (beta.toDouble() == 0.0) return prod;  // beta == 0 ignores self (even NaN)
  T s = operand(self, dt, shape);
  if (!(beta.toDouble() == 1.0)) s = s.binary(Op::Mul, scalar_operand(beta, dt, shape));
  return s.binary(Op::Add, prod);
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  TinyOp op("addmm");
  return make_result(addmm_value(self, a, b, beta, alpha), a.scalar_type());
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("addmm");
  return assign_out(out, addmm_value(self, a, b, beta, alpha), a.scalar_type(), {self, a, b});
}
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  TinyOp op("addmm_");
  return assign_inplace(self, addmm_value(self, a, b, beta, alpha), a.scalar_type(), {a, b});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", sum_dim);
  m.impl("sum.IntList_out", sum_out);
  m.impl("sum", sum_all);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
  m.impl("amax", amax_like<ReduceOp::Max>);
  m.impl("amax.out", amax_like_out<ReduceOp::Max>);
  m.impl("amin", amax_like<ReduceOp::Min>);
  m.impl("amin.out", amax_like_out<ReduceOp::Min>);
  m.impl("max", max_all<ReduceOp::Max>);
  m.impl("min", max_all<ReduceOp::Min>);
  m.impl("prod", prod_all);
  m.impl("prod.dim_int", prod_dim);
  m.impl("any", any_all<ReduceOp::Any>);
  m.impl("any.dim", any_all_dim<ReduceOp::Any>);
  m.impl("any.dims", any_all_dims<ReduceOp::Any>);
  m.impl("all", any_all<ReduceOp::All>);
  m.impl("all.dim", any_all_dim<ReduceOp::All>);
  m.impl("all.dims", any_all_dims<ReduceOp::All>);
  m.impl("equal", equal);
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("bmm", bmm);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
}

}  // namespace torch_tiny
