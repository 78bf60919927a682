#include "engine/schedule/trace.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <unordered_map>

#include "engine/runtime/buffer.h"

namespace tiny {

namespace {

// Walks a kernel's expressions once: the buffers it reads (input buffer ->
// (shape seen, elements read at most)) and its work, the nodes that count for
// the module that made them: those that read data (a load or random numbers)
// and are not views. Constant expressions and views are hash-consed, so one
// such node serves every module that builds the same one.
void walk_kernel(const Kernel& k, std::map<int, std::pair<Shape, int64_t>>* inputs, std::vector<const Node*>* work) {
  std::unordered_map<const Node*, bool> reads_data;
  auto note_input = [&](int buffer, const Shape& shape, int64_t elements) {
    if (!inputs) return;
    auto& in = (*inputs)[buffer];
    if (in.first.empty()) in.first = shape;
    in.second = std::max(in.second, elements);
  };
  std::function<bool(const Node*)> visit = [&](const Node* n) -> bool {
    auto done = reads_data.find(n);
    if (done != reads_data.end()) return done->second;
    bool data = false;
    auto load = k.loads.find(n);
    if (load != k.loads.end()) {
      note_input(load->second, n->shape, n->numel());  // read without a view over it: the whole load
      data = true;
    } else if (n->op == Op::View && k.loads.count(n->src[0].get())) {
      // a reshape or permutation names the stored value's shape; a window does not
      const Node* under = n->src[0].get();
      note_input(k.loads.at(under), n->numel() == under->numel() ? n->shape : under->shape, n->numel());
      data = reads_data[under] = true;
    } else {
      data = n->op == Op::Rand;
      for (auto& s : n->src) data |= visit(s.get());
      if (data && n->op != Op::View && n->op != Op::Contiguous) work->push_back(n);
    }
    reads_data[n] = data;
    return data;
  };
  for (auto& o : k.outputs) {
    visit(o.value.get());
    if (o.scatter_index) visit(o.scatter_index.get());
  }
}

}  // namespace

std::vector<const Node*> kernel_work(const Kernel& k) {
  std::vector<const Node*> work;
  walk_kernel(k, nullptr, &work);
  return work;
}

std::vector<std::string> modules_of(const std::vector<const Node*>& work) {
  std::set<std::string> modules;
  for (const Node* n : work)
    if (n->scope) modules.insert(*n->scope);
  return {modules.begin(), modules.end()};
}

KernelInfo kernel_info(const Kernel& k) {
  KernelInfo info;
  info.name = k.name();
  info.reason = k.reason;
  info.ops = k.origins();
  info.shape = k.shape;
  info.flops = k.flops();
  std::map<int, std::pair<Shape, int64_t>> seen_inputs;
  std::vector<const Node*> work;
  walk_kernel(k, &seen_inputs, &work);
  info.modules = modules_of(work);
  for (auto& [b, in] : seen_inputs) {
    const Buffer& buf = *k.buffers[size_t(b)];
    info.inputs.push_back({b, buf.dtype(), in.first});
    // a broadcast reads each element once; a slice only its part
    info.bytes_read += std::min<int64_t>(int64_t(buf.nbytes()), in.second * int64_t(itemsize(buf.dtype())));
  }
  std::set<int> stored;
  for (auto& o : k.outputs) {
    const Buffer& buf = *k.buffers[size_t(o.buffer)];
    info.bytes_written += std::min<int64_t>(int64_t(buf.nbytes()), o.value->numel() * int64_t(itemsize(buf.dtype())));
    if (stored.insert(o.buffer).second) info.outputs.push_back({o.buffer, buf.dtype(), o.value->shape});
  }
  return info;
}

namespace {

struct TraceState {
  bool on = false;
  std::chrono::steady_clock::time_point epoch;
  TraceLog log;
};

TraceState& state() {
  static auto* s = new TraceState();
  return *s;
}

thread_local const char* g_cause = nullptr;

std::vector<std::string> split_entries(const std::string& key) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < key.size(); i++)
    if (key[i] == ';') {
      out.push_back(key.substr(start, i - start));
      start = i + 1;
    }
  out.push_back(key.substr(start));  // targets and inputs
  return out;
}

std::string first_word(const std::string& s) { return s.substr(0, s.find(' ')); }

// The node's text without its sources (" n3", " i0:f32(4)").
std::string without_sources(const std::string& s) {
  static const std::regex src(" (n\\d+|i\\d+:\\S+)");
  return std::regex_replace(s, src, "");
}

}  // namespace

void start_trace() {
  TraceState& s = state();
  s.log = {};
  s.epoch = std::chrono::steady_clock::now();
  s.on = true;
}

TraceLog stop_trace() {
  TraceState& s = state();
  s.on = false;
  return std::move(s.log);
}

bool tracing() { return state().on; }

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - state().epoch).count();
}

