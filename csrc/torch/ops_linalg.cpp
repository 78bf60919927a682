// Linear algebra on engine graphs: mm, bmm, addmm, addmv, mv, dot, vdot,
// baddbmm, addbmm, addr, trace, diag_embed, _addmm_activation (tril / triu
// live with the creation ops; solves and factorizations in ops_linalg_solve).
// A product is a broadcast multiply and a SUM reduce over k, so an epilogue
// (bias, activation) fuses into the same kernel. 16-bit floats accumulate in
// float32 and round once at the end, as the CPU's BLAS paths do. matmul,
// einsum, tensordot, kron, outer, inner, diag and linalg_vecdot are
// CompositeImplicit and reach these (plus views and elementwise ops).
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_cross_meta.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

tiny::DType acc_of(c10::ScalarType t) { return tiny::compute_dtype(to_engine(t)); }

void check_not_bool(const at::Tensor& t, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() != c10::kBool, "\"", kernel, "\" not implemented for 'Bool'");
}

// The ATen expand check (its message names both shapes).
void check_expandable(const at::Tensor& self, c10::IntArrayRef target) {
  at::inferExpandGeometry_dimvector(self.sizes(), self.strides(), target);
}

// Structured in-place ops check the result shape against self before anything else.
void check_inplace_size(const at::Tensor& self, c10::IntArrayRef sizes) {
  TORCH_CHECK(self.sizes() == sizes, "Bad in-place call: input tensor size ", self.sizes(), " and output tensor size ",
              sizes, " should match");
}

bool is_zero(const c10::Scalar& s) { return s.isBoolean() ? !s.toBool() : s.toDouble() == 0.0; }
bool is_one(const c10::Scalar& s) { return s.isBoolean() ? s.toBool() : s.toDouble() == 1.0; }

// beta * self + alpha * prod in `prod`'s type; beta == 0 ignores self (its
// NaN and inf do not propagate), as BLAS does.
T blas_epilogue(const at::Tensor& self, const T& prod, const c10::Scalar& beta, const c10::Scalar& alpha) {
  T r = prod;
  if (!is_one(alpha)) r = mul(r, scalar_like(r, alpha));
  if (is_zero(beta)) return r;
  T s = broadcast_to(read(self).cast(prod.dtype()), prod.shape());
  if (!is_one(beta)) s = mul(s, scalar_like(s, beta));
  return add(s, r);
}

// (..., n, k) @ (..., k, m) accumulated in `acc`; float32 factors in TF32 where allowed
T product(const at::Tensor& a, const at::Tensor& b, tiny::DType acc) {
  return read(a).cast(acc).matmul(read(b).cast(acc), a.scalar_type() == at::kFloat && allow_tf32());
}

// ---------------------------------------------------------------- mm / addmm
void check_mm(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, "self must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
              " != ", b.dtype());
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ",
              b.size(0), "x", b.size(1), ")");
  check_not_bool(a, "addmm_impl_cpu_");
}
T mm_value(const at::Tensor& a, const at::Tensor& b) {
  check_mm(a, b);
  return product(a, b, acc_of(a.scalar_type())).cast(to_engine(a.scalar_type()));
}
at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("mm");
  return make_result(mm_value(a, b), a.scalar_type());
}
at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("mm");
  return assign_out_exact(out, mm_value(a, b), a.scalar_type());
}

void check_addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(self.scalar_type() == b.scalar_type(), "self and mat2 must have the same dtype, but got ",
              self.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "mat1 and mat2 must have the same dtype, but got ", a.scalar_type(),
              " and ", b.scalar_type());
  TORCH_CHECK(a.dim() == 2, "mat1 must be a matrix, got ", a.dim(), "-D tensor");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix, got ", b.dim(), "-D tensor");
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ",
              b.size(0), "x", b.size(1), ")");
}
T addmm_value(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
              const c10::Scalar& alpha) {
  check_addmm(self, a, b);
  check_expandable(self, {a.size(0), b.size(1)});
  check_not_bool(a, "addmm_impl_cpu_");
  T prod = product(a, b, acc_of(a.scalar_type()));
  return blas_epilogue(self, prod, beta, alpha).cast(to_engine(a.scalar_type()));
}
at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  TinyOp op("addmm");
  return make_result(addmm_value(self, a, b, beta, alpha), a.scalar_type());
}
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("addmm");
  return assign_out_exact(out, addmm_value(self, a, b, beta, alpha), a.scalar_type());
}
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  TinyOp op("addmm_");
  check_addmm(self, a, b);
  check_inplace_size(self, {a.size(0), b.size(1)});
  return assign_inplace(self, addmm_value(self, a, b, beta, alpha), a.scalar_type(), {a, b});
}

