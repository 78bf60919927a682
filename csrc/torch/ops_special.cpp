// Special functions whose ATen CPU kernels are fixed sequences of arithmetic
// (Cephes-style series and rational approximations, bounded loops), written as
// the same sequence of engine ops: lgamma, digamma, trigamma and polygamma,
// i0/i0e/i1/i1e, ndtri. Functions needing unbounded, data-dependent loops
// (zeta of tensors, igamma, orthogonal polynomials of tensor degree) are left
// to the CPU fallback.
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "torch/pointwise.h"

namespace torch_tiny {

using namespace pw;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
bool is_double(const T& x) { return x.dtype() == tiny::DType::Float64; }

// Cephes polevl: coefficients highest order first, len + 1 of them.
T polevl(const T& x, const std::vector<double>& c) {
  T r = cnst(x, c[0]);
  for (size_t i = 1; i < c.size(); i++) r = r * x + c[i];
  return r;
}

// Cephes chbevl: Chebyshev series at x, coefficients highest order first.
T chbevl(const T& x, const std::vector<double>& c) {
  T b0 = cnst(x, c[0]), b1 = cnst(x, 0.0), b2 = cnst(x, 0.0);
  for (size_t i = 1; i < c.size(); i++) {
    b2 = b1;
    b1 = b0;
    b0 = x * b1 - b2 + c[i];
  }
  return 0.5 * (b0 - b2);
}

// ---------------------------------------------------------------- lgamma / digamma
T u_lgamma(const T& x) { return un(Op::Lgamma, x); }

// calc_digamma: reflection for negatives, the recurrence psi(x) = psi(x + 1) - 1/x
// up to x >= 10 (at most ten steps), then the asymptotic series.
T u_digamma(const T& x0) {
  const std::vector<double> A = {8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                                 -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                                 8.33333333333333333333E-2};
  const double psi_10 = 2.25175258906672110764;
  T neg = lt(x0, 0.0);
  T x = where(neg, 1.0 - x0, x0);
  T result = cnst(x, 0.0);
  for (int i = 0; i < 10; i++) {
    T m = lt(x, 10.0);
    result = where(m, result - 1.0 / x, result);
    x = where(m, x + 1.0, x);
  }
  T z = 1.0 / (x * x);
  T y = where(lt(x, 1.0e17), z * polevl(z, A), 0.0);
  T pos = where(eq(x, 10.0), result + psi_10, result + un(Op::Log, x) - 0.5 / x - y);
  // pi / tan(pi * frac(x)) in double, as ATen computes it for both float types
  T xd = x0.cast(tiny::DType::Float64);
  T r = xd - un(Op::Trunc, xd);
  T pot = (M_PI / un(Op::Tan, M_PI * r)).cast(x0.dtype());
  T reflected = where(eq(x0, un(Op::Trunc, x0)), kNaN, pos - pot);
  T out = where(neg, reflected, pos);
  return where(eq(x0, 0.0), cnst(x0, kInf).binary(Op::Copysign, -x0), out);
}

// trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series.
T trigamma(const T& x0) {
  bool dbl = is_double(x0);
  T refl = lt(x0, 0.5);
  // float: ATen's pi and pi * pi are float constants
  double pi = dbl ? M_PI : double(float(M_PI));
  double pi2 = dbl ? M_PI * M_PI : double(float(M_PI) * float(M_PI));
  T s = un(Op::Sin, x0 * pi);
  T result = where(refl, cnst(x0, 0.0) - pi2 / (s * s), cnst(x0, 0.0));
  T x = where(refl, 1.0 - x0, x0);
  for (int i = 0; i < 6; i++) {
    result = result + 1.0 / (x * x);
    x = x + 1.0;
  }
  T ixx = 1.0 / (x * x);
  const double c6 = dbl ? 1.0 / 6 : double(1.f / 6), c30 = dbl ? 1.0 / 30 : double(1.f / 30),
               c42 = dbl ? 1.0 / 42 : double(1.f / 42);
  result = result + (1.0 + 1.0 / (2.0 * x) + ixx * (c6 - ixx * (c30 - ixx * c42))) / x;
  return where(refl, -result, result);
}

// Hurwitz zeta(x, q) for q >= 0 as ATen's zeta(): the sum over q + j until past 9
// (at most 10 terms for q >= 0; early exit once a term is negligible), then the
// Euler-Maclaurin tail (early exit as well).
T zeta_nonneg_q(const T& x, const T& q) {
  const double machep = 1.11022302462515654042E-16;
  const double A[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
                      -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
                      1.8152105401943546773e17, -7.1661652561756670113e18};
  T s = q.binary(Op::Pow, -x);
  T a = q, b = cnst(q, 0.0);
  T done = T::full(q.shape(), tiny::Scalar::from_bool(false), tiny::DType::Bool);
  for (int i = 0; i < 10; i++) {
    T active = i < 9 ? lnot(done) : land(lnot(done), le(a, 9.0));
    T a1 = a + 1.0;
    T b1 = a1.binary(Op::Pow, -x);
    T s1 = s + b1;
    T small = land(lt(-machep * s1, b1), lt(b1, machep * s1));
    a = where(active, a1, a);
    b = where(active, b1, b);
    s = where(active, s1, s);
    done = lor(done, land(active, small));
  }
  T w = a;
  T st = s + b * w / (x - 1.0);
  st = st - 0.5 * b;
  T aa = cnst(q, 1.0), k = cnst(q, 0.0);
  T done2 = done;
  for (double coeff : A) {
    aa = aa * (x + k);
    b = b / w;
    T t = aa * b / coeff;
    T s2 = st + t;
    st = where(done2, st, s2);
    done2 = lor(done2, lt(un(Op::Abs, t / s2), machep));
    k = k + 1.0;
    aa = aa * (x + k);
    b = b / w;
    k = k + 1.0;
  }
  return where(done, s, st);
}

// polygamma(n, x), n >= 2: (-1)^(n+1) n! zeta(n + 1, x), zeta in double (float for
// 16-bit inputs), as ATen. For negative x ATen sums ~|x| terms; this uses the
// reflection psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) cot^(n)(pi x) instead (same
// value, no data-dependent loop). Non-positive integers are poles.
T polygamma_n(const T& x, int64_t n) {
  tiny::DType acc = x.dtype() == tiny::DType::Float32 ? tiny::DType::Float64 : x.dtype();
  // (n % 2 ? 1 : -1) * exp(lgamma(n + 1)) in the tensor's type, as ATen evaluates it
  double fact = x.dtype() == tiny::DType::Float64 ? std::exp(std::lgamma(double(n) + 1))
                                                  : double(std::exp(std::lgamma(float(n) + 1.0f)));
  double sign = (n % 2) ? 1.0 : -1.0;
  T neg = lt(x, 0.0);
  T q = where(neg, 1.0 - x, x);  // >= 0 for every finite x
  T qa = q.cast(acc);
  T direct = (sign * cnst(q, fact) * zeta_nonneg_q(cnst(qa, double(n + 1)), qa).cast(q.dtype()));
  // cot^(n)(u) = P_n(cot u): P_0(c) = c, P_{k+1}(c) = -(1 + c^2) P_k'(c); coefficients by power
  std::vector<double> p = {0.0, 1.0};
  for (int64_t k = 0; k < n; k++) {
    std::vector<double> next(p.size() + 1, 0.0);
    for (size_t i = 1; i < p.size(); i++) {
      next[i - 1] -= double(i) * p[i];
      next[i + 1] -= double(i) * p[i];
    }
    p = next;
  }
  T xd = x.cast(tiny::DType::Float64);
  T c = 1.0 / un(Op::Tan, M_PI * (xd - un(Op::Trunc, xd)));  // cot(pi x), from the fractional part
  T poly = cnst(c, 0.0);
  for (size_t i = p.size(); i-- > 0;) poly = poly * c + p[i];
  T reflected = ((n % 2 ? -1.0 : 1.0) * direct.cast(tiny::DType::Float64) - poly * std::pow(M_PI, double(n + 1)))
                    .cast(x.dtype());
  T pole = land(le(x, 0.0), eq(x, un(Op::Floor, x)));
  return where(pole, sign * kInf, where(neg, reflected, direct));
}

// ---------------------------------------------------------------- modified Bessel I0, I1
const std::vector<double> kI0eA = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17,  -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14,  -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11,  -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,   -2.67079385394061173391E-7,  1.11738753912010371815E-6,
    -4.41673835845875056359E-6,  1.64484480707288970893E-5,   -5.75419501008210370398E-5,  1.88502885095841655729E-4,
    -5.76375574538582365885E-4,  1.63947561694133579842E-3,   -4.32430999505057594430E-3,  1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,   -9.49010970480476444210E-2,  1.71620901522208775349E-1,
    -3.04682672343198398683E-1,  6.76795274409476084995E-1};
