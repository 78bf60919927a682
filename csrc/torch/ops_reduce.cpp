// Value reductions: sum, mean, prod, nansum, amax/amin, max/min over
// everything, aminmax, any/all, count_nonzero, logsumexp, equal. Each is one
// engine REDUCE (plus elementwise work the scheduler fuses around it).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>

#include "engine/schedule/trace.h"
#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/pointwise.h"
#include "torch/index_util.h"
#include "torch/reduce_util.h"
#include "torch/storage_only.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

// sum / prod keep integer results in int64, as ATen does
c10::ScalarType sum_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return at::native::get_dtype_from_self(self, dtype, /*promote_integers=*/true);
}

// ---------------------------------------------------------------- sum / prod / nansum
template <ReduceOp R>
T sum_like_value(const at::Tensor& self, const std::vector<int>& axes, bool keepdim, c10::ScalarType dt, bool nan_zero) {
  T v = read(self).cast(to_engine(dt));
  if (nan_zero) v = select(is_nan(v), constant_like(v, 0), v);
  return squeeze_axes(reduce_keep(v, R, axes), axes, keepdim);
}

// nansum of a float input into an integer out= has no CPU kernel (with
// dtype= the input is cast first, which works)
void check_nansum(const at::Tensor& self, c10::ScalarType dt) {
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isFloatingType(self.scalar_type()) || c10::isFloatingType(dt),
                              "\"nansum_cpu\" not implemented for '", dt, "'");
}

template <ReduceOp R, bool NanZero>
at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<c10::ScalarType> dtype) {
  TinyOp op(R == ReduceOp::Sum ? (NanZero ? "nansum" : "sum") : "prod");
  c10::ScalarType dt = sum_dtype(self, dtype);
  return make_result(sum_like_value<R>(self, reduce_axes(self, dims), keepdim, dt, NanZero), dt);
}
template <ReduceOp R, bool NanZero>
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op(R == ReduceOp::Sum ? (NanZero ? "nansum" : "sum") : "prod");
  // the result dtype is out's unless dtype= names one (which out must then have)
  c10::ScalarType dt = dtype.value_or(out.scalar_type());
  if (NanZero && !dtype) check_nansum(self, dt);
  return assign_out_exact(out, sum_like_value<R>(self, reduce_axes(self, dims), keepdim, dt, NanZero), dt);
}
template <ReduceOp R>
at::Tensor sum_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return sum_dim<R, false>(self, std::nullopt, false, dtype);
}
template <ReduceOp R>
at::Tensor& sum_all_out(const at::Tensor& self, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  return sum_out<R, false>(self, std::nullopt, false, dtype, out);
}
at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
  return sum_dim<ReduceOp::Prod, false>(self, c10::IntArrayRef{dim}, keepdim, dtype);
}
at::Tensor& prod_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype,
                         at::Tensor& out) {
  return sum_out<ReduceOp::Prod, false>(self, c10::IntArrayRef{dim}, keepdim, dtype, out);
}

// ---------------------------------------------------------------- mean
c10::ScalarType mean_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType dt = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(dt) || c10::isComplexType(dt),
              "mean(): could not infer output dtype. ", (dtype ? "Optional" : "Input"),
              " dtype must be either a floating point or complex dtype. Got: ", dt);
  return dt;
}
// sum / n, in float32 for 16-bit floats and rounded once (the CPU's order)
T mean_value(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, c10::ScalarType dt) {
  auto axes = reduce_axes(self, dims);
  // the CPU sums the input straight in float32 for a 16-bit result
  tiny::DType acc = tiny::compute_dtype(to_engine(dt));
  T s = reduce_keep(read(self).cast(acc), ReduceOp::Sum, axes);
  s = div(s, constant_like(s, double(reduced_count(self, axes))));
  return squeeze_axes(s, axes, keepdim).cast(to_engine(dt));
}
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<c10::ScalarType> dtype) {
  TinyOp op("mean");
  c10::ScalarType dt = mean_dtype(self, dtype);
  return make_result(mean_value(self, dims, keepdim, dt), dt);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  TinyOp op("mean");
  c10::ScalarType dt = mean_dtype(self, dtype);
  TORCH_CHECK(c10::canCast(dt, out.scalar_type()), "result type ", dt, " can't be cast to the desired output type ",
              out.scalar_type());
  // the CPU sums straight into out's dtype
  return assign_out_cast(out, mean_value(self, dims, keepdim, out.scalar_type()), dt);
}
at::Tensor mean_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return mean_dim(self, std::nullopt, false, dtype);
}

