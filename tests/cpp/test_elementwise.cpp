// Every elementwise op against a scalar reference. Exact ops must match bit
// for bit (zeros of either sign compare equal, any NaN matches any NaN);
// transcendental ones within a few ulp of the C library. 16-bit floats must
// equal the float32 computation rounded to nearest even.
//
// Integer semantics the engine chose where C leaves them open (documented
// here and checked): x / 0 == 0 and x % 0 == 0 (the torch layer raises
// before it gets here), INT_MIN / -1 wraps to INT_MIN, shifts by a negative
// amount or >= the bit width give 0 (left, unsigned right) or the sign fill
// (signed right), as PyTorch's CPU kernels do.
#include <map>
#include <sstream>
#include <random>

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

const std::vector<Op> kFloatUnary = {Op::Neg,   Op::Abs,   Op::Exp,   Op::Log,  Op::Sin,   Op::Cos,   Op::Tan,
                                     Op::Sqrt,  Op::Recip, Op::Trunc, Op::Floor, Op::Ceil, Op::Round, Op::Erf,
                                     Op::Tanh,  Op::Asin,  Op::Acos,  Op::Atan, Op::Sinh,  Op::Cosh,  Op::Asinh,
                                     Op::Acosh, Op::Atanh, Op::Expm1, Op::Log1p, Op::Erfinv, Op::Sigmoid, Op::Sign, Op::IsNan};
const std::vector<Op> kIntUnary = {Op::Neg, Op::Not, Op::Abs, Op::Sign, Op::IsNan, Op::Trunc, Op::Floor, Op::Ceil, Op::Round};
const std::vector<Op> kFloatBinary = {Op::Add,   Op::Sub,     Op::Mul,      Op::Div,   Op::Mod,   Op::Fmod,
                                      Op::FloorDiv, Op::FloorMod, Op::Max,  Op::Min,   Op::Pow,   Op::Atan2,
                                      Op::Hypot, Op::Copysign, Op::CmpLt,   Op::CmpLe, Op::CmpEq, Op::CmpNe};
const std::vector<Op> kIntBinary = {Op::Add,   Op::Sub,   Op::Mul,   Op::Div,   Op::Mod,   Op::Fmod,  Op::FloorDiv,
                                    Op::FloorMod, Op::Max, Op::Min,  Op::Pow,   Op::CmpLt, Op::CmpLe, Op::CmpEq,
                                    Op::CmpNe, Op::And,   Op::Or,    Op::Xor,   Op::Shl,   Op::Shr};
const std::vector<Op> kBoolBinary = {Op::Add, Op::Mul, Op::Max, Op::Min, Op::CmpLt, Op::CmpLe,
                                     Op::CmpEq, Op::CmpNe, Op::And, Op::Or, Op::Xor};

// Allowed error in ulp against the C library (0: exact).
int ulp_tolerance(Op op) {
  switch (op) {
    case Op::Exp: case Op::Log: case Op::Sin: case Op::Cos: case Op::Tan: case Op::Erf: case Op::Tanh:
    case Op::Asin: case Op::Acos: case Op::Atan: case Op::Sinh: case Op::Cosh: case Op::Asinh: case Op::Acosh:
    case Op::Atanh: case Op::Expm1: case Op::Log1p: case Op::Erfinv: case Op::Pow: case Op::Atan2: case Op::Hypot:
    case Op::Sigmoid:
      return 4;
    default:
      return 0;
  }
}

// ---- references

