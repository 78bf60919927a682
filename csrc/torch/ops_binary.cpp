// Binary pointwise ops: arithmetic (add/sub with alpha, div with rounding
// modes, floor_divide, remainder, fmod, pow), atan2/hypot/copysign,
// maximum/minimum/fmax/fmin, bitwise and shifts, logical ops, comparisons,
// xlogy/xlog1py, heaviside, logaddexp(2), nextafter. Scalar overloads that
// ATen does not decompose wrap the scalar as a 0-d CPU tensor, which keeps
// ATen's type promotion for wrapped numbers.
#include <ATen/ScalarOps.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/result_type.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "torch/pointwise.h"
#include "torch/storage_only.h"

namespace torch_tiny {
using namespace pw;

namespace {

enum class Promote { Default, IntToFloat, ToBool };

struct Pair {
  T a, b;
};
// Both operands broadcast and promoted to `dt`, widened to opmath(dt) unless native.
Pair operands(const at::Tensor& a, const at::Tensor& b, c10::ScalarType dt, bool native = false) {
  tiny::Shape shape = broadcast_shape({a, b});
  if (native) return {operand(a, dt, shape), operand(b, dt, shape)};
  return {operand_op(a, dt, shape), operand_op(b, dt, shape)};
}

// A binary op computing F in opmath of the promoted type (or in the type
// itself when Native: bit-level formulas).
template <T (*F)(const T&, const T&), Promote P = Promote::Default, unsigned Deny = kAllowAll, Name Kernel = "",
          bool Native = false>
Computed binary(const at::Tensor& a, const at::Tensor& b) {
  c10::ScalarType common = at::result_type(a, b);
  check_dtype(common, Deny, Kernel.s);
  if (P == Promote::IntToFloat) common = float_type_for(common);
  auto [x, y] = operands(a, b, common, Native);
  if (P == Promote::ToBool) return {F(x, y), c10::kBool};
  return {F(x, y).cast(to_engine(common)), common};
}

// Integer division family: raises ZeroDivisionError where the divisor is known.
template <T (*F)(const T&, const T&), Name Kernel>
Computed int_division(const at::Tensor& a, const at::Tensor& b) {
  c10::ScalarType common = at::result_type(a, b);
  check_dtype(common, kNoBool, Kernel.s);
  check_int_divisor(b, common);
  auto [x, y] = operands(a, b, common);
  return {F(x, y).cast(to_engine(common)), common};
}

template <auto F>
Computed with_scalar(const at::Tensor& a, const c10::Scalar& b) {
  return F(a, at::native::wrapped_scalar_tensor(b));
}

// ---------------------------------------------------------------- formulas
T b_mul(const T& a, const T& b) { return a * b; }
T b_div(const T& a, const T& b) { return a / b; }
T b_max(const T& a, const T& b) { return max(a, b); }
T b_min(const T& a, const T& b) { return min(a, b); }
T b_fmax(const T& a, const T& b) {  // NaN-ignoring
  if (!tiny::is_float(a.dtype())) return max(a, b);
  return where(isnan(b), a, where(isnan(a), b, max(a, b)));
}
T b_fmin(const T& a, const T& b) {
  if (!tiny::is_float(a.dtype())) return min(a, b);
  return where(isnan(b), a, where(isnan(a), b, min(a, b)));
}
T b_lt(const T& a, const T& b) { return lt(a, b); }
T b_le(const T& a, const T& b) { return le(a, b); }
T b_gt(const T& a, const T& b) { return gt(a, b); }
T b_ge(const T& a, const T& b) { return ge(a, b); }
T b_eq(const T& a, const T& b) { return eq(a, b); }
T b_ne(const T& a, const T& b) { return ne(a, b); }
T b_and(const T& a, const T& b) { return land(a, b); }
T b_or(const T& a, const T& b) { return lor(a, b); }
T b_xor(const T& a, const T& b) { return a.binary(Op::Xor, b); }
T b_shl(const T& a, const T& b) { return a.binary(Op::Shl, b); }
T b_shr(const T& a, const T& b) { return a.binary(Op::Shr, b); }
T as_bool(const T& x) { return x.cast(tiny::DType::Bool); }
T b_logical_and(const T& a, const T& b) { return land(as_bool(a), as_bool(b)); }
T b_logical_or(const T& a, const T& b) { return lor(as_bool(a), as_bool(b)); }
T b_logical_xor(const T& a, const T& b) { return as_bool(a).binary(Op::Xor, as_bool(b)); }
T b_fmod(const T& a, const T& b) { return a.binary(Op::Fmod, b); }
T b_remainder(const T& a, const T& b) { return a.binary(Op::FloorMod, b); }
T b_floordiv(const T& a, const T& b) { return a.binary(Op::FloorDiv, b); }
T b_atan2(const T& a, const T& b) { return a.binary(Op::Atan2, b); }
T b_hypot(const T& a, const T& b) { return a.binary(Op::Hypot, b); }
T b_copysign(const T& a, const T& b) { return a.binary(Op::Copysign, b); }
T b_pow(const T& a, const T& b) { return a.binary(Op::Pow, b); }
// x * log(y), 0 where x == 0 unless y is NaN
T b_xlogy(const T& x, const T& y) {
  return where(isnan(y), y, where(eq(x, 0.0), 0.0, x * un(Op::Log, y)));
}
T b_xlog1py(const T& x, const T& y) {
  return where(isnan(y), y, where(eq(x, 0.0), 0.0, x * un(Op::Log1p, y)));
}
T b_heaviside(const T& x, const T& v) {
  return where(eq(x, cnst(x, 0.0)), v, gt(x, cnst(x, 0.0)).cast(x.dtype()));
}
T b_logaddexp(const T& a, const T& b) {
  const double inf = std::numeric_limits<double>::infinity();
  T both_inf = land(eq(a, b), eq(un(Op::Abs, a), inf));
  T m = max(a, b);
  return where(both_inf, a, m + un(Op::Log1p, un(Op::Exp, -un(Op::Abs, a - b))));
}
T b_logaddexp2(const T& a, const T& b) {
  const double inf = std::numeric_limits<double>::infinity();
  T both_inf = land(eq(a, b), eq(un(Op::Abs, a), inf));
  T m = max(a, b);
  return where(both_inf, a, m + un(Op::Log1p, un(Op::Exp2, -un(Op::Abs, a - b))) * (1.0 / std::log(2.0)));
}
// The next representable value after x towards y, stepping the bit pattern.
T b_nextafter(const T& x, const T& y) {
  tiny::DType bits = tiny::itemsize(x.dtype()) == 8 ? tiny::DType::Int64
                     : tiny::itemsize(x.dtype()) == 4 ? tiny::DType::Int32
                                                      : tiny::DType::Int16;
  T ix = x.bitcast(bits);
  T one = T::full(x.shape(), tiny::Scalar::from_int(1), bits);
  T away = eq(lt(x, y), gt(x, 0.0));  // moving away from zero: the magnitude grows
  T stepped = where(away, ix + one, ix - one).bitcast(x.dtype());
  T tiny_step = T::full(x.shape(), tiny::Scalar::from_int(1), bits).bitcast(x.dtype()).binary(Op::Copysign, y);
  T r = where(eq(x, 0.0), tiny_step, stepped);
  r = where(eq(x, y), y, r);
  return where(lor(isnan(x), isnan(y)), x + y, r);
}

// gcd by Euclid's algorithm. The number of steps is bounded by the bit width
// (consecutive Fibonacci numbers are the worst case: < 1.45 * bits + 2 steps),
// so a fixed number of masked steps is exact for every input.
T b_gcd(const T& a0, const T& b0) {
  T a = un(Op::Abs, a0), b = un(Op::Abs, b0);
  int steps = int(tiny::itemsize(a.dtype()) * 8 * 1.45) + 2;
  T zero = cnst(a, 0.0);
  for (int i = 0; i < steps; i++) {
    T live = ne(a, zero);
    T next_a = where(live, b.binary(Op::Fmod, a), a);
    b = where(live, a, b);
    a = next_a;
  }
  return b;
}
// |a / g * b|, in int for 8- and 16-bit types (C++ promotes them; the result then wraps)
T b_lcm(const T& a, const T& b) {
  T g = b_gcd(a, b);
  tiny::DType wide = tiny::itemsize(a.dtype()) < 4 ? tiny::DType::Int32 : a.dtype();
  T l = un(Op::Abs, a.cast(wide) / g.cast(wide) * b.cast(wide)).cast(a.dtype());
  T zero = cnst(a, 0.0);
  return where(eq(g, zero), zero, l);
}

// ---------------------------------------------------------------- mul (complex results: ops_complex)
using Mul = Kernels<"mul", binary<b_mul>>;
bool complex_result(const at::Tensor& a, const at::Tensor& b) { return c10::isComplexType(at::result_type(a, b)); }
at::Tensor mul_fn(const at::Tensor& a, const at::Tensor& b) {
  return complex_result(a, b) ? complex_mul(a, b) : Mul::fn(a, b);
}
at::Tensor& mul_inplace(at::Tensor& self, const at::Tensor& b) {
  if (!complex_result(self, b)) return Mul::inplace(self, b);
  TORCH_CHECK(c10::canCast(at::result_type(self, b), self.scalar_type()), "result type ", at::result_type(self, b),
              " can't be cast to the desired output type ", self.scalar_type());
  return complex_mul_out(self, b, self);
}
at::Tensor& mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  return complex_result(a, b) ? complex_mul_out(a, b, out) : Mul::out(a, b, out);
}

// ---------------------------------------------------------------- add / sub
void check_not_bool_sub(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK_NOT_IMPLEMENTED(a.scalar_type() != c10::kBool || b.scalar_type() != c10::kBool,
              "Subtraction, the `-` operator, with two bool tensors is not supported. "
              "Use the `^` or `logical_xor()` operator instead.");
  TORCH_CHECK_NOT_IMPLEMENTED(a.scalar_type() != c10::kBool && b.scalar_type() != c10::kBool,
              "Subtraction, the `-` operator, with a bool tensor is not supported. "
              "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

// a + alpha * b (sub: a - alpha * b)
Computed add_sub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, bool subtract) {
  if (subtract) check_not_bool_sub(a, b);
  c10::ScalarType common = at::result_type(a, b);
  TORCH_CHECK(!alpha.isBoolean() || common == c10::kBool, "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(c10::isFloatingType(common) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  // one rounding at the end, as ATen's vectorized kernel (its scalar loop, used for
  // tiny or broadcast inputs, rounds alpha * b to 16-bit floats first)
  auto [x, y] = operands(a, b, common);
  bool unit = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  if (!unit) y = y * user_scalar(y, alpha);
  return {(subtract ? x - y : x + y).cast(to_engine(common)), common};
}
Computed add_alpha(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return add_sub(a, b, alpha, false); }
Computed sub_alpha(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return add_sub(a, b, alpha, true); }
Computed rsub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return add_sub(b, a, alpha, true); }

// ---------------------------------------------------------------- div
Computed true_div(const at::Tensor& a, const at::Tensor& b) { return binary<b_div, Promote::IntToFloat>(a, b); }

Computed div_mode(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  if (!mode.has_value()) return true_div(a, b);
  c10::ScalarType common = at::result_type(a, b);
  if (*mode == "trunc") {
    check_dtype(common, kNoBool, "div_trunc_cpu");
    check_int_divisor(b, common);
    auto [x, y] = operands(a, b, common, true);  // the quotient is rounded to the dtype before trunc
    T q = c10::isFloatingType(common) ? un(Op::Trunc, x / y) : x / y;
    return {q, common};
  }
  TORCH_CHECK(*mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode,
              "'");
  return int_division<b_floordiv, "div_floor_cpu">(a, b);
}

// ---------------------------------------------------------------- pow
Computed pow_tt(const at::Tensor& a, const at::Tensor& b) { return binary<b_pow, Promote::Default, kNoBool, "pow">(a, b); }

// ATen specializes common scalar exponents (x*x for 2, sqrt for 0.5, ...).
Computed pow_ts(const at::Tensor& a, const c10::Scalar& e) {
  c10::ScalarType common = at::result_type(a, e);
  TORCH_CHECK(!(c10::isIntegralType(common, true) && e.isIntegral(true) && e.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
  // x ** 0 is 1 and x ** 1 is x for every dtype (bool included), NaN too
  if (e.equal(0.0) || e.equal(false))
    return {T::full(to_shape(a.sizes()), tiny::Scalar::from_int(1), to_engine(common)), common};
  if (e.equal(1.0) || e.equal(true)) return {operand(a, common, to_shape(a.sizes())), common};
  check_dtype(common, kNoBool, "pow");
  T x = operand_op(a, common, to_shape(a.sizes()));
  T r;
  double ev = e.toDouble();
  bool f = c10::isFloatingType(common);
  if (ev == 2) r = x * x;
  else if (ev == 3) r = x * x * x;
  else if (f && ev == 0.5) r = un(Op::Sqrt, x);
  else if (f && ev == -0.5 && common != c10::kHalf) r = 1.0 / un(Op::Sqrt, x);  // half: pow
  else if (f && ev == -1) r = 1.0 / x;
  else if (f && ev == -2) r = 1.0 / (x * x);
  else r = x.binary(Op::Pow, cnst(x, e));
  return {r.cast(to_engine(common)), common};
}

Computed pow_st(const c10::Scalar& base, const at::Tensor& e) {
  return pow_tt(at::native::wrapped_scalar_tensor(base), e);
}
at::Tensor pow_scalar(const c10::Scalar& base, const at::Tensor& e) {
  TinyOp op("pow");
  auto r = pow_st(base, e);
  return make_result(r.value, r.dtype);
}
at::Tensor& pow_scalar_out(const c10::Scalar& base, const at::Tensor& e, at::Tensor& out) {
  TinyOp op("pow");
  auto r = pow_st(base, e);
  return assign_out(out, r.value, r.dtype, {e});
}

at::Tensor remainder_scalar_tensor(const c10::Scalar& a, const at::Tensor& b) {
  TinyOp op("remainder");
  auto r = int_division<b_remainder, "remainder_cpu">(at::native::wrapped_scalar_tensor(a), b);
  return make_result(r.value, r.dtype);
}

// ---------------------------------------------------------------- misc
Computed heaviside(const at::Tensor& a, const at::Tensor& v) {
  TORCH_CHECK(a.scalar_type() == v.scalar_type(), "heaviside is not yet implemented for tensors with different dtypes.");
  return binary<b_heaviside>(a, v);
}
void heaviside_out(const at::Tensor& out, c10::ScalarType computed) {
  TORCH_CHECK(out.scalar_type() == computed, "heaviside is not yet implemented for tensors with different dtypes.");
}

}  // namespace

// Registers name.Tensor, name_.Tensor and name<out> for a Tensor-Tensor op.
#define TINY_BINARY(name, out_name, ...)                               \
  m.impl(name ".Tensor", Kernels<name, __VA_ARGS__>::fn);              \
  m.impl(name "_.Tensor", Kernels<name, __VA_ARGS__>::inplace);        \
  m.impl(name out_name, Kernels<name, __VA_ARGS__>::out)
#define TINY_BINARY_SCALAR(name, ...)                                        \
  m.impl(name ".Scalar", Kernels<name, with_scalar<__VA_ARGS__>>::fn);       \
  m.impl(name "_.Scalar", Kernels<name, with_scalar<__VA_ARGS__>>::inplace); \
  m.impl(name ".Scalar_out", Kernels<name, with_scalar<__VA_ARGS__>>::out)
// functional, in-place and .out with no overload names
#define TINY_BINARY3(name, ...) TINY_PW3(name, __VA_ARGS__)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TINY_BINARY("add", ".out", add_alpha);
  TINY_BINARY("sub", ".out", sub_alpha);
  m.impl("rsub.Tensor", Kernels<"rsub", rsub>::fn);
  m.impl("mul.Tensor", mul_fn);
  m.impl("mul_.Tensor", mul_inplace);
  m.impl("mul.out", mul_out);
  TINY_BINARY("div", ".out", true_div);
  m.impl("div.Tensor_mode", Kernels<"div", div_mode>::fn);
  m.impl("div_.Tensor_mode", Kernels<"div", div_mode>::inplace);
  m.impl("div.out_mode", Kernels<"div", div_mode>::out);
  m.impl("floor_divide", Kernels<"floor_divide", int_division<b_floordiv, "div_floor_cpu">>::fn);
  m.impl("floor_divide_.Tensor", Kernels<"floor_divide", int_division<b_floordiv, "div_floor_cpu">>::inplace);
  m.impl("floor_divide.out", Kernels<"floor_divide", int_division<b_floordiv, "div_floor_cpu">>::out);
  TINY_BINARY("remainder", ".Tensor_out", int_division<b_remainder, "remainder_cpu">);
  m.impl("remainder.Scalar_Tensor", remainder_scalar_tensor);
  TINY_BINARY("fmod", ".Tensor_out", int_division<b_fmod, "fmod_cpu">);

  m.impl("pow.Tensor_Tensor", Kernels<"pow", pow_tt>::fn);
  m.impl("pow_.Tensor", Kernels<"pow", pow_tt>::inplace);
  m.impl("pow.Tensor_Tensor_out", Kernels<"pow", pow_tt>::out);
  m.impl("pow.Tensor_Scalar", Kernels<"pow", pow_ts>::fn);
  m.impl("pow_.Scalar", Kernels<"pow", pow_ts>::inplace);
  m.impl("pow.Tensor_Scalar_out", Kernels<"pow", pow_ts>::out);
  m.impl("pow.Scalar", pow_scalar);
  m.impl("pow.Scalar_out", pow_scalar_out);

  TINY_BINARY3("atan2", binary<b_atan2, Promote::IntToFloat>);
  TINY_BINARY3("hypot", binary<b_hypot, Promote::Default, kFloatOnly, "hypot_cpu">);
  TINY_BINARY("copysign", ".out", binary<b_copysign, Promote::IntToFloat>);
  TINY_BINARY3("logaddexp", binary<b_logaddexp, Promote::Default, kFloatOnly, "logaddexp_cpu">);
  TINY_BINARY3("logaddexp2", binary<b_logaddexp2, Promote::Default, kFloatOnly, "logaddexp2_cpu">);
  TINY_BINARY3("nextafter", binary<b_nextafter, Promote::Default, kFloatOnly, "nextafter_cpu", true>);
  TINY_BINARY3("heaviside", heaviside, heaviside_out);
  TINY_BINARY3("gcd", binary<b_gcd, Promote::Default, kNoBool | kNoFloat, "gcd_cpu">);
  TINY_BINARY3("lcm", binary<b_lcm, Promote::Default, kNoBool | kNoFloat, "lcm_cpu">);
  // ATen's xlogy kernels are scalar loops rounding each step to 16-bit floats: Native
  using Xlogy = Kernels<"xlogy", binary<b_xlogy, Promote::IntToFloat, kAllowAll, "", true>>;
  using Xlog1py = Kernels<"xlog1py", binary<b_xlog1py, Promote::IntToFloat, kAllowAll, "", true>>;
  m.impl("xlogy.Tensor", Xlogy::fn);
  m.impl("xlogy_.Tensor", Xlogy::inplace);
  m.impl("xlogy.OutTensor", Xlogy::out);
  m.impl("special_xlog1py", Xlog1py::fn);
  m.impl("special_xlog1py.out", Xlog1py::out);

  m.impl("maximum", Kernels<"maximum", binary<b_max>>::fn);
  m.impl("maximum.out", Kernels<"maximum", binary<b_max>>::out);
  m.impl("minimum", Kernels<"minimum", binary<b_min>>::fn);
  m.impl("minimum.out", Kernels<"minimum", binary<b_min>>::out);
  m.impl("fmax", Kernels<"fmax", binary<b_fmax>>::fn);
  m.impl("fmax.out", Kernels<"fmax", binary<b_fmax>>::out);
  m.impl("fmin", Kernels<"fmin", binary<b_fmin>>::fn);
  m.impl("fmin.out", Kernels<"fmin", binary<b_fmin>>::out);

#define TINY_CMP(name, F)                                      \
  TINY_BINARY(name, ".Tensor_out", binary<F, Promote::ToBool>); \
  TINY_BINARY_SCALAR(name, binary<F, Promote::ToBool>)
  TINY_CMP("lt", b_lt);
  TINY_CMP("le", b_le);
  TINY_CMP("gt", b_gt);
  TINY_CMP("ge", b_ge);
  TINY_CMP("eq", b_eq);
  TINY_CMP("ne", b_ne);
#undef TINY_CMP

  TINY_BINARY("bitwise_and", ".Tensor_out", binary<b_and, Promote::Default, kIntOnly, "bitwise_and_cpu">);
  TINY_BINARY("bitwise_or", ".Tensor_out", binary<b_or, Promote::Default, kIntOnly, "bitwise_or_cpu">);
  TINY_BINARY("bitwise_xor", ".Tensor_out", binary<b_xor, Promote::Default, kIntOnly, "bitwise_xor_cpu">);
  using Shl = Kernels<"lshift", binary<b_shl, Promote::Default, kNoBool | kNoFloat, "lshift_cpu">>;
  using Shr = Kernels<"rshift", binary<b_shr, Promote::Default, kNoBool | kNoFloat, "rshift_cpu">>;
  using ShlS = Kernels<"lshift", with_scalar<binary<b_shl, Promote::Default, kNoBool | kNoFloat, "lshift_cpu">>>;
  using ShrS = Kernels<"rshift", with_scalar<binary<b_shr, Promote::Default, kNoBool | kNoFloat, "rshift_cpu">>>;
  m.impl("bitwise_left_shift.Tensor", Shl::fn);
  m.impl("bitwise_left_shift_.Tensor", Shl::inplace);
  m.impl("bitwise_left_shift.Tensor_out", Shl::out);
  m.impl("bitwise_right_shift.Tensor", Shr::fn);
  m.impl("bitwise_right_shift_.Tensor", Shr::inplace);
  m.impl("bitwise_right_shift.Tensor_out", Shr::out);
  m.impl("__lshift__.Tensor", Shl::fn);
  m.impl("__ilshift__.Tensor", Shl::inplace);
  m.impl("__lshift__.Scalar", ShlS::fn);
  m.impl("__ilshift__.Scalar", ShlS::inplace);
  m.impl("__rshift__.Tensor", Shr::fn);
  m.impl("__irshift__.Tensor", Shr::inplace);
  m.impl("__rshift__.Scalar", ShrS::fn);
  m.impl("__irshift__.Scalar", ShrS::inplace);

  TINY_BINARY3("logical_and", binary<b_logical_and, Promote::ToBool>);
  TINY_BINARY3("logical_or", binary<b_logical_or, Promote::ToBool>);
  TINY_BINARY3("logical_xor", binary<b_logical_xor, Promote::ToBool>);
}

}  // namespace torch_tiny
