// Loss functions with ATen kernels and their backward: nll_loss (1d and nd),
// mse, smooth_l1, huber, binary_cross_entropy (+ with_logits forward; its
// backward is a composite formula), multi_margin_loss, multilabel_margin_loss. Composite losses (cross_entropy, l1,
// kl_div, cosine_similarity) decompose into these and elementwise ops.
//
// Data-dependent checks the CPU makes by reading values (target out of range,
// BCE input outside [0, 1]) would need a sync; here an out-of-range target
// gives NaN instead, keeping the step lazy.
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cmath>

#include "torch/elementwise.h"
#include "torch/nn_util.h"
#include "torch/ops_util.h"

namespace torch_tiny {
namespace {

using namespace nn;

T reduce_loss(const T& loss, int64_t reduction) {
  if (reduction == at::Reduction::None) return loss;
  std::vector<int> axes = range_axes(0, loss.ndim());
  if (loss.ndim() == 0) return loss;
  T s = loss.reduce(ReduceOp::Sum, axes, false);
  if (reduction == at::Reduction::Mean) s = mul(s, 1.0 / double(loss.numel()));  // 0 elements: NaN
  return s;
}
// d(reduced)/d(loss element) times grad_output, broadcast to `shape`
T loss_grad_scale(const at::Tensor& grad_output, const tiny::Shape& shape, int64_t reduction, tiny::DType acc) {
  T g = read(grad_output).cast(acc);
  if (reduction == at::Reduction::None) return broadcast_to(g, shape);
  g = broadcast_to(g.reshape({}), shape);
  if (reduction == at::Reduction::Mean) g = mul(g, 1.0 / double(tiny::numel(shape)));
  return g;
}
void check_reduction(int64_t r) {
  TORCH_CHECK(r == at::Reduction::None || r == at::Reduction::Mean || r == at::Reduction::Sum, r,
              " is not a valid value for reduction");
}

// ---------------------------------------------------------------- nll_loss
struct NllView {
  int64_t C = 0, M = 0;      // classes, number of targets
  tiny::Shape target_shape;  // shape of `none` output
  bool batched = true;
};
// self (N, C, d...) or (C,), target (N, d...) or ()
NllView nll_view(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(self.dim() >= 1, "input tensor should be 1D or 2D");
  TORCH_CHECK(c10::isIntegralType(target.scalar_type(), false),
              "expected scalar type Long but found ", target.scalar_type());
  NllView v;
  v.batched = self.dim() >= 2;
  v.C = self.size(v.batched ? 1 : 0);
  if (v.batched) {
    TORCH_CHECK(target.dim() == self.dim() - 1, "0D or 1D target tensor expected, multi-target not supported");
    TORCH_CHECK(self.size(0) == target.size(0), "size mismatch (got input: ", self.sizes(), ", target: ",
                target.sizes(), ")");
    for (int64_t i = 2; i < self.dim(); i++)
      TORCH_CHECK(self.size(i) == target.size(i - 1), "size mismatch (got input: ", self.sizes(), ", target: ",
                  target.sizes(), ")");
  } else {
    TORCH_CHECK(target.dim() <= 1 && target.numel() == 1, "0D or 1D target tensor expected, multi-target not supported");
  }
  TORCH_CHECK(!present(weight) || weight->numel() == v.C, "weight tensor should be defined either for all ", v.C,
              " classes or no classes but got weight tensor of shape: ", weight->sizes());
  v.target_shape = v.batched ? to_shape(target.sizes()) : tiny::Shape{};
  v.M = tiny::numel(v.target_shape);
  return v;
}
// self as (M, C) rows (class dim last; a view)
T nll_rows(const at::Tensor& self, const NllView& v, tiny::DType acc) {
  T x = read(self).cast(acc);
  if (!v.batched) return x.reshape({1, v.C});
  std::vector<int> perm{0};
  for (int i = 2; i < x.ndim(); i++) perm.push_back(i);
  perm.push_back(1);
  return x.permute(perm).reshape({v.M, v.C});
}

struct NllParts {
  T t, valid, w;  // (M,) target, in-range-and-not-ignored mask, per-target weight (0 if ignored)
  T bad;          // out of range and not ignored
};
NllParts nll_parts(const at::Tensor& target, const std::optional<at::Tensor>& weight, const NllView& v,
                   int64_t ignore_index, tiny::DType acc) {
  NllParts p;
  p.t = read(target).cast(tiny::DType::Int64).reshape({v.M});
  T lo = p.t.binary(Op::CmpLt, cnst_like(p.t, 0)), hi = cnst_like(p.t, double(v.C - 1)).binary(Op::CmpLt, p.t);
  T ignored = p.t.binary(Op::CmpEq, cnst_like(p.t, double(ignore_index)));
  T in_range = lo.binary(Op::Or, hi).unary(Op::Not);
  p.valid = in_range.binary(Op::And, ignored.unary(Op::Not));
  p.bad = in_range.binary(Op::Or, ignored).unary(Op::Not);
  T w1 = cnst({v.M}, 1.0, acc);
  if (present(weight)) {
    T safe = T::where(in_range, p.t, cnst_like(p.t, 0));
    w1 = read(*weight).cast(acc).gather(safe);
  }
  p.w = T::where(p.valid, w1, cnst({v.M}, 0.0, acc));
  return p;
}

std::tuple<at::Tensor, at::Tensor> nll_forward_impl(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    int64_t ignore_index) {
  TinyOp op("nll_loss");
  check_reduction(reduction);
  NllView v = nll_view(self, target, weight);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt), edt = to_engine(dt);
  if (v.M == 0 || v.C == 0) {
    T out = reduction == at::Reduction::None ? cnst(v.target_shape, 0, edt)
                                             : cnst({}, reduction == at::Reduction::Mean ? NAN : 0.0, edt);
    return {make_result(out, dt), make_result(cnst({}, 0, edt), dt)};
  }
  NllParts p = nll_parts(target, weight, v, ignore_index, acc);
  T rows = nll_rows(self, v, acc).reshape({v.M * v.C});
  T safe_t = T::where(p.valid, p.t, cnst_like(p.t, 0));
  T flat = add(T::arange(v.M, tiny::Scalar::from_int(0), tiny::Scalar::from_int(v.C), tiny::DType::Int64), safe_t);
  T picked = rows.gather(flat);
  // an ignored target contributes 0; an out-of-range one poisons the result with NaN
  T nan = cnst({v.M}, NAN, acc);
  T ignored_or_bad = T::where(p.bad, nan, cnst({v.M}, 0.0, acc));
  T loss = T::where(p.valid, mul(picked, p.w).unary(Op::Neg), ignored_or_bad);
  T out, total;
  if (reduction == at::Reduction::None) {
    out = loss.reshape(v.target_shape);
    total = cnst({}, 0.0, acc);
  } else {
    out = loss.reduce(ReduceOp::Sum, {0}, false);
    total = p.w.reduce(ReduceOp::Sum, {0}, false);
    if (reduction == at::Reduction::Mean) out = div(out, total);
  }
  return {make_result(out.cast(edt), dt), make_result(total.cast(edt), dt)};
}

at::Tensor nll_backward_impl(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  TinyOp op("nll_loss_backward");
  check_reduction(reduction);
  NllView v = nll_view(self, target, weight);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt), edt = to_engine(dt);
  if (v.M == 0 || v.C == 0) return make_result(cnst(to_shape(self.sizes()), 0, edt), dt);
  NllParts p = nll_parts(target, weight, v, ignore_index, acc);
  T g = read(grad_output).cast(acc);
  if (reduction == at::Reduction::None) {
    g = g.reshape({v.M});
  } else {
    g = g.reshape({});
    if (reduction == at::Reduction::Mean) g = div(g, read(total_weight).cast(acc).reshape({}));
    g = g.reshape({1}).expand({v.M});
  }
  T coef = mul(p.w, g).unary(Op::Neg);  // (M,)
  // grad[m, c] = coef[m] where c == target[m]: elementwise, no scatter
  tiny::Shape mc{v.M, v.C};
  T cls = T::arange(v.C, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), tiny::DType::Int64).reshape({1, v.C}).expand(mc);
  T hit = cls.binary(Op::CmpEq, p.t.reshape({v.M, 1}).expand(mc));
  T grad = T::where(hit, coef.reshape({v.M, 1}).expand(mc), cnst(mc, 0.0, acc));
  // back to self's layout: (M, C) -> (N, d..., C) -> (N, C, d...)
  if (!v.batched) {
    grad = grad.reshape({v.C});
  } else {
    tiny::Shape s{self.size(0)};
    for (int64_t i = 2; i < self.dim(); i++) s.push_back(self.size(i));
    s.push_back(v.C);
    std::vector<int> perm{0, int(self.dim()) - 1};
    for (int64_t i = 1; i < self.dim() - 1; i++) perm.push_back(int(i));
    grad = grad.reshape(s).permute(perm);
  }
  return make_result(grad.cast(edt), dt);
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    int64_t ignore_index) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  return nll_forward_impl(self, target, weight, reduction, ignore_index);
}
std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      int64_t ignore_index) {
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of size: ",
              self.sizes());
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of size: ",
              target.sizes());
  return nll_forward_impl(self, target, weight, reduction, ignore_index);
}
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  return nll_backward_impl(grad_output, self, target, weight, reduction, ignore_index, total_weight);
}

