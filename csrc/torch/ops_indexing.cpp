// Advanced indexing and the index_* family: index.Tensor, index_put_,
// index_select, index_add/copy/fill/reduce, take/put_, masked_scatter_ and
// embedding's backward.
//
// Reads gather from the storage at int64 element offsets computed with
// ordinary engine arithmetic (coordinates times strides), so an indexing read
// fuses with the math that consumes it. Writes scatter into the storage.
// Indices are bounds-checked on the host with the CPU's messages: free for CPU
// or already computed indices, a realize (a sync point) for lazy ones.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/ReductionType.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/index_reduce_meta.h>
#include <torch/library.h>

#include <sstream>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;
using tiny::ReduceOp;
using IndexList = c10::List<std::optional<at::Tensor>>;

int64_t size_of(const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }
int64_t stride_of(const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.stride(d); }

// Storage offsets of `t`'s elements at row-major positions `linear` (int64).
T linear_offsets(const at::Tensor& t, const T& linear) {
  if (t.is_contiguous()) {
    return t.storage_offset() == 0 ? linear : linear.binary(Op::Add, i64(t.storage_offset(), linear.shape()));
  }
  T acc = i64(t.storage_offset(), linear.shape());
  int64_t inner = 1;
  for (int64_t d = t.dim() - 1; d >= 0; d--) {
    int64_t n = t.size(d);
    if (n > 1) {
      T c = linear;
      if (inner > 1) c = c.binary(Op::Div, i64(inner, linear.shape()));
      if (d > 0) c = c.binary(Op::Mod, i64(n, linear.shape()));
      acc = acc.binary(Op::Add, c.binary(Op::Mul, i64(t.stride(d), linear.shape())));
    }
    inner *= n;
  }
  return acc;
}

// ---------------------------------------------------------------- advanced indexing

std::string shapes_str(const std::vector<at::Tensor>& ts) {
  std::ostringstream os;
  bool first = true;
  for (auto& t : ts) {
    if (!t.defined()) continue;
    if (!first) os << ", ";
    os << t.sizes();
    first = false;
  }
  return os.str();
}

struct Advanced {
  tiny::Shape result;  // the indexing result's shape
  T offsets;           // storage offsets of self's elements, result-shaped
};

