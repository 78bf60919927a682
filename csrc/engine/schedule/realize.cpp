#include "engine/schedule/realize.h"

#include <chrono>
#include <cstdio>
#include <unordered_map>
#include <vector>

#include "engine/codegen/index_walk.h"
#include "engine/codegen/program_cache.h"
#include "engine/runtime/counters.h"
#include "engine/schedule/schedule_cache.h"
#include "engine/schedule/scheduler.h"
#include "engine/schedule/trace.h"

namespace tiny {

void realize_nodes(const std::vector<NodeRef>& nodes, Device& device) {
  std::lock_guard<std::recursive_mutex> g(engine_mutex());
  std::vector<NodeRef> todo;
  for (auto& n : nodes)
    if (n && !n->realized()) todo.push_back(n);
  if (todo.empty()) return;
  auto t0 = std::chrono::steady_clock::now();
  int level = debug_level();
  // one schedule cache per device (a process may use several: tests)
  static auto* caches =
      new std::unordered_map<const Device*, std::unordered_map<std::string, std::shared_ptr<CachedSchedule>>>();
  auto* cache = &(*caches)[&device];
  // the cached graphs' keys as text (describe_graph_miss), made on misses only
  static auto* texts = new std::unordered_map<const Device*, std::unordered_map<std::string, std::string>>();
  auto* cached_text = &(*texts)[&device];
  GraphShape shape = graph_shape(todo);
  counters().graph_nodes += int64_t(shape.order.size());
  for (auto& b : shape.inputs)
    if (b->device() != &device)
      throw std::logic_error("tiny engine: a buffer on " + b->device()->name() + " is read by a schedule on " +
                             device.name());
  auto ns_since = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0).count();
  };
  bool trace = tracing();
  TracedSchedule traced;
  if (trace) {
    traced.device = device.name();
    traced.cause = current_realize_cause();
    traced.start_ns = trace_clock_ns();
  }
  auto hit = cache->find(shape.key);
  if (hit != cache->end()) {
    counters().schedule_cache_hits++;
    auto t1 = std::chrono::steady_clock::now();
    int traced_index = -1;
    if (trace) {
      traced.cached = true;
      traced.schedule_ns = ns_since(t1);
      traced_index = trace_schedule(traced);
    }
    int64_t ns = hit->second->replay(shape, device, traced_index);
    if (trace) trace_schedule_end(traced_index);
    if (!device.counts_kernel_time()) counters().kernel_ns += ns;
    if (level >= 1)
      std::fprintf(stderr, "tiny: schedule %zu kernels (cached), %zu nodes, key %.3f ms, replay %.3f ms, run %.3f ms\n",
                   hit->second->kernel_count(), shape.order.size(), ns_since(t1) / 1e6,
                   (ns_since(std::chrono::steady_clock::now()) - ns_since(t1)) / 1e6, ns / 1e6);
    return;
  }
  std::string text = key_text(shape, todo);  // (before scheduling: it walks the graph again)
  Schedule sched = create_schedule(todo, device);
  auto ts = std::chrono::steady_clock::now();
  counters().schedules++;

  // Compile everything first: codegen walks the graph, which realizing frees.
  std::vector<std::shared_ptr<Program>> programs = device_programs(device, sched.kernels);
  std::vector<std::shared_ptr<const KernelInfo>> infos;
  for (auto& k : sched.kernels) infos.push_back(std::make_shared<KernelInfo>(kernel_info(k)));
  auto t1 = std::chrono::steady_clock::now();
  int traced_index = -1;
  if (trace) {
    traced.schedule_ns = ns_since(ts);
    traced.compile_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - ts).count();
    std::vector<const std::string*> keys;
    for (auto& [key, cached] : *cached_text) keys.push_back(&cached);
    traced.miss = describe_graph_miss(text, keys);
    traced_index = trace_schedule(traced);
  }

  int64_t kernel_ns = 0;
  for (size_t i = 0; i < sched.kernels.size(); i++) {
    Kernel& k = sched.kernels[i];
    std::vector<void*> args;
    for (auto& b : k.buffers) args.push_back(b->ptr());
    int64_t ks = trace_clock_ns();
    device.launch(LaunchStep(programs[i].get(), std::move(args), k.launch_params()));
    for (auto& out : k.outputs) k.buffers[size_t(out.buffer)]->mark_written(device.queued_position());
    if (level >= 2 || trace) device.synchronize();  // so the time is the kernel's, not its launch's
    int64_t ke = trace_clock_ns();
    kernel_ns += ke - ks;
    counters().kernels++;
    counters().flops += infos[i]->flops;
    if (trace) {
      std::vector<const Buffer*> kbufs;
      for (auto& b : k.buffers) kbufs.push_back(b.get());
      trace_kernel(traced_index, infos[i], kbufs, ks, ke);
    }
    if (level >= 2)
      std::fprintf(stderr, "tiny: kernel %3zu %-24s %9.3f ms  reason: %s  ops: %s\n", i, infos[i]->name.c_str(),
                   (ke - ks) / 1e6, infos[i]->reason.c_str(), infos[i]->ops.c_str());
    if (level >= 3) std::fprintf(stderr, "%s", k.ast().c_str());
  }
  if (trace) trace_schedule_end(traced_index);
  if (!device.counts_kernel_time()) counters().kernel_ns += kernel_ns;
  if (cache->size() > 4096) {  // bound the memory of programs that change every time
    cache->clear();
    cached_text->clear();
  }
  if (auto c = CachedSchedule::record(shape, sched, programs, infos)) {
    cache->emplace(shape.key, c);
    cached_text->emplace(shape.key, std::move(text));
  }
  // (the calls first: realizing the graph may free them)
  for (auto& [call, value] : sched.call_values) store_value(call, value);
  for (auto& [node, buf] : sched.realized) node->set_realized(buf, nonzero_box(node.get()));
  for (auto& n : todo)
    if (!n->realized()) throw std::logic_error("tiny engine: schedule left a target unrealized: " + n->str());
  if (level >= 1) {
    auto t2 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "tiny: schedule %zu kernels on %s, schedule %.3f ms, compile %.3f ms, run %.3f ms\n",
                 sched.kernels.size(), device.name().c_str(), std::chrono::duration<double, std::milli>(ts - t0).count(),
                 std::chrono::duration<double, std::milli>(t1 - ts).count(),
                 std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
}

}  // namespace tiny