// ---------------------------------------------------------------- pointwise losses
enum class Kind { Mse, SmoothL1, Huber };

T pointwise_loss(Kind k, const T& d, double param) {
  T a = d.unary(Op::Abs);
  switch (k) {
    case Kind::Mse: return mul(d, d);
    case Kind::SmoothL1:
      if (param == 0) return a;
      return T::where(a.binary(Op::CmpLt, cnst_like(a, param)), mul(mul(d, d), 0.5 / param), add(a, -0.5 * param));
    case Kind::Huber:
      return T::where(a.binary(Op::CmpLt, cnst_like(a, param)), mul(mul(d, d), 0.5),
                      mul(add(a, -0.5 * param), param));
  }
  return d;
}
T pointwise_grad(Kind k, const T& d, double param) {
  switch (k) {
    case Kind::Mse: return mul(d, 2.0);
    case Kind::SmoothL1: {
      T p = cnst_like(d, param), np = cnst_like(d, -param), one = cnst_like(d, 1.0);
      T inner = param == 0 ? cnst_like(d, 0.0) : mul(d, 1.0 / param);
      return T::where(d.binary(Op::CmpLt, np), one.unary(Op::Neg), T::where(p.binary(Op::CmpLt, d), one, inner));
    }
    case Kind::Huber: {
      T p = cnst_like(d, param), np = cnst_like(d, -param);
      return T::where(d.binary(Op::CmpLt, np), np, T::where(p.binary(Op::CmpLt, d), p, d));
    }
  }
  return d;
}

