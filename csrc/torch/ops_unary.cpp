// Unary math: exp/log/trig families, rounding, predicates, nan_to_num.
// Floating formulas compute in opmath (float32 for 16-bit floats) and round
// once, as ATen's CPU kernels do.
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "torch/pointwise.h"
#include "torch/storage_only.h"

namespace torch_tiny {
using namespace pw;

namespace {

// ---------------------------------------------------------------- formulas
T u_neg(const T& x) { return -x; }
T u_abs(const T& x) { return un(Op::Abs, x); }
T u_sign(const T& x) {  // ATen's sign(NaN) is 0
  if (!tiny::is_float(x.dtype())) return un(Op::Sign, x);
  return where(isnan(x), 0.0, un(Op::Sign, x));
}
T u_exp(const T& x) { return un(Op::Exp, x); }
T u_exp2(const T& x) { return un(Op::Exp2, x); }
T u_expm1(const T& x) { return un(Op::Expm1, x); }
T u_log(const T& x) { return un(Op::Log, x); }
T u_log2(const T& x) { return un(Op::Log2, x); }
T u_log10(const T& x) { return un(Op::Log10, x); }
T u_log1p(const T& x) { return un(Op::Log1p, x); }
T u_sqrt(const T& x) { return un(Op::Sqrt, x); }
T u_rsqrt(const T& x) { return 1.0 / un(Op::Sqrt, x); }
T u_reciprocal(const T& x) { return 1.0 / x; }
T u_sin(const T& x) { return un(Op::Sin, x); }
T u_cos(const T& x) { return un(Op::Cos, x); }
T u_tan(const T& x) { return un(Op::Tan, x); }
T u_asin(const T& x) { return un(Op::Asin, x); }
T u_acos(const T& x) { return un(Op::Acos, x); }
T u_atan(const T& x) { return un(Op::Atan, x); }
T u_sinh(const T& x) { return un(Op::Sinh, x); }
T u_cosh(const T& x) { return un(Op::Cosh, x); }
T u_tanh(const T& x) { return un(Op::Tanh, x); }
T u_asinh(const T& x) { return un(Op::Asinh, x); }
T u_acosh(const T& x) { return un(Op::Acosh, x); }
T u_atanh(const T& x) { return un(Op::Atanh, x); }
T u_sigmoid(const T& x) { return sigmoid(x); }
T u_erf(const T& x) { return un(Op::Erf, x); }
T u_erfc(const T& x) { return un(Op::Erfc, x); }
T u_floor(const T& x) { return un(Op::Floor, x); }
T u_ceil(const T& x) { return un(Op::Ceil, x); }
T u_trunc(const T& x) { return un(Op::Trunc, x); }
T u_round(const T& x) { return un(Op::Round, x); }  // half to even, like nearbyint
T u_frac(const T& x) { return x - un(Op::Trunc, x); }
T u_isnan(const T& x) { return isnan(x); }
T u_isposinf(const T& x) {
  if (!tiny::is_float(x.dtype())) return T::full(x.shape(), tiny::Scalar::from_bool(false), tiny::DType::Bool);
  return eq(x, std::numeric_limits<double>::infinity());
}
T u_isneginf(const T& x) {
  if (!tiny::is_float(x.dtype())) return T::full(x.shape(), tiny::Scalar::from_bool(false), tiny::DType::Bool);
  return eq(x, -std::numeric_limits<double>::infinity());
}
T u_signbit(const T& x) {
  if (x.dtype() == tiny::DType::Bool || !tiny::is_signed(x.dtype()))
    return T::full(x.shape(), tiny::Scalar::from_bool(false), tiny::DType::Bool);
  if (!tiny::is_float(x.dtype())) return lt(x, 0.0);
  return lt(cnst(x, 1.0).binary(Op::Copysign, x), 0.0);  // sees the sign of -0.0 and NaN
}
T u_bitwise_not(const T& x) { return lnot(x); }
T u_logical_not(const T& x) { return lnot(x.cast(tiny::DType::Bool)); }
T u_sinc(const T& x) {
  T px = x * M_PI;
  return where(eq(x, 0.0), 1.0, un(Op::Sin, px) / px);
}
T u_angle(const T& x) {  // real input: pi for negatives, NaN stays
  return where(isnan(x), x, where(lt(x, 0.0), M_PI, cnst(x, 0.0)));
}

// -x log x, 0 at 0, -inf below 0
T u_entr(const T& x) {
  T r = where(gt(x, 0.0), -x * un(Op::Log, x), where(eq(x, 0.0), 0.0, cnst(x, -std::numeric_limits<double>::infinity())));
  return where(isnan(x), x, r);
}

// erfinv as ATen computes it (calc_erfinv): a rational first guess on the
// central range or the tails, then two Newton steps. ATen's CPU kernel agrees
// with a double evaluation for every float dtype, and in the tails with Newton
// steps on erfc (a residual erf(x) - y is swamped by erf's rounding there).
T erfinv_f64(const T& y);
T u_erfinv(const T& x) { return erfinv_f64(x.cast(tiny::DType::Float64)).cast(x.dtype()); }
T erfinv_f64(const T& y) {
  const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  const double d[2] = {3.543889200, 1.637067800};
  const double k = 2.0 / std::sqrt(M_PI);
  T ya = un(Op::Abs, y);
  // |y| <= 0.7
  T z = y * y;
  T num_c = ((z * a[3] + a[2]) * z + a[1]) * z + a[0];
  T dem_c = (((z * b[3] + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
  T x = y * num_c / dem_c;
  for (int i = 0; i < 2; i++) x = x - (un(Op::Erf, x) - y) / (cnst(x, k) * un(Op::Exp, -x * x));
  // tails, on |y|
  T q = 1.0 - ya;
  T w = un(Op::Sqrt, -un(Op::Log, q / 2.0));
  T num_t = ((w * c[3] + c[2]) * w + c[1]) * w + c[0];
  T dem_t = (w * d[1] + d[0]) * w + 1.0;
  T t = num_t / dem_t;
  for (int i = 0; i < 2; i++) t = t + (un(Op::Erfc, t) - q) / (cnst(t, k) * un(Op::Exp, -t * t));
  T r = where(le(ya, 0.7), x, t.binary(Op::Copysign, y));
  const double inf = std::numeric_limits<double>::infinity();
  r = where(eq(ya, 1.0), cnst(y, inf).binary(Op::Copysign, y), r);
  return where(gt(ya, 1.0), std::numeric_limits<double>::quiet_NaN(), r);
}

// ---------------------------------------------------------------- ops with arguments
Computed neg(const at::Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool,
                              "Negation, the `-` operator, on a bool tensor is not supported. "
                              "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  return unary<u_neg, Kind::Same>(self);
}

// round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for negative d (ATen's order).
Computed round_decimals(const at::Tensor& self, int64_t decimals) {
  check_dtype(self.scalar_type(), kNoBool | kNoInt, "round_cpu");
  if (decimals == 0) return unary<u_round, Kind::Same>(self);
  c10::ScalarType dt = self.scalar_type();
  T x = operand_op(self, dt, to_shape(self.sizes()));
  // ten_pow is computed in the tensor's scalar type, as ATen does
  double p = std::pow(10.0, double(decimals > 0 ? decimals : -decimals));
  T ten = cnst(x, p).cast(to_engine(dt)).cast(x.dtype());
  T r = decimals > 0 ? un(Op::Round, x * ten) / ten : un(Op::Round, x / ten) * ten;
  return {r.cast(to_engine(dt)), dt};
}

// log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given. ATen's
// kernel rounds each step to 16-bit floats, so this computes in the dtype itself.
Computed logit(const at::Tensor& self, std::optional<double> eps) {
  c10::ScalarType dt = float_type_for(self.scalar_type());
  T x = operand(self, dt, to_shape(self.sizes()));
  if (eps.has_value() && *eps >= 0) {
    T lo = cnst(x, *eps).cast(to_engine(dt)).cast(x.dtype());
    T hi = 1.0 - lo;  // in the compute type, as ATen does
    x = where(lt(x, lo), lo, where(gt(x, hi), hi, x));
  }
  T r = un(Op::Log, x / (1.0 - x));
  return {r.cast(to_engine(dt)), dt};
}

void nan_to_num_out_check(const at::Tensor& out, c10::ScalarType computed) {
  TORCH_CHECK(out.scalar_type() == computed, "nan_to_num: dtype of out: ", out.scalar_type(),
              " should be same as input: ", computed);
}
template <Name N>
void bool_out(const at::Tensor& out, c10::ScalarType) {
  TORCH_CHECK(out.scalar_type() == c10::kBool, N.s, " does not support non-boolean outputs.");
}

Computed nan_to_num(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                    std::optional<double> neginf) {
  c10::ScalarType dt = self.scalar_type();
  T x = operand(self, dt, to_shape(self.sizes()));
  if (!c10::isFloatingType(dt)) return {x, dt};
  double big = 0, lowest = 0;
  switch (dt) {
    case c10::kHalf: big = double(std::numeric_limits<c10::Half>::max()); break;
    case c10::kBFloat16: big = double(std::numeric_limits<c10::BFloat16>::max()); break;
    case c10::kFloat: big = double(std::numeric_limits<float>::max()); break;
    default: big = std::numeric_limits<double>::max(); break;
  }
  lowest = -big;
  const double inf = std::numeric_limits<double>::infinity();
  T r = where(isnan(x), cnst(x, nan.value_or(0.0)), x);
  r = where(eq(x, inf), cnst(x, posinf.value_or(big)), r);
  r = where(eq(x, -inf), cnst(x, neginf.value_or(lowest)), r);
  return {r, dt};
}

// frexp from the bit pattern, computed in the tensor's own dtype: subnormals are
// first scaled into the normal range, zeros, infinities and NaN keep exponent 0.
struct FloatBits {
  tiny::DType bits;
  int mant;      // mantissa bits
  int64_t emask; // exponent field mask (after shifting)
  int64_t half;  // exponent field of a value in [0.5, 1)
};
FloatBits float_bits(c10::ScalarType t) {
  switch (t) {
    case c10::kDouble: return {tiny::DType::Int64, 52, 0x7ff, 1022};
    case c10::kFloat: return {tiny::DType::Int32, 23, 0xff, 126};
    case c10::kHalf: return {tiny::DType::Int16, 10, 0x1f, 14};
    default: return {tiny::DType::Int16, 7, 0xff, 126};  // bfloat16
  }
}
T icnst(const T& like, int64_t v) { return T::full(like.shape(), tiny::Scalar::from_int(v), like.dtype()); }

std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa, at::Tensor& exponent) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ", self.dtype(),
              " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.dtype());
  TinyOp op("frexp");
  c10::ScalarType dt = self.scalar_type();
  FloatBits fb = float_bits(dt);
  T x = operand(self, dt, to_shape(self.sizes()));
  auto field = [&](const T& v) {
    T b = v.bitcast(fb.bits);
    return land(b.binary(Op::Shr, icnst(b, fb.mant)), icnst(b, fb.emask));
  };
  int scale = fb.mant + 2;  // 2^scale lifts every subnormal into the normal range, exactly
  T sub = eq(field(x), icnst(field(x), 0));
  T xs = where(sub, x * std::ldexp(1.0, scale), x);
  T bits = xs.bitcast(fb.bits);
  T e = field(xs);
  T clear = icnst(bits, ~(fb.emask << fb.mant));
  T m = lor(land(bits, clear), icnst(bits, fb.half << fb.mant)).bitcast(x.dtype());
  T ex = e - icnst(e, fb.half) - where(sub, icnst(e, scale), icnst(e, 0));
  T special = lor(eq(x, 0.0), eq(e, icnst(e, fb.emask)));  // zero, inf, nan
  T mant = where(special, x, m);
  T expo = where(special, icnst(e, 0), ex).cast(tiny::DType::Int32);
  assign_out(mantissa, mant, dt, {self});
  assign_out(exponent, expo, c10::kInt, {self});
  return {mantissa, exponent};
}

// sgn's derivative asks for an "efficient" zero tensor; tiny's zeros are a
// lazy constant already, so this is a plain zeros tensor.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  check_device(device);
  TinyOp op("zeros");
  c10::ScalarType dt = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  return make_result(T::full(to_shape(size), tiny::Scalar::from_int(0), to_engine(dt)), dt);
}

// sgn: sign for real tensors, z / |z| for complex ones (ops_complex)
using Sgn = Kernels<"sgn", unary<u_sign, Kind::Same>, exact_out>;
at::Tensor sgn_fn(const at::Tensor& self) {
  if (!self.is_complex()) return Sgn::fn(self);
  at::Tensor out = at::empty({0}, self.options());
  return complex_sgn_out(self, out);
}
at::Tensor& sgn_inplace(at::Tensor& self) { return self.is_complex() ? complex_sgn_out(self, self) : Sgn::inplace(self); }
at::Tensor& sgn_out(const at::Tensor& self, at::Tensor& out) {
  return self.is_complex() ? complex_sgn_out(self, out) : Sgn::out(self, out);
}

}  // namespace

#define TINY_UNARY(name, ...) TINY_PW3(name, unary<__VA_ARGS__>)
// dtype-preserving ops want out= of exactly the input's dtype
#define TINY_UNARY_SAME(name, ...) TINY_PW3(name, unary<__VA_ARGS__>, exact_out)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TINY_PW3("neg", neg, exact_out);
  TINY_UNARY_SAME("abs", u_abs, Kind::Same, kNoBool, "abs_cpu");
  TINY_UNARY_SAME("sign", u_sign, Kind::Same);
  m.impl("sgn", sgn_fn);
  m.impl("sgn_", sgn_inplace);
  m.impl("sgn.out", sgn_out);
  TINY_UNARY("exp", u_exp);
  TINY_UNARY("exp2", u_exp2);
  TINY_UNARY("expm1", u_expm1);
  TINY_UNARY("log", u_log);
  TINY_UNARY("log2", u_log2);
  TINY_UNARY("log10", u_log10);
  TINY_UNARY("log1p", u_log1p);
  TINY_UNARY("sqrt", u_sqrt);
  TINY_UNARY("rsqrt", u_rsqrt);
  TINY_UNARY("reciprocal", u_reciprocal);
  TINY_UNARY("sin", u_sin);
  TINY_UNARY("cos", u_cos);
  TINY_UNARY("tan", u_tan);
  TINY_UNARY("asin", u_asin);
  TINY_UNARY("acos", u_acos);
  TINY_UNARY("atan", u_atan);
  TINY_UNARY("sinh", u_sinh);
  TINY_UNARY("cosh", u_cosh);
  TINY_UNARY("tanh", u_tanh);
  TINY_UNARY("asinh", u_asinh);
  TINY_UNARY("acosh", u_acosh);
  TINY_UNARY("atanh", u_atanh);
  TINY_UNARY("sigmoid", u_sigmoid);
  TINY_UNARY("erf", u_erf);
  TINY_UNARY("erfc", u_erfc);
  TINY_UNARY("erfinv", u_erfinv);
  TINY_UNARY("sinc", u_sinc);
  TINY_UNARY_SAME("floor", u_floor, Kind::Same, kNoBool, "floor_vml_cpu");
  TINY_UNARY_SAME("ceil", u_ceil, Kind::Same, kNoBool, "ceil_vml_cpu");
  TINY_UNARY_SAME("trunc", u_trunc, Kind::Same, kNoBool, "trunc_vml_cpu");
  TINY_UNARY_SAME("round", u_round, Kind::Same, kNoBool, "round_vml_cpu");
  TINY_UNARY_SAME("frac", u_frac, Kind::Same, kFloatOnly, "frac_cpu");
  TINY_UNARY_SAME("bitwise_not", u_bitwise_not, Kind::Same, kIntOnly, "bitwise_not_cpu");
  m.impl("round.decimals", Kernels<"round", round_decimals>::fn);
  m.impl("round_.decimals", Kernels<"round", round_decimals>::inplace);
  m.impl("round.decimals_out", Kernels<"round", round_decimals, exact_out>::out);
  TINY_PW3("logit", logit);
  m.impl("nan_to_num", Kernels<"nan_to_num", nan_to_num>::fn);
  m.impl("nan_to_num_", Kernels<"nan_to_num", nan_to_num>::inplace);
  m.impl("nan_to_num.out", Kernels<"nan_to_num", nan_to_num, nan_to_num_out_check>::out);
  m.impl("angle", Kernels<"angle", unary<u_angle>>::fn);
  m.impl("angle.out", Kernels<"angle", unary<u_angle>>::out);

