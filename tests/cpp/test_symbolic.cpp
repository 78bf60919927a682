// Index expressions: the simplifications views rely on, and for random
// expressions, that the simplified form equals direct evaluation for every
// value of its variables (and stays inside its declared range).
#include <random>

#include "engine/shape/view.h"
#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

int count_ops(const Expr& e, EOp op) {
  int n = e->op == op;
  for (auto& s : e->src) n += count_ops(s, op);
  return n;
}

bool is_var(const Expr& e, int id) { return e->op == EOp::Var && e->value == id; }

// Evaluates `e` at every point of the variables' box and compares with `want`.
template <typename F>
void expect_equal_everywhere(const Expr& e, const Shape& sizes, F&& want, const std::string& what) {
  bool ok = true;
  for_each_index(sizes, [&](const std::vector<int64_t>& v) {
    if (!ok) return;
    int64_t got = eval_expr(e, v), w = want(v);
    if (got != w) {
      ADD_FAILURE() << what << " = " << to_string(e) << ": got " << got << " want " << w;
      ok = false;
    }
  });
}

}  // namespace

TEST(Symbolic, ConstantsFold) {
  EXPECT_EQ(add(cnst(3), cnst(4))->value, 7);
  EXPECT_TRUE(mul(cnst(3), -2)->is_const());
  EXPECT_EQ(mul(cnst(3), -2)->value, -6);
  EXPECT_EQ(floordiv(cnst(-7), 2)->value, -4);  // floor, not truncation
  EXPECT_EQ(mod(cnst(-7), 3)->value, 2);         // floor modulo
  EXPECT_EQ(mod(cnst(7), 3)->value, 1);
  Expr i = var(0, 5);
  EXPECT_TRUE(mul(i, 0)->is_const());
  EXPECT_EQ(mul(i, 1), i);
  EXPECT_EQ(floordiv(i, 1), i);
  EXPECT_EQ(mod(i, 1)->value, 0);
  EXPECT_TRUE(var(3, 1)->is_const());  // a size-1 loop is the constant 0
}

TEST(Symbolic, DivModOfRowMajorIndex) {
  const int64_t N = 7;
  Expr i = var(0, 5), j = var(1, N);
  Expr flat = add(mul(i, N), j);
  EXPECT_TRUE(is_var(floordiv(flat, N), 0)) << to_string(floordiv(flat, N));
  EXPECT_TRUE(is_var(mod(flat, N), 1)) << to_string(mod(flat, N));
  // three dims: (i*12 + j*4 + k) // 4 == i*3 + j, % 4 == k, // 12 == i
  Expr a = var(0, 3), b = var(1, 3), c = var(2, 4);
  Expr f3 = add(add(mul(a, 12), mul(b, 4)), c);
  EXPECT_TRUE(is_var(floordiv(f3, 12), 0));
  EXPECT_TRUE(is_var(mod(f3, 4), 2));
  EXPECT_EQ(count_ops(floordiv(f3, 4), EOp::Div), 0) << to_string(floordiv(f3, 4));
  EXPECT_EQ(count_ops(mod(floordiv(f3, 4), 3), EOp::Mod), 0) << to_string(mod(floordiv(f3, 4), 3));
  expect_equal_everywhere(floordiv(f3, 4), {3, 3, 4}, [](auto& v) { return v[0] * 3 + v[1]; }, "f3//4");
  // a constant offset that keeps the remainder in range
  Expr off = add(add(mul(a, 8), c), cnst(4));  // (a*8 + c + 4), c < 4
  EXPECT_EQ(count_ops(floordiv(off, 4), EOp::Div), 0) << to_string(floordiv(off, 4));
  expect_equal_everywhere(floordiv(off, 4), {3, 1, 4}, [](auto& v) { return v[0] * 2 + 1; }, "off//4");
  EXPECT_EQ(count_ops(mod(off, 4), EOp::Mod), 0) << to_string(mod(off, 4));
}

