#include "torch/scan.h"

#include <limits>

#include "torch/reduce_util.h"

namespace torch_tiny {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

namespace {

// A rule that fills masked-out elements with `identity` and reduces with `op`.
ScanRule simple_rule(ReduceOp op, Op combine, T (*identity)(const T&)) {
  ScanRule r;
  r.reduce = [op, identity](const T& x, const T* mask, int axis) {
    return reduce_keep(mask ? select(*mask, x, identity(x)) : x, op, {axis});
  };
  r.combine = [combine](const T& carry, const T& part) { return carry.binary(combine, part); };
  r.identity = identity;
  return r;
}

T zero_like(const T& x) { return constant_like(x, 0); }
T one_like(const T& x) { return constant_like(x, 1); }

// Scan along the last axis with the triangular mask.
T direct_scan_last(const T& x, const ScanRule& rule) {
  tiny::Shape s = x.shape();
  int nd = int(s.size());
  int64_t n = s.back();
  tiny::Shape row = s, square = s;
  row.insert(row.end() - 1, 1);        // (..., 1, n)
  square.insert(square.end() - 1, n);  // (..., n_out, n_in)
  T xe = x.reshape(row).expand(square);
  tiny::Shape grid(size_t(nd + 1), 1);
  grid[size_t(nd - 1)] = n;
  grid[size_t(nd)] = n;
  tiny::Shape plane{n, n};
  T mask = iota(plane, 1).binary(Op::CmpLe, iota(plane, 0)).reshape(grid).expand(square);  // in <= out
  return rule.reduce(xe, &mask, nd).reshape(s);
}

// `result`: the dtype the scan's result is cast to, before the blocks are flattened back: the
// cast then reads the blocked value element for element, and its kernel iterates in the
// blocked shape (a flat row's blocks would divide its index for every element).
T scan_last(const T& x, const ScanRule& rule, std::optional<tiny::DType> result) {
  auto to_result = [&](const T& v) { return result ? v.cast(*result) : v; };
  tiny::Shape s = x.shape();
  int nd = int(s.size());
  int64_t n = s.back();
  if (n <= 1 || x.numel() == 0) return to_result(x);
  if (n <= kScanDirect) return to_result(direct_scan_last(x, rule));
  // a block size that divides n avoids the padded (masked) view in the hot kernel
  int64_t b = (n % kScanBlock != 0 && n % (kScanBlock / 2) == 0) ? kScanBlock / 2 : kScanBlock;
  int64_t blocks = (n + b - 1) / b;
  // The zero padding only feeds outputs past n and the last block's total,
  // which no carry uses (scans are causal).
  tiny::Ranges pad(size_t(nd), {0, 0});
  pad.back() = {0, blocks * b - n};
  T xp = x.pad(pad);
  tiny::Shape blocked = s;
  blocked.back() = blocks;
  blocked.push_back(b);  // (..., B, b)
  T xb = xp.reshape(blocked);
  T inner = direct_scan_last(xb, rule);
  tiny::Shape totals_shape = s;
  totals_shape.back() = blocks;
  T totals = rule.reduce(xb, nullptr, nd).reshape(totals_shape);  // (..., B)
  T running = scan_last(totals, rule, std::nullopt);
  // carry[k] = running[k - 1], the identity for block 0 (so `inner` is read
  // once and fuses into this kernel)
  tiny::Ranges shift(size_t(nd), {0, 0});
  shift.back() = {1, 0};
  tiny::Ranges keep;
  for (int64_t d : totals_shape) keep.push_back({0, d});
  T carry = running.pad(shift).shrink(keep);
  T first = iota(totals_shape, nd - 1).binary(Op::CmpEq, constant(totals_shape, 0, tiny::DType::Int64));
  carry = select(first, rule.identity(carry), carry);
  tiny::Shape col = totals_shape;
  col.push_back(1);
  T out = to_result(rule.combine(carry.reshape(col).expand(blocked), inner));
  tiny::Shape flat = s;
  flat.back() = blocks * b;
  tiny::Ranges crop;
  for (int64_t d : s) crop.push_back({0, d});
  return out.reshape(flat).shrink(crop);
}

}  // namespace

ScanRule sum_rule() { return simple_rule(ReduceOp::Sum, Op::Add, zero_like); }
ScanRule prod_rule() { return simple_rule(ReduceOp::Prod, Op::Mul, one_like); }
ScanRule max_rule() { return simple_rule(ReduceOp::Max, Op::Max, lowest_like); }
ScanRule min_rule() { return simple_rule(ReduceOp::Min, Op::Min, highest_like); }

ScanRule logaddexp_rule() {
  ScanRule r;
  r.reduce = [](const T& x, const T* mask, int axis) { return logsumexp_keep(x, {axis}, mask); };
  r.combine = [](const T& carry, const T& part) { return log_add_exp(carry, part); };
  r.identity = [](const T& like) { return constant_like(like, -std::numeric_limits<double>::infinity()); };
  return r;
}

T scan(const T& x, int axis, const ScanRule& rule, std::optional<tiny::DType> result) {
  int nd = x.ndim();
  if (nd == 0) return result ? x.cast(*result) : x;
  if (axis == nd - 1) return scan_last(x, rule, result);
  std::vector<int> order;
  for (int i = 0; i < nd; i++)
    if (i != axis) order.push_back(i);
  order.push_back(axis);
  std::vector<int> inverse(static_cast<size_t>(nd));
  for (int i = 0; i < nd; i++) inverse[size_t(order[size_t(i)])] = i;
  return scan_last(x.permute(order), rule, result).permute(inverse);
}

}  // namespace torch_tiny
