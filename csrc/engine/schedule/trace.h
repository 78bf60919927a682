// The engine's half of torch_tiny.debug.trace(): while a trace is on, every
// schedule run is recorded (cache hit or miss, what forced it, how a missed
// graph differs from the cached ones) and, per kernel, its time, traffic,
// buffers, the reason its outputs were stored and the ops and modules it holds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/codegen/kernel.h"

namespace tiny {

// What a kernel is, fixed when its schedule is made (replays of a cached
// schedule share it).
struct KernelInfo {
  std::string name, reason;
  std::string ops;                   // torch ops whose nodes it computes, comma-separated
  std::vector<std::string> modules;  // module paths of those nodes, sorted
  Shape shape;                       // iteration shape
  int64_t flops = 0, bytes_read = 0, bytes_written = 0;
  struct Operand {
    int buffer;  // index into the kernel's buffers
    DType dtype;
    Shape shape;  // the first view over its load if that only reshapes it, else as stored
  };
  std::vector<Operand> inputs, outputs;
};
KernelInfo kernel_info(const Kernel& k);
// The nodes whose module counts as the kernel's: work that reads data (not
// views, not constant expressions, which are shared by hash-consing).
std::vector<const Node*> kernel_work(const Kernel& k);
std::vector<std::string> modules_of(const std::vector<const Node*>& work);  // their module paths, sorted

struct TracedKernel {
  std::shared_ptr<const KernelInfo> info;
  std::vector<uint64_t> input_ids, output_ids;  // Buffer::id of each operand's owner
  int64_t start_ns = 0, duration_ns = 0;        // since the trace started
  int schedule = 0;                             // index into TraceLog::schedules
};

struct TracedSchedule {
  std::string device;
  std::string cause;  // what forced the realize (".item()", a torch op, "synchronize")
  bool cached = false;
  std::string miss;   // for a schedule made anew: how its graph differs from the closest cached one
  int64_t start_ns = 0, schedule_ns = 0, compile_ns = 0, end_ns = 0;
  int first_kernel = 0, kernels = 0;
};

struct TraceLog {
  std::vector<TracedSchedule> schedules;
  std::vector<TracedKernel> kernels;
};

// One trace at a time, process-wide; recording happens under the engine lock.
void start_trace();
TraceLog stop_trace();  // what was recorded since start_trace (empty if none was on)
bool tracing();
int64_t trace_clock_ns();  // ns since the trace started

// Names what forces the realizes made on this thread while it lives (".item()",
// "copy to the host"); without one a realize is put down to the torch op
// running (current_origin), else to "synchronize".
class RealizeCause {
 public:
  explicit RealizeCause(const char* what);
  ~RealizeCause();

 private:
  const char* prev_;
};
std::string current_realize_cause();

// Recording, from realize_nodes and CachedSchedule::replay.
int trace_schedule(TracedSchedule s);  // returns its index
void trace_kernel(int schedule, const std::shared_ptr<const KernelInfo>& info, const std::vector<const Buffer*>& buffers,
                  int64_t start_ns, int64_t end_ns);
void trace_schedule_end(int schedule);

// How graph key `key` (key_text) differs from the closest of
// `cached`: a new op, a new view offset, a new shape, other arguments.
std::string describe_graph_miss(const std::string& key, const std::vector<const std::string*>& cached);

}  // namespace tiny
