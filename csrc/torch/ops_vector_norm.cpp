// Vector norms: linalg_vector_norm and the legacy norm overloads (which ATen
// forwards to it). ord 0 counts non-zeros, 1 sums |x|, 2 is sqrt(sum x^2),
// +-inf is amax/amin |x|, any other p is (sum |x|^p)^(1/p). 16-bit floats
// accumulate in float32 and round once, as the CPU kernel does.
// linalg.norm / matrix_norm are CompositeImplicit and reach these through
// vector_norm, amax/amin and sum.
#include <ATen/AccumulateType.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Formatting.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

// The p-norm over the last axis, in x's dtype, as the CPU's distance and renorm kernels compute it
// (p = 0 counts nonzeros, inf takes the largest). One fused reduce.
T p_norm_last_axis(const T& x, double p) {
  const int last = int(x.shape().size()) - 1;
  T a = x.unary(Op::Abs);
  auto sum = [&](const T& t) { return t.reduce(ReduceOp::Sum, {last}, false); };
  if (p == 0) return sum(a.binary(Op::CmpNe, constant_like(a, 0.0)).cast(a.dtype()));
  if (p == 1) return sum(a);
  if (p == 2) return sum(a.binary(Op::Mul, a)).unary(Op::Sqrt);
  if (std::isinf(p)) return a.reduce(ReduceOp::Max, {last}, false);
  T s = sum(a.binary(Op::Pow, constant_like(a, p)));
  return s.binary(Op::Pow, constant_like(s, 1.0 / p));
}

namespace {

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

// ---------------------------------------------------------------- cdist / pdist
void check_distance_dtype(const at::Tensor& t, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() == c10::kFloat || t.scalar_type() == c10::kDouble, "\"", op,
                              "\" not implemented for '", c10::toString(t.scalar_type()), "'");
}

// Row pairs of x1 (..., P, M) and x2 (..., R, M), batch dims broadcast: the broadcast batch and
// their differences as a (..., P, R, M) view.
struct RowPairs {
  tiny::Shape batch, full;  // full: (..., P, R, M)
  T diff;
};
RowPairs row_pairs(const at::Tensor& x1, const at::Tensor& x2) {
  RowPairs r;
  std::vector<int64_t> batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  r.batch.assign(batch.begin(), batch.end());
  const int64_t m = x1.size(-1);
  r.full = r.batch;
  r.full.insert(r.full.end(), {x1.size(-2), x2.size(-2), m});
  auto spread = [&](const at::Tensor& x, size_t missing) {  // (..., rows, M) -> (..., P, R, M)
    tiny::Shape own = r.batch, split = r.full;
    own.insert(own.end(), {x.size(-2), m});
    split[r.batch.size() + missing] = 1;
    return broadcast_to(read(x), own).reshape(split).expand(r.full);
  };
  if (tiny::numel(r.full) > 0) r.diff = spread(x1, 1).binary(Op::Sub, spread(x2, 0));
  return r;
}

// x1 (..., P, M), x2 (..., R, M), batch dims broadcast -> (..., P, R). The matmul form of p = 2
// (torch.cdist's default for more than 25 rows) is _euclidean_dist, composite: it reaches the
// device as matmuls.
at::Tensor cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p, std::optional<int64_t> compute_mode) {
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
              " X2: ", x2.size(-1));
  TORCH_CHECK(at::isFloatingType(x1.scalar_type()), "cdist only supports floating-point dtypes, X1 got: ",
              x1.scalar_type());
  TORCH_CHECK(at::isFloatingType(x2.scalar_type()), "cdist only supports floating-point dtypes, X2 got: ",
              x2.scalar_type());
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  TORCH_CHECK(!compute_mode || (*compute_mode >= 0 && *compute_mode <= 2), "possible modes: 0, 1, 2, but was: ",
              *compute_mode);
  check_distance_dtype(x1, "cdist");
  TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), "expected scalar type ", x1.scalar_type(), " but found ",
              x2.scalar_type());
  TinyOp op("cdist");
  RowPairs pairs = row_pairs(x1, x2);
  tiny::Shape out(pairs.full.begin(), pairs.full.end() - 1);
  if (tiny::numel(pairs.full) == 0)
    return make_result(T::full(out, tiny::Scalar::from_int(0), to_engine(x1.scalar_type())), x1.scalar_type());
  return make_result(p_norm_last_axis(pairs.diff, p), x1.scalar_type());
}

// d dist / d diff times the incoming gradient `g`, as the CPU's backward kernels write it (each
// convention for zero distances and differences included). diff, dist and g broadcast together.
T distance_grad_term(const T& diff, const T& dist, const T& g, double p) {
  auto c = [&](double v) { return constant_like(diff, v); };
  T zero = c(0.0);
  T at_zero = dist.binary(Op::CmpEq, zero);
  T sign = T::where(zero.binary(Op::CmpLt, diff), c(1.0), T::where(diff.binary(Op::CmpLt, zero), c(-1.0), zero));
  T a = diff.unary(Op::Abs);
  if (p == 0) return diff.binary(Op::Mul, zero);
  if (p == 1) return sign.binary(Op::Mul, g);
  if (std::isinf(p)) return g.binary(Op::Mul, sign).binary(Op::Mul, a.binary(Op::CmpEq, dist).cast(diff.dtype()));
  T term;
  if (p < 2) {
    term = sign.binary(Op::Mul, a.binary(Op::Pow, c(p - 1))).binary(Op::Mul, g).binary(Op::Div, dist.binary(Op::Pow, c(p - 1)));
    if (p < 1) at_zero = at_zero.binary(Op::Or, diff.binary(Op::CmpEq, zero));
  } else if (p == 2) {
    term = g.binary(Op::Mul, diff).binary(Op::Div, dist);
  } else {
    term = diff.binary(Op::Mul, a.binary(Op::Pow, c(p - 2))).binary(Op::Mul, g).binary(Op::Div, dist.binary(Op::Pow, c(p - 1)));
  }
  return T::where(at_zero, zero, term);
}