// The elements `self[indices]` addresses, as ATen's advanced indexing defines
// them: bool masks become their nonzero coordinates, index tensors broadcast
// together, and their dims replace the indexed dims in place when those are
// adjacent, or go first otherwise.
Advanced advanced_index(const at::Tensor& self, const IndexList& indices) {
  TORCH_CHECK_INDEX(indices.size() <= size_t(self.dim()), "too many indices for tensor of dimension ", self.dim(),
                    " (got ", indices.size(), ")");
  at::native::checkIndexTensorTypes(indices, /*allow_int=*/true);
  std::vector<at::Tensor> idx = at::native::expandTensors(self, indices);
  TORCH_CHECK_INDEX(idx.size() <= size_t(self.dim()), "too many indices for tensor of dimension ", self.dim(),
                    " (got ", idx.size(), ")");
  for (auto& t : idx) {
    if (!t.defined()) continue;
    TORCH_CHECK(t.device().type() == c10::DeviceType::CPU || t.device().type() == c10::DeviceType::PrivateUse1,
                "indices should be either on cpu or on the same device as the indexed tensor (tiny)");
  }
  idx.resize(size_t(self.dim()));
  // broadcast the index tensors
  c10::DimVector bshape;
  bool any = false;
  for (auto& t : idx) {
    if (!t.defined()) continue;
    if (!any) {
      bshape = c10::DimVector(t.sizes());
      any = true;
      continue;
    }
    int64_t n = std::max<int64_t>(int64_t(bshape.size()), t.dim());
    c10::DimVector out(size_t(n), 1);
    for (int64_t i = 0; i < n; i++) {
      int64_t a = i - (n - int64_t(bshape.size())) >= 0 ? bshape[size_t(i - (n - int64_t(bshape.size())))] : 1;
      int64_t b = i - (n - t.dim()) >= 0 ? t.size(i - (n - t.dim())) : 1;
      TORCH_CHECK_INDEX(a == b || a == 1 || b == 1,
                        "shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes_str(idx));
      out[size_t(i)] = a == 1 ? b : a;
    }
    bshape = out;
  }
  int nd = int(self.dim()), nb = int(bshape.size());
  bool contiguous = at::native::hasContiguousSubspace(idx);
  int first = 0;
  while (first < nd && !idx[size_t(first)].defined()) first++;
  // result layout: position of every non-indexed dim and of the broadcast dims
  std::vector<int> pos(size_t(nd), -1);
  tiny::Shape result;
  int bpos = 0;
  if (!any) {
    for (int d = 0; d < nd; d++) {
      pos[size_t(d)] = d;
      result.push_back(self.size(d));
    }
  } else if (contiguous) {
    for (int d = 0; d < first; d++) {
      pos[size_t(d)] = int(result.size());
      result.push_back(self.size(d));
    }
    bpos = int(result.size());
    result.insert(result.end(), bshape.begin(), bshape.end());
    for (int d = first; d < nd; d++) {
      if (idx[size_t(d)].defined()) continue;
      pos[size_t(d)] = int(result.size());
      result.push_back(self.size(d));
    }
  } else {
    result.assign(bshape.begin(), bshape.end());
    for (int d = 0; d < nd; d++) {
      if (idx[size_t(d)].defined()) continue;
      pos[size_t(d)] = int(result.size());
      result.push_back(self.size(d));
    }
  }
  // an empty indexed dim with a non-empty index can only be out of bounds
  bool empty_indexed = false;
  for (int d = 0; d < nd; d++) empty_indexed |= idx[size_t(d)].defined() && self.size(d) == 0;
  TORCH_CHECK_INDEX(!empty_indexed || c10::multiply_integers(bshape) == 0,
                    "index is out of bounds for dimension with size 0");
  Advanced a;
  a.result = result;
  if (tiny::numel(result) == 0) return a;
  OffsetSum os(result, self.storage_offset());
  int k = 0;
  for (int d = 0; d < nd; d++) {
    if (!idx[size_t(d)].defined()) {
      os.add_axis(pos[size_t(d)], self.stride(d));
      continue;
    }
    int64_t size = self.size(d);
    HostIndex h = host_index(idx[size_t(d)]);
    bool negative = false;
    if (const int64_t* bad = find_bad(h, [&](int64_t v) {
          negative |= v < 0;
          return v < -size || v >= size;
        }))
      TORCH_CHECK_INDEX(false, "index ", *bad, " is out of bounds for dimension ", k, " with size ", size);
    T v = negative ? wrap_negative(h.value, size) : h.value;
    v = place_dims(v, nb, nb - v.ndim());  // right-aligned into the broadcast shape
    os.add(place_dims(v, int(result.size()), bpos), self.stride(d));
    k++;
  }
  a.offsets = os.value();
  return a;
}

T index_value(const at::Tensor& self, const IndexList& indices) {
  Advanced a = advanced_index(self, indices);
  if (tiny::numel(a.result) == 0) return T::full(a.result, tiny::Scalar::from_int(0), to_engine(self.scalar_type()));
  return gather_storage(self, a.offsets);
}

at::Tensor index(const at::Tensor& self, const IndexList& indices) {
  TinyOp op("index");
  return make_result(index_value(self, indices), self.scalar_type());
}
at::Tensor& index_out(const at::Tensor& self, const IndexList& indices, at::Tensor& out) {
  TinyOp op("index");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_out: self (", self.scalar_type(), ") and result (",
              out.scalar_type(), ") must have the same scalar type");
  return assign_out(out, index_value(self, indices), self.scalar_type(), {self});
}

at::Tensor& index_put_impl(at::Tensor& self, const IndexList& indices, const at::Tensor& values, bool accumulate,
                           bool unsafe) {
  TinyOp op("index_put_");
  TORCH_CHECK_INDEX(indices.size() <= size_t(self.dim()), "too many indices for tensor of dimension ", self.dim(),
                    " (got ", indices.size(), ")");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. "
               "Please clone() the tensor before performing this operation. "
               "This also applies to advanced indexing e.g. tensor[indices] = tensor");
  }
  if (values.device() == self.device()) at::assert_no_overlap(self, values);
  for (const std::optional<at::Tensor>& i : indices)
    if (i.has_value() && i->defined() && i->device() == self.device()) at::assert_no_overlap(self, *i);
  Advanced a = advanced_index(self, indices);
  TORCH_CHECK(at::is_expandable_to(values.sizes(), c10::IntArrayRef(a.result)), "shape mismatch: value tensor of shape ",
              values.sizes(), " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(a.result));
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(), " for the source.");
  if (tiny::numel(a.result) == 0) return self;
  T v = operand(values, self.scalar_type(), a.result);
  scatter_storage(self, a.offsets, v, accumulate, ReduceOp::Sum);
  return self;
}

