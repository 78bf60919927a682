#include "engine/graph/node.h"
#include "engine/dtype/text_out.h"
#include "engine/graph/subgraph.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <unordered_set>
#include <vector>

namespace tiny {

bool same_arguments(const NodeArgs& a, const NodeArgs& b) {
  return a.value == b.value && a.value2 == b.value2 && a.seed == b.seed && a.offset == b.offset && a.axes == b.axes &&
         a.rop == b.rop && a.accumulate == b.accumulate && a.tf32 == b.tf32 && a.st == b.st &&
         a.subgraph == b.subgraph;
}

namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

size_t hash_scalar(const Scalar& s) {
  size_t h = s.kind;
  if (s.kind == Scalar::F) {
    uint64_t bits;
    static_assert(sizeof(bits) == sizeof(s.f));
    std::memcpy(&bits, &s.f, 8);
    return mix(h, bits);
  }
  return mix(h, size_t(s.i));
}

// What a node is besides its sources and buffer: graph keys name nodes by it (signature_hash).
size_t hash_signature(Op op, DType dtype, const Shape& shape, const NodeArgs& a) {
  size_t h = mix(size_t(op), size_t(dtype));
  for (auto d : shape) h = mix(h, size_t(d));
  h = mix(h, hash_scalar(a.value));
  h = mix(h, hash_scalar(a.value2));
  h = mix(h, a.seed);
  h = mix(h, a.offset);
  for (auto x : a.axes) h = mix(h, size_t(x));
  h = mix(h, size_t(a.rop));
  h = mix(h, size_t(a.accumulate));
  h = mix(h, size_t(a.tf32));
  h = mix(h, reinterpret_cast<size_t>(a.subgraph.get()));
  return mix(h, a.st.views().empty() ? 0 : a.st.hash());
}

size_t hash_node(size_t signature, const Sources& src, const NodeArgs& a) {
  size_t h = signature;
  for (auto& s : src) h = mix(h, reinterpret_cast<size_t>(s.get()));
  return mix(h, reinterpret_cast<size_t>(a.buffer.get()));
}

bool same(const Node& n, Op op, DType dtype, const Shape& shape, const Sources& src, const NodeArgs& a) {
  return n.op == op && n.dtype == dtype && n.shape == shape && n.src == src && same_arguments(n.args, a) &&
         n.args.buffer == a.buffer;
}

// Hash-consing table: open addressing over a power-of-two array of (hash, node) slots, probed
// linearly from a slot picked by Fibonacci hashing, so that a lookup reads one run of
// neighbouring slots (a node-based multimap cost two or three cache misses per node built: 13% of
// building a training step's graph). A node leaves the table as it dies (~Node): its slot becomes
// a tombstone, reused by the next insert that passes it. Lookups then meet live nodes only, and
// a dead node's memory goes back to malloc at once, where a table that kept dead nodes until a
// lookup met them held most of a training step's previous graph, handed out cold memory for the
// next, and scanned the dead on every rebuild. The array is rebuilt once used and tombstone
// slots fill half of it (amortized O(1) per node).
struct Table {
  // 16 bytes a slot, four to a cache line: a lookup is a cache miss, once per node made and
  // once per node freed. A live node is found by address; whether it is still alive, through
  // its weak reference to itself (Node::weak_from_this).
  struct Slot {
    size_t hash = 0;
    const Node* node = nullptr;  // null: empty; kTombstone: a node was here
  };
  static inline const Node* const kTombstone = reinterpret_cast<const Node*>(uintptr_t(1));
  // Taken by make_node (under engine_mutex) and by dying nodes, on whatever thread drops them;
  // recursive: a node found by a lookup may die in it, when another thread dropped it meanwhile.
  std::recursive_mutex mutex;
  std::vector<Slot> slots = std::vector<Slot>(1024);
  size_t full = 0, tombstones = 0;
  int shift = 64 - 10;  // 64 - log2(slots.size())

