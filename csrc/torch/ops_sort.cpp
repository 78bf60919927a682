// Sorting and searching: sort, topk, kthvalue, median, mode, searchsorted, bucketize,
// and the unique family.
//
// sort / topk / kthvalue run lazily by ranking: an element's rank along the
// dim is the number of elements ordered before it (smaller, or equal with a
// smaller index: a stable order with NaN above everything, as the CPU sorts),
// computed as one fused compare-and-sum, and each element is then scattered
// to its rank. That is n^2 work per slice of n elements, so slices whose
// total exceeds kLazyBudget comparisons go to a host path instead (realize,
// sort with ATen's CPU kernel, copy back), which also reproduces the CPU's
// order for ties exactly.
//
// searchsorted / bucketize replay the CPU's binary search step by step with
// gathers (log2(n) + 1 steps, one fused kernel), so they agree with it even
// on unsorted or NaN-holding boundaries.
//
// unique's output size depends on the data: host path (a sync point).
#include <ATen/WrapDimUtils.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isin_meta.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/kthvalue.h>
#include <ATen/ops/mode.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/topk_meta.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/unique_dim.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;

constexpr int64_t kLazyBudget = int64_t(1) << 27;  // pairwise comparisons

at::Tensor to_host(const at::Tensor& t) { return t.device().type() == c10::DeviceType::CPU ? t : t.cpu(); }
T upload(const at::Tensor& host) { return from_cpu(host); }

bool lazy_ok(const at::Tensor& self, int64_t dim) {
  int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  return self.numel() * n <= kLazyBudget;
}

// `self` with `dim` moved last, as (rows, n).
struct Slices {
  T x;  // (rows, n)
  int64_t rows, n;
  std::vector<int> perm, inverse;  // dim-last permutation and its inverse
  tiny::Shape moved;               // the permuted shape
};
Slices slices(const at::Tensor& self, int64_t dim) {
  Slices s;
  T v = read(self);
  int nd = int(self.dim());
  if (nd == 0) {
    v = v.reshape({1});
    nd = 1;
    dim = 0;
  }
  for (int d = 0; d < nd; d++)
    if (d != dim) s.perm.push_back(d);
  s.perm.push_back(int(dim));
  s.inverse.resize(size_t(nd));
  for (int i = 0; i < nd; i++) s.inverse[size_t(s.perm[size_t(i)])] = i;
  v = v.permute(s.perm);
  s.moved = v.shape();
  s.n = s.moved.back();
  s.rows = s.n == 0 ? 0 : v.numel() / s.n;
  s.x = v.reshape({s.rows, s.n});
  return s;
}

// Each element's position in the sorted order of its row (int64, (rows, n)).
T ranks(const T& x, bool descending) {
  int64_t rows = x.shape()[0], n = x.shape()[1];
  tiny::Shape sq{rows, n, n};
  T a = x.reshape({rows, n, 1}).expand(sq);  // element i
  T b = x.reshape({rows, 1, n}).expand(sq);  // element j
  T before = descending ? a.binary(Op::CmpLt, b) : b.binary(Op::CmpLt, a);
  T same = a.binary(Op::CmpEq, b);
  if (tiny::is_float(x.dtype())) {
    // NaN sorts above every number and equal to NaN
    T na = a.unary(Op::IsNan), nb = b.unary(Op::IsNan);
    T nan_first = descending ? nb.binary(Op::And, na.unary(Op::Not)) : na.binary(Op::And, nb.unary(Op::Not));
    before = before.binary(Op::Or, nan_first);
    same = same.binary(Op::Or, na.binary(Op::And, nb));
  }
  T j = T::arange(n, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64);
  T earlier = j.reshape({1, 1, n}).expand(sq).binary(Op::CmpLt, j.reshape({1, n, 1}).expand(sq));
  before = before.binary(Op::Or, same.binary(Op::And, earlier));
  return before.cast(DType::Int64).reduce(tiny::ReduceOp::Sum, {2}, false);
}

