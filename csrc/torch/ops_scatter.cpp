// gather and the scatter family (scatter src/value/reduce, scatter_add,
// scatter_reduce). ATen's structured meta functions do the shape and dtype
// checks; indices are bounds-checked on the host (see index_util.h), then
// gather reads and scatter writes the storage at computed element offsets.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReductionType.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/scatter_reduce_meta.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::DType;
using tiny::ReduceOp;
using RT = at::native::ReductionType;

int64_t size_of(const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }
int64_t stride_of(const at::Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.stride(d); }

// The elements `index` addresses along `dim` (the other coordinates are the
// index element's own), after the CPU's bounds check: their storage offsets in
// `t`, and their positions in t's row-major order (for scatter_reduce's mean).
struct Addressed {
  T offsets, rm_offsets;
};
Addressed address(const at::Tensor& t, int64_t dim, const at::Tensor& index) {
  HostIndex h = host_index(index);
  int64_t size = size_of(t, dim);
  if (const int64_t* bad = find_bad(h, [&](int64_t v) { return v < 0 || v >= size; }))
    TORCH_CHECK(false, "index ", *bad, " is out of bounds for dimension ", dim, " with size ", size);
  tiny::Shape shape = to_shape(index.sizes());
  auto rm_strides = c10::contiguous_strides(t.sizes());
  OffsetSum os(shape, t.storage_offset()), rm(shape);
  for (int d = 0; d < int(shape.size()); d++) {
    if (d == dim) continue;
    os.add_axis(d, stride_of(t, d));
    rm.add_axis(d, t.dim() == 0 ? 1 : rm_strides[size_t(d)]);
  }
  os.add(h.value, stride_of(t, dim));
  rm.add(h.value, t.dim() == 0 ? 1 : rm_strides[size_t(dim)]);
  return {os.value(), rm.value()};
}

// ---------------------------------------------------------------- gather

T gather_value(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (index.numel() == 0) return T::full(to_shape(index.sizes()), tiny::Scalar::from_int(0), to_engine(self.scalar_type()));
  return gather_storage(self, address(self, dim, index).offsets);
}
at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  TinyOp op("gather");
  MetaOnly<at::meta::structured_gather> m;
  m.meta(self, dim, index, sparse_grad);
  return make_result(gather_value(self, dim, index), self.scalar_type());
}
at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad, at::Tensor& out) {
  TinyOp op("gather");
  MetaOnly<at::meta::structured_gather> m({out});
  m.meta(self, dim, index, sparse_grad);
  return assign_out(out, gather_value(self, dim, index), self.scalar_type(), {self});
}

// ---------------------------------------------------------------- scatter

// The destination holding self's values: a new tensor, self, or out.
enum class Into { New, Self, Out };
at::Tensor destination(Into into, const at::Tensor& self, const at::Tensor& out) {
  if (into == Into::New) return make_result(read(self), self.scalar_type());
  if (into == Into::Self || out.is_same(self)) return self;
  at::Tensor o = out;
  assign_out(o, read(self), self.scalar_type(), {});
  return o;
}

// The part of src that index addresses, in dst's dtype.
T src_values(const at::Tensor& src, const at::Tensor& index, c10::ScalarType st) {
  T v = read(src).cast(to_engine(st));
  if (src.sizes() == index.sizes()) return v;
  tiny::Ranges r;
  for (int64_t d = 0; d < index.dim(); d++) r.push_back({0, index.size(d)});
  return v.shrink(r);
}

// Writes `values` (index-shaped) into dst at the addressed elements:
// replaced (no reduction), combined by `r`, or scatter_reduce's `r` with include_self.
void scatter_into(const at::Tensor& dst, int64_t dim, const at::Tensor& index, const T& values,
                  std::optional<RT> r, bool include_self = true, bool two = false) {
  dim = at::maybe_wrap_dim(dim, dst.dim());
  if (index.numel() == 0) return;
  Addressed a = address(dst, dim, index);
  if (!r) {
    scatter_storage(dst, a.offsets, values, false);
  } else if (two) {
    reduce_into(dst, a.offsets, a.rm_offsets, values, *r, include_self);
  } else {
    scatter_storage(dst, a.offsets, values, true, engine_reduce(*r));
  }
}

// scatter.reduce's legacy names
RT legacy_reduce(c10::string_view reduce) {
  if (reduce == "add") return RT::SUM;
  TORCH_CHECK(reduce == "multiply", "reduce argument must be either add or multiply.");
  return RT::PROD;
}

T fill_values(const c10::Scalar& value, const at::Tensor& index, c10::ScalarType st) {
  return scalar_operand(value, st, to_shape(index.sizes()));
}