// addmm followed by relu or (erf) gelu, as the fused CPU kernel does
T addmm_activation_value(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                         const c10::Scalar& alpha, bool use_gelu) {
  T r = addmm_value(self, a, b, beta, alpha);
  T x = r.cast(tiny::compute_dtype(r.dtype()));
  if (use_gelu) {
    T cdf = mul(constant_like(x, 0.5), add(constant_like(x, 1.0), mul(x, constant_like(x, M_SQRT1_2)).unary(Op::Erf)));
    x = mul(x, cdf);
  } else {
    x = x.binary(Op::Max, constant_like(x, 0));  // NaN stays NaN, as relu does
  }
  return x.cast(r.dtype());
}
at::Tensor addmm_activation(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                            const c10::Scalar& alpha, bool use_gelu) {
  TinyOp op("_addmm_activation");
  return make_result(addmm_activation_value(self, a, b, beta, alpha, use_gelu), a.scalar_type());
}
at::Tensor& addmm_activation_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                                 const c10::Scalar& beta, const c10::Scalar& alpha, bool use_gelu, at::Tensor& out) {
  TinyOp op("_addmm_activation");
  return assign_out_exact(out, addmm_activation_value(self, a, b, beta, alpha, use_gelu), a.scalar_type());
}

// ---------------------------------------------------------------- bmm / baddbmm / addbmm
void check_bmm(const at::Tensor& b1, const at::Tensor& b2) {
  TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(b2.size(0) == b1.size(0) && b2.size(1) == b1.size(2),
              "Expected size for first two dimensions of batch2 tensor to be: [", b1.size(0), ", ", b1.size(2),
              "] but got: [", b2.size(0), ", ", b2.size(1), "].");
}
T bmm_value(const at::Tensor& a, const at::Tensor& b) {
  check_bmm(a, b);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", a.scalar_type(), " but found ",
              b.scalar_type());
  check_not_bool(a, "bmm");
  return product(a, b, acc_of(a.scalar_type())).cast(to_engine(a.scalar_type()));
}
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("bmm");
  return make_result(bmm_value(a, b), a.scalar_type());
}
at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("bmm");
  return assign_out_exact(out, bmm_value(a, b), a.scalar_type());
}

T baddbmm_value(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
  check_bmm(b1, b2);
  check_expandable(self, {b1.size(0), b1.size(1), b2.size(2)});
  TORCH_CHECK(self.scalar_type() == b1.scalar_type() && self.scalar_type() == b2.scalar_type(),
              "Input dtypes must be the same, got: input ", self.dtype(), ", batch1: ", b1.dtype(), ", batch2: ",
              b2.dtype());
  check_not_bool(b1, "bmm");
  T prod = product(b1, b2, acc_of(b1.scalar_type()));
  return blas_epilogue(self, prod, beta, alpha).cast(to_engine(b1.scalar_type()));
}
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  TinyOp op("baddbmm");
  return make_result(baddbmm_value(self, b1, b2, beta, alpha), b1.scalar_type());
}
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                        const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("baddbmm");
  return assign_out_exact(out, baddbmm_value(self, b1, b2, beta, alpha), b1.scalar_type());
}
at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                     const c10::Scalar& alpha) {
  TinyOp op("baddbmm_");
  check_bmm(b1, b2);
  check_inplace_size(self, {b1.size(0), b1.size(1), b2.size(2)});
  return assign_inplace(self, baddbmm_value(self, b1, b2, beta, alpha), b1.scalar_type(), {b1, b2});
}

