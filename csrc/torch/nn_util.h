// Helpers shared by the neural-network op files (conv, norms, pooling,
// losses, optimizers): engine constants, accumulation dtypes, optional
// tensors and per-dim movement built from engine views.
#pragma once
#include <ATen/Tensor.h>

#include <optional>
#include <vector>

#include "engine/tensor/tensor.h"
#include "torch/tensor_value.h"

namespace torch_tiny::nn {

using T = tiny::Tensor;
using tiny::Op;
using tiny::ReduceOp;

inline T cnst(const tiny::Shape& shape, double v, tiny::DType dt) {
  return T::full(shape, tiny::is_float(dt) ? tiny::Scalar::from_double(v) : tiny::Scalar::from_int(int64_t(v)), dt);
}
inline T cnst_like(const T& x, double v) { return cnst(x.shape(), v, x.dtype()); }

// Whether `t` is stored data seen through views (nothing to recompute).
inline bool is_stored(const T& t) {
  const tiny::Node* n = t.node().get();
  while (!n->realized() && n->op == tiny::Op::View) n = n->src[0].get();
  return n->realized() || n->op == tiny::Op::Buffer || n->op == tiny::Op::Const || n->op == tiny::Op::Param;
}
// `t`, stored once where it is computed: for a consumer that reads each element many times.
inline T stored(const T& t) { return is_stored(t) ? t : t.contiguous(); }

inline T add(const T& a, const T& b) { return a.binary(Op::Add, b); }
inline T sub(const T& a, const T& b) { return a.binary(Op::Sub, b); }
inline T mul(const T& a, const T& b) { return a.binary(Op::Mul, b); }
inline T div(const T& a, const T& b) { return a.binary(Op::Div, b); }
inline T mul(const T& a, double c) { return mul(a, cnst_like(a, c)); }
inline T add(const T& a, double c) { return add(a, cnst_like(a, c)); }

// 16-bit floats accumulate in float32, as the CPU kernels do.
inline tiny::DType acc_dtype(c10::ScalarType t) { return tiny::compute_dtype(to_engine(t)); }
inline T read_acc(const at::Tensor& t) { return read(t).cast(acc_dtype(t.scalar_type())); }

inline bool present(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// `v` (shape (C,)) seen as (1, C, 1, ...) broadcast to `shape` (channel dim 1).
inline T channel_bcast(const T& v, const tiny::Shape& shape) {
  tiny::Shape s(shape.size(), 1);
  s[1] = shape[1];
  return v.reshape(s).expand(shape);
}

// Pads dim `d` by (before, after); negative amounts crop.
inline T pad_dim(const T& x, int d, int64_t before, int64_t after) {
  if (before == 0 && after == 0) return x;
  tiny::Ranges pads(size_t(x.ndim()), {0, 0});
  pads[size_t(d)] = {std::max<int64_t>(before, 0), std::max<int64_t>(after, 0)};
  T y = x.pad(pads);
  if (before >= 0 && after >= 0) return y;
  tiny::Ranges r;
  for (int i = 0; i < y.ndim(); i++) r.push_back({0, y.shape()[size_t(i)]});
  r[size_t(d)] = {std::max<int64_t>(-before, 0), y.shape()[size_t(d)] - std::max<int64_t>(-after, 0)};
  return y.shrink(r);
}

inline std::vector<int> range_axes(int begin, int end) {
  std::vector<int> a;
  for (int i = begin; i < end; i++) a.push_back(i);
  return a;
}

}  // namespace torch_tiny::nn
