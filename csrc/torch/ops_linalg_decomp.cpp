// QR by Householder reflectors, the symmetric eigendecomposition and the SVD
// by Jacobi rotations, and the ops the CPU builds on them: geqrf,
// linalg_householder_product, ormqr, linalg_qr, _linalg_eigh,
// linalg_matrix_sqrth, _linalg_svd, linalg_polar, linalg_lstsq,
// linalg_matrix_exp. Like ops_linalg_solve, each is a host loop of stored
// lazy steps over the whole batch.
//
// QR follows LAPACK's unblocked geqr2 / dlarfg, so geqrf's reflectors and
// linalg_qr's signs are the CPU's. eigh and the SVD are Jacobi's methods
// (two-sided on the symmetric matrix; one-sided, on the columns, for the SVD):
// a round rotates n/2 disjoint index pairs at once (a round-robin ordering
// whose pairing is uploaded as data, so every round runs the same programs;
// a rotation is a gather of the partner columns and an elementwise update, O(n^2)),
// and sweeps of n - 1 rounds repeat until the off-diagonal part is at rounding
// level, checked on the host once per sweep. Values agree with LAPACK's to
// working precision; vectors are unique only up to sign, which LAPACK leaves
// unspecified too.
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <string>

#include "torch/linalg_util.h"
#include "torch/pointwise.h"

