// Activations and the backward ops autograd calls for them. Formulas follow
// ATen's CPU kernels (same operation order, computed in opmath and rounded
// once), so results match to the last bit or two.
#include <ATen/ScalarOps.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "torch/generator.h"
#include "torch/pointwise.h"

namespace torch_tiny {
using namespace pw;

namespace {

// x (and the op's scalars) in opmath of the tensor's float dtype.
struct Act {
  c10::ScalarType dt;
  T x;
  Computed done(const T& r) const { return {r.cast(to_engine(dt)), dt}; }
  // a scalar in the compute type (ATen's kernels convert to float for 16-bit floats)
  T c(const c10::Scalar& s) const { return cnst(x, s); }
  T c(double v) const { return cnst(x, v); }
  // a scalar converted to the tensor's dtype first (ATen's `scalar.to<scalar_t>()`)
  T c_dt(const c10::Scalar& s) const { return cnst(x, s).cast(to_engine(dt)).cast(x.dtype()); }
};
Act act(const at::Tensor& self, const char* kernel) {
  check_dtype(self.scalar_type(), kFloatOnly, kernel);
  c10::ScalarType dt = self.scalar_type();
  return {dt, operand_op(self, dt, to_shape(self.sizes()))};
}

// (grad, x) broadcast and promoted together, as the structured backward kernels do.
struct Bwd {
  c10::ScalarType dt;
  T g, x;
  Computed done(const T& r) const { return {r.cast(to_engine(dt)), dt}; }
  T c(const c10::Scalar& s) const { return cnst(x, s); }
  T c(double v) const { return cnst(x, v); }
  T c_dt(const c10::Scalar& s) const { return cnst(x, s).cast(to_engine(dt)).cast(x.dtype()); }
};
Bwd bwd(const at::Tensor& grad, const at::Tensor& self, const char* kernel) {
  c10::ScalarType dt = at::result_type(grad, self);
  check_dtype(dt, kFloatOnly, kernel);
  tiny::Shape shape = broadcast_shape({grad, self});
  return {dt, operand_op(grad, dt, shape), operand_op(self, dt, shape)};
}

// ---------------------------------------------------------------- relu / threshold / hardtanh
// x < 0 ? 0 : x, which keeps NaN and -0.0 as clamp_min(x, 0) does; built directly rather than
// through clamp_compute, whose bound is a CPU tensor and a type promotion (half of relu's time
// building the graph)
Computed relu(const at::Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool, "Boolean inputs not supported for relu");
  c10::ScalarType dt = self.scalar_type();
  T x = operand(self, dt, to_shape(self.sizes()));
  T zero = cnst(x, 0.0);
  return {where(lt(x, zero), zero, x), dt};
}

// x <= threshold ? value : x
Computed threshold(const at::Tensor& self, const c10::Scalar& th, const c10::Scalar& value) {
  check_dtype(self.scalar_type(), kNoBool, "threshold_cpu");
  check_convertible(th, self.scalar_type());
  check_convertible(value, self.scalar_type());
  c10::ScalarType dt = self.scalar_type();
  T x = operand(self, dt, to_shape(self.sizes()));
  return {where(le(x, cnst(x, th)), cnst(x, value), x), dt};
}
// self <= threshold ? 0 : grad
Computed threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& th) {
  c10::ScalarType dt = at::result_type(grad, self);
  check_dtype(dt, kNoBool, "threshold_cpu");
  tiny::Shape shape = broadcast_shape({grad, self});
  T g = operand(grad, dt, shape), x = operand(self, dt, shape);
  return {where(le(x, cnst(x, th)), 0.0, g), dt};
}

// clamp without type promotion; integer tensors truncate the bounds
Computed hardtanh(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool, "Bool inputs not supported for hardtanh");
  c10::Scalar l = lo, h = hi;
  if (c10::isIntegralType(self.scalar_type(), false)) {
    l = lo.toLong();
    h = hi.toLong();
    TORCH_CHECK(self.scalar_type() != c10::kByte || (l.toLong() >= 0 && h.toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
  }
  Computed r = clamp_compute(self, at::native::wrapped_scalar_tensor(l), at::native::wrapped_scalar_tensor(h), nullptr);
  return {r.value.cast(to_engine(self.scalar_type())), self.scalar_type()};
}
Computed hardtanh_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lo,
                           const c10::Scalar& hi) {
  Bwd b = bwd(grad, self, "hardtanh_backward_cpu");
  return b.done(where(land(gt(b.x, b.c(lo)), lt(b.x, b.c(hi))), b.g, 0.0));  // NaN: 0
}

