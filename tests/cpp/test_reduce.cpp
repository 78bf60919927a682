// Reductions: every op over every axis subset, keepdim or not, int and float,
// identities over empty axes, NaN propagation, large sums, matmul.
#include <algorithm>
#include <map>
#include <mutex>
#include <random>

#include "engine/codegen/llvm_codegen.h"
#include "engine/codegen/program_cache.h"
#include "engine/runtime/llvm_jit.h"
#include "engine/schedule/scheduler.h"
#include "engine/runtime/thread_pool.h"
#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

// The vector FMA of a register tile on this machine's vector unit (16 lanes
// with AVX-512, 8 with AVX2).
std::string vector_fma() {
  return "llvm.fmuladd.v" + std::to_string(LLVMJit::get().vector_unit().lanes) + "f32";
}

const std::vector<ReduceOp> kAllReduce = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max,
                                          ReduceOp::Min, ReduceOp::Any,  ReduceOp::All};

// Reference reduction in double (ints: exact in int64 with wraparound applied by the caller).
struct RefReduce {
  Shape out_keep;  // reduced axes as size 1
  std::vector<double> values;
};

double identity(ReduceOp op, DType dt) {
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Any: case ReduceOp::Xor: return 0;
    case ReduceOp::Prod: case ReduceOp::All: return 1;
    case ReduceOp::Max:
      if (dt == DType::Bool) return 0;
      if (is_float(dt)) return -INFINITY;
      if (!is_signed(dt)) return 0;
      return dt == DType::Int64 ? -9223372036854775808.0 : -std::ldexp(1.0, int(itemsize(dt) * 8 - 1));
    case ReduceOp::Min:
      if (dt == DType::Bool) return 1;
      if (is_float(dt)) return INFINITY;
      return dt == DType::Int64 ? 9223372036854775807.0
                                : std::ldexp(1.0, int(itemsize(dt) * 8 - (is_signed(dt) ? 1 : 0))) - 1;
  }
  return 0;
}

double combine(ReduceOp op, double acc, double v) {
  switch (op) {
    case ReduceOp::Sum: return acc + v;
    case ReduceOp::Prod: return acc * v;
    case ReduceOp::Max: return (std::isnan(acc) || std::isnan(v)) ? NAN : std::max(acc, v);
    case ReduceOp::Min: return (std::isnan(acc) || std::isnan(v)) ? NAN : std::min(acc, v);
    case ReduceOp::Any: return double(acc != 0 || v != 0);
    case ReduceOp::All: return double(acc != 0 && v != 0);
    case ReduceOp::Xor: return double(int64_t(acc) ^ int64_t(v));  // small integers only
  }
  return 0;
}

// Integers reduce exactly: sums and products modulo 2^64 (then wrapped to
// the dtype), max/min on int64; floats in double.
RefReduce ref_reduce(const std::vector<double>& x, const Shape& shape, ReduceOp op, const std::vector<int>& axes,
                     DType dt) {
  RefReduce r;
  r.out_keep = shape;
  for (int a : axes) r.out_keep[size_t(a)] = 1;
  size_t n_out = size_t(numel(r.out_keep));
  r.values.assign(n_out, identity(op, dt));
  bool exact_int = is_int(dt) && (op == ReduceOp::Sum || op == ReduceOp::Prod);
  std::vector<uint64_t> acc(n_out, op == ReduceOp::Prod ? 1 : 0);
  size_t k = 0;
  for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); d++) o = o * r.out_keep[d] + (r.out_keep[d] == 1 ? 0 : idx[d]);
    double v = x[k++];
    if (exact_int) {
      uint64_t u = uint64_t(int64_t(v));
      acc[size_t(o)] = op == ReduceOp::Sum ? acc[size_t(o)] + u : acc[size_t(o)] * u;
    } else {
      r.values[size_t(o)] = combine(op, r.values[size_t(o)], v);
    }
  });
  if (exact_int) {
    for (size_t i = 0; i < n_out; i++) {
      std::vector<uint8_t> b(8);
      std::memcpy(b.data(), &acc[i], 8);  // little endian: the low bytes are the wrapped value
      r.values[i] = load_as_double(b.data(), dt, 0);
    }
  }
  return r;
}

std::vector<std::vector<int>> axis_subsets(int ndim) {
  std::vector<std::vector<int>> out;
  for (int m = 0; m < (1 << ndim); m++) {
    std::vector<int> a;
    for (int d = 0; d < ndim; d++)
      if (m >> d & 1) a.push_back(d);
    out.push_back(a);
  }
  return out;
}

std::string axes_str(const std::vector<int>& a) {
  std::string s = "(";
  for (int x : a) s += std::to_string(x) + ",";
  return s + ")";
}