// ---------------------------------------------------------------- index_select

T index_select_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool result_contiguous) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  int64_t n = index.numel();
  tiny::Shape shape = to_shape(self.sizes());
  if (self.dim() > 0) shape[size_t(dim)] = n;
  DType dt = to_engine(self.scalar_type());
  if (self.dim() > 1 && (n == 0 || self.numel() == 0)) return T::full(shape, tiny::Scalar::from_int(0), dt);
  HostIndex h = host_index(index);
  int64_t size = self.dim() > 1 ? self.size(dim) : self.numel();
  if (const int64_t* bad = find_bad(h, [&](int64_t v) { return v < 0 || v >= size; })) {
    // the CPU's contiguous dim-1 fast path words it differently
    TORCH_CHECK(!(self.dim() > 1 && dim == 1 && result_contiguous), "INDICES element is out of DATA bounds, id=", *bad,
                " axis_dim=", size);
    TORCH_CHECK_INDEX(false, "index out of range in self");
  }
  if (self.dim() == 0) return read(self);
  if (n == 0) return T::full(shape, tiny::Scalar::from_int(0), dt);
  OffsetSum os(shape, self.storage_offset());
  for (int64_t d = 0; d < self.dim(); d++)
    if (d != dim) os.add_axis(int(d), self.stride(d));
  os.add(place_dims(h.value.reshape({n}), int(shape.size()), int(dim)), self.stride(dim));
  return gather_storage(self, os.value());
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  TinyOp op("index_select");
  return make_result(index_select_value(self, dim, index, true), self.scalar_type());
}
at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  TinyOp op("index_select");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  if (index.device() == out.device()) at::assert_no_overlap(out, index);
  return assign_out(out, index_select_value(self, dim, index, out.is_contiguous()), self.scalar_type(), {self});
}

// ---------------------------------------------------------------- take / put_

T take_value(const at::Tensor& self, const at::Tensor& index) {
  TORCH_CHECK(index.scalar_type() == c10::kLong, "take(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "take(): tried to take from an empty tensor");
  DType dt = to_engine(self.scalar_type());
  if (index.numel() == 0) return T::full(to_shape(index.sizes()), tiny::Scalar::from_int(0), dt);
  HostIndex h = host_index(index);
  int64_t n = self.numel();
  bool negative = false;
  if (const int64_t* bad = find_bad(h, [&](int64_t v) {
        negative |= v < 0;
        return v < -n || v >= n;
      }))
    TORCH_CHECK_INDEX(false, "out of range: tried to access index ", *bad, " on a tensor of ", n, " elements.");
  T lin = negative ? wrap_negative(h.value, n) : h.value;
  return gather_storage(self, linear_offsets(self, lin));
}
at::Tensor take(const at::Tensor& self, const at::Tensor& index) {
  TinyOp op("take");
  return make_result(take_value(self, index), self.scalar_type());
}
at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  TinyOp op("take");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "take(): self and out expected to have the same dtype, but got self.dtype = ",
              self.scalar_type(), " and out.dtype = ", out.scalar_type());
  return assign_out(out, take_value(self, index), self.scalar_type(), {self, index});
}