// PyTorch's calc_erfinv (a rational first guess, two Newton steps), in T.
template <typename T>
T erfinv_ref(T y) {
  const T a[4] = {T(0.886226899), T(-1.645349621), T(0.914624893), T(-0.140543331)};
  const T b[4] = {T(-2.118377725), T(1.442710462), T(-0.329097515), T(0.012229801)};
  const T c[4] = {T(-1.970840454), T(-1.624906493), T(3.429567803), T(1.641345311)};
  const T d[2] = {T(3.543889200), T(1.637067800)};
  T ya = std::fabs(y);
  if (ya > T(1)) return std::numeric_limits<T>::quiet_NaN();
  if (ya == T(1)) return std::copysign(std::numeric_limits<T>::infinity(), y);
  T x;
  if (ya <= T(0.7)) {
    T z = y * y;
    T num = (((a[3] * z + a[2]) * z + a[1]) * z + a[0]);
    T dem = ((((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + T(1));
    x = y * num / dem;
  } else {
    T z = std::sqrt(-std::log((T(1) - ya) / T(2)));
    T num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    T dem = (d[1] * z + d[0]) * z + T(1);
    x = std::copysign(num, y) / dem;
  }
  const T k = T(2) / T(std::sqrt(3.14159265358979323846));
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  return x;
}

template <typename T>
T ref_unary_float(Op op, T x) {
  switch (op) {
    case Op::Neg: return -x;
    case Op::Abs: return std::fabs(x);
    case Op::Exp: return std::exp(x);
    case Op::Log: return std::log(x);
    case Op::Sin: return std::sin(x);
    case Op::Cos: return std::cos(x);
    case Op::Tan: return std::tan(x);
    case Op::Sqrt: return std::sqrt(x);
    case Op::Recip: return T(1) / x;
    case Op::Trunc: return std::trunc(x);
    case Op::Floor: return std::floor(x);
    case Op::Ceil: return std::ceil(x);
    case Op::Round: return std::nearbyint(x);  // ties to even
    case Op::Erf: return std::erf(x);
    case Op::Tanh: return std::tanh(x);
    case Op::Asin: return std::asin(x);
    case Op::Acos: return std::acos(x);
    case Op::Atan: return std::atan(x);
    case Op::Sinh: return std::sinh(x);
    case Op::Cosh: return std::cosh(x);
    case Op::Asinh: return std::asinh(x);
    case Op::Acosh: return std::acosh(x);
    case Op::Atanh: return std::atanh(x);
    case Op::Expm1: return std::expm1(x);
    case Op::Log1p: return std::log1p(x);
    case Op::Erfinv: return erfinv_ref(x);
    case Op::Sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Op::Sign: return T((x > 0) - (x < 0));  // NaN -> 0, as torch.sign
    case Op::IsNan: return T(std::isnan(x));
    default: break;
  }
  ADD_FAILURE() << "no reference for " << op_name(op);
  return 0;
}

// PyTorch's c10::div_floor_floating.
template <typename T>
T floordiv_float(T a, T b) {
  if (b == 0) return a / b;
  T m = std::fmod(a, b);
  T d = (a - m) / b;
  if ((m != 0) && ((b < 0) != (m < 0))) d -= T(1);
  if (d != 0) {
    T f = std::floor(d);
    if (d - f > T(0.5)) f += T(1);
    return f;
  }
  return std::copysign(T(0), a / b);
}

template <typename T>
T floormod_float(T a, T b) {
  T m = std::fmod(a, b);
  if ((m != 0) && ((b < 0) != (m < 0))) m += b;
  return m;
}

template <typename T>
T ref_binary_float(Op op, T a, T b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Mod: case Op::Fmod: return std::fmod(a, b);
    case Op::FloorDiv: return floordiv_float(a, b);
    case Op::FloorMod: return floormod_float(a, b);
    case Op::Max: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
    case Op::Min: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
    case Op::Pow: return std::pow(a, b);
    case Op::Atan2: return std::atan2(a, b);
    case Op::Hypot: return std::hypot(a, b);
    case Op::Copysign: return std::copysign(a, b);
    case Op::CmpLt: return T(a < b);
    case Op::CmpLe: return T(a <= b);
    case Op::CmpEq: return T(a == b);
    case Op::CmpNe: return T(a != b);
    default: break;
  }
  ADD_FAILURE() << "no reference for " << op_name(op);
  return 0;
}

// Integers: computed on 64 bits, wrapped to the type.
template <typename I>
I wrap(uint64_t v) { return static_cast<I>(v); }

template <typename I>
I ref_unary_int(Op op, I x) {
  switch (op) {
    case Op::Neg: return wrap<I>(0 - uint64_t(int64_t(x)));
    case Op::Not: return I(~x);
    case Op::Abs: return x < 0 ? wrap<I>(0 - uint64_t(int64_t(x))) : x;
    case Op::Sign: return I((x > 0) - (x < 0));
    case Op::IsNan: return 0;
    case Op::Trunc: case Op::Floor: case Op::Ceil: case Op::Round: return x;
    default: break;
  }
  ADD_FAILURE() << "no reference for " << op_name(op);
  return 0;
}

template <typename I>
I ipow(I base, I exp) {
  if (std::is_signed<I>::value && exp < 0) {
    if (base == 1) return 1;
    if (base == I(-1)) return (exp % 2) ? I(-1) : I(1);
    return 0;
  }
  uint64_t r = 1, b = uint64_t(int64_t(base));
  uint64_t e = uint64_t(int64_t(exp));
  if (!std::is_signed<I>::value) e = uint64_t(exp);
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return wrap<I>(r);
}

template <typename I>
I ref_binary_int(Op op, I a, I b) {
  using U = std::make_unsigned_t<I>;
  constexpr int bits = int(sizeof(I) * 8);
  constexpr bool sgn = std::is_signed<I>::value;
  auto trunc_div = [&](I x, I y) -> I {
    if (y == 0) return 0;
    if (sgn && y == I(-1)) return wrap<I>(0 - uint64_t(int64_t(x)));
    return I(x / y);
  };
  auto c_mod = [&](I x, I y) -> I {
    if (y == 0 || (sgn && y == I(-1))) return 0;
    return I(x % y);
  };
  switch (op) {
    case Op::Add: return wrap<I>(uint64_t(int64_t(a)) + uint64_t(int64_t(b)));
    case Op::Sub: return wrap<I>(uint64_t(int64_t(a)) - uint64_t(int64_t(b)));
    case Op::Mul: return wrap<I>(uint64_t(int64_t(a)) * uint64_t(int64_t(b)));
    case Op::Div: return trunc_div(a, b);
    case Op::Mod: case Op::Fmod: return c_mod(a, b);
    case Op::FloorDiv: {
      I q = trunc_div(a, b), r = c_mod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? I(q - 1) : q;
    }
    case Op::FloorMod: {
      I r = c_mod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? wrap<I>(uint64_t(int64_t(r)) + uint64_t(int64_t(b))) : r;
    }
    case Op::Max: return std::max(a, b);
    case Op::Min: return std::min(a, b);
    case Op::Pow: return ipow(a, b);
    case Op::CmpLt: return a < b;
    case Op::CmpLe: return a <= b;
    case Op::CmpEq: return a == b;
    case Op::CmpNe: return a != b;
    case Op::And: return I(a & b);
    case Op::Or: return I(a | b);
    case Op::Xor: return I(a ^ b);
    case Op::Shl: {  // as PyTorch's lshift kernel
      if (std::make_signed_t<I>(b) < 0 || int64_t(b) >= bits) return 0;
      return I(U(a) << b);
    }
    case Op::Shr: {  // as PyTorch's rshift kernel
      constexpr int max_shift = bits - (sgn ? 1 : 0);
      if (std::make_signed_t<I>(b) < 0 || int64_t(b) >= max_shift) return sgn ? I(a < 0 ? -1 : 0) : I(0);
      return I(a >> b);
    }
    default: break;
  }
  ADD_FAILURE() << "no reference for " << op_name(op);
  return 0;
}

bool is_comparison_or_isnan(Op op) { return is_comparison(op) || op == Op::IsNan; }

// ---- inputs

template <typename T>
std::vector<T> float_unary_inputs() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {T(0),     T(-0.0),   T(1),       T(-1),     T(0.5),    T(-0.5),    T(2),       T(-2),
                      T(0.1),   T(-0.1),   T(3),       T(-3),     T(10),     T(-10),     T(100),     T(-100),
                      T(1e-3),  T(-1e-3),  T(1e-30),   L::min(),  L::denorm_min(), -L::denorm_min(), L::min() / T(3),
                      L::max(), -L::max(), L::infinity(), -L::infinity(), L::quiet_NaN(), T(3.14159265358979),
                      T(-3.14159265358979), T(1.5707963267948966), T(1e6), T(88.7), T(-88.7), T(89), T(-104),
                      T(709), T(710), T(-745), T(0.9999999), T(-0.9999999), T(1.0000001), T(1e20), T(-1e20), T(2.5),
                      T(-2.5), T(3.5), T(0.49999997), T(1e-8), T(-1e-8), T(12345.678), T(0.75), T(-0.75)};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-10, 10), e(-8, 8);
  for (int k = 0; k < 200; k++) v.push_back(T(u(rng)));
  for (int k = 0; k < 200; k++) v.push_back(T((k & 1 ? -1 : 1) * std::pow(10.0, e(rng))));
  for (int k = 0; k < 60; k++) v.push_back(T(u(rng) / 10));  // [-1, 1]: asin, acos, atanh domain
  return v;
}