TEST(Symbolic, RangesDecide) {
  Expr i = var(0, 4);
  EXPECT_EQ(mod(i, 4), i);         // already in range
  EXPECT_EQ(mod(i, 9), i);
  EXPECT_EQ(floordiv(i, 4)->value, 0);
  EXPECT_TRUE(floordiv(i, 4)->is_const());
  EXPECT_TRUE(is_true(lt(i, 4)));
  EXPECT_TRUE(is_false(lt(i, 0)));
  EXPECT_TRUE(is_true(ge(i, 0)));
  EXPECT_TRUE(is_false(ge(i, 4)));
  EXPECT_FALSE(is_true(lt(i, 3)));
  EXPECT_FALSE(is_false(lt(i, 3)));
  // nested division composes: (x // 2) // 3 == x // 6
  Expr x = var(1, 100);
  Expr d = floordiv(floordiv(x, 2), 3);
  EXPECT_EQ(count_ops(d, EOp::Div), 1);
  EXPECT_EQ(d->value, 6);
  // coefficients reduce modulo the divisor: (x*5 + 3) % 5 == 3
  EXPECT_TRUE(mod(add(mul(x, 5), cnst(3)), 5)->is_const());
  EXPECT_EQ(mod(add(mul(x, 5), cnst(3)), 5)->value, 3);
  // negative multiples too: (7 - x*5) % 5 == 2
  EXPECT_EQ(mod(add(cnst(7), mul(x, -5)), 5)->value, 2);
}

TEST(Symbolic, LogicalAnd) {
  Expr a = lt(var(0, 5), 3), b = ge(var(1, 5), 2);
  EXPECT_EQ(land(a, cnst(1)), a);
  EXPECT_EQ(land(cnst(1), b), b);
  EXPECT_TRUE(is_false(land(a, cnst(0))));
  EXPECT_TRUE(is_false(land(cnst(0), b)));
  expect_equal_everywhere(land(a, b), {5, 5}, [](auto& v) { return int64_t(v[0] < 3 && v[1] >= 2); }, "and");
  expect_equal_everywhere(b, {5, 5}, [](auto& v) { return int64_t(v[1] >= 2); }, "ge");
}

TEST(Symbolic, UsesVars) {
  Expr e = add(mul(var(0, 3), 4), floordiv(var(2, 8), 2));
  EXPECT_TRUE(uses_vars(e, 0, 1));
  EXPECT_FALSE(uses_vars(e, 1, 2));
  EXPECT_TRUE(uses_vars(e, 1, 3));
  EXPECT_FALSE(uses_vars(cnst(4), 0, 100));
}

TEST(Symbolic, MultipleOf) {
  Expr q = var(0, 5), l = var(1, 4);
  EXPECT_TRUE(multiple_of(add(mul(q, 8), cnst(12)), 4));
  EXPECT_TRUE(multiple_of(mul(mul(q, 2), 6), 4));  // 12 q
  EXPECT_FALSE(multiple_of(add(mul(q, 8), cnst(2)), 4));
  EXPECT_FALSE(multiple_of(add(mul(q, 4), l), 4));
  EXPECT_FALSE(multiple_of(q, 4));                      // a variable alone proves nothing
  EXPECT_FALSE(multiple_of(mul(floordiv(var(2, 16), 2), 2), 4));
  EXPECT_TRUE(multiple_of(mul(floordiv(var(2, 16), 2), 4), 4));
  EXPECT_TRUE(multiple_of(cnst(0), 4));
  EXPECT_TRUE(multiple_of(mul(q, -8), 4));
}

