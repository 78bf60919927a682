// Subgraphs: built once over placeholders, applied by Call nodes, expanded by the scheduler.
// Every result is checked against the same expression built directly on the values.
#include <cmath>

#include "engine/runtime/counters.h"
#include "engine/tensor/subgraph.h"

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

// f(x, w) = (tanh(x @ w + 1), rows of x summed, x): two computed outputs and an input
struct Built {
  std::shared_ptr<const Subgraph> fn;
  static std::vector<Tensor> body(const Tensor& x, const Tensor& w) {
    Tensor one = Tensor::full({x.shape()[0], w.shape()[1]}, Scalar::from_double(1), DType::Float32);
    return {x.matmul(w).binary(Op::Add, one).unary(Op::Tanh), x.reduce(ReduceOp::Sum, {1}, false), x};
  }
  Built(int64_t n, int64_t k, int64_t m) {
    Tensor x = placeholder({n, k}, DType::Float32, 0), w = placeholder({k, m}, DType::Float32, 1);
    fn = make_subgraph({x, w}, body(x, w));
  }
};

void expect_near(const Tensor& got, const Tensor& want, const char* what) {
  auto g = to_vec<float>(got), w = to_vec<float>(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); i++) EXPECT_NEAR(g[i], w[i], 1e-5f * (1 + std::fabs(w[i]))) << what << " " << i;
}

}  // namespace

TEST(Subgraph, CallsComputeWhatTheBodyComputes) {
  Built b(3, 5, 4);
  for (float scale : {1.0f, -0.25f}) {
    Tensor x = from(iota_f(15, -2, 0.3f * scale), {3, 5}), w = from(iota_f(20, 1, -0.1f), {5, 4});
    std::vector<Tensor> out = call(b.fn, {x, w}), want = Built::body(x, w);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].node()->op, Op::CallOutput);
    EXPECT_EQ(out[0].shape(), (Shape{3, 4}));
    EXPECT_EQ(out[1].shape(), (Shape{3}));
    // outputs realized one at a time and together, read through views
    expect_near(out[1], want[1], "sum");
    Tensor::realize_all({out[0], out[2]});
    expect_near(out[0], want[0], "product");
    expect_near(out[2], x, "input");
    expect_near(out[0].permute({1, 0}).binary(Op::Mul, out[0].permute({1, 0})),
                want[0].permute({1, 0}).binary(Op::Mul, want[0].permute({1, 0})), "view of an output");
  }
}

// A graph with a call is keyed with the call as one node: the next step's graph, the same call
// over other buffers, replays its schedule (and the values are the new ones).
TEST(Subgraph, StepsReplayTheScheduleOfTheirCall) {
  Built b(4, 6, 2);
  auto step = [&](float scale) {
    Tensor x = from(iota_f(24, 0.5f, 0.1f * scale), {4, 6}), w = from(iota_f(12, -1, 0.2f), {6, 2});
    std::vector<Tensor> out = call(b.fn, {x, w});
    Tensor loss = out[0].reduce(ReduceOp::Sum, {0, 1}, false).binary(Op::Add, out[1].reduce(ReduceOp::Sum, {0}, false));
    std::vector<Tensor> want = Built::body(x, w);
    Tensor want_loss = want[0].reduce(ReduceOp::Sum, {0, 1}, false).binary(Op::Add, want[1].reduce(ReduceOp::Sum, {0}, false));
    expect_near(loss, want_loss, "loss");
  };
  step(1);
  int64_t hits = counters().schedule_cache_hits, schedules = counters().schedules;
  step(2);  // (want_loss schedules; the call's graph replays)
  step(-3);
  EXPECT_EQ(counters().schedule_cache_hits - hits, 4);
  EXPECT_EQ(counters().schedules - schedules, 0);
}

// A subgraph over another's nodes (a backward built over its forward's values): both calls in one
// graph share those nodes, and a call may take another call's outputs.
TEST(Subgraph, CallsShareNodesAndChain) {
  const Shape s{8, 8};
  Tensor x = placeholder(s, DType::Float32, 0), g = placeholder(s, DType::Float32, 1);
  Tensor y = x.unary(Op::Exp).unary(Op::Sin);  // forward
  auto forward = make_subgraph({x}, {y});
  Tensor dy = g.binary(Op::Mul, x.unary(Op::Exp).unary(Op::Cos)).binary(Op::Mul, x.unary(Op::Exp));  // backward
  auto backward = make_subgraph({x, g}, {dy});
  Tensor xv = from(iota_f(64, -1, 0.03f), s), gv = from(iota_f(64, 2, -0.05f), s);
  Tensor yv = call(forward, {xv})[0];
  Tensor dv = call(backward, {xv, call(forward, {gv})[0]})[0];
  Tensor want_y = xv.unary(Op::Exp).unary(Op::Sin);
  Tensor want_d = gv.unary(Op::Exp).unary(Op::Sin).binary(Op::Mul, xv.unary(Op::Exp).unary(Op::Cos)).binary(Op::Mul, xv.unary(Op::Exp));
  int64_t kernels = kernels_run([&] { Tensor::realize_all({yv, dv}); });
  EXPECT_EQ(kernels, 1);  // one fused kernel for both outputs
  expect_near(yv, want_y, "forward");
  expect_near(dv, want_d, "backward");
}

