// torch._foreach_* kernels (what the optimizers' multi-tensor paths and
// clip_grad_norm_ call): loops over the tensors building one lazy engine
// value each, so an optimizer step queues work and syncs nothing. Semantics
// per tensor are those of the matching single-tensor op (promotion, in-place
// casting rules, broadcasting of the one-tensor variants).
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/nn_util.h"
#include "torch/ops_util.h"
#include "torch/pointwise.h"

namespace torch_tiny {
namespace {

using namespace nn;
using TL = at::TensorList;
using SL = at::ArrayRef<c10::Scalar>;
using Fn2 = T (*)(const T&, const T&);

void check_lists(TL a, size_t n, const char* what) {
  TORCH_CHECK(a.size() == n, "Tensor lists must have the same number of tensors, got ", n, " and ", a.size(), " (",
              what, ")");
}
void check_scalars(SL s, size_t n) {
  TORCH_CHECK(s.size() == n, "Tensor list must have same number of elements as scalar list, got ", n, " and ",
              s.size());
}

at::Tensor wrap_scalar(const c10::Scalar& s) { return at::native::wrapped_scalar_tensor(s); }

// One tensor's element of a one-tensor-per-list "scalars" argument.
at::Tensor element_of(const at::Tensor& scalars, size_t i) {
  TORCH_CHECK(scalars.dim() == 1, "Expected packed scalar Tensor to be of dimension 1. Got ", scalars.dim(), " instead.");
  return scalars.select(0, int64_t(i));
}

// ---------------------------------------------------------------- binary
T f_add(const T& a, const T& b) { return a.binary(Op::Add, b); }
T f_sub(const T& a, const T& b) { return a.binary(Op::Sub, b); }
T f_mul(const T& a, const T& b) { return a.binary(Op::Mul, b); }
T f_div(const T& a, const T& b) { return a.binary(Op::Div, b); }
T f_max(const T& a, const T& b) { return a.binary(Op::Max, b); }
T f_min(const T& a, const T& b) { return a.binary(Op::Min, b); }
T f_pow(const T& a, const T& b) { return a.binary(Op::Pow, b); }
// clamp semantics: a NaN in x stays, a NaN bound wins
T f_clamp_min(const T& x, const T& l) {
  T v = T::where(x.binary(Op::CmpLt, l), l, x);
  return tiny::is_float(v.dtype()) ? T::where(l.unary(Op::IsNan), l, v) : v;
}
T f_clamp_max(const T& x, const T& h) {
  T v = T::where(h.binary(Op::CmpLt, x), h, x);
  return tiny::is_float(v.dtype()) ? T::where(h.unary(Op::IsNan), h, v) : v;
}

struct Computed {
  T v;
  c10::ScalarType dt;
};
template <Fn2 F, bool IntToFloat>
Computed bin(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
  c10::ScalarType common = at::result_type(a, b);
  if (IntToFloat) common = float_type_for(common);
  tiny::Shape shape = broadcast_shape({a, b});
  T vb = operand(b, common, shape);
  bool unit = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  if (!unit) vb = vb.binary(Op::Mul, scalar_operand(alpha, common, shape));
  return {F(operand(a, common, shape), vb), common};
}

template <Fn2 F, bool I2F>
std::vector<at::Tensor> run_bin(TL self, const std::function<at::Tensor(size_t)>& other, const c10::Scalar& alpha) {
  TinyOp op("foreach");
  std::vector<at::Tensor> out;
  out.reserve(self.size());
  for (size_t i = 0; i < self.size(); i++) {
    auto r = bin<F, I2F>(self[i], other(i), alpha);
    out.push_back(make_result(r.v, r.dt));
  }
  return out;
}
template <Fn2 F, bool I2F>
void run_bin_(TL self, const std::function<at::Tensor(size_t)>& other, const c10::Scalar& alpha) {
  TinyOp op("foreach_");
  for (size_t i = 0; i < self.size(); i++) {
    at::Tensor s = self[i];
    at::Tensor o = other(i);
    auto r = bin<F, I2F>(s, o, alpha);
    assign_inplace(s, r.v, r.dt, {o});
  }
}

template <Fn2 F, bool I2F>
std::vector<at::Tensor> b_scalar(TL self, const c10::Scalar& s) {
  at::Tensor w = wrap_scalar(s);
  return run_bin<F, I2F>(self, [&](size_t) { return w; }, 1);
}
template <Fn2 F, bool I2F>
void b_scalar_(TL self, const c10::Scalar& s) {
  at::Tensor w = wrap_scalar(s);
  run_bin_<F, I2F>(self, [&](size_t) { return w; }, 1);
}
template <Fn2 F, bool I2F>
std::vector<at::Tensor> b_scalars(TL self, SL s) {
  check_scalars(s, self.size());
  return run_bin<F, I2F>(self, [&](size_t i) { return wrap_scalar(s[i]); }, 1);
}
template <Fn2 F, bool I2F>
void b_scalars_(TL self, SL s) {
  check_scalars(s, self.size());
  run_bin_<F, I2F>(self, [&](size_t i) { return wrap_scalar(s[i]); }, 1);
}
template <Fn2 F, bool I2F>
std::vector<at::Tensor> b_list(TL self, TL other) {
  check_lists(other, self.size(), "other");
  return run_bin<F, I2F>(self, [&](size_t i) { return other[i]; }, 1);
}
template <Fn2 F, bool I2F>
void b_list_(TL self, TL other) {
  check_lists(other, self.size(), "other");
  run_bin_<F, I2F>(self, [&](size_t i) { return other[i]; }, 1);
}
template <Fn2 F>
std::vector<at::Tensor> b_list_alpha(TL self, TL other, const c10::Scalar& alpha) {
  check_lists(other, self.size(), "other");
  return run_bin<F, false>(self, [&](size_t i) { return other[i]; }, alpha);
}
template <Fn2 F>
void b_list_alpha_(TL self, TL other, const c10::Scalar& alpha) {
  check_lists(other, self.size(), "other");
  run_bin_<F, false>(self, [&](size_t i) { return other[i]; }, alpha);
}
at::Tensor one_tensor(const at::Tensor& t) {
  TORCH_CHECK(t.numel() == 1,
              "scalar tensor expected to be 0 dim but it has ", t.dim(), " dimensions and ", t.numel(), " elements.");
  return t.dim() == 0 ? t : t.reshape({});
}
template <Fn2 F, bool I2F>
std::vector<at::Tensor> b_tensor(TL self, const at::Tensor& other) {
  at::Tensor o = one_tensor(other);
  return run_bin<F, I2F>(self, [&](size_t) { return o; }, 1);
}
template <Fn2 F, bool I2F>
void b_tensor_(TL self, const at::Tensor& other) {
  at::Tensor o = one_tensor(other);
  run_bin_<F, I2F>(self, [&](size_t) { return o; }, 1);
}
template <Fn2 F>
std::vector<at::Tensor> b_tensor_alpha(TL self, const at::Tensor& other, const c10::Scalar& alpha) {
  at::Tensor o = one_tensor(other);
  return run_bin<F, false>(self, [&](size_t) { return o; }, alpha);
}
template <Fn2 F>
void b_tensor_alpha_(TL self, const at::Tensor& other, const c10::Scalar& alpha) {
  at::Tensor o = one_tensor(other);
  run_bin_<F, false>(self, [&](size_t) { return o; }, alpha);
}

// ---------------------------------------------------------------- unary
using Fn1 = T (*)(const T&);
T u_sqrt(const T& x) { return x.unary(Op::Sqrt); }
T u_neg(const T& x) { return x.unary(Op::Neg); }
T u_recip(const T& x) { return x.unary(Op::Recip); }
T u_abs(const T& x) { return x.unary(Op::Abs); }
T u_exp(const T& x) { return x.unary(Op::Exp); }
T u_log(const T& x) { return x.unary(Op::Log); }
T u_sign(const T& x) { return x.unary(Op::Sign); }

template <Fn1 F, bool I2F>
std::vector<at::Tensor> un(TL self) {
  TinyOp op("foreach");
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : self) {
    c10::ScalarType dt = I2F ? float_type_for(t.scalar_type()) : t.scalar_type();
    out.push_back(make_result(F(operand(t, dt, to_shape(t.sizes()))), dt));
  }
  return out;
}
template <Fn1 F, bool I2F>
void un_(TL self) {
  TinyOp op("foreach_");
  for (at::Tensor t : self) {
    c10::ScalarType dt = I2F ? float_type_for(t.scalar_type()) : t.scalar_type();
    assign_inplace(t, F(operand(t, dt, to_shape(t.sizes()))), dt, {});
  }
}
void zero_(TL self) {
  TinyOp op("foreach_zero_");
  for (const at::Tensor& t : self) write(t, cnst(to_shape(t.sizes()), 0, to_engine(t.scalar_type())));
}

// ---------------------------------------------------------------- addcmul / addcdiv
template <bool Div>
Computed addc(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const at::Tensor& value) {
  if (Div)
    TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), true) && c10::isIntegralType(t2.scalar_type(), true)),
                "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a "
                "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  c10::ScalarType common = c10::promoteTypes(at::result_type(self, t1), at::result_type(t1, t2));
  common = c10::promoteTypes(common, at::result_type(self, t2));
  tiny::Shape shape = broadcast_shape({self, t1, t2});
  T a = operand(t1, common, shape), b = operand(t2, common, shape);
  T prod = Div ? a.binary(Op::Div, b) : a.binary(Op::Mul, b);
  T v = operand(value, common, shape);
  return {operand(self, common, shape).binary(Op::Add, v.binary(Op::Mul, prod)), common};
}
template <bool Div>
std::vector<at::Tensor> run_addc(TL self, TL t1, TL t2, const std::function<at::Tensor(size_t)>& value) {
  TinyOp op(Div ? "foreach_addcdiv" : "foreach_addcmul");
  check_lists(t1, self.size(), "tensor1");
  check_lists(t2, self.size(), "tensor2");
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < self.size(); i++) {
    auto r = addc<Div>(self[i], t1[i], t2[i], value(i));
    out.push_back(make_result(r.v, r.dt));
  }
  return out;
}
template <bool Div>
void run_addc_(TL self, TL t1, TL t2, const std::function<at::Tensor(size_t)>& value) {
  TinyOp op(Div ? "foreach_addcdiv_" : "foreach_addcmul_");
  check_lists(t1, self.size(), "tensor1");
  check_lists(t2, self.size(), "tensor2");
  for (size_t i = 0; i < self.size(); i++) {
    at::Tensor s = self[i];
    auto r = addc<Div>(s, t1[i], t2[i], value(i));
    assign_inplace(s, r.v, r.dt, {t1[i], t2[i]});
  }
}
template <bool Div>
std::vector<at::Tensor> addc_scalar(TL s, TL a, TL b, const c10::Scalar& v) {
  at::Tensor w = wrap_scalar(v);
  return run_addc<Div>(s, a, b, [&](size_t) { return w; });
}
template <bool Div>
void addc_scalar_(TL s, TL a, TL b, const c10::Scalar& v) {
  at::Tensor w = wrap_scalar(v);
  run_addc_<Div>(s, a, b, [&](size_t) { return w; });
}
template <bool Div>
std::vector<at::Tensor> addc_scalars(TL s, TL a, TL b, SL v) {
  check_scalars(v, s.size());
  return run_addc<Div>(s, a, b, [&](size_t i) { return wrap_scalar(v[i]); });
}
template <bool Div>
void addc_scalars_(TL s, TL a, TL b, SL v) {
  check_scalars(v, s.size());
  run_addc_<Div>(s, a, b, [&](size_t i) { return wrap_scalar(v[i]); });
}
template <bool Div>
std::vector<at::Tensor> addc_tensor(TL s, TL a, TL b, const at::Tensor& v) {
  TORCH_CHECK(v.numel() == int64_t(s.size()), "Tensor list must have same number of elements as scalar list, got ",
              s.size(), " and ", v.numel());
  return run_addc<Div>(s, a, b, [&](size_t i) { return element_of(v, i); });
}
template <bool Div>
void addc_tensor_(TL s, TL a, TL b, const at::Tensor& v) {
  TORCH_CHECK(v.numel() == int64_t(s.size()), "Tensor list must have same number of elements as scalar list, got ",
              s.size(), " and ", v.numel());
  run_addc_<Div>(s, a, b, [&](size_t i) { return element_of(v, i); });
}