T diff(const at::Tensor& self, const at::Tensor& target, tiny::DType acc) {
  tiny::Shape shape = broadcast_shape({self, target});
  return sub(broadcast_to(read(self).cast(acc), shape), broadcast_to(read(target).cast(acc), shape));
}
c10::ScalarType loss_type(const at::Tensor& self, const at::Tensor& target) {
  return c10::promoteTypes(self.scalar_type(), target.scalar_type());
}

template <Kind K>
at::Tensor pw_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double param) {
  TinyOp op("loss");
  check_reduction(reduction);
  c10::ScalarType dt = loss_type(self, target);
  T d = diff(self, target, acc_dtype(dt));
  return make_result(reduce_loss(pointwise_loss(K, d, param), reduction).cast(to_engine(dt)), dt);
}
template <Kind K>
at::Tensor pw_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                            int64_t reduction, double param) {
  TinyOp op("loss_backward");
  c10::ScalarType dt = loss_type(self, target);
  tiny::DType acc = acc_dtype(dt);
  T d = diff(self, target, acc);
  T g = mul(pointwise_grad(K, d, param), loss_grad_scale(grad_output, d.shape(), reduction, acc));
  return make_result(broadcast_to(g, to_shape(self.sizes())).cast(to_engine(dt)), dt);
}