// ---------------------------------------------------------------- sigmoid / tanh / logit backward
Computed sigmoid_backward(const at::Tensor& grad, const at::Tensor& y) {
  Bwd b = bwd(grad, y, "sigmoid_backward_cpu");
  return b.done(b.g * (1.0 - b.x) * b.x);
}
Computed tanh_backward(const at::Tensor& grad, const at::Tensor& y) {
  Bwd b = bwd(grad, y, "tanh_backward_cpu");
  return b.done(b.g * (1.0 - b.x * b.x));
}
Computed logit_backward(const at::Tensor& grad, const at::Tensor& self, std::optional<double> eps) {
  Bwd b = bwd(grad, self, "logit_backward_cpu");
  T d = b.g / (b.x * (1.0 - b.x));
  if (!eps.has_value() || *eps < 0) {
    const double inf = std::numeric_limits<double>::infinity();
    T edge = lor(eq(b.x, 0.0), eq(b.x, 1.0));
    T r = where(edge, b.g * inf, d);
    return b.done(where(lor(lt(b.x, 0.0), gt(b.x, 1.0)), std::numeric_limits<double>::quiet_NaN(), r));
  }
  T lo = b.c_dt(*eps);
  T hi = 1.0 - lo;
  return b.done(where(land(ge(b.x, lo), le(b.x, hi)), d, 0.0));  // NaN: 0, as ATen's vectorized loop
}

// ---------------------------------------------------------------- gelu
enum class Approx { None, Tanh };
Approx gelu_type(c10::string_view a) {
  if (a == "none") return Approx::None;
  TORCH_CHECK(a == "tanh", "approximate argument must be either none or tanh.");
  return Approx::Tanh;
}
const double kGeluBeta = M_SQRT2 * M_2_SQRTPI * 0.5;  // sqrt(2 / pi)
const double kGeluKappa = 0.044715;

Computed gelu(const at::Tensor& self, c10::string_view approximate) {
  Approx ap = gelu_type(approximate);
  Act a = act(self, "GeluKernelImpl");
  const T& x = a.x;
  if (ap == Approx::Tanh) {
    T inner = a.c(kGeluBeta) * (x + a.c(kGeluKappa) * (x * x * x));
    return a.done(0.5 * x * (1.0 + un(Op::Tanh, inner)));
  }
  // gelu(+inf) = +inf, the limit (ATen's scalar and float64 kernels agree; its vectorized
  // float erf gives NaN on some CPUs and not on others, see tests/test_activations.py)
  return a.done(x * 0.5 * (1.0 + un(Op::Erf, x * M_SQRT1_2)));
}
Computed gelu_backward(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate) {
  Approx ap = gelu_type(approximate);
  Bwd b = bwd(grad, self, "GeluBackwardKernelImpl");
  const T& x = b.x;
  if (ap == Approx::Tanh) {
    T x_sq = x * x;
    T inner = b.c(kGeluBeta) * (x + b.c(kGeluKappa) * (x_sq * x));
    T t = un(Op::Tanh, inner);
    T left = 0.5 * x;
    T right = 1.0 + t;
    T left_d = 0.5 * right;
    T tanh_d = 1.0 - t * t;
    T inner_d = b.c(kGeluBeta) * (1.0 + b.c(3.0) * b.c(kGeluKappa) * x_sq);
    return b.done(b.g * (left_d + left * tanh_d * inner_d));
  }
  T cdf = 0.5 * (1.0 + un(Op::Erf, x * M_SQRT1_2));
  T pdf = b.c(M_2_SQRTPI * M_SQRT1_2 * 0.5) * un(Op::Exp, x * x * -0.5);
  return b.done(b.g * (cdf + x * pdf));
}

// ---------------------------------------------------------------- silu / mish
Computed silu(const at::Tensor& self) {
  Act a = act(self, "silu_cpu");
  return a.done(a.x / (1.0 + un(Op::Exp, -a.x)));
}
Computed silu_backward(const at::Tensor& grad, const at::Tensor& self) {
  Bwd b = bwd(grad, self, "silu_backward_cpu");
  T s = sigmoid(b.x);
  return b.done(b.g * s * (1.0 + b.x * (1.0 - s)));
}
T tanh_softplus(const T& x) { return un(Op::Tanh, un(Op::Log1p, un(Op::Exp, x))); }
Computed mish(const at::Tensor& self) {
  Act a = act(self, "mish_cpu");
  return a.done(a.x * tanh_softplus(a.x));
}
Computed mish_backward(const at::Tensor& grad, const at::Tensor& self) {
  Bwd b = bwd(grad, self, "mish_backward_cpu");
  T s = sigmoid(b.x);
  T ts = tanh_softplus(b.x);
  return b.done(b.g * (ts + b.x * s * (1.0 - ts * ts)));
}

