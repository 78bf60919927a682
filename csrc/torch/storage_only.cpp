#include "torch/storage_only.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/util/Exception.h>

#include "torch/elementwise.h"
#include "torch/tensor_value.h"

namespace torch_tiny {

namespace {
bool is_unsigned_wide(c10::ScalarType t) { return t == c10::kUInt16 || t == c10::kUInt32 || t == c10::kUInt64; }
c10::ScalarType signed_of(c10::ScalarType t) {
  return t == c10::kUInt16 ? c10::kShort : t == c10::kUInt32 ? c10::kInt : c10::kLong;
}
[[noreturn]] void unsupported(c10::ScalarType from, c10::ScalarType to) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tiny: converting ", from, " to ", to, " is not supported on the tiny device");
}
tiny::Tensor component(const tiny::Tensor& pairs, int64_t which) {
  tiny::Shape s = pairs.shape();
  tiny::Ranges r;
  for (size_t i = 0; i + 1 < s.size(); i++) r.push_back({0, s[i]});
  r.push_back({which, which + 1});
  s.pop_back();
  return pairs.shrink(r).reshape(s);
}
}  // namespace

bool is_storage_only(c10::ScalarType t) { return c10::isComplexType(t) || is_unsigned_wide(t); }

at::Tensor engine_view(const at::Tensor& t) {
  c10::ScalarType st = t.scalar_type();
  if (c10::isComplexType(st)) {
    TORCH_CHECK_NOT_IMPLEMENTED(!t.is_conj() && !t.is_neg(),
                                "tiny: conjugated complex views are not supported on the tiny device");
    return at::native::view_as_real(t);
  }
  if (is_unsigned_wide(st)) return at::native::view_dtype(t, signed_of(st));
  return t;
}

tiny::Tensor interleave(const tiny::Tensor& re, const tiny::Tensor& im) {
  tiny::Shape s = re.shape();
  s.push_back(1);
  tiny::Ranges lo, hi;
  for (size_t i = 0; i + 1 < s.size(); i++) {
    lo.push_back({0, 0});
    hi.push_back({0, 0});
  }
  lo.push_back({0, 1});
  hi.push_back({1, 0});
  return re.reshape(s).pad(lo).binary(tiny::Op::Add, im.reshape(s).pad(hi));
}

at::Tensor strip_math_bits(const at::Tensor& t) {
  at::Tensor p = t;
  if (p.is_conj()) p = at::_conj(p);  // toggles the bit: a plain alias
  if (p.is_neg()) p = at::_neg_view(p);
  return p;
}

at::Tensor& write_complex(at::Tensor& out, const tiny::Tensor& re, const tiny::Tensor& im, const tiny::Shape& shape,
                          const std::vector<at::Tensor>& inputs) {
  at::native::resize_output(out, c10::IntArrayRef(shape));
  at::assert_no_internal_overlap(out);
  for (const auto& in : inputs)
    if (in.device() == out.device()) at::assert_no_partial_overlap(out, in);
  if (out.numel() == 0) return out;
  write(engine_view(out), interleave(re, im));
  return out;
}

std::pair<tiny::Tensor, tiny::Tensor> complex_parts(const at::Tensor& t, tiny::DType comp, const tiny::Shape& shape) {
  tiny::Tensor re, im;
  if (!t.is_complex()) {
    re = t.device().is_cpu() ? from_cpu(t.to(to_aten(comp))) : read(t).cast(comp);
    im = tiny::Tensor::full(re.shape(), tiny::Scalar::from_int(0), comp);
  } else {
    tiny::Tensor pairs;
    if (t.device().is_cpu()) {
      TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, tiny:0 and cpu!");
      pairs = from_cpu(at::native::view_as_real(t.resolve_conj().resolve_neg()));
    } else {
      pairs = read(engine_view(strip_math_bits(t)));
    }
    pairs = pairs.cast(comp);
    re = component(pairs, 0);
    im = component(pairs, 1);
    if (!t.device().is_cpu()) {  // (resolved on the host for a CPU scalar)
      if (t.is_neg()) {
        re = re.unary(tiny::Op::Neg);
        im = im.unary(tiny::Op::Neg);
      }
      if (t.is_conj()) im = im.unary(tiny::Op::Neg);
    }
  }
  return {broadcast_to(re, shape), broadcast_to(im, shape)};
}

tiny::Tensor convert_for_storage_only(const at::Tensor& self, c10::ScalarType dst) {
  c10::ScalarType src = self.scalar_type();
  if (c10::isComplexType(dst)) {
    tiny::DType comp = to_engine(c10::toRealValueType(dst));
    if (c10::isComplexType(src)) {
      auto [re, im] = complex_parts(self, comp, to_shape(self.sizes()));
      return interleave(re, im);
    }
    if (is_storage_only(src)) unsupported(src, dst);
    tiny::Tensor re = read(self).cast(comp);
    return interleave(re, tiny::Tensor::full(re.shape(), tiny::Scalar::from_int(0), comp));
  }
  if (is_unsigned_wide(dst)) {
    tiny::DType bits = to_engine(signed_of(dst));
    // the same dtype, or integers and bools: two's complement makes the conversion a cast of the bits
    if (src == dst) return read(engine_view(self));
    if (is_storage_only(src) || c10::isFloatingType(src)) unsupported(src, dst);
    return read(self).cast(bits);
  }
  // storage-only source, engine destination
  if (c10::isComplexType(src)) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
    auto parts = complex_parts(self, to_engine(c10::toRealValueType(src)), to_shape(self.sizes()));
    return parts.first.cast(to_engine(dst));
  }
  // unsigned -> a narrower or equally wide integer, or bool: the bits' cast
  if (c10::isIntegralType(dst, true) && (dst == c10::kBool || c10::elementSize(dst) <= c10::elementSize(src)))
    return read(engine_view(self)).cast(to_engine(dst));
  unsupported(src, dst);
}

}  // namespace torch_tiny
