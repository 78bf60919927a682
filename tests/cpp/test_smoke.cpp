#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

TEST(Smoke, AddTwoBuffers) {
  auto a = from(iota_f(10), {10});
  auto b = from(iota_f(10, 1, 2), {10});
  auto c = a.binary(Op::Add, b);
  auto v = to_vec<float>(c);
  for (int i = 0; i < 10; i++) EXPECT_FLOAT_EQ(v[i], float(i) + 1 + 2 * i);
}

TEST(Smoke, SumRows) {
  auto a = from(iota_f(12), {3, 4});
  auto s = a.reduce(ReduceOp::Sum, {1}, false);
  auto v = to_vec<float>(s);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_FLOAT_EQ(v[0], 0 + 1 + 2 + 3);
  EXPECT_FLOAT_EQ(v[2], 8 + 9 + 10 + 11);
}

TEST(Smoke, GatherFromView) {
  auto a = from(iota_f(12), {3, 4});
  auto t = a.permute({1, 0});  // (4, 3): t[i][j] = a[j][i] = 4*j + i
  std::vector<int64_t> idx{0, 5, 11, 3};
  auto g = t.gather(from(idx, {2, 2}));
  auto v = to_vec<float>(g);
  // flat index k of t -> (k / 3, k % 3) -> a[k % 3][k / 3]
  std::vector<float> want{0, 4 * 2 + 1, 4 * 2 + 3, 1};
  EXPECT_EQ(v, want);
}

TEST(Smoke, ScatterAccumulateDuplicates) {
  auto base = from(iota_f(5), {5});
  std::vector<int64_t> idx{1, 1, 4};
  auto src = from(std::vector<float>{10, 20, 30}, {3});
  auto r = base.scatter(from(idx, {3}), src, true);
  EXPECT_EQ(to_vec<float>(r), (std::vector<float>{0, 31, 2, 3, 34}));
  auto r2 = base.scatter(from(idx, {3}), src, false);
  auto v2 = to_vec<float>(r2);
  EXPECT_EQ(v2[4], 30);
  EXPECT_TRUE(v2[1] == 10 || v2[1] == 20);
}

// Two scatters that differ only in the size of the tensor written into: the
// size bounds the index in the generated code, so they must not share a program
// (they did, and the larger one dropped its indices past the smaller size).
TEST(Smoke, ScatterProgramsKeyedByTargetSize) {
  std::vector<int64_t> idx{0, 1, 1};
  auto src = from(std::vector<float>{1, 2, 3}, {3});
  auto small = from(iota_f(3), {3}).scatter(from(idx, {3}), src, true);
  EXPECT_EQ(to_vec<float>(small), (std::vector<float>{1, 6, 2}));
  std::vector<int64_t> far{6, 4, 2};
  auto large = from(iota_f(9), {9}).scatter(from(far, {3}), src, true);
  EXPECT_EQ(to_vec<float>(large), (std::vector<float>{0, 1, 5, 3, 6, 5, 7, 7, 8}));
}
