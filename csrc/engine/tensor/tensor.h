// The lazy Tensor API the torch layer calls. A Tensor is a handle to an
// immutable graph node; every method returns a new Tensor and runs nothing.
// Work happens in realize() (or a host copy), which schedules everything
// pending that the caller asks for.
#pragma once
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/graph/node.h"
#include "engine/runtime/device.h"

namespace tiny {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(NodeRef n) : node_(std::move(n)) {}

  const NodeRef& node() const { return node_; }
  bool defined() const { return node_ != nullptr; }
  DType dtype() const { return node_->dtype; }
  const Shape& shape() const { return node_->shape; }
  int ndim() const { return int(node_->shape.size()); }
  int64_t numel() const { return node_->numel(); }

  // ---- creation
  static Tensor full(const Shape& shape, Scalar value, DType dtype);
  // `value` broadcast like full(), but passed to kernels at launch instead of
  // compiled in: for values that change from step to step (learning rates,
  // bias corrections), so the next step reuses the schedule and programs.
  static Tensor param(const Shape& shape, Scalar value, DType dtype);
  static Tensor from_buffer(BufferRef buffer, const Shape& shape);
  // Copies host memory into a new buffer on `device` now (a host->device copy).
  static Tensor from_host(const void* data, const Shape& shape, DType dtype, Device& device = compute_device());
  static Tensor arange(int64_t n, Scalar start, Scalar step, DType dtype);
  // Uniform float32 in [0, 1) from Philox-4x32 keyed by `seed`, counter = offset + flat index.
  static Tensor rand(const Shape& shape, uint64_t seed, uint64_t offset);

  // ---- elementwise (operands must match in shape; the torch layer broadcasts)
  Tensor unary(Op op) const;
  Tensor binary(Op op, const Tensor& other) const;
  static Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
  Tensor cast(DType dtype) const;
  // Reinterpret bits; itemsizes may differ only for 1-D tensors (the flat storage).
  Tensor bitcast(DType dtype) const;

  // ---- movement (never copies)
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor expand(const Shape& shape) const;
  Tensor pad(const Ranges& pads) const;  // zeros outside
  Tensor shrink(const Ranges& ranges) const;
  Tensor flip(const std::vector<bool>& dims) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // `st` must index the row-major elements of this tensor (built from its shape).
  Tensor view(const ShapeTracker& st) const;
  // `parts` (same dtype, same shape except along `dim`) joined along `dim`: a chain of
  // selects over zero-padded views, one fused kernel. Undefined if every part is empty
  // along `dim`.
  static Tensor concat(std::vector<Tensor> parts, int dim);

  // ---- reductions: reduced axes are kept as size 1 when keepdim
  // `tf32`: a float32 sum (of products) may round its factors to TF32 on tensor cores
  // (NodeArgs::tf32); ignored for other reduces and dtypes.
  Tensor reduce(ReduceOp op, std::vector<int> axes, bool keepdim, bool tf32 = false) const;
  Tensor matmul(const Tensor& other, bool tf32 = false) const;  // (..., n, k) @ (..., k, m), batch dims equal

  // ---- scheduling
  Tensor contiguous() const;
  // Elements of this tensor (read as row-major flat) at int64 flat indices
  // `index` (any shape; the result has its shape). Indices must be in range.
  Tensor gather(const Tensor& index) const;
  // This 1-D tensor with element index[i] replaced by src[i] (index and src
  // share a shape), or combined with it by `op` when `accumulate`. Duplicate
  // indices apply in order.
  Tensor scatter(const Tensor& index, const Tensor& src, bool accumulate, ReduceOp op = ReduceOp::Sum) const;
  // This 1-D tensor with the strided region (shape, strides, offset) replaced by `value`.
  Tensor write_strided(const Shape& shape, const Shape& strides, int64_t offset, const Tensor& value) const;

  // ---- realization
  void realize() const;
  static void realize_all(const std::vector<Tensor>& tensors);
  // Realizes, then copies the row-major elements (or `nbytes` from byte `offset`) to host.
  void copy_to_host(void* dst) const;
  void copy_to_host(void* dst, size_t offset, size_t nbytes) const;

 private:
  NodeRef node_;
};

// The elements [lo, lo + n) of stored buffer `base` as a buffer of their own, one per live
// window (so equal windows are one graph leaf, and one buffer of a kernel).
BufferRef window_alias(const BufferRef& base, int64_t lo, int64_t n);

// A graph the scheduler runs in place of the given one (expand_calls, join_contraction_sums):
// what its schedule stores maps back to the given graph's nodes.
struct GraphRewrite {
  std::vector<NodeRef> targets;  // the targets' images; the targets themselves where nothing changed
  // each rebuilt node and the nodes of the given graph it stands for
  std::unordered_map<const Node*, std::vector<NodeRef>> originals;
  std::unordered_set<const Node*> given;  // the given graph's unrealized nodes, where something changed
  // nodes made inside calls (expand_calls): the given graph's call, and its subgraph's node
  std::unordered_map<const Node*, std::pair<const Node*, const Node*>> insides;
  bool changed() const { return !originals.empty(); }
  // The given graph's nodes that `n`, a node of the rewritten graph, stands for: none for one
  // the rewrite made for itself.
  std::vector<NodeRef> originals_of(const NodeRef& n) const;
};
// The graph of `targets` (`order`: their toposort) rebuilt over new nodes: replace(n, sources)
// gives n's image, given its sources' images, or nullopt to keep n (rebuilt over those where
// any changed).
GraphRewrite rewrite_graph(const std::vector<NodeRef>& targets, const std::vector<const Node*>& order,
                           const std::function<std::optional<Tensor>(const Node&, const std::vector<NodeRef>&)>& replace);

// The graph of `targets` with every x + y of two products over short reduces (autograd adding
// an RNN's weight gradient up over the time steps, one product per step's batch) replaced by one
// product over both reduces joined, whose kernel tiles, and what reads such sums rebuilt over
// the joined values. The scheduler joins them, on a schedule cache miss: joining as the sums were
// built remade the chain of steps at every addition (T^2 nodes for each step of training).
GraphRewrite join_contraction_sums(const std::vector<NodeRef>& targets);

}  // namespace tiny
