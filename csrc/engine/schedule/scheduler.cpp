#include "engine/schedule/scheduler.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "engine/runtime/device.h"

namespace tiny {
namespace {

bool is_transcendental(Op op) {
  switch (op) {
    case Op::Exp: case Op::Log: case Op::Sin: case Op::Cos: case Op::Tan: case Op::Erf: case Op::Tanh:
    case Op::Asin: case Op::Acos: case Op::Atan: case Op::Sinh: case Op::Cosh: case Op::Asinh: case Op::Acosh:
    case Op::Atanh: case Op::Expm1: case Op::Log1p: case Op::Erfinv: case Op::Pow: case Op::Atan2: case Op::Hypot:
    case Op::Erfc: case Op::Exp2: case Op::Log2: case Op::Log10: case Op::Lgamma:
    case Op::Rand:
      return true;
    default:
      return false;
  }
}

bool is_size_changing_bitcast(const Node* n) {
  return n->op == Op::Bitcast && itemsize(n->dtype) != itemsize(n->src[0]->dtype);
}

// Nodes reachable from the targets without passing realized ones, producers first.
std::vector<const Node*> toposort(const std::vector<NodeRef>& targets) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> visited;
  std::vector<std::pair<const Node*, size_t>> stack;
  for (auto& t : targets) {
    if (t->realized() || visited.count(t.get())) continue;
    visited.insert(t.get());
    stack.push_back({t.get(), 0});
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->src.size()) {
        const Node* s = n->src[i++].get();
        if (!s->realized() && !visited.count(s)) {
          visited.insert(s);
          stack.push_back({s, 0});
        }
      } else {
        order.push_back(n);
        stack.pop_back();
      }
    }
  }
  return order;
}

struct Planner {
  std::unordered_map<const Node*, NodeRef> refs;  // keep nodes alive and find their refs
  std::unordered_map<const Node*, std::string> roots;  // realize point -> reason
  std::unordered_map<const Node*, BufferRef> buffers;
  std::unordered_map<const Node*, double> count;  // estimated evaluations

  void note(const NodeRef& n) {
    refs.emplace(n.get(), n);
    for (auto& s : n->src) refs.emplace(s.get(), s);
  }

  void decide(const std::vector<NodeRef>& targets, const std::vector<const Node*>& order) {
    for (auto& t : targets) roots[t.get()] = "requested";
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const Node* n = *it;
      double c = count[n];
      double size = double(std::max<int64_t>(1, n->numel()));
      if (!roots.count(n)) {
        if (n->op == Op::Contiguous) roots[n] = "contiguous";
        else if (n->op == Op::Write) roots[n] = "partial write";
        else if (n->op == Op::Reduce && c > size) roots[n] = "reduce read by a broadcast or several kernels";
        else if (is_transcendental(n->op) && c > 2 * size) roots[n] = "expensive value read many times";
        else if (is_size_changing_bitcast(n)) roots[n] = "bitcast to another itemsize";
      }
      bool root = roots.count(n) > 0;
      double evals = root ? size : c;
      if (is_size_changing_bitcast(n) && !roots.count(n->src[0].get()))
        roots[n->src[0].get()] = "source of a bitcast to another itemsize";
      for (auto& s : n->src) {
        double per = 1;
        if (n->op == Op::Reduce) per = double(std::max<int64_t>(1, s->numel())) / size;
        if (n->op == Op::Write) {
          count[s.get()] += double(std::max<int64_t>(1, s->numel()));
          continue;
        }
        count[s.get()] += evals * per;
      }
    }
  }
};

// Adds `n`'s expression tree to kernel `k`, turning realized nodes and other
// realize points into loads.
void collect_loads(Kernel& k, const NodeRef& root_value, const Node* self,
                   const std::unordered_map<const Node*, BufferRef>& buffers,
                   std::unordered_map<const Buffer*, int>& buffer_index) {
  std::vector<const Node*> stack{root_value.get()};
  std::unordered_set<const Node*> seen;
  auto buffer_id = [&](const BufferRef& b) {
    auto it = buffer_index.find(b.get());
    if (it != buffer_index.end()) return it->second;
    int id = int(k.buffers.size());
    k.buffers.push_back(b);
    buffer_index[b.get()] = id;
    return id;
  };
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    BufferRef b = n->realized();
    if (!b && n != self) {
      auto it = buffers.find(n);
      if (it != buffers.end()) b = it->second;
    }
    if (b) {
      k.loads[n] = buffer_id(b);
      continue;
    }
    for (auto& s : n->src) stack.push_back(s.get());
  }
}

}  // namespace