RealizeCause::RealizeCause(const char* what) : prev_(g_cause) { g_cause = what; }
RealizeCause::~RealizeCause() { g_cause = prev_; }

std::string current_realize_cause() {
  if (g_cause) return g_cause;
  if (*current_origin()) return current_origin();
  return "synchronize";
}

int trace_schedule(TracedSchedule s) {
  TraceLog& log = state().log;
  s.first_kernel = int(log.kernels.size());
  log.schedules.push_back(std::move(s));
  return int(log.schedules.size()) - 1;
}

void trace_kernel(int schedule, const std::shared_ptr<const KernelInfo>& info, const std::vector<const Buffer*>& buffers,
                  int64_t start_ns, int64_t end_ns) {
  TracedKernel k;
  k.info = info;
  for (auto& in : info->inputs) k.input_ids.push_back(buffers[size_t(in.buffer)]->owner()->id());
  for (auto& out : info->outputs) k.output_ids.push_back(buffers[size_t(out.buffer)]->owner()->id());
  k.start_ns = start_ns;
  k.duration_ns = end_ns - start_ns;
  k.schedule = schedule;
  TraceLog& log = state().log;
  log.kernels.push_back(std::move(k));
  log.schedules[size_t(schedule)].kernels++;
}

void trace_schedule_end(int schedule) { state().log.schedules[size_t(schedule)].end_ns = trace_clock_ns(); }

std::string describe_graph_miss(const std::string& key, const std::vector<const std::string*>& cached) {
  if (cached.empty()) return "first graph on this device";
  // Nodes compared without their sources (positions shift when one node is
  // added), as multisets. The closest cached graph has the fewest unmatched
  // ops, then the fewest unmatched nodes (a new shape changes every node, not
  // the ops).
  struct Nodes {
    std::vector<std::string> list;
    std::multiset<std::string> plain, ops;
  };
  auto nodes = [](const std::string& k) {
    Nodes n;
    n.list = split_entries(k);
    n.list.pop_back();  // targets and inputs
    for (auto& x : n.list) {
      n.plain.insert(without_sources(x));
      n.ops.insert(first_word(x));
    }
    return n;
  };
  auto unmatched = [](const std::multiset<std::string>& a, const std::multiset<std::string>& b) {
    std::vector<std::string> extra, missing;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(extra));
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(missing));
    return extra.size() + missing.size();
  };
  Nodes mine_nodes = nodes(key);
  const std::vector<std::string>& mine_list = mine_nodes.list;
  const std::multiset<std::string>& mine = mine_nodes.plain;
  std::multiset<std::string> best;
  std::pair<size_t, size_t> best_cost{SIZE_MAX, SIZE_MAX};
  for (const std::string* c : cached) {
    Nodes theirs = nodes(*c);
    std::pair<size_t, size_t> cost{unmatched(mine_nodes.ops, theirs.ops), unmatched(mine, theirs.plain)};
    if (cost < best_cost) {
      best_cost = cost;
      best = std::move(theirs.plain);
    }
  }
  std::vector<std::string> missing;
  std::set_difference(best.begin(), best.end(), mine.begin(), mine.end(), std::back_inserter(missing));
  // the first of this graph's nodes (in order) the cached graph lacks
  std::multiset<std::string> left = best;
  const std::string* first_new = nullptr;  // a constant only matters when nothing else is new
  size_t added = 0;
  for (auto& e : mine_list) {
    std::string plain = without_sources(e);
    auto it = left.find(plain);
    if (it != left.end()) {
      left.erase(it);
      continue;
    }
    added++;
    auto constant = [](const std::string& x) { return first_word(x) == "CONST" || first_word(x) == "PARAM"; };
    if (!first_new || (constant(*first_new) && !constant(e))) first_new = &e;
  }
  std::string counts = std::to_string(added) + " of its " + std::to_string(mine_list.size()) + " nodes new, " +
                       std::to_string(missing.size()) + " of the closest cached graph's " + std::to_string(best.size()) +
                       " gone";
  if (!first_new) return "the same nodes with other sources, targets or inputs (" + counts + ")";
  // what kind of change: the most alike missing node with the same op
  std::string a = without_sources(*first_new), what = "a new op", was;
  static const std::regex off("off=-?\\d+");
  for (auto& b : missing) {
    if (first_word(a) != first_word(b)) continue;
    std::string kind = first_word(a) == "VIEW" && std::regex_replace(a, off, "") == std::regex_replace(b, off, "")
                           ? "a new view offset"
                       : a.substr(0, a.find(')')) != b.substr(0, b.find(')')) ? "a new shape"
                                                                                : "other arguments";
    if (was.empty() || kind == "a new view offset") {
      what = kind;
      was = b;
    }
  }
  return what + ": " + *first_new + (was.empty() ? "" : "  (cached: " + was + ")") + "; " + counts;
}

}  // namespace tiny
