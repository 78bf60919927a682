#include "torch/elementwise.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>

#include "torch/tensor_value.h"

namespace torch_tiny {

tiny::Tensor broadcast_to(tiny::Tensor v, const tiny::Shape& shape) {
  if (v.shape() == shape) return v;
  tiny::Shape s(shape.size() - v.shape().size(), 1);
  s.insert(s.end(), v.shape().begin(), v.shape().end());
  return v.reshape(s).expand(shape);
}

tiny::Tensor scalar_operand(const c10::Scalar& s, c10::ScalarType dt, const tiny::Shape& shape) {
  if (c10::isFloatingType(dt)) return tiny::Tensor::param(shape, to_engine(s), to_engine(dt));
  return tiny::Tensor::full(shape, to_engine(s), to_engine(dt));
}

namespace {
// The value of a 0-d CPU tensor (a Python number ATen wrapped): read directly for the types
// Python numbers wrap to, as t.item() would go through the dispatcher (a tenth of an add's cost).
c10::Scalar cpu_scalar(const at::Tensor& t) {
  if (t.is_neg() || t.is_conj()) return t.item();  // lazy views: item() applies them
  switch (t.scalar_type()) {
    case c10::kDouble: return *t.const_data_ptr<double>();
    case c10::kLong: return *t.const_data_ptr<int64_t>();
    case c10::kBool: return *t.const_data_ptr<bool>();
    case c10::kFloat: return *t.const_data_ptr<float>();
    default: return t.item();
  }
}
}  // namespace

tiny::Tensor operand(const at::Tensor& t, c10::ScalarType dt, const tiny::Shape& shape) {
  if (t.device().type() == c10::DeviceType::CPU) {
    TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, tiny:0 and cpu!");
    return scalar_operand(cpu_scalar(t), dt, shape);
  }
  return broadcast_to(read(t).cast(to_engine(dt)), shape);
}

tiny::Shape broadcast_shape(std::initializer_list<std::reference_wrapper<const at::Tensor>> ts) {
  c10::DimVector shape;
  bool first = true;
  for (const at::Tensor& t : ts) {
    if (!t.defined()) continue;
    if (first) {
      shape = c10::DimVector(t.sizes());
      first = false;
    } else if (t.dim() != 0 && t.sizes() != c10::IntArrayRef(shape)) {  // 0-d and equal shapes change nothing
      shape = at::infer_size_dimvector(shape, t.sizes());
    }
  }
  return tiny::Shape(shape.begin(), shape.end());
}

bool is_float_type(c10::ScalarType t) { return c10::isFloatingType(t); }

c10::ScalarType float_type_for(c10::ScalarType t) {
  return c10::isIntegralType(t, /*includeBool=*/true) ? c10::typeMetaToScalarType(c10::get_default_dtype()) : t;
}

at::Tensor make_result(const tiny::Tensor& v, c10::ScalarType dtype) { return wrap(v, dtype); }

namespace {
void check_overlap(const at::Tensor& out, const std::vector<at::Tensor>& inputs) {
  at::assert_no_internal_overlap(out);
  for (auto& in : inputs)
    if (in.defined() && in.device() == out.device()) at::assert_no_partial_overlap(out, in);
}
}  // namespace

at::Tensor& assign_inplace(at::Tensor& self, const tiny::Tensor& v, c10::ScalarType computed,
                           const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(c10::canCast(computed, self.scalar_type()), "result type ", computed,
              " can't be cast to the desired output type ", self.scalar_type());
  tiny::Shape shape = to_shape(self.sizes());
  TORCH_CHECK(v.shape() == shape, "output with shape ", self.sizes(), " doesn't match the broadcast shape ",
              c10::IntArrayRef(v.shape()));
  check_overlap(self, inputs);
  write(self, v.cast(to_engine(self.scalar_type())));
  return self;
}

at::Tensor& assign_out(at::Tensor& out, const tiny::Tensor& v, c10::ScalarType computed,
                       const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(c10::canCast(computed, out.scalar_type()), "result type ", computed,
              " can't be cast to the desired output type ", out.scalar_type());
  TORCH_CHECK(out.device().type() == c10::DeviceType::PrivateUse1,
              "Expected out tensor to have device tiny:0, but got ", out.device(), " instead");
  at::native::resize_output(out, c10::IntArrayRef(v.shape()));
  check_overlap(out, inputs);
  write(out, v.cast(to_engine(out.scalar_type())));
  return out;
}

}  // namespace torch_tiny