at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  TinyOp op("put_");
  TORCH_CHECK_INDEX(index.scalar_type() == c10::kLong, "put_(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same dtype, but got self.dtype = ",
              self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(self.device() == source.device() && self.device() == index.device(),
              "put_(): self, index and source expected to be in the same device, but got self.device = ", self.device(),
              ", index.device = ", index.device(), ", and source.device = ", source.device());
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
  TORCH_CHECK_INDEX(index.numel() == source.numel(), "put_(): Expected source and index to have the same number of elements, but got source.numel() = ",
              source.numel(), ", index.numel() = ", index.numel());
  if (index.numel() == 0) return self;
  TORCH_CHECK_INDEX(self.numel() != 0, "put_(): Tried to put elements into an empty tensor");
  HostIndex h = host_index(index);
  int64_t n = self.numel();
  bool negative = false;
  if (const int64_t* bad = find_bad(h, [&](int64_t v) {
        negative |= v < 0;
        return v < -n || v >= n;
      }))
    TORCH_CHECK_INDEX(false, "out of range: tried to access index ", *bad, " on a tensor of ", n, " elements.");
  T lin = (negative ? wrap_negative(h.value, n) : h.value).reshape({index.numel()});
  T values = read(source).reshape({source.numel()});
  scatter_storage(self, linear_offsets(self, lin), values, accumulate, ReduceOp::Sum);
  return self;
}

// ---------------------------------------------------------------- index_fill_

at::Tensor& index_fill_value(at::Tensor& self, int64_t dim, const at::Tensor& index, const T& fill) {
  TORCH_CHECK_INDEX(index.scalar_type() == c10::kLong, "index_fill_(): Expected dtype int64 for index.");
  if (index.device() == self.device()) at::assert_no_overlap(self, index);
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of index_fill_ on expanded tensors is deprecated. "
               "Please clone() the tensor before performing this operation. "
               "This also applies to advanced indexing e.g. tensor[mask] = scalar");
  }
  int64_t nd = std::max<int64_t>(1, self.dim());
  dim = at::maybe_wrap_dim(dim, nd);
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
  if (self.numel() == 0 || index.numel() == 0) return self;
  int64_t size = size_of(self, dim);
  HostIndex h = host_index(index);
  bool negative = false;
  if (const int64_t* bad = find_bad(h, [&](int64_t v) {
        negative |= v < 0;
        return v < -size || v >= size;
      }))
    TORCH_CHECK_INDEX(false, "index ", *bad, " is out of bounds for dimension ", dim, " with size ", size);
  // which positions along `dim` are filled: a small scatter, then a select
  T at = (negative ? wrap_negative(h.value, size) : h.value).reshape({index.numel()});
  T chosen = T::full({size}, tiny::Scalar::from_bool(false), DType::Bool)
                 .scatter(at, T::full(at.shape(), tiny::Scalar::from_bool(true), DType::Bool), false);
  tiny::Shape shape = to_shape(self.sizes());
  T mask = self.dim() == 0 ? chosen.reshape({}) : place_dims(chosen, int(self.dim()), int(dim)).expand(shape);
  write(self, T::where(mask, fill.expand(shape), read(self)));
  return self;
}
at::Tensor& index_fill_scalar_(at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
  TinyOp op("index_fill_");
  TORCH_CHECK(self.is_complex() || !value.isComplex(),
              "index_fill_(): Converting complex Scalar to non-complex type is not supported");
  tiny::Shape ones(size_t(self.dim()), 1);
  return index_fill_value(self, dim, index, scalar_operand(value, self.scalar_type(), ones));
}
at::Tensor& index_fill_tensor_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TinyOp op("index_fill_");
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  tiny::Shape ones(size_t(self.dim()), 1);
  return index_fill_value(self, dim, index, operand(value, self.scalar_type(), ones));
}

// ---------------------------------------------------------------- index_add / index_copy / index_reduce

// Storage offsets in `dst` of `source`'s elements, with coordinate `dim`
// taken from the (checked) index.
T index_offsets(const at::Tensor& dst, int64_t dim, const HostIndex& h, const at::Tensor& source) {
  tiny::Shape shape = to_shape(source.sizes());
  int rank = int(shape.size());
  OffsetSum os(shape, dst.storage_offset());
  for (int d = 0; d < rank; d++)
    if (d != dim) os.add_axis(d, stride_of(dst, d));
  T at = h.value.reshape({h.numel});
  os.add(rank == 0 ? at.reshape({}) : place_dims(at, rank, int(dim)), stride_of(dst, dim));
  return os.value();
}