// ---------------------------------------------------------------- softplus
Computed softplus(const at::Tensor& self, const c10::Scalar& beta, const c10::Scalar& threshold) {
  Act a = act(self, "softplus_cpu");
  T xb = a.x * a.c(beta);
  return a.done(where(gt(xb, a.c(threshold)), a.x, un(Op::Log1p, un(Op::Exp, xb)) / a.c(beta)));
}
Computed softplus_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& beta,
                           const c10::Scalar& threshold) {
  Bwd b = bwd(grad, self, "softplus_backward_cpu");
  T xb = b.x * b.c(beta);
  T z = un(Op::Exp, xb);
  return b.done(where(gt(xb, b.c(threshold)), b.g, b.g * z / (z + 1.0)));
}

// ---------------------------------------------------------------- elu
// x <= 0 ? (exp(x * input_scale) - 1) * alpha * scale : x * scale
Computed elu(const at::Tensor& self, const c10::Scalar& alpha, const c10::Scalar& scale,
             const c10::Scalar& input_scale) {
  Act a = act(self, "elu_cpu");
  T negcoef = a.c(alpha) * a.c(scale);
  T neg = (un(Op::Exp, a.x * a.c(input_scale)) - 1.0) * negcoef;
  return a.done(where(le(a.x, 0.0), neg, a.x * a.c(scale)));
}
Computed elu_backward(const at::Tensor& grad, const c10::Scalar& alpha, const c10::Scalar& scale,
                      const c10::Scalar& input_scale, bool is_result, const at::Tensor& self_or_result) {
  TORCH_CHECK(!is_result || alpha.to<double>() >= 0.0,
              "In-place elu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, "
              "please call out-of-place version instead.");
  Bwd b = bwd(grad, self_or_result, "elu_backward_cpu");
  T negcoef = b.c(alpha) * b.c(scale);
  T negiptcoef = b.c(input_scale);
  T neg = is_result ? b.g * negiptcoef * (b.x + negcoef)
                    : b.g * negiptcoef * negcoef * un(Op::Exp, b.x * negiptcoef);
  return b.done(where(gt(b.x, 0.0), b.g * b.c(scale), neg));  // NaN takes the negative branch
}

// ---------------------------------------------------------------- leaky_relu
Computed leaky_relu_fwd(const at::Tensor& self, const c10::Scalar& negval) {
  Act a = act(self, "leaky_relu_cpu");
  return a.done(where(gt(a.x, 0.0), a.x, a.x * a.c(negval)));
}
Computed leaky_relu_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& negval,
                             bool self_is_result) {
  TORCH_CHECK(!self_is_result || negval.to<double>() >= 0.0,
              "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, "
              "please call out-of-place version instead. File an issue at https://github.com/pytorch/pytorch if "
              "you do require supporting in-place leakRelu backward calculation with negative slope");
  Bwd b = bwd(grad, self, "leaky_relu_backward_cpu");
  return b.done(where(gt(b.x, 0.0), b.g, b.g * b.c(negval)));
}

