#include "engine/codegen/kernel.h"

#include <cstring>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/codegen/index_walk.h"

namespace tiny {
namespace {

// Walks every output tree once, leaves (loads) included, children first.
void walk(const Kernel& k, const std::function<void(const Node*, bool is_load)>& fn) {
  std::unordered_map<const Node*, bool> seen;
  std::function<void(const Node*)> rec = [&](const Node* n) {
    if (seen.count(n)) return;
    seen[n] = true;
    bool load = k.loads.count(n) > 0;
    if (!load)
      for (auto& s : n->src) rec(s.get());
    fn(n, load);
  };
  for (auto& o : k.outputs) {
    rec(o.value.get());
    if (o.scatter_index) rec(o.scatter_index.get());
  }
}

}  // namespace

std::string Kernel::key() const {
  std::ostringstream os;
  std::unordered_map<const Node*, int> ids;
  // A load read only through views is named by its element count: a view indexes the buffer's
  // row-major elements, whatever shape the buffer's node has (a parameter is (512, 128) in the
  // first step and a reshape of the optimizer's flat (65536,) result after it).
  std::unordered_set<const Node*> shaped_loads;
  walk(*this, [&](const Node* n, bool load) {
    if (load || n->op == Op::View) return;
    for (auto& s : n->src)
      if (loads.count(s.get())) shaped_loads.insert(s.get());
  });
  for (auto& o : outputs)
    if (loads.count(o.value.get())) shaped_loads.insert(o.value.get());
  os << "S" << shape_str(shape) << ";";
  walk(*this, [&](const Node* n, bool load) {
    int id = int(ids.size());
    ids[n] = id;
    os << id << "=";
    if (load) {
      int b = loads.at(n);
      const std::string zeros = zero_masks_key(n);  // in the node's own index: needs its shape
      os << "L" << b << ":" << dtype_name(buffers[b]->dtype());
      if (shaped_loads.count(n) || !zeros.empty()) os << shape_str(n->shape) << zeros;
      else os << "[" << n->numel() << "]";
      os << ";";
      return;
    }
    if (is_launch_param(n))
      os << op_name(n->op) << " " << dtype_name(n->dtype) << shape_str(n->shape);  // values come at launch
    else
      os << n->str();
    for (auto& s : n->src) os << " " << ids[s.get()];
    os << ";";
  });
  for (auto& o : outputs) {
    os << "O" << o.buffer << ":" << dtype_name(buffers[o.buffer]->dtype()) << "<-" << ids[o.value.get()] << "@";
    if (o.scatter_index)  // the output's size bounds the data-dependent index in the code
      os << "scatter" << ids[o.scatter_index.get()] << (o.accumulate ? reduce_name(o.rop) : "") << " into "
         << buffers[o.buffer]->numel() << ";";
    else
      os << o.store.str() << ";";
  }
  if (serial) os << "serial;";
  if (reads_what_it_writes()) os << "rw;";  // its program's loops are not marked independent
  return os.str();
}

bool Kernel::reads_what_it_writes() const {
  std::unordered_set<const Buffer*> written;
  for (auto& o : outputs) written.insert(buffers[size_t(o.buffer)]->owner());
  for (auto& [node, b] : loads)
    if (written.count(buffers[size_t(b)]->owner())) return true;
  return false;
}

void append_launch_words(const Node* n, std::vector<uint64_t>& out) {
  if (n->op == Op::Rand) {
    out.push_back(n->args.seed);
    out.push_back(n->args.offset);
    return;
  }
  const Scalar& v = n->args.value;
  uint64_t bits = 0;
  if (is_float(n->dtype)) {
    double d = v.to_double();
    std::memcpy(&bits, &d, sizeof bits);
  } else {
    bits = uint64_t(v.to_int());
  }
  out.push_back(bits);
  out.push_back(0);
}

std::vector<const Node*> Kernel::launch_nodes() const {
  std::vector<const Node*> r;
  walk(*this, [&](const Node* n, bool load) {
    if (!load && is_launch_param(n)) r.push_back(n);
  });
  return r;
}

std::vector<uint64_t> Kernel::launch_params() const {
  std::vector<uint64_t> p;
  for (auto* n : launch_nodes()) append_launch_words(n, p);
  return p;
}

std::string Kernel::name() const {
  bool has_reduce = false;
  walk(*this, [&](const Node* n, bool load) { has_reduce |= !load && n->op == Op::Reduce; });
  std::ostringstream os;
  os << (has_reduce ? "r" : "E");
  for (auto d : shape) os << "_" << d;
  return os.str();
}

std::string Kernel::origins() const {
  std::set<std::string> names;
  walk(*this, [&](const Node* n, bool load) {
    if (!load && *n->origin) names.insert(n->origin);
  });
  std::string s;
  for (auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

std::string Kernel::ast() const {
  std::ostringstream os;
  std::unordered_map<const Node*, int> ids;
  walk(*this, [&](const Node* n, bool load) {
    int id = int(ids.size());
    ids[n] = id;
    os << "  %" << id << " = ";
    if (load) {
      os << "LOAD buf" << loads.at(n) << " " << dtype_name(n->dtype) << shape_str(n->shape) << "\n";
      return;
    }
    os << n->str();
    for (auto& s : n->src) os << " %" << ids[s.get()];
    os << "\n";
  });
  for (auto& o : outputs) {
    os << "  STORE buf" << o.buffer << " <- %" << ids[o.value.get()] << " @ ";
    if (o.scatter_index)
      os << "[%" << ids[o.scatter_index.get()] << "]" << (o.accumulate ? std::string(" ") + reduce_name(o.rop) : "") << "\n";
    else
      os << o.store.str() << "\n";
  }
  return os.str();
}

int64_t Kernel::flops() const {
  int64_t total = 0;
  walk(*this, [&](const Node* n, bool load) {
    if (load) return;
    if (is_elementwise(n->op)) total += n->numel();
    if (n->op == Op::Reduce && !n->src.empty()) total += n->src[0]->numel();
  });
  return total;
}

}  // namespace tiny