// Element (r, i) of `src` written to (r, slot) of a (rows, width) result when
// `slot` is in [0, width); other elements are dropped.
T place(const T& src, const T& slot, int64_t rows, int64_t width) {
  int64_t n = src.shape()[1];
  T row = T::arange(rows, tiny::Scalar::from_int(0), tiny::Scalar::from_int(width), DType::Int64)
              .reshape({rows, 1})
              .expand({rows, n});
  T ok = slot.binary(Op::CmpLt, i64(width, {rows, n})).binary(Op::And, i64(-1, {rows, n}).binary(Op::CmpLt, slot));
  T at = T::where(ok, row.binary(Op::Add, slot), i64(-1, {rows, n}));
  T base = T::full({rows * width}, tiny::Scalar::from_int(0), src.dtype());
  return base.scatter(at.reshape({rows * n}), src.reshape({rows * n}), false).reshape({rows, width});
}

T positions(int64_t rows, int64_t n) {
  return T::arange(n, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), DType::Int64).reshape({1, n}).expand({rows, n});
}

// A (rows, width) result back in the input's layout (dim restored).
T unmove(const Slices& s, const T& v, int64_t width, bool scalar) {
  tiny::Shape moved = s.moved;
  moved.back() = width;
  T r = v.reshape(moved).permute(s.inverse);
  return scalar ? r.reshape({}) : r;
}

// A (rows, 1) selection per slice back in the input's layout, `dim` kept or dropped.
T selected(const Slices& s, const T& v, const at::Tensor& self, int64_t dim, bool keepdim) {
  T r = unmove(s, v, 1, self.dim() == 0);
  if (keepdim || self.dim() == 0) return r;
  tiny::Shape out = to_shape(self.sizes());
  out.erase(out.begin() + dim);
  return r.reshape(out);
}

// The CPU's checks of a selection's out= tensors (kthvalue, median).
void check_selection_outs(const char* name, const at::Tensor& self, const at::Tensor& values,
                          const at::Tensor& indices) {
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), name, "(): Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == c10::kLong, name, "(): Expected out tensor to have dtype ", c10::kLong,
              ", but got ", indices.scalar_type(), " instead");
}

// ---------------------------------------------------------------- sort

std::pair<T, T> sort_values(const at::Tensor& self, int64_t dim, bool descending) {
  Slices s = slices(self, dim);
  bool scalar = self.dim() == 0;
  if (s.rows == 0 || s.n <= 1) {
    T idx = i64(0, s.moved);
    return {unmove(s, s.x, s.n, scalar), unmove(s, idx.reshape({s.rows, s.n}), s.n, scalar)};
  }
  T rank = ranks(s.x, descending);
  T values = place(s.x, rank, s.rows, s.n);
  T indices = place(positions(s.rows, s.n), rank, s.rows, s.n);
  return {unmove(s, values, s.n, scalar), unmove(s, indices, s.n, scalar)};
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending) {
  MetaOnly<at::meta::structured_sort_stable> m;
  m.meta(self, stable, dim, descending);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!lazy_ok(self, dim)) {
    auto [v, i] = at::sort(to_host(self), stable, dim, descending);
    TinyOp op("sort");
    return {make_result(upload(v), v.scalar_type()), make_result(upload(i), c10::kLong)};
  }
  TinyOp op("sort");
  auto [v, i] = sort_values(self, dim, descending);
  return {make_result(v, self.scalar_type()), make_result(i, c10::kLong)};
}
std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values, at::Tensor& indices) {
  MetaOnly<at::meta::structured_sort_stable> m({values, indices});
  m.meta(self, stable, dim, descending);
  auto [v, i] = sort_stable(self, stable, dim, descending);
  TinyOp op("sort");
  assign_out(values, read(v), self.scalar_type(), {self});
  assign_out(indices, read(i), c10::kLong, {self});
  return {values, indices};
}

// ---------------------------------------------------------------- topk / kthvalue