template <typename T>
std::vector<T> float_binary_values() {
  using L = std::numeric_limits<T>;
  return {T(0),   T(-0.0), T(1),   T(-1), T(2),     T(-2),    T(3),    T(-3),   T(0.5),          T(-0.5),
          T(7),   T(-7),   T(2.5), T(-2.5), T(1e-3), T(1e30), T(-1e30), T(5.5), L::denorm_min(), L::infinity(),
          -L::infinity(), L::quiet_NaN(), T(10), T(0.3), T(-0.3), T(100), T(-1.5), T(3.14159), T(0.1), T(-6)};
}

template <typename I>
std::vector<I> int_values() {
  using L = std::numeric_limits<I>;
  std::vector<int64_t> cand = {int64_t(L::min()), int64_t(L::min()) + 1, -1000000, -65536, -300, -100, -8, -7, -3, -2,
                               -1, 0, 1, 2, 3, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 200, 255,
                               1000000, int64_t(1) << 40, int64_t(L::max()) - 1, int64_t(L::max())};
  std::vector<I> v;
  for (int64_t c : cand)
    if (c >= int64_t(L::min()) && (c < 0 || uint64_t(c) <= uint64_t(L::max())))
      if (std::find(v.begin(), v.end(), I(c)) == v.end()) v.push_back(I(c));
  return v;
}

