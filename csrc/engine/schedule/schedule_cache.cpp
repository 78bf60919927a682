#include "engine/schedule/schedule_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/codegen/index_walk.h"
#include "engine/dtype/text_out.h"
#include "engine/runtime/counters.h"

namespace tiny {

namespace {

// Node signatures, interned: what a node is besides its sources (op, dtype, shape and arguments;
// a launch parameter's value left out, so that new values replay the schedule). A graph key
// names each node by its signature's id and its sources by position: a string of small integers
// built in one walk. (As text, MobileNetV2's training step was 343 KB of it a step, 4-5.7 ms.)
class Signatures {
 public:
  // Before a walk over `nodes` nodes: every new constant is a signature, so the table is
  // forgotten now and then, between walks only (a walk needs at most `nodes` of them: a graph
  // with more signatures than the bound still finds its own on its next walk).
  void before_walk(size_t nodes) {
    if (entries_ <= std::max(kMaxEntries, 4 * nodes)) return;
    by_hash_.clear();
    entries_ = 0;
  }
  uint64_t id(const Node* n) {
    const bool launch = is_launch_param(n);
    const size_t h = launch ? hash_launch(n) : n->signature_hash;
    std::vector<Entry>& bucket = by_hash_[h];
    for (const Entry& e : bucket)
      if (e.op == n->op && e.dtype == n->dtype && e.launch == launch && e.shape == n->shape &&
          (launch || same_arguments(e.args, n->args)))
        return e.id;
    entries_++;
    Entry e{n->op, n->dtype, launch, n->shape, launch ? NodeArgs{} : n->args, next_id_++};
    e.args.buffer.reset();
    bucket.push_back(std::move(e));
    return bucket.back().id;
  }