at::Tensor mse_loss(const at::Tensor& s, const at::Tensor& t, int64_t r) { return pw_loss<Kind::Mse>(s, t, r, 0); }
at::Tensor& mse_loss_out(const at::Tensor& s, const at::Tensor& t, int64_t r, at::Tensor& out) {
  at::Tensor v = mse_loss(s, t, r);
  TinyOp op("loss");
  return assign_out(out, read(v), v.scalar_type(), {s, t});
}
at::Tensor mse_loss_backward(const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r) {
  return pw_loss_backward<Kind::Mse>(g, s, t, r, 0);
}
at::Tensor smooth_l1_loss(const at::Tensor& s, const at::Tensor& t, int64_t r, double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  return pw_loss<Kind::SmoothL1>(s, t, r, beta);
}
at::Tensor smooth_l1_loss_backward(const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                                   double beta) {
  return pw_loss_backward<Kind::SmoothL1>(g, s, t, r, beta);
}
at::Tensor huber_loss(const at::Tensor& s, const at::Tensor& t, int64_t r, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return pw_loss<Kind::Huber>(s, t, r, delta);
}
at::Tensor huber_loss_backward(const at::Tensor& g, const at::Tensor& s, const at::Tensor& t, int64_t r,
                               double delta) {
  return pw_loss_backward<Kind::Huber>(g, s, t, r, delta);
}

// ---------------------------------------------------------------- binary cross entropy
void check_bce(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.sizes() == target.sizes(), "Using a target size (", target.sizes(),
              ") that is different to the input size (", self.sizes(), ") is deprecated. ",
              "Please ensure they have the same size.");
}
T opt_weight(const std::optional<at::Tensor>& w, const tiny::Shape& shape, tiny::DType acc) {
  return present(w) ? broadcast_to(read(*w).cast(acc), shape) : T();
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
  TinyOp op("binary_cross_entropy");
  check_reduction(reduction);
  check_bce(self, target);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  T x = read(self).cast(acc), t = read(target).cast(acc);
  T m100 = cnst_like(x, -100.0);
  T lx = x.unary(Op::Log).binary(Op::Max, m100);
  T l1x = sub(cnst_like(x, 1.0), x).unary(Op::Log).binary(Op::Max, m100);
  // (t - 1) * log(1 - x) - t * log(x), as the CPU kernel orders it
  T loss = sub(mul(add(t, -1.0), l1x), mul(t, lx));
  if (present(weight)) loss = mul(loss, opt_weight(weight, x.shape(), acc));
  return make_result(reduce_loss(loss, reduction).cast(to_engine(dt)), dt);
}
at::Tensor binary_cross_entropy_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                         int64_t reduction) {
  TinyOp op("binary_cross_entropy_backward");
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  T x = read(self).cast(acc), t = read(target).cast(acc);
  T denom = mul(sub(cnst_like(x, 1.0), x), x).binary(Op::Max, cnst_like(x, 1e-12));
  T g = div(sub(x, t), denom);
  g = mul(g, loss_grad_scale(grad_output, x.shape(), reduction, acc));
  if (present(weight)) g = mul(g, opt_weight(weight, x.shape(), acc));
  return make_result(g.cast(to_engine(dt)), dt);
}

at::Tensor binary_cross_entropy_with_logits(const at::Tensor& self, const at::Tensor& target,
                                            const std::optional<at::Tensor>& weight,
                                            const std::optional<at::Tensor>& pos_weight, int64_t reduction) {
  TinyOp op("binary_cross_entropy_with_logits");
  check_reduction(reduction);
  check_bce(self, target);
  c10::ScalarType dt = self.scalar_type();
  tiny::DType acc = acc_dtype(dt);
  T x = read(self).cast(acc), t = read(target).cast(acc);
  // log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))
  T ls = sub(x.binary(Op::Min, cnst_like(x, 0.0)), x.unary(Op::Abs).unary(Op::Neg).unary(Op::Exp).unary(Op::Log1p));
  if (present(pos_weight)) {
    T pw = broadcast_to(read(*pos_weight).cast(acc), x.shape());
    ls = mul(ls, add(mul(add(pw, -1.0), t), 1.0));
  }
  T loss = sub(mul(sub(cnst_like(t, 1.0), t), x), ls);
  if (present(weight)) loss = mul(loss, opt_weight(weight, x.shape(), acc));
  return make_result(reduce_loss(loss, reduction).cast(to_engine(dt)), dt);
}


// ---------------------------------------------------------------- multi-class margin losses
// Per sample (a row of C scores), with a one-hot of the target class built by
// comparing class positions (no gather): an out-of-range target makes the
// sample's loss NaN (the CPU raises after reading it).
T class_iota(const tiny::Shape& shape) {  // the position along the last dim
  tiny::Shape s(shape.size(), 1);
  s.back() = shape.back();
  return T::arange(shape.back(), tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), tiny::DType::Int64)
      .reshape(s)
      .expand(shape);
}
T row_sum(const T& x) { return x.reduce(ReduceOp::Sum, {x.ndim() - 1}, true); }