// Views that only permute, expand, flip or shrink never divide.
TEST(Symbolic, SimpleViewsLeaveNoDivision) {
  auto no_divmod = [](const ShapeTracker& st) {
    std::vector<Expr> idx;
    for (size_t d = 0; d < st.shape().size(); d++) idx.push_back(var(int(d), st.shape()[d]));
    auto [ix, valid] = st.index_valid(idx);
    return count_ops(ix, EOp::Div) + count_ops(ix, EOp::Mod) + count_ops(valid, EOp::Div) +
               count_ops(valid, EOp::Mod) ==
           0;
  };
  ShapeTracker c = ShapeTracker::from_shape({2, 3, 4});
  EXPECT_TRUE(no_divmod(c.permute({2, 0, 1})));
  EXPECT_TRUE(no_divmod(c.flip({true, false, true})));
  EXPECT_TRUE(no_divmod(c.shrink({{1, 2}, {0, 2}, {1, 4}})));
  EXPECT_TRUE(no_divmod(c.reshape({6, 4}).permute({1, 0})));
  EXPECT_TRUE(no_divmod(ShapeTracker::from_shape({1, 4}).expand({5, 4})));
  EXPECT_TRUE(no_divmod(c.pad({{1, 1}, {0, 0}, {2, 0}})));
  EXPECT_TRUE(no_divmod(c.pad({{1, 1}, {0, 0}, {2, 0}}).reshape({4, 3, 6})));  // mask on untouched dims
  // padded inner dim, outer dims merged: two views, the index folds back
  EXPECT_TRUE(no_divmod(c.pad({{0, 0}, {0, 0}, {1, 1}}).reshape({6, 6}))) << c.pad({{0, 0}, {0, 0}, {1, 1}}).reshape({6, 6}).str();
  // a transpose then flatten cannot be one view, but splitting it back must
  // still simplify to the original permute
  ShapeTracker t = c.permute({1, 0, 2}).reshape({24}).reshape({3, 2, 4});
  EXPECT_TRUE(no_divmod(t)) << t.str();
}

// ---- random expressions against a direct evaluation

namespace {

struct RExpr {
  enum Kind { Const, Var, Add, Mul, Div, Mod, Lt, Ge, And } kind;
  int64_t c = 0;
  std::vector<RExpr> kids;

  int64_t eval(const std::vector<int64_t>& v) const {
    switch (kind) {
      case Const: return c;
      case Var: return v[size_t(c)];
      case Add: return kids[0].eval(v) + kids[1].eval(v);
      case Mul: return kids[0].eval(v) * c;
      case Div: return floordiv_ref(kids[0].eval(v), c);
      case Mod: return floormod_ref(kids[0].eval(v), c);
      case Lt: return kids[0].eval(v) < c;
      case Ge: return kids[0].eval(v) >= c;
      case And: return kids[0].eval(v) && kids[1].eval(v);
    }
    return 0;
  }
  Expr build(const Shape& sizes) const {
    switch (kind) {
      case Const: return cnst(c);
      case Var: return var(int(c), sizes[size_t(c)]);
      case Add: return add(kids[0].build(sizes), kids[1].build(sizes));
      case Mul: return mul(kids[0].build(sizes), c);
      case Div: return floordiv(kids[0].build(sizes), c);
      case Mod: return mod(kids[0].build(sizes), c);
      case Lt: return lt(kids[0].build(sizes), c);
      case Ge: return ge(kids[0].build(sizes), c);
      case And: return land(kids[0].build(sizes), kids[1].build(sizes));
    }
    return cnst(0);
  }
};

RExpr random_int_expr(std::mt19937& rng, int depth, int nvars);

RExpr random_bool_expr(std::mt19937& rng, int depth, int nvars) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  if (depth > 0 && pick(0, 3) == 0)
    return {RExpr::And, 0, {random_bool_expr(rng, depth - 1, nvars), random_bool_expr(rng, depth - 1, nvars)}};
  return {pick(0, 1) ? RExpr::Lt : RExpr::Ge, pick(-4, 12), {random_int_expr(rng, depth - 1, nvars)}};
}