void check_all_reductions(const std::vector<double>& x, const Shape& shape, DType dt, double rel_tol) {
  Tensor t = from_doubles(x, shape, dt);
  std::vector<double> xr = to_doubles(t);  // the values as stored in dt
  struct Job { ReduceOp op; std::vector<int> axes; bool keep; Tensor out; };
  std::vector<Job> jobs;
  std::vector<Tensor> outs;
  for (ReduceOp op : kAllReduce)
    for (auto& axes : axis_subsets(int(shape.size())))
      for (bool keep : {true, false}) {
        jobs.push_back({op, axes, keep, t.reduce(op, axes, keep)});
        outs.push_back(jobs.back().out);
      }
  Tensor::realize_all(outs);
  for (auto& j : jobs) {
    RefReduce ref = ref_reduce(xr, shape, j.op, j.axes, dt);
    std::string what = std::string(reduce_name(j.op)) + "<" + dtype_name(dt) + ">" + shape_str(shape) + " axes" +
                       axes_str(j.axes) + (j.keep ? " keepdim" : "");
    Shape want_shape = ref.out_keep;
    if (!j.keep) {
      want_shape.clear();
      for (size_t d = 0; d < shape.size(); d++)
        if (std::find(j.axes.begin(), j.axes.end(), int(d)) == j.axes.end()) want_shape.push_back(shape[d]);
    }
    ASSERT_EQ(j.out.shape(), want_shape) << what;
    DType want_dt = (j.op == ReduceOp::Any || j.op == ReduceOp::All) ? DType::Bool : dt;
    ASSERT_EQ(j.out.dtype(), want_dt) << what;
    auto got = to_doubles(j.out);
    int bad = 0;
    for (size_t k = 0; k < got.size(); k++) {
      double want = ref.values[k];
      if (want_dt == dt && is_float(dt)) {
        // round the exact result to the dtype before comparing
        std::vector<uint8_t> b(8);
        store_double(b.data(), dt, 0, want);
        want = load_as_double(b.data(), dt, 0);
      }
      if (dt == DType::Bool) want = double(want != 0);  // bool sum is any, bool prod is all
      bool ok = same_value(got[k], want) ||
                (rel_tol > 0 && std::isfinite(want) && std::fabs(got[k] - want) <= rel_tol * (1 + std::fabs(want)));
      if (!ok && bad++ < 3) ADD_FAILURE() << what << " [" << k << "] = " << got[k] << ", want " << want;
    }
  }
}

}  // namespace

TEST(Reduce, EveryOpEveryAxisFloat32) {
  std::vector<double> x;
  for (int i = 0; i < 24; i++) x.push_back(double((i * 7) % 11) - 4.5);  // exact sums; products stay small
  check_all_reductions(x, {2, 3, 4}, DType::Float32, 1e-6);
}

TEST(Reduce, EveryOpEveryAxisFloat64) {
  std::vector<double> x;
  for (int i = 0; i < 30; i++) x.push_back(std::sin(double(i)) * 3);
  check_all_reductions(x, {5, 1, 6}, DType::Float64, 1e-12);
}

TEST(Reduce, EveryOpEveryAxisInts) {
  std::vector<double> x;
  for (int i = 0; i < 24; i++) x.push_back(double((i * 5) % 9) - 3);
  check_all_reductions(x, {3, 2, 4}, DType::Int32, 0);
  check_all_reductions(x, {4, 6}, DType::Int64, 0);
  std::vector<double> u;
  for (int i = 0; i < 24; i++) u.push_back(double((i * 37) % 256));
  check_all_reductions(u, {2, 12}, DType::UInt8, 0);  // sums and products wrap
  std::vector<double> s;
  for (int i = 0; i < 24; i++) s.push_back(double((i * 37) % 256) - 128);
  check_all_reductions(s, {6, 4}, DType::Int8, 0);
}

TEST(Reduce, EveryOpEveryAxisBoolAndHalf) {
  std::vector<double> b;
  for (int i = 0; i < 12; i++) b.push_back(double((i % 5) != 0));
  check_all_reductions(b, {3, 4}, DType::Bool, 0);
  std::vector<double> h;
  for (int i = 0; i < 12; i++) h.push_back(double(i % 4) * 0.5 - 0.75);
  check_all_reductions(h, {4, 3}, DType::Float16, 0);
  check_all_reductions(h, {2, 6}, DType::BFloat16, 0);
}

TEST(Reduce, NegativeAndDuplicateAxes) {
  Tensor t = from(iota_f(24), {2, 3, 4});
  auto a = to_vec<float>(t.reduce(ReduceOp::Sum, {-1, 0, -3}, false));
  auto b = to_vec<float>(t.reduce(ReduceOp::Sum, {0, 2}, false));
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], 0 + 1 + 2 + 3 + 12 + 13 + 14 + 15);
  EXPECT_THROW(t.reduce(ReduceOp::Sum, {3}, false), std::invalid_argument);
  EXPECT_THROW(t.reduce(ReduceOp::Sum, {-4}, false), std::invalid_argument);
}

TEST(Reduce, EmptyAxesIsIdentity) {
  Tensor t = from(iota_f(6), {2, 3});
  Tensor r = t.reduce(ReduceOp::Sum, {}, false);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.node(), t.node());  // no reduce node at all
  EXPECT_EQ(to_vec<float>(t.reduce(ReduceOp::Max, {}, true)), iota_f(6));
  // reducing only size-1 axes: identity too
  Tensor u = from(iota_f(6), {2, 1, 3});
  EXPECT_EQ(u.reduce(ReduceOp::Prod, {1}, true).node(), u.node());
  EXPECT_EQ(to_vec<float>(u.reduce(ReduceOp::Prod, {1}, false)), iota_f(6));
  // ... but any/all of floats still yields bool
  auto any = to_vec<uint8_t>(u.reduce(ReduceOp::Any, {1}, false));
  EXPECT_EQ(any, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
}

