// How a kernel's expression is evaluated, index-wise: a VIEW maps the index
// of its output to the index of its source, a REDUCE opens loops over its
// axes, a GATHER reads its source at a runtime index. The code generator and
// the scheduler's cost model both walk expressions this way.
#pragma once
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/graph/node.h"

namespace tiny {

struct SourceIndex {
  std::vector<Expr> idx;  // into the view's source
  Expr valid;             // the view's mask at this index
};
SourceIndex view_source_index(const Node* view, const std::vector<Expr>& idx);

// One comparison a mask requires: holds iff (ge ? x >= c : x < c).
struct MaskAtom {
  Expr x;
  int64_t c;
  bool ge;
};
// The masks of the views `n` is read through at `idx`, down to the first node that is neither
// a view nor a stored copy (a convolution's padded operand, stored by the scheduler, still
// names the pad it holds, and so does its realized_box once stored), as the comparisons they
// require: where one fails, `n` is zero.
std::vector<MaskAtom> zero_masks(const Node* n, std::vector<Expr> idx);
// Per dim, the [lo, hi) that the atoms of zero_masks at `n`'s own index bound it to (a padded
// copy's interior); empty where they bound no dim. Kept on the node when it is realized.
Box nonzero_box(const Node* n);
// zero_masks at `n`'s own index as text: a kernel that skips what they zero differs by it
// from one reading a plain buffer (Kernel::key).
std::string zero_masks_key(const Node* n);

// A key naming one evaluation: node and index context.
std::string context_key(const Node* n, const std::vector<Expr>& idx, const Expr& valid);

class IndexWalker {
 public:
  std::function<bool(const Node*)> is_leaf;            // loads: not descended
  std::function<Expr(int64_t size)> fresh_var;         // a new loop (or runtime) variable
  // Called once per distinct (node, context); return false to not descend.
  std::function<bool(const Node*, const std::vector<Expr>&, const Expr&)> visit;
  std::function<void(const Node*)> leave;  // optional: after a descended node's sources
  // optional: each leaf reached, with its context
  std::function<void(const Node*, const std::vector<Expr>&, const Expr&)> on_leaf;

  void walk(const Node* n, const std::vector<Expr>& idx, const Expr& valid);

 private:
  void descend(const Node* n, const std::vector<Expr>& idx, const Expr& valid);
  std::unordered_set<std::string> seen_;
};

// Reduces under `roots` (not below another one found) whose index context
// uses no variable numbered `min_id` or above: the loops about to open. A
// code generator computes these before the loops and finds them in its memo
// inside, so a row statistic inside a reduce (argmax's max) costs one pass
// per row, not one per element.
struct ReduceContext {
  const Node* node;
  std::vector<Expr> idx;
  Expr valid;
};
std::vector<ReduceContext> hoistable_reduces(const std::vector<const Node*>& roots, const std::vector<Expr>& idx,
                                             const Expr& valid, int min_id,
                                             const std::function<bool(const Node*)>& is_leaf,
                                             const std::function<Expr(int64_t)>& fresh_var);

}  // namespace tiny