std::tuple<at::Tensor, at::Tensor> tiny_topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted) {
  MetaOnly<at::meta::structured_topk> m;
  m.meta(self, k, dim, largest, sorted);
  dim = at::maybe_wrap_dim(dim, self.dim(), true);
  if (!lazy_ok(self, dim)) {
    auto [v, i] = at::topk(to_host(self), k, dim, largest, sorted);
    TinyOp op("topk");
    return {make_result(upload(v), v.scalar_type()), make_result(upload(i), c10::kLong)};
  }
  TinyOp op("topk");
  Slices s = slices(self, dim);
  bool scalar = self.dim() == 0;
  if (s.rows == 0 || k == 0) {
    T z = T::full({s.rows, k}, tiny::Scalar::from_int(0), s.x.dtype());
    return {make_result(unmove(s, z, k, scalar), self.scalar_type()),
            make_result(unmove(s, z.cast(DType::Int64), k, scalar), c10::kLong)};
  }
  T rank = ranks(s.x, largest);
  T values = place(s.x, rank, s.rows, k);
  T indices = place(positions(s.rows, s.n), rank, s.rows, k);
  return {make_result(unmove(s, values, k, scalar), self.scalar_type()),
          make_result(unmove(s, indices, k, scalar), c10::kLong)};
}
std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted,
                                              at::Tensor& values, at::Tensor& indices) {
  MetaOnly<at::meta::structured_topk> m({values, indices});
  m.meta(self, k, dim, largest, sorted);
  auto [v, i] = tiny_topk(self, k, dim, largest, sorted);
  TinyOp op("topk");
  assign_out(values, read(v), self.scalar_type(), {self});
  assign_out(indices, read(i), c10::kLong, {self});
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> kthvalue_out(const at::Tensor& self, int64_t k, int64_t dim_, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices) {
  int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), true);
  int64_t slicesize = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) != 0, "kthvalue(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  TORCH_CHECK(k >= 1 && k <= slicesize, "kthvalue(): selected number k out of range for dimension ", dim);
  check_selection_outs("kthvalue", self, values, indices);
  T v, i;
  if (!lazy_ok(self, dim)) {
    auto [hv, hi] = at::kthvalue(to_host(self), k, dim, keepdim);
    TinyOp op("kthvalue");
    v = upload(hv);
    i = upload(hi);
  } else {
    TinyOp op("kthvalue");
    Slices s = slices(self, dim);
    T rank = ranks(s.x, false);
    T slot = rank.binary(Op::Sub, i64(k - 1, rank.shape()));  // 0 for the k-th element
    v = selected(s, place(s.x, slot, s.rows, 1), self, dim, keepdim);
    i = selected(s, place(positions(s.rows, s.n), slot, s.rows, 1), self, dim, keepdim);
  }
  TinyOp op("kthvalue");
  assign_out(values, v, self.scalar_type(), {self});
  assign_out(indices, i, c10::kLong, {self});
  return {values, indices};
}

// ---------------------------------------------------------------- median / nanmedian

// The CPU's median of each row of `s`: the lower middle element in stable sorted order. median
// propagates NaN: a row holding one gives its first NaN. nanmedian ignores NaN: the middle of
// the row's numbers, or of the whole row (all NaN) when it has none.
std::pair<T, T> row_medians(const Slices& s, bool ignore_nan) {
  T rank = ranks(s.x, false);
  const tiny::Shape col{s.rows, 1};
  T middle = i64((s.n - 1) / 2, col);
  T target = middle;
  if (tiny::is_float(s.x.dtype())) {
    T nans = s.x.unary(Op::IsNan).cast(DType::Int64).reduce(tiny::ReduceOp::Sum, {1}, true);
    T numbers = i64(s.n, col).binary(Op::Sub, nans);
    T has_nan = i64(0, col).binary(Op::CmpLt, nans);
    if (ignore_nan) {
      T number_middle = numbers.binary(Op::Sub, i64(1, col)).binary(Op::FloorDiv, i64(2, col));
      target = T::where(numbers.binary(Op::CmpEq, i64(0, col)), middle, number_middle);
    } else {
      target = T::where(has_nan, numbers, middle);  // NaN sorts last: the first NaN's rank
    }
  }
  T slot = rank.binary(Op::Sub, target.expand(rank.shape()));
  return {place(s.x, slot, s.rows, 1), place(positions(s.rows, s.n), slot, s.rows, 1)};
}