// ---------------------------------------------------------------- lerp
// self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w), as ATen computes it
Computed lerp_value(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  c10::ScalarType dt = self.scalar_type();
  TORCH_CHECK(end.scalar_type() == dt, "expected dtype ", dt, " for `end` but got dtype ", end.scalar_type());
  tiny::Shape shape = broadcast_shape({self, end, weight});
  T v = pw::lerp_formula(pw::operand_op(self, dt, shape), pw::operand_op(end, dt, shape),
                         pw::operand_op(weight, pw::opmath(dt), shape));  // a scalar weight is not rounded to dt
  return {v.cast(to_engine(dt)), dt};
}
std::vector<at::Tensor> run_lerp(TL self, TL end, const std::function<at::Tensor(size_t)>& w) {
  TinyOp op("foreach_lerp");
  check_lists(end, self.size(), "tensors1");
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < self.size(); i++) {
    auto r = lerp_value(self[i], end[i], w(i));
    out.push_back(make_result(r.v, r.dt));
  }
  return out;
}
void run_lerp_(TL self, TL end, const std::function<at::Tensor(size_t)>& w) {
  TinyOp op("foreach_lerp_");
  check_lists(end, self.size(), "tensors1");
  for (size_t i = 0; i < self.size(); i++) {
    at::Tensor s = self[i];
    at::Tensor wi = w(i);
    auto r = lerp_value(s, end[i], wi);
    assign_inplace(s, r.v, r.dt, {end[i], wi});
  }
}
std::vector<at::Tensor> lerp_list(TL s, TL e, TL w) {
  check_lists(w, s.size(), "weights");
  return run_lerp(s, e, [&](size_t i) { return w[i]; });
}
void lerp_list_(TL s, TL e, TL w) {
  check_lists(w, s.size(), "weights");
  run_lerp_(s, e, [&](size_t i) { return w[i]; });
}
std::vector<at::Tensor> lerp_scalar(TL s, TL e, const c10::Scalar& w) {
  at::Tensor ws = wrap_scalar(w);
  return run_lerp(s, e, [&](size_t) { return ws; });
}
void lerp_scalar_(TL s, TL e, const c10::Scalar& w) {
  at::Tensor ws = wrap_scalar(w);
  run_lerp_(s, e, [&](size_t) { return ws; });
}
std::vector<at::Tensor> lerp_scalars(TL s, TL e, SL w) {
  check_scalars(w, s.size());
  return run_lerp(s, e, [&](size_t i) { return wrap_scalar(w[i]); });
}
void lerp_scalars_(TL s, TL e, SL w) {
  check_scalars(w, s.size());
  run_lerp_(s, e, [&](size_t i) { return wrap_scalar(w[i]); });
}