// ---------------------------------------------------------------- rrelu
// Evaluation: leaky_relu with the mean slope. Training: each non-positive
// element gets a slope drawn uniformly from [lower, upper] (tiny's Philox
// stream, so not the CPU's numbers), recorded in `noise` (1 elsewhere).
Computed rrelu_compute(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower, const c10::Scalar& upper,
                       bool training, const std::optional<at::Generator>& gen) {
  TORCH_CHECK(self.sizes() == noise.sizes(), "noise tensor shape must match self tensor shape. Got self.shape = ",
              self.sizes(), " noise.shape = ", noise.sizes());
  if (!training) return leaky_relu_fwd(self, c10::Scalar((lower.toDouble() + upper.toDouble()) / 2));
  Act a = act(self, "rrelu_with_noise_out_cpu");
  tiny::Shape shape = a.x.shape();
  auto [seed, offset] = get_generator(gen)->take(uint64_t(std::max<int64_t>(1, self.numel())));
  T u = T::rand(shape, seed, offset).cast(a.x.dtype());
  T r = (a.c(lower) + (a.c(upper) - a.c(lower)) * u).cast(to_engine(a.dt)).cast(a.x.dtype());
  T neg = le(a.x, 0.0);
  assign_inplace(noise, where(neg, r, 1.0).cast(to_engine(noise.scalar_type())), noise.scalar_type(), {});
  return a.done(where(neg, a.x * r, a.x));
}
at::Tensor rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                            const c10::Scalar& upper, bool training, std::optional<at::Generator> gen) {
  TinyOp op("rrelu");
  auto r = rrelu_compute(self, noise, lower, upper, training, gen);
  return make_result(r.value, r.dtype);
}
at::Tensor& rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower, const c10::Scalar& upper,
                              bool training, std::optional<at::Generator> gen) {
  TinyOp op("rrelu");
  auto r = rrelu_compute(self, noise, lower, upper, training, gen);
  return assign_inplace(self, r.value, r.dtype, {noise});
}
at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                 const c10::Scalar& upper, bool training, std::optional<at::Generator> gen,
                                 at::Tensor& out) {
  TinyOp op("rrelu");
  auto r = rrelu_compute(self, noise, lower, upper, training, gen);
  return assign_out(out, r.value, r.dtype, {self, noise});
}

// ---------------------------------------------------------------- hardsigmoid / hardswish
T relu6_of_shifted(const T& x) { return min(max(x + 3.0, cnst(x, 0.0)), cnst(x, 6.0)); }
Computed hardsigmoid(const at::Tensor& self) {
  Act a = act(self, "hardsigmoid_cpu");
  return a.done(relu6_of_shifted(a.x) / 6.0);
}
Computed hardsigmoid_backward(const at::Tensor& grad, const at::Tensor& self) {
  Bwd b = bwd(grad, self, "hardsigmoid_backward");
  T inside = land(gt(b.x, -3.0), lt(b.x, 3.0));
  return b.done(where(inside, b.g * b.c(double(1.0f / 6.0f)), 0.0));
}
Computed hardswish(const at::Tensor& self) {
  Act a = act(self, "hardswish_cpu");
  return a.done(a.x * relu6_of_shifted(a.x) / 6.0);
}
Computed hardswish_backward(const at::Tensor& grad, const at::Tensor& self) {
  Bwd b = bwd(grad, self, "hardswish_backward_cpu");
  T mid = b.g * (b.x / 3.0 + 0.5);
  return b.done(where(le(b.x, -3.0), 0.0, where(ge(b.x, 3.0), b.g, mid)));
}

// ---------------------------------------------------------------- log_sigmoid
// output = min(x, 0) - log1p(exp(-|x|)); buffer = exp(-|x|)
std::tuple<T, T, c10::ScalarType> log_sigmoid_values(const at::Tensor& self) {
  Act a = act(self, "log_sigmoid_cpu");
  T buffer = un(Op::Exp, -un(Op::Abs, a.x));
  T out = min(a.x, a.c(0.0)) - un(Op::Log1p, buffer);
  return {out.cast(to_engine(a.dt)), buffer.cast(to_engine(a.dt)), a.dt};
}
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  TinyOp op("log_sigmoid_forward");
  auto [out, buffer, dt] = log_sigmoid_values(self);
  return {make_result(out, dt), make_result(buffer, dt)};
}
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                             at::Tensor& buffer) {
  TinyOp op("log_sigmoid_forward");
  auto [out, buf, dt] = log_sigmoid_values(self);
  TORCH_CHECK(output.scalar_type() == dt, "expected scalar type ", dt, " but found ", output.scalar_type());
  assign_out(output, out, dt, {self});
  assign_out(buffer, buf, dt, {self});
  return {output, buffer};
}
// (max_deriv - sign * buffer / (1 + buffer)) * grad; the buffer is recomputed
// when the caller has none (as other backends leave it empty)
Computed log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer) {
  Bwd b = bwd(grad, self, "log_sigmoid_backward_cpu");
  T buf = buffer.defined() && buffer.sizes() == self.sizes() ? operand_op(buffer, b.dt, b.x.shape())
                                                            : un(Op::Exp, -un(Op::Abs, b.x));
  T neg = lt(b.x, 0.0);
  T max_deriv = where(neg, 1.0, b.c(0.0));
  T sign = where(neg, 1.0, b.c(-1.0));
  return b.done((max_deriv - sign * (buf / (1.0 + buf))) * b.g);
}