// ---------------------------------------------------------------- amax / amin / max() / min()
const char* extreme_name(bool is_max) { return is_max ? "amax()" : "amin()"; }

template <bool IsMax>
T amax_value(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim) {
  if (self.numel() == 0) at::native::zero_numel_check_dims(self, dims, extreme_name(IsMax));
  auto axes = reduce_axes(self, dims);
  return squeeze_axes(extreme(read(self), IsMax, axes), axes, keepdim);
}
template <bool IsMax>
at::Tensor amax(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim) {
  TinyOp op(IsMax ? "amax" : "amin");
  return make_result(amax_value<IsMax>(self, dims, keepdim), self.scalar_type());
}
template <bool IsMax>
at::Tensor& amax_out(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  TinyOp op(IsMax ? "amax" : "amin");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "Expected the dtype for input and out to match, but got ",
              self.scalar_type(), " for input's dtype and ", out.scalar_type(), " for out's dtype.");
  return assign_out_exact(out, amax_value<IsMax>(self, dims, keepdim), self.scalar_type());
}

template <bool IsMax>
T max_all_value(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, IsMax ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the "
              "'dim' argument.");
  auto axes = reduce_axes(self, std::nullopt);
  return squeeze_axes(extreme(read(self), IsMax, axes), axes, false);
}
template <bool IsMax>
at::Tensor max_all(const at::Tensor& self) {
  TinyOp op(IsMax ? "max" : "min");
  return make_result(max_all_value<IsMax>(self), self.scalar_type());
}
template <bool IsMax>
at::Tensor& max_all_out(const at::Tensor& self, at::Tensor& out) {
  TinyOp op(IsMax ? "max" : "min");
  // the CPU's (unhelpful) message, verbatim
  TORCH_CHECK(c10::canCast(self.scalar_type(), out.scalar_type()),
              "Expected canCast( typeMetaToScalarType(self.dtype()), typeMetaToScalarType(out.dtype())) to be true, "
              "but got false.  (Could this error message be improved?  If so, please report an enhancement request "
              "to PyTorch.)");
  return assign_out_cast(out, max_all_value<IsMax>(self), self.scalar_type());
}

// ---------------------------------------------------------------- aminmax
std::pair<T, T> aminmax_value(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  std::vector<int> axes;
  if (dim) {
    if (self.numel() == 0) at::native::zero_numel_check_dims(self, *dim, "aminmax");
    axes = reduce_axes(self, c10::IntArrayRef{*dim});
  } else {
    TORCH_CHECK(self.numel() > 0, "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                                  "identity.");
    axes = reduce_axes(self, std::nullopt);
  }
  T x = read(self);
  // both reductions read x over the same iteration space: one kernel
  return {squeeze_axes(extreme(x, false, axes), axes, keepdim), squeeze_axes(extreme(x, true, axes), axes, keepdim)};
}
std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  TinyOp op("aminmax");
  auto [mn, mx] = aminmax_value(self, dim, keepdim);
  return {make_result(mn, self.scalar_type()), make_result(mx, self.scalar_type())};
}
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                                 at::Tensor& min, at::Tensor& max) {
  TinyOp op("aminmax");
  auto [mn, mx] = aminmax_value(self, dim, keepdim);
  check_out_dtype(min, self.scalar_type());
  check_out_dtype(max, self.scalar_type());
  assign_out_exact(min, mn, self.scalar_type());
  assign_out_exact(max, mx, self.scalar_type());
  return {min, max};
}

