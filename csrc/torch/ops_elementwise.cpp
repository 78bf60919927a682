// Elementwise ATen ops: unary math, binary arithmetic and comparisons,
// where/clamp. Each becomes one engine node; fusion is the scheduler's job.
#include <ATen/ScalarOps.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;

T cnst_like(const T& x, double v) {
  return T::full(x.shape(), tiny::is_float(x.dtype()) ? tiny::Scalar::from_double(v) : tiny::Scalar::from_int(int64_t(v)),
                 x.dtype());
}

// ---------------------------------------------------------------- binary
enum class Promote { Default, IntToFloat, ToBool };
using BinaryBuild = T (*)(const T&, const T&);

struct Computed {
  T value;
  c10::ScalarType dtype;
};

Computed compute_binary(const at::Tensor& a, const at::Tensor& b, Promote p, BinaryBuild f) {
  c10::ScalarType common = at::result_type(a, b);
  if (p == Promote::IntToFloat) common = float_type_for(common);
  tiny::Shape shape = broadcast_shape({a, b});
  T v = f(operand(a, common, shape), operand(b, common, shape));
  return {v, p == Promote::ToBool ? c10::kBool : common};
}

template <Promote P, BinaryBuild F>
at::Tensor binary(const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("binary");
  auto r = compute_binary(a, b, P, F);
  return make_result(r.value, r.dtype);
}
template <Promote P, BinaryBuild F>
at::Tensor& binary_(at::Tensor& a, const at::Tensor& b) {
  TinyOp op("binary_");
  auto r = compute_binary(a, b, P, F);
  return assign_inplace(a, r.value, r.dtype, {b});
}
template <Promote P, BinaryBuild F>
at::Tensor& binary_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("binary_out");
  auto r = compute_binary(a, b, P, F);
  return assign_out(out, r.value, r.dtype, {a, b});
}
template <Promote P, BinaryBuild F>
at::Tensor binary_scalar(const at::Tensor& a, const c10::Scalar& b) {
  return binary<P, F>(a, at::native::wrapped_scalar_tensor(b));
}
template <Promote P, BinaryBuild F>
at::Tensor& binary_scalar_(at::Tensor& a, const c10::Scalar& b) {
  return binary_<P, F>(a, at::native::wrapped_scalar_tensor(b));
}
template <Promote P, BinaryBuild F>
at::Tensor& binary_scalar_out(const at::Tensor& a, const c10::Scalar& b, at::Tensor& out) {
  return binary_out<P, F>(a, at::native::wrapped_scalar_tensor(b), out);
}

T b_mul(const T& a, const T& b) { return a.binary(Op::Mul, b); }
T b_div(const T& a, const T& b) { return a.binary(Op::Div, b); }
T b_max(const T& a, const T& b) { return a.binary(Op::Max, b); }
T b_min(const T& a, const T& b) { return a.binary(Op::Min, b); }
T b_lt(const T& a, const T& b) { return a.binary(Op::CmpLt, b); }
T b_le(const T& a, const T& b) { return a.binary(Op::CmpLe, b); }
T b_gt(const T& a, const T& b) { return b.binary(Op::CmpLt, a); }
T b_ge(const T& a, const T& b) { return b.binary(Op::CmpLe, a); }
T b_eq(const T& a, const T& b) { return a.binary(Op::CmpEq, b); }
T b_ne(const T& a, const T& b) { return a.binary(Op::CmpNe, b); }
T b_and(const T& a, const T& b) { return a.binary(Op::And, b); }
T b_or(const T& a, const T& b) { return a.binary(Op::Or, b); }
T b_xor(const T& a, const T& b) { return a.binary(Op::Xor, b); }
T b_shl(const T& a, const T& b) { return a.binary(Op::Shl, b); }
T b_shr(const T& a, const T& b) { return a.binary(Op::Shr, b); }
T b_fmod(const T& a, const T& b) { return a.binary(Op::Fmod, b); }
T b_remainder(const T& a, const T& b) { return a.binary(Op::FloorMod, b); }
T b_floordiv(const T& a, const T& b) { return a.binary(Op::FloorDiv, b); }
T b_atan2(const T& a, const T& b) { return a.binary(Op::Atan2, b); }
T b_hypot(const T& a, const T& b) { return a.binary(Op::Hypot, b); }
T b_copysign(const T& a, const T& b) { return a.binary(Op::Copysign, b); }
T b_pow(const T& a, const T& b) { return a.binary(Op::Pow, b); }
T b_fmax(const T& a, const T& b) {  // NaN-ignoring
  return T::where(b.unary(Op::IsNan), a, T::where(a.unary(Op::IsNan), b, a.binary(Op::Max, b)));
}
T b_fmin(const T& a, const T& b) {
  return T::where(b.unary(Op::IsNan), a, T::where(a.unary(Op::IsNan), b, a.binary(Op::Min, b)));
}
T as_bool(const T& x) { return x.cast(tiny::DType::Bool); }
T b_logical_and(const T& a, const T& b) { return as_bool(a).binary(Op::And, as_bool(b)); }
T b_logical_or(const T& a, const T& b) { return as_bool(a).binary(Op::Or, as_bool(b)); }
T b_logical_xor(const T& a, const T& b) { return as_bool(a).binary(Op::Xor, as_bool(b)); }