struct MultiMargin {
  int64_t N = 1, C = 1;
  bool batched = false;
  T x, t, onehot, bad, h, wy;  // h: max(0, margin - x[y] + x[i]) (N, C); wy: the target's weight (N, 1)
};
MultiMargin multi_margin_parts(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                               const c10::Scalar& margin, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK_VALUE(p.toDouble() == 1 || p.toDouble() == 2, "only p == 1 and p == 2 supported");
  TORCH_CHECK(self.dim() <= 2 && (self.dim() == 0 || self.size(-1) != 0),
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  TORCH_CHECK(target.scalar_type() == c10::kLong, "expected scalar type Long but found ", target.scalar_type());
  MultiMargin m;
  m.batched = self.dim() == 2;
  m.N = m.batched ? self.size(0) : 1;
  m.C = self.dim() == 0 ? 1 : self.size(-1);
  TORCH_CHECK(target.dim() <= 1 && target.numel() == m.N, "multi_margin_loss: target tensor should be 1-D with size "
              "equal to the number of input samples (batch size). Expected target size [", m.N, "], but got ",
              target.sizes(), ". Input has shape ", self.sizes(), ".");
  TORCH_CHECK(!present(weight) || (weight->dim() <= 1 && weight->numel() == m.C), "inconsistent weight size, "
              "expected ", m.C, " but got ", weight->sizes());
  tiny::DType acc = acc_dtype(self.scalar_type());
  tiny::Shape nc{m.N, m.C}, n1{m.N, 1};
  m.x = read_acc(self).reshape(nc);
  m.t = read(target).reshape(n1);
  m.bad = T::where(m.t.binary(Op::CmpLt, cnst(n1, 0, tiny::DType::Int64)), cnst(n1, 1, tiny::DType::Bool),
                   cnst(n1, m.C - 1, tiny::DType::Int64).binary(Op::CmpLt, m.t));
  m.onehot = class_iota(nc).binary(Op::CmpEq, m.t.expand(nc));
  T xy = row_sum(T::where(m.onehot, m.x, cnst(nc, 0.0, acc)));
  m.h = add(sub(m.x, xy.expand(nc)), margin.toDouble()).binary(Op::Max, cnst(nc, 0.0, acc));
  m.wy = present(weight)
             ? row_sum(T::where(m.onehot, read(*weight).cast(acc).reshape({1, m.C}).expand(nc), cnst(nc, 0.0, acc)))
             : cnst(n1, 1.0, acc);
  return m;
}

T multi_margin_value(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                     const c10::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_reduction(reduction);
  MultiMargin m = multi_margin_parts(self, target, p, margin, weight);
  tiny::Shape nc{m.N, m.C};
  T hp = p.toDouble() == 2 ? mul(m.h, m.h) : m.h;
  T terms = T::where(m.onehot, cnst(nc, 0.0, m.x.dtype()), mul(hp, m.wy.expand(nc)));
  T loss = mul(row_sum(terms), 1.0 / double(m.C)).reshape({m.N});
  loss = T::where(m.bad.reshape({m.N}), cnst({m.N}, NAN, loss.dtype()), loss);
  if (!m.batched && reduction == at::Reduction::None) loss = loss.reshape({});
  return reduce_loss(loss, reduction).cast(to_engine(self.scalar_type()));
}
at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                             const c10::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  TinyOp op("multi_margin_loss");
  return make_result(multi_margin_value(self, target, p, margin, weight, reduction), self.scalar_type());
}
at::Tensor& multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target, const c10::Scalar& p,
                                  const c10::Scalar& margin, const std::optional<at::Tensor>& weight,
                                  int64_t reduction, at::Tensor& out) {
  TinyOp op("multi_margin_loss");
  return assign_out(out, multi_margin_value(self, target, p, margin, weight, reduction), self.scalar_type(),
                    {self, target});
}
at::Tensor multi_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      const c10::Scalar& p, const c10::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
  TinyOp op("multi_margin_loss_backward");
  MultiMargin m = multi_margin_parts(self, target, p, margin, weight);
  tiny::Shape nc{m.N, m.C};
  tiny::DType acc = m.x.dtype();
  T slope = p.toDouble() == 2 ? mul(m.h, 2.0) : m.h.binary(Op::CmpLt, cnst(nc, 0.0, acc)).unary(Op::Not).cast(acc);
  slope = T::where(m.h.binary(Op::CmpEq, cnst(nc, 0.0, acc)), cnst(nc, 0.0, acc), slope);  // no term where z <= 0
  T g = mul(T::where(m.onehot, cnst(nc, 0.0, acc), mul(slope, m.wy.expand(nc))), 1.0 / double(m.C));
  T gy = row_sum(g).unary(Op::Neg).expand(nc);  // the target's score gets minus the sum of the others
  T grad = T::where(m.onehot, gy, g);
  tiny::Shape ls = (m.batched || reduction != at::Reduction::None) ? tiny::Shape{m.N} : tiny::Shape{};
  T scale = loss_grad_scale(grad_output, ls, reduction, acc).reshape({m.N, 1}).expand(nc);
  return make_result(mul(grad, scale).reshape(to_shape(self.sizes())).cast(to_engine(self.scalar_type())),
                     self.scalar_type());
}