  m.impl("special_entr", Kernels<"entr", unary<u_entr>>::fn);
  m.impl("special_entr.out", Kernels<"entr", unary<u_entr>>::out);
  m.impl("frexp.Tensor_out", frexp_out);
  m.impl("_efficientzerotensor", efficient_zero_tensor);

  m.impl("isnan", Kernels<"isnan", unary<u_isnan, Kind::Bool>>::fn);
  m.impl("isposinf", Kernels<"isposinf", unary<u_isposinf, Kind::Bool>>::fn);
  m.impl("isposinf.out", Kernels<"isposinf", unary<u_isposinf, Kind::Bool>, bool_out<"isposinf">>::out);
  m.impl("isneginf", Kernels<"isneginf", unary<u_isneginf, Kind::Bool>>::fn);
  m.impl("isneginf.out", Kernels<"isneginf", unary<u_isneginf, Kind::Bool>, bool_out<"isneginf">>::out);
  m.impl("signbit", Kernels<"signbit", unary<u_signbit, Kind::Bool>>::fn);
  m.impl("signbit.out", Kernels<"signbit", unary<u_signbit, Kind::Bool>, bool_out<"signbit">>::out);
  TINY_PW3("logical_not", unary<u_logical_not, Kind::Bool>);
}

}  // namespace torch_tiny