// ---------------------------------------------------------------- any / all
// The CPU casts the input to the result dtype first: into a uint8 out=, a
// float input is truncated to uint8 before the nonzero test.
template <ReduceOp R>
T any_all_value(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, c10::ScalarType out) {
  auto axes = reduce_axes(self, dims);
  T x = read(self).cast(to_engine(out)).cast(tiny::DType::Bool);
  return squeeze_axes(reduce_keep(x, R, axes), axes, keepdim);
}
// uint8 inputs keep uint8 results (a NumPy-compat rule ATen keeps)
c10::ScalarType any_all_dtype(const at::Tensor& self) {
  return self.scalar_type() == c10::kByte ? c10::kByte : c10::kBool;
}
template <ReduceOp R>
at::Tensor any_all_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  TinyOp op(R == ReduceOp::Any ? "any" : "all");
  return make_result(any_all_value<R>(self, dims, keepdim, any_all_dtype(self)), any_all_dtype(self));
}
template <ReduceOp R>
at::Tensor& any_all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out) {
  TinyOp op(R == ReduceOp::Any ? "any" : "all");
  TORCH_CHECK(out.scalar_type() == c10::kBool || out.scalar_type() == c10::kByte, R == ReduceOp::Any ? "any" : "all",
              " only supports bool tensor for result, got: ", out.scalar_type());
  return assign_out_exact(out, any_all_value<R>(self, dims, keepdim, out.scalar_type()), out.scalar_type());
}
template <ReduceOp R>
at::Tensor any_all(const at::Tensor& self) { return any_all_dims<R>(self, std::nullopt, false); }
template <ReduceOp R>
at::Tensor& any_all_out(const at::Tensor& self, at::Tensor& out) {
  return any_all_dims_out<R>(self, std::nullopt, false, out);
}
template <ReduceOp R>
at::Tensor any_all_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return any_all_dims<R>(self, c10::IntArrayRef{dim}, keepdim);
}
template <ReduceOp R>
at::Tensor& any_all_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  return any_all_dims_out<R>(self, c10::IntArrayRef{dim}, keepdim, out);
}

// ---------------------------------------------------------------- count_nonzero
at::Tensor count_nonzero(const at::Tensor& self, c10::IntArrayRef dims) {
  TinyOp op("count_nonzero");
  auto axes = reduce_axes(self, dims);
  T x = read(self);
  T nz = x.binary(Op::CmpNe, constant_like(x, 0)).cast(tiny::DType::Int64);
  return make_result(squeeze_axes(reduce_keep(nz, ReduceOp::Sum, axes), axes, false), c10::kLong);
}

// ---------------------------------------------------------------- logsumexp
// Integers compute in the default float type, as ATen's logsumexp does.
c10::ScalarType logsumexp_dtype(const at::Tensor& self) { return float_type_for(self.scalar_type()); }
T logsumexp_value(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim, c10::ScalarType dt) {
  auto axes = reduce_axes(self, dims);
  T x = read(self).cast(to_engine(dt)).cast(tiny::compute_dtype(to_engine(dt)));
  return squeeze_axes(logsumexp_keep(x, axes), axes, keepdim).cast(to_engine(dt));
}
at::Tensor logsumexp(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim) {
  TinyOp op("logsumexp");
  c10::ScalarType dt = logsumexp_dtype(self);
  return make_result(logsumexp_value(self, dims, keepdim, dt), dt);
}
at::Tensor& logsumexp_out(const at::Tensor& self, c10::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  TinyOp op("logsumexp");
  TORCH_CHECK(c10::isFloatingType(out.scalar_type()) || c10::isComplexType(out.scalar_type()),
              "logsumexp(): Expected floating point type for result tensor, but got: ", out.scalar_type());
  return assign_out_cast(out, logsumexp_value(self, dims, keepdim, logsumexp_dtype(self)), logsumexp_dtype(self));
}

