// Ops that build complex tensors from real ones: complex(real, imag) and
// polar(abs, angle). Complex tensors are storage-only on tiny (storage_only.h):
// the result is written through its real view, components interleaved.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_copy_from.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
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

at::Tensor& complex_out(const at::Tensor& real, const at::Tensor& imag, at::Tensor& out) {
  TinyOp op("complex");
  c10::ScalarType t = check_complex_args(real, imag, out);
  tiny::Shape shape = broadcast_shape({real, imag});
  return write_complex(out, operand(real, t, shape), operand(imag, t, shape), shape, {real, imag});
}

// abs * cos(angle), abs * sin(angle), in opmath of the type and rounded back
at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  TinyOp op("polar");
  c10::ScalarType t = check_complex_args(abs, angle, out);
  tiny::Shape shape = broadcast_shape({abs, angle});
  T r = operand_op(abs, t, shape), a = operand_op(angle, t, shape);
  tiny::DType dt = to_engine(t);
  return write_complex(out, (r * un(Op::Cos, a)).cast(dt), (r * un(Op::Sin, a)).cast(dt), shape, {abs, angle});
}

// _copy_from's Conjugate / Negative fallbacks resolve a lazy bit by cloning,
// and a clone on tiny is a _copy_from again: these kernels pass the bits
// through to tiny's copy, which applies them.
at::Tensor copy_from_with_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  return at::_copy_from(self, dst, non_blocking);
}

}  // namespace

// (ar + i ai)(br + i bi) in the component type of the promoted complex dtype
at::Tensor& complex_mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TinyOp op("mul");
  c10::ScalarType common = at::result_type(a, b);
  TORCH_CHECK(c10::canCast(common, out.scalar_type()), "result type ", common,
              " can't be cast to the desired output type ", out.scalar_type());
  tiny::DType comp = to_engine(c10::toRealValueType(common));
  tiny::Shape shape = broadcast_shape({a, b});
  tiny::DType acc = tiny::compute_dtype(comp);  // complex<Half> multiplies in float
  auto [ar, ai] = complex_parts(a, acc, shape);
  auto [br, bi] = complex_parts(b, acc, shape);
  tiny::DType oc = to_engine(c10::toRealValueType(out.scalar_type()));
  return write_complex(out, (ar * br - ai * bi).cast(oc), (ar * bi + ai * br).cast(oc), shape, {a, b});
}

at::Tensor complex_mul(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor& on_tiny = a.device().is_cpu() ? b : a;  // the other may be a 0-d CPU scalar
  at::Tensor out = at::empty({0}, on_tiny.options().dtype(at::result_type(a, b)));
  return complex_mul_out(a, b, out);
}

// z / |z|, 0 at 0
at::Tensor& complex_sgn_out(const at::Tensor& self, at::Tensor& out) {
  TinyOp op("sgn");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.dtype(),
              ", but got ", out.dtype(), " instead");
  tiny::DType comp = to_engine(c10::toRealValueType(self.scalar_type()));
  tiny::Shape shape = to_shape(self.sizes());
  auto [re, im] = complex_parts(self, comp, shape);
  // 16-bit components compute in float, as the CPU's complex<Half> does
  tiny::DType acc = tiny::compute_dtype(comp);
  T r = re.cast(acc), i = im.cast(acc);
  T mag = r.binary(Op::Hypot, i);
  T zero = eq(mag, 0.0);
  T safe = where(zero, 1.0, mag);
  return write_complex(out, where(zero, 0.0, r / safe).cast(comp), where(zero, 0.0, i / safe).cast(comp), shape, {self});
}

namespace {
// re - i im; a real tensor is copied
at::Tensor& conj_physical_into(const at::Tensor& self, at::Tensor& out) {
  TinyOp op("conj_physical");
  if (!self.is_complex()) return assign_out(out, read(self), self.scalar_type(), {self});
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.dtype(),
              ", but got ", out.dtype(), " instead");
  tiny::Shape shape = to_shape(self.sizes());
  auto [re, im] = complex_parts(self, to_engine(c10::toRealValueType(self.scalar_type())), shape);
  return write_complex(out, re, -im, shape, {self});
}
at::Tensor& conj_physical_inplace(at::Tensor& self) { return self.is_complex() ? conj_physical_into(self, self) : self; }
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("conj_physical.out", conj_physical_into);
  m.impl("conj_physical_", conj_physical_inplace);
  m.impl("complex.out", complex_out);
  m.impl("polar.out", polar_out);
}

TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", copy_from_with_bits); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", copy_from_with_bits); }

}  // namespace torch_tiny