Schedule create_schedule(const std::vector<NodeRef>& targets) {
  Schedule sched;
  auto order = toposort(targets);
  Planner p;
  for (auto& t : targets) p.refs.emplace(t.get(), t);
  for (auto* n : order)
    for (auto& s : n->src) p.refs.emplace(s.get(), s);
  p.decide(targets, order);

  // Give every realize point a buffer; aliases share their source's memory.
  std::vector<const Node*> roots;  // producers first
  for (auto* n : order) {
    if (!p.roots.count(n)) continue;
    BufferRef buf;
    if (n->op == Op::Bitcast) {
      const Node* src = n->src[0].get();
      BufferRef base = src->realized() ? src->realized() : p.buffers.count(src) ? p.buffers.at(src) : nullptr;
      if (base) buf = std::make_shared<Buffer>(base, n->dtype, n->numel());
    }
    if (buf) {
    } else if (n->op == Op::View && n->args.st.is_contiguous() && n->src[0]->realized() &&
               n->src[0]->realized()->dtype() == n->dtype) {
      buf = n->src[0]->realized();  // a reshape of stored data: same bytes
    } else {
      buf = std::make_shared<Buffer>(cpu_device(), n->dtype, n->numel());
      roots.push_back(n);
    }
    p.buffers[n] = buf;
    sched.realized.emplace_back(p.refs.at(n), buf);
  }

  // One kernel per realize point, then merge independent kernels that share
  // an iteration space.
  struct Pending {
    Kernel k;
    int level = 0;
    bool mergeable = true;
    std::vector<const Node*> produces;
  };
  std::vector<Pending> pending;
  std::unordered_map<const Buffer*, int> level_of;  // owning buffer -> level of its last writer
  auto add_kernel = [&](const NodeRef& value, const Node* self, const ShapeTracker& store, const BufferRef& out,
                        const std::string& reason, bool mergeable) {
    Pending pk;
    pk.k.shape = value->shape;
    pk.k.reason = reason;
    std::unordered_map<const Buffer*, int> index;
    pk.k.buffers.push_back(out);
    index[out.get()] = 0;
    pk.k.outputs.push_back({value, store, 0});
    collect_loads(pk.k, value, self, p.buffers, index);
    // Run after whatever last wrote a buffer we touch (aliases count as their owner).
    int level = 0;
    for (auto& b : pk.k.buffers) {
      auto it = level_of.find(b->owner());
      if (it != level_of.end()) level = std::max(level, it->second + 1);
    }
    pk.level = level;
    pk.mergeable = mergeable;
    level_of[out->owner()] = level;
    pending.push_back(std::move(pk));
  };
  for (auto* n : roots) {
    const NodeRef& ref = p.refs.at(n);
    BufferRef out = p.buffers.at(n);
    const std::string& reason = p.roots.at(n);
    if (n->op == Op::Write) {
      add_kernel(n->src[0], n, ShapeTracker::from_shape(n->shape), out, "copy of the base of a partial write", true);
      add_kernel(n->src[1], n, n->args.st, out, reason, false);
    } else if (n->op == Op::Contiguous) {
      add_kernel(n->src[0], n, ShapeTracker::from_shape(n->shape), out, reason, true);
    } else {
      add_kernel(ref, n, ShapeTracker::from_shape(n->shape), out, reason, true);
    }
  }

  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) { return a.level < b.level; });
  for (size_t i = 0; i < pending.size(); i++) {
    Pending& a = pending[i];
    if (!a.mergeable) {
      sched.kernels.push_back(std::move(a.k));
      continue;
    }
    for (size_t j = i + 1; j < pending.size() && pending[j].level == a.level; j++) {
      Pending& b = pending[j];
      if (!b.mergeable || b.k.shape != a.k.shape || b.k.outputs.empty()) continue;
      // merge b into a: renumber b's buffers
      std::unordered_map<const Buffer*, int> index;
      for (size_t x = 0; x < a.k.buffers.size(); x++) index[a.k.buffers[x].get()] = int(x);
      auto id = [&](const BufferRef& buf) {
        auto it = index.find(buf.get());
        if (it != index.end()) return it->second;
        int v = int(a.k.buffers.size());
        a.k.buffers.push_back(buf);
        index[buf.get()] = v;
        return v;
      };
      for (auto& o : b.k.outputs) a.k.outputs.push_back({o.value, o.store, id(b.k.buffers[o.buffer])});
      for (auto& [node, bi] : b.k.loads) a.k.loads[node] = id(b.k.buffers[bi]);
      if (a.k.reason.find(b.k.reason) == std::string::npos) a.k.reason += "; " + b.k.reason;
      b.k.outputs.clear();
      b.mergeable = false;
    }
    sched.kernels.push_back(std::move(a.k));
  }
  sched.kernels.erase(std::remove_if(sched.kernels.begin(), sched.kernels.end(),
                                     [](const Kernel& k) { return k.outputs.empty(); }),
                      sched.kernels.end());
  return sched;
}

}  // namespace tiny
