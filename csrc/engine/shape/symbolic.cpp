#include "engine/shape/symbolic.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>

namespace tiny {
namespace {

int64_t floordiv_i(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

Expr make(EOp op, int64_t value, int64_t vmin, int64_t vmax, std::vector<Expr> src) {
  auto n = std::make_shared<ExprNode>();
  n->op = op;
  n->value = value;
  n->vmin = vmin;
  n->vmax = vmax;
  n->src = std::move(src);
  return n;
}

// Structural equality (views rebuild equal subexpressions as new nodes).
bool same_expr(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (a->op != b->op || a->value != b->value || a->src.size() != b->src.size()) return false;
  if (a->op == EOp::Bounded && (a->vmin != b->vmin || a->vmax != b->vmax)) return false;
  for (size_t i = 0; i < a->src.size(); i++)
    if (!same_expr(a->src[i], b->src[i])) return false;
  return true;
}

// A sum as (term, coefficient) pairs plus a constant.
struct Linear {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;
  void add_term(const Expr& e, int64_t c) {
    if (c == 0) return;
    if (e->is_const()) { constant += e->value * c; return; }
    if (e->op == EOp::Add) { for (auto& s : e->src) add_term(s, c); return; }
    if (e->op == EOp::Mul) { add_term(e->src[0], c * e->value); return; }
    for (auto& t : terms) {
      if (same_expr(t.first, e)) { t.second += c; return; }
    }
    terms.emplace_back(e, c);
  }
  // (y // b) * (m*b) + (y % b) * m == y * m: an unflattened index flattened
  // again (a view over a view) is the index itself.
  void fold_divmod() {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < terms.size() && !changed; i++) {
        const Expr mod_e = terms[i].first;
        int64_t m = terms[i].second;
        if (mod_e->op != EOp::Mod || m == 0) continue;
        const Expr y = mod_e->src[0];
        int64_t b = mod_e->value;
        for (size_t j = 0; j < terms.size(); j++) {
          const Expr& d = terms[j].first;
          if (j == i || d->op != EOp::Div || terms[j].second != m * b) continue;
          // y // b, where y may itself be x // c (then it reads x // (c*b))
          bool match = y->op == EOp::Div ? d->value == y->value * b && same_expr(d->src[0], y->src[0])
                                         : d->value == b && same_expr(d->src[0], y);
          if (!match) continue;
          terms.erase(terms.begin() + std::ptrdiff_t(std::max(i, j)));
          terms.erase(terms.begin() + std::ptrdiff_t(std::min(i, j)));
          add_term(y, m);
          changed = true;
          break;
        }
      }
    }
  }
  Expr build() {
    fold_divmod();
    std::vector<Expr> src;
    int64_t lo = constant, hi = constant;
    for (auto& t : terms) {
      if (t.second == 0) continue;
      Expr m = t.second == 1 ? t.first
                             : make(EOp::Mul, t.second,
                                    std::min(t.first->vmin * t.second, t.first->vmax * t.second),
                                    std::max(t.first->vmin * t.second, t.first->vmax * t.second), {t.first});
      lo += m->vmin;
      hi += m->vmax;
      src.push_back(m);
    }
    if (src.empty()) return cnst(constant);
    if (constant != 0) src.push_back(cnst(constant));
    if (src.size() == 1) return src[0];
    return make(EOp::Add, 0, lo, hi, std::move(src));
  }
};

// Finds g dividing c (from a term's coefficient) with l == g*q + r and
// 0 <= r < g; then l // c == q // (c/g) and l % c == g*(q % (c/g)) + r.
bool split_gcd(const Linear& l, int64_t c, int64_t& g, Expr& q, Expr& r) {
  for (auto& t : l.terms) {
    int64_t cand = std::gcd(c, t.second < 0 ? -t.second : t.second);
    if (cand <= 1 || cand >= c) continue;
    Linear lq, lr;
    for (auto& u : l.terms) {
      if (u.second % cand == 0) lq.add_term(u.first, u.second / cand);
      else lr.add_term(u.first, u.second);
    }
    lq.constant = floordiv_i(l.constant, cand);
    lr.constant = l.constant - lq.constant * cand;
    Expr rr = lr.build();
    int64_t q0 = floordiv_i(rr->vmin, cand);  // the remainder's whole multiples of g move to q
    if (q0 != floordiv_i(rr->vmax, cand)) continue;
    lq.constant += q0;
    rr = add(rr, cnst(-q0 * cand));
    g = cand;
    q = lq.build();
    r = rr;
    return true;
  }
  return false;
}

}  // namespace

Expr cnst(int64_t v) { return make(EOp::Const, v, v, v, {}); }

