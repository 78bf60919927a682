// The engine's trace: schedule runs with their cause, cache hits and misses and
// how a missed graph differs; kernels with their modules, traffic and buffers.
#include <gtest/gtest.h>

#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/schedule/trace.h"
#include "engine/tensor/tensor.h"

using namespace tiny;

namespace {

Tensor input(int64_t n) {
  std::vector<float> v(size_t(n), 1.5f);
  return Tensor::from_host(v.data(), {n}, DType::Float32);
}

}  // namespace

TEST(Trace, RecordsKernelsWithModulesTrafficAndCause) {
  Tensor x = input(4096);
  start_trace();
  Tensor y;
  {
    set_scope("Net.fc");
    y = x.reshape({64, 64}).binary(Op::Mul, Tensor::full({64, 64}, Scalar::from_double(2.0), DType::Float32));
    set_scope("Net.act");
    y = y.unary(Op::Exp).reduce(ReduceOp::Sum, {1}, false);
    set_scope("");
    RealizeCause cause("a test");
    y.realize();
  }
  TraceLog log = stop_trace();
  ASSERT_EQ(log.schedules.size(), 1u);
  ASSERT_EQ(log.kernels.size(), 1u);
  const TracedSchedule& s = log.schedules[0];
  EXPECT_EQ(s.cause, "a test");
  EXPECT_FALSE(s.cached);
  EXPECT_EQ(s.kernels, 1);
  const TracedKernel& k = log.kernels[0];
  EXPECT_EQ(k.info->modules, (std::vector<std::string>{"Net.act", "Net.fc"}));
  EXPECT_EQ(k.info->bytes_read, 4096 * 4);
  EXPECT_EQ(k.info->bytes_written, 64 * 4);
  ASSERT_EQ(k.info->inputs.size(), 1u);
  EXPECT_EQ(k.info->inputs[0].shape, (Shape{64, 64}));  // a reshape of the stored value names its shape
  ASSERT_EQ(k.input_ids.size(), 1u);
  EXPECT_EQ(k.input_ids[0], x.node()->realized()->id());
  EXPECT_EQ(k.output_ids[0], y.node()->realized()->owner()->id());
  EXPECT_GE(k.start_ns, s.start_ns);
  EXPECT_LE(k.start_ns + k.duration_ns, s.end_ns);
  EXPECT_FALSE(tracing());
}

TEST(Trace, CacheHitsAndMissesSayWhatChanged) {
  // sizes no other test uses, so the closest cached graph is this test's
  Tensor x = input(4099);
  auto window = [&](int64_t offset, int64_t n) {
    return x.as_strided({n}, {1}, offset).unary(Op::Sqrt).unary(Op::Exp2).reduce(ReduceOp::Sum, {0}, false);
  };
  Tensor zero = Tensor::full({}, Scalar::from_double(0.0), DType::Float32);
  Tensor y = x.unary(Op::Neg);  // computed, never stored: views of it stay views
  auto part = [&](int64_t offset) { return y.as_strided({67}, {1}, offset).reduce(ReduceOp::Max, {0}, false); };
  window(0, 67).realize();
  start_trace();
  window(0, 67).binary(Op::Add, zero).realize();  // a new op
  window(128, 67).realize();  // a window of stored data elsewhere: the same graph (an alias of the window)
  window(0, 33).realize();    // another size
  part(5).realize();
  part(9).realize();          // another offset into a computed value
  TraceLog log = stop_trace();
  ASSERT_EQ(log.schedules.size(), 5u);
  const auto& s = log.schedules;
  EXPECT_EQ(s[0].miss.rfind("a new op: ADD", 0), 0u) << s[0].miss;
  EXPECT_TRUE(s[1].cached);
  EXPECT_EQ(s[1].miss, "");
  EXPECT_EQ(s[2].miss.rfind("a new shape", 0), 0u) << s[2].miss;
  EXPECT_FALSE(s[3].cached);
  EXPECT_EQ(s[4].miss.rfind("a new view offset", 0), 0u) << s[4].miss;
  EXPECT_NE(s[4].miss.find("off=9"), std::string::npos) << s[4].miss;
  for (size_t i : {0, 2, 3, 4}) EXPECT_FALSE(s[i].cached);
}

TEST(Trace, ReplaysAreRecordedAsCached) {
  Tensor a = input(256), b = input(256);
  auto build = [](const Tensor& t) { return t.unary(Op::Exp).binary(Op::Mul, t); };
  build(a).realize();
  start_trace();
  build(b).realize();
  TraceLog log = stop_trace();
  ASSERT_EQ(log.schedules.size(), 1u);
  EXPECT_TRUE(log.schedules[0].cached);
  EXPECT_EQ(log.schedules[0].miss, "");
  ASSERT_EQ(log.kernels.size(), 1u);
  EXPECT_EQ(log.kernels[0].input_ids[0], b.node()->realized()->id());
  EXPECT_EQ(log.kernels[0].schedule, 0);
}

TEST(Trace, NothingIsRecordedWhenOff) {
  Tensor a = input(64);
  a.unary(Op::Neg).realize();
  TraceLog log = stop_trace();
  EXPECT_TRUE(log.schedules.empty());
  EXPECT_TRUE(log.kernels.empty());
}