// sum over the batch of b1[i] @ b2[i]: one reduce over (batch, k)
T addbmm_value(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
               const c10::Scalar& alpha) {
  check_expandable(self, {b1.size(1), b2.size(2)});
  TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(b1.size(0) == b2.size(0), "batch1 and batch2 must have same number of batches, got ", b1.size(0), " and ",
              b2.size(0));
  TORCH_CHECK(b1.size(2) == b2.size(1), "Incompatible matrix sizes for bmm (", b1.size(1), "x", b1.size(2), " and ",
              b2.size(1), "x", b2.size(2), ")");
  TORCH_CHECK(self.scalar_type() == b2.scalar_type(), "self and mat2 must have the same dtype, but got ",
              self.scalar_type(), " and ", b2.scalar_type());
  TORCH_CHECK(b1.scalar_type() == b2.scalar_type(), "mat1 and mat2 must have the same dtype, but got ",
              b1.scalar_type(), " and ", b2.scalar_type());
  check_not_bool(b1, "addmm_impl_cpu_");
  tiny::DType acc = acc_of(b1.scalar_type());
  int64_t nb = b1.size(0), n = b1.size(1), k = b1.size(2), m = b2.size(2);
  tiny::Shape full{nb, n, m, k};
  T x = read(b1).cast(acc).reshape({nb, n, 1, k}).expand(full);
  T y = read(b2).cast(acc).permute({0, 2, 1}).reshape({nb, 1, m, k}).expand(full);
  T prod = mul(x, y).reduce(ReduceOp::Sum, {0, 3}, false);
  return blas_epilogue(self, prod, beta, alpha).cast(to_engine(b1.scalar_type()));
}
at::Tensor addbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                  const c10::Scalar& alpha) {
  TinyOp op("addbmm");
  return make_result(addbmm_value(self, b1, b2, beta, alpha), b1.scalar_type());
}
at::Tensor& addbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                       const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("addbmm");
  return assign_out_cast(out, addbmm_value(self, b1, b2, beta, alpha), b1.scalar_type());
}
at::Tensor& addbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
                    const c10::Scalar& alpha) {
  TinyOp op("addbmm_");
  return assign_inplace(self, addbmm_value(self, b1, b2, beta, alpha), b1.scalar_type(), {b1, b2});
}

// ---------------------------------------------------------------- addmv / mv
void check_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec) {
  TORCH_CHECK(mat.dim() == 2 && vec.dim() == 1 && self.dim() <= 1, "vector + matrix @ vector expected, got ",
              self.dim(), ", ", mat.dim(), ", ", vec.dim());
  TORCH_CHECK(mat.size(1) == vec.size(0) && (mat.size(0) == self.numel() || self.numel() == 1),
              "size mismatch, got input (", self.size(0), "), mat (", mat.size(0), "x", mat.size(1), "), vec (",
              vec.size(0), ")");
  TORCH_CHECK(self.scalar_type() == mat.scalar_type() && mat.scalar_type() == vec.scalar_type(),
              "addmv input tensors must have the same dtype, but got ", self.scalar_type(), ", ", mat.scalar_type(),
              ", and ", vec.scalar_type());
  check_not_bool(mat, "addmv_impl_cpu");
}
T mv_product(const at::Tensor& mat, const at::Tensor& vec) {
  tiny::DType acc = acc_of(mat.scalar_type());
  return read(mat).cast(acc).matmul(read(vec).cast(acc).reshape({vec.size(0), 1})).reshape({mat.size(0)});
}
T addmv_value(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
              const c10::Scalar& alpha) {
  check_addmv(self, mat, vec);
  return blas_epilogue(self, mv_product(mat, vec), beta, alpha).cast(to_engine(mat.scalar_type()));
}
at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  TinyOp op("addmv");
  return make_result(addmv_value(self, mat, vec, beta, alpha), mat.scalar_type());
}
at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("addmv");
  return assign_out_exact(out, addmv_value(self, mat, vec, beta, alpha), mat.scalar_type());
}
at::Tensor& addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  TinyOp op("addmv_");
  check_addmv(self, mat, vec);
  check_inplace_size(self, {mat.size(0)});
  return assign_inplace(self, addmv_value(self, mat, vec, beta, alpha), mat.scalar_type(), {mat, vec});
}
// ATen's mv is addmv_ into an empty vector of vec's dtype with beta = 0;
// its checks (and messages) are addmv's.
T mv_value(const at::Tensor& mat, const at::Tensor& vec) {
  at::Tensor like = at::empty({mat.size(0)}, vec.options().device(c10::kMeta));
  check_addmv(like, mat, vec);
  return mv_product(mat, vec).cast(to_engine(mat.scalar_type()));
}
at::Tensor mv(const at::Tensor& mat, const at::Tensor& vec) {
  TinyOp op("mv");
  return make_result(mv_value(mat, vec), mat.scalar_type());
}
at::Tensor& mv_out(const at::Tensor& mat, const at::Tensor& vec, at::Tensor& out) {
  TinyOp op("mv");
  return assign_out_exact(out, mv_value(mat, vec), mat.scalar_type());
}