template <Into I>
at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                       const at::Tensor& out) {
  TinyOp op("scatter");
  MetaOnly<at::meta::structured_scatter_src> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, src);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, src_values(src, index, self.scalar_type()), std::nullopt);
  return dst;
}
template <Into I>
at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value,
                         const at::Tensor& out) {
  TinyOp op("scatter");
  MetaOnly<at::meta::structured_scatter_value> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, value);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, fill_values(value, index, self.scalar_type()), std::nullopt);
  return dst;
}
template <Into I>
at::Tensor scatter_reduce_legacy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                 c10::string_view reduce, const at::Tensor& out) {
  TinyOp op("scatter");
  MetaOnly<at::meta::structured_scatter_reduce> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, src, reduce);
  RT r = legacy_reduce(reduce);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, src_values(src, index, self.scalar_type()), r);
  return dst;
}
template <Into I>
at::Tensor scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value,
                                c10::string_view reduce, const at::Tensor& out) {
  TinyOp op("scatter");
  MetaOnly<at::meta::structured_scatter_value_reduce> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, value, reduce);
  RT r = legacy_reduce(reduce);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, fill_values(value, index, self.scalar_type()), r);
  return dst;
}
template <Into I>
at::Tensor scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                       const at::Tensor& out) {
  TinyOp op("scatter_add");
  MetaOnly<at::meta::structured_scatter_add> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, src);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, src_values(src, index, self.scalar_type()), RT::SUM);
  return dst;
}
template <Into I>
at::Tensor scatter_reduce_two(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                              c10::string_view reduce, bool include_self, const at::Tensor& out) {
  TinyOp op("scatter_reduce");
  MetaOnly<at::meta::structured_scatter_reduce_two> m(I == Into::New ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{out});
  m.meta(self, dim, index, src, reduce, include_self);
  RT r = at::native::get_reduction_enum(reduce);
  at::Tensor dst = destination(I, self, out);
  scatter_into(dst, dim, index, src_values(src, index, self.scalar_type()), r, include_self, true);
  return dst;
}

// dispatcher-facing signatures
at::Tensor scatter_src_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src) {
  return scatter_src<Into::New>(s, d, i, src, {});
}
at::Tensor& scatter_src_i(at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src) {
  scatter_src<Into::Self>(s, d, i, src, s);
  return s;
}
at::Tensor& scatter_src_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, at::Tensor& out) {
  scatter_src<Into::Out>(s, d, i, src, out);
  return out;
}
at::Tensor scatter_value_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v) {
  return scatter_value<Into::New>(s, d, i, v, {});
}
at::Tensor& scatter_value_i(at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v) {
  scatter_value<Into::Self>(s, d, i, v, s);
  return s;
}
at::Tensor& scatter_value_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v, at::Tensor& out) {
  scatter_value<Into::Out>(s, d, i, v, out);
  return out;
}
at::Tensor scatter_reduce_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, c10::string_view r) {
  return scatter_reduce_legacy<Into::New>(s, d, i, src, r, {});
}
at::Tensor& scatter_reduce_i(at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, c10::string_view r) {
  scatter_reduce_legacy<Into::Self>(s, d, i, src, r, s);
  return s;
}
at::Tensor& scatter_reduce_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, c10::string_view r,
                             at::Tensor& out) {
  scatter_reduce_legacy<Into::Out>(s, d, i, src, r, out);
  return out;
}
at::Tensor scatter_value_reduce_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v, c10::string_view r) {
  return scatter_value_reduce<Into::New>(s, d, i, v, r, {});
}
at::Tensor& scatter_value_reduce_i(at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v, c10::string_view r) {
  scatter_value_reduce<Into::Self>(s, d, i, v, r, s);
  return s;
}
at::Tensor& scatter_value_reduce_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const c10::Scalar& v,
                                   c10::string_view r, at::Tensor& out) {
  scatter_value_reduce<Into::Out>(s, d, i, v, r, out);
  return out;
}
at::Tensor scatter_add_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src) {
  return scatter_add<Into::New>(s, d, i, src, {});
}
at::Tensor& scatter_add_i(at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src) {
  scatter_add<Into::Self>(s, d, i, src, s);
  return s;
}
at::Tensor& scatter_add_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, at::Tensor& out) {
  scatter_add<Into::Out>(s, d, i, src, out);
  return out;
}
at::Tensor scatter_reduce_two_f(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src,
                                c10::string_view r, bool include_self) {
  return scatter_reduce_two<Into::New>(s, d, i, src, r, include_self, {});
}
at::Tensor& scatter_reduce_two_i(at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src, c10::string_view r,
                                 bool include_self) {
  scatter_reduce_two<Into::Self>(s, d, i, src, r, include_self, s);
  return s;
}
at::Tensor& scatter_reduce_two_o(const at::Tensor& s, int64_t d, const at::Tensor& i, const at::Tensor& src,
                                 c10::string_view r, bool include_self, at::Tensor& out) {
  scatter_reduce_two<Into::Out>(s, d, i, src, r, include_self, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("gather", gather);
  m.impl("gather.out", gather_out);
  m.impl("scatter.src", scatter_src_f);
  m.impl("scatter_.src", scatter_src_i);
  m.impl("scatter.src_out", scatter_src_o);
  m.impl("scatter.value", scatter_value_f);
  m.impl("scatter_.value", scatter_value_i);
  m.impl("scatter.value_out", scatter_value_o);
  m.impl("scatter.reduce", scatter_reduce_f);
  m.impl("scatter_.reduce", scatter_reduce_i);
  m.impl("scatter.reduce_out", scatter_reduce_o);
  m.impl("scatter.value_reduce", scatter_value_reduce_f);
  m.impl("scatter_.value_reduce", scatter_value_reduce_i);
  m.impl("scatter.value_reduce_out", scatter_value_reduce_o);
  m.impl("scatter_add", scatter_add_f);
  m.impl("scatter_add_", scatter_add_i);
  m.impl("scatter_add.out", scatter_add_o);
  m.impl("scatter_reduce.two", scatter_reduce_two_f);
  m.impl("scatter_reduce_.two", scatter_reduce_two_i);
  m.impl("scatter_reduce.two_out", scatter_reduce_two_o);
}

}  // namespace torch_tiny
