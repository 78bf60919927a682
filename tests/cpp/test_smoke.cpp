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