template <typename T>
std::string show(T v) {
  if constexpr (std::is_floating_point<T>::value) {
    std::ostringstream os;
    os.precision(std::is_same<T, float>::value ? 9 : 17);
    os << v;
    return os.str();
  } else {
    return std::to_string(int64_t(v));
  }
}

// Compares an engine result with the reference; reports the first few misses.
template <typename T>
struct Checker {
  std::string what;
  int tol = 0;
  int bad = 0;
  int64_t worst = 0;
  void operator()(T got, T want, const std::string& args) {
    bool ok;
    if constexpr (std::is_floating_point<T>::value) {
      int64_t d = ulp_distance(got, want);
      if (std::isinf(want) || std::isnan(want) || want == 0) d = same_value(got, want) ? 0 : INT64_MAX;
      worst = std::max(worst, d == INT64_MAX ? worst : d);
      ok = d <= tol;
    } else {
      ok = got == want;
    }
    if (!ok && bad++ < 5) ADD_FAILURE() << what << "(" << args << ") = " << show(got) << ", want " << show(want);
  }
};

template <typename T>
void check_float_unary(DType dt) {
  std::vector<T> x = float_unary_inputs<T>();
  Tensor t = from(x, {int64_t(x.size())});
  std::vector<Tensor> outs;
  for (Op op : kFloatUnary) outs.push_back(t.unary(op));
  Tensor::realize_all(outs);
  for (size_t j = 0; j < kFloatUnary.size(); j++) {
    Op op = kFloatUnary[j];
    Checker<T> check{std::string(op_name(op)) + "<" + dtype_name(dt) + ">", ulp_tolerance(op)};
    if (is_comparison_or_isnan(op)) {
      auto got = to_vec<uint8_t>(outs[j]);
      for (size_t k = 0; k < x.size(); k++) check(T(got[k]), ref_unary_float(op, x[k]), show(x[k]));
    } else {
      auto got = to_vec<T>(outs[j]);
      for (size_t k = 0; k < x.size(); k++) check(got[k], ref_unary_float(op, x[k]), show(x[k]));
    }
  }
}

