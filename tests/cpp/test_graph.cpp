// The graph: op classification and names, hash-consing, what realizing frees.
#include <set>

#include "engine/dtype/text_out.h"
#include "engine/schedule/schedule_cache.h"
#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

TEST(Graph, OpNamesAndClasses) {
  std::set<std::string> names;
  int unary = 0, binary = 0, cmp = 0;
  for (int i = 0; i <= int(Op::Scatter); i++) {
    Op op = Op(i);
    ASSERT_NE(op_name(op), nullptr) << i;
    EXPECT_TRUE(names.insert(op_name(op)).second) << "duplicate name " << op_name(op);
    unary += is_unary(op);
    binary += is_binary(op);
    cmp += is_comparison(op);
    EXPECT_EQ(is_elementwise(op), is_unary(op) || is_binary(op) || op == Op::Where) << op_name(op);
    EXPECT_FALSE(is_unary(op) && is_binary(op)) << op_name(op);
  }
  EXPECT_EQ(unary, 37);  // Neg .. Bitcast
  EXPECT_EQ(binary, 23);  // Add .. Hypot
  EXPECT_EQ(cmp, 4);
  EXPECT_STREQ(op_name(Op::Erfinv), "ERFINV");
  EXPECT_STREQ(op_name(Op::Sigmoid), "SIGMOID");
  EXPECT_STREQ(op_name(Op::Scatter), "SCATTER");  // the names stay aligned with the ops
  EXPECT_STREQ(op_name(Op::FloorMod), "FLOORMOD");
  EXPECT_STREQ(op_name(Op::Write), "WRITE");
  EXPECT_STREQ(reduce_name(ReduceOp::All), "ALL");
}

TEST(Graph, HashConsing) {
  Tensor x = from(iota_f(4), {4});
  Tensor one = Tensor::full({4}, Scalar::from_double(1), DType::Float32);
  EXPECT_EQ(x.binary(Op::Add, one).node(), x.binary(Op::Add, one).node());
  EXPECT_NE(x.binary(Op::Add, one).node(), one.binary(Op::Add, x).node());  // operand order matters
  // constants are equal by bits: 0.0 and -0.0 differ, NaN equals NaN
  auto c = [](double v) { return Tensor::full({2}, Scalar::from_double(v), DType::Float32).node(); };
  EXPECT_EQ(c(0.5), c(0.5));
  EXPECT_NE(c(0.0), c(-0.0));
  EXPECT_EQ(c(std::nan("")), c(std::nan("")));
  EXPECT_NE(c(1.0), Tensor::full({2}, Scalar::from_double(1), DType::Float64).node());  // dtype
  EXPECT_NE(c(1.0), Tensor::full({3}, Scalar::from_double(1), DType::Float32).node());  // shape
  // views: the same movement is the same node; a view of a view is one view of the base
  Tensor m = from(iota_f(6), {2, 3});
  EXPECT_EQ(m.permute({1, 0}).node(), m.permute({1, 0}).node());
  Tensor vv = m.permute({1, 0}).flip({true, false});
  EXPECT_EQ(vv.node()->op, Op::View);
  EXPECT_EQ(vv.node()->sources()[0].get(), m.node().get());
  // views that undo each other give the base back
  EXPECT_EQ(m.permute({1, 0}).permute({1, 0}).node(), m.node());
  EXPECT_EQ(m.reshape({6}).reshape({2, 3}).node(), m.node());
  // chains of movement ops on a pending view stay one view over the base,
  // masks included (pad of a pad, pad then permute, flip of a flip)
  auto one_view = [&](const Tensor& t) {
    return t.node()->op == Op::View && t.node()->sources()[0].get() == m.node().get() &&
           t.node()->args.st.views().size() == 1;
  };
  EXPECT_TRUE(one_view(m.pad({{1, 0}, {0, 2}}).pad({{0, 1}, {1, 1}})));
  EXPECT_TRUE(one_view(m.pad({{1, 0}, {0, 2}}).permute({1, 0}).flip({true, true})));
  EXPECT_TRUE(one_view(m.expand({2, 3}).pad({{1, 1}, {1, 1}}).shrink({{1, 3}, {0, 4}})));
  EXPECT_EQ(m.flip({true, false}).flip({true, false}).node(), m.node());
  EXPECT_EQ(m.pad({{1, 1}, {2, 0}}).shrink({{1, 3}, {2, 5}}).node(), m.node());
  // rand with the same seed and offset is one node (the same values)
  EXPECT_EQ(Tensor::rand({3}, 1, 2).node(), Tensor::rand({3}, 1, 2).node());
  EXPECT_NE(Tensor::rand({3}, 1, 2).node(), Tensor::rand({3}, 1, 3).node());
}

