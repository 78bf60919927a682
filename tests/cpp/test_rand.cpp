// Op::Rand: Philox-4x32-10 keyed by the seed, counter = offset + flat index,
// the first output word's top 24 bits scaled to [0, 1). Checked bit for bit
// against a host Philox (itself checked against Random123's known answers),
// and statistically.
#include <array>
#include <random>

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

using Words = std::array<uint32_t, 4>;

Words philox4x32_10(Words c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

float ref_rand(uint64_t seed, uint64_t counter) {
  Words w = philox4x32_10({uint32_t(counter), uint32_t(counter >> 32), 0, 0}, uint32_t(seed), uint32_t(seed >> 32));
  return float(w[0] >> 8) * (1.0f / 16777216.0f);
}

std::vector<float> rand_values(const Shape& shape, uint64_t seed, uint64_t offset) {
  return to_vec<float>(Tensor::rand(shape, seed, offset));
}

}  // namespace

TEST(Rand, HostPhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32 with 10 rounds
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0, 0), (Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu),
            (Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u),
            (Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Rand, MatchesHostPhiloxBitForBit) {
  for (auto [seed, offset] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 0}, {42, 0}, {42, 1000}, {0x123456789abcdefull, 7}, {5, (uint64_t(1) << 32) - 3} /* crosses words */}) {
    auto got = rand_values({7, 9}, seed, offset);
    for (size_t i = 0; i < got.size(); i++)
      ASSERT_EQ(got[i], ref_rand(seed, offset + i)) << "seed " << seed << " offset " << offset << " i " << i;
  }
}

TEST(Rand, UniformStatistics) {
  const int64_t n = 1 << 20;
  auto v = rand_values({n}, 2024, 0);
  double sum = 0, sq = 0, lag = 0;
  std::vector<int64_t> bins(64, 0);
  for (size_t i = 0; i < v.size(); i++) {
    ASSERT_GE(v[i], 0.f);
    ASSERT_LT(v[i], 1.f);
    sum += v[i];
    sq += double(v[i]) * v[i];
    if (i) lag += (double(v[i]) - 0.5) * (double(v[i - 1]) - 0.5);
    bins[size_t(v[i] * 64)]++;
  }
  double mean = sum / double(n), var = sq / double(n) - mean * mean;
  EXPECT_NEAR(mean, 0.5, 2e-3);           // ~7 standard errors
  EXPECT_NEAR(var, 1.0 / 12.0, 6e-4);     // ~8 standard errors
  EXPECT_NEAR(lag / double(n), 0.0, 1e-3);  // neighbours uncorrelated (1/12 would be fully correlated)
  // chi-square over 64 bins: 63 degrees of freedom, mean 63, sd ~11
  double expect = double(n) / 64, chi2 = 0;
  for (auto b : bins) chi2 += (double(b) - expect) * (double(b) - expect) / expect;
  EXPECT_LT(chi2, 130.0);
}

TEST(Rand, DeterministicAndOffsetsShiftTheStream) {
  std::vector<float> a, b;
  a = rand_values({1000}, 7, 0);  // the tensor is gone after this: the next call computes again
  EXPECT_EQ(kernels_run([&] { b = rand_values({1000}, 7, 0); }), 1);  // computed again, not cached
  EXPECT_EQ(a, b);
  // counter = offset + index: offset 10 is the same stream shifted by 10
  auto shifted = rand_values({990}, 7, 10);
  EXPECT_TRUE(std::equal(shifted.begin(), shifted.end(), a.begin() + 10));
  // a disjoint offset or another seed gives another stream
  auto other = rand_values({1000}, 7, 1000);
  auto seeded = rand_values({1000}, 8, 0);
  int same_off = 0, same_seed = 0;
  for (size_t i = 0; i < a.size(); i++) {
    same_off += a[i] == other[i];
    same_seed += a[i] == seeded[i];
  }
  EXPECT_LT(same_off, 3);
  EXPECT_LT(same_seed, 3);
}

TEST(Rand, ThroughViewsAndFusedExpressions) {
  // rand seen through a transpose: element (i, j) of the (4, 3) transpose is counter j*4 + i
  Tensor r = Tensor::rand({3, 4}, 99, 5);
  auto t = to_vec<float>(r.permute({1, 0}));
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 3; j++) EXPECT_EQ(t[size_t(i * 3 + j)], ref_rand(99, 5 + uint64_t(j * 4 + i)));
  // a fused expression of two independent draws: dropout-like mask * value
  Tensor mask = Tensor::rand({256}, 1, 0).binary(Op::CmpLt, Tensor::full({256}, Scalar::from_double(0.5), DType::Float32));
  Tensor x = Tensor::rand({256}, 2, 0);
  Tensor y = Tensor::where(mask, x, Tensor::full({256}, Scalar::from_double(0.0), DType::Float32));
  auto got = to_vec<float>(y);
  for (size_t i = 0; i < got.size(); i++) {
    float want = ref_rand(1, i) < 0.5f ? ref_rand(2, i) : 0.f;
    EXPECT_EQ(got[i], want) << i;
  }
}
