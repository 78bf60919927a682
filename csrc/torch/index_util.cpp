#include "torch/index_util.h"

#include <cmath>

#include "engine/schedule/trace.h"
#include "torch/storage_cell.h"
#include "torch/tensor_value.h"

namespace torch_tiny {

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;
using tiny::ReduceOp;

HostIndex host_index(const at::Tensor& index) {
  HostIndex h;
  h.numel = index.numel();
  if (index.device().type() == c10::DeviceType::CPU) {
    h.keep = index.to(c10::kLong).contiguous();
    h.value = from_cpu(h.keep);
    h.data = h.keep.data_ptr<int64_t>();
    return h;
  }
  h.value = read(index).cast(DType::Int64);
  if (h.numel == 0) return h;
  // The bounds check needs the values: compute them now (a sync point when
  // the index is still lazy) and copy them to the host.
  h.keep = at::empty({h.numel}, at::TensorOptions().dtype(at::kLong));
  tiny::RealizeCause cause("index values checked on the host (bounds, negative indices)");
  h.value.copy_to_host(h.keep.data_ptr());
  h.data = h.keep.data_ptr<int64_t>();
  return h;
}

const int64_t* find_bad(const HostIndex& idx, const std::function<bool(int64_t)>& bad) {
  for (int64_t i = 0; i < idx.numel; i++)
    if (bad(idx.data[i])) return idx.data + i;
  return nullptr;
}

T storage_value(const at::Tensor& t) { return cell_of(t.storage()).value_as(to_engine(t.scalar_type())); }

void scatter_storage(const at::Tensor& dst, const T& offsets, const T& values, bool accumulate, tiny::ReduceOp op) {
  int64_t n = offsets.numel();
  if (n == 0) return;
  StorageCell& cell = cell_of(dst.storage());
  T base = cell.value_as(to_engine(dst.scalar_type()));
  cell.set_value(base.scatter(offsets.reshape({n}), values.reshape({n}), accumulate, op));
}

T gather_storage(const at::Tensor& t, const T& offsets) { return storage_value(t).gather(offsets); }

T i64(int64_t v, const tiny::Shape& shape) { return T::full(shape, tiny::Scalar::from_int(v), DType::Int64); }

OffsetSum::OffsetSum(tiny::Shape shape, int64_t base) : shape_(std::move(shape)), base_(base) {}

void OffsetSum::add_axis(int axis, int64_t stride) {
  int64_t n = shape_[size_t(axis)];
  if (n <= 1 || stride == 0) return;
  T pos = T::arange(n, tiny::Scalar::from_int(0), tiny::Scalar::from_int(stride), DType::Int64);
  add(place_dims(pos, int(shape_.size()), axis), 1);
}

void OffsetSum::add(const T& t, int64_t stride) {
  if (stride == 0) return;
  T term = t.cast(DType::Int64);
  if (stride != 1) term = term.binary(Op::Mul, i64(stride, term.shape()));
  term = term.expand(shape_);
  acc_ = acc_.defined() ? acc_.binary(Op::Add, term) : term;
}

T OffsetSum::value() const {
  if (!acc_.defined()) return i64(base_, shape_);
  if (base_ == 0) return acc_;
  return acc_.binary(Op::Add, i64(base_, shape_));
}

T wrap_negative(const T& t, int64_t size) {
  T zero = i64(0, t.shape());
  return T::where(t.binary(Op::CmpLt, zero), t.binary(Op::Add, i64(size, t.shape())), t);
}

T place_dims(const T& t, int rank, int at) {
  tiny::Shape s(size_t(rank), 1);
  for (int i = 0; i < t.ndim(); i++) s[size_t(at + i)] = t.shape()[size_t(i)];
  return t.reshape(s);
}

// The value a reduction starts from where include_self=False drops self.
tiny::Scalar reduce_identity(at::native::ReductionType r, c10::ScalarType st) {
  using R = at::native::ReductionType;
  bool f = c10::isFloatingType(st);
  switch (r) {
    case R::PROD: return tiny::Scalar::from_int(1);
    case R::MAX:
      if (f) return tiny::Scalar::from_double(-INFINITY);
      if (st == c10::kBool) return tiny::Scalar::from_bool(false);
      return tiny::Scalar::from_int(st == c10::kByte ? 0 : st == c10::kChar ? -128 : st == c10::kShort ? -32768
                                    : st == c10::kInt ? INT32_MIN : INT64_MIN);
    case R::MIN:
      if (f) return tiny::Scalar::from_double(INFINITY);
      if (st == c10::kBool) return tiny::Scalar::from_bool(true);
      return tiny::Scalar::from_int(st == c10::kByte ? 255 : st == c10::kChar ? 127 : st == c10::kShort ? 32767
                                    : st == c10::kInt ? INT32_MAX : INT64_MAX);
    default: return tiny::Scalar::from_int(0);
  }
}
ReduceOp engine_reduce(at::native::ReductionType r) {
  using R = at::native::ReductionType;
  switch (r) {
    case R::PROD: return ReduceOp::Prod;
    case R::MAX: return ReduceOp::Max;
    case R::MIN: return ReduceOp::Min;
    default: return ReduceOp::Sum;
  }
}

// Shared with the scatter family: reduces `values` into `dst` (holding self)
// at storage `offsets`; `rm_offsets` are the same elements' row-major
// positions in dst (for mean's counts).
void reduce_into(const at::Tensor& dst, const T& offsets, const T& rm_offsets, const T& values,
                 at::native::ReductionType r, bool include_self) {
  using R = at::native::ReductionType;
  c10::ScalarType st = dst.scalar_type();
  DType dt = to_engine(st);
  if (!include_self) scatter_storage(dst, offsets, T::full(offsets.shape(), reduce_identity(r, st).cast(dt), dt), false);
  scatter_storage(dst, offsets, values, true, engine_reduce(r));
  if (r != R::MEAN) return;
  int64_t n = dst.numel(), m = rm_offsets.numel();
  T count = T::full({n}, tiny::Scalar::from_int(include_self ? 1 : 0), dt);
  count = count.scatter(rm_offsets.reshape({m}), T::full({m}, tiny::Scalar::from_int(1), dt), true, ReduceOp::Sum);
  T zero = T::full({n}, tiny::Scalar::from_int(0), dt);
  count = T::where(count.binary(Op::CmpEq, zero), T::full({n}, tiny::Scalar::from_int(1), dt), count);
  T sum = read(dst).reshape({n});
  T mean = c10::isFloatingType(st) ? sum.binary(Op::Div, count) : sum.binary(Op::FloorDiv, count);
  write(dst, mean.reshape(to_shape(dst.sizes())));
}


}  // namespace torch_tiny
