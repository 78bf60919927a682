// Ops whose output size depends on the data (masked_select, nonzero): they
// realize their inputs, compute the result on the host, and hand back a tiny
// tensor. These are synchronization points by nature, as on any device.
#include <ATen/ops/masked_select.h>
#include <ATen/ops/nonzero.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("masked_select", masked_select);
  m.impl("masked_select.out", masked_select_out);
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
}

}  // namespace torch_tiny
