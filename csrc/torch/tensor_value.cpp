#include "torch/tensor_value.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DispatchKeySet.h>

#include "engine/runtime/counters.h"
#include "torch/storage_cell.h"

namespace torch_tiny {

tiny::DType to_engine(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: return tiny::DType::Bool;
    case c10::kByte: return tiny::DType::UInt8;
    case c10::kChar: return tiny::DType::Int8;
    case c10::kShort: return tiny::DType::Int16;
    case c10::kInt: return tiny::DType::Int32;
    case c10::kLong: return tiny::DType::Int64;
    case c10::kHalf: return tiny::DType::Float16;
    case c10::kBFloat16: return tiny::DType::BFloat16;
    case c10::kFloat: return tiny::DType::Float32;
    case c10::kDouble: return tiny::DType::Float64;
    default: TORCH_CHECK_NOT_IMPLEMENTED(false, "tiny: dtype ", t, " is not supported on the tiny device");
  }
}

bool is_supported(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: case c10::kByte: case c10::kChar: case c10::kShort: case c10::kInt: case c10::kLong:
    case c10::kHalf: case c10::kBFloat16: case c10::kFloat: case c10::kDouble:
      return true;
    default:
      return false;
  }
}

c10::ScalarType to_aten(tiny::DType t) {
  static const c10::ScalarType map[] = {c10::kBool, c10::kByte, c10::kChar, c10::kShort, c10::kInt,
                                        c10::kLong, c10::kHalf, c10::kBFloat16, c10::kFloat, c10::kDouble};
  return map[static_cast<int>(t)];
}

tiny::Scalar to_engine(const c10::Scalar& s) {
  if (s.isBoolean()) return tiny::Scalar::from_bool(s.toBool());
  if (s.isIntegral(false)) return tiny::Scalar::from_int(s.toLong());
  TORCH_CHECK(!s.isComplex(), "tiny: complex scalars are not supported");
  return tiny::Scalar::from_double(s.toDouble());
}

tiny::Shape to_shape(c10::IntArrayRef s) { return tiny::Shape(s.begin(), s.end()); }

tiny::Tensor read(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "tiny: expected a tiny tensor, got ", t.device());
  tiny::DType dt = to_engine(t.scalar_type());
  StorageCell& cell = cell_of(t.storage());
  tiny::Shape sizes = to_shape(t.sizes());
  if (t.numel() == 0) return tiny::Tensor::full(sizes, tiny::Scalar::from_int(0), dt);
  int64_t offset = t.storage_offset();
  // The whole storage in order: the value itself.
  if (offset == 0 && t.is_contiguous() && size_t(t.numel()) * tiny::itemsize(dt) == cell.nbytes())
    return cell.read_whole(dt, sizes);
  tiny::Tensor flat = cell.value_as(dt);
  if (offset == 0 && t.is_contiguous() && t.numel() == flat.numel()) return flat.reshape(sizes);
  return flat.as_strided(sizes, to_shape(t.strides()), offset);
}

void write(const at::Tensor& t, const tiny::Tensor& v) {
  TORCH_INTERNAL_ASSERT(v.shape() == to_shape(t.sizes()), "tiny: write shape mismatch");
  tiny::DType dt = to_engine(t.scalar_type());
  TORCH_INTERNAL_ASSERT(v.dtype() == dt, "tiny: write dtype mismatch");
  if (t.numel() == 0) return;
  StorageCell& cell = cell_of(t.storage());
  int64_t n = int64_t(cell.nbytes() / tiny::itemsize(dt));
  if (t.storage_offset() == 0 && t.is_contiguous() && t.numel() == n &&
      size_t(n) * tiny::itemsize(dt) == cell.nbytes()) {
    cell.set_whole(v);  // covers the storage: replace, no kernel
    return;
  }
  tiny::Tensor base = cell.value_as(dt);
  cell.set_value(base.write_strided(to_shape(t.sizes()), to_shape(t.strides()), t.storage_offset(), v));
}

tiny::Tensor from_cpu(const at::Tensor& cpu) {
  at::Tensor c = cpu.contiguous();
  return tiny::Tensor::from_host(c.data_ptr(), to_shape(c.sizes()), to_engine(c.scalar_type()));
}

at::Tensor wrap(const tiny::Tensor& v, c10::ScalarType dtype) {
  tiny::Shape s = v.shape();
  at::Tensor out = at::detail::empty_generic(c10::IntArrayRef(s), tiny_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, std::nullopt);
  tiny::Tensor val = v.dtype() == to_engine(dtype) ? v : v.cast(to_engine(dtype));
  write(out, val);
  return out;
}

at::Tensor wrap(const tiny::Tensor& v) { return wrap(v, to_aten(v.dtype())); }

namespace {
// Every pending cell's value, and `also` where given, in one schedule; then the cells drop the
// whole values their stored flat ones made redundant.
void realize_pending(const tiny::Tensor* also = nullptr) {
  std::vector<tiny::Tensor> all = pending_cell_values();
  if (also) all.push_back(*also);
  tiny::Tensor::realize_all(all);
  drop_realized_wholes();
}
}  // namespace

void launch_pending() { realize_pending(); }

void synchronize() {
  launch_pending();
  tiny::compute_device().synchronize();  // and wait for what the device still runs
}

void copy_to_cpu(const at::Tensor& self, const at::Tensor& dst) {
  if (self.numel() == 0) return;
  std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
  tiny::DType dt = to_engine(self.scalar_type());
  StorageCell& cell = cell_of(self.storage());
  int64_t n = int64_t(cell.nbytes() / tiny::itemsize(dt));
  auto cpu_opts = self.options().device(c10::kCPU);
  // Straight into dst when it is laid out as the bytes come; else through a host tensor.
  bool direct = dst.is_contiguous() && dst.scalar_type() == self.scalar_type() && dst.sizes() == self.sizes();
  if (self.numel() * 4 < n) {
    // A small window of a big storage: realize just the window (row-major).
    tiny::Tensor v = read(self);
    realize_pending(&v);
    at::Tensor host = direct ? dst : at::empty(self.sizes(), cpu_opts);
    v.copy_to_host(host.data_ptr());
    if (!direct) dst.copy_(host);
    return;
  }
  tiny::Tensor v = cell.value_as(dt);
  realize_pending(&v);
  size_t item = tiny::itemsize(dt);
  if (self.is_contiguous()) {  // the bytes of the window, in order
    at::Tensor host = direct ? dst : at::empty(self.sizes(), cpu_opts);
    v.copy_to_host(host.data_ptr(), size_t(self.storage_offset()) * item, size_t(self.numel()) * item);
    if (!direct) dst.copy_(host);
    return;
  }
  at::Tensor flat = at::empty({n}, cpu_opts);
  v.copy_to_host(flat.data_ptr());
  dst.copy_(flat.as_strided(self.sizes(), self.strides(), self.storage_offset()));
}

}  // namespace torch_tiny