const std::vector<double> kI0eB = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,  3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15,  3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9,   2.26666899049817806459E-8,
    2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};
// i1e: double uses the full series, float ATen's truncated ones (the tails of these)
const std::vector<double> kI1eA = {
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
    7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
    1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9,  -4.44505912879632808065E-8,  2.00329475355213526229E-7,  -8.56872026469545474066E-7,
    3.47025130813767847674E-6,  -1.32731636560394358279E-5,  4.78156510755005422638E-5,  -1.61760815825896745588E-4,
    5.12285956168575772895E-4,  -1.51357245063125314899E-3,  4.15642294431288815669E-3,  -1.05640848946261981558E-2,
    2.47264490306265168283E-2,  -5.29459812080949914269E-2,  1.02643658689847095384E-1,  -1.76416518357834055153E-1,
    2.52587186443633654823E-1};
const std::vector<double> kI1eB = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17, -3.20952592199342395980E-17,
    2.96262899764595013876E-16,  3.30820231092092828324E-16,  -1.88035477551078244854E-15, -3.81440307243700780478E-15,
    1.04202769841288027642E-14,  4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,  3.25260358301548823856E-11,
    -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9,  -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,  -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
    7.78576235018280120474E-1};
std::vector<double> tail(const std::vector<double>& v, size_t n) { return {v.end() - long(n), v.end()}; }
const std::vector<double>& i1e_a(const T& x) {
  static const std::vector<double> f = tail(kI1eA, 17);
  return is_double(x) ? kI1eA : f;
}
const std::vector<double>& i1e_b(const T& x) {
  static const std::vector<double> f = tail(kI1eB, 7);
  return is_double(x) ? kI1eB : f;
}

