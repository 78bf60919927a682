// One kernel as the scheduler hands it to a code generator: a loop over an
// iteration shape that stores one or more values, each an expression tree of
// graph nodes whose leaves are buffer loads, constants and random numbers.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/graph/node.h"

namespace tiny {

struct KernelOutput {
  NodeRef value;       // expression root; value->shape == kernel shape
  ShapeTracker store;  // iteration index -> element of the output buffer
  int buffer;          // index into Kernel::buffers
  // A scatter stores at the flat index this int64 expression computes
  // (instead of `store`), combining with the old value by `rop` if accumulate.
  NodeRef scatter_index;
  bool accumulate = false;
  ReduceOp rop = ReduceOp::Sum;
};

// Whether `n`'s value is passed at launch (Rand keys, Param values).
inline bool is_launch_param(const Node* n) { return n->op == Op::Rand || n->op == Op::Param; }
// The two parameter words of a launch node: Rand (seed, offset); Param its
// value's bits (a double for float dtypes, else an int64) and 0.
void append_launch_words(const Node* n, std::vector<uint64_t>& out);

struct Kernel {
  Shape shape;                                   // iteration shape
  std::vector<KernelOutput> outputs;
  std::vector<BufferRef> buffers;                // everything read or written
  std::unordered_map<const Node*, int> loads;    // nodes read from buffers[i] (row-major)
  std::string reason;                            // why the outputs were stored
  bool serial = false;                           // must run on one thread (accumulating scatter)
  // Canonical text of the computation with buffers numbered: equal keys
  // compute the same thing, so they share one compiled program.
  // (Random number keys and Param values are not part of it: they are passed
  // at launch, see launch_params. A load read only through views is named by its
  // element count: a view indexes its buffer's elements whatever the node's shape.)
  std::string key() const;
  // Whether a buffer it reads shares memory with one it writes (an in-place update, or a window
  // of what it stores into). Else its iterations are independent of one another (without a
  // scattering output): each reads only what no iteration writes.
  bool reads_what_it_writes() const;
  // Rand and Param nodes in a fixed order, and their launch words in that
  // order (two each, see launch_words): the kernel reads them from a parameter
  // array passed after its buffers, so a new seed or learning rate does not
  // need a new program.
  std::vector<const Node*> launch_nodes() const;
  std::vector<uint64_t> launch_params() const;
  std::string name() const;    // short readable name, e.g. r_64_32 / E_1024
  std::string origins() const; // torch ops that produced this kernel's nodes
  std::string ast() const;     // readable tree for TINY_DEBUG=3
  int64_t flops() const;       // rough estimate
};

}  // namespace tiny