  size_t start(size_t h) const { return size_t((h * 0x9e3779b97f4a7c15ULL) >> shift); }
  // The live node equal to what `same` describes, or null; `free_slot` gets where to insert it.
  template <class Same>
  NodeRef find(size_t h, const Same& same, size_t* free_slot) {
    const size_t mask = slots.size() - 1;
    *free_slot = SIZE_MAX;
    for (size_t i = start(h);; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.node == nullptr) {
        if (*free_slot == SIZE_MAX) *free_slot = i;
        return nullptr;
      }
      if (s.node == kTombstone) {
        if (*free_slot == SIZE_MAX) *free_slot = i;
        continue;
      }
      if (s.hash != h) continue;
      // (null: dying on another thread, its destructor waiting for this lock to leave)
      if (NodeRef n = s.node->weak_from_this().lock())
        if (same(*n)) return n;
    }
  }
  void insert(size_t slot, size_t h, const Node* n) {
    Slot& s = slots[slot];
    if (s.node == kTombstone) tombstones--;
    s = Slot{h, n};
    full++;
  }
  void erase(const Node* n, size_t h) {
    const size_t mask = slots.size() - 1;
    for (size_t i = start(h);; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.node == nullptr) return;  // (not inserted: cannot happen)
      if (s.node != n) continue;
      s.node = kTombstone;
      full--;
      tombstones++;
      return;
    }
  }
  // Room for one more node: rebuilt (tombstones dropped, sized for the live nodes) when used and
  // tombstone slots reach half.
  bool reserve_one() {
    if (2 * (full + tombstones + 1) <= slots.size()) return false;
    std::vector<Slot> old;
    old.swap(slots);
    size_t size = 1024;
    while (size < 4 * (full + 1)) size *= 2;
    slots.assign(size, Slot{});
    shift = 64;
    for (size_t v = size; v > 1; v /= 2) shift--;
    full = tombstones = 0;
    const size_t mask = size - 1;
    for (Slot& s : old) {
      if (s.node == nullptr || s.node == kTombstone) continue;
      size_t i = start(s.hash);
      while (slots[i].node != nullptr) i = (i + 1) & mask;
      slots[i] = s;
      full++;
    }
    return true;
  }
};

Table& table() {
  static Table* t = new Table();
  return *t;
}

thread_local const char* g_origin = "";
thread_local KeepNodesAlive* g_keep_alive = nullptr;
thread_local const std::string* g_scope = nullptr;

}  // namespace

std::recursive_mutex& engine_mutex() {
  static std::recursive_mutex* m = new std::recursive_mutex();
  return *m;
}

void set_origin(const char* origin) { g_origin = origin ? origin : ""; }
const char* current_origin() { return g_origin; }

void set_scope(const std::string& path) {
  if (path.empty()) {
    g_scope = nullptr;
    return;
  }
  static std::mutex* m = new std::mutex();
  static auto* paths = new std::unordered_set<std::string>();  // never freed: nodes point into it
  std::lock_guard<std::mutex> g(*m);
  g_scope = &*paths->insert(path).first;
}
void set_scope(const std::string* interned) { g_scope = interned; }
const std::string* current_scope() { return g_scope; }

void Node::set_realized(BufferRef b, Box box) const {
  realized_ = std::move(b);
  realized_box_ = std::move(box);
  src.clear();  // the value is known; its history can be freed
}

KeepNodesAlive::KeepNodesAlive() : outer_(g_keep_alive) { g_keep_alive = this; }
KeepNodesAlive::~KeepNodesAlive() { g_keep_alive = outer_; }

NodeRef make_node(Op op, DType dtype, Shape shape, Sources src, NodeArgs args) {
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  const size_t signature = hash_signature(op, dtype, shape, args);
  size_t h = hash_node(signature, src, args);
  Table& t = table();
  std::lock_guard<std::recursive_mutex> tg(t.mutex);
  auto is_same = [&](const Node& n) { return same(n, op, dtype, shape, src, args); };
  size_t slot;
  if (NodeRef found = t.find(h, is_same, &slot)) {
    if (g_keep_alive) g_keep_alive->kept_.push_back(found);
    return found;
  }
  if (t.reserve_one()) t.find(h, is_same, &slot);  // rebuilt: its slot moved
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->src = std::move(src);
  n->args = std::move(args);
  if (op == Op::Buffer) n->realized_ = n->args.buffer;
  n->hash = h;
  n->signature_hash = signature;
  n->origin = g_origin;
  n->scope = g_scope;
  n->in_table_ = true;
  t.insert(slot, h, n.get());
  if (g_keep_alive) g_keep_alive->kept_.push_back(n);
  return n;
}

namespace {
// Sources of dying nodes, released one at a time by the outermost dying node on this thread: a
// chain's nodes would otherwise die inside each other's destructors, one stack frame per node
// (an unread loop `x = x + 1` of 300k steps overflowed the stack).
thread_local Sources* g_dying_sources = nullptr;
}  // namespace