// ---------------------------------------------------------------- norm
std::vector<at::Tensor> norm(TL self, const c10::Scalar& ord, std::optional<c10::ScalarType> dtype) {
  TinyOp op("foreach_norm");
  double p = ord.toDouble();
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : self) {
    TORCH_CHECK(c10::isFloatingType(t.scalar_type()), "_foreach_norm: expected a floating point input, got ",
                t.scalar_type());
    c10::ScalarType dt = dtype.value_or(t.scalar_type());
    tiny::DType acc = tiny::compute_dtype(to_engine(dt));
    if (t.numel() == 0) {
      TORCH_CHECK(!std::isinf(p) && p >= 0, "linalg.vector_norm cannot compute the ", ord,
                  " norm on an empty tensor because the operation does not have an identity");
      out.push_back(make_result(cnst({}, 0.0, to_engine(dt)), dt));
      continue;
    }
    T x = read(t).cast(acc).reshape({t.numel()});
    T a = x.unary(Op::Abs);
    T r;
    if (std::isinf(p)) {
      r = a.reduce(p > 0 ? ReduceOp::Max : ReduceOp::Min, {0}, false);
    } else if (p == 0) {
      r = a.binary(Op::CmpNe, cnst_like(a, 0.0)).cast(acc).reduce(ReduceOp::Sum, {0}, false);
    } else if (p == 1) {
      r = a.reduce(ReduceOp::Sum, {0}, false);
    } else if (p == 2) {
      r = mul(x, x).reduce(ReduceOp::Sum, {0}, false).unary(Op::Sqrt);
    } else {
      r = a.binary(Op::Pow, cnst_like(a, p)).reduce(ReduceOp::Sum, {0}, false);
      r = r.binary(Op::Pow, cnst_like(r, 1.0 / p));
    }
    out.push_back(make_result(r.cast(to_engine(dt)), dt));
  }
  return out;
}

}  // namespace

