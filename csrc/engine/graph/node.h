// An immutable lazy value: op, dtype, shape, sources and arguments. Nodes are
// hash-consed, so building the same expression twice yields the same node and
// common subexpressions are shared for free.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/dtype/dtype.h"
#include "engine/graph/ops.h"
#include "engine/runtime/buffer.h"
#include "engine/shape/small_vector.h"
#include "engine/shape/view.h"

namespace tiny {

struct Node;
struct Subgraph;
using Box = std::vector<std::pair<int64_t, int64_t>>;
using NodeRef = std::shared_ptr<const Node>;
// A node's sources, inline up to two (most ops take one or two): one allocation less per node,
// and graph walks find a node's sources beside it
using Sources = SmallVector<NodeRef, 2>;

struct NodeArgs {
  Scalar value;              // Const and Param value; Arange start
  Scalar value2;             // Arange step
  uint64_t seed = 0;         // Rand
  uint64_t offset = 0;       // Rand counter offset
  std::vector<int> axes;     // Reduce
  ReduceOp rop = ReduceOp::Sum;
  bool accumulate = false;   // Scatter: combine with `rop` instead of replacing
  // Reduce: a float32 sum of products whose factors may be rounded to TF32 where the
  // device multiplies on tensor cores (the user allowed it, as torch's allow_tf32 does
  // for CUDA); devices without them compute it exactly.
  bool tf32 = false;
  ShapeTracker st;           // View, Write (region over the flat base)
  BufferRef buffer;          // Buffer
  std::shared_ptr<const Subgraph> subgraph;  // Call
};

struct Node : std::enable_shared_from_this<Node> {
  // Provided, so that make_shared does not zero the whole node before the members' own
  // initializers run (a tenth of make_node's time); make_node sets op and dtype.
  Node() {}
  ~Node();  // leaves the hash-consing table

  Op op;
  DType dtype;

 private:
  // What graph walks (toposort, graph keys, replays) read of every node, first
  // and together: a training step's walk reads thousands of nodes from memory.
  // The toposort that visited this node last, and where it put it (a mark
  // instead of a visited set: 30 % of a cached step's graph key was hashing).
  mutable int32_t order_position_ = -1;
  mutable uint64_t visit_ = 0;
  mutable BufferRef realized_;  // a Buffer node's buffer too

 public:
  mutable Sources src;  // cleared once realized (see below)
  Shape shape;
  NodeArgs args;
  size_t hash = 0;            // of all the above and the sources (hash-consing)
  size_t signature_hash = 0;  // of op, dtype, shape and args but the buffer (graph keys)
  // Where the node came from, for debug tools: the torch op and the module
  // path (nullptr: none) current when it was made (see set_origin, set_scope).
  const char* origin = "";
  const std::string* scope = nullptr;

  // Once a schedule has computed this value, it lives here and the sources
  // are dropped. The value never changes; this only caches where it is.
  const BufferRef& realized() const { return realized_; }
  // `box` (see nonzero_box in codegen/index_walk.h) is kept: a padded copy still says where
  // its padding is once its sources are gone.
  void set_realized(BufferRef b, Box box = {}) const;
  // Per dim, the [lo, hi) outside of which a realized value is zero; empty: not known.
  const Box& realized_box() const { return realized_box_; }
  const Sources& sources() const { return src; }
  // Where the latest toposort (below) put this node; -1 when it did
  // not visit it. Graph walks run under engine_mutex, one at a time.
  int order_position() const;

  int64_t numel() const { return tiny::numel(shape); }
  std::string str() const;  // one line
  void print(std::ostream& os) const;  // str() into a stream
  void print(TextOut& os) const;  // the same text (graph keys: no stream per node)

 private:
  mutable Box realized_box_;
  bool in_table_ = false;
  friend std::vector<const Node*> toposort(const std::vector<NodeRef>& targets);
  friend NodeRef make_node(Op, DType, Shape, Sources, NodeArgs);
};

// While one exists, every node make_node returns on this thread stays alive: the scheduler keys
// its maps by node addresses, and a node it made and dropped would otherwise free its address
// for another one it makes next.
class KeepNodesAlive {
 public:
  KeepNodesAlive();
  ~KeepNodesAlive();
  KeepNodesAlive(const KeepNodesAlive&) = delete;
  KeepNodesAlive& operator=(const KeepNodesAlive&) = delete;

 private:
  friend NodeRef make_node(Op, DType, Shape, Sources, NodeArgs);
  std::vector<NodeRef> kept_;
  KeepNodesAlive* outer_;
};

// Unrealized nodes reachable from the targets, producers first (deterministic).
// Each node remembers its place until the next toposort (Node::order_position).
std::vector<const Node*> toposort(const std::vector<NodeRef>& targets);

// Per dim, whether `n` takes the same value all along it (a factor of a product broadcast
// there), as far as its views and the element-wise ops `depth` levels down show.
std::vector<bool> constant_dims(const Node& n, int depth = 4);

// Whether two nodes' arguments are equal, their buffers aside (floats bit for bit).
bool same_arguments(const NodeArgs& a, const NodeArgs& b);

// Creates (or finds the existing identical) node.
NodeRef make_node(Op op, DType dtype, Shape shape, Sources src, NodeArgs args = {});
// Live nodes in make_node's hash-consing table (a node leaves it as it dies).
size_t hash_cons_entries();
// The engine's one lock: graph building and scheduling happen under it, from
// any thread (autograd runs backward on its own thread).
std::recursive_mutex& engine_mutex();
// A label copied onto nodes made while it is set (the torch op being run); a
// string with static storage (a literal).
void set_origin(const char* origin);
const char* current_origin();
// The module path ("layer1.0.bn1") copied onto nodes made on this thread while
// it is set. Paths are interned: a node holds a pointer, not a copy.
void set_scope(const std::string& path);  // "" clears it
void set_scope(const std::string* interned);
const std::string* current_scope();

// A graph rewrite names each node it makes after the node it stands for (`as`), so debug tools
// and traces show the op and module that made the original; the origin and scope current
// before it come back when this goes.
class KeepOrigin {
 public:
  KeepOrigin() : origin_(current_origin()), scope_(current_scope()) {}
  ~KeepOrigin() {
    set_origin(origin_);
    set_scope(scope_);
  }
  KeepOrigin(const KeepOrigin&) = delete;
  KeepOrigin& operator=(const KeepOrigin&) = delete;
  void as(const Node& n) const {
    set_origin(n.origin);
    set_scope(n.scope);
  }

 private:
  const char* origin_;
  const std::string* scope_;
};

}  // namespace tiny