at::Tensor median_all(const at::Tensor& self, bool ignore_nan) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool, "\"", ignore_nan ? "nanmedian" : "median",
                              "\" not implemented for 'Bool'");
  TinyOp op(ignore_nan ? "nanmedian" : "median");
  if (self.numel() == 0) {
    // The CPU's answer: NaN, converted as x86 converts it (the lowest value for 32 and 64 bits,
    // 0 for narrower integers).
    c10::ScalarType st = self.scalar_type();
    tiny::Scalar empty = at::isFloatingType(st) ? tiny::Scalar::from_double(std::nan(""))
                         : c10::elementSize(st) >= 4
                             ? tiny::Scalar::from_int(st == c10::kLong ? std::numeric_limits<int64_t>::min()
                                                                       : std::numeric_limits<int32_t>::min())
                             : tiny::Scalar::from_int(0);
    return make_result(T::full({}, empty, to_engine(st)), st);
  }
  if (self.numel() * self.numel() > kLazyBudget) {
    at::Tensor host = to_host(self);
    return make_result(upload(ignore_nan ? host.nanmedian() : host.median()), self.scalar_type());
  }
  Slices s = slices(self.reshape({-1}), 0);
  return make_result(row_medians(s, ignore_nan).first.reshape({}), self.scalar_type());
}
at::Tensor tiny_median(const at::Tensor& self) { return median_all(self, false); }
at::Tensor tiny_nanmedian(const at::Tensor& self) { return median_all(self, true); }

std::tuple<at::Tensor&, at::Tensor&> median_dim_out(const at::Tensor& self, int64_t dim_, bool keepdim, at::Tensor& values,
                                                    at::Tensor& indices, bool ignore_nan) {
  const char* name = ignore_nan ? "nanmedian" : "median";
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != c10::kBool, "\"", name, "_out\" not implemented for 'Bool'");
  check_selection_outs(name, self, values, indices);
  int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), true);
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) != 0, name, "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  T v, i;
  if (!lazy_ok(self, dim)) {
    at::Tensor host = to_host(self);
    auto [hv, hi] = ignore_nan ? host.nanmedian(dim, keepdim) : host.median(dim, keepdim);
    TinyOp op(name);
    v = upload(hv);
    i = upload(hi);
  } else {
    TinyOp op(name);
    Slices s = slices(self, dim);
    auto [rv, ri] = row_medians(s, ignore_nan);
    v = selected(s, rv, self, dim, keepdim);
    i = selected(s, ri, self, dim, keepdim);
  }
  TinyOp op(name);
  assign_out(values, v, self.scalar_type(), {self});
  assign_out(indices, i, c10::kLong, {self});
  return {values, indices};
}
std::tuple<at::Tensor&, at::Tensor&> median_dim_values(const at::Tensor& self, int64_t dim, bool keepdim,
                                                       at::Tensor& values, at::Tensor& indices) {
  return median_dim_out(self, dim, keepdim, values, indices, false);
}
std::tuple<at::Tensor&, at::Tensor&> nanmedian_dim_values(const at::Tensor& self, int64_t dim, bool keepdim,
                                                          at::Tensor& values, at::Tensor& indices) {
  return median_dim_out(self, dim, keepdim, values, indices, true);
}