 private:
  static size_t hash_launch(const Node* n) {
    size_t h = std::hash<int>()(int(n->op)) * 31 + size_t(n->dtype);
    for (int64_t d : n->shape) h = h * 1000003 + size_t(d);
    return ~h;
  }
  struct Entry {
    Op op;
    DType dtype;
    bool launch;
    Shape shape;
    NodeArgs args;
    uint64_t id;  // never reused, so that no key made before a clear names another node
  };
  // (a few hundred bytes each: a step of MobileNetV2 has 7266 nodes, fewer signatures)
  static constexpr size_t kMaxEntries = size_t(1) << 16;
  std::unordered_map<size_t, std::vector<Entry>> by_hash_;
  size_t entries_ = 0;
  uint64_t next_id_ = 0;  // (below 2^44: a key word holds one beside a source count)
};

void put_word(std::string& key, uint64_t w) { key.append(reinterpret_cast<const char*>(&w), sizeof w); }

}  // namespace

GraphShape graph_shape(const std::vector<NodeRef>& targets) {
  static auto* signatures = new Signatures();
  GraphShape g;
  g.order = toposort(targets);
  std::unordered_map<const Buffer*, int> input_id;
  signatures->before_walk(g.order.size());
  std::string& key = g.key;
  key.reserve(g.order.size() * 40);
  // Words: a node's signature id and source count; each source's position, or for a
  // realized one (1 << 62 | input number), its dtype, rank, dims and box.
  constexpr uint64_t kInput = uint64_t(1) << 62;
  constexpr uint64_t kManySources = (uint64_t(1) << 20) - 1;  // (then the count in a word of its own)
  // a stored value read: its input number, dtype, shape and (a padded copy's, which decides
  // which taps its kernels skip) box
  auto put_input = [&](const BufferRef& b, const Node& n, const Box& box) {
    auto in = input_id.find(b.get());
    if (in == input_id.end()) {
      in = input_id.emplace(b.get(), int(g.inputs.size())).first;
      g.inputs.push_back(b);
    }
    put_word(key, kInput | uint64_t(in->second));
    put_word(key, uint64_t(n.dtype) << 32 | n.shape.size() << 16 | box.size());
    for (int64_t d : n.shape) put_word(key, uint64_t(d));
    for (auto [lo, hi] : box) {
      put_word(key, uint64_t(lo));
      put_word(key, uint64_t(hi));
    }
  };
  for (const Node* n : g.order) {
    const uint64_t sources = n->src.size();
    put_word(key, signatures->id(n) << 20 | std::min(sources, kManySources));
    if (sources >= kManySources) put_word(key, sources);
    for (auto& src : n->src) {
      const Node* s = src.get();
      int p = s->order_position();
      if (p >= 0) put_word(key, uint64_t(p));
      else put_input(s->realized(), *s, s->realized_box());
    }
    if (n->op != Op::Call) continue;
    // values kept for a call (a forward realized before its backward) are read, not computed
    const std::vector<StoredValue> kept = stored_values(n);
    put_word(key, kept.size());
    for (const StoredValue& v : kept) {
      put_word(key, uint64_t(reinterpret_cast<uintptr_t>(v.node)));
      put_input(v.buffer, *v.node, {});
    }
  }
  put_word(key, ~uint64_t(0));  // then the targets' positions
  for (auto& t : targets)
    if (!t->realized()) put_word(key, uint64_t(t->order_position()));
  // inputs that share memory (bitcast aliases) schedule differently
  put_word(key, ~uint64_t(0));
  for (auto& b : g.inputs)
    put_word(key, uint64_t(b->dtype()) << 56 | uint64_t(b->numel()) << 1 | input_id.count(b->owner()));
  return g;
}

std::string key_text(const GraphShape& g, const std::vector<NodeRef>& targets) {
  std::unordered_map<const Buffer*, int> input_id;
  for (size_t i = 0; i < g.inputs.size(); i++) input_id.emplace(g.inputs[i].get(), int(i));
  TextOut os;
  auto ref = [&](const Node* s) {
    int p = s->order_position();
    if (p >= 0) {
      os << " n" << p;
      return;
    }
    os << " i" << input_id.at(s->realized().get()) << ":" << dtype_name(s->dtype);
    print_shape(os, s->shape);
    for (auto [lo, hi] : s->realized_box()) os << "[" << lo << "," << hi << ")";
  };
  for (const Node* n : g.order) {
    if (is_launch_param(n)) {
      os << op_name(n->op) << " " << dtype_name(n->dtype);  // values are launch parameters
      print_shape(os, n->shape);
    } else {
      n->print(os);
    }
    if (n->op == Op::Scatter) os << (n->args.accumulate ? "+" : "=");
    if (n->op == Op::Call) os << " kept " << stored_values(n).size();
    for (auto& s : n->src) ref(s.get());
    os << ";";
  }
  os << "T";
  for (auto& t : targets) {
    if (t->realized()) continue;
    os << " " << t->order_position();
  }
  os << "I";
  for (auto& b : g.inputs) os << " " << dtype_name(b->dtype()) << b->numel() << "@" << input_id.count(b->owner());
  return os.take();
}

std::shared_ptr<CachedSchedule> CachedSchedule::record(const GraphShape& g, const Schedule& s,
                                                       const std::vector<std::shared_ptr<Program>>& programs,
                                                       const std::vector<std::shared_ptr<const KernelInfo>>& infos) {
  auto c = std::make_shared<CachedSchedule>();
  std::unordered_map<const Buffer*, int> slot_of;
  for (size_t i = 0; i < g.inputs.size(); i++) {
    if (slot_of.count(g.inputs[i].get())) continue;
    slot_of[g.inputs[i].get()] = int(c->slots_.size());
    c->slots_.push_back({Slot::Input, int(i), g.inputs[i]->dtype(), g.inputs[i]->numel(), 0});
  }
  // The schedule's buffers get slots, an alias after its owner: fresh ones for what the
  // schedule writes, aliases for views into those or into inputs (windows the kernels read: see
  // read_windows); -1 where a buffer has no slot to get.
  std::unordered_set<const Buffer*> written;
  for (auto& [node, buf] : s.realized) written.insert(buf.get());
  for (auto& buf : s.internal) written.insert(buf.get());
  std::function<int(const BufferRef&)> slot = [&](const BufferRef& buf) {
    auto it = slot_of.find(buf.get());
    if (it != slot_of.end()) return it->second;
    int base = -1;
    if (buf->base()) {
      base = slot(buf->base());
      if (base < 0) return -1;
    } else if (!written.count(buf.get())) {
      return -1;
    }
    slot_of[buf.get()] = int(c->slots_.size());
    c->slots_.push_back({base < 0 ? Slot::Fresh : Slot::Alias, base, buf->dtype(), buf->numel(), buf->byte_offset()});
    return int(c->slots_.size()) - 1;
  };
  std::unordered_map<const Node*, int> pos;
  for (size_t i = 0; i < g.order.size(); i++) pos[g.order[i]] = int(i);
  for (auto [image, original] : s.originals)
    if (auto it = pos.find(original); it != pos.end()) pos.emplace(image, it->second);
  for (auto& [node, buf] : s.realized) {
    auto it = pos.find(node.get());
    const int buf_slot = slot(buf);
    if (it == pos.end() || buf_slot < 0) return nullptr;
    c->realized_.push_back({it->second, buf_slot, nonzero_box(node.get())});
  }
  for (auto& [call, value] : s.call_values) {
    auto it = pos.find(call);
    const int buf_slot = slot(value.buffer);
    if (it != pos.end() && buf_slot >= 0) c->call_values_.push_back({it->second, value.node, buf_slot});
  }
  for (size_t k = 0; k < s.kernels.size(); k++) {
    const Kernel& kern = s.kernels[k];
    Step step;
    step.program = programs[k];
    for (auto& b : kern.buffers) {
      const int buf_slot = slot(b);
      if (buf_slot < 0) return nullptr;
      step.slots.push_back(buf_slot);
    }
    for (auto& out : kern.outputs) step.written.push_back(step.slots[size_t(out.buffer)]);
    for (auto* n : kern.launch_nodes()) {
      auto it = pos.find(n);
      if (it == pos.end()) return nullptr;
      step.launch_nodes.push_back(it->second);
    }
    step.info = infos[k];
    for (const Node* n : kernel_work(kern)) {
      auto it = pos.find(n);
      if (it != pos.end()) step.work.push_back(it->second);
    }
    c->kernels_.push_back(std::move(step));
  }
  return c;
}

int64_t CachedSchedule::replay(const GraphShape& g, Device& device, int trace) {
  std::vector<BufferRef> bufs(slots_.size());
  for (size_t i = 0; i < slots_.size(); i++) {
    const Slot& s = slots_[i];
    if (s.kind == Slot::Input) bufs[i] = g.inputs[size_t(s.index)];
    else if (s.kind == Slot::Fresh) bufs[i] = std::make_shared<Buffer>(&device, s.dtype, s.numel);
    else bufs[i] = std::make_shared<Buffer>(bufs[size_t(s.index)], s.dtype, s.numel, s.byte_offset);
  }
  // Every buffer is allocated before anything is launched (or captured).
  std::vector<LaunchStep> steps(kernels_.size());
  for (size_t k = 0; k < kernels_.size(); k++) {
    const Step& step = kernels_[k];
    std::vector<void*> args;
    args.reserve(step.slots.size() + 1);  // (LaunchStep appends its words' address)
    for (int slot : step.slots) args.push_back(bufs[size_t(slot)]->ptr());
    std::vector<uint64_t> params;
    for (int p : step.launch_nodes) append_launch_words(g.order[size_t(p)], params);
    steps[k] = LaunchStep(step.program.get(), std::move(args), std::move(params));
  }
  auto mark_written = [&](size_t k, uint64_t position) {
    for (int slot : kernels_[k].written) bufs[size_t(slot)]->mark_written(position);
  };
  int level = debug_level();
  int64_t total = 0;
  if (level >= 2 || trace >= 0) {  // one by one, each timed to its end
    for (size_t k = 0; k < kernels_.size(); k++) {
      const Step& step = kernels_[k];
      int64_t t0 = trace_clock_ns();
      device.launch(std::move(steps[k]));
      mark_written(k, device.queued_position());
      device.synchronize();
      int64_t t1 = trace_clock_ns();
      total += t1 - t0;
      if (trace >= 0) {
        std::vector<const Buffer*> kbufs;
        for (int slot : step.slots) kbufs.push_back(bufs[size_t(slot)].get());
        std::vector<const Node*> work;
        for (int p : step.work) work.push_back(g.order[size_t(p)]);
        auto info = std::make_shared<KernelInfo>(*step.info);
        info->modules = modules_of(work);
        trace_kernel(trace, info, kbufs, t0, t1);
      }
      if (level >= 2)
        std::fprintf(stderr, "tiny: kernel %3zu %-24s %9.3f ms  reason: %s  ops: %s  (cached schedule)\n", k,
                     step.info->name.c_str(), (t1 - t0) / 1e6, step.info->reason.c_str(), step.info->ops.c_str());
    }
  } else {
    auto t0 = std::chrono::steady_clock::now();
    device.launch_all(steps, ++replays_ >= 2 ? &replay_state_ : nullptr);
    total = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t last = device.queued_position();  // kernel k's position: last - (count - 1 - k)
    for (size_t k = 0; k < kernels_.size(); k++) mark_written(k, last ? last - (kernels_.size() - 1 - k) : 0);
  }
  for (auto& step : kernels_) {
    counters().kernels++;
    counters().flops += step.info->flops;
  }
  // (the calls first: realizing the graph may free them)
  for (const CallValue& v : call_values_) store_value(g.order[size_t(v.call)], {v.node, bufs[size_t(v.slot)]});
  for (const Realized& r : realized_) g.order[size_t(r.position)]->set_realized(bufs[size_t(r.slot)], r.box);
  return total;
}

}  // namespace tiny
