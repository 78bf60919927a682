// Entry point: compute the given nodes (and everything they need) on a
// device, leaving each with a realized buffer there.
#pragma once
#include <vector>

#include "engine/graph/node.h"
#include "engine/runtime/device.h"

namespace tiny {

void realize_nodes(const std::vector<NodeRef>& nodes, Device& device);
// On the process's compute device (TINY_DEVICE).
inline void realize_nodes(const std::vector<NodeRef>& nodes) { realize_nodes(nodes, compute_device()); }

}  // namespace tiny
