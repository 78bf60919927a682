// Building, applying and expanding subgraphs (engine/graph/subgraph.h).
#pragma once
#include <memory>
#include <vector>

#include "engine/graph/subgraph.h"
#include "engine/tensor/tensor.h"

namespace tiny {

// A leaf standing for input `index` of a subgraph to be made of what is built over it.
Tensor placeholder(const Shape& shape, DType dtype, int index);

// The subgraph computing `outputs` from `inputs` (placeholders, input k of index k). Its other
// leaves may be constants and aranges only: a buffer, a launch parameter or random numbers
// would be values of the calling graph that its key does not name (std::logic_error).
std::shared_ptr<const Subgraph> make_subgraph(std::vector<Tensor> inputs, const std::vector<Tensor>& outputs);

// `fn` applied to `args` (the dtypes and shapes of its inputs): its outputs, lazily. `context`:
// calls whose kept values (keep_stored_values) fn's nodes may read instead of computing them (a
// backward's call given its forward's, whose nodes it was built over); each must take fn's first
// inputs, given the same arguments.
std::vector<Tensor> call(const std::shared_ptr<const Subgraph>& fn, const std::vector<Tensor>& args,
                         const std::vector<NodeRef>& context = {});
// The call an output of call() comes from (before the output is realized).
const NodeRef& call_of(const Tensor& output);

// The graph of `targets` with every call replaced by its subgraph built over its arguments (the
// scheduler's first rewrite). Each call's subgraph is built once: calls that share nodes (a
// backward built over its forward's values) share them through hash-consing. Values kept for a
// call or its context are read from their buffers.
GraphRewrite expand_calls(const std::vector<NodeRef>& targets);

}  // namespace tiny
