// Factories that compute their values on the device: arange (and friends).
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <ATen/Dispatch.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
  TinyOp op("arange");
  c10::ScalarType dt = out.scalar_type();
  int64_t size = 0;
  AT_DISPATCH_ALL_TYPES_AND2(c10::kHalf, c10::kBFloat16, dt, "arange_tiny",
                             [&] { size = at::native::compute_arange_size<scalar_t>(start, end, step); });
  at::native::resize_output(out, {size});
  tiny::Scalar s0 = c10::isFloatingType(dt) ? tiny::Scalar::from_double(start.to<double>()) : tiny::Scalar::from_int(start.to<int64_t>());
  tiny::Scalar s1 = c10::isFloatingType(dt) ? tiny::Scalar::from_double(step.to<double>()) : tiny::Scalar::from_int(step.to<int64_t>());
  write(out, tiny::Tensor::arange(size, s0, s1, to_engine(dt)));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("arange.start_out", arange_out); }

}  // namespace torch_tiny