// ---------------------------------------------------------------- mode
// The most frequent value of each row (pairwise equality counts, n^2 per row, fused), the smallest
// of those tied, at its last index, as the CPU's sorted scan finds it. NaN equals nothing, so each
// NaN counts once; the CPU's sort leaves NaN first, so a NaN wins a tie of single values (at its
// first index).
std::tuple<at::Tensor, at::Tensor> tiny_mode(const at::Tensor& self, int64_t dim_, bool keepdim) {
  int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), true);
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) != 0, "mode(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  if (!lazy_ok(self, dim)) {
    auto [hv, hi] = at::mode(to_host(self), dim, keepdim);
    TinyOp op("mode");
    return {make_result(upload(hv), self.scalar_type()), make_result(upload(hi), c10::kLong)};
  }
  TinyOp op("mode");
  tiny::Shape out = to_shape(self.sizes());
  if (self.dim() > 0) {
    if (keepdim) out[size_t(dim)] = 1;
    else out.erase(out.begin() + dim);
  }
  if (self.numel() == 0) {
    return {make_result(T::full(out, tiny::Scalar::from_int(0), to_engine(self.scalar_type())), self.scalar_type()),
            make_result(i64(0, out), c10::kLong)};
  }
  Slices s = slices(self, dim);
  const bool is_bool = s.x.dtype() == DType::Bool;
  T x = is_bool ? s.x.cast(DType::UInt8) : s.x;
  const int64_t rows = s.rows, n = s.n;
  const tiny::Shape sq{rows, n, n}, row{rows, n};
  T count = x.reshape({rows, n, 1}).expand(sq).binary(Op::CmpEq, x.reshape({rows, 1, n}).expand(sq))
                .cast(DType::Int64).reduce(tiny::ReduceOp::Sum, {2}, false);
  if (tiny::is_float(x.dtype())) count = count.binary(Op::Add, x.unary(Op::IsNan).cast(DType::Int64));  // itself
  T best = count.reduce(tiny::ReduceOp::Max, {1}, true).expand(row);
  T candidate = count.binary(Op::CmpEq, best);
  T pos = positions(rows, n);
  auto row_min = [&](const T& v) { return v.reduce(tiny::ReduceOp::Min, {1}, true).expand(row); };
  auto row_max = [&](const T& v) { return v.reduce(tiny::ReduceOp::Max, {1}, true).expand(row); };
  T biggest = T::full(row, reduce_identity(at::native::ReductionType::MIN, is_bool ? c10::kByte : self.scalar_type()),
                      x.dtype());
  T value = row_min(T::where(candidate, x, biggest));
  T index = row_max(T::where(candidate.binary(Op::And, x.binary(Op::CmpEq, value)), pos, i64(-1, row)));
  if (tiny::is_float(x.dtype())) {
    T nan_candidate = candidate.binary(Op::And, x.unary(Op::IsNan));
    T first_nan = row_min(T::where(nan_candidate, pos, i64(n, row)));
    T nan_wins = first_nan.binary(Op::CmpLt, i64(n, row));
    value = T::where(nan_wins, T::full(row, tiny::Scalar::from_double(std::nan("")), x.dtype()), value);
    index = T::where(nan_wins, first_nan, index);
  }
  auto one = [&](const T& v) { return selected(s, v.shrink({{0, rows}, {0, 1}}), self, dim, keepdim); };
  T v = one(value);
  if (is_bool) v = v.cast(DType::Bool);
  return {make_result(v, self.scalar_type()), make_result(one(index), c10::kLong)};
}

// ---------------------------------------------------------------- searchsorted / bucketize