Expr var(int id, int64_t size) {
  if (size <= 1) return cnst(0);
  return make(EOp::Var, id, 0, size - 1, {});
}

std::vector<Expr> vars_of(const std::vector<int64_t>& sizes) {
  std::vector<Expr> idx;
  for (size_t d = 0; d < sizes.size(); d++) idx.push_back(var(int(d), sizes[d]));
  return idx;
}

Expr var_range(int id, int64_t lo, int64_t hi) {
  // kept a Var even for one value: callers read its id
  return make(EOp::Var, id, lo, std::max(lo, hi - 1), {});
}

Expr bounded(const Expr& e, int64_t lo, int64_t hi) {
  lo = std::max(lo, e->vmin);
  hi = std::min(hi - 1, e->vmax);
  if (lo == e->vmin && hi == e->vmax) return e;  // nothing learned
  if (lo >= hi) return cnst(lo);                 // one value (or none: never used)
  if (e->op == EOp::Bounded) return make(EOp::Bounded, 0, lo, hi, e->src);
  return make(EOp::Bounded, 0, lo, hi, {e});
}

Expr add(const Expr& a, const Expr& b) {
  if (a->is_const() && b->is_const()) return cnst(a->value + b->value);
  Linear l;
  l.add_term(a, 1);
  l.add_term(b, 1);
  return l.build();
}

Expr mul(const Expr& a, int64_t c) {
  if (c == 0) return cnst(0);
  if (c == 1) return a;
  if (a->is_const()) return cnst(a->value * c);
  Linear l;
  l.add_term(a, c);
  return l.build();
}

Expr floordiv(const Expr& a, int64_t c) {
  if (c == 1) return a;
  if (a->is_const()) return cnst(floordiv_i(a->value, c));
  int64_t lo = floordiv_i(a->vmin, c), hi = floordiv_i(a->vmax, c);
  if (lo == hi) return cnst(lo);
  if (a->op == EOp::Div) return floordiv(a->src[0], a->value * c);
  // Split a sum into the part divisible by c and a remainder; if the remainder
  // provably stays within [0, c) the division distributes.
  Linear l;
  l.add_term(a, 1);
  Linear quotient, rest;
  for (auto& t : l.terms) {
    if (t.second % c == 0) quotient.add_term(t.first, t.second / c);
    else rest.add_term(t.first, t.second);
  }
  quotient.constant = floordiv_i(l.constant, c);
  rest.constant = l.constant - quotient.constant * c;
  Expr r = rest.build();
  // the remainder within one multiple of c: [q0*c, (q0+1)*c) (2*ow + kw - 1, ow >= 1)
  if (int64_t q0 = floordiv_i(r->vmin, c); q0 == floordiv_i(r->vmax, c)) return add(quotient.build(), cnst(q0));
  // (c*q + r) // c == q + r // c
  if (!quotient.terms.empty() || quotient.constant != 0) return add(quotient.build(), floordiv(r, c));
  int64_t g;
  Expr q, rr;
  if (split_gcd(l, c, g, q, rr)) return floordiv(q, c / g);
  return make(EOp::Div, c, lo, hi, {a});
}

Expr mod(const Expr& a, int64_t c) {
  if (c == 1) return cnst(0);
  if (a->is_const()) return cnst(a->value - floordiv_i(a->value, c) * c);
  if (a->vmin >= 0 && a->vmax < c) return a;
  Linear l;
  l.add_term(a, 1);
  Linear rest;
  for (auto& t : l.terms) {
    int64_t k = ((t.second % c) + c) % c;
    if (k) rest.add_term(t.first, k);
  }
  rest.constant = ((l.constant % c) + c) % c;
  Expr r = rest.build();
  if (int64_t q0 = floordiv_i(r->vmin, c); q0 == floordiv_i(r->vmax, c)) return add(r, cnst(-q0 * c));
  int64_t g;
  Expr q, rr;
  if (split_gcd(rest, c, g, q, rr)) return add(mul(mod(q, c / g), g), rr);
  return make(EOp::Mod, c, 0, c - 1, {r});
}

Expr lt(const Expr& a, int64_t c) {
  if (a->vmax < c) return cnst(1);
  if (a->vmin >= c) return cnst(0);
  return make(EOp::Lt, c, 0, 1, {a});
}

Expr ge(const Expr& a, int64_t c) {
  if (a->vmin >= c) return cnst(1);
  if (a->vmax < c) return cnst(0);
  // a >= c  <=>  !(a < c)  <=>  (1 - lt(a, c))
  return add(cnst(1), mul(make(EOp::Lt, c, 0, 1, {a}), -1));
}

