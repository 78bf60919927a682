// Automatic mixed precision on tiny, as on CUDA: torch.autocast(device_type="tiny")
// casts the ops ATen lists for every autocast backend (matmuls and convolutions
// to the autocast dtype, precision-sensitive ops to float32, mixed inputs to
// their widest type), and GradScaler's two kernels are lazy engine values, so
// an AMP training step synchronizes nothing.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;

void check_scalar_tensor(const at::Tensor& t, c10::ScalarType dt, const char* what, const char* op) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": ", what, " must be a tiny tensor.");
  TORCH_CHECK(t.numel() == 1, op, ": ", what, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == dt, op, ": ", what, " must be a ", dt, " tensor.");
}

// GradScaler.unscale_: every gradient times inv_scale (in float for 16-bit
// floats, as ATen computes), and found_inf set to 1 if any of them holds an
// inf or a NaN.
void amp_non_finite_check_and_unscale(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  const char* name = "_amp_foreach_non_finite_check_and_unscale_";
  check_scalar_tensor(inv_scale, c10::kFloat, "inv_scale", name);
  check_scalar_tensor(found_inf, c10::kFloat, "found_inf", name);
  if (self.empty()) return;
  TinyOp op(name);
  T found = read(found_inf).reshape({});
  for (const at::Tensor& t : self) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, name, ": scaled_grads must be tiny tensors.");
    TORCH_CHECK(t.layout() == c10::kStrided, name, ": scaled_grads must be strided tensors.");
    TORCH_CHECK(c10::isFloatingType(t.scalar_type()), name, ": scaled_grads must be floating point tensors.");
    if (t.numel() == 0) continue;
    c10::ScalarType dt = t.scalar_type();
    c10::ScalarType op_dt = dt == c10::kHalf || dt == c10::kBFloat16 ? c10::kFloat : dt;
    tiny::Shape shape = to_shape(t.sizes());
    T x = operand(t, op_dt, shape);
    // x - x is NaN exactly for infinities and NaNs
    T bad = x.binary(Op::Sub, x).unary(Op::IsNan);
    std::vector<int> all(shape.size());
    for (size_t i = 0; i < all.size(); i++) all[i] = int(i);
    T any_bad = shape.empty() ? bad : bad.reduce(tiny::ReduceOp::Any, all, false);
    found = T::where(any_bad, T::full({}, tiny::Scalar::from_double(1.0), tiny::DType::Float32), found);
    write(t, x.binary(Op::Mul, operand(inv_scale.reshape({}), op_dt, shape)).cast(to_engine(dt)));
  }
  write(found_inf, found.reshape(to_shape(found_inf.sizes())));
}

// GradScaler.update: back off after an inf, grow every growth_interval good steps.
at::Tensor& amp_update_scale(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* name = "_amp_update_scale_";
  check_scalar_tensor(self, c10::kFloat, "current_scale", name);
  check_scalar_tensor(growth_tracker, c10::kInt, "growth_tracker", name);
  check_scalar_tensor(found_inf, c10::kFloat, "found_inf", name);
  TinyOp op(name);
  auto f64 = [](double v) { return T::full({}, tiny::Scalar::from_double(v), tiny::DType::Float64); };
  T scale = read(self).reshape({}).cast(tiny::DType::Float64);
  T tracker = read(growth_tracker).reshape({});
  T inf = read(found_inf).reshape({}).binary(Op::CmpNe, T::full({}, tiny::Scalar::from_double(0), tiny::DType::Float32));
  T successful = tracker.binary(Op::Add, T::full({}, tiny::Scalar::from_int(1), tiny::DType::Int32));
  T grow = successful.binary(Op::CmpEq, T::full({}, tiny::Scalar::from_int(growth_interval), tiny::DType::Int32));
  T grown = scale.binary(Op::Mul, f64(growth_factor)).cast(tiny::DType::Float32);
  T finite = grown.binary(Op::Sub, grown).unary(Op::IsNan).unary(Op::Not);
  T kept = scale.cast(tiny::DType::Float32);
  T new_scale = T::where(inf, scale.binary(Op::Mul, f64(backoff_factor)).cast(tiny::DType::Float32),
                         T::where(grow, T::where(finite, grown, kept), kept));
  T zero = T::full({}, tiny::Scalar::from_int(0), tiny::DType::Int32);
  T new_tracker = T::where(inf, zero, T::where(grow, zero, successful));
  write(self, new_scale.reshape(to_shape(self.sizes())));
  write(growth_tracker, new_tracker.reshape(to_shape(growth_tracker.sizes())));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", amp_non_finite_check_and_unscale);
  m.impl("_amp_update_scale_", amp_update_scale);
}

}  // namespace torch_tiny

// Ops autocast does not touch go straight on.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

namespace {
using namespace at;  // ATen's op lists name Tensor, Scalar, ScalarType unqualified

// The cast policies ATen gives every autocast backend (its op lists).
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TINY_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TINY_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TINY_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TINY_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define TINY_REDISPATCH(FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY)
  AT_FORALL_LOWER_PRECISION_FP(TINY_LOWER_PRECISION)
  AT_FORALL_FP32(TINY_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TINY_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TINY_REDISPATCH)
  AT_FORALL_PROMOTE(TINY_PROMOTE)
#undef TINY_LOWER_PRECISION
#undef TINY_FP32
#undef TINY_FP32_SET_OPT_DTYPE
#undef TINY_PROMOTE
#undef TINY_REDISPATCH
}

}  // namespace