// ---------------------------------------------------------------- equal
bool equal(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "Cannot compare two tensors on different devices. Got: ", a.device(), " and ",
              b.device());
  if (a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  T eq;
  {
    TinyOp op("equal");
    c10::ScalarType common = c10::promoteTypes(a.scalar_type(), b.scalar_type());
    eq = read(a).cast(to_engine(common)).binary(Op::CmpEq, read(b).cast(to_engine(common)));
    eq = reduce_keep(eq, ReduceOp::All, reduce_axes(a, std::nullopt)).reshape({});
  }
  bool result = false;
  tiny::RealizeCause cause("torch.equal");
  synchronize();
  eq.copy_to_host(&result);
  return result;
}

// ---------------------------------------------------------------- hash_tensor
// mode 0: the XOR of every element's bits widened to 64 (floats through
// double, integers sign-extended), a uint64 result (stored as int64 bits).
at::Tensor& hash_tensor_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, int64_t mode, at::Tensor& out) {
  TinyOp op("hash_tensor");
  TORCH_CHECK(mode == 0, "Unknown hash_tensor mode: ", mode);
  std::vector<int> axes = reduce_axes(self, dim);
  if (self.numel() == 0) at::native::zero_numel_check_dims(self, dim, "hash_tensor");
  TORCH_CHECK(out.scalar_type() == c10::kUInt64, "Expected result to be of dtype uint64, but got ", out.scalar_type());
  c10::ScalarType st = self.scalar_type();
  if (is_storage_only(st)) pw::not_implemented_for("xor_sum_cpu", st);  // complex, uint16/32/64
  T bits;
  if (c10::isFloatingType(st)) {
    bits = read(self).cast(tiny::DType::Float64).bitcast(tiny::DType::Int64);
  } else {
    bits = read(self).cast(tiny::DType::Int64);
  }
  T r = squeeze_axes(reduce_keep(bits, ReduceOp::Xor, axes), axes, keepdim);
  TORCH_CHECK(out.device().type() == c10::DeviceType::PrivateUse1,
              "Expected out tensor to have device tiny:0, but got ", out.device(), " instead");
  at::native::resize_output(out, c10::IntArrayRef(r.shape()));
  at::assert_no_internal_overlap(out);
  if (out.numel() > 0) write(engine_view(out), r);
  return out;
}

