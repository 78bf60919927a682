// torch.optim.Adam / AdamW with fused=True: _fused_adam_ and _fused_adamw_.
// One lazy engine value per updated tensor, with ATen's CPU kernel's formula
// and rounding order. Unlike the CPU kernel, the step count is not read on the
// host: the bias corrections are computed in the kernel (in double, as ATen
// does), so a step syncs nothing; `found_inf` selects the old values instead
// of returning early, for the same reason.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <functional>
#include <optional>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;
using TL = at::TensorList;

enum class Mode { Adam, AdamW };

struct Hyper {
  double beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize;
};

// `t` read as `dt` and broadcast to `shape` (a 0-d tensor on tiny or the CPU).
T scalar_tensor_as(const at::Tensor& t, c10::ScalarType dt, const tiny::Shape& shape) {
  TORCH_CHECK(t.numel() == 1, "_fused_adam: expected a one-element tensor, got ", t.sizes());
  return operand(t.reshape({}), dt, shape);
}

T param_as(double v, c10::ScalarType dt, const tiny::Shape& shape) { return scalar_operand(v, dt, shape); }

// The learning rate as `dt`, broadcast to a shape (a float or a tensor).
using LrFn = std::function<T(c10::ScalarType, const tiny::Shape&)>;

void step_one(Mode mode, at::Tensor param, at::Tensor grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
              const at::Tensor* max_exp_avg_sq, const at::Tensor& state_step, const LrFn& lr, const Hyper& h,
              const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  c10::ScalarType dt = param.scalar_type();
  TORCH_CHECK(c10::isFloatingType(dt), "_fused_adam: expected floating-point parameters, got ", dt);
  for (const at::Tensor* t : {&grad, &exp_avg, &exp_avg_sq})
    TORCH_CHECK(t->sizes() == param.sizes() && t->scalar_type() == dt,
                "_fused_adam: every state tensor must have its parameter's shape and dtype");
  // ATen computes in the parameter's type, in float for 16-bit floats.
  c10::ScalarType op = dt == c10::kHalf || dt == c10::kBFloat16 ? c10::kFloat : dt;
  tiny::Shape shape = to_shape(param.sizes());
  auto c = [&](double v) { return param_as(v, op, shape); };
  T p = operand(param, op, shape), g = operand(grad, op, shape);
  T m = operand(exp_avg, op, shape), v = operand(exp_avg_sq, op, shape);
  T p0 = p, g0 = g, m0 = m, v0 = v;
  T lr_d = lr(c10::kDouble, shape);
  if (grad_scale) {
    g = g.binary(Op::Div, scalar_tensor_as(*grad_scale, op, shape));
    g0 = g;  // the unscaled gradient is stored back
  }
  if (h.maximize) g = g.unary(Op::Neg);
  if (h.weight_decay != 0) {
    if (mode == Mode::Adam)
      g = g.binary(Op::Add, p.binary(Op::Mul, c(h.weight_decay)));
    else  // decoupled: param * (1 - lr * weight_decay), the factor in double
      p = p.binary(Op::Mul, T::full(shape, tiny::Scalar::from_double(1), tiny::DType::Float64)
                                .binary(Op::Sub, lr_d.binary(Op::Mul, param_as(h.weight_decay, c10::kDouble, shape)))
                                .cast(to_engine(op)));
  }
  m = m.binary(Op::Mul, c(h.beta1)).binary(Op::Add, g.binary(Op::Mul, c(1 - h.beta1)));
  v = v.binary(Op::Mul, c(h.beta2)).binary(Op::Add, g.binary(Op::Mul, g).binary(Op::Mul, c(1 - h.beta2)));
  // Bias corrections from the (lazy) step count, in double.
  T step = scalar_tensor_as(state_step, c10::kDouble, shape);
  auto one_minus_pow = [&](double beta) {
    return T::full(shape, tiny::Scalar::from_double(1), tiny::DType::Float64)
        .binary(Op::Sub, param_as(beta, c10::kDouble, shape).binary(Op::Pow, step));
  };
  T step_size = lr_d.binary(Op::Div, one_minus_pow(h.beta1)).cast(to_engine(op));
  T bc2_sqrt = one_minus_pow(h.beta2).unary(Op::Sqrt).cast(to_engine(op));
  T second = v;
  T max_v;
  if (h.amsgrad) {
    max_v = operand(*max_exp_avg_sq, op, shape).binary(Op::Max, v);
    second = max_v;
  }
  T denom = second.unary(Op::Sqrt).binary(Op::Div, bc2_sqrt).binary(Op::Add, c(h.eps));
  p = p.binary(Op::Sub, step_size.binary(Op::Mul, m).binary(Op::Div, denom));

  // found_inf == 1: the CPU kernel returns before touching anything.
  auto keep = [&](const T& updated, const T& old) {
    if (!found_inf) return updated;
    T skip = scalar_tensor_as(*found_inf, c10::kFloat, shape)
                 .binary(Op::CmpEq, T::full(shape, tiny::Scalar::from_double(1), tiny::DType::Float32));
    return T::where(skip, old, updated);
  };
  if (h.amsgrad) write(*max_exp_avg_sq, keep(max_v, operand(*max_exp_avg_sq, op, shape)).cast(to_engine(dt)));
  write(exp_avg, keep(m, m0).cast(to_engine(dt)));
  write(exp_avg_sq, keep(v, v0).cast(to_engine(dt)));
  if (grad_scale) write(grad, keep(g0, operand(grad, op, shape)).cast(to_engine(dt)));
  write(param, keep(p, p0).cast(to_engine(dt)));
}

