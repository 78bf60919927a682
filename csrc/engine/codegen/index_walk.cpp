#include "engine/codegen/index_walk.h"

namespace tiny {

SourceIndex view_source_index(const Node* view, const std::vector<Expr>& idx) {
  auto [flat, valid] = view->args.st.index_valid(idx);
  return {unflatten(flat, view->src[0]->shape), valid};
}

namespace {
// The comparisons a 0/1 expression requires (the conjuncts that are comparisons).
void conjuncts(const Expr& e, std::vector<MaskAtom>& out) {
  if (e->op == EOp::And) {
    for (auto& s : e->src) conjuncts(s, out);
  } else if (e->op == EOp::Lt) {
    out.push_back({e->src[0], e->value, false});
  } else if (e->op == EOp::Add && e->src.size() == 2) {  // ge(x, c) is 1 - lt(x, c)
    for (size_t k = 0; k < 2; k++) {
      const Expr& one = e->src[k];
      const Expr& neg = e->src[1 - k];
      if (one->op == EOp::Const && one->value == 1 && neg->op == EOp::Mul && neg->value == -1 &&
          neg->src[0]->op == EOp::Lt)
        out.push_back({neg->src[0]->src[0], neg->src[0]->value, true});
    }
  }
}
}  // namespace

std::vector<MaskAtom> zero_masks(const Node* n, std::vector<Expr> idx) {
  std::vector<MaskAtom> atoms;
  for (; (n->op == Op::View || n->op == Op::Contiguous) && !n->src.empty(); n = n->src[0].get()) {
    if (n->op == Op::View) {
      SourceIndex s = view_source_index(n, idx);
      conjuncts(s.valid, atoms);
      idx = std::move(s.idx);
    }
  }
  // a node realized by an earlier schedule has dropped its sources; its box still holds
  const Box& box = n->realized_box();
  for (size_t d = 0; d < box.size(); d++) {
    if (box[d].first > 0) atoms.push_back({idx[d], box[d].first, true});
    if (box[d].second < n->shape[d]) atoms.push_back({idx[d], box[d].second, false});
  }
  return atoms;
}

Box nonzero_box(const Node* n) {
  if (n->op != Op::View && n->op != Op::Contiguous) return n->realized_box();
  Box box;
  for (int64_t s : n->shape) box.push_back({0, s});
  bool narrowed = false;
  for (const MaskAtom& at : zero_masks(n, vars_of(n->shape))) {
    const Expr* x = &at.x;
    while ((*x)->op == EOp::Bounded) x = &(*x)->src[0];
    // the others are dropped: fewer zeros known, none wrong
    if ((*x)->op != EOp::Var || size_t((*x)->value) >= box.size()) continue;
    auto& [lo, hi] = box[size_t((*x)->value)];
    if (at.ge) lo = std::max(lo, at.c);
    else hi = std::min(hi, at.c);
    narrowed = true;
  }
  return narrowed ? box : Box{};
}

std::string zero_masks_key(const Node* n) {
  std::string key;
  for (const MaskAtom& at : zero_masks(n, vars_of(n->shape)))
    key += (at.ge ? "[" : "<") + to_string(at.x) + "," + std::to_string(at.c);
  return key;
}

std::string context_key(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
  std::string key(reinterpret_cast<const char*>(&n), sizeof n);  // the node's address, as bytes
  for (auto& e : idx) {
    key += ',';
    append_text(key, e);
  }
  key += '|';
  append_text(key, valid);
  return key;
}

void IndexWalker::walk(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
  if (is_leaf(n)) {
    if (on_leaf) on_leaf(n, idx, valid);
    return;
  }
  if (!seen_.insert(context_key(n, idx, valid)).second) return;
  if (!visit(n, idx, valid)) return;
  descend(n, idx, valid);
  if (leave) leave(n);
}

void IndexWalker::descend(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
  switch (n->op) {
    case Op::View: {
      SourceIndex s = view_source_index(n, idx);
      if (!is_false(s.valid)) walk(n->src[0].get(), s.idx, land(valid, s.valid));
      return;
    }
    case Op::Reduce: {
      const Node* src = n->src[0].get();
      std::vector<Expr> sub = idx;
      for (int a : n->args.axes)
        if (src->shape[a] > 1) sub[a] = fresh_var(src->shape[a]);
      walk(src, sub, valid);
      return;
    }
    case Op::Gather: {
      walk(n->src[1].get(), idx, valid);
      const Node* src = n->src[0].get();
      walk(src, unflatten(fresh_var(std::max<int64_t>(1, src->numel())), src->shape), valid);
      return;
    }
    default:
      for (auto& s : n->src) walk(s.get(), idx, valid);
  }
}

std::vector<ReduceContext> hoistable_reduces(const std::vector<const Node*>& roots, const std::vector<Expr>& idx,
                                             const Expr& valid, int min_id,
                                             const std::function<bool(const Node*)>& is_leaf,
                                             const std::function<Expr(int64_t)>& fresh_var) {
  std::vector<ReduceContext> found;
  IndexWalker w;
  w.is_leaf = is_leaf;
  w.fresh_var = fresh_var;
  w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    if (n->op != Op::Reduce) return true;
    bool inner = uses_vars(v, min_id, 1 << 30);
    for (auto& e : ix) inner |= uses_vars(e, min_id, 1 << 30);
    if (inner) return true;
    found.push_back({n, ix, v});
    return false;
  };
  for (auto* r : roots) w.walk(r, idx, valid);
  return found;
}

}  // namespace tiny