template <typename T>
void check_float_binary(DType dt) {
  std::vector<T> vals = float_binary_values<T>(), a, b;
  for (T p : vals)
    for (T q : vals) {
      a.push_back(p);
      b.push_back(q);
    }
  // random pairs for the transcendental binaries
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(-20, 20);
  for (int k = 0; k < 300; k++) {
    a.push_back(T(u(rng)));
    b.push_back(T(k % 3 == 0 ? std::round(u(rng)) : u(rng) / 4));
  }
  int64_t n = int64_t(a.size());
  Tensor ta = from(a, {n}), tb = from(b, {n});
  std::vector<Tensor> outs;
  for (Op op : kFloatBinary) outs.push_back(ta.binary(op, tb));
  Tensor::realize_all(outs);
  for (size_t j = 0; j < kFloatBinary.size(); j++) {
    Op op = kFloatBinary[j];
    Checker<T> check{std::string(op_name(op)) + "<" + dtype_name(dt) + ">", ulp_tolerance(op)};
    std::vector<T> got(static_cast<size_t>(n));
    if (is_comparison(op)) {
      auto g = to_vec<uint8_t>(outs[j]);
      for (size_t k = 0; k < got.size(); k++) got[k] = T(g[k]);
    } else {
      got = to_vec<T>(outs[j]);
    }
    for (size_t k = 0; k < got.size(); k++) check(got[k], ref_binary_float(op, a[k], b[k]), show(a[k]) + ", " + show(b[k]));
  }
}

template <typename I>
void check_int_ops() {
  DType dt = dtype_of<I>();
  std::vector<I> x = int_values<I>();
  Tensor t = from(x, {int64_t(x.size())});
  std::vector<Tensor> outs;
  for (Op op : kIntUnary) outs.push_back(t.unary(op));
  std::vector<I> a, b;
  for (I p : x)
    for (I q : x) {
      a.push_back(p);
      b.push_back(q);
    }
  int64_t n = int64_t(a.size());
  Tensor ta = from(a, {n}), tb = from(b, {n});
  for (Op op : kIntBinary) outs.push_back(ta.binary(op, tb));
  Tensor::realize_all(outs);
  for (size_t j = 0; j < kIntUnary.size(); j++) {
    Op op = kIntUnary[j];
    Checker<I> check{std::string(op_name(op)) + "<" + dtype_name(dt) + ">"};
    std::vector<I> got(x.size());
    if (op == Op::IsNan) {
      auto g = to_vec<uint8_t>(outs[j]);
      for (size_t k = 0; k < x.size(); k++) got[k] = I(g[k]);
    } else {
      got = to_vec<I>(outs[j]);
    }
    for (size_t k = 0; k < x.size(); k++) check(got[k], ref_unary_int(op, x[k]), show(x[k]));
  }
  for (size_t j = 0; j < kIntBinary.size(); j++) {
    Op op = kIntBinary[j];
    const Tensor& out = outs[kIntUnary.size() + j];
    Checker<I> check{std::string(op_name(op)) + "<" + dtype_name(dt) + ">"};
    std::vector<I> got(static_cast<size_t>(n));
    if (is_comparison(op)) {
      auto g = to_vec<uint8_t>(out);
      for (size_t k = 0; k < got.size(); k++) got[k] = I(g[k]);
    } else {
      got = to_vec<I>(out);
    }
    for (size_t k = 0; k < got.size(); k++) check(got[k], ref_binary_int(op, a[k], b[k]), show(a[k]) + ", " + show(b[k]));
  }
}

}  // namespace

TEST(Elementwise, Float32Unary) { check_float_unary<float>(DType::Float32); }
TEST(Elementwise, Float64Unary) { check_float_unary<double>(DType::Float64); }
TEST(Elementwise, Float32Binary) { check_float_binary<float>(DType::Float32); }
TEST(Elementwise, Float64Binary) { check_float_binary<double>(DType::Float64); }
TEST(Elementwise, UInt8) { check_int_ops<uint8_t>(); }
TEST(Elementwise, Int8) { check_int_ops<int8_t>(); }
TEST(Elementwise, Int16) { check_int_ops<int16_t>(); }
TEST(Elementwise, Int32) { check_int_ops<int32_t>(); }
TEST(Elementwise, Int64) { check_int_ops<int64_t>(); }

