// A subgraph: a graph built once over placeholder leaves, applied to values by Call nodes.
// A training step's graph then holds one node where a builder made thousands (an RNN's whole
// sequence, forward or backward), and building, keying and releasing the step's graph cost
// per node; the scheduler expands calls (expand_calls in engine/tensor/subgraph.h) on a
// schedule cache miss only, and a hit replays what it recorded for the graph with its calls.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/graph/node.h"

namespace tiny {

struct Subgraph {
  uint64_t id = 0;                 // for printing (graph keys tell subgraphs apart by address)
  std::vector<NodeRef> inputs;     // placeholders: input k at position k
  std::vector<NodeRef> outputs;
  std::vector<NodeRef> order;      // the nodes between, producers first
};

}  // namespace tiny
