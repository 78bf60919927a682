// Shared by the linear-algebra op files (ops_linalg_solve, ops_linalg_decomp):
// views of rows, columns and entries of batched matrices, index grids, ATen's
// argument checks, and the multi-output result helpers.
#pragma once
#include <ATen/Tensor.h>

#include <tuple>
#include <utility>
#include <vector>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/pointwise.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny::linalg {

using T = tiny::Tensor;

// The first `count` rows (axis_from_end 2) or columns (1) of a.
inline T leading(const T& a, int axis_from_end, int64_t count) {
  tiny::Ranges r;
  for (auto v : a.shape()) r.push_back({0, v});
  r[r.size() - size_t(axis_from_end)] = {0, count};
  return a.shrink(r);
}
inline T transposed(const T& a) {
  std::vector<int> p;
  for (int i = 0; i < a.ndim(); i++) p.push_back(i);
  std::swap(p[p.size() - 1], p[p.size() - 2]);
  return a.permute(p);
}
// A host loop's step index as a launch parameter (float64, so positions compare
// exactly): every step of the loop is then the same graph, scheduled and compiled
// once per shape, where a literal index would make each step a new program.
inline T step_index(const tiny::Shape& s, int64_t j) {
  return T::param(s, tiny::Scalar::from_double(double(j)), tiny::DType::Float64);
}
// Each element's position along the axis `axis_from_end` (1: columns, 2: rows), as float64.
inline T positions(const tiny::Shape& s, int axis_from_end) {
  return iota(s, int(s.size()) - axis_from_end).cast(tiny::DType::Float64);
}
// Row (axis_from_end 2) or column (1) `at` of x (..., m, n), kept as a size-1 dim, by a
// masked sum over that axis (no step-specific view).
inline T line_at(const T& x, int axis_from_end, int64_t at) {
  const tiny::Shape& s = x.shape();
  T hit = positions(s, axis_from_end).binary(tiny::Op::CmpEq, step_index(s, at));
  return T::where(hit, x, T::full(s, tiny::Scalar::from_int(0), x.dtype()))
      .reduce(tiny::ReduceOp::Sum, {int(s.size()) - axis_from_end}, true);
}
inline T row_at(const T& x, int64_t i) { return line_at(x, 2, i); }  // (..., 1, n)
inline T col_at(const T& x, int64_t j) { return line_at(x, 1, j); }  // (..., m, 1)
inline T entry_at(const T& x, int64_t i, int64_t j) { return col_at(row_at(x, i), j); }  // (..., 1, 1)

inline tiny::Shape appended(tiny::Shape s, int64_t v) {
  s.push_back(v);
  return s;
}
// (..., n) as a row (..., 1, n) or a column (..., n, 1)
inline T as_row(const T& v) {
  tiny::Shape s = v.shape();
  s.insert(s.end() - 1, 1);
  return v.reshape(s);
}
inline T as_col(const T& v) { return v.reshape(appended(v.shape(), 1)); }
inline tiny::Shape batch_of(const tiny::Shape& s) { return tiny::Shape(s.begin(), s.end() - 2); }
inline T rows_of(const tiny::Shape& s) { return iota(s, int(s.size()) - 2); }
inline T cols_of(const tiny::Shape& s) { return iota(s, int(s.size()) - 1); }
// The (..., m, n) identity (ones where row == column), in x's dtype.
inline T eye(const tiny::Shape& s, tiny::DType dt) {
  return rows_of(s).binary(tiny::Op::CmpEq, cols_of(s)).cast(dt);
}

inline void check_matrix(const at::Tensor& a, const char* api, const char* name) {
  TORCH_CHECK(a.dim() >= 2, api, ": The input tensor ", name, " must have at least 2 dimensions.");
}
inline void check_square(const at::Tensor& a, const char* api) {
  TORCH_CHECK(a.size(-1) == a.size(-2), api, api[0] ? ": " : "", "A must be batches of square matrices, but they are ",
              a.size(-2), " by ", a.size(-1), " matrices");
}
inline void check_square_matrices(const at::Tensor& A, const char* api) {
  check_matrix(A, api, "A");
  check_square(A, api);
}
// float32 and float64 compute here (the CPU's LAPACK has no 16-bit kernels);
// complex tensors are stored on tiny but not computed with.
inline void check_lapack_dtype(c10::ScalarType t, const char* kernel) {
  if (t == c10::kHalf || t == c10::kBFloat16) pw::not_implemented_for(kernel, t);
}
inline void check_float_input(c10::ScalarType dt, const char* api) {
  TORCH_CHECK(c10::isFloatingType(dt) || c10::isComplexType(dt), api,
              ": Expected a floating point or complex tensor as input. Got ", dt);
}

// An op's outputs: lazy values with their ATen dtypes, delivered as new tensors
// (made) or into out= tensors (assigned).
struct Result {
  T value;
  c10::ScalarType dtype;
};
using Results = std::vector<Result>;

template <size_t... I>
auto made(const Results& r, std::index_sequence<I...>) {
  return std::make_tuple(make_result(r[I].value, r[I].dtype)...);
}
template <size_t N>
auto made(const Results& r) {
  return made(r, std::make_index_sequence<N>());
}
template <class... Outs>
std::tuple<Outs&...> assigned(const Results& r, const std::vector<at::Tensor>& inputs, Outs&... outs) {
  size_t i = 0;
  ((assign_out(outs, r[i].value, r[i].dtype, inputs), ++i), ...);
  return {outs...};
}

}  // namespace torch_tiny::linalg