TEST(Elementwise, Bool) {
  std::vector<uint8_t> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};
  Tensor ta = from_as(a, {4}, DType::Bool), tb = from_as(b, {4}, DType::Bool);
  auto run = [&](Op op) { return to_vec<uint8_t>(ta.binary(op, tb)); };
  using V = std::vector<uint8_t>;
  EXPECT_EQ(run(Op::Add), (V{0, 1, 1, 1}));  // or
  EXPECT_EQ(run(Op::Mul), (V{0, 0, 0, 1}));  // and
  EXPECT_EQ(run(Op::Max), (V{0, 1, 1, 1}));
  EXPECT_EQ(run(Op::Min), (V{0, 0, 0, 1}));
  EXPECT_EQ(run(Op::CmpLt), (V{0, 1, 0, 0}));
  EXPECT_EQ(run(Op::CmpLe), (V{1, 1, 0, 1}));
  EXPECT_EQ(run(Op::CmpEq), (V{1, 0, 0, 1}));
  EXPECT_EQ(run(Op::CmpNe), (V{0, 1, 1, 0}));
  EXPECT_EQ(run(Op::And), (V{0, 0, 0, 1}));
  EXPECT_EQ(run(Op::Or), (V{0, 1, 1, 1}));
  EXPECT_EQ(run(Op::Xor), (V{0, 1, 1, 0}));
  EXPECT_EQ(to_vec<uint8_t>(ta.unary(Op::Not)), (V{1, 1, 0, 0}));
  EXPECT_EQ(to_vec<uint8_t>(tb.unary(Op::Sign)), (V{0, 1, 0, 1}));
  EXPECT_EQ(to_vec<uint8_t>(tb.unary(Op::Abs)), (V{0, 1, 0, 1}));
  EXPECT_EQ(to_vec<uint8_t>(tb.unary(Op::IsNan)), (V{0, 0, 0, 0}));
}

// 16-bit floats: every op equals the float32 op on the widened inputs, rounded
// once (FloorDiv excepted: PyTorch rounds each of its steps, tested below).
TEST(Elementwise, SixteenBitFloatsComputeInFloat) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto round16 = [&](float f) {
      return dt == DType::Float16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
    };
    auto widen = [&](uint16_t h) { return dt == DType::Float16 ? half_bits_to_float(h) : bfloat16_bits_to_float(h); };
    // inputs: the float32 unary inputs rounded to 16 bits, and all pairs of the binary values
    std::vector<uint16_t> ux;
    for (float f : float_unary_inputs<float>()) ux.push_back(round16(f));
    std::vector<uint16_t> ba, bb;
    for (float p : float_binary_values<float>())
      for (float q : float_binary_values<float>()) {
        ba.push_back(round16(p));
        bb.push_back(round16(q));
      }
    auto widen_all = [&](const std::vector<uint16_t>& v) {
      std::vector<float> f;
      for (auto h : v) f.push_back(widen(h));
      return f;
    };
    Tensor x16 = from_as(ux, {int64_t(ux.size())}, dt), x32 = from(widen_all(ux), {int64_t(ux.size())});
    Tensor a16 = from_as(ba, {int64_t(ba.size())}, dt), a32 = from(widen_all(ba), {int64_t(ba.size())});
    Tensor b16 = from_as(bb, {int64_t(bb.size())}, dt), b32 = from(widen_all(bb), {int64_t(bb.size())});
    std::vector<Tensor> o16, o32;
    std::vector<Op> ops;
    for (Op op : kFloatUnary) {
      o16.push_back(x16.unary(op));
      o32.push_back(x32.unary(op));
      ops.push_back(op);
    }
    for (Op op : kFloatBinary) {
      if (op == Op::FloorDiv) continue;  // rounds every step, see below
      o16.push_back(a16.binary(op, b16));
      o32.push_back(a32.binary(op, b32));
      ops.push_back(op);
    }
    std::vector<Tensor> all = o16;
    all.insert(all.end(), o32.begin(), o32.end());
    Tensor::realize_all(all);
    for (size_t j = 0; j < ops.size(); j++) {
      std::string what = std::string(op_name(ops[j])) + "<" + dtype_name(dt) + ">";
      int bad = 0;
      if (o16[j].dtype() == DType::Bool) {
        EXPECT_EQ(to_vec<uint8_t>(o16[j]), to_vec<uint8_t>(o32[j])) << what;
        continue;
      }
      auto g16 = to_vec<uint16_t>(o16[j]);
      auto g32 = to_vec<float>(o32[j]);
      for (size_t k = 0; k < g16.size(); k++) {
        uint16_t want = round16(g32[k]);
        bool ok = g16[k] == want || (std::isnan(widen(g16[k])) && std::isnan(g32[k]));
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << what << " element " << k << ": 0x" << std::hex << g16[k] << " want 0x" << want
                        << std::dec << " (float result " << g32[k] << ")";
        }
      }
    }
  }
}