RExpr random_int_expr(std::mt19937& rng, int depth, int nvars) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  if (depth <= 0 || pick(0, 4) == 0) {
    if (pick(0, 3) == 0) return {RExpr::Const, pick(-6, 6), {}};
    return {RExpr::Var, pick(0, nvars - 1), {}};
  }
  switch (pick(0, 5)) {
    case 0:
    case 1: return {RExpr::Add, 0, {random_int_expr(rng, depth - 1, nvars), random_int_expr(rng, depth - 1, nvars)}};
    case 2: return {RExpr::Mul, pick(-4, 6), {random_int_expr(rng, depth - 1, nvars)}};
    case 3: return {RExpr::Div, pick(1, 7), {random_int_expr(rng, depth - 1, nvars)}};
    case 4: return {RExpr::Mod, pick(1, 7), {random_int_expr(rng, depth - 1, nvars)}};
    default: return {RExpr::Mul, 1, {random_bool_expr(rng, depth - 1, nvars)}};
  }
}

}  // namespace

TEST(Symbolic, RandomExpressionsMatchDirectEvaluation) {
  std::mt19937 rng(7);
  int nontrivial = 0;
  for (int trial = 0; trial < 20000; trial++) {
    Shape sizes{std::uniform_int_distribution<int64_t>(1, 7)(rng), std::uniform_int_distribution<int64_t>(1, 5)(rng),
                std::uniform_int_distribution<int64_t>(1, 4)(rng)};
    RExpr r = random_int_expr(rng, 5, 3);
    Expr e = r.build(sizes);
    nontrivial += !e->is_const();
    bool ok = true;
    for_each_index(sizes, [&](const std::vector<int64_t>& v) {
      if (!ok) return;
      int64_t got = eval_expr(e, v), want = r.eval(v);
      if (got != want) {
        ADD_FAILURE() << "trial " << trial << ": " << to_string(e) << " at (" << v[0] << "," << v[1] << "," << v[2]
                      << ") = " << got << ", direct " << want;
        ok = false;
      }
    });
    if (!ok) break;
  }
  EXPECT_GT(nontrivial, 8000);
}

// evaluate: the engine's own evaluation at given values (the panel copies probe an index with
// it) agrees with the direct one wherever it answers; it answers wherever `e` does not compare.
TEST(Symbolic, EvaluateAtValues) {
  std::mt19937 rng(11);
  int answered = 0;
  for (int trial = 0; trial < 5000; trial++) {
    Shape sizes{5, 4, 3};
    RExpr r = random_int_expr(rng, 4, 3);
    Expr e = r.build(sizes);
    std::string text = to_string(e);
    const bool compares = text.find('<') != std::string::npos || text.find("&&") != std::string::npos;
    for_each_index(sizes, [&](const std::vector<int64_t>& v) {
      auto got = evaluate(e, {{0, v[0]}, {1, v[1]}, {2, v[2]}});
      if (!compares) ASSERT_TRUE(got.has_value()) << text;
      if (got) {
        answered++;
        ASSERT_EQ(*got, r.eval(v)) << text;
      }
    });
  }
  EXPECT_GT(answered, 100000);
  EXPECT_FALSE(evaluate(add(var(0, 4), var(1, 4)), {{0, 1}}).has_value()) << "variable 1 not given";
}

// Sums of div/mod terms that views produce: unflatten then reflatten.
TEST(Symbolic, UnflattenReflatten) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; trial++) {
    Shape shape;
    int r = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int d = 0; d < r; d++) shape.push_back(std::uniform_int_distribution<int64_t>(1, 5)(rng));
    int64_t n = numel(shape);
    int64_t off = std::uniform_int_distribution<int64_t>(-3, 3)(rng);
    Expr flat = add(var(0, n), cnst(off));
    auto sub = unflatten(flat, shape);
    Expr back = cnst(0);
    Shape st = contiguous_strides(shape);
    for (int d = 0; d < r; d++) back = add(back, mul(sub[size_t(d)], shape[size_t(d)] == 1 ? 0 : st[size_t(d)]));
    // the reflattened index is flat modulo n
    expect_equal_everywhere(back, {n}, [&](auto& v) { return floormod_ref(v[0] + off, n); }, shape_str(shape));
    if (off == 0) {  // (x // c) * c + x % c folds back to x
      EXPECT_TRUE(is_var(back, 0) || n == 1) << shape_str(shape) << " " << to_string(back);
    }
  }
}