// ---------------------------------------------------------------- shrink
void check_lambda(const at::Tensor& self, const c10::Scalar& lambd) {
  double mx = self.scalar_type() == c10::kDouble ? std::numeric_limits<double>::max()
              : self.scalar_type() == c10::kHalf ? 65504.0
              : double(std::numeric_limits<float>::max());
  double l = lambd.to<double>();
  TORCH_CHECK(l >= 0 && l <= mx, "lambda must be in range [0, ", mx, "] for input dtype ", self.scalar_type(),
              ", but found ", lambd);
}
Computed hardshrink(const at::Tensor& self, const c10::Scalar& lambd) {
  Act a = act(self, "hardshrink_cpu");
  T l = a.c_dt(lambd);
  return a.done(where(land(ge(a.x, -l), le(a.x, l)), 0.0, a.x));
}
Computed softshrink(const at::Tensor& self, const c10::Scalar& lambd) {
  check_dtype(self.scalar_type(), kFloatOnly, "softshrink_check");
  check_lambda(self, lambd);
  Act a = act(self, "softshrink_cpu");
  T l = a.c_dt(lambd);
  T r = where(gt(a.x, l), a.x - l, where(lt(a.x, -l), a.x + l, a.c(0.0)));
  return a.done(where(isnan(a.x), a.x, r));
}
// grad outside [-lambda, lambda]; NaN inputs give 0 (ATen's vectorized mask)
Computed shrink_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lambd) {
  Bwd b = bwd(grad, self, "shrink_backward_cpu");
  T l = b.c_dt(lambd);
  return b.done(where(lor(lt(b.x, -l), gt(b.x, l)), b.g, 0.0));
}

// ---------------------------------------------------------------- glu
// a * sigmoid(b) for the two halves of `dim`
struct Halves {
  at::Tensor a, b;
  int64_t dim, n;
};
Halves glu_halves(const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  int64_t n = self.size(d);
  TORCH_CHECK(n % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", n);
  return {self.narrow(d, 0, n / 2), self.narrow(d, n / 2, n / 2), d, n / 2};
}
Computed glu(const at::Tensor& self, int64_t dim) {
  check_dtype(self.scalar_type(), kFloatOnly, "glu_cpu");
  c10::ScalarType dt = self.scalar_type();
  Halves h = glu_halves(self, dim);
  tiny::Shape shape = to_shape(h.a.sizes());
  T a = operand_op(h.a, dt, shape), b = operand_op(h.b, dt, shape);
  return {(a * sigmoid(b)).cast(to_engine(dt)), dt};
}
// first half: sigmoid(b) * g; second half: (1 - sigmoid(b)) * sigmoid(b) * a * g
Computed glu_backward(const at::Tensor& grad, const at::Tensor& self, int64_t dim) {
  c10::ScalarType dt = self.scalar_type();
  check_dtype(dt, kFloatOnly, "glu_backward_cpu");
  Halves h = glu_halves(self, dim);
  tiny::Shape shape = to_shape(h.a.sizes());
  T a = operand_op(h.a, dt, shape), b = operand_op(h.b, dt, shape), g = operand_op(grad, dt, shape);
  // ATen stores sigmoid(b) in the gradient's dtype first and multiplies it by grad there
  T sig = sigmoid(b).cast(to_engine(dt));
  T first = sig * operand(grad, dt, shape);
  T sig_op = sig.cast(a.dtype());
  T second = ((1.0 - sig_op) * sig_op * a * g).cast(to_engine(dt));
  tiny::Ranges lo(shape.size(), {0, 0}), hi(shape.size(), {0, 0});
  lo[size_t(h.dim)] = {0, h.n};
  hi[size_t(h.dim)] = {h.n, 0};
  return {first.pad(lo) + second.pad(hi), dt};  // the two halves side by side
}

// ---------------------------------------------------------------- prelu
Computed prelu(const at::Tensor& self, const at::Tensor& weight) {
  c10::ScalarType dt = at::result_type(self, weight);
  check_dtype(dt, kFloatOnly, "prelu_cpu");
  tiny::Shape shape = broadcast_shape({self, weight});
  T x = operand_op(self, dt, shape), w = operand_op(weight, dt, shape);
  return {where(gt(x, 0.0), x, w * x).cast(to_engine(dt)), dt};
}
std::tuple<at::Tensor, at::Tensor> prelu_backward(const at::Tensor& grad, const at::Tensor& self,
                                                  const at::Tensor& weight) {
  TinyOp op("prelu_backward");
  c10::ScalarType dt = at::result_type(self, weight);
  check_dtype(dt, kFloatOnly, "prelu_backward_cpu");
  tiny::Shape shape = broadcast_shape({grad, self, weight});
  T g = operand_op(grad, dt, shape), x = operand_op(self, dt, shape), w = operand_op(weight, dt, shape);
  T pos = gt(x, 0.0);
  T gi = where(pos, g, w * g).cast(to_engine(dt));
  T gw = where(pos, 0.0, x * g).cast(to_engine(dt));
  return {make_result(gi, dt), make_result(gw, dt)};
}

}  // namespace

