// Ops that build complex tensors from real ones: complex(real, imag) and
// polar(abs, angle). Complex tensors are storage-only on tiny (storage_only.h):
// the result is written through its real view, components interleaved.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/pointwise.h"
#include "torch/storage_only.h"

namespace torch_tiny {
using namespace pw;

namespace {

// ATen's complex_check_dtype, and the out= dtype check of complex_out / polar_out
c10::ScalarType check_complex_args(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  c10::ScalarType t = a.scalar_type();
  TORCH_CHECK((t == c10::kFloat || t == c10::kDouble || t == c10::kHalf) &&
                  (b.scalar_type() == c10::kFloat || b.scalar_type() == c10::kDouble || b.scalar_type() == c10::kHalf),
              "Expected both inputs to be Half, Float or Double tensors but got ", t, " and ", b.scalar_type());
  TORCH_CHECK(t == b.scalar_type(), "Expected object of scalar type ", t, " but got scalar type ", b.scalar_type(),
              " for second argument");
  c10::ScalarType ct = c10::toComplexType(t);
  TORCH_CHECK(out.scalar_type() == ct, "Expected object of scalar type ", ct, " but got scalar type ",
              out.scalar_type(), " for argument 'out'");
  return t;
}

at::Tensor& write_pairs(at::Tensor& out, const tiny::Tensor& re, const tiny::Tensor& im, const tiny::Shape& shape,
                        const std::vector<at::Tensor>& inputs) {
  at::native::resize_output(out, c10::IntArrayRef(shape));
  at::assert_no_internal_overlap(out);
  for (const auto& in : inputs)
    if (in.device() == out.device()) at::assert_no_partial_overlap(out, in);
  if (out.numel() == 0) return out;
  write(engine_view(out), interleave(re, im));
  return out;
}

at::Tensor& complex_out(const at::Tensor& real, const at::Tensor& imag, at::Tensor& out) {
  TinyOp op("complex");
  c10::ScalarType t = check_complex_args(real, imag, out);
  tiny::Shape shape = broadcast_shape({real, imag});
  return write_pairs(out, operand(real, t, shape), operand(imag, t, shape), shape, {real, imag});
}

// abs * cos(angle), abs * sin(angle), in opmath of the type and rounded back
at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  TinyOp op("polar");
  c10::ScalarType t = check_complex_args(abs, angle, out);
  tiny::Shape shape = broadcast_shape({abs, angle});
  T r = operand_op(abs, t, shape), a = operand_op(angle, t, shape);
  tiny::DType dt = to_engine(t);
  return write_pairs(out, (r * un(Op::Cos, a)).cast(dt), (r * un(Op::Sin, a)).cast(dt), shape, {abs, angle});
}

// Lazy conjugate / negative bits would reach _copy_from, whose Conjugate
// fallback clones (copies) the tensor again: refused where they are made.
at::Tensor no_conj_view(const at::Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tiny: conjugated complex views are not supported on the tiny device (tiny "
                              "stores complex tensors but computes with none)");
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("complex.out", complex_out);
  m.impl("polar.out", polar_out);
  m.impl("_conj", no_conj_view);
  m.impl("_neg_view", no_conj_view);
}

}  // namespace torch_tiny
