// var / std and their *_mean forms. Two-pass: the mean, then the sum of
// squared deviations from it, accumulated in float64 (the CPU's Welford
// accumulates in double too). var_mean is one engine graph whose two outputs
// share the mean node, so a scheduler that fuses a reduce into a later reduce
// of the same iteration space can make it a single kernel.
#include <torch/library.h>

#include <optional>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::ReduceOp;

struct Moments {
  T var, mean;  // in the input's dtype, reduced (keepdim applied)
};

Moments moments(const at::Tensor& self, at::OptionalIntArrayRef dims, const std::optional<c10::Scalar>& correction,
                bool keepdim, bool take_sqrt, const char* fname) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()) || c10::isComplexType(self.scalar_type()),
              "std and var only support floating point and complex dtypes");
  auto axes = reduce_axes(self, dims);
  int64_t n = reduced_count(self, axes);
  double c = correction ? correction->toDouble() : 1.0;
  if (double(n) - c <= 0)
    TORCH_WARN(fname, "(): degrees of freedom is <= 0. Correction should be strictly less than the reduction factor "
                      "(input numel divided by output numel).");
  tiny::DType dt = to_engine(self.scalar_type());
  T x = read(self).cast(tiny::DType::Float64);
  T s = reduce_keep(x, ReduceOp::Sum, axes);
  T mean = div(s, constant_like(s, double(n)));
  T d = sub(x, mean.expand(x.shape()));
  T m2 = reduce_keep(mul(d, d), ReduceOp::Sum, axes);
  T var = div(m2, constant_like(m2, std::max(0.0, double(n) - c)));
  if (take_sqrt) var = var.unary(tiny::Op::Sqrt);
  return {squeeze_axes(var, axes, keepdim).cast(dt), squeeze_axes(mean, axes, keepdim).cast(dt)};
}

template <bool Sqrt>
at::Tensor var(const at::Tensor& self, at::OptionalIntArrayRef dims, const std::optional<c10::Scalar>& correction,
               bool keepdim) {
  TinyOp op(Sqrt ? "std" : "var");
  return make_result(moments(self, dims, correction, keepdim, Sqrt, Sqrt ? "std" : "var").var, self.scalar_type());
}
template <bool Sqrt>
at::Tensor& var_out(const at::Tensor& self, at::OptionalIntArrayRef dims, const std::optional<c10::Scalar>& correction,
                    bool keepdim, at::Tensor& out) {
  TinyOp op(Sqrt ? "std" : "var");
  return assign_out_cast(out, moments(self, dims, correction, keepdim, Sqrt, Sqrt ? "std" : "var").var,
                         self.scalar_type());
}
template <bool Sqrt>
std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dims,
                                            const std::optional<c10::Scalar>& correction, bool keepdim) {
  TinyOp op(Sqrt ? "std_mean" : "var_mean");
  Moments r = moments(self, dims, correction, keepdim, Sqrt, Sqrt ? "std_mean" : "var_mean");
  return {make_result(r.var, self.scalar_type()), make_result(r.mean, self.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("var.correction", var<false>);
  m.impl("var.correction_out", var_out<false>);
  m.impl("std.correction", var<true>);
  m.impl("std.correction_out", var_out<true>);
  m.impl("var_mean.correction", var_mean<false>);
  m.impl("std_mean.correction", var_mean<true>);
}

}  // namespace torch_tiny
