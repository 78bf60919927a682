// Entry point: compute the given nodes (and everything they need), leaving
// each with a realized buffer.
#pragma once
#include <vector>

#include "engine/graph/node.h"

namespace tiny {

void realize_nodes(const std::vector<NodeRef>& nodes);

}  // namespace tiny