TEST(Reduce, SizeZeroDimsGiveIdentities) {
  for (DType dt : {DType::Float32, DType::Int32, DType::Int64, DType::UInt8, DType::Bool, DType::Float16}) {
    Tensor e = Tensor::from_host(nullptr, {0, 3}, dt);
    for (ReduceOp op : kAllReduce) {
      std::string what = std::string(reduce_name(op)) + "<" + dtype_name(dt) + ">";
      Tensor r = e.reduce(op, {0}, false);
      ASSERT_EQ(r.shape(), (Shape{3})) << what;
      auto got = to_doubles(r);
      DType out = (op == ReduceOp::Any || op == ReduceOp::All) ? DType::Bool : dt;
      double want = identity(op, out == DType::Bool ? DType::Bool : dt);
      for (double g : got) EXPECT_TRUE(same_value(g, want)) << what << ": " << g << " want " << want;
      // all axes, keepdim
      auto all = to_doubles(e.reduce(op, {0, 1}, true));
      ASSERT_EQ(all.size(), 1u);
      EXPECT_TRUE(same_value(all[0], want)) << what << " over all axes: " << all[0];
      // reducing the non-empty axis leaves an empty result
      EXPECT_EQ(e.reduce(op, {1}, true).shape(), (Shape{0, 1}));
      EXPECT_TRUE(to_doubles(e.reduce(op, {1}, false)).empty());
    }
  }
  // an empty axis next to a non-empty reduced one, through a view
  Tensor v = from(iota_f(6), {2, 3}).shrink({{0, 2}, {1, 1}});  // (2, 0)
  EXPECT_EQ(to_vec<float>(v.reduce(ReduceOp::Sum, {1}, false)), (std::vector<float>{0, 0}));
  EXPECT_EQ(to_vec<float>(v.reduce(ReduceOp::Prod, {0, 1}, false)), (std::vector<float>{1}));
}

TEST(Reduce, NaNPropagatesInMaxMin) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {1, nan, 3, -1, 2, 5, nan, nan, nan, 0, -INFINITY, INFINITY};
  Tensor t = from(x, {4, 3});
  auto mx = to_vec<float>(t.reduce(ReduceOp::Max, {1}, false));
  auto mn = to_vec<float>(t.reduce(ReduceOp::Min, {1}, false));
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_EQ(mx[1], 5);
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(mx[3], INFINITY);
  EXPECT_TRUE(std::isnan(mn[0]));
  EXPECT_EQ(mn[1], -1);
  EXPECT_TRUE(std::isnan(mn[2]));
  EXPECT_EQ(mn[3], -INFINITY);
  // the NaN in the first or the last position, long rows (vectorized)
  std::vector<float> row(1000, 1.f);
  row[0] = nan;
  EXPECT_TRUE(std::isnan(to_vec<float>(from(row, {1000}).reduce(ReduceOp::Max, {0}, false))[0]));
  row[0] = 1.f;
  row[999] = nan;
  EXPECT_TRUE(std::isnan(to_vec<float>(from(row, {1000}).reduce(ReduceOp::Min, {0}, false))[0]));
  // sums see NaN too; any/all treat NaN as true
  EXPECT_TRUE(std::isnan(to_vec<float>(t.reduce(ReduceOp::Sum, {0, 1}, false))[0]));
  std::vector<float> z = {0, nan};
  EXPECT_EQ(to_vec<uint8_t>(from(z, {2}).reduce(ReduceOp::Any, {0}, false))[0], 1);
  EXPECT_EQ(to_vec<uint8_t>(from(z, {2}).reduce(ReduceOp::All, {0}, false))[0], 0);
}

// Float max and min rows run as maxnum / minnum (vectorized) beside ors of NaN and of the
// winning zero: NaN anywhere gives NaN, and a zero result takes IEEE's sign (+0 for a max of
// -0 and +0, -0 for a min) wherever the zeros stand.
TEST(Reduce, MaxAndMinRowsVectorizeWithIEEESemantics) {
  const int64_t W = 67;  // a vector remainder
  std::vector<float> x(size_t(6 * W), -3.f);
  for (int64_t i = 0; i < W; i++) x[size_t(i)] = float(i % 7) - 3.f;  // row 0: plain, max 3, min -3
  x[size_t(W + 66)] = std::numeric_limits<float>::quiet_NaN();      // row 1: NaN last
  for (int64_t i = 0; i < W; i++) x[size_t(2 * W + i)] = i % 2 ? -0.f : 0.f;  // row 2: mixed zeros
  for (int64_t i = 0; i < W; i++) x[size_t(3 * W + i)] = -0.f;                // row 3: only -0
  for (int64_t i = 0; i < W; i++) x[size_t(4 * W + i)] = 0.f;                 // row 4: only +0
  for (int64_t i = 0; i < W; i++) x[size_t(5 * W + i)] = -INFINITY;           // row 5
  Tensor t = from(x, {6, W});
  Kernel k = create_schedule({t.reduce(ReduceOp::Max, {1}, false).node()}).kernels.back();
  EXPECT_NE(llvm_ir(k).find("llvm.maxnum"), std::string::npos);
  auto mx = to_vec<float>(t.reduce(ReduceOp::Max, {1}, false));
  auto mn = to_vec<float>(t.reduce(ReduceOp::Min, {1}, false));
  EXPECT_EQ(mx[0], 3.f);
  EXPECT_EQ(mn[0], -3.f);
  EXPECT_TRUE(std::isnan(mx[1]) && std::isnan(mn[1]));
  EXPECT_TRUE(mx[2] == 0.f && !std::signbit(mx[2]));
  EXPECT_TRUE(mn[2] == 0.f && std::signbit(mn[2]));
  EXPECT_TRUE(std::signbit(mx[3]) && std::signbit(mn[3]));
  EXPECT_TRUE(!std::signbit(mx[4]) && !std::signbit(mn[4]));
  EXPECT_EQ(mx[5], -INFINITY);
  EXPECT_EQ(mn[5], -INFINITY);
}

