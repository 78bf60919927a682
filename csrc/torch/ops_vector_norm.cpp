// Vector norms: linalg_vector_norm and the legacy norm overloads (which ATen
// forwards to it). ord 0 counts non-zeros, 1 sums |x|, 2 is sqrt(sum x^2),
// +-inf is amax/amin |x|, any other p is (sum |x|^p)^(1/p). 16-bit floats
// accumulate in float32 and round once, as the CPU kernel does.
// linalg.norm / matrix_norm are CompositeImplicit and reach these through
// vector_norm, amax/amin and sum.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Formatting.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

c10::ScalarType norm_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()) || c10::isComplexType(self.scalar_type()),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", self.scalar_type());
  if (dtype) {
    TORCH_CHECK(c10::promoteTypes(self.scalar_type(), *dtype) == *dtype,
                "linalg.vector_norm: the dtype of the input (", self.scalar_type(),
                ") should be convertible without narrowing to the specified dtype (", *dtype, ")");
  }
  return dtype.value_or(self.scalar_type());
}

T vector_norm_value(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dims, bool keepdim,
                    c10::ScalarType dt) {
  double p = ord.toDouble();
  auto axes = reduce_axes(self, dims);
  // negative and infinite orders have no identity for an empty reduction
  if (self.numel() == 0 && (p < 0 || std::isinf(p))) {
    if (!dims.has_value() || dims->empty()) {
      TORCH_CHECK(false, "linalg.vector_norm cannot compute the ", ord,
                  " norm on an empty tensor because the operation does not have an identity");
    }
    for (int64_t d : *dims) {
      TORCH_CHECK(self.size(d) != 0, "linalg.vector_norm cannot compute the ", ord, " norm on the dimension ", d,
                  "because this dimension is empty and the operation does not have an identity");
    }
  }
  tiny::DType out = to_engine(dt);
  T x = read(self).cast(out).cast(tiny::compute_dtype(out));
  T a = x.unary(Op::Abs);
  T r;
  if (p == 0) {
    r = reduce_keep(x.binary(Op::CmpNe, constant_like(x, 0)).cast(x.dtype()), ReduceOp::Sum, axes);
  } else if (p == 1) {
    r = reduce_keep(a, ReduceOp::Sum, axes);
  } else if (p == 2) {
    r = reduce_keep(mul(a, a), ReduceOp::Sum, axes).unary(Op::Sqrt);
  } else if (std::isinf(p)) {
    r = reduce_keep(a, p > 0 ? ReduceOp::Max : ReduceOp::Min, axes);
  } else {
    T s = reduce_keep(a.binary(Op::Pow, constant_like(a, p)), ReduceOp::Sum, axes);
    r = s.binary(Op::Pow, constant_like(s, 1.0 / p));
  }
  return squeeze_axes(r, axes, keepdim).cast(out);
}

at::Tensor vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dims, bool keepdim,
                       std::optional<c10::ScalarType> dtype) {
  TinyOp op("linalg_vector_norm");
  c10::ScalarType dt = norm_dtype(self, dtype);
  return make_result(vector_norm_value(self, ord, dims, keepdim, dt), dt);
}
at::Tensor& vector_norm_out(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dims,
                            bool keepdim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op("linalg_vector_norm");
  c10::ScalarType dt = norm_dtype(self, dtype);
  return assign_out_exact(out, vector_norm_value(self, ord, dims, keepdim, dt), dt);
}

c10::Scalar norm_ord(const std::optional<c10::Scalar>& p) { return p.value_or(c10::Scalar(2.0)); }

at::Tensor norm_dim(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::IntArrayRef dims, bool keepdim) {
  return vector_norm(self, norm_ord(p), dims, keepdim, std::nullopt);
}
at::Tensor norm_dim_dtype(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::IntArrayRef dims,
                          bool keepdim, c10::ScalarType dtype) {
  return vector_norm(self, norm_ord(p), dims, keepdim, dtype);
}
at::Tensor& norm_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::IntArrayRef dims, bool keepdim,
                     at::Tensor& out) {
  return vector_norm_out(self, norm_ord(p), dims, keepdim, std::nullopt, out);
}
at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, c10::IntArrayRef dims,
                           bool keepdim, c10::ScalarType dtype, at::Tensor& out) {
  return vector_norm_out(self, norm_ord(p), dims, keepdim, dtype, out);
}

// ---------------------------------------------------------------- renorm
// Each slice along dim whose p-norm exceeds maxnorm is scaled down to it:
// x * (norm > maxnorm ? maxnorm / (norm + 1e-7) : 1). The norm and the factor
// are float32 for 16-bit inputs, the product is in the input's dtype (the CPU's
// rounding steps).
T renorm_value(const at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm) {
  TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
  TORCH_CHECK(p.toDouble() > 0.0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
  TORCH_CHECK(maxnorm.toDouble() >= 0.0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(), " dimensions");
  int axis = int(at::maybe_wrap_dim(dim, self.dim()));
  std::vector<int64_t> others;
  for (int64_t d = 0; d < self.dim(); d++)
    if (d != axis) others.push_back(d);
  c10::ScalarType dt = self.scalar_type();
  c10::ScalarType acc = at::toAccumulateType(dt, /*is_cuda=*/true);
  T norm = vector_norm_value(self, p, c10::IntArrayRef(others), true, norm_dtype(self, acc));
  T mx = constant_like(norm, maxnorm.toDouble());
  // norm > maxnorm is false for a NaN norm, which keeps factor 1
  T factor = select(mx.binary(Op::CmpLt, norm), div(mx, add(norm, constant_like(norm, 1e-7))), constant_like(norm, 1.0));
  T x = read(self);
  return mul(x, factor.cast(x.dtype()).expand(x.shape()));
}
at::Tensor renorm(const at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm) {
  TinyOp op("renorm");
  return make_result(renorm_value(self, p, dim, maxnorm), self.scalar_type());
}
at::Tensor& renorm_(at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm) {
  TinyOp op("renorm_");
  return assign_inplace(self, renorm_value(self, p, dim, maxnorm), self.scalar_type(), {});
}
at::Tensor& renorm_out(const at::Tensor& self, const c10::Scalar& p, int64_t dim, const c10::Scalar& maxnorm,
                       at::Tensor& out) {
  TinyOp op("renorm");
  return assign_out_exact(out, renorm_value(self, p, dim, maxnorm), self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("renorm", renorm);
  m.impl("renorm_", renorm_);
  m.impl("renorm.out", renorm_out);
  m.impl("linalg_vector_norm", vector_norm);
  m.impl("linalg_vector_norm.out", vector_norm_out);
  m.impl("norm.ScalarOpt_dim", norm_dim);
  m.impl("norm.ScalarOpt_dim_dtype", norm_dim_dtype);
  m.impl("norm.out", norm_out);
  m.impl("norm.dtype_out", norm_dtype_out);
}

}  // namespace torch_tiny
