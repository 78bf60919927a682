// Inclusive scans (prefix reductions) built from engine ops, no scan primitive.
//
// Short axes (n <= kScanDirect) use one masked triangular reduce: the input
// expanded to (..., n_out, n_in), elements with in > out replaced by the
// identity, reduced over n_in. O(n^2) arithmetic, O(n) memory traffic, and a
// single REDUCE the scheduler fuses into its consumer.
//
// Longer axes are blocked: pad to B blocks of b = kScanBlock, scan inside each
// block with the direct form (O(n * b) arithmetic, each block's b inputs stay
// in cache), reduce each block to its total, scan the B totals recursively,
// and combine every element with the inclusive total of the blocks before it.
// Arithmetic is O(n * b) over all levels (the levels shrink by b), memory
// traffic O(n) per level, and there are log_b(n) levels of about three
// kernels each (totals, their scan, the final combine fused with the block
// scans).
#pragma once
#include <functional>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

constexpr int64_t kScanDirect = 64;
constexpr int64_t kScanBlock = 32;

struct ScanRule {
  // Reduce x over `axis` keeping it; `mask` (bool, x's shape, or null) marks
  // the elements that count.
  std::function<tiny::Tensor(const tiny::Tensor& x, const tiny::Tensor* mask, int axis)> reduce;
  // The running value `carry` (everything before) followed by `part`.
  std::function<tiny::Tensor(const tiny::Tensor& carry, const tiny::Tensor& part)> combine;
  // The value of an empty prefix (combine(identity, x) == x), shaped like x.
  std::function<tiny::Tensor(const tiny::Tensor& like)> identity;
};

// Rules for the associative ops the scans need.
ScanRule sum_rule();
ScanRule prod_rule();
ScanRule max_rule();  // NaN-propagating
ScanRule min_rule();
ScanRule logaddexp_rule();

// Inclusive scan of x along `axis`.
tiny::Tensor scan(const tiny::Tensor& x, int axis, const ScanRule& rule);

}  // namespace torch_tiny