#define FE_BIN_ALL(name, F, I2F)                                   \
  m.impl("_foreach_" name ".Scalar", b_scalar<F, I2F>);            \
  m.impl("_foreach_" name "_.Scalar", b_scalar_<F, I2F>);          \
  m.impl("_foreach_" name ".ScalarList", b_scalars<F, I2F>);       \
  m.impl("_foreach_" name "_.ScalarList", b_scalars_<F, I2F>)
#define FE_BIN_LIST(name, F, I2F)                                  \
  m.impl("_foreach_" name ".List", b_list<F, I2F>);                \
  m.impl("_foreach_" name "_.List", b_list_<F, I2F>)
#define FE_UN(name, F, I2F)                                        \
  m.impl("_foreach_" name, un<F, I2F>);                            \
  m.impl("_foreach_" name "_", un_<F, I2F>)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  FE_BIN_ALL("add", f_add, false);
  m.impl("_foreach_add.List", b_list_alpha<f_add>);
  m.impl("_foreach_add_.List", b_list_alpha_<f_add>);
  m.impl("_foreach_add.Tensor", b_tensor_alpha<f_add>);
  m.impl("_foreach_add_.Tensor", b_tensor_alpha_<f_add>);
  FE_BIN_ALL("sub", f_sub, false);
  m.impl("_foreach_sub.List", b_list_alpha<f_sub>);
  m.impl("_foreach_sub_.List", b_list_alpha_<f_sub>);
  FE_BIN_ALL("mul", f_mul, false);
  FE_BIN_LIST("mul", f_mul, false);
  m.impl("_foreach_mul.Tensor", b_tensor<f_mul, false>);
  m.impl("_foreach_mul_.Tensor", b_tensor_<f_mul, false>);
  FE_BIN_ALL("div", f_div, true);
  FE_BIN_LIST("div", f_div, true);
  m.impl("_foreach_div.Tensor", b_tensor<f_div, true>);
  m.impl("_foreach_div_.Tensor", b_tensor_<f_div, true>);
  FE_BIN_ALL("maximum", f_max, false);
  FE_BIN_LIST("maximum", f_max, false);
  FE_BIN_ALL("minimum", f_min, false);
  FE_BIN_LIST("minimum", f_min, false);
  FE_BIN_ALL("clamp_min", f_clamp_min, false);
  FE_BIN_LIST("clamp_min", f_clamp_min, false);
  FE_BIN_ALL("clamp_max", f_clamp_max, false);
  FE_BIN_LIST("clamp_max", f_clamp_max, false);
  m.impl("_foreach_pow.Scalar", b_scalar<f_pow, false>);
  m.impl("_foreach_pow_.Scalar", b_scalar_<f_pow, false>);
  m.impl("_foreach_pow.ScalarList", b_scalars<f_pow, false>);
  m.impl("_foreach_pow_.ScalarList", b_scalars_<f_pow, false>);
  FE_BIN_LIST("pow", f_pow, false);
  FE_UN("sqrt", u_sqrt, true);
  FE_UN("neg", u_neg, false);
  FE_UN("reciprocal", u_recip, true);
  FE_UN("abs", u_abs, false);
  FE_UN("exp", u_exp, true);
  FE_UN("log", u_log, true);
  FE_UN("sign", u_sign, false);
  m.impl("_foreach_zero_", zero_);
  m.impl("_foreach_addcmul.Scalar", addc_scalar<false>);
  m.impl("_foreach_addcmul_.Scalar", addc_scalar_<false>);
  m.impl("_foreach_addcmul.ScalarList", addc_scalars<false>);
  m.impl("_foreach_addcmul_.ScalarList", addc_scalars_<false>);
  m.impl("_foreach_addcmul.Tensor", addc_tensor<false>);
  m.impl("_foreach_addcmul_.Tensor", addc_tensor_<false>);
  m.impl("_foreach_addcdiv.Scalar", addc_scalar<true>);
  m.impl("_foreach_addcdiv_.Scalar", addc_scalar_<true>);
  m.impl("_foreach_addcdiv.ScalarList", addc_scalars<true>);
  m.impl("_foreach_addcdiv_.ScalarList", addc_scalars_<true>);
  m.impl("_foreach_addcdiv.Tensor", addc_tensor<true>);
  m.impl("_foreach_addcdiv_.Tensor", addc_tensor_<true>);
  m.impl("_foreach_lerp.List", lerp_list);
  m.impl("_foreach_lerp_.List", lerp_list_);
  m.impl("_foreach_lerp.Scalar", lerp_scalar);
  m.impl("_foreach_lerp_.Scalar", lerp_scalar_);
  m.impl("_foreach_lerp.ScalarList", lerp_scalars);
  m.impl("_foreach_lerp_.ScalarList", lerp_scalars_);
  m.impl("_foreach_norm.Scalar", norm);
}

}  // namespace torch_tiny