void check_not_bool_sub(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() != c10::kBool || b.scalar_type() != c10::kBool,
              "Subtraction, the `-` operator, with two bool tensors is not supported. "
              "Use the `^` or `logical_xor()` operator instead.");
  TORCH_CHECK(a.scalar_type() != c10::kBool && b.scalar_type() != c10::kBool,
              "Subtraction, the `-` operator, with a bool tensor is not supported. "
              "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

// a + alpha * b (sub: alpha negated)
Computed compute_add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, bool subtract) {
  if (subtract) check_not_bool_sub(a, b);
  c10::ScalarType common = at::result_type(a, b);
  TORCH_CHECK(!alpha.isBoolean() || common == c10::kBool, "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(c10::isFloatingType(common) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  tiny::Shape shape = broadcast_shape({a, b});
  T va = operand(a, common, shape), vb = operand(b, common, shape);
  bool unit = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  if (!unit) vb = vb.binary(Op::Mul, scalar_operand(alpha, common, shape));
  return {subtract ? va.binary(Op::Sub, vb) : va.binary(Op::Add, vb), common};
}

at::Tensor add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  TinyOp op("add");
  auto r = compute_add(a, b, alpha, false);
  return make_result(r.value, r.dtype);
}
at::Tensor& add_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  TinyOp op("add_");
  auto r = compute_add(a, b, alpha, false);
  return assign_inplace(a, r.value, r.dtype, {b});
}
at::Tensor& add_out(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("add");
  auto r = compute_add(a, b, alpha, false);
  return assign_out(out, r.value, r.dtype, {a, b});
}
at::Tensor sub_tensor(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  TinyOp op("sub");
  auto r = compute_add(a, b, alpha, true);
  return make_result(r.value, r.dtype);
}
at::Tensor& sub_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  TinyOp op("sub_");
  auto r = compute_add(a, b, alpha, true);
  return assign_inplace(a, r.value, r.dtype, {b});
}
at::Tensor& sub_out(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("sub");
  auto r = compute_add(a, b, alpha, true);
  return assign_out(out, r.value, r.dtype, {a, b});
}
at::Tensor rsub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return sub_tensor(b, a, alpha); }
at::Tensor rsub_scalar(const at::Tensor& a, const c10::Scalar& b, const c10::Scalar& alpha) {
  return sub_tensor(at::native::wrapped_scalar_tensor(b), a, alpha);
}