// functional and the backward op's .grad_input out= variant
#define TINY_BACKWARD(name, F)                        \
  m.impl(name, Kernels<name, F>::fn);                 \
  m.impl(name ".grad_input", Kernels<name, F>::out)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("relu", Kernels<"relu", relu>::fn);
  m.impl("relu_", Kernels<"relu", relu>::inplace);
  TINY_PW3("threshold", threshold);
  TINY_BACKWARD("threshold_backward", threshold_backward);
  TINY_PW3("hardtanh", hardtanh, exact_out);
  TINY_BACKWARD("hardtanh_backward", hardtanh_backward);
  TINY_BACKWARD("sigmoid_backward", sigmoid_backward);
  TINY_BACKWARD("tanh_backward", tanh_backward);
  TINY_BACKWARD("logit_backward", logit_backward);
  TINY_PW3("gelu", gelu, exact_out);
  TINY_BACKWARD("gelu_backward", gelu_backward);
  TINY_PW3("silu", silu, exact_out);
  TINY_BACKWARD("silu_backward", silu_backward);
  TINY_PW3("mish", mish, exact_out);
  m.impl("mish_backward", Kernels<"mish_backward", mish_backward>::fn);
  m.impl("softplus", Kernels<"softplus", softplus>::fn);
  m.impl("softplus.out", Kernels<"softplus", softplus, exact_out>::out);
  TINY_BACKWARD("softplus_backward", softplus_backward);
  TINY_PW3("elu", elu, exact_out);
  m.impl("elu_backward", Kernels<"elu_backward", elu_backward>::fn);
  m.impl("elu_backward.grad_input", Kernels<"elu_backward", elu_backward>::out);
  TINY_PW3("leaky_relu", leaky_relu_fwd, exact_out);
  TINY_BACKWARD("leaky_relu_backward", leaky_relu_backward);
  TINY_PW3("hardsigmoid", hardsigmoid, exact_out);
  TINY_BACKWARD("hardsigmoid_backward", hardsigmoid_backward);
  TINY_PW3("hardswish", hardswish, exact_out);
  m.impl("hardswish_backward", Kernels<"hardswish_backward", hardswish_backward>::fn);
  m.impl("log_sigmoid_forward", log_sigmoid_forward);
  m.impl("log_sigmoid_forward.output", log_sigmoid_forward_out);
  TINY_BACKWARD("log_sigmoid_backward", log_sigmoid_backward);
  m.impl("hardshrink", Kernels<"hardshrink", hardshrink>::fn);
  m.impl("hardshrink.out", Kernels<"hardshrink", hardshrink, exact_out>::out);
  m.impl("softshrink", Kernels<"softshrink", softshrink>::fn);
  m.impl("softshrink.out", Kernels<"softshrink", softshrink, exact_out>::out);
  TINY_BACKWARD("hardshrink_backward", shrink_backward);
  TINY_BACKWARD("softshrink_backward", shrink_backward);
  m.impl("glu", Kernels<"glu", glu>::fn);
  m.impl("glu.out", Kernels<"glu", glu>::out);
  TINY_BACKWARD("glu_backward", glu_backward);
  m.impl("rrelu_with_noise", rrelu_with_noise);
  m.impl("rrelu_with_noise_", rrelu_with_noise_);
  m.impl("rrelu_with_noise.out", rrelu_with_noise_out);
  m.impl("_prelu_kernel", Kernels<"prelu", prelu>::fn);
  m.impl("_prelu_kernel_backward", prelu_backward);
}

}  // namespace torch_tiny