TEST(Graph, HashConsingForgetsFreedNodes) {
  // A loop making and dropping the same node (a model's step) and distinct ones (fresh
  // constants): each leaves the table as it dies. It once kept every node ever made, and the
  // identical ones in one chain, so building a node slowed down with every step.
  Tensor x = from(iota_f(4), {4});
  const size_t before = hash_cons_entries();
  for (int i = 0; i < 100000; i++) {
    Tensor same = x.unary(Op::Exp);
    Tensor fresh = Tensor::full({4}, Scalar::from_double(i), DType::Float32);
  }
  EXPECT_EQ(hash_cons_entries(), before);
}

TEST(Graph, HashConsingFindsLiveNodesAcrossRebuilds) {
  // 20000 live nodes (the table grows and rebuilds many times over) and as many freed ones:
  // each live one is found again, the same node, and a freed one is made anew
  Tensor x = from(iota_f(4), {4});
  std::vector<Tensor> live;
  for (int i = 0; i < 20000; i++) {
    live.push_back(x.binary(Op::Add, Tensor::full({4}, Scalar::from_double(i), DType::Float32)));
    Tensor freed = x.binary(Op::Mul, Tensor::full({4}, Scalar::from_double(i), DType::Float32));
  }
  for (int i = 0; i < 20000; i += 7)
    EXPECT_EQ(x.binary(Op::Add, Tensor::full({4}, Scalar::from_double(i), DType::Float32)).node(), live[size_t(i)].node());
  std::weak_ptr<const Node> once = x.binary(Op::Mul, Tensor::full({4}, Scalar::from_double(3), DType::Float32)).node();
  EXPECT_TRUE(once.expired());
}

TEST(Graph, RealizingDropsHistory) {
  Tensor x = from(iota_f(8), {8});
  Tensor y = x.unary(Op::Exp).binary(Op::Mul, Tensor::full({8}, Scalar::from_double(2), DType::Float32));
  std::weak_ptr<const Node> inner = y.node()->sources()[0];
  EXPECT_FALSE(inner.expired());
  y.realize();
  EXPECT_TRUE(y.node()->realized() != nullptr);
  EXPECT_TRUE(y.node()->sources().empty());
  EXPECT_TRUE(inner.expired());  // exp(x) is freed: nothing refers to it any more
  EXPECT_NE(y.node()->str().find("MUL"), std::string::npos);
}

// toposort places producers first, each node once, and leaves each node its place (graph keys
// read sources' positions from them); realized nodes and nodes outside the latest walk have none.
TEST(Graph, ToposortLeavesEachNodeItsPlace) {
  Tensor x = from(iota_f(8), {8});
  Tensor a = x.unary(Op::Exp);
  Tensor b = a.binary(Op::Mul, a);  // a shared source is visited once
  Tensor c = b.binary(Op::Add, a);
  std::vector<const Node*> order = toposort({c.node(), b.node()});
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), c.node().get());
  for (size_t i = 0; i < order.size(); i++) {
    EXPECT_EQ(order[i]->order_position(), int(i));
    for (auto& s : order[i]->sources())
      if (!s->realized()) EXPECT_LT(s->order_position(), int(i));  // producers first
  }
  EXPECT_EQ(x.node()->order_position(), -1);  // a buffer: realized, not walked
  Tensor other = x.unary(Op::Neg);
  toposort({other.node()});  // a later walk: the first one's places are gone
  EXPECT_EQ(c.node()->order_position(), -1);
  EXPECT_EQ(other.node()->order_position(), 0);
  b.realize();
  std::vector<const Node*> after = toposort({c.node()});
  ASSERT_EQ(after.size(), 2u);  // exp, add: the realized product is an input now
  EXPECT_EQ(b.node()->order_position(), -1);
  EXPECT_EQ(c.node()->order_position(), 1);
}