// The CPU's checks (searchsorted_pre_check), with the sorter's range read on the host.
void searchsorted_check(const at::Tensor& boundaries, const at::Tensor& input, c10::ScalarType out_dtype, bool out_int32,
                        bool right, std::optional<c10::string_view> side, const at::Tensor& sorter) {
  if (side) {
    TORCH_CHECK(*side == "left" || *side == "right", "torch.searchsorted(): side can only be 'left' or 'right' but ",
                "got ", *side);
    TORCH_CHECK(!right || *side == "right", "torch.searchsorted(): side and right can't be set to opposites, got side "
                "of ", *side, " while right was True");
  }
  TORCH_CHECK(boundaries.device() == input.device(), "torch.searchsorted(): boundaries and input value tensors ",
              "should have same device type, but got boundaries tensor device type ", boundaries.device(), " and input value ",
              "tensor device type ", input.device());
  if (sorter.defined()) {
    TORCH_CHECK(sorter.device() == boundaries.device(), "torch.searchsorted(): sorter and boundary tensors should ",
                "have same device type, but got sorter tensor device type ", sorter.device(), " and input value tensor ",
                "device type ", boundaries.device());
    TORCH_CHECK(sorter.sizes() == boundaries.sizes(), "torch.searchsorted(): boundary and sorter must have the same "
                "size, but got boundary tensor ", boundaries.sizes(), "and got sorter tensor ", sorter.sizes());
    TORCH_CHECK(sorter.scalar_type() == c10::kLong, "torch.searchsorted(): sorter must be a tensor of long ",
                "dtype but got dtype ", sorter.scalar_type());
    if (sorter.numel() > 0) {
      HostIndex h = host_index(sorter);
      int64_t n = sorter.sizes().back();
      TORCH_CHECK(!find_bad(h, [&](int64_t v) { return v < 0 || v >= n; }), "torch.searchsorted(): sorter index out of range");
    }
  }
  TORCH_CHECK(input.dim() > 0 || (input.dim() == 0 && input.numel() == 1 && boundaries.dim() == 1),
              "torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is 1, but we got ",
              "boundaries tensor dim(", boundaries.dim(), ") and input value's dim(", input.dim(), ") numel(",
              input.numel(), ")");
  TORCH_CHECK(boundaries.dim() != 0, "torch.searchsorted(): boundaries tensor should have positive dimension, but ",
              "got 0 dimension");
  TORCH_CHECK(boundaries.dim() == 1 || at::native::searchsorted_dims_matched_before_last_dim(boundaries, input),
              "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor ",
              "and input value tensor must match, but we got boundaries tensor ", boundaries.sizes(), " and input value tensor ",
              input.sizes());
  TORCH_CHECK((out_dtype == c10::kLong && !out_int32) || (out_dtype == c10::kInt && out_int32),
              "torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or Long(int64) depending on ",
              "whether out_int32 flag is True, but we got output tensor's dtype ", out_dtype, " and out_int32 flag is ",
              (out_int32 ? "True" : "False"));
}

// The CPU's lower / upper bound loop, replayed for every input element at once.
T searchsorted_value(const at::Tensor& boundaries, const at::Tensor& input, bool right, const at::Tensor& sorter) {
  at::native::ResultTypeState state = {};
  state = at::native::update_result_type_state(boundaries, state);
  state = at::native::update_result_type_state(input, state);
  c10::ScalarType common = at::native::result_type(state);
  tiny::Shape shape = to_shape(input.sizes());
  int64_t n = boundaries.sizes().back();
  if (input.numel() == 0 || n == 0) return i64(0, shape);
  T val = read(input).cast(to_engine(common));
  T bd = read(boundaries).cast(to_engine(common)).reshape({boundaries.numel()});
  T st = sorter.defined() ? read(sorter).reshape({sorter.numel()}) : T();
  // start of each element's boundary row
  OffsetSum base_sum(shape);
  if (boundaries.dim() > 1) {
    auto strides = c10::contiguous_strides(boundaries.sizes());
    for (int d = 0; d + 1 < int(shape.size()); d++) base_sum.add_axis(d, strides[size_t(d)]);
  }
  T base = base_sum.value();
  T start = i64(0, shape), end = i64(n, shape), one = i64(1, shape);
  int steps = 1;
  while ((int64_t(1) << steps) <= n) steps++;
  for (int s = 0; s < steps; s++) {
    T active = start.binary(Op::CmpLt, end);
    T mid = start.binary(Op::Add, end.binary(Op::Sub, start).binary(Op::Shr, one));
    T at = base.binary(Op::Add, mid);
    if (st.defined()) at = base.binary(Op::Add, st.gather(at));
    T mid_val = bd.gather(at);
    // lower bound moves right while !(mid_val >= val), upper bound while !(mid_val > val)
    T stop = right ? val.binary(Op::CmpLt, mid_val) : val.binary(Op::CmpLe, mid_val);
    T go_right = active.binary(Op::And, stop.unary(Op::Not));
    T go_left = active.binary(Op::And, stop);
    start = T::where(go_right, mid.binary(Op::Add, one), start);
    end = T::where(go_left, mid, end);
  }
  return start;
}