TEST(Reduce, XorOfIntegerBits) {
  std::mt19937_64 rng(3);
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), (int64_t(1) << 17) + 5}) {
    std::vector<int64_t> x(size_t(n * 3));
    for (auto& v : x) v = int64_t(rng());
    Tensor t = Tensor::from_host(x.data(), {n, 3}, DType::Int64);
    std::vector<int64_t> rows(size_t(n), 0), cols(3, 0);
    int64_t all = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < 3; j++) {
        int64_t v = x[size_t(i * 3 + j)];
        rows[size_t(i)] ^= v;
        cols[size_t(j)] ^= v;
        all ^= v;
      }
    EXPECT_EQ(to_vec<int64_t>(t.reduce(ReduceOp::Xor, {1}, false)), rows) << n;
    EXPECT_EQ(to_vec<int64_t>(t.reduce(ReduceOp::Xor, {0}, false)), cols) << n;
    // a full reduction (split across threads for the large case)
    EXPECT_EQ(to_vec<int64_t>(t.reduce(ReduceOp::Xor, {0, 1}, false))[0], all) << n;
  }
  std::vector<uint8_t> b = {1, 0, 1, 1, 0, 1};
  Tensor tb = Tensor::from_host(b.data(), {2, 3}, DType::Bool);
  EXPECT_EQ(to_vec<uint8_t>(tb.reduce(ReduceOp::Xor, {1}, false)), (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(to_vec<uint8_t>(tb.reduce(ReduceOp::Xor, {0}, false)), (std::vector<uint8_t>{0, 0, 0}));
  std::vector<int32_t> i32 = {5, 3, -1};
  EXPECT_EQ(to_vec<int32_t>(Tensor::from_host(i32.data(), {3}, DType::Int32).reduce(ReduceOp::Xor, {0}, false))[0],
            5 ^ 3 ^ -1);
  EXPECT_ANY_THROW(from(iota_f(6), {6}).reduce(ReduceOp::Xor, {0}, false));
}

TEST(Reduce, LargeSums) {
  const int64_t n = (1 << 20) + 7;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  double exact = 0;
  for (auto& v : x) {
    v = u(rng);
    exact += v;
  }
  float got = to_vec<float>(from(x, {n}).reduce(ReduceOp::Sum, {0}, false))[0];
  EXPECT_NEAR(got, exact, exact * 1e-5);
  // the same data as a (1025, 1023) matrix-ish shape reduced over rows and columns
  std::vector<float> m(x.begin(), x.begin() + 1024 * 1024);
  Tensor t = from(m, {1024, 1024});
  auto cols = to_vec<float>(t.reduce(ReduceOp::Sum, {0}, false));
  auto rows = to_vec<float>(t.reduce(ReduceOp::Sum, {1}, false));
  auto rows_t = to_vec<float>(t.permute({1, 0}).reduce(ReduceOp::Sum, {0}, false));  // strided reads
  for (int j = 0; j < 1024; j += 97) {
    double c = 0, r = 0;
    for (int i = 0; i < 1024; i++) {
      c += m[size_t(i) * 1024 + size_t(j)];
      r += m[size_t(j) * 1024 + size_t(i)];
    }
    EXPECT_NEAR(cols[size_t(j)], c, 1e-3) << j;
    EXPECT_NEAR(rows[size_t(j)], r, 1e-3) << j;
    EXPECT_NEAR(rows_t[size_t(j)], r, 1e-3) << j;
  }
  // int64 sums are exact
  std::vector<int64_t> big(static_cast<size_t>(n));
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    big[size_t(i)] = (i * 2654435761LL) % 1000003 - 500000;
    total += big[size_t(i)];
  }
  EXPECT_EQ(to_vec<int64_t>(from(big, {n}).reduce(ReduceOp::Sum, {0}, false))[0], total);
  // max over 2^20 elements finds the one large value
  x[777777] = 5.f;
  EXPECT_EQ(to_vec<float>(from(x, {n}).reduce(ReduceOp::Max, {0}, false))[0], 5.f);
}

TEST(Reduce, Matmul) {
  auto check = [](int64_t b, int64_t n, int64_t k, int64_t m) {
    std::vector<float> x(size_t(b * n * k)), y(size_t(b * k * m));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i % 7) - 3);
    for (size_t i = 0; i < y.size(); i++) y[i] = float(int(i % 5) - 2) * 0.5f;
    Shape xs{n, k}, ys{k, m};
    if (b > 1) {
      xs.insert(xs.begin(), b);
      ys.insert(ys.begin(), b);
    }
    Tensor r = from(x, xs).matmul(from(y, ys));
    Shape want_shape{n, m};
    if (b > 1) want_shape.insert(want_shape.begin(), b);
    ASSERT_EQ(r.shape(), want_shape);
    auto got = to_vec<float>(r);
    for (int64_t bb = 0; bb < b; bb++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
          float acc = 0;
          for (int64_t q = 0; q < k; q++) acc += x[size_t((bb * n + i) * k + q)] * y[size_t((bb * k + q) * m + j)];
          EXPECT_EQ(got[size_t((bb * n + i) * m + j)], acc) << b << "x" << n << "x" << k << "x" << m;
        }
  };
  check(1, 3, 4, 5);
  check(1, 1, 7, 1);
  check(2, 5, 3, 4);
  check(1, 17, 33, 9);
  // integer matmul
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  EXPECT_EQ(to_vec<int32_t>(from(a, {2, 3}).matmul(from(b, {3, 2}))), (std::vector<int32_t>{58, 64, 139, 154}));
  EXPECT_THROW(from(a, {2, 3}).matmul(from(b, {2, 3})), std::invalid_argument);
}

