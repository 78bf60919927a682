// _scaled_dot_product_flash_attention_for_cpu: the CPU's fused attention op,
// called directly (scaled_dot_product_attention on tiny takes ATen's math
// path, which fuses the same way). softmax(q k^T * scale + mask) v with the
// row log-sum-exp, in float64 for float32 inputs and float32 for 16-bit ones; a row with every
// key masked gives output 0 and log-sum-exp 0, as the CPU's kernel does.
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "torch/pointwise.h"
#include "torch/reduce_util.h"

namespace torch_tiny {
namespace {

using namespace pw;
using T = tiny::Tensor;

std::tuple<at::Tensor, at::Tensor> flash_attention_for_cpu(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, double dropout_p, bool is_causal,
                                                           const std::optional<at::Tensor>& attn_mask,
                                                           std::optional<double> scale) {
  TinyOp op("scaled_dot_product_flash_attention");
  const char* api = "scaled_dot_product_attention_flash_attention";
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, api, ": Accept only 4 dims inputs shape of {B, H, T, K}");
  TORCH_CHECK(dropout_p == 0.0, api, ": Currently do not support dropout > 0");
  TORCH_CHECK(q.size(3) == v.size(3) && k.size(3) == v.size(3), api, ": Q/K/V should have the same head size");
  TORCH_CHECK(!attn_mask.has_value() || attn_mask->scalar_type() == q.scalar_type(), api,
              ": Attention mask is the same data type as query");
  c10::ScalarType dt = q.scalar_type();
  TORCH_CHECK(c10::isFloatingType(dt), api, ": Expected a floating point query, got ", dt);
  // float32 computes in float64: logits of a few hundred lose 1e-5 in float32, which exp amplifies
  c10::ScalarType acc = opmath(dt);
  tiny::DType e = to_engine(dt == c10::kFloat ? c10::kDouble : acc);
  auto batch = at::infer_size(q.sizes().slice(0, 2), at::infer_size(k.sizes().slice(0, 2), v.sizes().slice(0, 2)));
  int64_t L = q.size(2), S = k.size(2), E = q.size(3);
  tiny::Shape qs{batch[0], batch[1], L, E}, ks{batch[0], batch[1], S, E}, ss{batch[0], batch[1], L, S};
  T qv = broadcast_to(read(q).cast(e), qs), kv = broadcast_to(read(k).cast(e), ks), vv = broadcast_to(read(v).cast(e), ks);
  double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(double(E));
  T s = qv.matmul(kv.permute({0, 1, 3, 2})) * sc;
  const double inf = std::numeric_limits<double>::infinity();
  if (is_causal) s = where(le(iota(ss, 3), iota(ss, 2)), s, -inf);  // top-left: key j <= query i
  if (attn_mask.has_value()) s = s + broadcast_to(read(*attn_mask).cast(e), ss);
  T top = s.reduce(tiny::ReduceOp::Max, {3}, true);
  T none = eq(top, -inf);  // every key masked
  T shifted = un(Op::Exp, s - where(none, 0.0, top).expand(ss));
  T total = shifted.reduce(tiny::ReduceOp::Sum, {3}, true);
  T weights = where(none.expand(ss), 0.0, shifted / total.expand(ss));
  T out = weights.matmul(vv).cast(to_engine(dt));
  T lse = where(none, 0.0, top + un(Op::Log, total)).reshape({batch[0], batch[1], L}).cast(to_engine(acc));
  return {make_result(out, dt), make_result(lse, acc)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_flash_attention_for_cpu", flash_attention_for_cpu);
}

}  // namespace torch_tiny