// Constants in a body are compiled in; empty and 0-d values pass through.
TEST(Subgraph, ConstantsEmptyAndScalarValues) {
  Tensor x = placeholder({}, DType::Float32, 0), e = placeholder({0, 3}, DType::Float32, 1);
  Tensor two = Tensor::full({}, Scalar::from_double(2), DType::Float32);
  auto fn = make_subgraph({x, e}, {x.binary(Op::Mul, two), e.unary(Op::Neg), two});
  std::vector<Tensor> out = call(fn, {from(std::vector<float>{1.5f}, {}), from(std::vector<float>{}, {0, 3})});
  EXPECT_EQ(to_vec<float>(out[0]), std::vector<float>{3.0f});
  EXPECT_TRUE(to_vec<float>(out[1]).empty());
  EXPECT_EQ(to_vec<float>(out[2]), std::vector<float>{2.0f});
}

TEST(Subgraph, BadBodiesAndCallsThrow) {
  Tensor x = placeholder({2}, DType::Float32, 0);
  Tensor buffer = from(iota_f(2), {2});
  // a body that reads a buffer, a launch value or random numbers: values its callers' keys miss
  EXPECT_THROW(make_subgraph({x}, {x.binary(Op::Add, buffer)}), std::logic_error);
  EXPECT_THROW(make_subgraph({x}, {x.binary(Op::Add, Tensor::param({2}, Scalar::from_double(1), DType::Float32))}),
               std::logic_error);
  EXPECT_THROW(make_subgraph({x}, {x.binary(Op::Add, Tensor::rand({2}, 1, 0))}), std::logic_error);
  // inputs out of order, or a placeholder it does not take
  Tensor y = placeholder({2}, DType::Float32, 1);
  EXPECT_THROW(make_subgraph({y}, {y}), std::logic_error);
  EXPECT_THROW(make_subgraph({x}, {x.binary(Op::Add, y)}), std::logic_error);
  // calls with the wrong count, dtype or shape
  auto fn = make_subgraph({x}, {x.unary(Op::Neg)});
  EXPECT_THROW(call(fn, {}), std::invalid_argument);
  EXPECT_THROW(call(fn, {from(iota_f(3), {3})}), std::invalid_argument);
  EXPECT_THROW(call(fn, {from(std::vector<double>{1, 2}, {2})}), std::invalid_argument);
  // a placeholder is no value to realize
  EXPECT_THROW(x.realize(), std::logic_error);
}

// A call that keeps its stored values (a forward whose backward comes later): what the first
// realize stored of its insides is read by later ones, of its own outputs or of a call given it
// as context, instead of computed again; a replayed schedule keeps the new step's values.
TEST(Subgraph, KeptValuesAreReadNotComputedAgain) {
  const Shape s{6, 6};
  Tensor x = placeholder(s, DType::Float32, 0), w = placeholder(s, DType::Float32, 1);
  Tensor p = x.matmul(w);  // stored: a product another product reads
  auto forward = make_subgraph({x, w}, {p.matmul(w), p.matmul(x)});
  auto backward = make_subgraph({x, w}, {p.matmul(p)});  // built over the forward's insides
  for (float scale : {1.0f, 0.5f, -2.0f}) {  // (the second and third steps replay)
    Tensor xv = from(iota_f(36, -1, 0.05f * scale), s), wv = from(iota_f(36, 0.5f, -0.03f), s);
    Tensor pv = xv.matmul(wv);
    std::vector<Tensor> out = call(forward, {xv, wv});
    const NodeRef c = call_of(out[0]);
    keep_stored_values(c.get());
    EXPECT_EQ(kernels_run([&] { out[0].realize(); }), 2) << scale;
    EXPECT_FALSE(stored_values(c.get()).empty()) << scale;  // p's product
    // the other output and the context's call read p: one product each, not two
    EXPECT_EQ(kernels_run([&] { out[1].realize(); }), 1) << scale;
    Tensor back = call(backward, {xv, wv}, {c})[0];
    EXPECT_EQ(kernels_run([&] { back.realize(); }), 1) << scale;
    expect_near(out[0], pv.matmul(wv), "first output");
    expect_near(out[1], pv.matmul(xv), "second output");
    expect_near(back, pv.matmul(pv), "context");
  }
  // a context over other arguments, or other inputs, is refused
  Tensor a = from(iota_f(36), s), b = from(iota_f(36, 1, 0.1f), s);
  const NodeRef first = call_of(call(forward, {a, b})[0]);
  EXPECT_THROW(call(backward, {b, a}, {first}), std::invalid_argument);
  auto unrelated = make_subgraph({placeholder({2}, DType::Float32, 0)}, {placeholder({2}, DType::Float32, 0)});
  EXPECT_THROW(call(unrelated, {from(iota_f(2), {2})}, {first}), std::invalid_argument);
  // without the forward as context, the backward computes p again
  Tensor xv = from(iota_f(36), s), wv = from(iota_f(36, 1, 0.1f), s);
  Tensor back = call(backward, {xv, wv})[0];
  EXPECT_EQ(kernels_run([&] { back.realize(); }), 2);
}