TEST(Elementwise, WhereEveryDtype) {
  std::vector<uint8_t> c = {1, 0, 0, 1, 1, 0};
  Tensor cond = from_as(c, {6}, DType::Bool);
  for (DType dt : all_dtypes()) {
    std::vector<double> a = {1, 0, 1, 0, 1, 1}, b = {0, 1, 1, 0, 0, 0};
    if (dt != DType::Bool) {
      a = {1, 2, 3, 4, 5, 6};
      b = {-1, -2, -3, -4, -5, -6};
      if (!is_signed(dt)) b = {10, 20, 30, 40, 50, 60};
    }
    auto got = to_doubles(Tensor::where(cond, from_doubles(a, {6}, dt), from_doubles(b, {6}, dt)));
    for (size_t k = 0; k < 6; k++) EXPECT_EQ(got[k], c[k] ? a[k] : b[k]) << dtype_name(dt) << " " << k;
  }
  // NaN and infinities pass through untouched
  std::vector<float> a = {NAN, INFINITY, -0.f}, b = {1.f, 2.f, 3.f};
  auto got = to_vec<float>(Tensor::where(from_as(std::vector<uint8_t>{1, 1, 1}, {3}, DType::Bool), from(a, {3}), from(b, {3})));
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], INFINITY);
  EXPECT_TRUE(std::signbit(got[2]));
  // a constant condition folds to one side without a kernel
  Tensor ta = from(a, {3}), tb = from(b, {3});
  EXPECT_EQ(Tensor::where(Tensor::full({3}, Scalar::from_bool(true), DType::Bool), ta, tb).node(), ta.node());
  EXPECT_EQ(Tensor::where(Tensor::full({3}, Scalar::from_bool(false), DType::Bool), ta, tb).node(), tb.node());
}

// Constant folding of ops on two constants gives what the kernel computes.
TEST(Elementwise, ConstantFoldingMatchesKernels) {
  struct Case { DType dt; double a, b; };
  std::vector<Case> cases = {{DType::Float32, 0.1, 0.2},   {DType::Float32, 1e30, 1e30}, {DType::Float16, 0.1, 0.2},
                             {DType::BFloat16, 1.01, 3.3}, {DType::Float64, 0.1, 0.2},  {DType::Int32, 2147483647, 1},
                             {DType::Int8, 100, 100},      {DType::UInt8, 3, 200},     {DType::Int64, -5, 7},
                             {DType::Float32, NAN, 1},     {DType::Bool, 1, 1}};
  for (auto& c : cases) {
    Scalar sa = is_float(c.dt) ? Scalar::from_double(c.a) : Scalar::from_int(int64_t(c.a));
    Scalar sb = is_float(c.dt) ? Scalar::from_double(c.b) : Scalar::from_int(int64_t(c.b));
    Tensor ca = Tensor::full({1}, sa, c.dt), cb = Tensor::full({1}, sb, c.dt);
    Tensor la = ca.contiguous(), lb = cb.contiguous();
    la.realize();
    lb.realize();
    // la/lb are buffers now: ops on them run in kernels
    for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Max, Op::Min}) {
      if (c.dt == DType::Bool && op == Op::Sub) continue;
      Tensor folded = ca.binary(op, cb);
      EXPECT_EQ(folded.node()->op, Op::Const);
      auto f = to_doubles(folded), k = to_doubles(Tensor::from_buffer(la.node()->realized(), {1}).binary(op, Tensor::from_buffer(lb.node()->realized(), {1})));
      EXPECT_TRUE(same_value(f[0], k[0])) << op_name(op) << " " << dtype_name(c.dt) << ": folded " << f[0] << " kernel " << k[0];
    }
    if (c.dt != DType::Bool && c.dt != DType::UInt8) {
      auto f = to_doubles(ca.unary(Op::Neg));
      auto k = to_doubles(Tensor::from_buffer(la.node()->realized(), {1}).unary(Op::Neg));
      EXPECT_TRUE(same_value(f[0], k[0])) << "NEG " << dtype_name(c.dt);
    }
  }
}