// multilabel: the targets of a row are its labels before the first -1; the
// loss sums, over target labels k and non-target classes i, max(0, 1 - x[k] + x[i]) / C
// (a repeated label counts again, as in the CPU's loop).
struct MultiLabel {
  int64_t N = 1, C = 1;
  bool batched = false;
  T x, label_is, valid, is_target, z, bad;  // label_is (N, K, C): label k is class i; z (N, K, C): 1 - x[k] + x[i]
};
MultiLabel multilabel_parts(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.dim() <= 2 && (self.dim() == 0 || self.size(-1) != 0),
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  TORCH_CHECK(target.sizes() == self.sizes(), "inconsistent target size: ", target.sizes(), " for input of size: ",
              self.sizes());
  TORCH_CHECK(target.scalar_type() == c10::kLong, "expected scalar type Long but found ", target.scalar_type());
  MultiLabel m;
  m.batched = self.dim() == 2;
  m.N = m.batched ? self.size(0) : 1;
  m.C = self.dim() == 0 ? 1 : self.size(-1);
  int64_t N = m.N, C = m.C;
  tiny::DType acc = acc_dtype(self.scalar_type());
  tiny::Shape nkc{N, C, C}, nk1{N, C, 1};
  m.x = read_acc(self).reshape({N, 1, C});
  T t = read(target).reshape(nk1);
  T k = T::arange(C, tiny::Scalar::from_int(0), tiny::Scalar::from_int(1), tiny::DType::Int64).reshape({1, C, 1});
  T first_end = T::where(t.binary(Op::CmpEq, cnst(nk1, -1, tiny::DType::Int64)), k.expand(nk1),
                         cnst(nk1, C, tiny::DType::Int64)).reduce(ReduceOp::Min, {1}, true);
  m.valid = k.expand(nk1).binary(Op::CmpLt, first_end.expand(nk1));  // (N, K, 1)
  T in_range = t.binary(Op::CmpLt, cnst(nk1, 0, tiny::DType::Int64)).unary(Op::Not)
                   .binary(Op::And, t.binary(Op::CmpLt, cnst(nk1, C, tiny::DType::Int64)));
  m.bad = m.valid.binary(Op::And, in_range.unary(Op::Not)).reduce(ReduceOp::Any, {1, 2}, false);  // (N,)
  m.label_is = class_iota(nkc).binary(Op::CmpEq, t.expand(nkc)).binary(Op::And, m.valid.expand(nkc));
  m.is_target = m.label_is.reduce(ReduceOp::Any, {1}, true);  // (N, 1, C)
  T xk = row_sum(T::where(m.label_is, m.x.expand(nkc), cnst(nkc, 0.0, acc)));  // (N, K, 1)
  m.z = add(sub(m.x.expand(nkc), xk.expand(nkc)), 1.0);
  return m;
}
// the hinge terms that count: valid label k, non-target class i, z > 0
T multilabel_active(const MultiLabel& m) {
  tiny::Shape nkc{m.N, m.C, m.C};
  return m.valid.expand(nkc)
      .binary(Op::And, m.is_target.expand(nkc).unary(Op::Not))
      .binary(Op::And, cnst(nkc, 0.0, m.z.dtype()).binary(Op::CmpLt, m.z));
}

