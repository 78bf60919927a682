#include "engine/graph/node.h"
#include "engine/dtype/text_out.h"

#include <cstring>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace tiny {
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

size_t hash_node(Op op, DType dtype, const Shape& shape, const std::vector<NodeRef>& src, const NodeArgs& a) {
  size_t h = mix(size_t(op), size_t(dtype));
  for (auto d : shape) h = mix(h, size_t(d));
  for (auto& s : src) h = mix(h, reinterpret_cast<size_t>(s.get()));
  h = mix(h, hash_scalar(a.value));
  h = mix(h, hash_scalar(a.value2));
  h = mix(h, a.seed);
  h = mix(h, a.offset);
  for (auto x : a.axes) h = mix(h, size_t(x));
  h = mix(h, size_t(a.rop));
  h = mix(h, size_t(a.accumulate));
  h = mix(h, size_t(a.tf32));
  h = mix(h, a.st.views().empty() ? 0 : a.st.hash());
  h = mix(h, reinterpret_cast<size_t>(a.buffer.get()));
  return h;
}

bool same(const Node& n, Op op, DType dtype, const Shape& shape, const std::vector<NodeRef>& src, const NodeArgs& a) {
  return n.op == op && n.dtype == dtype && n.shape == shape && n.src == src && n.args.value == a.value &&
         n.args.value2 == a.value2 && n.args.seed == a.seed && n.args.offset == a.offset && n.args.axes == a.axes &&
         n.args.rop == a.rop && n.args.accumulate == a.accumulate && n.args.tf32 == a.tf32 && n.args.st == a.st && n.args.buffer == a.buffer;
}

// Hash-consing table. Entries of freed nodes are dropped when a lookup meets them and by a sweep
// once the table has doubled since the last one (amortized O(1) per node).
struct Table {
  std::unordered_multimap<size_t, std::weak_ptr<const Node>> map;
  size_t size_after_sweep = 0;
  void sweep() {
    for (auto it = map.begin(); it != map.end();) it = it->second.expired() ? map.erase(it) : std::next(it);
    size_after_sweep = map.size();
  }
};

Table& table() {
  static Table* t = new Table();
  return *t;
}

thread_local const char* g_origin = "";
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

BufferRef Node::realized() const {
  if (op == Op::Buffer) return args.buffer;
  return realized_;
}

void Node::set_realized(BufferRef b, Box box) const {
  realized_ = std::move(b);
  realized_box_ = std::move(box);
  src.clear();  // the value is known; its history can be freed
}

NodeRef make_node(Op op, DType dtype, Shape shape, std::vector<NodeRef> src, NodeArgs args) {
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  size_t h = hash_node(op, dtype, shape, src, args);
  Table& t = table();
  auto [it, end] = t.map.equal_range(h);
  while (it != end) {
    if (auto n = it->second.lock()) {
      if (same(*n, op, dtype, shape, src, args)) return n;
      ++it;
    } else {
      it = t.map.erase(it);
    }
  }
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->src = std::move(src);
  n->args = std::move(args);
  n->hash = h;
  n->origin = g_origin;
  n->scope = g_scope;
  if (t.map.size() > 2 * t.size_after_sweep + 1024) t.sweep();
  t.map.emplace(h, n);
  return n;
}

size_t hash_cons_entries() {
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  return table().map.size();
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
    case Op::Scatter: os << (n.args.accumulate ? std::string(" ") + reduce_name(n.args.rop) : std::string(" REPLACE")); break;
    default: break;
  }
}
}  // namespace
void Node::print(std::ostream& os) const { print_node(*this, os); }
void Node::print(TextOut& os) const { print_node(*this, os); }

}  // namespace tiny