// The two Chebyshev expansions: [0, 8] in x / 2 - 2, (8, inf) in 32 / x - 2.
struct Halves {
  T ax, small, lo, hi;  // |x|, |x| <= 8, series on [0, 8], series beyond
};
Halves i_series(const T& x, const std::vector<double>& a, const std::vector<double>& b) {
  T ax = un(Op::Abs, x);
  return {ax, le(ax, 8.0), chbevl(ax / 2.0 - 2.0, a), chbevl(32.0 / ax - 2.0, b)};
}
T u_i0(const T& x) {
  Halves h = i_series(x, kI0eA, kI0eB);
  T e = un(Op::Exp, h.ax);
  return where(h.small, e * h.lo, e * h.hi / un(Op::Sqrt, h.ax));
}
T u_i0e(const T& x) {
  Halves h = i_series(x, kI0eA, kI0eB);
  return where(h.small, h.lo, h.hi / un(Op::Sqrt, h.ax));
}
T u_i1(const T& x) {
  Halves h = i_series(x, i1e_a(x), i1e_b(x));
  T e = un(Op::Exp, h.ax);
  T out = where(h.small, e * h.ax * h.lo, e * h.hi / un(Op::Sqrt, h.ax));
  return where(lt(x, 0.0), -out, out);
}
T u_i1e(const T& x) {
  Halves h = i_series(x, i1e_a(x), i1e_b(x));
  T out = where(h.small, h.lo * h.ax, h.hi / un(Op::Sqrt, h.ax));
  return where(lt(x, 0.0), -out, out);
}