Node::~Node() {
  if (op == Op::Call) forget_call(this);
  if (in_table_) {
    Table& t = table();
    std::lock_guard<std::recursive_mutex> g(t.mutex);
    t.erase(this, hash);
  }
  if (src.empty()) return;
  if (g_dying_sources) {  // an outer destructor releases them
    for (auto& s : src) g_dying_sources->push_back(std::move(s));
    src.clear();
    return;
  }
  Sources dying(std::move(src));
  g_dying_sources = &dying;
  while (!dying.empty()) {
    NodeRef last = std::move(dying.back());
    dying.pop_back();
    last.reset();  // may add its own sources
  }
  g_dying_sources = nullptr;
}

size_t hash_cons_entries() {
  Table& t = table();
  std::lock_guard<std::recursive_mutex> g(t.mutex);
  return t.full;
}

namespace {
uint64_t g_walk = 0;  // the latest toposort's mark
}  // namespace

int Node::order_position() const { return visit_ == g_walk ? order_position_ : -1; }

std::vector<const Node*> toposort(const std::vector<NodeRef>& targets) {
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  const uint64_t walk = ++g_walk;
  // (sized from the last walk's: a training step walks the same graph every time)
  static thread_local size_t last_size = 0;
  std::vector<const Node*> order;
  order.reserve(last_size);
  std::vector<std::pair<const Node*, size_t>> stack;
  stack.reserve(256);
  auto visit = [&](const Node* n) {
    if (n->visit_ == walk || n->realized()) return false;
    n->visit_ = walk;
    n->order_position_ = -1;  // on the stack, not placed yet
    stack.push_back({n, 0});
    // The walk is a chain of cache misses, one per node: fetch the sources' together
    for (auto& s : n->src) __builtin_prefetch(s.get());
    return true;
  };
  for (auto& t : targets) {
    if (!visit(t.get())) continue;
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->src.size()) {
        visit(n->src[i++].get());
      } else {
        n->order_position_ = int32_t(order.size());
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  last_size = order.size();
  return order;
}

std::string Node::str() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

namespace {
template <class Out>
void print_node(const Node& n, Out& os) {
  os << op_name(n.op) << " " << dtype_name(n.dtype);
  print_shape(os, n.shape);
  switch (n.op) {
    case Op::Const: case Op::Param:
      os << " ";
      n.args.value.print(os);
      break;
    case Op::Arange:
      os << " start=";
      n.args.value.print(os);
      os << " step=";
      n.args.value2.print(os);
      break;
    case Op::Rand: os << " seed=" << n.args.seed << " off=" << n.args.offset; break;
    case Op::Reduce: {
      os << " " << reduce_name(n.args.rop) << " axes=(";
      for (size_t i = 0; i < n.args.axes.size(); i++) os << (i ? "," : "") << n.args.axes[i];
      os << ")";
      if (n.args.tf32) os << " tf32";
      break;
    }
    case Op::View: case Op::Write:
      os << " ";
      n.args.st.print(os);
      break;
    case Op::Placeholder: case Op::CallOutput: os << " " << n.args.value.to_int(); break;
    case Op::Call: os << " subgraph " << n.args.subgraph->id; break;
    case Op::Scatter: os << (n.args.accumulate ? std::string(" ") + reduce_name(n.args.rop) : std::string(" REPLACE")); break;
    default: break;
  }
}
}  // namespace
void Node::print(std::ostream& os) const { print_node(*this, os); }
void Node::print(TextOut& os) const { print_node(*this, os); }

std::vector<bool> constant_dims(const Node& n, int depth) {
  std::vector<bool> out(n.shape.size(), false);
  if (n.op == Op::Const || n.op == Op::Param) return std::vector<bool>(n.shape.size(), true);
  if (n.realized()) return out;
  if (n.op == Op::View) {
    const View& v = n.args.st.views().back();
    for (size_t d = 0; d < out.size(); d++)
      out[d] = n.shape[d] == 1 || (v.strides[d] == 0 && (!v.mask || ((*v.mask)[d].first == 0 && (*v.mask)[d].second == n.shape[d])));
    return out;
  }
  if ((is_elementwise(n.op) || n.op == Op::Cast) && depth > 0) {
    out.assign(n.shape.size(), true);
    for (auto& s : n.src) {
      auto c = constant_dims(*s, depth - 1);
      for (size_t d = 0; d < out.size(); d++) out[d] = out[d] && c[d];
    }
  }
  return out;
}

}  // namespace tiny