// ---------------------------------------------------------------- dot / vdot
T dot_value(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(), "] and src [",
              b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(),
              " elements respectively");
  check_not_bool(a, "dot");
  tiny::DType acc = acc_of(a.scalar_type());
  T p = mul(read(a).cast(acc), read(b).cast(acc));
  return p.reduce(ReduceOp::Sum, {0}, false).cast(to_engine(a.scalar_type()));
}
at::Tensor dot(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("dot");
  return make_result(dot_value(a, b), a.scalar_type());
}
at::Tensor& dot_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("dot");
  TORCH_CHECK(out.scalar_type() == a.scalar_type(), "result dtype ", out.scalar_type(), " does not match input dtype ",
              a.scalar_type());
  return assign_out_exact(out, dot_value(a, b), a.scalar_type());
}

// ---------------------------------------------------------------- addr
T addr_value(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2, const c10::Scalar& beta,
             const c10::Scalar& alpha, c10::ScalarType& dt) {
  TORCH_CHECK(v1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", v1.dim(), "-D");
  TORCH_CHECK(v2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", v2.dim(), "-D");
  check_expandable(self, {v1.size(0), v2.size(0)});
  at::native::ResultTypeState state{};
  for (const at::Tensor* t : {&self, &v1, &v2}) state = at::native::update_result_type_state(*t, state);
  dt = at::native::result_type(state);
  if (c10::isIntegralType(dt, /*includeBool=*/true)) {
    TORCH_CHECK(!beta.isFloatingPoint(), "For integral input tensors, argument beta must not be a floating point number.");
    TORCH_CHECK(!alpha.isFloatingPoint(), "For integral input tensors, argument alpha must not be a floating point number.");
  }
  tiny::Shape shape{v1.size(0), v2.size(0)};
  T a = read(v1).cast(to_engine(dt)).reshape({v1.size(0), 1}).expand(shape);
  T b = read(v2).cast(to_engine(dt)).reshape({1, v2.size(0)}).expand(shape);
  if (dt == c10::kBool) {  // logical and / or, as the CPU's bool kernel
    T r = a.binary(Op::And, b);
    if (!alpha.toBool()) r = constant_like(r, 0);
    if (!beta.toBool()) return r;
    return r.binary(Op::Or, broadcast_to(read(self).cast(tiny::DType::Bool), shape));
  }
  // the CPU's order: beta * self + (alpha * v1) * v2
  T prod = mul(mul(scalar_like(a, alpha), a), b);
  if (is_zero(beta)) return prod;
  return add(mul(scalar_like(prod, beta), broadcast_to(read(self).cast(to_engine(dt)), shape)), prod);
}
at::Tensor addr(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
  TinyOp op("addr");
  c10::ScalarType dt;
  T v = addr_value(self, v1, v2, beta, alpha, dt);
  return make_result(v, dt);
}
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2, const c10::Scalar& beta,
                     const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("addr");
  c10::ScalarType dt;
  T v = addr_value(self, v1, v2, beta, alpha, dt);
  return assign_out_cast(out, v, dt);
}
at::Tensor& addr_(at::Tensor& self, const at::Tensor& v1, const at::Tensor& v2, const c10::Scalar& beta,
                  const c10::Scalar& alpha) {
  TinyOp op("addr_");
  c10::ScalarType dt;
  T v = addr_value(self, v1, v2, beta, alpha, dt);
  return assign_inplace(self, v, dt, {v1, v2});
}

// ---------------------------------------------------------------- trace
at::Tensor trace(const at::Tensor& self) {
  TinyOp op("trace");
  check_not_bool(self, "trace");
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  c10::ScalarType dt = c10::isIntegralType(self.scalar_type(), false) ? c10::kLong : self.scalar_type();
  int64_t n = std::min(self.size(0), self.size(1));
  T diag = read(self).as_strided({n}, {self.size(1) + 1}, 0);
  T s = diag.cast(scan_acc_dtype(to_engine(dt))).reduce(ReduceOp::Sum, {0}, false);
  return make_result(s.cast(to_engine(dt)), dt);
}

// ---------------------------------------------------------------- linalg_cross
// out_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1} along `dim` (indices mod 3): the components rotated
// by one and two are windows of the operands joined to themselves.
T cross_value(const at::Tensor& input, const at::Tensor& other, int64_t dim, const at::Tensor& out) {
  MetaOnly<at::meta::structured_linalg_cross> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
  m.meta(input, other, dim);
  check_not_bool(input, "cross");
  TORCH_CHECK(input.scalar_type() == other.scalar_type(), "expected scalar type ", input.scalar_type(),
              " but found ", other.scalar_type());
  tiny::Shape shape = m.shape();
  const int d = int(at::maybe_wrap_dim(dim, input.dim()));
  auto rotated = [&](const at::Tensor& t) {
    T v = broadcast_to(read(t), shape);
    T twice = T::concat({v, v}, d);
    tiny::Ranges one(shape.size()), two(shape.size());
    for (size_t k = 0; k < shape.size(); k++) one[k] = two[k] = {0, shape[k]};
    one[size_t(d)] = {1, 4};
    two[size_t(d)] = {2, 5};
    return std::make_pair(twice.shrink(one), twice.shrink(two));
  };
  auto [a1, a2] = rotated(input);
  auto [b1, b2] = rotated(other);
  return a1.binary(Op::Mul, b2).binary(Op::Sub, a2.binary(Op::Mul, b1));
}
at::Tensor linalg_cross(const at::Tensor& input, const at::Tensor& other, int64_t dim) {
  TinyOp op("linalg_cross");
  return make_result(cross_value(input, other, dim, {}), input.scalar_type());
}
at::Tensor& linalg_cross_out(const at::Tensor& input, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  TinyOp op("linalg_cross");
  return assign_out(out, cross_value(input, other, dim, out), input.scalar_type(), {input, other});
}

// ---------------------------------------------------------------- diag_embed
// out[..., r, c] = x[..., r] (offset >= 0) or x[..., c] (offset < 0) where
// c - r == offset, then the two new dims are moved to dim1 / dim2.
at::Tensor diag_embed(const at::Tensor& self, int64_t offset, int64_t dim1, int64_t dim2) {
  TinyOp op("diag_embed");
  int64_t nd = self.dim() + 1;
  int64_t d1 = at::maybe_wrap_dim(dim1, nd), d2 = at::maybe_wrap_dim(dim2, nd);
  TORCH_CHECK(d1 != d2, "diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  T x = read(self);
  int64_t n = self.size(-1), m = n + std::abs(offset);
  tiny::Shape batch(x.shape().begin(), x.shape().end() - 1);
  tiny::Ranges pad(batch.size(), {0, 0});
  pad.push_back({0, m - n});
  T xp = x.pad(pad);  // (..., m)
  tiny::Shape sq = batch, along = batch;
  sq.insert(sq.end(), {m, m});
  if (offset >= 0) along.insert(along.end(), {m, 1});
  else along.insert(along.end(), {1, m});
  T xe = xp.reshape(along).expand(sq);
  int last = int(sq.size()) - 1;
  T on_diag = sub(iota(sq, last), iota(sq, last - 1)).binary(Op::CmpEq, constant(sq, double(offset), tiny::DType::Int64));
  T r = select(on_diag, xe, constant_like(xe, 0));
  // output dim d takes: d1 -> row axis, d2 -> col axis, the rest in order
  std::vector<int> order;
  int next = 0;
  for (int64_t d = 0; d < nd; d++) {
    if (d == d1) order.push_back(last - 1);
    else if (d == d2) order.push_back(last);
    else order.push_back(next++);
  }
  return make_result(r.permute(order), self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
  m.impl("_addmm_activation", addmm_activation);
  m.impl("_addmm_activation.out", addmm_activation_out);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("baddbmm", baddbmm);
  m.impl("baddbmm.out", baddbmm_out);
  m.impl("baddbmm_", baddbmm_);
  m.impl("addbmm", addbmm);
  m.impl("addbmm.out", addbmm_out);
  m.impl("addbmm_", addbmm_);
  m.impl("addmv", addmv);
  m.impl("addmv.out", addmv_out);
  m.impl("addmv_", addmv_);
  m.impl("mv", mv);
  m.impl("mv.out", mv_out);
  m.impl("dot", dot);
  m.impl("dot.out", dot_out);
  m.impl("vdot", dot);
  m.impl("addr", addr);
  m.impl("addr.out", addr_out);
  m.impl("addr_", addr_);
  m.impl("trace", trace);
  m.impl("linalg_cross", linalg_cross);
  m.impl("linalg_cross.out", linalg_cross_out);
  m.impl("diag_embed", diag_embed);
}

}  // namespace torch_tiny