// Graph keys are printed through TextOut, the nodes' text for people (and the trace's key diffs,
// which compare the two) through streams: both must print the same characters for every kind
// of node and value (doubles with every digit, infinities, NaN, negative zero, large integers).
TEST(Graph, KeyTextMatchesStreamText) {
  std::vector<Tensor> nodes;
  for (double v : {0.1, -2.5e-300, 1.0 / 3.0, -0.0, 1e300, double(INFINITY), -double(INFINITY), double(NAN)})
    nodes.push_back(Tensor::full({3, 1, 4}, Scalar::from_double(v), DType::Float32));
  nodes.push_back(Tensor::full({2}, Scalar::from_int(INT64_MIN), DType::Int64));
  nodes.push_back(Tensor::full({2}, Scalar::from_bool(true), DType::Bool));
  nodes.push_back(Tensor::param({5}, Scalar::from_double(0.7), DType::Float64));
  nodes.push_back(Tensor::arange(7, Scalar::from_double(-1.25), Scalar::from_double(0.5), DType::Float32));
  Tensor r = Tensor::rand({4, 6}, 123456789012345ull, 42);
  nodes.push_back(r);
  nodes.push_back(r.pad({{1, 2}, {0, 3}}).shrink({{1, 5}, {2, 9}}).permute({1, 0}));
  nodes.push_back(r.reduce(ReduceOp::Max, {0, 1}, true));
  Tensor idx = Tensor::arange(4, Scalar::from_int(0), Scalar::from_int(1), DType::Int64);
  nodes.push_back(Tensor::full({4}, Scalar::from_double(0), DType::Float32)
                      .scatter(idx, Tensor::full({4}, Scalar::from_double(1), DType::Float32), true));
  int checked = 0;
  for (auto& t : nodes)
    for (const Node* n : toposort({t.node()})) {
      TextOut key;
      n->print(key);
      EXPECT_EQ(key.str(), n->str());
      checked++;
    }
  EXPECT_GT(checked, 20);
  // the key's text: the nodes' stream text, with references
  GraphShape g = graph_shape({nodes.back().node()});
  const std::string text = key_text(g, {nodes.back().node()});
  EXPECT_NE(text.find(nodes.back().node()->str()), std::string::npos) << text;
}

// A graph key (binary, one word per node and source) is equal for graphs that differ only in
// their input buffers' contents or launch parameters' values, and differs wherever the text of
// the graph would: an op, a constant (by bits), a view's offset, a shape, how inputs alias.
TEST(Graph, KeysNameWhatTheSchedulesDependOn) {
  auto key = [](const Tensor& t) { return graph_shape({t.node()}).key; };
  auto input = [](int64_t n = 8) { return from(iota_f(n), {n}); };
  auto c = [](double v) { return Tensor::full({8}, Scalar::from_double(v), DType::Float32); };
  Tensor x = input(), y = input();
  EXPECT_EQ(key(x.binary(Op::Add, c(1))), key(y.binary(Op::Add, c(1))));  // other buffers, same shape
  EXPECT_NE(key(x.binary(Op::Add, c(1))), key(x.binary(Op::Mul, c(1))));
  EXPECT_NE(key(x.binary(Op::Add, c(1))), key(x.binary(Op::Add, c(2))));
  EXPECT_NE(key(x.binary(Op::Add, c(0.0))), key(x.binary(Op::Add, c(-0.0))));
  EXPECT_EQ(key(x.binary(Op::Add, c(NAN))), key(x.binary(Op::Add, c(NAN))));
  auto p = [](double v) { return Tensor::param({8}, Scalar::from_double(v), DType::Float32); };
  EXPECT_EQ(key(x.binary(Op::Add, p(1))), key(x.binary(Op::Add, p(2))));  // a launch parameter
  EXPECT_NE(key(x.binary(Op::Add, p(1))), key(x.binary(Op::Add, c(1))));
  EXPECT_NE(key(x.binary(Op::Add, x)), key(x.binary(Op::Add, y)));  // one input read twice, or two
  // a view's offset into a computed value (into a buffer, it is the input buffer's own)
  Tensor z = input(12).unary(Op::Neg);
  EXPECT_NE(key(z.shrink({{0, 8}}).unary(Op::Exp)), key(z.shrink({{4, 12}}).unary(Op::Exp)));
  EXPECT_NE(key(z.unary(Op::Exp)), key(x.unary(Op::Exp)));  // shapes
  EXPECT_NE(key(x.reduce(ReduceOp::Sum, {0}, true)), key(x.reduce(ReduceOp::Max, {0}, true)));
  // The interned signatures are forgotten once there are enough of them (every new constant is
  // one); their ids are not reused, so a key made before names no other graph after.
  const std::string before = key(c(0.5));
  int same = 0;
  for (int i = 0; i < 70000; i++) same += key(c(2 + i)) == before;  // more than the table keeps
  EXPECT_EQ(same, 0);
  EXPECT_EQ(key(x.binary(Op::Add, c(7))), key(x.binary(Op::Add, c(7))));
}

// A chain dropped unread (a loop that never reads its values): its nodes die one after
// another, not inside each other's destructors (300k nested ones overflowed 8 MiB of stack).
TEST(Graph, DeepChainsDieWithoutRecursing) {
  const Shape s{4};
  const size_t before = hash_cons_entries();
  on_small_stack([&] {
    Tensor y = from(std::vector<float>{1, 2, 3, 4}, s);
    const Tensor factor = Tensor::full(s, Scalar::from_double(1.0001), DType::Float32);
    for (int i = 0; i < 200000; i++) y = y.binary(Op::Mul, factor);
    EXPECT_GE(hash_cons_entries(), before + 200000);
  });
  EXPECT_LE(hash_cons_entries(), before + 2);
}
