// Integer index expressions with value ranges. Views produce them, code
// generators render them; simplification happens as they are built, so a
// permute or an expand never leaves a division or modulo behind.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tiny {

// Bounded: its one operand, known to lie in [vmin, vmax] wherever the value is used.
enum class EOp : uint8_t { Const, Var, Add, Mul, Div, Mod, Lt, And, Bounded };

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  EOp op;
  int64_t value = 0;  // Const: the value; Var: the id; Mul/Div/Mod/Lt: the constant operand
  int64_t vmin = 0, vmax = 0;  // inclusive range of values
  std::vector<Expr> src;
  bool is_const() const { return op == EOp::Const; }
};

Expr cnst(int64_t v);
// A loop variable `id` ranging over [0, size).
Expr var(int id, int64_t size);
// One variable per dim of `sizes`, numbered from 0: an index over all of a shape.
std::vector<Expr> vars_of(const std::vector<int64_t>& sizes);
// Variable `id` known to lie in [lo, hi) (a loop split at mask boundaries):
// comparisons decided by that range fold to constants.
Expr var_range(int id, int64_t lo, int64_t hi);
// `e`, taken to lie in [lo, hi): a masked view's coordinate, whose index is
// only used where the mask holds. Divisions and modulos simplify by that
// range (a padded plane's coordinates unravel without a division); the
// mask itself must be computed from `e`, not from this.
Expr bounded(const Expr& e, int64_t lo, int64_t hi);
Expr add(const Expr& a, const Expr& b);
Expr mul(const Expr& a, int64_t c);
Expr floordiv(const Expr& a, int64_t c);  // floor division, c > 0
Expr mod(const Expr& a, int64_t c);       // floor modulo, c > 0
Expr lt(const Expr& a, int64_t c);        // 1 if a < c else 0
Expr ge(const Expr& a, int64_t c);        // 1 if a >= c else 0
Expr land(const Expr& a, const Expr& b);  // logical and of two 0/1 expressions

bool is_true(const Expr& e);   // provably 1
bool is_false(const Expr& e);  // provably 0
// Whether any variable with an id in [lo, hi) appears.
bool uses_vars(const Expr& e, int lo, int hi);
// The coefficient of variable `id` when `e` is linear in it (0 if absent);
// nullopt when the variable appears inside a division, modulo or comparison.
std::optional<int64_t> linear_coefficient(const Expr& e, int id);
// Whether `e` is provably a multiple of `m` > 0 wherever it is used (constants,
// products by a multiple, sums of multiples).
bool multiple_of(const Expr& e, int64_t m);
// `e` at the variables' values (id -> value; every variable of `e` given), or nothing where a
// variable is missing or `e` compares.
std::optional<int64_t> evaluate(const Expr& e, const std::unordered_map<int, int64_t>& value);
// Ids of the variables in `e` (appended, possibly repeated).
void collect_vars(const Expr& e, std::vector<int>& ids);
std::string to_string(const Expr& e);
void append_text(std::string& out, const Expr& e);  // to_string(e), appended

}  // namespace tiny