// a (m, k) @ b (k, n) with the output's last dim as the vector dim (rows:
// the parallel dim's slice; b packed into zero-padded panels, or read in
// place for bmm), odd sizes, operands stored transposed, a non-float32 dtype.
TEST(Reduce, MatmulRowTiled) {
  auto check = [](int64_t bt, int64_t m, int64_t k, int64_t n, bool ta, bool tb, DType dt) {
    std::vector<float> x(size_t(bt * m * k)), y(size_t(bt * k * n));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < y.size(); i++) y[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    // ta: a stored (k, m) and viewed transposed; tb: b stored (n, k)
    auto operand = [&](const std::vector<float>& v, int64_t r, int64_t c, bool t) {
      std::vector<float> s(v.size());
      for (int64_t q = 0; q < bt; q++)
        for (int64_t i = 0; i < r; i++)
          for (int64_t j = 0; j < c; j++)
            s[size_t(q * r * c + (t ? j * r + i : i * c + j))] = v[size_t(q * r * c + i * c + j)];
      Tensor o = from(s, t ? Shape{bt, c, r} : Shape{bt, r, c});
      if (t) o = o.permute({0, 2, 1});
      if (bt == 1) o = o.reshape({r, c});
      return dt == DType::Float32 ? o : o.cast(dt);
    };
    Tensor r = operand(x, m, k, ta).matmul(operand(y, k, n, tb));
    if (dt == DType::Float32 && m >= 28 && n >= 8 && k >= 32) {
      Schedule sched = create_schedule({r.node()});
      ASSERT_EQ(sched.kernels.size(), 1u);
      EXPECT_NE(llvm_ir(sched.kernels[0]).find(vector_fma()), std::string::npos)
          << "tiling not used: " << bt << "x" << m << "x" << k << "x" << n << " ta " << ta << " tb " << tb;
    }
    std::vector<double> got = to_doubles(r);
    for (int64_t q = 0; q < bt; q++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double acc = 0;
          for (int64_t p = 0; p < k; p++) acc += double(x[size_t((q * m + i) * k + p)]) * y[size_t((q * k + p) * n + j)];
          ASSERT_NEAR(got[size_t((q * m + i) * n + j)], acc, 1e-3)
              << bt << "x" << m << "x" << k << "x" << n << " ta " << ta << " tb " << tb << " " << dtype_name(dt);
        }
  };
  const int64_t sizes[] = {1, 7, 33, 129};
  for (int64_t m : sizes)
    for (int64_t k : sizes)
      for (int64_t n : sizes) check(1, m, k, n, false, false, DType::Float32);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check(1, 129, 33, 129, ta, tb, DType::Float32);
      check(1, 64, 40, 10, ta, tb, DType::Float32);  // one partial tile
      check(3, 33, 65, 48, ta, tb, DType::Float32);   // bmm: b in place unless transposed
      check(1, 33, 33, 40, ta, tb, DType::Float64);
      check(1, 40, 33, 200, ta, tb, DType::Float32);  // the threads split the columns
    }
  // With 2 panels per thread or more the threads split b's columns, each packing its own
  // (a 1024^3 matmul: 155 -> 172 GFLOP/s on 2 AVX2 cores); fewer stay split by rows.
  std::vector<float> x(40 * 33, 0.5f), y(33 * 256, 0.25f);
  Tensor wide = from(x, {40, 33}).matmul(from(y, {33, 256}));
  Tensor narrow = from(x, {40, 33}).matmul(from(std::vector<float>(33 * 40, 0.25f), {33, 40}));
  if (thread_pool().size() <= 4) {
    auto p = cpu_program(create_schedule({wide.node()}).kernels[0]);
    EXPECT_EQ(p->parallel_size, 256);
    EXPECT_GT(p->parallel_grain, 1);  // each thread's columns start at a whole tile
  }
  // ... so that only the slice ending at the last column has a partial tile (a whole one
  // zero-padded, not the columns one at a time: 1040^3 ran at half the speed of 1024^3)
  std::vector<std::pair<int64_t, int64_t>> slices;
  std::mutex mu;
  ThreadPool pool(3);
  pool.parallel_for(200, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> g(mu);
    slices.emplace_back(b, e);
  }, 32);
  std::sort(slices.begin(), slices.end());
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0], std::make_pair(int64_t(0), int64_t(96)));
  EXPECT_EQ(slices[1], std::make_pair(int64_t(96), int64_t(192)));
  EXPECT_EQ(slices[2], std::make_pair(int64_t(192), int64_t(200)));
  EXPECT_EQ(cpu_program(create_schedule({narrow.node()}).kernels[0])->parallel_size, 40);
  // Split by columns, a slice packs only its own panels: the columns are cut finer than one
  // slice per thread, the threads taking them as they finish (a thread stalled by the VM's
  // host no longer holds the others up). Split by rows, each slice would pack all panels.
  if (thread_pool().size() <= 4) EXPECT_TRUE(cpu_program(create_schedule({wide.node()}).kernels[0])->fine_slices);
  // ... but not where each slice packs the computed row operand (pack_a) for all rows: a
  // LayerNorm feeding a linear layer would be evaluated per slice, 4 times per thread.
  std::vector<float> rv(40 * 33);
  for (size_t i = 0; i < rv.size(); i++) rv[i] = float(i * 7 % 11);
  Tensor rows = from(rv, {40, 33});
  Tensor centered = rows.binary(Op::Sub, rows.reduce(ReduceOp::Sum, {1}, true)
                                             .binary(Op::Mul, Tensor::full({40, 1}, Scalar::from_double(0.25), DType::Float32))
                                             .expand({40, 33}));
  Tensor normalized = centered.matmul(from(y, {33, 256}));
  auto packs_rows = cpu_program(create_schedule({normalized.node()}).kernels[0]);
  EXPECT_FALSE(packs_rows->fine_slices);
  std::vector<float> got = to_vec<float>(normalized);
  for (int64_t i = 0; i < 40; i++) {
    double sum = 0, want = 0;
    for (int64_t p = 0; p < 33; p++) sum += rv[size_t(i * 33 + p)];
    for (int64_t p = 0; p < 33; p++) want += (rv[size_t(i * 33 + p)] - sum * 0.25) * 0.25;
    for (int64_t j = 0; j < 256; j++) ASSERT_NEAR(got[size_t(i * 256 + j)], want, 1e-3) << i << ", " << j;
  }
  auto by_rows = cpu_program(create_schedule({narrow.node()}).kernels[0]);  // (by columns on SSE: 5 panels)
  if (by_rows->parallel_grain == 1) EXPECT_FALSE(by_rows->fine_slices);
  slices.clear();
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> g(mu);
    slices.emplace_back(b, e);
  }, 32, 4);
  std::sort(slices.begin(), slices.end());
  ASSERT_EQ(slices.size(), 11u);  // up to 3 threads x 4 slices of 1000 / 12, rounded up to grains: 96
  for (size_t i = 0; i < slices.size(); i++) {
    EXPECT_EQ(slices[i].first, int64_t(i) * 96);
    EXPECT_EQ(slices[i].second, std::min<int64_t>(1000, int64_t(i + 1) * 96));
  }
}