// index_add and index_copy word their bounds errors differently on the CPU.
enum class IndexOp { Add, Copy };
HostIndex checked_index(const at::Tensor& dst, int64_t dim, const at::Tensor& index, IndexOp kind) {
  HostIndex h = host_index(index);
  int64_t size = size_of(dst, dim);
  if (const int64_t* bad = find_bad(h, [&](int64_t v) { return v < 0 || v >= size; })) {
    if (kind == IndexOp::Copy)
      TORCH_CHECK_INDEX(false, "index_copy_(): index ", *bad, " is out of bounds for dimension ", dim, " with size ", size);
    TORCH_CHECK_INDEX(dst.dim() > 1, "index out of range in self");
    TORCH_CHECK(false, "index ", *bad, " is out of bounds for dimension ", dim, " with size ", size);
  }
  return h;
}

// `dst` already holds self's values.
void index_add_into(const at::Tensor& dst, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                    const c10::Scalar& alpha) {
  if (index.numel() == 0 || dst.numel() == 0) return;
  HostIndex h = checked_index(dst, dim, index, IndexOp::Add);
  tiny::Shape shape = to_shape(source.sizes());
  T v = operand(source, dst.scalar_type(), shape);
  bool unit = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  if (!unit) v = v.binary(Op::Mul, scalar_operand(alpha, dst.scalar_type(), shape));
  scatter_storage(dst, index_offsets(dst, dim, h, source), v, true, ReduceOp::Sum);
}

int64_t index_add_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const c10::Scalar& alpha, const at::Tensor& out) {
  MetaOnly<at::meta::structured_index_add> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
  return m.meta(self, dim, index, source, alpha).dim;
}
at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                     const c10::Scalar& alpha) {
  TinyOp op("index_add");
  dim = index_add_meta(self, dim, index, source, alpha, {});
  at::Tensor out = make_result(read(self), self.scalar_type());
  index_add_into(out, dim, index, source, alpha);
  return out;
}
at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const c10::Scalar& alpha) {
  TinyOp op("index_add_");
  dim = index_add_meta(self, dim, index, source, alpha, self);
  index_add_into(self, dim, index, source, alpha);
  return self;
}
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const c10::Scalar& alpha, at::Tensor& out) {
  TinyOp op("index_add");
  dim = index_add_meta(self, dim, index, source, alpha, out);
  if (!out.is_same(self)) assign_out(out, read(self), self.scalar_type(), {});
  index_add_into(out, dim, index, source, alpha);
  return out;
}

void index_copy_into(const at::Tensor& dst, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  if (index.numel() == 0 || dst.numel() == 0) return;
  HostIndex h = checked_index(dst, dim, index, IndexOp::Copy);
  T v = operand(source, dst.scalar_type(), to_shape(source.sizes()));
  scatter_storage(dst, index_offsets(dst, dim, h, source), v, false);
}
int64_t index_copy_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                        const at::Tensor& out) {
  MetaOnly<at::meta::structured_index_copy> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
  return m.meta(self, dim, index, source).dim;
}
at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  TinyOp op("index_copy");
  dim = index_copy_meta(self, dim, index, source, {});
  at::Tensor out = make_result(read(self), self.scalar_type());
  index_copy_into(out, dim, index, source);
  return out;
}
at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  TinyOp op("index_copy_");
  dim = index_copy_meta(self, dim, index, source, self);
  index_copy_into(self, dim, index, source);
  return self;
}
at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  TinyOp op("index_copy");
  dim = index_copy_meta(self, dim, index, source, out);
  if (!out.is_same(self)) assign_out(out, read(self), self.scalar_type(), {});
  index_copy_into(out, dim, index, source);
  return out;
}

