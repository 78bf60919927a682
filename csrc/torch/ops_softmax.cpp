// softmax / log_softmax and their backward ops as engine graphs: the max
// along dim, the sum of exp(x - max), and an elementwise normalize, which the
// scheduler turns into a few kernels (one per reduce whose result is read back
// by a broadcast, plus the output). 16-bit floats compute in float32 and round
// once. half_to_float (a half input with a float result) follows the CUDA
// kernels; the CPU rejects it.
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

c10::ScalarType softmax_out_dtype(const at::Tensor& self, int64_t dim, bool half_to_float, bool log) {
  int axis = int(at::maybe_wrap_dim(dim, self.dim()));
  if (half_to_float) {
    TORCH_CHECK(self.scalar_type() == c10::kHalf, "conversion is supported for Half type only");
    return c10::kFloat;
  }
  // the CPU's kernel names, which its error messages carry
  bool last = self.dim() == 0 || axis == self.dim() - 1;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(self.scalar_type()), "\"", log ? "log_" : "", "softmax_",
                              last ? "lastdim_" : "", "kernel_impl\" not implemented for '", self.scalar_type(), "'");
  return self.scalar_type();
}

T softmax_value(const at::Tensor& self, int64_t dim, c10::ScalarType out, bool log) {
  std::vector<int> axes;
  if (self.dim() > 0) axes.push_back(int(at::maybe_wrap_dim(dim, self.dim())));
  T x = read(self).cast(tiny::compute_dtype(to_engine(self.scalar_type())));
  T m = reduce_keep(x, ReduceOp::Max, axes);
  T shifted = sub(x, m.expand(x.shape()));
  T e = shifted.unary(Op::Exp);
  T s = reduce_keep(e, ReduceOp::Sum, axes).expand(x.shape());
  T r = log ? sub(shifted, s.unary(Op::Log)) : div(e, s);
  return r.cast(to_engine(out));
}

template <bool Log>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  TinyOp op(Log ? "log_softmax" : "softmax");
  c10::ScalarType out = softmax_out_dtype(self, dim, half_to_float, Log);
  return make_result(softmax_value(self, dim, out, Log), out);
}
template <bool Log>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  TinyOp op(Log ? "log_softmax" : "softmax");
  c10::ScalarType dt = softmax_out_dtype(self, dim, half_to_float, Log);
  return assign_out_exact(out, softmax_value(self, dim, dt, Log), dt);
}

// ---------------------------------------------------------------- backward
// softmax:     grad_input = y * (g - sum(g * y))
// log_softmax: grad_input = g - exp(y) * sum(g)
c10::ScalarType softmax_backward_dtype(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                       c10::ScalarType input_dtype) {
  at::TensorArg grad_arg{grad, "grad", 1}, output_arg{output, "output", 2};
  at::checkSameSize("softmax_backward", grad_arg, output_arg);
  at::maybe_wrap_dim(dim, grad.dim());
  TORCH_CHECK(grad.scalar_type() == output.scalar_type(), "expected scalar type ", grad.scalar_type(), " but found ",
              output.scalar_type());
  // a float gradient of a half input (half_to_float forward) goes back to half
  if (grad.scalar_type() == c10::kFloat && input_dtype == c10::kHalf) return c10::kHalf;
  return grad.scalar_type();
}

T softmax_backward_value(const at::Tensor& grad, const at::Tensor& output, int64_t dim, c10::ScalarType out, bool log) {
  std::vector<int> axes;
  if (grad.dim() > 0) axes.push_back(int(at::maybe_wrap_dim(dim, grad.dim())));
  tiny::DType acc = tiny::compute_dtype(to_engine(grad.scalar_type()));
  T g = read(grad).cast(acc), y = read(output).cast(acc);
  T r;
  if (log) {
    T s = reduce_keep(g, ReduceOp::Sum, axes).expand(g.shape());
    r = sub(g, mul(y.unary(Op::Exp), s));
  } else {
    T s = reduce_keep(mul(g, y), ReduceOp::Sum, axes).expand(g.shape());
    r = mul(y, sub(g, s));
  }
  return r.cast(to_engine(out));
}

template <bool Log>
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim, c10::ScalarType input_dtype) {
  TinyOp op(Log ? "log_softmax_backward" : "softmax_backward");
  c10::ScalarType out = softmax_backward_dtype(grad, output, dim, input_dtype);
  return make_result(softmax_backward_value(grad, output, dim, out, Log), out);
}
template <bool Log>
at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                 c10::ScalarType input_dtype, at::Tensor& grad_input) {
  TinyOp op(Log ? "log_softmax_backward" : "softmax_backward");
  c10::ScalarType out = softmax_backward_dtype(grad, output, dim, input_dtype);
  return assign_out_exact(grad_input, softmax_backward_value(grad, output, dim, out, Log), out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_softmax", softmax<false>);
  m.impl("_softmax.out", softmax_out<false>);
  m.impl("_log_softmax", softmax<true>);
  m.impl("_log_softmax.out", softmax_out<true>);
  m.impl("_softmax_backward_data", softmax_backward<false>);
  m.impl("_softmax_backward_data.out", softmax_backward_out<false>);
  m.impl("_log_softmax_backward_data", softmax_backward<true>);
  m.impl("_log_softmax_backward_data.out", softmax_backward_out<true>);
}

}  // namespace torch_tiny
