// The scheduler cuts a lazy graph into kernels. Every node whose value is
// stored to memory is a "realize point" and records why.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/codegen/kernel.h"
#include "engine/graph/subgraph.h"
#include "engine/runtime/device.h"

namespace tiny {

struct Schedule {
  std::vector<Kernel> kernels;  // in execution order
  // Every node of the given graph this schedule gives a buffer to (targets, intermediates,
  // aliases).
  std::vector<std::pair<NodeRef, BufferRef>> realized;
  // The kernels compute a rebuilt graph (calls expanded, sums of products joined, kernels
  // reading windows): each rebuilt node and a node of the given graph it stands for, and the
  // buffers of rebuilt nodes that stand for none (the schedule's own).
  std::vector<std::pair<const Node*, const Node*>> originals;
  std::vector<BufferRef> internal;
  // of those, the values inside calls that keep them (keep_stored_values): the given graph's call
  // and the value
  std::vector<std::pair<const Node*, StoredValue>> call_values;
};

// The schedule's buffers are allocated on `device` when the kernels run.
Schedule create_schedule(const std::vector<NodeRef>& targets, Device& device = compute_device());

}  // namespace tiny