void index_reduce_into(const at::Tensor& dst, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       c10::string_view reduce, bool include_self) {
  auto r = at::native::get_reduction_enum(reduce);
  if (index.numel() == 0 || dst.numel() == 0) return;
  HostIndex h = host_index(index);
  int64_t size = size_of(dst, dim);
  TORCH_CHECK_INDEX(!find_bad(h, [&](int64_t v) { return v < 0 || v >= size; }), "index out of range in self");
  T offsets = index_offsets(dst, dim, h, source);
  // the same elements' row-major positions (for mean's counts)
  tiny::Shape shape = to_shape(source.sizes());
  OffsetSum rm(shape);
  auto rm_strides = c10::contiguous_strides(dst.sizes());
  for (int d = 0; d < int(shape.size()); d++)
    if (d != dim) rm.add_axis(d, rm_strides[size_t(d)]);
  T at = h.value.reshape({h.numel});
  rm.add(shape.empty() ? at.reshape({}) : place_dims(at, int(shape.size()), int(dim)),
         shape.empty() ? 1 : rm_strides[size_t(dim)]);
  reduce_into(dst, offsets, rm.value(), operand(source, dst.scalar_type(), shape), r, include_self);
}
int64_t index_reduce_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          c10::string_view reduce, bool include_self, const at::Tensor& out) {
  MetaOnly<at::meta::structured_index_reduce> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
  return m.meta(self, dim, index, source, reduce, include_self).dim;
}
at::Tensor index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                        c10::string_view reduce, bool include_self) {
  TinyOp op("index_reduce");
  dim = index_reduce_meta(self, dim, index, source, reduce, include_self, {});
  at::Tensor out = make_result(read(self), self.scalar_type());
  index_reduce_into(out, dim, index, source, reduce, include_self);
  return out;
}
at::Tensor& index_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          c10::string_view reduce, bool include_self) {
  TinyOp op("index_reduce_");
  dim = index_reduce_meta(self, dim, index, source, reduce, include_self, self);
  index_reduce_into(self, dim, index, source, reduce, include_self);
  return self;
}
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
  TinyOp op("index_reduce");
  dim = index_reduce_meta(self, dim, index, source, reduce, include_self, out);
  if (!out.is_same(self)) assign_out(out, read(self), self.scalar_type(), {});
  index_reduce_into(out, dim, index, source, reduce, include_self);
  return out;
}

// ---------------------------------------------------------------- masked_scatter_

// Each true mask position takes the next source element: the positions'
// running count is computed on the host from the realized mask (a sync
// point), the values stay lazy.
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TinyOp op("masked_scatter_");
  at::assert_no_internal_overlap(self);
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "masked_scatter: expected self and source to have same dtypes but got",
              self.scalar_type(), " and ", source.scalar_type());
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), self.sizes()), "masked_scatter_: expected mask to be broadcastable to self, got ",
              mask.sizes(), " and ", self.sizes());
  int64_t n = self.numel();
  if (n == 0) return self;
  tiny::Shape shape = to_shape(self.sizes());
  at::Tensor m = mask.device().type() == c10::DeviceType::CPU ? mask : mask.cpu();
  m = m.expand(self.sizes()).contiguous();
  const bool* mp = m.data_ptr<bool>();
  at::Tensor pos = at::empty({n}, at::TensorOptions().dtype(c10::kLong));
  int64_t* pp = pos.data_ptr<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) pp[i] = mp[i] ? count++ : 0;
  TORCH_CHECK(count <= source.numel(), "Number of elements of source < number of ones in mask");
  if (count == 0) return self;
  T src = read(source).reshape({source.numel()}).gather(from_cpu(pos).reshape(shape));
  T chosen = mask.device().type() == c10::DeviceType::CPU ? from_cpu(m).reshape(shape) : operand(mask, c10::kBool, shape);
  write(self, T::where(chosen, src, read(self)));
  return self;
}

// ---------------------------------------------------------------- embedding backward

at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, int64_t num_weights,
                                   int64_t padding_idx, bool scale_grad_by_freq) {
  TinyOp op("embedding_dense_backward");
  TORCH_CHECK(indices.scalar_type() == c10::kLong || indices.scalar_type() == c10::kInt,
              "embedding_backward(): Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int; but got ",
              indices.scalar_type(), " instead");
  int64_t n = indices.numel(), d = grad.size(-1);
  DType dt = to_engine(grad.scalar_type());
  T result = T::full({num_weights * d}, tiny::Scalar::from_int(0), dt);
  if (n > 0 && d > 0) {
    T idx = read(indices).cast(DType::Int64).reshape({n});
    // rows of padding_idx get no gradient: aim them out of range (skipped)
    if (padding_idx >= 0) idx = T::where(idx.binary(Op::CmpEq, i64(padding_idx, {n})), i64(-num_weights - 1, {n}), idx);
    T g = read(grad).reshape({n, d});
    if (scale_grad_by_freq) {
      T counts = T::full({num_weights}, tiny::Scalar::from_int(0), dt)
                     .scatter(idx, T::full({n}, tiny::Scalar::from_int(1), dt), true, ReduceOp::Sum);
      T c = counts.gather(T::where(idx.binary(Op::CmpLt, i64(0, {n})), i64(0, {n}), idx));
      g = g.binary(Op::Div, c.reshape({n, 1}).expand({n, d}));
    }
    OffsetSum os({n, d});
    os.add(idx.reshape({n, 1}), d);
    os.add_axis(1, 1);
    // out-of-range rows must stay out of range after adding the column
    T off = T::where(idx.reshape({n, 1}).expand({n, d}).binary(Op::CmpLt, i64(0, {n, d})), i64(-1, {n, d}), os.value());
    result = result.scatter(off.reshape({n * d}), g.reshape({n * d}), true, ReduceOp::Sum);
  }
  return make_result(result.reshape({num_weights, d}), grad.scalar_type());
}

