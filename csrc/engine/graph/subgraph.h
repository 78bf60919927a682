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

// A value a schedule stored inside a call: the subgraph's node, and its buffer.
struct StoredValue {
  const Node* node;
  BufferRef buffer;
};

struct Subgraph {
  uint64_t id = 0;                 // for printing (graph keys tell subgraphs apart by address)
  std::vector<NodeRef> inputs;     // placeholders: input k at position k
  std::vector<NodeRef> outputs;
  std::vector<NodeRef> order;      // the nodes between, producers first
};

// A call whose insides a later graph may need (a forward whose backward comes later): from now
// on, what schedules store of its insides stays with it while it lives, and later expansions of
// it, or of calls given it as context, read those values instead of computing them again.
void keep_stored_values(const Node* call);
bool keeps_stored_values(const Node* call);
// Adds `value` to what is kept for `call` (where it keeps any), replacing the same node's.
void store_value(const Node* call, const StoredValue& value);
// What is kept for `call`, in the order stored.
std::vector<StoredValue> stored_values(const Node* call);
// A dying call's values go (~Node).
void forget_call(const Node* call);

}  // namespace tiny
