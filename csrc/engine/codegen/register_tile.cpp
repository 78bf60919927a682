#include "engine/codegen/register_tile.h"

#include "engine/codegen/index_walk.h"

namespace tiny {

Expr row_major(const std::vector<Expr>& idx, const Shape& shape) {
  Expr flat = cnst(0);
  Shape st = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); d++) flat = add(flat, mul(idx[d], st[d]));
  return flat;
}

std::vector<const Node*> output_roots(const Kernel& k) {
  std::vector<const Node*> r;
  for (auto& o : k.outputs) {
    r.push_back(o.value.get());
    if (o.scatter_index) r.push_back(o.scatter_index.get());
  }
  return r;
}

std::optional<TiledReduce> find_tiled_reduce(const Kernel& k, const std::vector<Expr>& idx, int jid,
                                             const std::function<Expr(int64_t)>& fresh_var) {
  std::vector<TiledReduce> found;
  bool other = false;
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = fresh_var;
  w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
    if (n->op == Op::Gather) other = true;
    if (n->op != Op::Reduce) return true;
    bool inner = jid < 0 || uses_vars(v, jid, 1 << 30);
    for (auto& e : ix) inner |= uses_vars(e, jid, 1 << 30);
    if (inner) found.push_back({n, ix, v});
    return false;
  };
  for (auto* r : output_roots(k)) w.walk(r, idx, cnst(1));
  if (other || found.size() != 1) return std::nullopt;
  return found[0];
}

namespace {

// Calls `fn` with the flat index of every load under the reduce's source, the reduce's axes
// walked as fresh variables, and the load's node; `kid` is set to the innermost axis' id (-1:
// nothing to reduce).
// False when a gather or random numbers sit under the reduce (no plain loads to tile).
bool each_load_index(const Kernel& k, const TiledReduce& c, const std::function<Expr(int64_t)>& fresh_var, int* kid,
                     int64_t* inner_extent, const std::function<void(const Expr&, const Node*)>& fn) {
  const Node* src = c.reduce->src[0].get();
  std::vector<Expr> sub = c.idx;
  *kid = -1;
  for (int a : c.reduce->args.axes)
    if (src->shape[a] > 1) {
      sub[a] = fresh_var(src->shape[a]);
      *kid = int(sub[a]->value);
      *inner_extent = src->shape[a];
    }
  if (*kid < 0) return false;
  bool plain = true;
  IndexWalker w;
  w.is_leaf = [&](const Node* n) { return k.loads.count(n) > 0; };
  w.fresh_var = fresh_var;
  w.visit = [&](const Node* n, const std::vector<Expr>&, const Expr&) {
    if (n->op == Op::Gather || n->op == Op::Rand) plain = false;
    return plain && n->op != Op::Reduce;  // nested reduces are hoisted per tile
  };
  w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr&) { fn(row_major(ix, n->shape), n); };
  w.walk(src, sub, c.valid);
  return plain;
}

}  // namespace

bool worth_tiling(const Kernel& k, const TiledReduce& c, int jid, TileKind kind,
                  const std::function<Expr(int64_t)>& fresh_var) {
  constexpr int64_t kShortReduce = 16;  // reduce loops too short to vectorize
  int kid = -1;
  int64_t inner_extent = 0;
  bool whole_vectors = true, helps = false, unit_j = false, reused = false;
  bool plain = each_load_index(k, c, fresh_var, &kid, &inner_extent, [&](const Expr& flat, const Node*) {
    auto sj = linear_coefficient(flat, jid), sk = linear_coefficient(flat, kid);
    if (!sj || (*sj != 0 && *sj != 1)) whole_vectors = false;
    if (sk && *sk != 1 && !(sj && *sj == 0)) helps = true;
    if (sj && *sj == 1) unit_j = true;
    if (sj && *sj == 0) reused = true;
  });
  if (!plain) return false;
  if (kind == TileKind::Scalars) return reused;
  return whole_vectors && (helps || (unit_j && inner_extent < kShortReduce));
}

int tile_row_dim(const Kernel& k, const TiledReduce& c, const std::vector<Expr>& idx, int d,
                 const std::function<Expr(int64_t)>& fresh_var) {
  for (int q = d - 1; q >= 0; q--) {
    if (idx[size_t(q)]->op != EOp::Var || idx[size_t(q)]->vmax < 1) continue;  // a unit dim
    int qid = int(idx[size_t(q)]->value), jid = int(idx[size_t(d)]->value), kid = -1;
    int64_t inner_extent = 0;
    bool reused = false;
    bool plain = each_load_index(k, c, fresh_var, &kid, &inner_extent, [&](const Expr& flat, const Node*) {
      auto sj = linear_coefficient(flat, jid), sq = linear_coefficient(flat, qid);
      if (sq && *sq == 0 && !(sj && *sj == 0)) reused = true;
    });
    if (!plain) return -1;
    if (reused) return q;
  }
  return -1;
}

bool has_tileable_reduce(const Kernel& k) {
  int next = 0;
  auto fresh = [&](int64_t size) { return var(next++, size); };
  std::vector<Expr> idx;
  for (int64_t extent : k.shape) idx.push_back(fresh(extent));  // dim d is var d
  auto c = find_tiled_reduce(k, idx, -1, fresh);
  if (!c) return false;
  // A load that stays put along an output dim but moves along the reduce: a tile reads it
  // once for all its columns. Not a batch norm's per-channel scale (it stays put along both)
  // nor a bias of a few elements (no more than a vector's worth of cache lines).
  constexpr int64_t kSmallLeaf = 1024;
  int kid = -1;
  int64_t inner_extent = 0;
  bool reused = false;
  bool plain = each_load_index(k, *c, fresh, &kid, &inner_extent, [&](const Expr& flat, const Node* leaf) {
    auto sk = linear_coefficient(flat, kid);
    if ((sk && *sk == 0) || numel(leaf->shape) < kSmallLeaf) return;
    for (size_t d = 0; d < idx.size(); d++) {
      auto sj = linear_coefficient(flat, int(d));
      if (k.shape[d] > 1 && sj && *sj == 0) reused = true;
    }
  });
  return plain && reused;
}

}  // namespace tiny