namespace torch_tiny {
namespace {

using namespace pw;
using namespace linalg;
using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

T sum_rows(const T& x) { return x.reduce(ReduceOp::Sum, {x.ndim() - 2}, true); }  // (..., 1, n)
T diagonal_of(const T& a) {  // (..., n) of a square (..., n, n)
  const tiny::Shape& s = a.shape();
  return where(eq(rows_of(s), cols_of(s)), a, 0.0).reduce(ReduceOp::Sum, {int(s.size()) - 1}, false);
}
// The (..., m, n) identity with batch dims `batch`.
T eye_like(const tiny::Shape& batch, int64_t m, int64_t n, tiny::DType dt) {
  return eye(appended(appended(batch, m), n), dt);
}
double unit_roundoff(tiny::DType dt) {
  return dt == tiny::DType::Float64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}
// The largest element of x (any shape) on the host: the one sync of a sweep.
double host_max(const T& x) {
  std::vector<int> all;
  for (int i = 0; i < x.ndim(); i++) all.push_back(i);
  double v = 0;
  x.reduce(ReduceOp::Max, all, false).cast(tiny::DType::Float64).copy_to_host(&v);
  return v;
}
T upload(const std::vector<double>& v, const tiny::Shape& shape, tiny::DType dt) {
  if (dt == tiny::DType::Float64) return T::from_host(v.data(), shape, dt);
  std::vector<float> f(v.begin(), v.end());
  return T::from_host(f.data(), shape, tiny::DType::Float32);
}
bool empty_batch(const tiny::Shape& s) { return tiny::numel(batch_of(s)) == 0; }

// ================================================================ Householder QR
// a: R on and above the diagonal, reflector i's tail below (its leading 1
// implied); tau (..., k): H_i = I - tau_i v_i v_i^T, Q = H_0 H_1 ... H_{k-1}.
struct Reflectors {
  T a, tau;
};

Reflectors householder_qr(const T& a0) {
  const tiny::Shape& shape = a0.shape();
  int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
  tiny::Shape batch = batch_of(shape), tshape = appended(batch, k), col_shape = shape;
  col_shape.back() = 1;
  T rows = positions(shape, 2), cols = positions(shape, 1), col_rows = positions(col_shape, 2);
  T tau = constant(tshape, 0, a0.dtype()), tau_at = positions(tshape, 1);
  T x = a0;
  for (int64_t step = 0; step < k; step++) {
    T j = step_index(shape, step), jc = step_index(col_shape, step);
    // dlarfg: beta = -sign(alpha) * ||(alpha, tail)||, v = tail / (alpha - beta)
    T c = col_at(x, step);
    T alpha = row_at(c, step);
    T tail = where(gt(col_rows, jc), c, 0.0);
    T tail_norm = un(Op::Sqrt, sum_rows(tail * tail));
    T beta = -alpha.binary(Op::Hypot, tail_norm).binary(Op::Copysign, alpha);
    T identity = eq(tail_norm, 0.0);  // H = I, tau = 0
    T tau_j = where(identity, 0.0, (beta - alpha) / beta);
    T v = where(eq(col_rows, jc), 1.0, tail * where(identity, 0.0, 1.0 / (alpha - beta)).expand(col_shape));
    T ve = v.expand(shape);
    T applied = x - tau_j.expand(shape) * ve * sum_rows(ve * x).expand(shape);
    T column = where(eq(rows, j), where(identity, alpha, beta).expand(shape),
                     where(gt(rows, j), where(identity.expand(shape), x, ve), x));
    x = where(gt(cols, j), applied, where(eq(cols, j), column, x));
    tau = where(eq(tau_at, step_index(tshape, step)), tau_j.reshape(appended(batch, 1)).expand(tshape), tau);
    if (step + 1 < k) {
      x = x.contiguous();
      tau = tau.contiguous();
    }
  }
  return {x, tau};
}

// Q C, or Q^T C when `transpose`, for C (..., m, p) with f's batch dims, Q
// from f's first k reflectors.
T apply_q_left(const Reflectors& f, int64_t k, const T& c, bool transpose) {
  const tiny::Shape& shape = c.shape();
  tiny::Shape col_shape = f.a.shape(), tau_shape = f.tau.shape();
  col_shape.back() = 1;
  T col_rows = positions(col_shape, 2);
  T x = c;
  for (int64_t q = 0; q < k; q++) {
    int64_t step = transpose ? q : k - 1 - q;
    T i = step_index(col_shape, step);
    T v = where(eq(col_rows, i), 1.0, where(gt(col_rows, i), col_at(f.a, step), 0.0)).expand(shape);
    T tau_i = col_at(as_row(f.tau), step);  // (..., 1, 1)
    x = x - tau_i.expand(shape) * v * sum_rows(v * x).expand(shape);
    if (q + 1 < k) x = x.contiguous();
  }
  return x;
}

// ================================================================ Jacobi rotations
// Round r of a round-robin tournament on n indices (one idle when n is odd)
// pairs every index with another: `partner` (n, int64; an idle index is its own)
// and `sign` (n): -1 for the lower index of a pair, +1 for the upper, 0 if idle.
struct Round {
  T partner, sign;
};
std::vector<Round> round_robin(int64_t n, tiny::DType dt) {
  int64_t players = n + n % 2, last = players - 1;
  std::vector<Round> rounds;
  for (int64_t r = 0; r < last; r++) {
    std::vector<int64_t> partner(static_cast<size_t>(n), 0);
    std::vector<double> sign(size_t(n), 0.0);
    for (int64_t j = 0; j < n; j++) {
      int64_t p = j == r ? last : j == last ? r : ((2 * r - j) % last + last) % last;
      partner[size_t(j)] = p < n ? p : j;
      if (p < n && p != j) sign[size_t(j)] = j < p ? -1 : 1;
    }
    rounds.push_back({T::from_host(partner.data(), {n}, tiny::DType::Int64), upload(sign, {n}, dt)});
  }
  return rounds;
}

// x (..., n) with its last dim permuted: x[..., partner[j]] at j (a gather, O(size)).
T partner_of(const T& x, const T& partner) {
  const tiny::Shape& s = x.shape();
  int64_t n = s.back(), rows = n ? x.numel() / n : 0;
  T at = iota({rows, n}, 0) * double(n) + partner.reshape({1, n}).expand({rows, n});
  return x.gather(at).reshape(s);
}

// One round's rotation, applied to columns: (X J)[:, j] = c_j X[:, j] + sign_j s_j X[:, partner(j)],
// with (c, s) for each pair chosen to zero its off-diagonal entry g between the
// diagonal entries app, aqq. own_j is j's diagonal entry, g_j the pair's
// off-diagonal one (the same value for both members); all (..., n).
struct Rotation {
  T c, s_signed, partner;  // c_j and sign_j s_j as rows (..., 1, n)

