// The unary math primitives added for the ATen pointwise ops: each is a direct
// libm / LLVM intrinsic call, compared with the host's libm.
#include <cmath>
#include <cstring>

#include "engine/runtime/llvm_jit.h"
#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

template <typename T, typename F>
void expect_matches_libm(Op op, const std::vector<T>& in, F ref) {
  auto out = to_vec<T>(from(in, {int64_t(in.size())}).unary(op));
  for (size_t i = 0; i < in.size(); i++) {
    T want = ref(in[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << op_name(op) << "(" << in[i] << ")";
    } else {
      EXPECT_EQ(out[i], want) << op_name(op) << "(" << in[i] << ")";
    }
  }
}

// `op` over float32 `x` is within `units` of the last place of `ref` (in double) rounded.
void expect_within_units(Op op, const std::vector<float>& x, double (*ref)(double), int64_t units) {
  auto got = to_vec<float>(from(x, {int64_t(x.size())}).unary(op));
  for (size_t i = 0; i < x.size(); i++) {
    float want = float(ref(double(x[i])));
    int32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want, 4);
    EXPECT_LE(std::abs(int64_t(a) - int64_t(b)), units) << op_name(op) << "(" << x[i] << ") = " << got[i] << ", want " << want;
  }
}

}  // namespace

TEST(MathOps, Exp2Log2Log10AreExactOnPowers) {
  std::vector<float> k;
  for (int i = -20; i <= 20; i++) k.push_back(float(i));
  auto e = to_vec<float>(from(k, {int64_t(k.size())}).unary(Op::Exp2));
  for (size_t i = 0; i < k.size(); i++) EXPECT_EQ(e[i], std::ldexp(1.0f, int(k[i])));
  auto l = to_vec<float>(from(e, {int64_t(e.size())}).unary(Op::Log2));
  for (size_t i = 0; i < k.size(); i++) EXPECT_EQ(l[i], k[i]);
  std::vector<double> p = {1e-10, 1e-3, 1, 10, 1e5, 1e22};
  auto t = to_vec<double>(from(p, {int64_t(p.size())}).unary(Op::Log10));
  for (size_t i = 0; i < p.size(); i++) EXPECT_EQ(t[i], std::log10(p[i]));
}

TEST(MathOps, ErfcAndLgammaMatchLibm) {
  std::vector<float> xf = {-3.0f, -0.5f, 0.0f, 0.25f, 1.0f, 4.5f, 9.0f, 15.0f, NAN, INFINITY};
  expect_matches_libm<float>(Op::Erfc, xf, [](float v) { return std::erfc(v); });
  std::vector<double> xd = {-3.0, -0.5, 0.0, 0.25, 1.0, 4.5, 9.0, 26.0, NAN, INFINITY};
  expect_matches_libm<double>(Op::Erfc, xd, [](double v) { return std::erfc(v); });
  std::vector<float> g = {-2.5f, -0.5f, 0.5f, 1.0f, 2.0f, 3.7f, 30.0f, 1e10f, NAN};
  expect_matches_libm<float>(Op::Lgamma, g, [](float v) { return std::lgamma(v); });
  std::vector<double> gd = {-2.5, -0.5, 0.5, 1.0, 2.0, 3.7, 30.0, 1e100, NAN};
  expect_matches_libm<double>(Op::Lgamma, gd, [](double v) { return std::lgamma(v); });
}

// float32 erf is two float polynomials where the target has FMA (the loop vectorizer widens
// them), libm's erff elsewhere: either way within one unit of the last place of the correctly
// rounded value (erf in double, rounded) over [-5, 5] and at the edges: signed zeros, tiny and
// subnormal values, the switch between the polynomials at 1 and to +-1 at 3.9192058,
// infinities, NaN.
TEST(MathOps, FloatErfIsWithinOneUnitOfTheRoundedValue) {
  std::vector<float> x;
  for (int i = -50000; i <= 50000; i++) x.push_back(float(i) * 1e-4f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 1e-8f, 0.99999994f, 1.0f, 1.0000001f, -1.0f,
                  3.9192056f, 3.9192058f, 3.99f, 4.0f, -4.0f, 30.0f, -30.0f})
    x.push_back(v);
  expect_within_units(Op::Erf, x, [](double v) { return std::erf(v); }, 1);
  auto special = to_vec<float>(from(std::vector<float>{INFINITY, -INFINITY, NAN}, {3}).unary(Op::Erf));
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], -1.0f);
  EXPECT_TRUE(std::isnan(special[2]));
}