// The gradient for x1 of cdist(x1, x2) (autograd calls it with the operands swapped for x2); its
// batch dims are the broadcast ones, as the CPU's.
at::Tensor cdist_backward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                          const at::Tensor& cdist) {
  check_distance_dtype(x1, "cdist");
  TinyOp op("cdist_backward");
  RowPairs pairs = row_pairs(x1, x2);
  tiny::Shape out = pairs.batch;
  out.insert(out.end(), {x1.size(-2), x1.size(-1)});
  if (tiny::numel(pairs.full) == 0)
    return make_result(T::full(out, tiny::Scalar::from_int(0), to_engine(x1.scalar_type())), x1.scalar_type());
  tiny::Shape pr(pairs.full.begin(), pairs.full.end() - 1);  // (..., P, R)
  auto per_pair = [&](const at::Tensor& t) {
    tiny::Shape one = pr;
    one.push_back(1);
    return broadcast_to(read(t), pr).reshape(one).expand(pairs.full);
  };
  T term = distance_grad_term(pairs.diff, per_pair(cdist), per_pair(grad), p);
  return make_result(term.reduce(ReduceOp::Sum, {int(pairs.full.size()) - 2}, false), x1.scalar_type());
}

// Rows i < j of x (N, M), in row-major pair order.
at::Tensor pdist_forward(const at::Tensor& self, double p) {
  TORCH_CHECK(self.dim() == 2, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "pdist only supports floating point tensors");
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  check_distance_dtype(self, "pdist");
  TinyOp op("pdist");
  const int64_t n = self.size(0), m = self.size(1), pairs = n * (n - 1) / 2;
  const tiny::DType dt = to_engine(self.scalar_type());
  if (pairs == 0 || m == 0) return make_result(T::full({pairs}, tiny::Scalar::from_int(0), dt), self.scalar_type());
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) {
      first.push_back(i);
      second.push_back(j);
    }
  T x = read(self).contiguous();
  auto rows = [&](const std::vector<int64_t>& which) {
    at::Tensor host = at::tensor(which, at::kLong).reshape({pairs, 1}).mul(m).add(at::arange(m, at::kLong));
    return x.reshape({n * m}).gather(from_cpu(host));  // (pairs, M)
  };
  return make_result(p_norm_last_axis(rows(first).binary(Op::Sub, rows(second)), p), self.scalar_type());
}

// The pair vector as a symmetric (N, N) matrix (zero diagonal): pair (i, j), i < j, is
// i * (2n - i - 1) / 2 + j - i - 1.
T pairs_as_matrix(const at::Tensor& pairs, int64_t n) {
  std::vector<int64_t> index(size_t(n * n), 0);
  std::vector<uint8_t> diagonal(size_t(n * n), 0);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      const int64_t lo = std::min(i, j), hi = std::max(i, j);
      if (lo == hi) diagonal[size_t(i * n + j)] = 1;
      else index[size_t(i * n + j)] = lo * (2 * n - lo - 1) / 2 + hi - lo - 1;
    }
  T v = read(pairs).gather(from_cpu(at::tensor(index, at::kLong).reshape({n, n})));
  T on_diagonal = from_cpu(at::tensor(diagonal, at::kByte).to(at::kBool).reshape({n, n}));
  return T::where(on_diagonal, T::full({n, n}, tiny::Scalar::from_int(0), v.dtype()), v);
}

at::Tensor pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p, const at::Tensor& pdist) {
  check_distance_dtype(self, "pdist");
  TinyOp op("pdist_backward");
  const int64_t n = self.size(0), m = self.size(1);
  if (n < 2 || m == 0)
    return make_result(T::full({n, m}, tiny::Scalar::from_int(0), to_engine(self.scalar_type())), self.scalar_type());
  T x = read(self);
  tiny::Shape full{n, n, m};
  T diff = x.reshape({n, 1, m}).expand(full).binary(Op::Sub, x.reshape({1, n, m}).expand(full));
  T dist = pairs_as_matrix(pdist, n).reshape({n, n, 1}).expand(full);
  T g = pairs_as_matrix(grad, n).reshape({n, n, 1}).expand(full);
  // each pair's term is odd in its difference, so row i collects +term(i, j) and -term(j, i) alike
  T term = distance_grad_term(diff, dist, g, p);
  return make_result(term.reduce(ReduceOp::Sum, {1}, false), self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_cdist_backward", cdist_backward);
  m.impl("_pdist_backward", pdist_backward);
  m.impl("_cdist_forward", cdist_forward);
  m.impl("_pdist_forward", pdist_forward);
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
