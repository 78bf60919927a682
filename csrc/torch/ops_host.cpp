// Ops whose output size depends on the data (masked_select, nonzero): they
// realize their inputs, compute the result on the host, and hand back a tiny
// tensor. These are synchronization points by nature, as on any device.
// nonzero_static has a fixed size and stays lazy: a running count of the nonzeros places each
// one's coordinates.
#include <ATen/ops/masked_select.h>
#include <ATen/ops/nonzero.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/scan.h"
#include "torch/ops_util.h"
#include "torch/reduce_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;
using tiny::Op;

at::Tensor to_host(const at::Tensor& t) { return t.device().type() == c10::DeviceType::CPU ? t : t.cpu(); }
at::Tensor to_tiny(const at::Tensor& host) {
  TinyOp op("host");
  return wrap(from_cpu(host), host.scalar_type());
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  return to_tiny(at::masked_select(to_host(self), to_host(mask)));
}
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  at::Tensor r = at::masked_select(to_host(self), to_host(mask));
  TinyOp op("masked_select");
  return assign_out(out, from_cpu(r), r.scalar_type(), {self, mask});
}
at::Tensor nonzero(const at::Tensor& self) { return to_tiny(at::nonzero(to_host(self))); }
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  at::Tensor r = at::nonzero(to_host(self));
  TinyOp op("nonzero");
  return assign_out(out, from_cpu(r), r.scalar_type(), {self});
}

T nonzero_static_value(const at::Tensor& self, int64_t size, int64_t fill_value) {
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  const int64_t nd = self.dim(), n = self.numel();
  T out = T::full({size * nd}, tiny::Scalar::from_int(fill_value), tiny::DType::Int64);
  if (n == 0 || nd == 0 || size == 0) return out.reshape({size, nd});
  T nonzero = read(self).reshape({n}).binary(Op::CmpNe, T::full({n}, tiny::Scalar::from_int(0), to_engine(self.scalar_type())));
  T rank = scan(nonzero.cast(tiny::DType::Int64), 0, sum_rule()).binary(Op::Sub, i64(1, {n}));  // among the nonzeros
  T kept = nonzero.binary(Op::And, rank.binary(Op::CmpLt, i64(size, {n})));
  const tiny::Shape shape = to_shape(self.sizes());
  std::vector<T> coords;  // each element's coordinates
  for (int d = 0; d < int(nd); d++) coords.push_back(iota(shape, d).reshape({n, 1}));
  T coord = T::concat(coords, 1);  // (n, nd)
  T slot = rank.binary(Op::Mul, i64(nd, {n})).reshape({n, 1}).expand({n, nd}).binary(Op::Add, iota({n, nd}, 1));
  T target = T::where(kept.reshape({n, 1}).expand({n, nd}), slot, i64(-1, {n, nd}));  // -1: dropped
  return out.scatter(target.reshape({n * nd}), coord.reshape({n * nd}), false).reshape({size, nd});
}
at::Tensor nonzero_static(const at::Tensor& self, int64_t size, int64_t fill_value) {
  TinyOp op("nonzero_static");
  return make_result(nonzero_static_value(self, size, fill_value), c10::kLong);
}
at::Tensor& nonzero_static_out(const at::Tensor& self, int64_t size, int64_t fill_value, at::Tensor& out) {
  TinyOp op("nonzero_static");
  return assign_out(out, nonzero_static_value(self, size, fill_value), c10::kLong, {self});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero_static", nonzero_static);
  m.impl("nonzero_static.out", nonzero_static_out);
  m.impl("masked_select", masked_select);
  m.impl("masked_select.out", masked_select_out);
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
}

}  // namespace torch_tiny