void fused(Mode mode, TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps,
           const LrFn& lr, const Hyper& h,
           const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  TinyOp op(mode == Mode::Adam ? "fused_adam_" : "fused_adamw_");
  size_t n = self.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && state_steps.size() == n,
              "_fused_adam: all tensor lists must have the same length");
  TORCH_CHECK(!h.amsgrad || max_exp_avg_sqs.size() == n, "_fused_adam: amsgrad needs one max_exp_avg_sq per parameter");
  for (size_t i = 0; i < n; i++)
    step_one(mode, self[i], grads[i], exp_avgs[i], exp_avg_sqs[i], h.amsgrad ? &max_exp_avg_sqs[i] : nullptr,
             state_steps[i], lr, h, grad_scale, found_inf);
}

template <Mode M>
void fused_float_lr(TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps, double lr,
                    double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                    const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  fused(M, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
        [&](c10::ScalarType dt, const tiny::Shape& shape) { return param_as(lr, dt, shape); },
        {beta1, beta2, weight_decay, eps, amsgrad, maximize}, grad_scale, found_inf);
}

template <Mode M>
void fused_tensor_lr(TL self, TL grads, TL exp_avgs, TL exp_avg_sqs, TL max_exp_avg_sqs, TL state_steps,
                     const at::Tensor& lr, double beta1, double beta2, double weight_decay, double eps, bool amsgrad,
                     bool maximize, const std::optional<at::Tensor>& grad_scale,
                     const std::optional<at::Tensor>& found_inf) {
  fused(M, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
        [&](c10::ScalarType dt, const tiny::Shape& shape) { return scalar_tensor_as(lr, dt, shape); },
        {beta1, beta2, weight_decay, eps, amsgrad, maximize}, grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adam_", fused_float_lr<Mode::Adam>);
  m.impl("_fused_adam_.tensor_lr", fused_tensor_lr<Mode::Adam>);
  m.impl("_fused_adamw_", fused_float_lr<Mode::AdamW>);
  m.impl("_fused_adamw_.tensor_lr", fused_tensor_lr<Mode::AdamW>);
}

}  // namespace torch_tiny
