// A training loop builds the same graph every step. The schedule of a graph
// is cached by the graph's structure with its buffers abstracted (inputs are
// numbered, outputs are slots), so the second step costs a lookup and some
// allocations, not a schedule.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/schedule/scheduler.h"
#include "engine/schedule/trace.h"
#include "engine/runtime/device.h"

namespace tiny {

// The structure of the graph to realize.
struct GraphShape {
  std::string key;                           // binary: equal keys, equal schedules
  std::vector<const Node*> order;            // unrealized nodes, producers first
  std::vector<BufferRef> inputs;             // distinct realized buffers read, in first-use order
};
GraphShape graph_shape(const std::vector<NodeRef>& targets);
// What g's key says, as text: each node as Node::print shows it, its sources by position or as an
// input; then the targets and the inputs (describe_graph_miss reads it). Valid until the next
// toposort (it reads the nodes' places).
std::string key_text(const GraphShape& g, const std::vector<NodeRef>& targets);

class CachedSchedule {
 public:
  // nullopt-like: nullptr when the schedule uses buffers it cannot name.
  static std::shared_ptr<CachedSchedule> record(const GraphShape& g, const Schedule& s,
                                                const std::vector<std::shared_ptr<Program>>& programs,
                                                const std::vector<std::shared_ptr<const KernelInfo>>& infos);
  // Runs the schedule for a graph of the same shape on `device`; returns the
  // kernel time in ns. From the second replay on, the device may keep the
  // launch sequence in a faster form (a CUDA graph). `trace`: the traced
  // schedule it records its kernels in, or -1.
  int64_t replay(const GraphShape& g, Device& device, int trace = -1);
  size_t kernel_count() const { return kernels_.size(); }

 private:
  struct Slot {
    enum Kind { Input, Fresh, Alias } kind;
    int index;  // Input: input number; Alias: slot of the owner
    DType dtype;
    int64_t numel;
    size_t byte_offset;  // Alias: where it starts in the owner
  };
  struct Step {
    std::shared_ptr<Program> program;
    std::vector<int> slots;       // one per kernel buffer
    std::vector<int> written;     // slots of the kernel's outputs
    std::vector<int> launch_nodes;  // positions in the graph order, in the kernel's launch_nodes() order
    std::shared_ptr<const KernelInfo> info;
    // positions in the graph order of the kernel's work (kernel_work): a traced
    // replay names the modules of the nodes it runs for, not of the first graph's
    std::vector<int> work;
  };
  std::vector<Slot> slots_;
  std::vector<Step> kernels_;
  struct Realized {
    int position;  // in the graph order
    int slot;
    Box box;       // nonzero_box: the graph's structure decides it
  };
  std::vector<Realized> realized_;
  struct CallValue {  // a value inside a call that keeps its values (Schedule::call_values)
    int call;         // the call's position in the graph order
    const Node* node;  // the call's subgraph's node
    int slot;
  };
  std::vector<CallValue> call_values_;
  int replays_ = 0;
  std::unique_ptr<ReplayState> replay_state_;
};

}  // namespace tiny