Expr land(const Expr& a, const Expr& b) {
  if (is_false(a) || is_false(b)) return cnst(0);
  if (is_true(a)) return b;
  if (is_true(b)) return a;
  return make(EOp::And, 0, 0, 1, {a, b});
}

bool is_true(const Expr& e) { return e->vmin == 1 && e->vmax == 1; }
bool is_false(const Expr& e) { return e->vmin == 0 && e->vmax == 0; }

bool uses_vars(const Expr& e, int lo, int hi) {
  if (e->op == EOp::Var) return e->value >= lo && e->value < hi;
  for (auto& s : e->src) if (uses_vars(s, lo, hi)) return true;
  return false;
}

bool multiple_of(const Expr& e, int64_t m) {
  switch (e->op) {
    case EOp::Const: return e->value % m == 0;
    case EOp::Mul: return e->value % m == 0 || multiple_of(e->src[0], m / std::gcd(m, e->value < 0 ? -e->value : e->value));
    case EOp::Add:
      for (auto& s : e->src)
        if (!multiple_of(s, m)) return false;
      return true;
    case EOp::Bounded: return multiple_of(e->src[0], m);
    default: return m == 1;
  }
}

std::optional<int64_t> linear_coefficient(const Expr& e, int id) {
  switch (e->op) {
    case EOp::Const: return 0;
    case EOp::Var: return e->value == id ? 1 : 0;
    case EOp::Add: {
      int64_t total = 0;
      for (auto& s : e->src) {
        auto c = linear_coefficient(s, id);
        if (!c) return std::nullopt;
        total += *c;
      }
      return total;
    }
    case EOp::Bounded: return linear_coefficient(e->src[0], id);
    case EOp::Mul: {
      auto c = linear_coefficient(e->src[0], id);
      if (!c) return std::nullopt;
      return *c * e->value;
    }
    default:
      return uses_vars(e, id, id + 1) ? std::nullopt : std::optional<int64_t>(0);
  }
}

std::optional<int64_t> evaluate(const Expr& e, const std::unordered_map<int, int64_t>& value) {
  switch (e->op) {
    case EOp::Const: return e->value;
    case EOp::Var: {
      auto it = value.find(int(e->value));
      if (it == value.end()) return std::nullopt;
      return it->second;
    }
    case EOp::Bounded: return evaluate(e->src[0], value);
    case EOp::Add: {
      int64_t sum = 0;
      for (auto& t : e->src) {
        auto v = evaluate(t, value);
        if (!v) return std::nullopt;
        sum += *v;
      }
      return sum;
    }
    case EOp::Mul:
    case EOp::Div:
    case EOp::Mod: {
      auto v = evaluate(e->src[0], value);
      if (!v) return std::nullopt;
      if (e->op == EOp::Mul) return *v * e->value;
      if (e->op == EOp::Div) return floordiv_i(*v, e->value);
      return *v - floordiv_i(*v, e->value) * e->value;
    }
    default: return std::nullopt;
  }
}

void collect_vars(const Expr& e, std::vector<int>& ids) {
  if (e->op == EOp::Var) ids.push_back(int(e->value));
  for (auto& s : e->src) collect_vars(s, ids);
}

// Appends e's text to `out` (to_string; index memo keys build a lot of these, and a stream
// per expression was most of scheduling a long graph).
void append_text(std::string& out, const Expr& e) {
  auto number = [&](int64_t v) {
    char buf[24];
    out.append(buf, size_t(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
  };
  switch (e->op) {
    case EOp::Const: number(e->value); break;
    case EOp::Var: out += 'i'; number(e->value); break;
    case EOp::Add:
      out += '(';
      for (size_t i = 0; i < e->src.size(); i++) {
        if (i) out += '+';
        append_text(out, e->src[i]);
      }
      out += ')';
      break;
    case EOp::Mul: append_text(out, e->src[0]); out += '*'; number(e->value); break;
    case EOp::Div: out += '('; append_text(out, e->src[0]); out += "//"; number(e->value); out += ')'; break;
    case EOp::Mod: out += '('; append_text(out, e->src[0]); out += '%'; number(e->value); out += ')'; break;
    case EOp::Lt: out += '('; append_text(out, e->src[0]); out += '<'; number(e->value); out += ')'; break;
    case EOp::And:
      out += '(';
      append_text(out, e->src[0]);
      out += "&&";
      append_text(out, e->src[1]);
      out += ')';
      break;
    case EOp::Bounded: append_text(out, e->src[0]); break;  // the same value (index memo keys)
  }
}

std::string to_string(const Expr& e) {
  std::string out;
  append_text(out, e);
  return out;
}

}  // namespace tiny