// Large and oddly shaped iteration spaces: slices of the parallel axis, unit
// dims before it, 0-d kernels, transposed inputs.
TEST(Elementwise, IterationShapes) {
  const int64_t r = 1000, c = 1001;
  std::vector<float> x(static_cast<size_t>(r * c));
  for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 977) * 0.25f;
  Tensor t = from(x, {r, c});
  // y = t^T + 1, (c, r), realized across the thread pool
  auto y = to_vec<float>(t.permute({1, 0}).binary(Op::Add, Tensor::full({c, r}, Scalar::from_double(1), DType::Float32)));
  for (int64_t i = 0; i < c; i += 37)
    for (int64_t j = 0; j < r; j += 13) ASSERT_EQ(y[size_t(i * r + j)], x[size_t(j * c + i)] + 1) << i << "," << j;
  ASSERT_EQ(y[size_t(c * r - 1)], x[size_t(r * c - 1)] + 1);
  // unit dims before, between and after
  for (Shape s : std::vector<Shape>{{1, 1, 5000}, {1, 5000, 1}, {5000, 1, 1}, {1, 1, 1}, {}, {2, 1, 2500}}) {
    Tensor u = from(std::vector<float>(x.begin(), x.begin() + numel(s)), s);
    auto got = to_vec<float>(u.binary(Op::Mul, Tensor::full(s, Scalar::from_double(2), DType::Float32)));
    ASSERT_EQ(got.size(), size_t(numel(s)));
    for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], 2 * x[i]) << shape_str(s) << " " << i;
  }
}

// PyTorch's floor division of 16-bit floats runs div_floor_floating in the
// 16-bit type: every intermediate result is rounded.
TEST(Elementwise, SixteenBitFloorDivRoundsEveryStep) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto rnd = [&](float f) {
      return dt == DType::Float16 ? half_bits_to_float(float_to_half_bits(f))
                                  : bfloat16_bits_to_float(float_to_bfloat16_bits(f));
    };
    auto ref = [&](float a, float b) -> float {
      if (b == 0) return rnd(a / b);
      float m = rnd(std::fmod(a, b));
      float d = rnd(rnd(a - m) / b);
      if (m != 0 && ((b < 0) != (m < 0))) d = rnd(d - 1.f);
      if (d != 0) {
        float fl = std::floor(d);
        if (rnd(d - fl) > 0.5f) fl = rnd(fl + 1.f);
        return fl;
      }
      return std::copysign(0.f, rnd(a / b));
    };
    std::mt19937 rng(8);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<uint16_t> a, b;
    for (int k = 0; k < 4000; k++) {
      float x = rnd(n(rng) * 100), y = rnd(n(rng) * 10);
      a.push_back(dt == DType::Float16 ? float_to_half_bits(x) : float_to_bfloat16_bits(x));
      b.push_back(dt == DType::Float16 ? float_to_half_bits(y) : float_to_bfloat16_bits(y));
    }
    for (float p : float_binary_values<float>())
      for (float q : float_binary_values<float>()) {
        a.push_back(dt == DType::Float16 ? float_to_half_bits(p) : float_to_bfloat16_bits(p));
        b.push_back(dt == DType::Float16 ? float_to_half_bits(q) : float_to_bfloat16_bits(q));
      }
    int64_t n_el = int64_t(a.size());
    auto got = to_vec<uint16_t>(from_as(a, {n_el}, dt).binary(Op::FloorDiv, from_as(b, {n_el}, dt)));
    auto widen = [&](uint16_t h) { return dt == DType::Float16 ? half_bits_to_float(h) : bfloat16_bits_to_float(h); };
    int bad = 0;
    for (size_t k = 0; k < got.size(); k++) {
      float want = ref(widen(a[k]), widen(b[k])), g = widen(got[k]);
      bool ok = (std::isnan(want) && std::isnan(g)) || (want == g && std::signbit(want) == std::signbit(g));
      if (!ok && bad++ < 5)
        ADD_FAILURE() << dtype_name(dt) << " " << widen(a[k]) << " // " << widen(b[k]) << " = " << g << ", want " << want;
    }
  }
}
