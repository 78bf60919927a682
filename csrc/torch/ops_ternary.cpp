// Pointwise ops with a condition, bounds or three operands: where, clamp
// (and clamp_min / clamp_max), masked_fill_, lerp, addcmul, addcdiv.
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include "torch/pointwise.h"

namespace torch_tiny {

namespace pw {

// min(max(x, lo), hi) with ATen's NaN rules: NaN in x stays, a NaN bound gives NaN.
Computed clamp_compute(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                       const char* kernel) {
  bool has_lo = lo.has_value() && lo->defined(), has_hi = hi.has_value() && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::native::ResultTypeState st = at::native::update_result_type_state(x, {});
  if (has_lo) st = at::native::update_result_type_state(*lo, st);
  if (has_hi) st = at::native::update_result_type_state(*hi, st);
  c10::ScalarType common = at::native::result_type(st);
  if (kernel) check_dtype(common, kNoBool, kernel);
  static const at::Tensor none;  // broadcast_shape skips undefined tensors
  tiny::Shape shape = broadcast_shape({x, has_lo ? *lo : none, has_hi ? *hi : none});
  T v = operand(x, common, shape);
  bool f = c10::isFloatingType(common);
  if (has_lo) {
    T l = operand(*lo, common, shape);
    v = where(lt(v, l), l, v);
    if (f) v = where(isnan(l), l, v);
  }
  if (has_hi) {
    T h = operand(*hi, common, shape);
    v = where(lt(h, v), h, v);
    if (f) v = where(isnan(h), h, v);
  }
  return {v, common};
}

}  // namespace pw

using namespace pw;

namespace {

// ---------------------------------------------------------------- where
Computed where_self(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(cond.scalar_type() == c10::kBool || cond.scalar_type() == c10::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
  c10::ScalarType common = at::result_type(a, b);
  tiny::Shape shape = broadcast_shape({cond, a, b});
  T c = operand(cond, c10::kBool, shape);
  return {where(c, operand(a, common, shape), operand(b, common, shape)), common};
}
at::Tensor where_fn(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
  TinyOp op("where");
  auto r = where_self(cond, a, b);
  return make_result(r.value, r.dtype);
}
at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("where");
  auto r = where_self(cond, a, b);
  TORCH_CHECK(out.scalar_type() == r.dtype, "Expected out type to be ", r.dtype, " but got ", out.scalar_type());
  return assign_out(out, r.value, r.dtype, {cond, a, b});
}

// ---------------------------------------------------------------- clamp
std::optional<at::Tensor> wrap_opt(const std::optional<c10::Scalar>& s) {
  if (!s.has_value()) return std::nullopt;
  return at::native::wrapped_scalar_tensor(*s);
}
// scalar bounds are converted to the result dtype the way ATen does (overflow is an error)
Computed checked(Computed r, std::initializer_list<std::optional<c10::Scalar>> bounds) {
  for (auto& b : bounds)
    if (b.has_value()) check_convertible(*b, r.dtype);
  return r;
}
Computed clamp_s(const at::Tensor& x, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  return checked(clamp_compute(x, wrap_opt(lo), wrap_opt(hi), "clamp_scalar_cpu"), {lo, hi});
}
Computed clamp_t(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  return clamp_compute(x, lo, hi, "clamp_cpu");
}
Computed clamp_min_s(const at::Tensor& x, const c10::Scalar& lo) {
  return checked(clamp_compute(x, at::native::wrapped_scalar_tensor(lo), std::nullopt, "clamp_min_scalar_cpu"), {lo});
}
Computed clamp_max_s(const at::Tensor& x, const c10::Scalar& hi) {
  return checked(clamp_compute(x, std::nullopt, at::native::wrapped_scalar_tensor(hi), "clamp_max_scalar_cpu"), {hi});
}
// bool is fine here: max / min of bools
Computed clamp_min_t(const at::Tensor& x, const at::Tensor& lo) { return clamp_compute(x, lo, std::nullopt, nullptr); }
Computed clamp_max_t(const at::Tensor& x, const at::Tensor& hi) { return clamp_compute(x, std::nullopt, hi, nullptr); }

// ---------------------------------------------------------------- masked_fill_
Computed masked_fill_t(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.dtype());
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  tiny::Shape shape = to_shape(self.sizes());
  auto b = at::infer_size_dimvector(self.sizes(), mask.sizes());
  TORCH_CHECK(tiny::Shape(b.begin(), b.end()) == shape, "output with shape ", self.sizes(),
              " doesn't match the broadcast shape ", c10::IntArrayRef(b));
  c10::ScalarType dt = self.scalar_type();
  T x = operand(self, dt, shape);
  return {where(operand(mask, c10::kBool, shape), operand(value, dt, shape), x), dt};
}
Computed masked_fill_s(const at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  check_convertible(value, self.scalar_type());
  return masked_fill_t(self, mask, at::native::wrapped_scalar_tensor(value));
}

// ---------------------------------------------------------------- lerp
Computed lerp_t(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  TORCH_CHECK(self.scalar_type() == end.scalar_type(), "expected dtype ", self.dtype(),
              " for `end` but got dtype ", end.dtype());
  TORCH_CHECK(weight.dim() == 0 || self.scalar_type() == weight.scalar_type(), "expected dtype ", self.dtype(),
              " for `weight` but got dtype ", weight.dtype());
  c10::ScalarType dt = self.scalar_type();
  check_dtype(dt, kFloatOnly, "lerp_kernel_tensor");
  tiny::Shape shape = broadcast_shape({self, end, weight});
  T r = lerp_formula(operand_op(self, dt, shape), operand_op(end, dt, shape), operand_op(weight, dt, shape));
  return {r.cast(to_engine(dt)), dt};
}
Computed lerp_s(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  TORCH_CHECK(self.scalar_type() == end.scalar_type(), "expected dtype ", self.dtype(),
              " for `end` but got dtype ", end.dtype());
  c10::ScalarType dt = self.scalar_type();
  check_dtype(dt, kFloatOnly, "lerp_kernel_scalar");
  tiny::Shape shape = broadcast_shape({self, end});
  T s = operand_op(self, dt, shape);
  T r = lerp_formula(s, operand_op(end, dt, shape), user_scalar(s, weight));
  return {r.cast(to_engine(dt)), dt};
}

// ---------------------------------------------------------------- addcmul / addcdiv
c10::ScalarType common3(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  at::native::ResultTypeState st = at::native::update_result_type_state(a, {});
  st = at::native::update_result_type_state(b, st);
  st = at::native::update_result_type_state(c, st);
  return at::native::result_type(st);
}
// self + value * t1 * t2 (value * t1 first, as ATen's kernel)
Computed addcmul(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) {
  c10::ScalarType dt = common3(self, t1, t2);
  check_dtype(dt, kNoBool, "addcmul_cpu_out");
  tiny::Shape shape = broadcast_shape({self, t1, t2});
  T s = operand_op(self, dt, shape);
  T v = user_scalar(s, value).cast(to_engine(dt)).cast(s.dtype());
  T r = s + v * operand_op(t1, dt, shape) * operand_op(t2, dt, shape);
  return {r.cast(to_engine(dt)), dt};
}
// self + value * t1 / t2
Computed addcdiv(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) {
  TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), true) && c10::isIntegralType(t2.scalar_type(), true)),
              "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
              "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
              "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
              "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
              "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  c10::ScalarType dt = common3(self, t1, t2);
  tiny::Shape shape = broadcast_shape({self, t1, t2});
  T s = operand_op(self, dt, shape);
  T v = user_scalar(s, value).cast(to_engine(dt)).cast(s.dtype());
  T r = s + v * operand_op(t1, dt, shape) / operand_op(t2, dt, shape);
  return {r.cast(to_engine(dt)), dt};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("where.self", where_fn);
  m.impl("where.self_out", where_out);

  TINY_PW3("clamp", clamp_s, exact_out);
  m.impl("clamp.Tensor", Kernels<"clamp", clamp_t>::fn);
  m.impl("clamp_.Tensor", Kernels<"clamp", clamp_t>::inplace);
  m.impl("clamp.Tensor_out", Kernels<"clamp", clamp_t>::out);
  TINY_PW3("clamp_min", clamp_min_s, exact_out);
  m.impl("clamp_min.Tensor", Kernels<"clamp_min", clamp_min_t>::fn);
  m.impl("clamp_min_.Tensor", Kernels<"clamp_min", clamp_min_t>::inplace);
  m.impl("clamp_min.Tensor_out", Kernels<"clamp_min", clamp_min_t>::out);
  TINY_PW3("clamp_max", clamp_max_s, exact_out);
  m.impl("clamp_max.Tensor", Kernels<"clamp_max", clamp_max_t>::fn);
  m.impl("clamp_max_.Tensor", Kernels<"clamp_max", clamp_max_t>::inplace);
  m.impl("clamp_max.Tensor_out", Kernels<"clamp_max", clamp_max_t>::out);

  m.impl("masked_fill_.Scalar", Kernels<"masked_fill", masked_fill_s>::inplace);
  m.impl("masked_fill_.Tensor", Kernels<"masked_fill", masked_fill_t>::inplace);

  m.impl("lerp.Scalar", Kernels<"lerp", lerp_s>::fn);
  m.impl("lerp_.Scalar", Kernels<"lerp", lerp_s>::inplace);
  m.impl("lerp.Scalar_out", Kernels<"lerp", lerp_s>::out);
  m.impl("lerp.Tensor", Kernels<"lerp", lerp_t>::fn);
  m.impl("lerp_.Tensor", Kernels<"lerp", lerp_t>::inplace);
  m.impl("lerp.Tensor_out", Kernels<"lerp", lerp_t, exact_out>::out);
  TINY_PW3("addcmul", addcmul);
  TINY_PW3("addcdiv", addcdiv);
}

}  // namespace torch_tiny