// What views build: a linear index unflattened into a shape and recombined
// with arbitrary strides (exercises div/mod splitting and refolding).
TEST(Symbolic, RandomUnflattenWithStrides) {
  std::mt19937 rng(21);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int folded = 0;
  for (int trial = 0; trial < 4000; trial++) {
    Shape sizes{pick(1, 6), pick(1, 6), pick(1, 4)};
    std::vector<int64_t> coef{pick(-2, 8), pick(-2, 8), pick(-2, 8)};
    int64_t c0 = pick(-6, 6);
    Expr lin = cnst(c0);
    for (int v = 0; v < 3; v++) lin = add(lin, mul(var(v, sizes[size_t(v)]), coef[size_t(v)]));
    Shape shape;
    for (int d = 0, r = int(pick(1, 4)); d < r; d++) shape.push_back(pick(1, 6));
    Shape strides;
    for (size_t d = 0; d < shape.size(); d++) strides.push_back(pick(0, 2) ? contiguous_strides(shape)[d] * pick(1, 2) : pick(-4, 8));
    auto sub = unflatten(lin, shape);
    Expr e = cnst(0);
    for (size_t d = 0; d < shape.size(); d++) e = add(e, mul(sub[d], strides[d]));
    folded += count_ops(e, EOp::Div) + count_ops(e, EOp::Mod) == 0;
    bool ok = true;
    for_each_index(sizes, [&](const std::vector<int64_t>& v) {
      if (!ok) return;
      int64_t flat = c0 + coef[0] * v[0] + coef[1] * v[1] + coef[2] * v[2];
      int64_t want = 0, acc = 1;
      for (size_t d = shape.size(); d-- > 0;) {
        want += floormod_ref(floordiv_ref(flat, acc), shape[d]) * strides[d];
        acc *= shape[d];
      }
      int64_t got = eval_expr(e, v);
      if (got != want) {
        ADD_FAILURE() << to_string(lin) << " into " << shape_str(shape) << " strides " << shape_str(strides) << ": "
                      << to_string(e) << " = " << got << ", want " << want;
        ok = false;
      }
    });
    if (!ok) break;
  }
  EXPECT_GT(folded, 500);  // many of them simplify to plain linear indices
}

// A padded plane's index unravelled into the shape it was reshaped from (a
// batch norm feeding a padded max pool): the mask bounds the coordinates, so
// h and w come out without a division and n, c depend on the plane only.
TEST(Symbolic, MaskedCoordinatesUnravelWithoutDivision) {
  ShapeTracker p = ShapeTracker::from_shape({6, 5, 5}).pad({{0, 0}, {1, 1}, {1, 1}});  // (6, 7, 7)
  std::vector<Expr> idx{var(0, 6), var(1, 7), var(2, 7)};
  auto [flat, valid] = p.index_valid(idx);
  Expr n = floordiv(flat, 75), c = mod(floordiv(flat, 25), 3), h = mod(floordiv(flat, 5), 5), w = mod(flat, 5);
  for (const Expr& e : {h, w}) EXPECT_EQ(count_ops(e, EOp::Div) + count_ops(e, EOp::Mod), 0) << to_string(e);
  for (const Expr& e : {n, c}) EXPECT_FALSE(uses_vars(e, 1, 3)) << to_string(e);
  for_each_index({6, 7, 7}, [&](const std::vector<int64_t>& v) {
    if (!eval_expr(valid, v, false)) return;
    EXPECT_EQ(eval_expr(n, v), v[0] / 3);
    EXPECT_EQ(eval_expr(c, v), v[0] % 3);
    EXPECT_EQ(eval_expr(h, v), v[1] - 1);
    EXPECT_EQ(eval_expr(w, v), v[2] - 1);
  });
  // a remainder within one multiple of the divisor: 2*o + k - 1 for o >= 1
  Expr r = add(add(mul(var_range(0, 1, 56), 2), var(1, 3)), cnst(-1));
  EXPECT_TRUE(floordiv(r, 112)->is_const());
  EXPECT_EQ(count_ops(mod(add(r, mul(var(2, 4), 112)), 112), EOp::Mod), 0);
}