// ---------------------------------------------------------------- ndtri
// calc_ndtri: a rational approximation around 0.5, two in z = sqrt(-2 log y) for the tails.
T u_ndtri(const T& y0) {
  const std::vector<double> P0 = {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                                  1.39312609387279679503E1, -1.23916583867381258016E0};
  const std::vector<double> Q0 = {1.0, 1.95448858338141759834E0, 4.67627912898881538453E0,
                                  8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
                                  -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0};
  const std::vector<double> P1 = {4.05544892305962419923E0,  3.15251094599893866154E1,  5.71628192246421288162E1,
                                  4.40805073893200834700E1,  1.46849561928858024014E1,  2.18663306850790267539E0,
                                  -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
  const std::vector<double> Q1 = {1.0, 1.57799883256466749731E1, 4.53907635128879210584E1,
                                  4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
                                  -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
  const std::vector<double> P2 = {3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
                                  1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
                                  3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
  const std::vector<double> Q2 = {1.0, 6.02427039364742014255E0, 3.67983563856160859403E0,
                                  1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
                                  3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9};
  const double s2pi = 2.50662827463100050242E0, e2 = 0.13533528323661269189;  // sqrt(2 pi), exp(-2)
  // the upper tail mirrors onto the lower one
  T upper = gt(y0, 1.0 - cnst(y0, e2));
  T y = where(upper, 1.0 - y0, y0);
  // central: |y - 0.5| <= 3/8
  T yc = y - 0.5;
  T y2 = yc * yc;
  T central = (yc + yc * (y2 * polevl(y2, P0) / polevl(y2, Q0))) * s2pi;
  // tails
  T x = un(Op::Sqrt, -2.0 * un(Op::Log, y));
  T x0 = x - un(Op::Log, x) / x;
  T z = 1.0 / x;
  T x1 = where(lt(x, 8.0), z * polevl(z, P1) / polevl(z, Q1), z * polevl(z, P2) / polevl(z, Q2));
  T t = x0 - x1;
  T r = where(gt(y, e2), central, where(upper, t, -t));
  r = where(lor(lt(y0, 0.0), gt(y0, 1.0)), kNaN, r);
  r = where(eq(y0, 1.0), kInf, r);
  return where(eq(y0, 0.0), -kInf, r);
}

// ATen has no 16-bit float ndtri kernel
Computed ndtri(const at::Tensor& self) {
  if (self.scalar_type() == c10::kHalf || self.scalar_type() == c10::kBFloat16)
    not_implemented_for("ndtri_cpu", self.scalar_type());
  return unary<u_ndtri>(self);
}

Computed polygamma_compute(int64_t n, const at::Tensor& self) {
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  c10::ScalarType dt = float_type_for(self.scalar_type());
  T x = operand_op(self, dt, to_shape(self.sizes()));
  T r = n == 0 ? u_digamma(x) : n == 1 ? trigamma(x) : polygamma_n(x, n);
  return {r.cast(to_engine(dt)), dt};
}
at::Tensor polygamma(int64_t n, const at::Tensor& self) {
  TinyOp op("polygamma");
  auto r = polygamma_compute(n, self);
  return make_result(r.value, r.dtype);
}
at::Tensor& polygamma_out(int64_t n, const at::Tensor& self, at::Tensor& out) {
  TinyOp op("polygamma");
  auto r = polygamma_compute(n, self);
  return assign_out(out, r.value, r.dtype, {self});
}

}  // namespace

#define TINY_SPECIAL(name, F)                                   \
  m.impl(name, Kernels<name, unary<F>>::fn);                    \
  m.impl(name ".out", Kernels<name, unary<F>>::out)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TINY_PW3("lgamma", unary<u_lgamma>);
  TINY_PW3("digamma", unary<u_digamma>);
  m.impl("polygamma", polygamma);
  m.impl("polygamma.out", polygamma_out);
  TINY_PW3("i0", unary<u_i0>);
  TINY_SPECIAL("special_i0e", u_i0e);
  TINY_SPECIAL("special_i1", u_i1);
  TINY_SPECIAL("special_i1e", u_i1e);
  m.impl("special_ndtri", Kernels<"special_ndtri", ndtri>::fn);
  m.impl("special_ndtri.out", Kernels<"special_ndtri", ndtri>::out);
}

}  // namespace torch_tiny
