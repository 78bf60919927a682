// Triangular solves, the Cholesky and LU factorizations as loops of lazy
// kernels: linalg_solve_triangular, triangular_solve, linalg_cholesky_ex,
// _cholesky_solve_helper (cholesky_solve), cholesky_inverse,
// linalg_lu_factor_ex, linalg_lu, lu_unpack, linalg_lu_solve,
// _linalg_solve_ex, linalg_inv_ex, _linalg_det, _linalg_slogdet.
// Each step is one elementwise update of the whole (batched) matrix, stored
// (a realize point: the next step reads a row, a column and a diagonal entry
// of it, which fused would be recomputed exponentially), so an n x n problem
// is n kernels of O(n^2) work: O(n^3) in all, every batch element at once.
// The factorizations follow LAPACK's unblocked potf2 / getf2, so their
// results and info match the CPU's (for matrices below LAPACK's block size).
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/pointwise.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"
#include "torch/linalg_util.h"

namespace torch_tiny {
namespace {

using namespace pw;
using namespace linalg;
using T = tiny::Tensor;
using tiny::Op;

// Solves A X = B for X, A (..., n, n) lower (or upper) triangular, B (..., n, k),
// batch dims equal. Only A's triangle (and diagonal unless unit) is read.
T solve_triangular_left(const T& A, const T& B, bool upper, bool unit) {
  const tiny::Shape& s = B.shape();
  int64_t n = s[s.size() - 2];
  T rows = positions(s, 2);
  T x = B;
  for (int64_t q = 0; q < n; q++) {
    int64_t i = upper ? n - 1 - q : q;
    T at = step_index(s, i);
    T xi = row_at(x, i);
    if (!unit) xi = xi / entry_at(A, i, i).expand(xi.shape());
    T xe = xi.expand(s);
    T later = upper ? lt(rows, at) : gt(rows, at);
    T step = where(eq(rows, at), xe, where(later, x - col_at(A, i).expand(s) * xe, x));
    x = q + 1 < n ? step.contiguous() : step;
  }
  return x;
}

// The lower Cholesky factor of the symmetric matrices s (only their lower
// triangle is read), column by column as LAPACK's potf2 (left-looking):
// column j is s's column j less the products of the finished columns. info
// (..., 1, 1) is j + 1 for the first pivot j that is not positive; that
// matrix keeps the pivot's value there and its other columns as they were.
std::pair<T, T> cholesky_lower(const T& s) {
  const tiny::Shape& shape = s.shape();
  int64_t n = shape.back();
  tiny::Shape col_shape = shape, one_shape = shape;
  col_shape.back() = 1;
  one_shape[shape.size() - 2] = one_shape.back() = 1;
  T rows = positions(shape, 2), cols = positions(shape, 1), col_rows = positions(col_shape, 2);
  T info = constant(one_shape, 0, tiny::DType::Int32);
  T m = s;
  for (int64_t j = 0; j < n; j++) {
    T at = step_index(shape, j), col_at_j = step_index(col_shape, j);
    // sum over p < j of L[i, p] * L[j, p], for every row i
    T done = where(lt(cols, at), m * row_at(m, j).expand(shape), 0.0);
    T mj = col_at(m, j);
    T c = mj - done.reduce(tiny::ReduceOp::Sum, {int(shape.size()) - 1}, true);  // (..., n, 1)
    T ajj = row_at(c, j);
    T fails = land(eq(info, 0.0), lnot(gt(ajj, 0.0)));  // also NaN
    T frozen = ne(info, 0.0);
    info = where(fails, (step_index(one_shape, j) + 1.0).cast(tiny::DType::Int32), info);
    T d = un(Op::Sqrt, ajj).expand(col_shape);
    T col = where(eq(col_rows, col_at_j), where(fails.expand(col_shape), c, d),
                  where(gt(col_rows, col_at_j), where(fails.expand(col_shape), mj, c / d), mj));
    T updated = where(eq(cols, at), col.expand(shape), m);
    m = where(frozen.expand(shape), m, updated);
    if (j + 1 < n) {
      m = m.contiguous();
      info = info.contiguous();
    }
  }
  return {where(ge(rows, cols), m, 0.0), info};
}

// ---------------------------------------------------------------- solve_triangular
T solve_triangular_value(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unit,
                         c10::ScalarType& dt) {
  const char* api = "linalg.solve_triangular";
  check_matrix(B, api, "B");
  check_matrix(A, api, "A");
  check_square(A, api);
  dt = A.scalar_type();  // B is taken in A's dtype, as on the CPU
  if (!c10::isFloatingType(dt) && !c10::isComplexType(dt)) not_implemented_for("triangular_solve_cpu", dt);
  check_lapack_dtype(dt, "triangular_solve_cpu");
  int64_t n = A.size(-1);
  TORCH_CHECK(left ? B.size(-2) == n : B.size(-1) == n, api, ": Incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", A.size(-2), "x", n, " and ", B.size(-2), "x", B.size(-1), ")");
  auto batch = at::infer_size(A.sizes().slice(0, size_t(A.dim() - 2)), B.sizes().slice(0, size_t(B.dim() - 2)));
  tiny::Shape ab(batch.begin(), batch.end()), bb = ab;
  ab.insert(ab.end(), {n, n});
  bb.insert(bb.end(), {B.size(-2), B.size(-1)});
  tiny::DType e = to_engine(dt);
  T a = broadcast_to(read(A).cast(e), ab), b = broadcast_to(read(B).cast(e), bb);
  if (left) return solve_triangular_left(a, b, upper, unit);
  return transposed(solve_triangular_left(transposed(a), transposed(b), !upper, unit));  // X A = B: A^T X^T = B^T
}

at::Tensor linalg_solve_triangular(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unit) {
  TinyOp op("linalg_solve_triangular");
  c10::ScalarType dt;
  T v = solve_triangular_value(A, B, upper, left, unit, dt);
  return make_result(v, dt);
}
at::Tensor& linalg_solve_triangular_out(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unit,
                                        at::Tensor& out) {
  TinyOp op("linalg_solve_triangular");
  c10::ScalarType dt;
  T v = solve_triangular_value(A, B, upper, left, unit, dt);
  return assign_out(out, v, dt, {A, B});
}

// triangular_solve(b, A): op(A) X = b with op the transpose when asked; also
// returns A broadcast to the batch (LAPACK's working copy of it).
std::tuple<T, T, c10::ScalarType> triangular_solve_value(const at::Tensor& b, const at::Tensor& A, bool upper,
                                                         bool transpose, bool unit) {
  TORCH_CHECK(b.dim() >= 2, "torch.triangular_solve: Expected b to have at least 2 dimensions, but it has ", b.dim(),
              " dimensions instead");
  TORCH_CHECK(A.dim() >= 2, "torch.triangular_solve: Expected A to have at least 2 dimensions, but it has ", A.dim(),
              " dimensions instead");
  check_square(A, "");
  TORCH_CHECK(A.scalar_type() == b.scalar_type(), "Expected b and A to have the same dtype, but found b of type ",
              b.scalar_type(), " and A of type ", A.scalar_type(), " instead.");
  c10::ScalarType dt = A.scalar_type();
  check_lapack_dtype(dt, "triangular_solve_cpu");
  int64_t n = A.size(-1);
  TORCH_CHECK(b.size(-2) == n, "Incompatible matrix sizes for triangular_solve: each A matrix is ", n, " by ", n,
              " but each b matrix is ", b.size(-2), " by ", b.size(-1));
  auto batch = at::infer_size(A.sizes().slice(0, size_t(A.dim() - 2)), b.sizes().slice(0, size_t(b.dim() - 2)));
  tiny::Shape ab(batch.begin(), batch.end()), bb = ab;
  ab.insert(ab.end(), {n, n});
  bb.insert(bb.end(), {n, b.size(-1)});
  T a = broadcast_to(read(A), ab), bv = broadcast_to(read(b), bb);
  T x = transpose ? solve_triangular_left(transposed(a), bv, !upper, unit) : solve_triangular_left(a, bv, upper, unit);
  return {x, a, dt};
}

std::tuple<at::Tensor, at::Tensor> triangular_solve(const at::Tensor& b, const at::Tensor& A, bool upper,
                                                    bool transpose, bool unit) {
  TinyOp op("triangular_solve");
  auto [x, a, dt] = triangular_solve_value(b, A, upper, transpose, unit);
  return {make_result(x, dt), make_result(a, dt)};
}
std::tuple<at::Tensor&, at::Tensor&> triangular_solve_out(const at::Tensor& b, const at::Tensor& A, bool upper,
                                                          bool transpose, bool unit, at::Tensor& X, at::Tensor& M) {
  TinyOp op("triangular_solve");
  auto [x, a, dt] = triangular_solve_value(b, A, upper, transpose, unit);
  assign_out(X, x, dt, {b, A});
  assign_out(M, a, dt, {b, A});
  return {X, M};
}

// ---------------------------------------------------------------- Cholesky
std::pair<T, T> cholesky_value(const at::Tensor& self, bool upper) {
  const char* api = "linalg.cholesky";
  check_matrix(self, api, "A");
  check_square(self, api);
  c10::ScalarType dt = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(dt) || c10::isComplexType(dt), api,
              ": Expected a floating point or complex tensor as input. Got ", dt);
  check_lapack_dtype(dt, "cholesky_cpu");
  T a = read(self);
  T rows = rows_of(a.shape()), cols = cols_of(a.shape());
  // the triangle LAPACK reads, mirrored: the factor of the upper one is the
  // transpose of the lower factor of its transpose
  T s = upper ? where(le(rows, cols), a, transposed(a)) : where(ge(rows, cols), a, transposed(a));
  auto [l, info] = cholesky_lower(s);
  tiny::Shape batch(a.shape().begin(), a.shape().end() - 2);
  return {upper ? transposed(l) : l, info.reshape(batch)};
}

std::tuple<at::Tensor, at::Tensor> linalg_cholesky_ex(const at::Tensor& self, bool upper, bool check_errors) {
  TinyOp op("linalg_cholesky_ex");
  auto [l, info] = cholesky_value(self, upper);
  at::Tensor L = make_result(l, self.scalar_type()), I = make_result(info, c10::kInt);
  if (check_errors) at::_linalg_check_errors(I, "linalg.cholesky_ex", self.dim() == 2);
  return {L, I};
}
std::tuple<at::Tensor&, at::Tensor&> linalg_cholesky_ex_out(const at::Tensor& self, bool upper, bool check_errors,
                                                            at::Tensor& L, at::Tensor& info) {
  TinyOp op("linalg_cholesky_ex");
  auto [l, i] = cholesky_value(self, upper);
  assign_out(L, l, self.scalar_type(), {self});
  assign_out(info, i, c10::kInt, {self});
  if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", self.dim() == 2);
  return {L, info};
}

// L L^T X = B (or U^T U X = B): two triangular solves. cholesky_solve has
// broadcast B and L already.
T cholesky_solve_value(const T& b, const T& l, bool upper) {
  T lower = upper ? transposed(l) : l;
  return solve_triangular_left(transposed(lower), solve_triangular_left(lower, b, false, false), true, false);
}

at::Tensor cholesky_solve_helper(const at::Tensor& self, const at::Tensor& A, bool upper) {
  TinyOp op("cholesky_solve");
  check_lapack_dtype(self.scalar_type(), "cholesky_solve_cpu");
  return make_result(cholesky_solve_value(read(self), read(A), upper), self.scalar_type());
}

T cholesky_inverse_value(const at::Tensor& self, bool upper) {
  check_matrix(self, "cholesky_inverse", "A");
  check_square(self, "cholesky_inverse");
  c10::ScalarType dt = self.scalar_type();
  if (!c10::isFloatingType(dt) && !c10::isComplexType(dt)) not_implemented_for("cholesky_inverse_out_cpu", dt);
  check_lapack_dtype(dt, "cholesky_inverse_out_cpu");
  T l = read(self);
  const tiny::Shape& s = l.shape();
  T identity = eye(s, l.dtype());
  return cholesky_solve_value(identity, l, upper);
}

at::Tensor cholesky_inverse(const at::Tensor& self, bool upper) {
  TinyOp op("cholesky_inverse");
  return make_result(cholesky_inverse_value(self, upper), self.scalar_type());
}
at::Tensor& cholesky_inverse_out(const at::Tensor& self, bool upper, at::Tensor& out) {
  TinyOp op("cholesky_inverse");
  return assign_out(out, cholesky_inverse_value(self, upper), self.scalar_type(), {self});
}


// ---------------------------------------------------------------- LU
// LU with partial pivoting as LAPACK's getf2: for each column j the pivot is
// the first row >= j with the largest |value|, swapped into row j (a masked
// sum over rows reads it: no gather), the column below scaled by it unless it
// is 0 (then info names the first such j), and the trailing block updated.
struct LU {
  T lu;      // (..., m, n): U on and above the diagonal, L's multipliers below
  T pivots;  // (..., k) int32, 1-based rows swapped with row j
  T info;    // (...) int32
};

T row_where(const T& a, const T& r) {  // (..., 1, n): the row of a named by r (..., 1, 1)
  const tiny::Shape& s = a.shape();
  return where(eq(rows_of(s), r.expand(s)), a, 0.0).reduce(tiny::ReduceOp::Sum, {int(s.size()) - 2}, true);
}

LU lu_factor(const T& a) {
  const tiny::Shape& shape = a.shape();
  size_t nd = shape.size();
  int64_t m = shape[nd - 2], n = shape[nd - 1], k = std::min(m, n);
  tiny::Shape batch(shape.begin(), shape.end() - 2), one = appended(appended(batch, 1), 1);
  tiny::Shape pvec = appended(batch, k);
  T rows = positions(shape, 2), cols = positions(shape, 1), row_index = rows_of(shape);
  T info = constant(one, 0, tiny::DType::Int32);
  T piv = constant(pvec, 0, tiny::DType::Int32), piv_at = positions(pvec, 1);
  T x = a;
  tiny::Shape col_shape = shape;
  col_shape.back() = 1;
  T col_rows = rows_of(col_shape);
  for (int64_t j = 0; j < k; j++) {
    T at = step_index(shape, j);
    T c = col_at(x, j);  // (..., m, 1)
    T mag = where(lt(col_rows.cast(tiny::DType::Float64), step_index(col_shape, j)), -1.0,
                  where(isnan(c), -1.0, un(Op::Abs, c)));
    T top = mag.reduce(tiny::ReduceOp::Max, {int(nd) - 2}, true);
    T big = constant(col_shape, double(m), tiny::DType::Int64);
    T p = where(eq(mag, top.expand(col_shape)), col_rows, big).reduce(tiny::ReduceOp::Min, {int(nd) - 2}, true);
    T pivot_row = row_where(x, p), row_j = row_at(x, j);  // (..., 1, n)
    T pe = p.expand(shape);
    T swapped = where(eq(rows, at), pivot_row.expand(shape), where(eq(row_index, pe), row_j.expand(shape), x));
    T pv = col_at(pivot_row, j);
    T zero = eq(pv, 0.0);
    info = where(land(eq(info, 0.0), zero), (step_index(one, j) + 1.0).cast(tiny::DType::Int32), info);
    T l = where(zero.expand(shape), swapped, swapped / pv.expand(shape));  // column j scaled below the pivot
    T lj = col_at(l, j).expand(shape);
    T update = swapped - lj * pivot_row.expand(shape);
    x = where(gt(rows, at), where(eq(cols, at), l, where(gt(cols, at), update, swapped)), swapped);
    T p1 = p.reshape(appended(batch, 1));  // (..., 1)
    piv = where(eq(piv_at, step_index(pvec, j)), (p1 + 1.0).cast(tiny::DType::Int32).expand(pvec), piv);
    if (j + 1 < k) {
      x = x.contiguous();
      piv = piv.contiguous();
      info = info.contiguous();
    }
  }
  return {x, piv, info.reshape(batch)};
}

// The row permutation of m rows the 1-based pivots (..., k) make, applied in
// order (row j swapped with row pivots[j] - 1): row i of L U is row perm[i] of A.
T perm_from_pivots(const T& pivots, int64_t m) {
  const tiny::Shape& ps = pivots.shape();
  tiny::Shape batch(ps.begin(), ps.end() - 1), vec = appended(batch, m);
  int last = int(vec.size()) - 1;
  T at = iota(vec, last), perm = at;
  T pivot_rows = as_row(pivots.cast(tiny::DType::Int64));  // (..., 1, k)
  for (int64_t j = 0; j < ps.back(); j++) {
    T p = (col_at(pivot_rows, j).reshape(appended(batch, 1)) - 1.0).expand(vec);  // (..., m)
    T perm_j = col_at(as_row(perm), j).reshape(appended(batch, 1)).expand(vec);
    T perm_p = where(eq(at, p), perm, 0.0).reduce(tiny::ReduceOp::Sum, {last}, true).expand(vec);
    perm = where(eq(at.cast(tiny::DType::Float64), step_index(vec, j)), perm_p, where(eq(at, p), perm_j, perm));
    if (j + 1 < ps.back()) perm = perm.contiguous();
  }
  return perm;
}

// P^T b (rows of b in the order perm names: row i is b's row perm[i]), or P b
// (inverse: row perm[i] is b's row i), through a one-hot product.
T permute_rows(const T& perm, const T& b, bool inverse) {
  const tiny::Shape& bs = b.shape();
  int64_t m = bs[bs.size() - 2];
  tiny::Shape sq = bs;
  sq.back() = m;
  T pi = perm.reshape(appended(perm.shape(), 1)).expand(sq);  // perm[i] at (i, r)
  T onehot = eq(pi, cols_of(sq)).cast(b.dtype());              // onehot[i, r] = perm[i] == r
  return (inverse ? transposed(onehot) : onehot).matmul(b);
}

// A (L U) X = B through the factors: X = U^-1 L^-1 P^T B, or for the adjoint
// (A^T X = B) X = P L^-T U^-T B. b (..., m, k) has lu's batch dims.
T lu_solve_left(const T& lu, const T& perm, const T& b, bool adjoint) {
  if (!adjoint)
    return solve_triangular_left(lu, solve_triangular_left(lu, permute_rows(perm, b, false), false, true), true, false);
  T lut = transposed(lu);
  return permute_rows(perm, solve_triangular_left(lut, solve_triangular_left(lut, b, false, false), true, true), true);
}

// linalg.lu_solve's equation for factors lu (..., n, n) and pivots (..., n)
// and a right side b: batch dims broadcast; X A = B is A^T X^T = B^T, the
// adjoint solve of the transposed right side.
T lu_solve_value(const T& lu, const T& pivots, const T& b, bool left, bool adjoint) {
  const tiny::Shape &ls = lu.shape(), &bs = b.shape();
  int64_t n = ls.back();
  auto batch = at::infer_size(c10::IntArrayRef(ls.data(), ls.size() - 2), c10::IntArrayRef(bs.data(), bs.size() - 2));
  tiny::Shape lb(batch.begin(), batch.end()), bb = lb, pb = lb;
  lb.insert(lb.end(), {n, n});
  bb.insert(bb.end(), {bs[bs.size() - 2], bs.back()});
  pb.push_back(n);
  T l = broadcast_to(lu, lb), perm = perm_from_pivots(broadcast_to(pivots, pb), n), bv = broadcast_to(b, bb);
  return left ? lu_solve_left(l, perm, bv, adjoint) : transposed(lu_solve_left(l, perm, transposed(bv), !adjoint));
}

void check_lu_dtype(c10::ScalarType dt) {
  if ((!c10::isFloatingType(dt) && !c10::isComplexType(dt)) || dt == c10::kHalf || dt == c10::kBFloat16)
    not_implemented_for("lu_cpu", dt);
}
std::pair<T, T> unpack_factors(const T& lu) {
  const tiny::Shape& s = lu.shape();
  size_t nd = s.size();
  int64_t m = s[nd - 2], n = s[nd - 1], k = std::min(m, n);
  tiny::Ranges rl, ru;
  for (auto v : s) {
    rl.push_back({0, v});
    ru.push_back({0, v});
  }
  rl[nd - 1] = {0, k};
  ru[nd - 2] = {0, k};
  T lpart = lu.shrink(rl), upart = lu.shrink(ru);
  T lr = rows_of(lpart.shape()), lc = cols_of(lpart.shape());
  T l = where(gt(lr, lc), lpart, eq(lr, lc).cast(lu.dtype()));
  T u = where(le(rows_of(upart.shape()), cols_of(upart.shape())), upart, 0.0);
  return {l, u};
}
T permutation_matrix(const T& perm, c10::ScalarType dt) {  // P[r, c] = perm[c] == r
  tiny::Shape sq = appended(perm.shape(), perm.shape().back());
  T pc = perm.reshape(appended(perm.shape(), 1)).expand(sq);  // perm[i] at (i, c)
  return transposed(eq(pc, cols_of(sq))).cast(to_engine(dt));
}

// A's factors after the CPU's checks (`dim_api` names the op in the rank's message)
LU checked_lu(const at::Tensor& A, bool pivot, const char* dim_api, const char* api) {
  TORCH_CHECK(A.dim() >= 2, dim_api, ": Expected tensor with 2 or more dimensions. Got size: ", A.sizes(), " instead");
  TORCH_CHECK(pivot, api, ": LU without pivoting is not implemented on the CPU");
  check_lu_dtype(A.scalar_type());
  return lu_factor(read(A));
}

Results lu_factor_values(const at::Tensor& A, bool pivot) {
  LU f = checked_lu(A, pivot, "torch.lu_factor", "linalg.lu_factor");
  return {{f.lu, A.scalar_type()}, {f.pivots, c10::kInt}, {f.info, c10::kInt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu_factor_ex(const at::Tensor& A, bool pivot, bool check_errors) {
  TinyOp op("linalg_lu_factor_ex");
  auto r = made<3>(lu_factor_values(A, pivot));
  if (check_errors) at::_linalg_check_errors(std::get<2>(r), "torch.linalg.lu_factor_ex", A.dim() == 2);
  return r;
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_factor_ex_out(const at::Tensor& A, bool pivot,
                                                                          bool check_errors, at::Tensor& LU,
                                                                          at::Tensor& pivots, at::Tensor& info) {
  TinyOp op("linalg_lu_factor_ex");
  auto r = assigned(lu_factor_values(A, pivot), {A}, LU, pivots, info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  return r;
}

// (P, L, U); the parts not asked for are empty
Results lu_unpack_values(const at::Tensor& LU, const at::Tensor& pivots, bool unpack_data, bool unpack_pivots) {
  TORCH_CHECK(LU.dim() >= 2, "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ", LU.sizes(),
              " instead");
  c10::ScalarType dt = LU.scalar_type();
  T empty = constant({0}, 0, to_engine(dt));
  Results r{{empty, dt}, {empty, dt}, {empty, dt}};
  if (unpack_data) {
    auto [l, u] = unpack_factors(read(LU));
    r[1].value = l;
    r[2].value = u;
  }
  if (unpack_pivots) {
    TORCH_CHECK(pivots.scalar_type() == c10::kInt, "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor "
                "of torch.int32 dtype. Note: this function is intended to be used with the output produced by "
                "torch.linalg.lu_factor");
    r[0].value = permutation_matrix(perm_from_pivots(read(pivots), LU.size(-2)), dt);
  }
  return r;
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> lu_unpack(const at::Tensor& LU, const at::Tensor& pivots,
                                                         bool unpack_data, bool unpack_pivots) {
  TinyOp op("lu_unpack");
  return made<3>(lu_unpack_values(LU, pivots, unpack_data, unpack_pivots));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lu_unpack_out(const at::Tensor& LU, const at::Tensor& pivots,
                                                                bool unpack_data, bool unpack_pivots, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  TinyOp op("lu_unpack");
  return assigned(lu_unpack_values(LU, pivots, unpack_data, unpack_pivots), {LU, pivots}, P, L, U);
}

Results linalg_lu_values(const at::Tensor& A, bool pivot) {
  LU f = checked_lu(A, pivot, "linalg.lu", "linalg.lu");
  auto [l, u] = unpack_factors(f.lu);
  c10::ScalarType dt = A.scalar_type();
  return {{permutation_matrix(perm_from_pivots(f.pivots, A.size(-2)), dt), dt}, {l, dt}, {u, dt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_lu(const at::Tensor& A, bool pivot) {
  TinyOp op("linalg_lu");
  return made<3>(linalg_lu_values(A, pivot));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_out(const at::Tensor& A, bool pivot, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U) {
  TinyOp op("linalg_lu");
  return assigned(linalg_lu_values(A, pivot), {A}, P, L, U);
}

T linalg_lu_solve_value(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                        bool adjoint) {
  const char* api = "linalg.lu_solve";
  check_matrix(LU, api, "LU");
  check_square(LU, api);
  check_matrix(B, api, "B");
  int64_t n = LU.size(-1);
  TORCH_CHECK(left ? B.size(-2) == n : B.size(-1) == n, api, ": Incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", n, "x", n, " and ", B.size(-2), "x", B.size(-1), ")");
  TORCH_CHECK(LU.scalar_type() == B.scalar_type(), api, ": Expected LU and B to have the same dtype, but found LU of "
              "type ", LU.scalar_type(), " and B of type ", B.scalar_type(), " instead");
  return lu_solve_value(read(LU), read(pivots), read(B), left, adjoint);
}
at::Tensor linalg_lu_solve(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                           bool adjoint) {
  TinyOp op("linalg_lu_solve");
  return make_result(linalg_lu_solve_value(LU, pivots, B, left, adjoint), B.scalar_type());
}
at::Tensor& linalg_lu_solve_out(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                                bool adjoint, at::Tensor& out) {
  TinyOp op("linalg_lu_solve");
  return assign_out(out, linalg_lu_solve_value(LU, pivots, B, left, adjoint), B.scalar_type(), {LU, pivots, B});
}

// det = product of U's diagonal, negated per row swap; slogdet its sign and
// log|.|. The factors are A^T's, as the CPU's (its backward solves with them).
struct Diagonal {
  T diag, perm_sign, lu, pivots;
};
Diagonal lu_diagonal(const at::Tensor& A, const char* api) {
  check_square_matrices(A, api);
  check_float_input(A.scalar_type(), api);
  check_lu_dtype(A.scalar_type());
  LU f = lu_factor(transposed(read(A)));
  const tiny::Shape& s = f.lu.shape();
  int nd = int(s.size());
  T diag = where(eq(rows_of(s), cols_of(s)), f.lu, 0.0).reduce(tiny::ReduceOp::Sum, {nd - 1}, false);  // (..., n)
  T at = iota(f.pivots.shape(), nd - 2);
  T swaps = ne(f.pivots.cast(tiny::DType::Int64), at + 1.0).cast(tiny::DType::Int64)
                .reduce(tiny::ReduceOp::Sum, {nd - 2}, false);
  T perm_sign = (1.0 - 2.0 * (swaps - 2.0 * (swaps / 2.0).unary(Op::Floor))).cast(f.lu.dtype());
  return {diag, perm_sign, f.lu, f.pivots};
}

Results det_values(const at::Tensor& A) {
  Diagonal d = lu_diagonal(A, "linalg.det");
  T det = d.perm_sign * d.diag.reduce(tiny::ReduceOp::Prod, {d.diag.ndim() - 1}, false);
  c10::ScalarType dt = A.scalar_type();
  return {{det, dt}, {d.lu, dt}, {d.pivots, c10::kInt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_det(const at::Tensor& A) {
  TinyOp op("linalg_det");
  return made<3>(det_values(A));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_det_out(const at::Tensor& A, at::Tensor& result,
                                                                 at::Tensor& LU, at::Tensor& pivots) {
  TinyOp op("linalg_det");
  return assigned(det_values(A), {A}, result, LU, pivots);
}

Results slogdet_values(const at::Tensor& A) {
  Diagonal d = lu_diagonal(A, "linalg.slogdet");
  int last = d.diag.ndim() - 1;
  T sgn = d.perm_sign * un(Op::Sign, d.diag).reduce(tiny::ReduceOp::Prod, {last}, false);
  T logabs = un(Op::Log, un(Op::Abs, d.diag)).reduce(tiny::ReduceOp::Sum, {last}, false);
  c10::ScalarType dt = A.scalar_type();
  return {{sgn, dt}, {logabs, dt}, {d.lu, dt}, {d.pivots, c10::kInt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_slogdet(const at::Tensor& A) {
  TinyOp op("linalg_slogdet");
  return made<4>(slogdet_values(A));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_slogdet_out(const at::Tensor& A,
                                                                                  at::Tensor& sign,
                                                                                  at::Tensor& logabsdet,
                                                                                  at::Tensor& LU, at::Tensor& pivots) {
  TinyOp op("linalg_slogdet");
  return assigned(slogdet_values(A), {A}, sign, logabsdet, LU, pivots);
}

Results solve_ex_values(const at::Tensor& A, const at::Tensor& B, bool left) {
  const char* api = "linalg.solve";
  check_square_matrices(A, api);
  check_float_input(A.scalar_type(), api);
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), api, ": Expected A and B to have the same dtype, but found A of "
              "type ", A.scalar_type(), " and B of type ", B.scalar_type(), " instead");
  check_lu_dtype(A.scalar_type());
  bool vector = B.dim() == 1 || (A.dim() - 1 == B.dim() && B.sizes() == A.sizes().slice(0, size_t(A.dim() - 1)));
  int64_t n = A.size(-1);
  T bv = vector ? read(B).reshape(appended(read(B).shape(), 1)) : read(B);
  const tiny::Shape& bs0 = bv.shape();
  int64_t br = bs0[bs0.size() - 2], bc = bs0.back();
  TORCH_CHECK(left ? br == n : bc == n, api, ": Incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", n, "x", n, " and ", br, "x", bc, ")");
  TORCH_CHECK(left || !vector, "linalg.solve: Vector broadcasting of the left hand side is not supported for "
              "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)");
  LU f = lu_factor(read(A));  // A's own factors, as the CPU's (its backward solves with them)
  T x = lu_solve_value(f.lu, f.pivots, bv, left, false);
  if (vector) x = x.reshape(tiny::Shape(x.shape().begin(), x.shape().end() - 1));
  c10::ScalarType dt = A.scalar_type();
  return {{x, dt}, {f.lu, dt}, {f.pivots, c10::kInt}, {f.info, c10::kInt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_solve_ex(const at::Tensor& A, const at::Tensor& B,
                                                                           bool left, bool check_errors) {
  TinyOp op("linalg_solve_ex");
  auto r = made<4>(solve_ex_values(A, B, left));
  if (check_errors) at::_linalg_check_errors(std::get<3>(r), "torch.linalg.solve_ex", A.dim() == 2);
  return r;
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_solve_ex_out(
    const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& result, at::Tensor& LU,
    at::Tensor& pivots, at::Tensor& info) {
  TinyOp op("linalg_solve_ex");
  auto r = assigned(solve_ex_values(A, B, left), {A, B}, result, LU, pivots, info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", A.dim() == 2);
  return r;
}

Results inv_ex_values(const at::Tensor& A) {
  const char* api = "linalg.inv";
  check_square_matrices(A, api);
  c10::ScalarType dt = A.scalar_type();
  TORCH_CHECK(dt != c10::kHalf && dt != c10::kBFloat16, api, ": Low precision dtypes not supported. Got ", dt);
  check_float_input(dt, api);
  T a = read(A);
  LU f = lu_factor(a);
  const tiny::Shape& s = a.shape();
  T identity = eye(s, a.dtype());
  return {{lu_solve_left(f.lu, perm_from_pivots(f.pivots, s.back()), identity, false), dt}, {f.info, c10::kInt}};
}
std::tuple<at::Tensor, at::Tensor> linalg_inv_ex(const at::Tensor& A, bool check_errors) {
  TinyOp op("linalg_inv_ex");
  auto r = made<2>(inv_ex_values(A));
  if (check_errors) at::_linalg_check_errors(std::get<1>(r), "linalg.inv_ex", A.dim() == 2);
  return r;
}
std::tuple<at::Tensor&, at::Tensor&> linalg_inv_ex_out(const at::Tensor& A, bool check_errors, at::Tensor& inverse,
                                                       at::Tensor& info) {
  TinyOp op("linalg_inv_ex");
  auto r = assigned(inv_ex_values(A), {A}, inverse, info);
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", A.dim() == 2);
  return r;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_solve_triangular", linalg_solve_triangular);
  m.impl("linalg_solve_triangular.out", linalg_solve_triangular_out);
  m.impl("triangular_solve", triangular_solve);
  m.impl("triangular_solve.X", triangular_solve_out);
  m.impl("linalg_cholesky_ex", linalg_cholesky_ex);
  m.impl("linalg_cholesky_ex.L", linalg_cholesky_ex_out);
  m.impl("_cholesky_solve_helper", cholesky_solve_helper);
  m.impl("cholesky_inverse", cholesky_inverse);
  m.impl("cholesky_inverse.out", cholesky_inverse_out);
  m.impl("linalg_lu_factor_ex", linalg_lu_factor_ex);
  m.impl("linalg_lu_factor_ex.out", linalg_lu_factor_ex_out);
  m.impl("lu_unpack", lu_unpack);
  m.impl("lu_unpack.out", lu_unpack_out);
  m.impl("linalg_lu", linalg_lu);
  m.impl("linalg_lu.out", linalg_lu_out);
  m.impl("linalg_lu_solve", linalg_lu_solve);
  m.impl("linalg_lu_solve.out", linalg_lu_solve_out);
  m.impl("_linalg_det", linalg_det);
  m.impl("_linalg_det.result", linalg_det_out);
  m.impl("_linalg_slogdet", linalg_slogdet);
  m.impl("_linalg_slogdet.sign", linalg_slogdet_out);
  m.impl("_linalg_solve_ex", linalg_solve_ex);
  m.impl("_linalg_solve_ex.result", linalg_solve_ex_out);
  m.impl("linalg_inv_ex", linalg_inv_ex);
  m.impl("linalg_inv_ex.inverse", linalg_inv_ex_out);
}

}  // namespace torch_tiny
