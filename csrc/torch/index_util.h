// Helpers shared by the indexing, scatter, shape and sorting ops: running a
// structured kernel's ATen meta function, index tensors checked on the host,
// and storage element offsets built from int64 engine arithmetic.
#pragma once
#include <ATen/Tensor.h>
#include <ATen/TensorMeta.h>
#include <ATen/ops/empty.h>
#include <ATen/native/ReductionType.h>

#include <array>
#include <functional>
#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

// Runs a structured kernel's meta function (ATen's own shape and dtype checks,
// with the CPU's error messages) and records the outputs it asks for instead
// of allocating them. `given` are the out= tensors, if any.
template <class Meta>
struct MetaOnly final : Meta {
  // Outputs live in a fixed-size array: meta functions hold references to them.
  explicit MetaOnly(std::vector<at::Tensor> given = {}) {
    for (size_t i = 0; i < given.size() && i < kMax; i++) given_[i] = std::move(given[i]);
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    return given_.at(size_t(i));
  }
#if __has_include(<ATen/core/Dimname.h>)
  // torch with named tensors (2.11, on the GPU machines) also passes the output's names
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef, c10::TensorOptions o,
                          at::DimnameList) override {
    record(i, sizes, o);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef, c10::TensorOptions o,
                              at::DimnameList) override {
    record(i, sizes, o);
  }
#else
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef, c10::TensorOptions o) override {
    record(i, sizes, o);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef, c10::TensorOptions o) override {
    record(i, sizes, o);
  }
#endif
  tiny::Shape shape(size_t i = 0) const { return shapes.at(i); }
  c10::ScalarType dtype(size_t i = 0) const { return dtypes.at(i); }

  std::vector<tiny::Shape> shapes;
  std::vector<c10::ScalarType> dtypes;

 private:
  void record(int64_t i, c10::IntArrayRef sizes, const c10::TensorOptions& o) {
    if (shapes.size() <= size_t(i)) {
      shapes.resize(size_t(i) + 1);
      dtypes.resize(size_t(i) + 1, c10::kFloat);
    }
    shapes[size_t(i)] = tiny::Shape(sizes.begin(), sizes.end());
    if (o.has_dtype()) dtypes[size_t(i)] = c10::typeMetaToScalarType(o.dtype());
    // some meta functions inspect the output they asked for (tiny storages are free)
    if (!given_.at(size_t(i)).defined()) given_[size_t(i)] = at::empty(sizes, o);
  }
  static constexpr size_t kMax = 4;
  std::array<at::Tensor, kMax> given_;
};

// An integer index tensor made readable on the host (for bounds checks) and
// usable in the graph. A CPU index is copied in; a tiny index is realized and
// copied out, which is a synchronization point unless it is already computed.
struct HostIndex {
  tiny::Tensor value;            // int64, the index's shape
  const int64_t* data = nullptr; // its row-major elements, on the host
  int64_t numel = 0;
  at::Tensor keep;               // owns `data`
};
HostIndex host_index(const at::Tensor& index);
// The first element for which `bad` holds, if any.
const int64_t* find_bad(const HostIndex& idx, const std::function<bool(int64_t)>& bad);

// The flat value of `t`'s storage, in `t`'s dtype.
tiny::Tensor storage_value(const at::Tensor& t);
// Replaces (or combines by `op`) elements of `dst`'s storage at the storage
// element offsets `offsets` with `values` (same shape, dst's dtype).
void scatter_storage(const at::Tensor& dst, const tiny::Tensor& offsets, const tiny::Tensor& values, bool accumulate,
                     tiny::ReduceOp op = tiny::ReduceOp::Sum);
// `t`'s values at storage element offsets `offsets` (any shape).
tiny::Tensor gather_storage(const at::Tensor& t, const tiny::Tensor& offsets);

// An int64 sum of terms broadcast to `shape`: the storage offsets of elements
// addressed by per-axis coordinates times strides.
class OffsetSum {
 public:
  explicit OffsetSum(tiny::Shape shape, int64_t base = 0);
  // + stride * (position along `axis`)
  void add_axis(int axis, int64_t stride);
  // + stride * t, t int64 of the same rank as the shape (size-1 dims broadcast)
  void add(const tiny::Tensor& t, int64_t stride);
  tiny::Tensor value() const;
  const tiny::Shape& shape() const { return shape_; }

 private:
  tiny::Shape shape_;
  int64_t base_;
  tiny::Tensor acc_;
};

// `t` (int64) with negative entries wrapped by `size`.
tiny::Tensor wrap_negative(const tiny::Tensor& t, int64_t size);
// `t` reshaped to rank `rank` with its dims starting at `at` (1 elsewhere).
tiny::Tensor place_dims(const tiny::Tensor& t, int rank, int at);
tiny::Tensor i64(int64_t v, const tiny::Shape& shape);

// scatter_reduce / index_reduce: the value a reduction starts from where
// include_self=False drops self, and the engine's combining op.
tiny::Scalar reduce_identity(at::native::ReductionType r, c10::ScalarType st);
tiny::ReduceOp engine_reduce(at::native::ReductionType r);
// Reduces `values` into `dst` (holding self) at storage `offsets`;
// `rm_offsets` are the same elements' row-major positions in dst (mean's counts).
void reduce_into(const at::Tensor& dst, const tiny::Tensor& offsets, const tiny::Tensor& rm_offsets,
                 const tiny::Tensor& values, at::native::ReductionType r, bool include_self);

}  // namespace torch_tiny
