// The storage-backed minimum every PrivateUse1 backend needs: creation,
// views (ATen's own view kernels over our storages), resize/set_, copies
// between devices and scalar reads.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <torch/library.h>

#include "engine/schedule/trace.h"
#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/storage_cell.h"
#include "torch/storage_only.h"
#include "torch/tensor_value.h"

namespace torch_tiny {

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
  StorageCell& old = cell_of(storage);
  size_t oldsize = old.nbytes();
  c10::DataPtr dp = tiny_allocator()->allocate(newsize);
  auto* ctx = dp.get_context();
  // Carry the old bytes over: keep the cell's dtype when it divides both sizes.
  tiny::Tensor v = old.raw_value();
  if (v.defined() && newsize > 0 && oldsize > 0) {
    tiny::DType dt = v.dtype();
    size_t item = tiny::itemsize(dt);
    if (newsize % item || oldsize % item) {
      dt = tiny::DType::UInt8;
      item = 1;
      v = old.value_as(dt);
    }
    int64_t n_old = int64_t(oldsize / item), n_new = int64_t(newsize / item);
    if (n_new <= n_old) v = v.shrink({{0, n_new}});
    else v = v.pad({{0, n_new - n_old}});
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(dp));
    cell_of(storage).set_value(v);
  } else {
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(dp));
  }
  (void)ctx;
  storage.unsafeGetStorageImpl()->set_nbytes(newsize);
}

namespace {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_device(device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  return at::detail::empty_generic(size, tiny_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_device(device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  return at::detail::empty_strided_generic(size, stride, tiny_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

const at::Tensor& resize_impl(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  auto* impl = self.unsafeGetTensorImpl();
  TORCH_CHECK(!self.is_inference() || true);
  for (auto s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (format && *format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*format);
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                   self.storage_offset());
  if (self.numel() > 0 && needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "Attempted to set the storage of a tensor on device \"", self.device(), "\" to a storage on different device \"",
              source.device(), "\".  This is no longer allowed; the devices must match.");
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "inconsistent size/stride lengths");
    impl->set_sizes_and_strides(size, stride);
  }
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(), offset);
  if (self.numel() > 0 && needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = int64_t(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tiny_allocator(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}


at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TinyOp op("copy_");
  if (dst.numel() == 0) return dst;
  TORCH_CHECK_NOT_IMPLEMENTED(!dst.is_conj() && !dst.is_neg(),
                              "tiny: copying into a conjugate or negative view is not supported");
  if (self.device().type() == c10::DeviceType::PrivateUse1 && self.is_neg() && !self.is_complex()) {
    // a real negative view (the imaginary part of a conjugate): resolved here
    at::Tensor plain = at::_neg_view(self);
    return copy_from(wrap(read(plain).unary(tiny::Op::Neg), self.scalar_type()), dst, non_blocking);
  }
  if (dst.device().type() == c10::DeviceType::CPU) {
    tiny::RealizeCause cause("a copy to the host: .cpu() / .tolist() / .numpy() / printing");
    if (is_storage_only(self.scalar_type())) {
      // through a host tensor of self's dtype, copied as its engine view
      at::Tensor plain = strip_math_bits(self);
      at::Tensor host = at::empty(self.sizes(), plain.options().device(c10::kCPU));
      copy_to_cpu(engine_view(plain), engine_view(host));
      if (self.is_neg()) host = at::_neg_view(host);
      if (self.is_conj()) host = at::_conj(host);
      dst.copy_(host);  // the CPU resolves the bits
    } else {
      copy_to_cpu(self, dst);
    }
    return dst;
  }
  TORCH_CHECK(dst.device().type() == c10::DeviceType::PrivateUse1, "tiny: cannot copy to ", dst.device());
  at::assert_no_internal_overlap(dst);
  if (is_storage_only(dst.scalar_type()) || is_storage_only(self.scalar_type())) {
    at::Tensor dv = engine_view(dst);
    tiny::Tensor v;
    if (self.device().type() == c10::DeviceType::CPU) {
      at::Tensor src = self.resolve_conj().resolve_neg().to(dst.scalar_type()).expand(dst.sizes()).contiguous();
      v = from_cpu(engine_view(src));
    } else {
      TORCH_CHECK(self.device().type() == c10::DeviceType::PrivateUse1, "tiny: cannot copy from ", self.device());
      v = convert_for_storage_only(self, dst.scalar_type());
    }
    write(dv, broadcast_to(v.cast(to_engine(dv.scalar_type())), to_shape(dv.sizes())));
    return dst;
  }
  tiny::Tensor v;
  if (self.device().type() == c10::DeviceType::CPU) {
    at::Tensor src = self;
    if (!is_supported(src.scalar_type()) || src.scalar_type() != dst.scalar_type()) src = src.to(dst.scalar_type());
    v = from_cpu(src);
  } else {
    TORCH_CHECK(self.device().type() == c10::DeviceType::PrivateUse1, "tiny: cannot copy from ", self.device());
    v = read(self);
  }
  v = broadcast_to(v.cast(to_engine(dst.scalar_type())), to_shape(dst.sizes()));
  write(dst, v);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_impl(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  at::Tensor host = at::empty(self.sizes(), self.options().device(c10::kCPU));
  tiny::RealizeCause cause(".item() / bool() / int() / float()");
  copy_to_cpu(self, host);
  return host.item();
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  TinyOp op("fill_");
  if (self.is_complex()) {  // storage-only: both components through the real view
    tiny::Shape shape = to_shape(self.sizes());
    tiny::DType comp = to_engine(c10::toRealValueType(self.scalar_type()));
    c10::complex<double> z = value.toComplexDouble();
    write(engine_view(self), interleave(tiny::Tensor::full(shape, tiny::Scalar::from_double(z.real()), comp),
                                        tiny::Tensor::full(shape, tiny::Scalar::from_double(z.imag()), comp)));
    return self;
  }
  write(self, tiny::Tensor::full(to_shape(self.sizes()), to_engine(value), to_engine(self.scalar_type())));
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (value.device().type() == c10::DeviceType::CPU) return fill_scalar(self, value.item());
  TinyOp op("fill_");
  at::assert_no_internal_overlap(self);
  tiny::Tensor v = read(value).cast(to_engine(self.scalar_type()));
  write(self, broadcast_to(v, to_shape(self.sizes())));
  return self;
}

at::Tensor& zero_impl(at::Tensor& self) { return fill_scalar(self, 0); }

// Whether `self.data = from` may swap the tensor's contents in place (a
// TensorImpl shallow copy), as it may between CPU and CUDA tensors: then
// `module.to("tiny")` keeps its Parameter objects (tied weights stay tied, an
// optimizer made before the move keeps training the model). Both must be
// plain dense tensors of the CPU or tiny.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_cpu_or_tiny = [](const at::Tensor& t) {
    c10::DispatchKeySet ks = t.key_set();
    return ks.has(c10::DispatchKey::Dense) &&
           (t.device().type() == c10::DeviceType::CPU || t.device().type() == c10::DeviceType::PrivateUse1) &&
           t.unsafeGetTensorImpl()->layout() == c10::kStrided;
  };
  if (dense_cpu_or_tiny(self) && dense_cpu_or_tiny(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", resize_impl);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_impl);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace torch_tiny