// ---------------------------------------------------------------- embedding_renorm_
// nn.Embedding(max_norm=...): each row `indices` names whose norm exceeds max_norm is scaled by
// max_norm / (norm + 1e-7), the scale in double and applied in the weight's dtype, as the CPU does
// it row by row. Lazy: the named rows are marked by a scatter.
at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  TORCH_CHECK(indices.scalar_type() == c10::kLong || indices.scalar_type() == c10::kInt,
              "Expected tensor for argument #2 'indices' to have one of the following scalar types: Long, Int; but "
              "got ", indices.scalar_type(), " instead (while checking arguments for embedding_renorm_)");
  TORCH_CHECK(self.dim() == 2, "Expected 2-dimensional tensor, but got ", self.dim(),
              "-dimensional tensor for argument #1 'self' (while checking arguments for embedding_renorm_)");
  const int64_t rows = self.size(0), d = self.size(1), n = indices.numel();
  if (n == 0 || rows * d == 0) return self;
  HostIndex idx = host_index(indices);
  if (const int64_t* bad = find_bad(idx, [&](int64_t i) { return i < -rows || i >= rows; }))
    TORCH_CHECK_INDEX(false, "select(): index ", *bad, " out of range for tensor of size ", self.sizes(),
                      " at dimension 0");
  TinyOp op("embedding_renorm_");
  T named = T::full({rows}, tiny::Scalar::from_bool(false), DType::Bool)
                .scatter(wrap_negative(idx.value.reshape({n}), rows), T::full({n}, tiny::Scalar::from_bool(true), DType::Bool),
                         false);
  T w = read(self);
  // the norm is a value of the weight's dtype (16-bit: computed in float32, rounded), read as a double
  T norm = p_norm_last_axis(w.cast(tiny::compute_dtype(w.dtype())), norm_type).cast(w.dtype()).cast(DType::Float64)
               .reshape({rows, 1});
  T limit = T::full({rows, 1}, tiny::Scalar::from_double(max_norm), DType::Float64);
  T scale = limit.binary(Op::Div, norm.binary(Op::Add, T::full({rows, 1}, tiny::Scalar::from_double(1e-7), DType::Float64)));
  T renorm = named.reshape({rows, 1}).binary(Op::And, limit.binary(Op::CmpLt, norm));
  T scaled = w.binary(Op::Mul, scale.cast(tiny::compute_dtype(w.dtype())).cast(w.dtype()).expand({rows, d}));
  write(self, T::where(renorm.expand({rows, d}), scaled, w));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding_renorm_", embedding_renorm_);
  m.impl("index.Tensor", index);
  m.impl("index.Tensor_out", index_out);
  m.impl("_index_put_impl_", index_put_impl);
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
  m.impl("take", take);
  m.impl("take.out", take_out);
  m.impl("put_", put_);
  m.impl("index_fill_.int_Scalar", index_fill_scalar_);
  m.impl("index_fill_.int_Tensor", index_fill_tensor_);
  m.impl("index_add", index_add);
  m.impl("index_add_", index_add_);
  m.impl("index_add.out", index_add_out);
  m.impl("index_copy", index_copy);
  m.impl("index_copy_", index_copy_);
  m.impl("index_copy.out", index_copy_out);
  m.impl("index_reduce", index_reduce);
  m.impl("index_reduce_", index_reduce_);
  m.impl("index_reduce.out", index_reduce_out);
  m.impl("masked_scatter_", masked_scatter_);
  m.impl("embedding_dense_backward", embedding_dense_backward);
}

}  // namespace torch_tiny