std::pair<T, T> multilabel_values(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  check_reduction(reduction);
  MultiLabel m = multilabel_parts(self, target);
  tiny::Shape nkc{m.N, m.C, m.C};
  T terms = T::where(multilabel_active(m), m.z, cnst(nkc, 0.0, m.z.dtype()));
  T loss = mul(terms.reduce(ReduceOp::Sum, {1, 2}, false), 1.0 / double(m.C));
  loss = T::where(m.bad, cnst({m.N}, NAN, loss.dtype()), loss);
  if (!m.batched && reduction == at::Reduction::None) loss = loss.reshape({});
  tiny::DType edt = to_engine(self.scalar_type());
  return {reduce_loss(loss, reduction).cast(edt), m.is_target.cast(edt).reshape(to_shape(target.sizes()))};
}
std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                                  int64_t reduction) {
  TinyOp op("multilabel_margin_loss");
  auto [loss, is_target] = multilabel_values(self, target, reduction);
  return {make_result(loss, self.scalar_type()), make_result(is_target, self.scalar_type())};
}
std::tuple<at::Tensor&, at::Tensor&> multilabel_margin_loss_forward_out(const at::Tensor& self,
                                                                        const at::Tensor& target, int64_t reduction,
                                                                        at::Tensor& output, at::Tensor& is_target) {
  TinyOp op("multilabel_margin_loss");
  auto [loss, it] = multilabel_values(self, target, reduction);
  assign_out(output, loss, self.scalar_type(), {self, target});
  assign_out(is_target, it, self.scalar_type(), {self, target});
  return {output, is_target};
}
at::Tensor multilabel_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction, const at::Tensor&) {
  TinyOp op("multilabel_margin_loss_backward");
  MultiLabel m = multilabel_parts(self, target);
  tiny::Shape nkc{m.N, m.C, m.C};
  tiny::DType acc = m.z.dtype();
  T active = multilabel_active(m).cast(acc);
  T up = active.reduce(ReduceOp::Sum, {1}, true);     // (N, 1, C): each non-target class, once per active term
  T count = active.reduce(ReduceOp::Sum, {2}, true);  // (N, K, 1): per label, its active terms
  T down = T::where(m.label_is, count.expand(nkc), cnst(nkc, 0.0, acc)).reduce(ReduceOp::Sum, {1}, true);
  T grad = mul(sub(up, down), 1.0 / double(m.C)).reshape({m.N, m.C});
  tiny::Shape ls = (m.batched || reduction != at::Reduction::None) ? tiny::Shape{m.N} : tiny::Shape{};
  T scale = loss_grad_scale(grad_output, ls, reduction, acc).reshape({m.N, 1}).expand({m.N, m.C});
  return make_result(mul(grad, scale).reshape(to_shape(self.sizes())).cast(to_engine(self.scalar_type())),
                     self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nll_loss_forward", nll_loss_forward);
  m.impl("multi_margin_loss", multi_margin_loss);
  m.impl("multi_margin_loss.out", multi_margin_loss_out);
  m.impl("multi_margin_loss_backward", multi_margin_loss_backward);
  m.impl("multilabel_margin_loss_forward", multilabel_margin_loss_forward);
  m.impl("multilabel_margin_loss_forward.output", multilabel_margin_loss_forward_out);
  m.impl("multilabel_margin_loss_backward", multilabel_margin_loss_backward);
  m.impl("nll_loss_backward", nll_loss_backward);
  m.impl("nll_loss2d_forward", nll_loss2d_forward);
  m.impl("nll_loss2d_backward", nll_loss_backward);
  m.impl("mse_loss", mse_loss);
  m.impl("mse_loss.out", mse_loss_out);
  m.impl("mse_loss_backward", mse_loss_backward);
  m.impl("smooth_l1_loss", smooth_l1_loss);
  m.impl("smooth_l1_loss_backward", smooth_l1_loss_backward);
  m.impl("huber_loss", huber_loss);
  m.impl("huber_loss_backward", huber_loss_backward);
  m.impl("binary_cross_entropy", binary_cross_entropy);
  m.impl("binary_cross_entropy_backward", binary_cross_entropy_backward);
  m.impl("binary_cross_entropy_with_logits", binary_cross_entropy_with_logits);
}

}  // namespace torch_tiny
