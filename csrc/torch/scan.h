// Inclusive scans (prefix reductions) built from engine ops, no scan primitive.
//
// Short axes (n <= kScanDirect) use one masked triangular reduce: the input
// expanded to (..., n_out, n_in), elements with in > out replaced by the
// identity, reduced over n_in. O(n^2) arithmetic, O(n) memory traffic, and a
// single REDUCE the scheduler fuses into its consumer (one kernel).
//
// Longer axes are blocked: pad to B = ceil(n / b) blocks of b = kScanBlock
// (b / 2 when that divides n and b does not: no padded view in the hot
// kernel), reduce each block to its total, scan the B totals recursively, and
// let every element combine the inclusive total of the blocks before it with
// the direct scan of its own block (one fused kernel per level). Per level:
// O(n * b) arithmetic on cached data and O(n) memory traffic; levels shrink by
// b, so the whole scan is O(n * b) work in at most 2 * log_b(n / 32) + 1
// kernels before the scheduler merges some (n = 2000: 4, n = 40000: 6,
// n = 1e6: 8). On the CPU b = 16 balanced the block scan's cost (b = 32 was
// ~2x slower at n = 1e6) against the graph size the scheduler walks (b = 8
// doubled the scheduling time of cummax / logcumsumexp).
#pragma once
#include <functional>
#include <optional>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

constexpr int64_t kScanDirect = 32;
constexpr int64_t kScanBlock = 16;  // 8 when that divides n and 16 does not

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

// Inclusive scan of x along `axis`, cast to `result` where given.
tiny::Tensor scan(const tiny::Tensor& x, int axis, const ScanRule& rule, std::optional<tiny::DType> result = std::nullopt);

}  // namespace torch_tiny