bool side_right(bool right, std::optional<c10::string_view> side) { return right || (side && *side == "right"); }

at::Tensor tiny_searchsorted(const at::Tensor& boundaries, const at::Tensor& input, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt) {
  at::Tensor sorter = sorter_opt.has_value() ? *sorter_opt : at::Tensor();
  c10::ScalarType dt = out_int32 ? c10::kInt : c10::kLong;
  searchsorted_check(boundaries, input, dt, out_int32, right, side, sorter);
  TinyOp op("searchsorted");
  return make_result(searchsorted_value(boundaries, input, side_right(right, side), sorter), dt);
}
at::Tensor& searchsorted_out(const at::Tensor& boundaries, const at::Tensor& input, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& out) {
  at::Tensor sorter = sorter_opt.has_value() ? *sorter_opt : at::Tensor();
  searchsorted_check(boundaries, input, out.scalar_type(), out_int32, right, side, sorter);
  TinyOp op("searchsorted");
  return assign_out(out, searchsorted_value(boundaries, input, side_right(right, side), sorter), out.scalar_type(),
                    {boundaries, input});
}
// A Scalar input as a wrapped-number tensor (for type promotion), on the device.
at::Tensor tiny_scalar(const c10::Scalar& s) {
  at::Tensor host = at::native::searchsorted_scalar_tensor(s, c10::Device(c10::kCPU));
  TinyOp op("scalar");
  at::Tensor t = make_result(from_cpu(host), host.scalar_type());
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}
at::Tensor searchsorted_scalar(const at::Tensor& boundaries, const c10::Scalar& value, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return tiny_searchsorted(boundaries, tiny_scalar(value), out_int32, right, side, sorter);
}
at::Tensor& searchsorted_scalar_out(const at::Tensor& boundaries, const c10::Scalar& value, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                    at::Tensor& out) {
  return searchsorted_out(boundaries, tiny_scalar(value), out_int32, right, side, sorter, out);
}

at::Tensor tiny_bucketize(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return tiny_searchsorted(boundaries, self, out_int32, right, std::nullopt, std::nullopt);
}
at::Tensor& bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right, at::Tensor& out) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}
at::Tensor bucketize_scalar(const c10::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  return tiny_bucketize(tiny_scalar(self), boundaries, out_int32, right);
}

// ---------------------------------------------------------------- isin

// elements[i] in test_elements, compared in their common dtype (NaN is in
// nothing): a fused compare-and-any over the test set when the pairs are few,
// else a binary search of each element in the sorted test set; both lazy.
at::Tensor isin_value(const at::Tensor& elements, const at::Tensor& test, bool invert) {
  c10::ScalarType common = at::result_type(elements, test);
  at::Tensor e = elements.to(common), t = test.to(common).reshape({-1});
  at::Tensor found;
  if (t.numel() <= 1 || elements.numel() * t.numel() <= (int64_t(1) << 24)) {
    found = at::eq(e.unsqueeze(-1), t).any(-1);
  } else {
    at::Tensor sorted = std::get<0>(at::sort(t));
    at::Tensor flat = e.reshape({-1});
    at::Tensor pos = at::searchsorted(sorted, flat).clamp_max(t.numel() - 1);
    found = at::eq(sorted.index_select(0, pos), flat).reshape(elements.sizes());
  }
  return invert ? found.logical_not() : found;
}

at::Tensor& isin_into(const at::Tensor& value, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == c10::kBool, "Expected out tensor to have dtype Bool, but got ", out.scalar_type(),
              " instead");
  at::native::resize_output(out, value.sizes());
  return out.copy_(value);
}

