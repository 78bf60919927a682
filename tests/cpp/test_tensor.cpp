// The Tensor API around the ops: creation, partial writes, host copies,
// aliases the scheduler creates (reshapes and bitcasts of stored data), and
// the errors bad calls raise.
#include <numeric>

#include "engine/runtime/device.h"

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

TEST(Tensor, FullFoldsMovementAndCasts) {
  Tensor c = Tensor::full({2, 3}, Scalar::from_double(2.5), DType::Float32);
  EXPECT_EQ(c.node()->op, Op::Const);
  EXPECT_EQ(c.reshape({3, 2}).node()->op, Op::Const);
  EXPECT_EQ(c.permute({1, 0}).node()->op, Op::Const);
  EXPECT_EQ(c.cast(DType::Int32).node()->op, Op::Const);
  EXPECT_EQ(to_vec<int32_t>(c.cast(DType::Int32)), std::vector<int32_t>(6, 2));
  EXPECT_EQ(to_vec<float>(c.unary(Op::Neg)), std::vector<float>(6, -2.5f));
  // a padded constant is not a constant: zeros around it
  Tensor p = c.pad({{1, 0}, {0, 1}});
  EXPECT_NE(p.node()->op, Op::Const);
  EXPECT_EQ(to_vec<float>(p), (std::vector<float>{0, 0, 0, 0, 2.5, 2.5, 2.5, 0, 2.5, 2.5, 2.5, 0}));
  // the value is cast to the dtype on creation
  EXPECT_EQ(to_vec<uint8_t>(Tensor::full({2}, Scalar::from_int(257), DType::UInt8)), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(to_vec<uint16_t>(Tensor::full({1}, Scalar::from_double(0.1), DType::Float16))[0], 0x2e66);
  // 0-d
  Tensor s = Tensor::full({}, Scalar::from_int(-4), DType::Int64);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(to_vec<int64_t>(s), (std::vector<int64_t>{-4}));
}

TEST(Tensor, Arange) {
  auto i = to_vec<int32_t>(Tensor::arange(5, Scalar::from_int(-3), Scalar::from_int(2), DType::Int32));
  EXPECT_EQ(i, (std::vector<int32_t>{-3, -1, 1, 3, 5}));
  auto u = to_vec<uint8_t>(Tensor::arange(4, Scalar::from_int(254), Scalar::from_int(1), DType::UInt8));
  EXPECT_EQ(u, (std::vector<uint8_t>{254, 255, 0, 1}));  // wraps like a cast of the int64 value
  // floats: start + step * i computed in double, then rounded to the dtype
  auto f = to_vec<float>(Tensor::arange(100, Scalar::from_double(0.1), Scalar::from_double(0.1), DType::Float32));
  for (int k = 0; k < 100; k++) EXPECT_EQ(f[size_t(k)], float(0.1 + 0.1 * k)) << k;
  auto d = to_vec<double>(Tensor::arange(10, Scalar::from_double(-1), Scalar::from_double(0.25), DType::Float64));
  for (int k = 0; k < 10; k++) EXPECT_EQ(d[size_t(k)], -1 + 0.25 * k);
  auto h = to_vec<uint16_t>(Tensor::arange(3, Scalar::from_double(1000.3), Scalar::from_double(1), DType::Float16));
  for (int k = 0; k < 3; k++) EXPECT_EQ(h[size_t(k)], float_to_half_bits(float(1000.3 + k)));
  // reshaped and transposed
  auto t = to_vec<int64_t>(Tensor::arange(6, Scalar::from_int(0), Scalar::from_int(1), DType::Int64).reshape({2, 3}).permute({1, 0}));
  EXPECT_EQ(t, (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, WriteStrided) {
  auto base = iota_f(12);
  Tensor b = from(base, {12});
  // a 2x2 window with strides (5, 2) at offset 1: elements 1, 3, 6, 8
  Tensor v = from(std::vector<float>{-1, -2, -3, -4}, {2, 2});
  Tensor w = b.write_strided({2, 2}, {5, 2}, 1, v);
  auto want = base;
  want[1] = -1;
  want[3] = -2;
  want[6] = -3;
  want[8] = -4;
  EXPECT_EQ(to_vec<float>(w), want);
  // the base is unchanged (values are immutable)
  EXPECT_EQ(to_vec<float>(b), base);
  // a computed value written into a computed base, then used
  Tensor b2 = b.binary(Op::Mul, Tensor::full({12}, Scalar::from_double(10), DType::Float32));
  Tensor v2 = v.permute({1, 0}).unary(Op::Neg);  // (2,2): 1, 3, 2, 4
  Tensor w2 = b2.write_strided({2, 2}, {1, 6}, 4, v2).binary(Op::Add, Tensor::full({12}, Scalar::from_double(0.5), DType::Float32));
  auto got = to_vec<float>(w2);
  std::vector<float> want2(12);
  for (int k = 0; k < 12; k++) want2[size_t(k)] = float(k) * 10 + 0.5f;
  // (i, j) -> 4 + i + 6j: (0,0)=4 (0,1)=10 (1,0)=5 (1,1)=11
  want2[4] = 1.5f;
  want2[10] = 3.5f;
  want2[5] = 2.5f;
  want2[11] = 4.5f;
  EXPECT_EQ(got, want2);
  // two writes in a row, the second overlapping the first
  Tensor w3 = b.write_strided({3}, {1}, 0, from(std::vector<float>{7, 7, 7}, {3}))
                  .write_strided({2}, {1}, 2, from(std::vector<float>{9, 9}, {2}));
  auto g3 = to_vec<float>(w3);
  EXPECT_EQ(std::vector<float>(g3.begin(), g3.begin() + 5), (std::vector<float>{7, 7, 9, 9, 4}));
  // an empty region is a no-op
  EXPECT_EQ(b.write_strided({0}, {1}, 3, Tensor::from_host(nullptr, {0}, DType::Float32)).node(), b.node());
}

TEST(Tensor, HostCopies) {
  std::vector<int32_t> x(10);
  std::iota(x.begin(), x.end(), 100);
  Tensor t = from(x, {10});
  std::vector<int32_t> part(3);
  t.copy_to_host(part.data(), 4 * sizeof(int32_t), 3 * sizeof(int32_t));
  EXPECT_EQ(part, (std::vector<int32_t>{104, 105, 106}));
  int64_t in = counters().copies_in.load(), out = counters().copies_out.load();
  Tensor u = from(x, {2, 5});
  auto v = to_vec<int32_t>(u);
  EXPECT_EQ(counters().copies_in.load(), in + 1);
  EXPECT_EQ(counters().copies_out.load(), out + 1);
  EXPECT_EQ(v, x);
  // a reshape of stored data is the same bytes: no kernel to copy it out
  EXPECT_EQ(kernels_run([&] { to_vec<int32_t>(u.reshape({5, 2})); }), 0);
}

TEST(Tensor, AliasesOfStoredData) {
  // A prefix window of a realized buffer is read through an alias.
  Tensor t = from(iota_f(10), {10});
  Tensor head = t.shrink({{0, 4}});
  EXPECT_EQ(to_vec<float>(head), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(to_vec<float>(head.binary(Op::Add, Tensor::full({4}, Scalar::from_double(1), DType::Float32))),
            (std::vector<float>{1, 2, 3, 4}));
  // the first row of a matrix, realized on its own, then used
  Tensor m = from(iota_f(12), {3, 4});
  Tensor row = m.shrink({{0, 1}, {0, 4}}).reshape({4});
  row.realize();
  EXPECT_EQ(to_vec<float>(row.reshape({2, 2}).permute({1, 0})), (std::vector<float>{0, 2, 1, 3}));
  // bitcasts between itemsizes of views and of computed values
  Tensor tt = from(iota_f(6, 1), {2, 3}).permute({1, 0}).reshape({6});  // 1 4 2 5 3 6
  auto bytes = to_vec<uint8_t>(tt.bitcast(DType::UInt8));
  std::vector<float> order = {1, 4, 2, 5, 3, 6};
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(std::memcmp(bytes.data(), order.data(), 24), 0);
  // ... and back, then computed on
  Tensor back = tt.bitcast(DType::UInt8).bitcast(DType::Float32);
  EXPECT_EQ(to_vec<float>(back.binary(Op::Mul, Tensor::full({6}, Scalar::from_double(2), DType::Float32))),
            (std::vector<float>{2, 8, 4, 10, 6, 12}));
  // a bitcast of a prefix window: only the window's bytes
  auto half_bits = to_vec<uint16_t>(head.bitcast(DType::Int16));
  ASSERT_EQ(half_bits.size(), 8u);
  std::vector<float> h4 = {0, 1, 2, 3};
  EXPECT_EQ(std::memcmp(half_bits.data(), h4.data(), 16), 0);
}

TEST(Tensor, RequestedViewsAndMultipleTargets) {
  Tensor x = from(iota_f(12), {3, 4});
  Tensor e = x.unary(Op::Neg);
  Tensor a = e.permute({1, 0}), b = e.shrink({{1, 3}, {0, 4}}), c = e;
  Tensor::realize_all({a, b, c});
  EXPECT_EQ(to_vec<float>(a), (std::vector<float>{-0.f, -4, -8, -1, -5, -9, -2, -6, -10, -3, -7, -11}));
  EXPECT_EQ(to_vec<float>(b), (std::vector<float>{-4, -5, -6, -7, -8, -9, -10, -11}));
  auto cv = to_vec<float>(c);
  for (int k = 0; k < 12; k++) EXPECT_EQ(cv[size_t(k)], -float(k));
}

TEST(Tensor, BadCallsThrow) {
  Tensor f = from(iota_f(6), {2, 3});
  Tensor i = from(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THROW(f.binary(Op::Add, from(iota_f(6), {3, 2})), std::invalid_argument);   // shapes
  EXPECT_THROW(f.binary(Op::Add, i), std::invalid_argument);                          // dtypes
  EXPECT_THROW(f.binary(Op::Exp, f), std::invalid_argument);                          // not binary
  EXPECT_THROW(f.unary(Op::Add), std::invalid_argument);                              // not unary
  EXPECT_THROW(f.unary(Op::Cast), std::invalid_argument);
  EXPECT_THROW(Tensor::where(f, f, f), std::invalid_argument);                        // cond not bool
  EXPECT_THROW(f.reshape({4, 2}), std::invalid_argument);
  EXPECT_THROW(f.permute({0}), std::invalid_argument);
  EXPECT_THROW(f.expand({4, 3}), std::invalid_argument);                              // 2 is not 1
  EXPECT_THROW(f.expand({2, 3, 1}), std::invalid_argument);                           // rank
  EXPECT_THROW(f.permute({0, 0}), std::invalid_argument);
  EXPECT_THROW(f.permute({0, 2}), std::invalid_argument);
  EXPECT_THROW(f.pad({{1, 1}}), std::invalid_argument);
  EXPECT_THROW(f.pad({{1, 1}, {-1, 0}}), std::invalid_argument);
  EXPECT_THROW(f.shrink({{0, 2}, {2, 4}}), std::invalid_argument);
  EXPECT_THROW(f.shrink({{1, 0}, {0, 3}}), std::invalid_argument);
  EXPECT_THROW(f.flip({true}), std::invalid_argument);
  EXPECT_THROW(f.as_strided({2, 2}, {1}, 0), std::invalid_argument);
  EXPECT_THROW(f.bitcast(DType::UInt8), std::invalid_argument);                       // 2-D, itemsize changes
  EXPECT_THROW(from(std::vector<uint8_t>{1, 2, 3}, {3}).bitcast(DType::Int16), std::invalid_argument);
  EXPECT_THROW(f.matmul(f), std::invalid_argument);                                   // inner dims
  EXPECT_THROW(f.write_strided({2}, {1}, 0, from(iota_f(2), {2})), std::invalid_argument);  // base not 1-D
  Tensor flat = from(iota_f(6), {6});
  EXPECT_THROW(flat.write_strided({2}, {1}, 0, from(iota_f(3), {3})), std::invalid_argument);
  EXPECT_THROW(flat.write_strided({2}, {1}, 0, from(std::vector<int32_t>{1, 2}, {2})), std::invalid_argument);
  auto buf = std::make_shared<Buffer>(cpu_device(), DType::Float32, 5);
  EXPECT_THROW(Tensor::from_buffer(buf, {2, 3}), std::invalid_argument);
}

// Sums of products over short reduces (an RNN's weight gradient: one product per time step,
// each over one step's batch) are joined into one sum over all the steps when scheduled: one
// reduce whose kernel tiles, with the same values as the products added one by one.
namespace {
std::vector<float> reference_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                    int64_t n) {
  std::vector<float> out(size_t(m * n), 0.f);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t p = 0; p < k; p++) out[size_t(i * n + j)] += a[size_t(i * k + p)] * b[size_t(p * n + j)];
  return out;
}

// The sum of `steps` short products (of mixed lengths where `mixed`, else all of 4) with
// inputs offset by `seed`, and its value computed on the host.
std::pair<Tensor, std::vector<float>> short_products(int steps, bool mixed, int64_t* total, float seed = 0.f) {
  const int64_t m = 5, n = 7;
  Tensor sum;
  std::vector<float> want(size_t(m * n), 0.f);
  *total = 0;
  for (int t = 0; t < steps; t++) {
    int64_t k = mixed ? 2 + (t * 3) % 8 : 4;
    *total += k;
    auto av = iota_f(m * k, float(t) + seed, 0.25f), bv = iota_f(k * n, float(-t), 0.5f);
    for (auto& v : av) v = std::fmod(v, 3.f) - 1.f;
    for (auto& v : bv) v = std::fmod(v, 5.f) - 2.f;
    auto r = reference_matmul(av, bv, m, k, n);
    for (size_t i = 0; i < want.size(); i++) want[i] += r[i];
    // a transposed first factor, as autograd's weight gradient reads it
    Tensor a = from(av, {m, k}).permute({1, 0}).contiguous().permute({1, 0});
    Tensor p = a.matmul(from(bv, {k, n}));
    sum = sum.defined() ? sum.binary(Op::Add, p) : p;
  }
  return {sum, want};
}

// The node the scheduler computes for `t` (sums of short products joined), seen through no view.
const Node* joined_value(const Tensor& t) {
  static GraphRewrite joined;  // (keeps the rebuilt graph alive for the caller)
  joined = join_contraction_sums({t.node()});
  const Node* n = joined.targets[0].get();
  return n->op == Op::View ? n->src[0].get() : n;
}
}  // namespace

TEST(Tensor, ShortProductsAddedAreOneReduce) {
  for (int steps : {2, 3, 16, 17, 40, 300}) {
    bool mixed = steps % 2 == 0;  // parts of mixed lengths, or all alike (stored in runs)
    int64_t total = 0;
    auto [sum, want] = short_products(steps, mixed, &total);
    // built as additions (each step's graph grows by one node per addition) ...
    EXPECT_EQ(sum.node()->op, Op::Add);
    // ... and scheduled as one reduce over every step
    const Node* n0 = joined_value(sum);
    ASSERT_EQ(n0->op, Op::Reduce) << steps;
    EXPECT_EQ(n0->src[0]->shape[size_t(n0->args.axes[0])], total) << steps;
    auto got = to_vec<float>(sum);
    for (size_t i = 0; i < want.size(); i++) EXPECT_NEAR(got[i], want[i], 1e-3f * (1 + std::fabs(want[i]))) << steps;
  }
}

// The joined graph's own buffers (runs of equal steps stored apart) are the cached schedule's
// too: the next step's sum, the same graph over other data, replays it with its values.
TEST(Tensor, JoinedProductsReplayTheirSchedule) {
  for (bool mixed : {false, true}) {
    int64_t total = 0;
    auto [first, want_first] = short_products(24, mixed, &total);
    auto [second, want_second] = short_products(24, mixed, &total, 0.5f);
    int64_t hits = counters().schedule_cache_hits, schedules = counters().schedules;
    auto got_first = to_vec<float>(first);
    auto got_second = to_vec<float>(second);
    EXPECT_EQ(counters().schedules - schedules, 1) << mixed;
    EXPECT_EQ(counters().schedule_cache_hits - hits, 1) << mixed;
    for (size_t i = 0; i < want_first.size(); i++) {
      EXPECT_NEAR(got_first[i], want_first[i], 1e-3f * (1 + std::fabs(want_first[i]))) << mixed;
      EXPECT_NEAR(got_second[i], want_second[i], 1e-3f * (1 + std::fabs(want_second[i]))) << mixed;
    }
  }
}

TEST(Tensor, ProductsThatDoNotPairStayApart) {
  Tensor a = from(iota_f(4 * 3), {4, 3}), b = from(iota_f(3 * 4), {3, 4});
  // long reduces are products of their own (each tiles already)
  Tensor big = from(iota_f(4 * 100), {4, 100}).matmul(from(iota_f(100 * 4), {100, 4}));
  Tensor s = big.binary(Op::Add, big);
  EXPECT_EQ(joined_value(s)->op, Op::Add);
  // a sum that is no product (no factor stays put along an output dim)
  Tensor rows = a.reduce(ReduceOp::Sum, {1}, true);
  Tensor s2 = rows.binary(Op::Add, rows);
  EXPECT_EQ(joined_value(s2)->op, Op::Add);
  // a product added to a short one whose factors move along other dims: a @ b + (a @ b)^T
  Tensor p = a.matmul(b);
  Tensor s3 = p.binary(Op::Add, p.permute({1, 0}));
  EXPECT_EQ(joined_value(s3)->op, Op::Add);
  auto pv = to_vec<float>(p), sv = to_vec<float>(s3);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) EXPECT_FLOAT_EQ(sv[size_t(i * 4 + j)], pv[size_t(i * 4 + j)] + pv[size_t(j * 4 + i)]);
}