// div with rounding modes
Computed compute_div(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  if (!mode.has_value()) {
    return compute_binary(a, b, Promote::IntToFloat, b_div);
  }
  c10::ScalarType common = at::result_type(a, b);
  tiny::Shape shape = broadcast_shape({a, b});
  T va = operand(a, common, shape), vb = operand(b, common, shape);
  if (*mode == "trunc") {
    T q = c10::isFloatingType(common) ? va.binary(Op::Div, vb).unary(Op::Trunc) : va.binary(Op::Div, vb);
    return {q, common};
  }
  TORCH_CHECK(*mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
  return {va.binary(Op::FloorDiv, vb), common};
}
at::Tensor div_mode(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  TinyOp op("div");
  auto r = compute_div(a, b, mode);
  return make_result(r.value, r.dtype);
}
at::Tensor& div_mode_(at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  TinyOp op("div_");
  auto r = compute_div(a, b, mode);
  return assign_inplace(a, r.value, r.dtype, {b});
}
at::Tensor& div_mode_out(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode, at::Tensor& out) {
  TinyOp op("div");
  auto r = compute_div(a, b, mode);
  return assign_out(out, r.value, r.dtype, {a, b});
}

// ---------------------------------------------------------------- unary
enum class UPromote { Same, IntToFloat, ToBool };
using UnaryBuild = T (*)(const T&);

Computed compute_unary(const at::Tensor& a, UPromote p, UnaryBuild f) {
  c10::ScalarType dt = a.scalar_type();
  if (p == UPromote::IntToFloat) dt = float_type_for(dt);
  T v = f(operand(a, dt, to_shape(a.sizes())));
  return {v, p == UPromote::ToBool ? c10::kBool : dt};
}
template <UPromote P, UnaryBuild F>
at::Tensor unary(const at::Tensor& a) {
  TinyOp op("unary");
  auto r = compute_unary(a, P, F);
  return make_result(r.value, r.dtype);
}
template <UPromote P, UnaryBuild F>
at::Tensor& unary_(at::Tensor& a) {
  TinyOp op("unary_");
  auto r = compute_unary(a, P, F);
  return assign_inplace(a, r.value, r.dtype, {});
}
template <UPromote P, UnaryBuild F>
at::Tensor& unary_out(const at::Tensor& a, at::Tensor& out) {
  TinyOp op("unary_out");
  auto r = compute_unary(a, P, F);
  return assign_out(out, r.value, r.dtype, {a});
}

T u_neg(const T& x) { return x.unary(Op::Neg); }
T u_abs(const T& x) { return x.unary(Op::Abs); }
T u_exp(const T& x) { return x.unary(Op::Exp); }
T u_log(const T& x) { return x.unary(Op::Log); }
T u_sin(const T& x) { return x.unary(Op::Sin); }
T u_cos(const T& x) { return x.unary(Op::Cos); }
T u_tan(const T& x) { return x.unary(Op::Tan); }
T u_sqrt(const T& x) { return x.unary(Op::Sqrt); }
T u_rsqrt(const T& x) { return x.unary(Op::Sqrt).unary(Op::Recip); }
T u_reciprocal(const T& x) { return x.unary(Op::Recip); }
T u_floor(const T& x) { return x.unary(Op::Floor); }
T u_ceil(const T& x) { return x.unary(Op::Ceil); }
T u_trunc(const T& x) { return x.unary(Op::Trunc); }
T u_round(const T& x) { return x.unary(Op::Round); }
T u_frac(const T& x) { return x.binary(Op::Sub, x.unary(Op::Trunc)); }
T u_sign(const T& x) { return x.unary(Op::Sign); }
T u_erf(const T& x) { return x.unary(Op::Erf); }
T u_erfc(const T& x) { return cnst_like(x, 1.0).binary(Op::Sub, x.unary(Op::Erf)); }
T u_tanh(const T& x) { return x.unary(Op::Tanh); }
T u_asin(const T& x) { return x.unary(Op::Asin); }
T u_acos(const T& x) { return x.unary(Op::Acos); }
T u_atan(const T& x) { return x.unary(Op::Atan); }
T u_sinh(const T& x) { return x.unary(Op::Sinh); }
T u_cosh(const T& x) { return x.unary(Op::Cosh); }
T u_asinh(const T& x) { return x.unary(Op::Asinh); }
T u_acosh(const T& x) { return x.unary(Op::Acosh); }
T u_atanh(const T& x) { return x.unary(Op::Atanh); }
T u_expm1(const T& x) { return x.unary(Op::Expm1); }
T u_log1p(const T& x) { return x.unary(Op::Log1p); }
T u_log2(const T& x) { return x.unary(Op::Log).binary(Op::Mul, cnst_like(x, 1.0 / std::log(2.0))); }
T u_log10(const T& x) { return x.unary(Op::Log).binary(Op::Mul, cnst_like(x, 1.0 / std::log(10.0))); }
T u_exp2(const T& x) { return cnst_like(x, 2.0).binary(Op::Pow, x); }
T u_sigmoid(const T& x) {
  T one = cnst_like(x, 1.0);
  return one.binary(Op::Div, one.binary(Op::Add, x.unary(Op::Neg).unary(Op::Exp)));
}
T u_relu(const T& x) {
  if (x.dtype() == tiny::DType::Bool) return x;
  return T::where(x.binary(Op::CmpLt, cnst_like(x, 0)), cnst_like(x, 0), x);
}
T u_silu(const T& x) { return x.binary(Op::Mul, u_sigmoid(x)); }
T u_isnan(const T& x) { return x.unary(Op::IsNan); }
T u_bitwise_not(const T& x) { return x.unary(Op::Not); }
T u_logical_not(const T& x) { return as_bool(x).unary(Op::Not); }
T u_signbit(const T& x) {
  if (!tiny::is_float(x.dtype())) return x.binary(Op::CmpLt, cnst_like(x, 0));
  return cnst_like(x, 1.0).binary(Op::Copysign, x).binary(Op::CmpLt, cnst_like(x, 0));
}

// ---------------------------------------------------------------- where / clamp
at::Tensor where_self(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("where");
  TORCH_CHECK(cond.scalar_type() == c10::kBool || cond.scalar_type() == c10::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
  c10::ScalarType common = at::result_type(a, b);
  tiny::Shape shape = broadcast_shape({cond, a, b});
  T c = operand(cond, c10::kBool, shape);
  return make_result(T::where(c, operand(a, common, shape), operand(b, common, shape)), common);
}
at::Tensor& where_self_out(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("where");
  c10::ScalarType common = at::result_type(a, b);
  tiny::Shape shape = broadcast_shape({cond, a, b});
  T c = operand(cond, c10::kBool, shape);
  return assign_out(out, T::where(c, operand(a, common, shape), operand(b, common, shape)), common, {cond, a, b});
}

Computed compute_clamp(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  bool has_lo = lo.has_value() && lo->defined(), has_hi = hi.has_value() && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  c10::ScalarType common = x.scalar_type();
  std::vector<at::Tensor> all{x};
  if (has_lo) { common = c10::promoteTypes(common, at::result_type(x, *lo)); all.push_back(*lo); }
  if (has_hi) { common = c10::promoteTypes(common, at::result_type(x, *hi)); all.push_back(*hi); }
  tiny::Shape shape = broadcast_shape(all);
  T v = operand(x, common, shape);
  // min(max(x, lo), hi) with NaN in x propagating; bounds that are NaN give NaN
  if (has_lo) {
    T l = operand(*lo, common, shape);
    v = T::where(v.binary(Op::CmpLt, l), l, v);
    if (tiny::is_float(v.dtype())) v = T::where(l.unary(Op::IsNan), l, v);
  }
  if (has_hi) {
    T h = operand(*hi, common, shape);
    v = T::where(h.binary(Op::CmpLt, v), h, v);
    if (tiny::is_float(v.dtype())) v = T::where(h.unary(Op::IsNan), h, v);
  }
  return {v, common};
}
std::optional<at::Tensor> wrap_opt(const std::optional<c10::Scalar>& s) {
  if (!s.has_value()) return std::nullopt;
  return at::native::wrapped_scalar_tensor(*s);
}
at::Tensor clamp(const at::Tensor& x, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  TinyOp op("clamp");
  auto r = compute_clamp(x, wrap_opt(lo), wrap_opt(hi));
  return make_result(r.value, r.dtype);
}
at::Tensor& clamp_(at::Tensor& x, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  TinyOp op("clamp_");
  auto r = compute_clamp(x, wrap_opt(lo), wrap_opt(hi));
  return assign_inplace(x, r.value, r.dtype, {});
}
at::Tensor& clamp_out(const at::Tensor& x, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi,
                      at::Tensor& out) {
  TinyOp op("clamp");
  auto r = compute_clamp(x, wrap_opt(lo), wrap_opt(hi));
  return assign_out(out, r.value, r.dtype, {x});
}
at::Tensor clamp_t(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  TinyOp op("clamp");
  auto r = compute_clamp(x, lo, hi);
  return make_result(r.value, r.dtype);
}
at::Tensor& clamp_t_(at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  TinyOp op("clamp_");
  auto r = compute_clamp(x, lo, hi);
  return assign_inplace(x, r.value, r.dtype, {});
}
at::Tensor& clamp_t_out(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                        at::Tensor& out) {
  TinyOp op("clamp");
  auto r = compute_clamp(x, lo, hi);
  return assign_out(out, r.value, r.dtype, {x});
}

}  // namespace

#define TINY_BINARY(name, P, F, out)                            \
  m.impl(name ".Tensor", binary<P, F>);                         \
  m.impl(name "_.Tensor", binary_<P, F>);                       \
  m.impl(name out, binary_out<P, F>)
#define TINY_BINARY_SCALAR(name, P, F)                          \
  m.impl(name ".Scalar", binary_scalar<P, F>);                  \
  m.impl(name "_.Scalar", binary_scalar_<P, F>);                \
  m.impl(name ".Scalar_out", binary_scalar_out<P, F>)
#define TINY_UNARY(name, P, F)                                  \
  m.impl(name, unary<P, F>);                                    \
  m.impl(name "_", unary_<P, F>);                               \
  m.impl(name ".out", unary_out<P, F>)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", add);
  m.impl("add_.Tensor", add_);
  m.impl("add.out", add_out);
  m.impl("sub.Tensor", sub_tensor);
  m.impl("sub_.Tensor", sub_);
  m.impl("sub.out", sub_out);
  m.impl("rsub.Tensor", rsub);
  m.impl("rsub.Scalar", rsub_scalar);
  TINY_BINARY("mul", Promote::Default, b_mul, ".out");
  TINY_BINARY("div", Promote::IntToFloat, b_div, ".out");
  m.impl("div.Tensor_mode", div_mode);
  m.impl("div_.Tensor_mode", div_mode_);
  m.impl("div.out_mode", div_mode_out);
  m.impl("maximum", binary<Promote::Default, b_max>);
  m.impl("maximum.out", binary_out<Promote::Default, b_max>);
  m.impl("minimum", binary<Promote::Default, b_min>);
  m.impl("minimum.out", binary_out<Promote::Default, b_min>);
  m.impl("fmax", binary<Promote::Default, b_fmax>);
  m.impl("fmax.out", binary_out<Promote::Default, b_fmax>);
  m.impl("fmin", binary<Promote::Default, b_fmin>);
  m.impl("fmin.out", binary_out<Promote::Default, b_fmin>);
  TINY_BINARY("lt", Promote::ToBool, b_lt, ".Tensor_out");
  TINY_BINARY("le", Promote::ToBool, b_le, ".Tensor_out");
  TINY_BINARY("gt", Promote::ToBool, b_gt, ".Tensor_out");
  TINY_BINARY("ge", Promote::ToBool, b_ge, ".Tensor_out");
  TINY_BINARY("eq", Promote::ToBool, b_eq, ".Tensor_out");
  TINY_BINARY("ne", Promote::ToBool, b_ne, ".Tensor_out");
  TINY_BINARY_SCALAR("lt", Promote::ToBool, b_lt);
  TINY_BINARY_SCALAR("le", Promote::ToBool, b_le);
  TINY_BINARY_SCALAR("gt", Promote::ToBool, b_gt);
  TINY_BINARY_SCALAR("ge", Promote::ToBool, b_ge);
  TINY_BINARY_SCALAR("eq", Promote::ToBool, b_eq);
  TINY_BINARY_SCALAR("ne", Promote::ToBool, b_ne);
  TINY_BINARY("bitwise_and", Promote::Default, b_and, ".Tensor_out");
  TINY_BINARY("bitwise_or", Promote::Default, b_or, ".Tensor_out");
  TINY_BINARY("bitwise_xor", Promote::Default, b_xor, ".Tensor_out");
  TINY_BINARY("bitwise_left_shift", Promote::Default, b_shl, ".Tensor_out");
  TINY_BINARY("bitwise_right_shift", Promote::Default, b_shr, ".Tensor_out");
  m.impl("logical_and", binary<Promote::ToBool, b_logical_and>);
  m.impl("logical_and_", binary_<Promote::ToBool, b_logical_and>);
  m.impl("logical_and.out", binary_out<Promote::ToBool, b_logical_and>);
  m.impl("logical_or", binary<Promote::ToBool, b_logical_or>);
  m.impl("logical_or_", binary_<Promote::ToBool, b_logical_or>);
  m.impl("logical_or.out", binary_out<Promote::ToBool, b_logical_or>);
  m.impl("logical_xor", binary<Promote::ToBool, b_logical_xor>);
  m.impl("logical_xor_", binary_<Promote::ToBool, b_logical_xor>);
  m.impl("logical_xor.out", binary_out<Promote::ToBool, b_logical_xor>);
  m.impl("fmod.Tensor", binary<Promote::Default, b_fmod>);
  m.impl("fmod_.Tensor", binary_<Promote::Default, b_fmod>);
  m.impl("fmod.Tensor_out", binary_out<Promote::Default, b_fmod>);
  m.impl("remainder.Tensor", binary<Promote::Default, b_remainder>);
  m.impl("remainder_.Tensor", binary_<Promote::Default, b_remainder>);
  m.impl("remainder.Tensor_out", binary_out<Promote::Default, b_remainder>);
  m.impl("floor_divide", binary<Promote::Default, b_floordiv>);
  m.impl("floor_divide_.Tensor", binary_<Promote::Default, b_floordiv>);
  m.impl("floor_divide.out", binary_out<Promote::Default, b_floordiv>);
  m.impl("atan2", binary<Promote::IntToFloat, b_atan2>);
  m.impl("atan2_", binary_<Promote::IntToFloat, b_atan2>);
  m.impl("atan2.out", binary_out<Promote::IntToFloat, b_atan2>);
  m.impl("hypot", binary<Promote::Default, b_hypot>);
  m.impl("hypot_", binary_<Promote::Default, b_hypot>);
  m.impl("hypot.out", binary_out<Promote::Default, b_hypot>);
  m.impl("copysign.Tensor", binary<Promote::IntToFloat, b_copysign>);
  m.impl("copysign_.Tensor", binary_<Promote::IntToFloat, b_copysign>);
  m.impl("copysign.out", binary_out<Promote::IntToFloat, b_copysign>);

  TINY_UNARY("neg", UPromote::Same, u_neg);
  TINY_UNARY("abs", UPromote::Same, u_abs);
  TINY_UNARY("exp", UPromote::IntToFloat, u_exp);
  TINY_UNARY("exp2", UPromote::IntToFloat, u_exp2);
  TINY_UNARY("expm1", UPromote::IntToFloat, u_expm1);
  TINY_UNARY("log", UPromote::IntToFloat, u_log);
  TINY_UNARY("log2", UPromote::IntToFloat, u_log2);
  TINY_UNARY("log10", UPromote::IntToFloat, u_log10);
  TINY_UNARY("log1p", UPromote::IntToFloat, u_log1p);
  TINY_UNARY("sin", UPromote::IntToFloat, u_sin);
  TINY_UNARY("cos", UPromote::IntToFloat, u_cos);
  TINY_UNARY("tan", UPromote::IntToFloat, u_tan);
  TINY_UNARY("asin", UPromote::IntToFloat, u_asin);
  TINY_UNARY("acos", UPromote::IntToFloat, u_acos);
  TINY_UNARY("atan", UPromote::IntToFloat, u_atan);
  TINY_UNARY("sinh", UPromote::IntToFloat, u_sinh);
  TINY_UNARY("cosh", UPromote::IntToFloat, u_cosh);
  TINY_UNARY("tanh", UPromote::IntToFloat, u_tanh);
  TINY_UNARY("asinh", UPromote::IntToFloat, u_asinh);
  TINY_UNARY("acosh", UPromote::IntToFloat, u_acosh);
  TINY_UNARY("atanh", UPromote::IntToFloat, u_atanh);
  TINY_UNARY("sqrt", UPromote::IntToFloat, u_sqrt);
  TINY_UNARY("rsqrt", UPromote::IntToFloat, u_rsqrt);
  TINY_UNARY("reciprocal", UPromote::IntToFloat, u_reciprocal);
  TINY_UNARY("sigmoid", UPromote::IntToFloat, u_sigmoid);
  TINY_UNARY("erf", UPromote::IntToFloat, u_erf);
  TINY_UNARY("erfc", UPromote::IntToFloat, u_erfc);
  TINY_UNARY("floor", UPromote::Same, u_floor);
  TINY_UNARY("ceil", UPromote::Same, u_ceil);
  TINY_UNARY("trunc", UPromote::Same, u_trunc);
  TINY_UNARY("frac", UPromote::Same, u_frac);
  TINY_UNARY("sign", UPromote::Same, u_sign);
  TINY_UNARY("bitwise_not", UPromote::Same, u_bitwise_not);
  m.impl("round", unary<UPromote::Same, u_round>);
  m.impl("round_", unary_<UPromote::Same, u_round>);
  m.impl("round.out", unary_out<UPromote::Same, u_round>);
  m.impl("relu", unary<UPromote::Same, u_relu>);
  m.impl("relu_", unary_<UPromote::Same, u_relu>);
  m.impl("silu", unary<UPromote::Same, u_silu>);
  m.impl("silu_", unary_<UPromote::Same, u_silu>);
  m.impl("silu.out", unary_out<UPromote::Same, u_silu>);
  m.impl("isnan", unary<UPromote::ToBool, u_isnan>);
  m.impl("signbit", unary<UPromote::ToBool, u_signbit>);
  m.impl("signbit.out", unary_out<UPromote::ToBool, u_signbit>);
  m.impl("logical_not", unary<UPromote::ToBool, u_logical_not>);
  m.impl("logical_not_", unary_<UPromote::ToBool, u_logical_not>);
  m.impl("logical_not.out", unary_out<UPromote::ToBool, u_logical_not>);

  m.impl("pow.Tensor_Tensor", binary<Promote::Default, b_pow>);
  m.impl("pow_.Tensor", binary_<Promote::Default, b_pow>);
  m.impl("pow.Tensor_Tensor_out", binary_out<Promote::Default, b_pow>);
  m.impl("pow.Tensor_Scalar", binary_scalar<Promote::Default, b_pow>);
  m.impl("pow_.Scalar", binary_scalar_<Promote::Default, b_pow>);
  m.impl("pow.Tensor_Scalar_out", binary_scalar_out<Promote::Default, b_pow>);
  m.impl("where.self", where_self);
  m.impl("where.self_out", where_self_out);
  m.impl("clamp", clamp);
  m.impl("clamp_", clamp_);
  m.impl("clamp.out", clamp_out);
  m.impl("clamp.Tensor", clamp_t);
  m.impl("clamp_.Tensor", clamp_t_);
  m.impl("clamp.Tensor_out", clamp_t_out);
}

}  // namespace torch_tiny
