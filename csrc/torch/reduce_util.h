// Helpers shared by the reduction, scan, softmax and linear-algebra ops:
// ATen dims to engine axes, constants, index grids, and the NaN/inf-aware
// building blocks (max with its first index, log-sum-exp) they all reuse.
#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

// Sorted, wrapped axes; nullopt or an empty list mean every dim (0-d: none).
std::vector<int> reduce_axes(const at::Tensor& self, at::OptionalIntArrayRef dims);
// One dim wrapped the ATen way (a 0-d tensor accepts -1 and 0).
int wrap_dim(const at::Tensor& self, int64_t dim);
// Number of elements folded into each output element.
int64_t reduced_count(const at::Tensor& self, const std::vector<int>& axes);

// A constant of `dt` (converted the way a cast converts).
tiny::Tensor constant(const tiny::Shape& shape, double v, tiny::DType dt);
tiny::Tensor constant_like(const tiny::Tensor& x, double v);
// The scalar s shaped and typed like x.
tiny::Tensor scalar_like(const tiny::Tensor& x, const c10::Scalar& s);
// The identity of max (lowest value of the dtype) and of min (highest).
tiny::Tensor lowest_like(const tiny::Tensor& x);
tiny::Tensor highest_like(const tiny::Tensor& x);
// The int64 position of each element along `axis`, broadcast over `shape`.
tiny::Tensor iota(const tiny::Shape& shape, int axis);
// Keepdim result squeezed of `axes` when !keepdim.
tiny::Tensor squeeze_axes(const tiny::Tensor& v, const std::vector<int>& axes, bool keepdim);

tiny::Tensor is_nan(const tiny::Tensor& x);  // false for non-float dtypes
tiny::Tensor is_inf(const tiny::Tensor& x);  // +-inf; false for non-float dtypes
tiny::Tensor add(const tiny::Tensor& a, const tiny::Tensor& b);
tiny::Tensor sub(const tiny::Tensor& a, const tiny::Tensor& b);
tiny::Tensor mul(const tiny::Tensor& a, const tiny::Tensor& b);
tiny::Tensor div(const tiny::Tensor& a, const tiny::Tensor& b);
tiny::Tensor select(const tiny::Tensor& cond, const tiny::Tensor& a, const tiny::Tensor& b);

// Reduce with keepdim = true; reducing no axes is the identity.
tiny::Tensor reduce_keep(const tiny::Tensor& x, tiny::ReduceOp op, const std::vector<int>& axes);
// The type the CPU accumulates a running (scan) value in: float64 for
// float32, float32 for 16-bit floats; integers as they are.
tiny::DType scan_acc_dtype(tiny::DType t);

// max/min over `axes` (keepdim) with NaN propagating, as ATen's max does.
tiny::Tensor extreme(const tiny::Tensor& x, bool is_max, const std::vector<int>& axes);
// The p-norm over x's last axis, in x's dtype (p = 0 counts nonzeros; inf is the largest |x|).
tiny::Tensor p_norm_last_axis(const tiny::Tensor& x, double p);
// Index along `axis` of the first element equal to the keepdim extreme `m`
// (NaN matches NaN, as the first NaN is ATen's answer), int64 keepdim.
tiny::Tensor index_of(const tiny::Tensor& x, const tiny::Tensor& m, int axis);
// log(sum(exp(x))) over `axes` (keepdim), stable: shifted by the max, with
// infinite maxima shifted by 0 as ATen's logsumexp does. `mask` (optional,
// bool, x's shape) keeps only the selected elements.
tiny::Tensor logsumexp_keep(const tiny::Tensor& x, const std::vector<int>& axes, const tiny::Tensor* mask = nullptr);
// log(exp(a) + exp(b)) elementwise, with ATen's handling of equal infinities.
tiny::Tensor log_add_exp(const tiny::Tensor& a, const tiny::Tensor& b);

// out= delivery for reductions, scans and BLAS-like ops. The value is built
// from the inputs before out is written, so out may overlap an input (the
// CPU does not check these ops either); out overlapping itself is an error.
// _exact: out's dtype must be `expected` (structured kernels' check);
// _cast: `computed` must cast safely to out's dtype.
at::Tensor& assign_out_exact(at::Tensor& out, const tiny::Tensor& v, c10::ScalarType expected);
at::Tensor& assign_out_cast(at::Tensor& out, const tiny::Tensor& v, c10::ScalarType computed);
void check_out_dtype(const at::Tensor& out, c10::ScalarType expected);

}  // namespace torch_tiny