// ---------------------------------------------------------------- histc
// The CPU's histc: edges lo and hi in the input's dtype, an element x in [lo, hi] counted in bin
// (x - lo) * bins / (hi - lo) computed in that dtype and truncated (the last bin keeps hi); NaN and
// elements outside are not counted. min == max takes the data's range (a host read, as the
// range is checked), widened by 1 on each side when it is a single value.
T histc_value(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"histc\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  const tiny::DType dt = to_engine(self.scalar_type());
  T x = read(self).reshape({self.numel()});
  double lo = min.toDouble(), hi = max.toDouble();
  if (lo == hi && self.numel() > 0) {
    T range = T::concat({x.reduce(ReduceOp::Min, {0}, true), x.reduce(ReduceOp::Max, {0}, true)}, 0);
    at::Tensor host = make_result(range.cast(tiny::DType::Float64), c10::kDouble).cpu();
    lo = host[0].item<double>();
    hi = host[1].item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  const int64_t n = self.numel();
  if (n == 0) return T::full({bins}, tiny::Scalar::from_int(0), dt);
  auto full = [&](double v) { return T::full({n}, tiny::Scalar::from_double(v), dt); };
  T left = full(lo), right = full(hi);
  T inside = left.binary(Op::CmpLe, x).binary(Op::And, x.binary(Op::CmpLe, right));
  T pos = x.binary(Op::Sub, left).binary(Op::Mul, full(double(bins))).binary(Op::Div, right.binary(Op::Sub, left));
  T bin = pos.cast(tiny::DType::Int64);
  bin = T::where(bin.binary(Op::CmpLt, i64(bins - 1, {n})), bin, i64(bins - 1, {n}));
  bin = T::where(i64(0, {n}).binary(Op::CmpLt, bin), bin, i64(0, {n}));
  T counts;
  if (n * bins <= (int64_t(1) << 26)) {  // one fused compare-and-count
    T ids = T::arange(bins, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), tiny::DType::Int64);
    T hit = bin.reshape({1, n}).expand({bins, n}).binary(Op::CmpEq, ids.reshape({bins, 1}).expand({bins, n}));
    hit = hit.binary(Op::And, inside.reshape({1, n}).expand({bins, n}));
    counts = hit.cast(tiny::DType::Int64).reduce(ReduceOp::Sum, {1}, false);
  } else {
    T target = T::where(inside, bin, i64(-1, {n}));  // dropped
    counts = T::full({bins}, tiny::Scalar::from_int(0), tiny::DType::Int64)
                 .scatter(target, inside.cast(tiny::DType::Int64), true);
  }
  return counts.cast(dt);
}
at::Tensor histc(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
  TinyOp op("histc");
  return make_result(histc_value(self, bins, min, max), self.scalar_type());
}
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max,
                      at::Tensor& out) {
  TinyOp op("histc");
  return assign_out(out, histc_value(self, bins, min, max), self.scalar_type(), {self});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", histc);
  m.impl("histc.out", histc_out);
  m.impl("hash_tensor.out", hash_tensor_out);
  m.impl("sum", sum_all<ReduceOp::Sum>);
  m.impl("sum.out", sum_all_out<ReduceOp::Sum>);
  m.impl("sum.dim_IntList", sum_dim<ReduceOp::Sum, false>);
  m.impl("sum.IntList_out", sum_out<ReduceOp::Sum, false>);
  m.impl("nansum", sum_dim<ReduceOp::Sum, true>);
  m.impl("nansum.out", sum_out<ReduceOp::Sum, true>);
  m.impl("prod", sum_all<ReduceOp::Prod>);
  m.impl("prod.out", sum_all_out<ReduceOp::Prod>);
  m.impl("prod.dim_int", prod_dim);
  m.impl("prod.int_out", prod_dim_out);
  m.impl("mean", mean_all);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
  m.impl("amax", amax<true>);
  m.impl("amax.out", amax_out<true>);
  m.impl("amin", amax<false>);
  m.impl("amin.out", amax_out<false>);
  m.impl("max", max_all<true>);
  m.impl("max.unary_out", max_all_out<true>);
  m.impl("min", max_all<false>);
  m.impl("min.unary_out", max_all_out<false>);
  m.impl("aminmax", aminmax);
  m.impl("aminmax.out", aminmax_out);
  m.impl("any", any_all<ReduceOp::Any>);
  m.impl("any.all_out", any_all_out<ReduceOp::Any>);
  m.impl("any.dim", any_all_dim<ReduceOp::Any>);
  m.impl("any.out", any_all_dim_out<ReduceOp::Any>);
  m.impl("any.dims", any_all_dims<ReduceOp::Any>);
  m.impl("any.dims_out", any_all_dims_out<ReduceOp::Any>);
  m.impl("all", any_all<ReduceOp::All>);
  m.impl("all.all_out", any_all_out<ReduceOp::All>);
  m.impl("all.dim", any_all_dim<ReduceOp::All>);
  m.impl("all.out", any_all_dim_out<ReduceOp::All>);
  m.impl("all.dims", any_all_dims<ReduceOp::All>);
  m.impl("all.dims_out", any_all_dims_out<ReduceOp::All>);
  m.impl("count_nonzero.dim_IntList", count_nonzero);
  m.impl("logsumexp", logsumexp);
  m.impl("logsumexp.out", logsumexp_out);
  m.impl("equal", equal);
}

}  // namespace torch_tiny