// out[n, o, h, w] = relu(sum_k x[n, k, h, w] * wt[o, k] + 1): the output
// channels o are a column dim the code generator tiles with the weight packed
// into panels (output-channel tiling); leftover channels and rows, an
// epilogue, several tiles. Rows shorter than a tile continue into h (and into the images
// where an image has fewer than 8); with few
// rows per channel the threads split the channels (`split`: 1 whatever the
// vector unit, 0 never, -1 depending on it), each slice with its own leftover
// channels.
TEST(Reduce, ChannelTiledProduct) {
  auto check = [](int64_t n, int64_t oc, int64_t k, int64_t h, int64_t w, int split) {
    std::vector<float> x(size_t(n * k * h * w)), wt(size_t(oc * k));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < wt.size(); i++) wt[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    Shape full{n, oc, k, h, w};
    Tensor xv = from(x, {n, 1, k, h, w}).expand(full);
    Tensor wv = from(wt, {1, oc, k, 1, 1}).expand(full);
    Tensor s = xv.binary(Op::Mul, wv).reduce(ReduceOp::Sum, {2}, false);
    Tensor r = s.binary(Op::Add, Tensor::full(s.shape(), Scalar::from_double(1.0), DType::Float32));
    r = r.binary(Op::Max, Tensor::full(s.shape(), Scalar::from_double(0.0), DType::Float32));
    Schedule sched = create_schedule({r.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    EXPECT_NE(llvm_ir(sched.kernels[0]).find("@tiny_scratch_alloc"), std::string::npos) << "channel tiling not used: " << n << "x" << oc << "x" << k << "x" << h << "x" << w;
    if (split >= 0) {
      EXPECT_EQ(cpu_program(sched.kernels[0])->parallel_size, split || n == 1 ? oc : n)
          << n << "x" << oc << "x" << k << "x" << h << "x" << w;
    }
    auto got = to_vec<float>(r);
    for (int64_t a = 0; a < n; a++)
      for (int64_t o = 0; o < oc; o++)
        for (int64_t p = 0; p < h * w; p++) {
          double acc = 1;
          for (int64_t q = 0; q < k; q++) acc += double(x[size_t((a * k + q) * h * w + p)]) * wt[size_t(o * k + q)];
          EXPECT_NEAR(got[size_t((a * oc + o) * h * w + p)], std::max(acc, 0.0), 1e-4) << oc << "x" << k << "x" << h << "x" << w;
        }
  };
  check(2, 70, 40, 3, 7, -1);  // whole tiles + leftover channels, rows in tiles (+ leftovers)
  check(8, 64, 33, 2, 7, 0);
  check(1, 32, 64, 1, 28, 0);   // a row dim without mid dims
  check(2, 40, 33, 5, 3, -1);   // rows over (h, w): 15, blocks of 4 (or 14) and the rest
  check(3, 136, 40, 3, 2, 1);   // few rows per channel: threads split the channels
  check(2, 131, 40, 2, 2, 1);   // ... not a multiple of a tile
  // fewer than 8 rows per image: the rows run over the images too (n, h, w)
  check(5, 136, 40, 2, 2, 1);   // all of them in every thread (the threads split the channels)
  check(6, 48, 40, 2, 2, -1);   // each thread's slice of the images (SSE: of the channels)
  check(7, 40, 33, 1, 3, -1);   // 21 rows: whole tiles and a partial one
}

// A linear layer's weight gradient with its forward's ReLU recomputed in it and an SGD
// update after it: w - lr * sum_n g[n, o] * relu(h[n, i] + bias[i]). The ReLU side is no
// view of one stored operand but depends on the channels i and the reduce n alone, so the
// channel tile packs it, computed once per (i, n) (it ran 5x slower as a register tile,
// computed per tile row), and the tile's outputs run through one epilogue loop (no value
// extracted per output: the unrolled epilogues took most of a small MLP's compile time).
// Exact sums; partial tiles (40 and 70 channels), rows not a multiple of a tile.
TEST(Reduce, ChannelTiledComputedOperand) {
  auto check = [](int64_t n, int64_t o, int64_t in) {
    std::vector<float> g(size_t(n * o)), h(size_t(n * in)), w(size_t(o * in)), bias(static_cast<size_t>(in));
    for (size_t q = 0; q < g.size(); q++) g[q] = float(int(q * 7 % 13) - 6) * 0.25f;
    for (size_t q = 0; q < h.size(); q++) h[q] = float(int(q * 5 % 11) - 5) * 0.5f;
    for (size_t q = 0; q < bias.size(); q++) bias[q] = float(int(q % 3) - 1) * 0.5f;
    for (size_t q = 0; q < w.size(); q++) w[q] = float(q % 17) * 0.125f;
    Shape full{o, in, n};
    Tensor a = from(g, {n, o}).permute({1, 0}).reshape({o, 1, n}).expand(full);
    Tensor act = from(h, {n, in}).binary(Op::Add, from(bias, {1, in}).expand({n, in}));
    act = act.binary(Op::Max, Tensor::full({n, in}, Scalar::from_double(0.0), DType::Float32));
    Tensor b = act.permute({1, 0}).reshape({1, in, n}).expand(full);
    Tensor grad = a.binary(Op::Mul, b).reduce(ReduceOp::Sum, {2}, false);
    Tensor lr = Tensor::full({o, in}, Scalar::from_double(-0.5), DType::Float32);
    Tensor updated = from(w, {o, in}).binary(Op::Add, grad.binary(Op::Mul, lr));
    Schedule sched = create_schedule({updated.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    std::string ir = llvm_ir(sched.kernels[0]);
    EXPECT_NE(ir.find("@tiny_scratch_alloc"), std::string::npos) << "channel tiling not used: " << o << "x" << in << "x" << n;
    EXPECT_NE(ir.find(vector_fma()), std::string::npos);
    EXPECT_EQ(ir.find("extractelement"), std::string::npos) << "epilogue unrolled per output";
    auto got = to_vec<float>(updated);
    for (int64_t p = 0; p < o; p++)
      for (int64_t i = 0; i < in; i++) {
        double acc = 0;
        for (int64_t q = 0; q < n; q++)
          acc += double(g[size_t(q * o + p)]) * std::max(0.0, double(h[size_t(q * in + i)]) + bias[size_t(i)]);
        ASSERT_EQ(got[size_t(p * in + i)], float(w[size_t(p * in + i)] - 0.5 * acc)) << p << " " << i;
      }
  };
  check(64, 64, 64);
  check(33, 30, 40);
  check(40, 17, 70);
}

// gw[c, a, b, o] = sum_{n, y, x} x[n, c, y + a, x + b] * g[n, y, x, o]: a k x k weight
// gradient, g channels-last read in place. A 5x5 kernel's 5 rows (b) are no whole number of
// tiles, so the rows run over (a, b): 25 of them, whole tiles and one row; a 3x3 kernel's 9
// rows (3 tiles of 3, latency-bound) run over (c, a, b) where that makes whole tiles, each
// thread taking its slice of c. 40 output channels leave 8 past the tiles. Exact sums.
TEST(Reduce, ChannelTiledWeightGradientRowsOverTwoDims) {
  // permuted: requested in the weight's layout (oc, c, k, k), as autograd keeps it: the
  // tiles' rows are consecutive there, each channel's stored as one masked vector
  auto check = [](int64_t c, int64_t k, bool permuted = false) {
    const int64_t n = 4, out = 6, in = out + k - 1, oc = 40;
    std::vector<float> x(static_cast<size_t>(n * c * in * in)), g(static_cast<size_t>(n * out * out * oc));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < g.size(); i++) g[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    Shape full{c, k, k, oc, n, out, out};
    Tensor xv = from(x, {n * c * in * in}).as_strided(full, {in * in, in, 1, 0, c * in * in, in, 1}, 0);
    Tensor gv = from(g, {n * out * out * oc}).as_strided(full, {0, 0, 0, 1, out * out * oc, out * oc, oc}, 0);
    Tensor r = xv.binary(Op::Mul, gv).reduce(ReduceOp::Sum, {4, 5, 6}, false);
    if (permuted) r = r.permute({3, 0, 1, 2}).contiguous();
    Schedule sched = create_schedule({r.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    std::string ir = llvm_ir(sched.kernels[0]);
    EXPECT_NE(ir.find(vector_fma()), std::string::npos) << "channel tiling not used";
    EXPECT_EQ(ir.find("llvm.masked.store") != std::string::npos, permuted) << c << "x" << k;
    auto got = to_vec<float>(r);
    for (int64_t q = 0; q < c; q++)
      for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < k; b++)
          for (int64_t o = 0; o < oc; o++) {
            double acc = 0;
            for (int64_t m = 0; m < n; m++)
              for (int64_t y = 0; y < out; y++)
                for (int64_t w = 0; w < out; w++)
                  acc += double(x[size_t(((m * c + q) * in + y + a) * in + w + b)]) * g[size_t(((m * out + y) * out + w) * oc + o)];
            size_t at = permuted ? size_t(((o * c + q) * k + a) * k + b) : size_t(((q * k + a) * k + b) * oc + o);
            ASSERT_EQ(got[at], acc) << c << "x" << k << (permuted ? " permuted: " : ": ") << q << "," << a << "," << b << "," << o;
          }
  };
  check(3, 5);  // 25 rows per input channel
  check(8, 5);  // 200 rows over (c, a, b)
  check(4, 3);  // 36 rows over (c, a, b)
  check(5, 3);  // 45 rows: no whole tiles over c either, 9 per channel as 3 tiles of 3
  check(12, 3);
  check(3, 5, true);
  check(5, 3, true);
  check(12, 3, true);
}

// out[r, w] = sum_k x[r, w + k] * f[k]: a short window along the last dim (MNIST's conv1
// has 25 taps) takes the register tile with w as its columns; widths that leave a vector or
// more after the whole tiles (12, 24, 48: a tile and a half for SSE, AVX2 and AVX-512) take
// a narrower tile for the rest instead of one output at a time: its results, exact here.
TEST(Reduce, RegisterTileColumnRemainder) {
  for (int64_t width : {12, 24, 40, 48}) {
    const int64_t rows = 6, k = 5, in_w = width + k - 1;
    std::vector<float> x(static_cast<size_t>(rows * in_w)), f(static_cast<size_t>(k));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < f.size(); i++) f[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    Shape full{rows, width, k};
    Tensor xv = from(x, {rows * in_w}).as_strided(full, {in_w, 1, 1}, 0);
    Tensor fv = from(f, {1, 1, k}).expand(full);
    Tensor r = xv.binary(Op::Mul, fv).reduce(ReduceOp::Sum, {2}, false);
    Schedule sched = create_schedule({r.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    auto got = to_vec<float>(r);
    for (int64_t a = 0; a < rows; a++)
      for (int64_t w = 0; w < width; w++) {
        double acc = 0;
        for (int64_t q = 0; q < k; q++) acc += double(x[size_t(a * in_w + w + q)]) * f[size_t(q)];
        ASSERT_EQ(got[size_t(a * width + w)], acc) << width << ": " << a << "," << w;
      }
  }
}

// out[b, m, n] = sum_k x[b, m, k] * w[k, n], w shared by the batch (a linear layer on a
// (batch, tokens, features) input): a matmul tile, its rows before its channels. With few
// rows per channel the threads split the channels, whose slices start mid-range.
TEST(Reduce, ChannelTiledSharedWeightFewRows) {
  for (int64_t n : {128, 136}) {
    const int64_t bt = 3, m = 12, k = 40;
    std::vector<float> x(size_t(bt * m * k)), w(size_t(k * n));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < w.size(); i++) w[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    Shape full{bt, m, n, k};
    Tensor xv = from(x, {bt, m, 1, k}).expand(full);
    Tensor wv = from(w, {k, n}).permute({1, 0}).reshape({1, 1, n, k}).expand(full);
    Tensor r = xv.binary(Op::Mul, wv).reduce(ReduceOp::Sum, {3}, false);
    Schedule sched = create_schedule({r.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    EXPECT_EQ(cpu_program(sched.kernels[0])->parallel_size, n);
    auto got = to_vec<float>(r);
    for (int64_t b = 0; b < bt; b++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double acc = 0;
          for (int64_t q = 0; q < k; q++) acc += double(x[size_t((b * m + i) * k + q)]) * w[size_t(q * n + j)];
          ASSERT_EQ(got[size_t((b * m + i) * n + j)], acc) << n << ": " << b << "," << i << "," << j;
        }
  }
}

// out[c, t, o] = sum_n x[n, c + t] * g[n, o]: a weight gradient's shape, the
// channels o last and unit-stride in g, few rows t: channel tiling with g read
// in place (no panels). With a long reduce (g larger than the caches) the
// reduce runs in blocks, accumulators kept in a scratch buffer between them:
// the same sums (exact here: multiples of 1/8), leftover channels once.
TEST(Reduce, ChannelTiledUnitStride) {
  for (int64_t n : {50, 8000}) {
    const bool blocked = n > 50;
    int64_t c = 4, t = 3, oc = 40;
    std::vector<float> x(size_t(n * (c + t - 1))), g(size_t(n * oc));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 7 % 13) - 6) * 0.25f;
    for (size_t i = 0; i < g.size(); i++) g[i] = float(int(i * 5 % 11) - 5) * 0.5f;
    int64_t xw = c + t - 1;
    Shape full{c, t, oc, n};
    // x window: (c, t, oc, n) -> x[n, c + t]
    Tensor xv = from(x, {n * xw}).as_strided(full, {1, 1, 0, xw}, 0);
    Tensor gv = from(g, {n, oc}).permute({1, 0}).reshape({1, 1, oc, n}).expand(full);
    Tensor r = xv.binary(Op::Mul, gv).reduce(ReduceOp::Sum, {3}, false);
    Schedule sched = create_schedule({r.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    std::string ir = llvm_ir(sched.kernels[0]);
    EXPECT_NE(ir.find(vector_fma()), std::string::npos) << "channel tiling not used";
    // no panels for a unit-stride operand; a scratch buffer for blocks
    EXPECT_EQ(ir.find("@tiny_scratch_alloc") != std::string::npos, blocked) << n;
    auto got = to_vec<float>(r);
    for (int64_t a = 0; a < c; a++)
      for (int64_t b = 0; b < t; b++)
        for (int64_t o = 0; o < oc; o++) {
          double acc = 0;
          for (int64_t q = 0; q < n; q++) acc += double(x[size_t(q * xw + a + b)]) * g[size_t(q * oc + o)];
          EXPECT_EQ(got[size_t((a * t + b) * oc + o)], acc) << n << ": " << a << "," << b << "," << o;
        }
  }
}
