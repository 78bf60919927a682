#include "torch/pointwise.h"

#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/any.h>
#include <ATen/ops/from_blob.h>

#include <cmath>

#include "torch/storage_cell.h"

namespace torch_tiny::pw {

T cnst(const T& like, double v) {
  tiny::DType dt = like.dtype();
  tiny::Scalar s = tiny::is_float(dt) ? tiny::Scalar::from_double(v) : tiny::Scalar::from_int(int64_t(v));
  return T::full(like.shape(), s, dt);
}

T cnst(const T& like, const c10::Scalar& s) { return T::full(like.shape(), to_engine(s), like.dtype()); }
T user_scalar(const T& like, const c10::Scalar& s) {
  return is_float(like.dtype()) ? T::param(like.shape(), to_engine(s), like.dtype()) : cnst(like, s);
}

T lerp_formula(const T& s, const T& e, const T& w) {
  const tiny::Node* scalar = w.node().get();
  if (scalar->op == Op::Cast) scalar = scalar->src[0].get();  // a 16-bit weight widened to float32
  if (scalar->op == Op::Param || scalar->op == Op::Const) {
    if (std::abs(scalar->args.value.to_double()) < 0.5) return s + w * (e - s);
    return e - (e - s) * (1.0 - w);
  }
  return where(lt(un(Op::Abs, w), 0.5), s + w * (e - s), e - (e - s) * (1.0 - w));
}

c10::ScalarType opmath(c10::ScalarType t) {
  return t == c10::kHalf || t == c10::kBFloat16 ? c10::kFloat : t;
}

void not_implemented_for(const char* kernel, c10::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, '"', kernel, "\" not implemented for '", c10::toString(t), "'");
}

void check_dtype(c10::ScalarType t, unsigned deny, const char* kernel) {
  bool bad = (t == c10::kBool && (deny & kNoBool)) ||
             (c10::isIntegralType(t, /*includeBool=*/false) && (deny & kNoInt)) ||
             (c10::isFloatingType(t) && (deny & kNoFloat));
  if (bad) not_implemented_for(kernel, t);
}

void exact_out(const at::Tensor& out, c10::ScalarType computed) {
  TORCH_CHECK(out.scalar_type() == computed, "Found dtype ", out.scalar_type(), " but expected ", computed);
}

void check_convertible(const c10::Scalar& s, c10::ScalarType t) {
  AT_DISPATCH_ALL_TYPES_AND3(c10::kHalf, c10::kBFloat16, c10::kBool, t, "check_convertible", [&] {
    (void)s.to<scalar_t>();
  });
}

namespace {
[[noreturn]] void zero_division() { TORCH_CHECK(false, "ZeroDivisionError"); }
}  // namespace

void check_int_divisor(const at::Tensor& d, c10::ScalarType common) {
  if (!c10::isIntegralType(common, /*includeBool=*/true) || !d.defined() || d.numel() == 0) return;
  if (d.device().type() == c10::DeviceType::CPU) {
    if ((d.to(common) == 0).any().item<bool>()) zero_division();
    return;
  }
  T v = read(d);
  if (v.node()->op == Op::Const) {
    if (v.node()->args.value.cast(to_engine(common)).to_int() == 0) zero_division();
    return;
  }
  // Already computed (possibly behind a reshape): copy the buffer to the
  // host and look; no kernel runs.
  StorageCell& cell = cell_of(d.storage());
  T flat = cell.value_as(to_engine(d.scalar_type()));
  if (!flat.defined()) return;
  const tiny::Node* n = flat.node().get();
  while (!n->realized() && n->op == Op::View && n->args.st.is_contiguous() && n->src[0]->dtype == n->dtype)
    n = n->src[0].get();
  tiny::BufferRef buf = n->realized();
  if (!buf || buf->numel() != flat.numel() || buf->dtype() != flat.dtype()) return;
  at::Tensor host = at::empty({flat.numel()}, d.options().device(c10::kCPU));
  buf->copy_out(host.data_ptr(), buf->nbytes());
  host = host.as_strided(d.sizes(), d.strides(), d.storage_offset());
  if ((host.to(common) == 0).any().item<bool>()) zero_division();
}

}  // namespace torch_tiny::pw