// float32 exp is a polynomial after a reduction by ln 2 where the target has FMA: within one
// unit of the correctly rounded value over its whole range, into subnormal results, and at
// the edges: signed zeros (exactly 1), the largest finite result and the first infinite one,
// the last subnormal one and the first zero, infinities, NaN; exp2 too. Elsewhere it is LLVM's exp,
// which the vectorizer makes libmvec's SSE expf: within 4 units.
TEST(MathOps, FloatExpIsWithinOneUnitOfTheRoundedValue) {
  const int64_t units = LLVMJit::get().vector_unit().fma ? 1 : 4;
  std::vector<float> x;
  for (int i = -21000; i <= 19000; i++) x.push_back(float(i) * 5e-3f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, 0.34657359f, -0.34657359f, 88.72283f, 88.72284f, 89.0f,
                  -87.33654f, -87.33655f, -103.97207f, -103.9721f, -104.0f, -200.0f, 200.0f})
    x.push_back(v);
  expect_within_units(Op::Exp, x, [](double v) { return std::exp(v); }, units);
  // exp2 likewise (its reduction x - round(x) is exact; integers give exact powers, see above)
  std::vector<float> x2;
  for (int i = -15500; i <= 13200; i++) x2.push_back(float(i) * 1e-2f + 3e-4f);
  for (float v : {0.0f, -0.0f, 127.99999f, 128.0f, -149.0f, -149.5f, -150.0f, -151.0f, 0.5f, -0.5f}) x2.push_back(v);
  expect_within_units(Op::Exp2, x2, [](double v) { return std::exp2(v); }, 1);
  auto special = to_vec<float>(from(std::vector<float>{0.0f, -0.0f, INFINITY, -INFINITY, NAN}, {5}).unary(Op::Exp));
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], 1.0f);
  EXPECT_EQ(special[2], INFINITY);
  EXPECT_EQ(special[3], 0.0f);
  EXPECT_TRUE(std::isnan(special[4]));
}

// float32 tanh is a polynomial below 1 and 1 - 2 / (exp(2|x|) + 1) above where the target has
// FMA: within one unit of the correctly rounded value, at the switch, for tiny and large
// arguments (1 from about 9; exp(2|x|) overflows from 44.4), signed zeros, NaN. Elsewhere it
// is glibc's tanhf, within 2 units.
TEST(MathOps, FloatTanhIsWithinOneUnitOfTheRoundedValue) {
  const int64_t units = LLVMJit::get().vector_unit().fma ? 1 : 2;
  std::vector<float> x;
  for (int i = -30000; i <= 30000; i++) x.push_back(float(i) * 4e-4f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-40f, 1e-8f, 0.99999994f, 1.0f, 1.0000001f, -1.0f, 9.0f, 44.5f, 45.0f,
                  100.0f, -100.0f, INFINITY, -INFINITY})
    x.push_back(v);
  expect_within_units(Op::Tanh, x, [](double v) { return std::tanh(v); }, units);
  EXPECT_TRUE(std::isnan(to_vec<float>(from(std::vector<float>{NAN}, {1}).unary(Op::Tanh))[0]));
}

// float32 log is e ln 2 plus a polynomial of the mantissa in [sqrt(1/2), sqrt(2)) where the
// target has FMA: within one unit of the correctly rounded value from the smallest subnormal to
// the largest float, near 1 (where the result is small), on both sides of the mantissa's switch
// at sqrt(1/2) and sqrt(2); 0 gives -inf, +inf itself, negatives and NaN NaN. Elsewhere it is
// LLVM's log, which the vectorizer makes libmvec's SSE logf: within 4 units.
TEST(MathOps, FloatLogIsWithinOneUnitOfTheRoundedValue) {
  const int64_t units = LLVMJit::get().vector_unit().fma ? 1 : 4;
  std::vector<float> x;
  for (int i = -149 * 64; i < 128 * 64; i++) x.push_back(std::exp2(float(i) / 64.0f) * 1.0003f);
  for (int i = -20000; i <= 20000; i++) x.push_back(1.0f + float(i) * 1e-6f);
  for (int i = -2000; i <= 2000; i++) {
    x.push_back(0.70710677f + float(i) * 1e-6f);
    x.push_back(1.4142135f + float(i) * 1e-6f);
  }
  for (float v : {1e-45f, 3e-45f, 1e-40f, 1.1754942e-38f, 1.1754944e-38f, 3.4028235e38f, 1.0f, 2.0f, 0.5f})
    x.push_back(v);
  expect_within_units(Op::Log, x, [](double v) { return std::log(v); }, units);
  auto special = to_vec<float>(from(std::vector<float>{0.0f, -0.0f, INFINITY, -INFINITY, -1.0f, -1e-40f, NAN}, {7}).unary(Op::Log));
  EXPECT_EQ(special[0], -INFINITY);
  EXPECT_EQ(special[1], -INFINITY);
  EXPECT_EQ(special[2], INFINITY);
  for (size_t i = 3; i < special.size(); i++) EXPECT_TRUE(std::isnan(special[i])) << i;
}

TEST(MathOps, SignOfUnsignedValues) {
  std::vector<uint8_t> u = {0, 1, 127, 128, 255};
  auto s = to_vec<uint8_t>(from(u, {5}).unary(Op::Sign));
  std::vector<uint8_t> want = {0, 1, 1, 1, 1};
  EXPECT_EQ(s, want);
}