  Rotation(const T& own, const T& g, const T& sign, const T& partner_index) : partner(partner_index) {
    T other = partner_of(own, partner);
    T lower = lt(sign, 0.0);
    T app = where(lower, own, other), aqq = where(lower, other, own);
    T zeta = (aqq - app) / (2.0 * g);
    T t = cnst(zeta, 1.0).binary(Op::Copysign, zeta) / (un(Op::Abs, zeta) + un(Op::Sqrt, 1.0 + zeta * zeta));
    T cos = 1.0 / un(Op::Sqrt, 1.0 + t * t);
    T active = land(ne(sign, 0.0), ne(g, 0.0));
    c = as_row(where(active, cos, 1.0));
    s_signed = as_row(sign * where(active, t * cos, 0.0));
  }
  T columns(const T& x) const {  // X J
    return x * c.expand(x.shape()) + partner_of(x, partner) * s_signed.expand(x.shape());
  }
  T rows(const T& x) const { return transposed(columns(transposed(x))); }  // J^T X
};

T expand_rounds(const T& x, const tiny::Shape& batch) {  // (n) broadcast over the batch
  tiny::Shape s = batch;
  s.insert(s.end(), x.shape().begin(), x.shape().end());
  return broadcast_to(x, s);
}

// One-hot R (..., n, n): R[j, c] = 1 where c is d_j's place in ascending (or
// descending) order, ties kept in index order.
T sort_permutation(const T& d, bool descending) {
  tiny::Shape sq = appended(d.shape(), d.shape().back());
  T di = as_col(d).expand(sq), dj = as_row(d).expand(sq);  // d_i, d_j at (i, j)
  T before = lor(descending ? gt(di, dj) : lt(di, dj), land(eq(di, dj), lt(rows_of(sq), cols_of(sq))));
  T rank = before.cast(tiny::DType::Int64).reduce(ReduceOp::Sum, {int(sq.size()) - 2}, false);
  return eq(as_col(rank).expand(sq), cols_of(sq));
}
T permuted_values(const T& d, const T& onehot) {  // d_j moved to place c
  const tiny::Shape& sq = onehot.shape();
  return where(onehot, as_col(d).expand(sq), 0.0).reduce(ReduceOp::Sum, {int(sq.size()) - 2}, false);
}

constexpr int kMaxSweeps = 40;

// Jacobi sweeps: `rotate(sign, partner)` runs one round, `residual()` gives the
// largest relative off-diagonal part (a host sync); sweeps repeat until it is
// at rounding level, then one more.
template <class Rotate, class Residual>
void jacobi_sweeps(int64_t n, tiny::DType dt, const tiny::Shape& batch, Rotate rotate, Residual residual) {
  double tol = double(n) * unit_roundoff(dt);
  bool converged = false;
  std::vector<Round> rounds = round_robin(n, dt);
  for (int sweep = 0; sweep < kMaxSweeps; sweep++) {
    for (const Round& r : rounds) rotate(expand_rounds(r.sign, batch), r.partner);
    if (converged) break;
    converged = !(residual() > tol);  // NaN stops too
  }
}

struct Eigen {
  T values, vectors;  // ascending; vectors as columns
};
Eigen jacobi_eigh(const T& sym, bool want_vectors) {
  const tiny::Shape& shape = sym.shape();
  int64_t n = shape.back();
  int nd = int(shape.size());
  tiny::DType dt = sym.dtype();
  tiny::Shape batch = batch_of(shape);
  T a = sym, v = eye(shape, dt);
  if (n > 1 && !empty_batch(shape)) {
    T is_diag = eq(rows_of(shape), cols_of(shape));
    auto rotate = [&](const T& sign, const T& partner) {
      T g = diagonal_of(partner_of(a, partner));  // a[j, partner(j)]: a is exactly symmetric
      Rotation j(diagonal_of(a), g, sign, partner);
      T rotated = j.rows(j.columns(a));
      a = ((rotated + transposed(rotated)) * 0.5).contiguous();  // symmetric to the last bit
      if (want_vectors) v = j.columns(v).contiguous();
    };
    auto residual = [&] {  // ||off(A)|| / ||A||
      T sq = a * a;
      T off = where(is_diag, 0.0, sq).reduce(ReduceOp::Sum, {nd - 2, nd - 1}, false);
      T total = sq.reduce(ReduceOp::Sum, {nd - 2, nd - 1}, false);
      return host_max(where(gt(total, 0.0), un(Op::Sqrt, off / total), 0.0));
    };
    jacobi_sweeps(n, dt, batch, rotate, residual);
  }
  T order = sort_permutation(diagonal_of(a), false);
  return {permuted_values(diagonal_of(a), order), want_vectors ? v.matmul(order.cast(dt)) : T()};
}

struct Svd {
  T u, s, vh;
};
// A = U diag(S) Vh, S descending; U (..., m, m or k), Vh (..., k or n, n).
Svd jacobi_svd(const T& a, bool full, bool want_uv) {
  const tiny::Shape& shape = a.shape();
  int nd = int(shape.size());
  int64_t m = shape[size_t(nd - 2)], n = shape.back();
  if (m < n) {  // A^T = U' S V'^T
    Svd t = jacobi_svd(transposed(a), full, want_uv);
    return {want_uv ? transposed(t.vh) : t.u, t.s, want_uv ? transposed(t.u) : t.vh};
  }
  tiny::DType dt = a.dtype();
  tiny::Shape batch = batch_of(shape);
  int64_t ucols = full ? m : n;
  if (n == 0 || empty_batch(shape))
    return {eye_like(batch, m, ucols, dt), constant(appended(batch, n), 0, dt), eye_like(batch, n, n, dt)};
  T g = a, v = eye_like(batch, n, n, dt);
  if (n > 1) {
    tiny::Shape sq = appended(appended(batch, n), n);
    T is_diag = eq(rows_of(sq), cols_of(sq));
    auto rotate = [&](const T& sign, const T& partner) {
      T norms = sum_rows(g * g).reshape(appended(batch, n));
      T dots = sum_rows(g * partner_of(g, partner)).reshape(appended(batch, n));
      Rotation j(norms, dots, sign, partner);
      g = j.columns(g).contiguous();
      if (want_uv) v = j.columns(v).contiguous();
    };
    auto residual = [&] {  // the largest cosine between two columns
      T gram = transposed(g).matmul(g);
      T d = diagonal_of(gram);
      T scale = un(Op::Sqrt, as_col(d).expand(sq) * as_row(d).expand(sq));
      return host_max(where(lor(is_diag, eq(scale, 0.0)), 0.0, un(Op::Abs, gram) / scale));
    };
    jacobi_sweeps(n, dt, batch, rotate, residual);
  }
  T sigma = un(Op::Sqrt, sum_rows(g * g).reshape(appended(batch, n)));
  T order = sort_permutation(sigma, true);
  T s = permuted_values(sigma, order);
  if (!want_uv) return {T(), s, T()};
  T onehot = order.cast(dt);
  // The sorted columns are orthogonal, so their QR has R = diag(+-sigma) and
  // Q's columns are U's (completed to an orthonormal basis, zero sigmas too).
  Reflectors f = householder_qr(g.matmul(onehot));
  T q = apply_q_left(f, n, eye_like(batch, m, ucols, dt), false);
  tiny::Shape rshape = appended(appended(batch, 1), ucols);
  tiny::Ranges pad(size_t(nd), {0, 0});
  pad.back() = {0, ucols - n};
  T r_sign = where(lt(as_row(diagonal_of(leading(f.a, 2, n))), 0.0), -1.0, cnst(as_row(s), 1.0));
  T col_sign = where(lt(cols_of(rshape), double(n)), r_sign.pad(pad), 1.0);
  return {q * col_sign.expand(q.shape()), s, transposed(v.matmul(onehot))};
}

// float32 / float64 compute; other dtypes get the CPU's error: the api's
// "Expected a floating point" message where it checks first (api given),
// else the LAPACK kernel's "not implemented for". Complex is stored, not computed.
void check_decomposition_dtype(const at::Tensor& A, const char* api, const char* kernel) {
  c10::ScalarType dt = A.scalar_type();
  if (api) check_float_input(dt, api);
  if (!c10::isFloatingType(dt) && !c10::isComplexType(dt)) not_implemented_for(kernel, dt);
  check_lapack_dtype(dt, kernel);
  if (c10::isComplexType(dt)) not_implemented_for(kernel, dt);
}

// ================================================================ geqrf, householder_product, ormqr, qr
Results geqrf_values(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  check_decomposition_dtype(self, nullptr, "geqrf_cpu");
  Reflectors f = householder_qr(read(self));
  return {{f.a, self.scalar_type()}, {f.tau, self.scalar_type()}};
}
std::tuple<at::Tensor, at::Tensor> geqrf(const at::Tensor& self) {
  TinyOp op("geqrf");
  return made<2>(geqrf_values(self));
}
std::tuple<at::Tensor&, at::Tensor&> geqrf_out(const at::Tensor& self, at::Tensor& a, at::Tensor& tau) {
  TinyOp op("geqrf");
  return assigned(geqrf_values(self), {self}, a, tau);
}

void check_reflectors(const at::Tensor& input, const at::Tensor& tau, const char* api) {
  TORCH_CHECK(input.dim() >= 2, api, ": input must have at least 2 dimensions.");
  TORCH_CHECK(tau.dim() == input.dim() - 1, api, ": tau must have one dimension less than input (got ", tau.dim(),
              " and ", input.dim(), ")");
  TORCH_CHECK(input.sizes().slice(0, size_t(input.dim() - 2)) == tau.sizes().slice(0, size_t(tau.dim() - 1)), api,
              ": Expected batch dimensions of tau to be equal to input.shape[:-2], but got ", tau.sizes());
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(), api, ": tau dtype ", tau.scalar_type(),
              " does not match input dtype ", input.scalar_type());
  check_decomposition_dtype(input, nullptr, "orgqr_cpu");
}

T householder_product_value(const at::Tensor& input, const at::Tensor& tau) {
  const char* api = "torch.linalg.householder_product";
  check_reflectors(input, tau, api);
  int64_t m = input.size(-2), n = input.size(-1), k = tau.size(-1);
  TORCH_CHECK(m >= n, api, ": input.shape[-2] must be greater than or equal to input.shape[-1]");
  TORCH_CHECK(n >= k, api, ": input.shape[-1] must be greater than or equal to tau.shape[-1]");
  Reflectors f{read(input), read(tau)};
  return apply_q_left(f, k, eye_like(batch_of(f.a.shape()), m, n, f.a.dtype()), false);
}
at::Tensor householder_product(const at::Tensor& input, const at::Tensor& tau) {
  TinyOp op("linalg_householder_product");
  return make_result(householder_product_value(input, tau), input.scalar_type());
}
at::Tensor& householder_product_out(const at::Tensor& input, const at::Tensor& tau, at::Tensor& out) {
  TinyOp op("linalg_householder_product");
  return assign_out(out, householder_product_value(input, tau), input.scalar_type(), {input, tau});
}

T ormqr_value(const at::Tensor& input, const at::Tensor& tau, const at::Tensor& other, bool left, bool transpose) {
  const char* api = "torch.ormqr";
  check_reflectors(input, tau, api);
  TORCH_CHECK(other.dim() >= 2, api, ": other must have at least 2 dimensions.");
  int64_t m = left ? other.size(-2) : other.size(-1), k = tau.size(-1);
  TORCH_CHECK(input.size(-2) == m, api, ": other.shape[", left ? -2 : -1, "] must be equal to input.shape[-2]");
  TORCH_CHECK(k <= input.size(-1), api, ": tau.shape[-1] must be less than or equal to input.shape[-1]");
  TORCH_CHECK(k <= m, api, ": tau.shape[-1] must be less than or equal to input.shape[-2]");
  TORCH_CHECK(other.dim() == input.dim() &&
                  other.sizes().slice(0, size_t(other.dim() - 2)) == input.sizes().slice(0, size_t(input.dim() - 2)),
              api, ": Expected batch dimensions of other to be equal to input.shape[:-2], but got ", other.sizes());
  TORCH_CHECK(other.scalar_type() == input.scalar_type(), api, ": other dtype ", other.scalar_type(),
              " does not match input dtype ", input.scalar_type());
  Reflectors f{read(input), read(tau)};
  T c = read(other);
  if (left) return apply_q_left(f, k, c, transpose);
  return transposed(apply_q_left(f, k, transposed(c), !transpose));  // C Q = (Q^T C^T)^T
}
at::Tensor ormqr(const at::Tensor& input, const at::Tensor& tau, const at::Tensor& other, bool left, bool transpose) {
  TinyOp op("ormqr");
  return make_result(ormqr_value(input, tau, other, left, transpose), input.scalar_type());
}
at::Tensor& ormqr_out(const at::Tensor& input, const at::Tensor& tau, const at::Tensor& other, bool left,
                      bool transpose, at::Tensor& out) {
  TinyOp op("ormqr");
  return assign_out(out, ormqr_value(input, tau, other, left, transpose), input.scalar_type(), {input, tau, other});
}

Results qr_values(const at::Tensor& A, c10::string_view mode) {
  check_matrix(A, "linalg.qr", "A");
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r", "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  check_decomposition_dtype(A, "linalg.qr", "geqrf_cpu");
  c10::ScalarType dt = A.scalar_type();
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  Reflectors f = householder_qr(read(A));
  int64_t rrows = mode == "complete" ? m : k;
  T upper = leading(f.a, 2, rrows);
  T r = where(le(rows_of(upper.shape()), cols_of(upper.shape())), upper, 0.0);
  if (mode == "r") return {{constant({0}, 0, f.a.dtype()), dt}, {r, dt}};
  T q = apply_q_left(f, k, eye_like(batch_of(f.a.shape()), m, rrows, f.a.dtype()), false);
  return {{q, dt}, {r, dt}};
}
std::tuple<at::Tensor, at::Tensor> linalg_qr(const at::Tensor& A, c10::string_view mode) {
  TinyOp op("linalg_qr");
  return made<2>(qr_values(A, mode));
}
std::tuple<at::Tensor&, at::Tensor&> linalg_qr_out(const at::Tensor& A, c10::string_view mode, at::Tensor& Q,
                                                   at::Tensor& R) {
  TinyOp op("linalg_qr");
  return assigned(qr_values(A, mode), {A}, Q, R);
}

// ================================================================ eigh, matrix_sqrth
// The symmetric matrix A's lower (or upper) triangle stands for.
T symmetric_from(const at::Tensor& A, bool lower) {
  T a = read(A);
  T rows = rows_of(a.shape()), cols = cols_of(a.shape());
  return where(lower ? ge(rows, cols) : le(rows, cols), a, transposed(a));
}

Results eigh_values(const at::Tensor& A, c10::string_view uplo, bool compute_v) {
  check_square_matrices(A, "linalg.eigh");
  TORCH_CHECK(uplo.size() == 1 && (uplo[0] == 'L' || uplo[0] == 'U' || uplo[0] == 'l' || uplo[0] == 'u'),
              "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  check_decomposition_dtype(A, nullptr, "linalg_eigh_cpu");
  c10::ScalarType dt = A.scalar_type();
  Eigen e = jacobi_eigh(symmetric_from(A, uplo[0] == 'L' || uplo[0] == 'l'), compute_v);
  return {{e.values, dt}, {compute_v ? e.vectors : constant({0}, 0, to_engine(dt)), dt}};
}
std::tuple<at::Tensor, at::Tensor> linalg_eigh(const at::Tensor& A, c10::string_view uplo, bool compute_v) {
  TinyOp op("linalg_eigh");
  return made<2>(eigh_values(A, uplo, compute_v));
}
std::tuple<at::Tensor&, at::Tensor&> linalg_eigh_out(const at::Tensor& A, c10::string_view uplo, bool compute_v,
                                                     at::Tensor& values, at::Tensor& vectors) {
  TinyOp op("linalg_eigh");
  return assigned(eigh_values(A, uplo, compute_v), {A}, values, vectors);
}

// V diag(sqrt(max(lambda, 0))) V^T from A's lower triangle, as the CPU computes it.
T matrix_sqrth_value(const at::Tensor& A) {
  check_square_matrices(A, "linalg.matrix_sqrth");
  c10::ScalarType dt = A.scalar_type();
  TORCH_CHECK(dt != c10::kHalf && dt != c10::kBFloat16, "linalg.matrix_sqrth: Low precision dtypes not supported. "
              "Got ", dt);
  check_decomposition_dtype(A, "linalg.matrix_sqrth", "linalg_eigh_cpu");
  Eigen e = jacobi_eigh(symmetric_from(A, true), true);
  T root = un(Op::Sqrt, max(e.values, cnst(e.values, 0.0)));
  return (e.vectors * as_row(root).expand(e.vectors.shape())).matmul(transposed(e.vectors));
}
at::Tensor matrix_sqrth(const at::Tensor& A) {
  TinyOp op("linalg_matrix_sqrth");
  return make_result(matrix_sqrth_value(A), A.scalar_type());
}
at::Tensor& matrix_sqrth_out(const at::Tensor& A, at::Tensor& out) {
  TinyOp op("linalg_matrix_sqrth");
  return assign_out(out, matrix_sqrth_value(A), A.scalar_type(), {A});
}

// ================================================================ svd, polar
Results svd_values(const at::Tensor& A, bool full, bool compute_uv, std::optional<c10::string_view> driver) {
  check_matrix(A, "linalg.svd", "A");
  TORCH_CHECK(!driver.has_value(), "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs "
              "with cuSOLVER backend.");
  check_decomposition_dtype(A, "linalg.svd", "linalg_svd_cpu");
  c10::ScalarType dt = A.scalar_type();
  Svd r = jacobi_svd(read(A), full, compute_uv);
  if (!compute_uv) {
    T none = constant({0}, 0, to_engine(dt));
    return {{none, dt}, {r.s, dt}, {none, dt}};
  }
  return {{r.u, dt}, {r.s, dt}, {r.vh, dt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> linalg_svd(const at::Tensor& A, bool full, bool compute_uv,
                                                          std::optional<c10::string_view> driver) {
  TinyOp op("linalg_svd");
  return made<3>(svd_values(A, full, compute_uv, driver));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_svd_out(const at::Tensor& A, bool full, bool compute_uv,
                                                                 std::optional<c10::string_view> driver,
                                                                 at::Tensor& U, at::Tensor& S, at::Tensor& Vh) {
  TinyOp op("linalg_svd");
  return assigned(svd_values(A, full, compute_uv, driver), {A}, U, S, Vh);
}

// A = U H with U = W Vh and H = V diag(S) Vh from the SVD A = W diag(S) Vh.
Results polar_values(const at::Tensor& A) {
  check_matrix(A, "linalg.polar", "A");
  TORCH_CHECK(A.size(-2) >= A.size(-1), "linalg.polar: input must have at least as many rows as columns, but got ",
              A.size(-2), " by ", A.size(-1), " matrices");
  check_decomposition_dtype(A, "linalg.polar", "linalg_svd_cpu");
  Svd r = jacobi_svd(read(A), false, true);
  T vs = transposed(r.vh) * as_row(r.s).expand(r.vh.shape());
  return {{r.u.matmul(r.vh), A.scalar_type()}, {vs.matmul(r.vh), A.scalar_type()}};
}
std::tuple<at::Tensor&, at::Tensor&> linalg_polar_out(const at::Tensor& A, at::Tensor& U, at::Tensor& H) {
  TinyOp op("linalg_polar");
  return assigned(polar_values(A), {A}, U, H);
}
std::tuple<at::Tensor, at::Tensor> linalg_polar(const at::Tensor& A) {
  TinyOp op("linalg_polar");
  return made<2>(polar_values(A));
}

// ================================================================ lstsq
// The minimum-norm least-squares solution through the SVD, for every driver:
// gels (full rank: the same unique solution), gelsy, gelsd and gelss (rank
// from rcond * the largest singular value). Outputs as the CPU fills them:
// rank for all but gels, singular values for gelsd / gelss, residuals when
// m > n for gels, and for gelsd / gelss when every matrix has full rank.
Results lstsq_values(const at::Tensor& A, const at::Tensor& B, std::optional<double> rcond,
                     std::optional<c10::string_view> driver_name) {
  const char* api = "torch.linalg.lstsq";
  TORCH_CHECK(A.dim() >= 2, api, ": input must have at least 2 dimensions.");
  TORCH_CHECK(B.dim() >= 1, api, ": other must have at least 1 dimension.");
  TORCH_CHECK(A.scalar_type() == B.scalar_type(), api, ": Expected input and other to have the same dtype, but got "
              "input's dtype ", A.scalar_type(), " and other's dtype ", B.scalar_type());
  TORCH_CHECK(A.dim() >= B.dim() && A.dim() - B.dim() <= 1, api, ": input.dim() must be greater or equal to "
              "other.dim() and (input.dim() - other.dim()) <= 1");
  bool vector = B.dim() == A.dim() - 1;
  TORCH_CHECK(vector ? A.size(-2) == B.size(-1) : A.size(-2) == B.size(-2), api, ": input.size(-2) should match ",
              vector ? "other.size(-1)" : "other.size(-2)");
  std::string driver(driver_name.value_or("gelsy"));
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss", api,
              ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  TORCH_CHECK(A.scalar_type() == c10::kFloat || A.scalar_type() == c10::kDouble,
              "This function doesn't handle types other than float and double");
  c10::ScalarType dt = A.scalar_type();
  tiny::DType e = to_engine(dt);
  int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  T b = vector ? as_col(read(B)) : read(B);
  auto batch = at::infer_size(A.sizes().slice(0, size_t(A.dim() - 2)),
                              c10::IntArrayRef(b.shape().data(), b.shape().size() - 2));
  tiny::Shape bt(batch.begin(), batch.end()), ab = appended(appended(bt, m), n);
  int64_t p = b.shape().back();
  T a = broadcast_to(read(A), ab);
  b = broadcast_to(b, appended(appended(bt, m), p));
  Svd r = jacobi_svd(a, false, true);
  double cut = rcond.has_value() && *rcond > 0 ? *rcond : unit_roundoff(e) * double(std::max(m, n));
  T kept = constant(r.s.shape(), 0, tiny::DType::Bool);
  T x = constant(appended(appended(bt, n), p), 0, e);
  if (k > 0 && tiny::numel(bt) > 0) {
    T top = leading(r.s, 1, 1).expand(r.s.shape());  // the largest singular value
    kept = gt(r.s, top * cut);
    T utb = transposed(r.u).matmul(b);
    x = transposed(r.vh).matmul(utb * as_col(where(kept, 1.0 / r.s, 0.0)).expand(utb.shape()));
  }
  T rank = kept.cast(tiny::DType::Int64).reduce(ReduceOp::Sum, {int(bt.size())}, false);
  bool with_rank = driver != "gels", with_values = driver == "gelsd" || driver == "gelss";
  bool with_residuals = m > n && driver != "gelsy";
  if (with_residuals && with_values && tiny::numel(bt) > 0)
    with_residuals = !(host_max(double(n) - rank.cast(tiny::DType::Float64)) > 0);  // every matrix of full rank
  // with no columns the CPU's gels returns before computing, leaving zero residuals
  T residual = n == 0 && driver == "gels" ? constant(b.shape(), 0, e) : a.matmul(x) - b;
  T none = constant({0}, 0, e);
  return {{vector ? x.reshape(appended(bt, n)) : x, dt},
          {with_residuals ? sum_rows(residual * residual).reshape(appended(bt, p)) : none, dt},
          {with_rank ? rank : constant({0}, 0, tiny::DType::Int64), c10::kLong},
          {with_values ? r.s : none, dt}};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> linalg_lstsq(const at::Tensor& A, const at::Tensor& B,
                                                                        std::optional<double> rcond,
                                                                        std::optional<c10::string_view> driver) {
  TinyOp op("linalg_lstsq");
  return made<4>(lstsq_values(A, B, rcond, driver));
}
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_lstsq_out(
    const at::Tensor& A, const at::Tensor& B, std::optional<double> rcond, std::optional<c10::string_view> driver,
    at::Tensor& solution, at::Tensor& residuals, at::Tensor& rank, at::Tensor& values) {
  TinyOp op("linalg_lstsq");
  return assigned(lstsq_values(A, B, rcond, driver), {A, B}, solution, residuals, rank, values);
}

// ================================================================ matrix_exp
// Scaling and squaring: exp(A) = exp(A / 2^s)^(2^s), with 2^s bringing the
// batch's largest 1-norm under 1/2, where a Taylor polynomial of degree 18
// (float64) is accurate to its rounding.
T matrix_exp_value(const at::Tensor& A) {
  check_square_matrices(A, "linalg.matrix_exp");
  c10::ScalarType dt = A.scalar_type();
  TORCH_CHECK(c10::isFloatingType(dt) || c10::isComplexType(dt), "linalg.matrix_exp: Expected a floating point or "
              "complex tensor as input. Got ", dt);
  if (c10::isComplexType(dt)) not_implemented_for("linalg_matrix_exp_cpu", dt);
  // computed in float64 (16-bit and float32 inputs too): the squarings double the relative error each time
  if (A.numel() == 0) return read(A);
  T a = read(A).cast(tiny::DType::Float64);
  const tiny::Shape& shape = a.shape();
  int nd = int(shape.size());
  double norm = host_max(un(Op::Abs, a).reduce(ReduceOp::Sum, {nd - 2}, false));
  int squarings = std::isfinite(norm) && norm > 0.5 ? int(std::ceil(std::log2(norm / 0.5))) : 0;
  T x = a * std::ldexp(1.0, -squarings);
  T identity = eye(shape, a.dtype());
  T e = identity;
  for (int i = 18; i >= 1; i--)  // Horner: I + x/i (...)
    e = (identity + x.matmul(e) * (1.0 / i)).contiguous();
  for (int i = 0; i < squarings; i++) e = e.matmul(e).contiguous();
  return e.cast(to_engine(dt));
}
at::Tensor matrix_exp(const at::Tensor& A) {
  TinyOp op("linalg_matrix_exp");
  return make_result(matrix_exp_value(A), A.scalar_type());
}
at::Tensor& matrix_exp_out(const at::Tensor& A, at::Tensor& out) {
  TinyOp op("linalg_matrix_exp");
  return assign_out(out, matrix_exp_value(A), A.scalar_type(), {A});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("geqrf", geqrf);
  m.impl("geqrf.a", geqrf_out);
  m.impl("linalg_householder_product", householder_product);
  m.impl("linalg_householder_product.out", householder_product_out);
  m.impl("ormqr", ormqr);
  m.impl("ormqr.out", ormqr_out);
  m.impl("linalg_qr", linalg_qr);
  m.impl("linalg_qr.out", linalg_qr_out);
  m.impl("_linalg_eigh", linalg_eigh);
  m.impl("_linalg_eigh.eigenvalues", linalg_eigh_out);
  m.impl("linalg_matrix_sqrth", matrix_sqrth);
  m.impl("linalg_matrix_sqrth.out", matrix_sqrth_out);
  m.impl("_linalg_svd", linalg_svd);
  m.impl("_linalg_svd.U", linalg_svd_out);
  m.impl("linalg_polar", linalg_polar);
  m.impl("linalg_polar.out", linalg_polar_out);
  m.impl("linalg_lstsq", linalg_lstsq);
  m.impl("linalg_lstsq.out", linalg_lstsq_out);
  m.impl("linalg_matrix_exp", matrix_exp);
  m.impl("linalg_matrix_exp.out", matrix_exp_out);
}

}  // namespace torch_tiny