at::Tensor isin_tt(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert) {
  MetaOnly<at::meta::structured_isin_Tensor_Tensor>().meta(elements, test, assume_unique, invert);
  return isin_value(elements, test, invert);
}
at::Tensor& isin_tt_out(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert,
                        at::Tensor& out) {
  MetaOnly<at::meta::structured_isin_Tensor_Tensor>({out}).meta(elements, test, assume_unique, invert);
  return isin_into(isin_value(elements, test, invert), out);
}
at::Tensor isin_ts(const at::Tensor& elements, const c10::Scalar& test, bool assume_unique, bool invert) {
  MetaOnly<at::meta::structured_isin_Tensor_Scalar>().meta(elements, test, assume_unique, invert);
  return isin_value(elements, tiny_scalar(test), invert);
}
at::Tensor& isin_ts_out(const at::Tensor& elements, const c10::Scalar& test, bool assume_unique, bool invert,
                        at::Tensor& out) {
  MetaOnly<at::meta::structured_isin_Tensor_Scalar>({out}).meta(elements, test, assume_unique, invert);
  return isin_into(isin_value(elements, tiny_scalar(test), invert), out);
}
at::Tensor isin_st(const c10::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert) {
  MetaOnly<at::meta::structured_isin_Scalar_Tensor>().meta(element, test, assume_unique, invert);
  return isin_value(tiny_scalar(element), test, invert);
}
at::Tensor& isin_st_out(const c10::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert,
                        at::Tensor& out) {
  MetaOnly<at::meta::structured_isin_Scalar_Tensor>({out}).meta(element, test, assume_unique, invert);
  return isin_into(isin_value(tiny_scalar(element), test, invert), out);
}

// ---------------------------------------------------------------- unique (host)

at::Tensor up(const at::Tensor& host) {
  TinyOp op("unique");
  return make_result(upload(host), host.scalar_type());
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted, bool return_inverse,
                                                       bool return_counts) {
  auto [a, b, c] = at::_unique2(to_host(self), sorted, return_inverse, return_counts);
  return {up(a), up(b), up(c)};
}
std::tuple<at::Tensor, at::Tensor> unique1(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [a, b] = at::_unique(to_host(self), sorted, return_inverse);
  return {up(a), up(b)};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool sorted,
                                                          bool return_inverse, bool return_counts) {
  auto [a, b, c] = at::unique_dim(to_host(self), dim, sorted, return_inverse, return_counts);
  return {up(a), up(b), up(c)};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  auto [a, b, c] = at::unique_consecutive(to_host(self), return_inverse, return_counts, dim);
  return {up(a), up(b), up(c)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sort.stable", sort_stable);
  m.impl("sort.values_stable", sort_values_stable);
  m.impl("topk", tiny_topk);
  m.impl("topk.values", topk_out);
  m.impl("kthvalue.values", kthvalue_out);
  m.impl("mode", tiny_mode);
  m.impl("median", tiny_median);
  m.impl("nanmedian", tiny_nanmedian);
  m.impl("median.dim_values", median_dim_values);
  m.impl("nanmedian.dim_values", nanmedian_dim_values);
  m.impl("searchsorted.Tensor", tiny_searchsorted);
  m.impl("searchsorted.Tensor_out", searchsorted_out);
  m.impl("searchsorted.Scalar", searchsorted_scalar);
  m.impl("searchsorted.Scalar_out", searchsorted_scalar_out);
  m.impl("bucketize.Tensor", tiny_bucketize);
  m.impl("bucketize.Tensor_out", bucketize_out);
  m.impl("bucketize.Scalar", bucketize_scalar);
  m.impl("isin.Tensor_Tensor", isin_tt);
  m.impl("isin.Tensor_Tensor_out", isin_tt_out);
  m.impl("isin.Tensor_Scalar", isin_ts);
  m.impl("isin.Tensor_Scalar_out", isin_ts_out);
  m.impl("isin.Scalar_Tensor", isin_st);
  m.impl("isin.Scalar_Tensor_out", isin_st_out);
  m.impl("_unique2", unique2);
  m.impl("_unique", unique1);
  m.impl("unique_dim", unique_dim);
  m.impl("unique_consecutive", unique_consecutive);
}

}  // namespace torch_tiny
