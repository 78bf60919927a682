// Normalization layers and their backward: batch norm (training statistics,
// in-place running-stat updates, eval mode), layer norm and group norm.
// Statistics use one pass over a per-group shifted copy of the data (sum and
// sum of squares of x - x[first]): both sums are one reduce kernel, and the
// shift keeps the cancellation of E[x^2] - E[x]^2 small.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/nn_util.h"
#include "torch/ops_util.h"

namespace torch_tiny {
namespace {

using namespace nn;

struct Moments {
  T mean, var;  // keepdim shapes; var is biased
};

// Mean and biased variance of x over `axes` (kept as size-1 dims).
Moments moments(const T& x, const std::vector<int>& axes) {
  tiny::Ranges first;
  for (int i = 0; i < x.ndim(); i++) first.push_back({0, x.shape()[size_t(i)]});
  int64_t n = 1;
  for (int a : axes) {
    first[size_t(a)] = {0, 1};
    n *= x.shape()[size_t(a)];
  }
  T shift = x.shrink(first);
  T d = sub(x, shift.expand(x.shape()));
  T s1 = d.reduce(ReduceOp::Sum, axes, true);
  T s2 = mul(d, d).reduce(ReduceOp::Sum, axes, true);
  T inv_n = cnst_like(s1, 1.0 / double(n));
  T md = mul(s1, inv_n);
  T var = sub(mul(s2, inv_n), mul(md, md));
  var = var.binary(Op::Max, cnst_like(var, 0.0));
  return {add(shift, md), var};
}

T rsqrt_eps(const T& var, double eps) { return add(var, eps).unary(Op::Sqrt).unary(Op::Recip); }

// Parameter dtype of the stats: float32 when a reduced-precision input meets float parameters.
c10::ScalarType stat_type(const at::Tensor& input, std::initializer_list<const std::optional<at::Tensor>*> params) {
  c10::ScalarType t = input.scalar_type();
  if (t != c10::kHalf && t != c10::kBFloat16) return t;
  for (auto* p : params)
    if (present(*p) && p->value().scalar_type() == c10::kFloat) return c10::kFloat;
  return t;
}

at::Tensor empty_like_stats(const at::Tensor& input, c10::ScalarType dt) {
  return at::empty({0}, input.options().dtype(dt));
}

// x: (N, C, L) view of the input
T as_ncl(const at::Tensor& input) {
  int64_t N = input.size(0), C = input.size(1);
  int64_t L = N * C == 0 ? 0 : input.numel() / (N * C);
  return read_acc(input).reshape({N, C, L});
}
T param_or(const std::optional<at::Tensor>& p, int64_t C, double v, tiny::DType dt) {
  return present(p) ? read(*p).cast(dt) : cnst({C}, v, dt);
}
T c13(const T& v, const tiny::Shape& ncl) { return v.reshape({1, ncl[1], 1}).expand(ncl); }

// ---------------------------------------------------------------- batch norm
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_impl(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  TinyOp op("batch_norm");
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dims, got ", input.dim());
  int64_t C = input.size(1);
  for (auto* p : {&weight, &bias, &running_mean, &running_var})
    if (present(*p))
      TORCH_CHECK(p->value().numel() == C, "batch_norm: expected a parameter of ", C, " elements, got ",
                  p->value().numel());
  c10::ScalarType st = stat_type(input, {&weight, &bias, &running_mean, &running_var});
  c10::ScalarType dt = input.scalar_type();
  T x = as_ncl(input);
  tiny::DType acc = x.dtype();
  const tiny::Shape& s = x.shape();
  T mean, invstd;
  at::Tensor save_mean, save_invstd;
  if (training) {
    TORCH_CHECK(input.numel() > 0 || C == 0, "batch_norm: cannot compute statistics of an empty batch");
    int64_t n = s[0] * s[2];
    Moments m = moments(x, {0, 2});
    mean = m.mean.reshape({C});
    invstd = rsqrt_eps(m.var, eps).reshape({C});
    save_mean = make_result(mean.cast(to_engine(st)), st);
    save_invstd = make_result(invstd.cast(to_engine(st)), st);
    if (present(running_mean)) {
      const at::Tensor& rm = *running_mean;
      T r = read(rm).cast(acc);
      T upd = add(mul(r, 1.0 - momentum), mul(mean, momentum));
      write(rm, upd.cast(to_engine(rm.scalar_type())));
    }
    if (present(running_var)) {
      const at::Tensor& rv = *running_var;
      T r = read(rv).cast(acc);
      T unbiased = mul(m.var.reshape({C}), double(n) / double(n - 1));
      T upd = add(mul(r, 1.0 - momentum), mul(unbiased, momentum));
      write(rv, upd.cast(to_engine(rv.scalar_type())));
    }
  } else {
    TORCH_CHECK(present(running_mean) && present(running_var),
                "running_mean and running_var must be defined in evaluation mode");
    mean = read(*running_mean).cast(acc);
    invstd = rsqrt_eps(read(*running_var).cast(acc), eps);
    save_mean = empty_like_stats(input, st);
    save_invstd = empty_like_stats(input, st);
  }
  // (x - mean) * scale + bias: folding mean into the bias would cancel badly when |mean| >> std
  T scale = mul(invstd, param_or(weight, C, 1.0, acc));
  T out = add(mul(sub(x, c13(mean, s)), c13(scale, s)), c13(param_or(bias, C, 0.0, acc), s));
  at::Tensor result = make_result(out.cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt);
  return {result, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  return batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
  return batch_norm_impl(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  auto [out, m, v] = batch_norm_impl(input, weight, bias, running_mean, running_var, true, momentum, eps);
  return {out, m, v, at::empty({0}, input.options().dtype(c10::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_impl(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  TinyOp op("batch_norm_backward");
  int64_t C = input.size(1);
  c10::ScalarType dt = input.scalar_type();
  T x = as_ncl(input);
  tiny::DType acc = x.dtype();
  const tiny::Shape& s = x.shape();
  T go = read_acc(grad_out).reshape(s);
  T mean, invstd;
  if (train) {
    TORCH_CHECK(present(save_mean) && present(save_invstd), "batch_norm_backward: training needs the saved statistics");
    mean = read(*save_mean).cast(acc);
    invstd = read(*save_invstd).cast(acc);
  } else {
    TORCH_CHECK(present(running_mean) && present(running_var), "batch_norm_backward: eval needs the running statistics");
    mean = read(*running_mean).cast(acc);
    invstd = rsqrt_eps(read(*running_var).cast(acc), eps);
  }
  T w = param_or(weight, C, 1.0, acc);
  T xhat = mul(sub(x, c13(mean, s)), c13(invstd, s));
  T sum_go = go.reduce(ReduceOp::Sum, {0, 2}, false);
  T sum_go_xhat = mul(go, xhat).reduce(ReduceOp::Sum, {0, 2}, false);
  at::Tensor gi, gw, gb;
  c10::ScalarType pt = present(weight) ? weight->scalar_type() : dt;
  if (mask[0]) {
    T g;
    if (train) {
      double n = double(s[0] * s[2]);
      T k = mul(w, invstd);  // (C,)
      T mg = mul(sum_go, 1.0 / n), mgx = mul(sum_go_xhat, 1.0 / n);
      g = mul(sub(sub(go, c13(mg, s)), mul(xhat, c13(mgx, s))), c13(k, s));
    } else {
      g = mul(go, c13(mul(w, invstd), s));
    }
    gi = make_result(g.cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt);
  }
  if (mask[1]) gw = make_result(sum_go_xhat.cast(to_engine(pt)), pt);
  if (mask[2]) gb = make_result(sum_go.cast(to_engine(pt)), pt);
  return {gi, gw, gb};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  return batch_norm_backward_impl(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                                  eps, mask);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> mask, const at::Tensor& /*reserve*/) {
  // `update` marks the training path: the saved statistics are the batch's
  bool train = update || !(present(running_mean) && present(running_var));
  return batch_norm_backward_impl(grad_out, input, weight, running_mean, running_var, save_mean, save_var, train, eps,
                                  mask);
}

// ---------------------------------------------------------------- layer norm
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input,
                                                                  c10::IntArrayRef normalized_shape,
                                                                  const std::optional<at::Tensor>& weight,
                                                                  const std::optional<at::Tensor>& bias, double eps) {
  TinyOp op("layer_norm");
  int64_t nd = int64_t(normalized_shape.size());
  TORCH_CHECK(nd >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = ", normalized_shape);
  TORCH_CHECK(input.dim() >= nd && input.sizes().slice(size_t(input.dim() - nd)).equals(normalized_shape),
              "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              c10::Join(", ", normalized_shape), "], but got input of size", input.sizes());
  for (auto* p : {&weight, &bias})
    if (present(*p))
      TORCH_CHECK(p->value().sizes().equals(normalized_shape), "Expected weight to be of same shape as normalized_shape, but got weight of shape ", p->value().sizes(), " and normalized_shape = ", normalized_shape);
  c10::ScalarType dt = input.scalar_type();
  c10::ScalarType st = stat_type(input, {&weight, &bias});
  int64_t axis = input.dim() - nd;
  int64_t M = 1, Nn = 1;
  for (int64_t i = 0; i < input.dim(); i++) (i < axis ? M : Nn) *= input.size(i);
  c10::DimVector stat_sizes(input.sizes().begin(), input.sizes().begin() + axis);
  for (int64_t i = 0; i < nd; i++) stat_sizes.push_back(1);
  if (M == 0 || Nn == 0) {
    // empty: nothing to normalize (an empty group has NaN statistics on the CPU)
    T nanv = cnst(to_shape(stat_sizes), Nn == 0 ? NAN : 0.0, to_engine(st));
    return {make_result(cnst(to_shape(input.sizes()), 0, to_engine(dt)), dt), make_result(nanv, st),
            make_result(nanv, st)};
  }
  T x = read_acc(input).reshape({M, Nn});
  tiny::DType acc = x.dtype();
  Moments m = moments(x, {1});
  T rstd = rsqrt_eps(m.var, eps);
  T y = mul(sub(x, m.mean.expand({M, Nn})), rstd.expand({M, Nn}));
  if (present(weight)) y = mul(y, read(*weight).cast(acc).reshape({1, Nn}).expand({M, Nn}));
  if (present(bias)) y = add(y, read(*bias).cast(acc).reshape({1, Nn}).expand({M, Nn}));
  return {make_result(y.cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt),
          make_result(m.mean.cast(to_engine(st)).reshape(to_shape(stat_sizes)), st),
          make_result(rstd.cast(to_engine(st)).reshape(to_shape(stat_sizes)), st)};
}

// Gradient of y = (x - mean) * rstd * w over a normalized axis `ax` of x (shape (..)),
// with g = grad_out * w already applied: rstd * (g - mean(g) - xhat * mean(g * xhat)).
T norm_input_grad(const T& g, const T& xhat, const T& rstd_b, const std::vector<int>& axes, int64_t n) {
  T mg = mul(g.reduce(ReduceOp::Sum, axes, true), 1.0 / double(n)).expand(g.shape());
  T mgx = mul(mul(g, xhat).reduce(ReduceOp::Sum, axes, true), 1.0 / double(n)).expand(g.shape());
  return mul(sub(sub(g, mg), mul(xhat, mgx)), rstd_b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> mask) {
  TinyOp op("layer_norm_backward");
  c10::ScalarType dt = input.scalar_type();
  int64_t nd = int64_t(normalized_shape.size()), axis = input.dim() - nd;
  int64_t M = 1, Nn = 1;
  for (int64_t i = 0; i < input.dim(); i++) (i < axis ? M : Nn) *= input.size(i);
  at::Tensor gi, gw, gb;
  if (M == 0 || Nn == 0) {
    if (mask[0]) gi = make_result(cnst(to_shape(input.sizes()), 0, to_engine(dt)), dt);
    if (mask[1] && present(weight)) gw = make_result(cnst(to_shape(weight->sizes()), 0, to_engine(weight->scalar_type())), weight->scalar_type());
    if (mask[2] && present(bias)) gb = make_result(cnst(to_shape(bias->sizes()), 0, to_engine(bias->scalar_type())), bias->scalar_type());
    return {gi, gw, gb};
  }
  T x = read_acc(input).reshape({M, Nn});
  tiny::DType acc = x.dtype();
  tiny::Shape s{M, Nn};
  T go = read_acc(grad_out).reshape(s);
  T mu = read(mean).cast(acc).reshape({M, 1}).expand(s);
  T rs = read(rstd).cast(acc).reshape({M, 1}).expand(s);
  T xhat = mul(sub(x, mu), rs);
  if (mask[0]) {
    T g = present(weight) ? mul(go, read(*weight).cast(acc).reshape({1, Nn}).expand(s)) : go;
    gi = make_result(norm_input_grad(g, xhat, rs, {1}, Nn).cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt);
  }
  if (mask[1] && present(weight)) {
    c10::ScalarType pt = weight->scalar_type();
    gw = make_result(mul(go, xhat).reduce(ReduceOp::Sum, {0}, false).cast(to_engine(pt)).reshape(to_shape(weight->sizes())), pt);
  }
  if (mask[2] && present(bias)) {
    c10::ScalarType pt = bias->scalar_type();
    gb = make_result(go.reduce(ReduceOp::Sum, {0}, false).cast(to_engine(pt)).reshape(to_shape(bias->sizes())), pt);
  }
  return {gi, gw, gb};
}

// ---------------------------------------------------------------- group norm
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(const at::Tensor& input,
                                                                  const std::optional<at::Tensor>& weight,
                                                                  const std::optional<at::Tensor>& bias, int64_t N,
                                                                  int64_t C, int64_t HxW, int64_t group, double eps) {
  TinyOp op("group_norm");
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible by num_groups, but got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "Expected input to have ", N * C * HxW, " elements, got ", input.numel());
  for (auto* p : {&weight, &bias})
    if (present(*p))
      TORCH_CHECK(p->value().dim() == 1 && p->value().numel() == C, "Expected weight to be a vector of size equal to the number of channels in input, but got weight of shape ", p->value().sizes(), " and input of shape ", input.sizes());
  c10::ScalarType dt = input.scalar_type();
  c10::ScalarType st = stat_type(input, {&weight, &bias});
  int64_t G = group, Cg = C / G;
  if (N == 0 || Cg * HxW == 0) {
    T nanv = cnst({N, G}, Cg * HxW == 0 ? NAN : 0.0, to_engine(st));
    return {make_result(cnst(to_shape(input.sizes()), 0, to_engine(dt)), dt), make_result(nanv, st),
            make_result(nanv, st)};
  }
  T x = read_acc(input).reshape({N, G, Cg, HxW});
  tiny::DType acc = x.dtype();
  tiny::Shape s = x.shape();
  Moments m = moments(x, {2, 3});
  T rstd = rsqrt_eps(m.var, eps);
  T y = mul(sub(x, m.mean.expand(s)), rstd.expand(s));
  if (present(weight)) y = mul(y, read(*weight).cast(acc).reshape({1, G, Cg, 1}).expand(s));
  if (present(bias)) y = add(y, read(*bias).cast(acc).reshape({1, G, Cg, 1}).expand(s));
  return {make_result(y.cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt),
          make_result(m.mean.cast(to_engine(st)).reshape({N, G}), st),
          make_result(rstd.cast(to_engine(st)).reshape({N, G}), st)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t N, int64_t C, int64_t HxW, int64_t group,
    std::array<bool, 3> mask) {
  TinyOp op("group_norm_backward");
  c10::ScalarType dt = input.scalar_type();
  int64_t G = group, Cg = C / G;
  at::Tensor gi, gw, gb;
  c10::ScalarType pt = present(weight) ? weight->scalar_type() : dt;
  if (N == 0 || Cg * HxW == 0) {
    if (mask[0]) gi = make_result(cnst(to_shape(input.sizes()), 0, to_engine(dt)), dt);
    if (mask[1]) gw = make_result(cnst({C}, 0, to_engine(pt)), pt);
    if (mask[2]) gb = make_result(cnst({C}, 0, to_engine(pt)), pt);
    return {gi, gw, gb};
  }
  T x = read_acc(input).reshape({N, G, Cg, HxW});
  tiny::DType acc = x.dtype();
  tiny::Shape s = x.shape();
  T go = read_acc(grad_out).reshape(s);
  T mu = read(mean).cast(acc).reshape({N, G, 1, 1}).expand(s);
  T rs = read(rstd).cast(acc).reshape({N, G, 1, 1}).expand(s);
  T xhat = mul(sub(x, mu), rs);
  if (mask[0]) {
    T g = present(weight) ? mul(go, read(*weight).cast(acc).reshape({1, G, Cg, 1}).expand(s)) : go;
    gi = make_result(norm_input_grad(g, xhat, rs, {2, 3}, Cg * HxW).cast(to_engine(dt)).reshape(to_shape(input.sizes())), dt);
  }
  if (mask[1]) gw = make_result(mul(go, xhat).reduce(ReduceOp::Sum, {0, 3}, false).reshape({C}).cast(to_engine(pt)), pt);
  if (mask[2]) gb = make_result(go.reduce(ReduceOp::Sum, {0, 3}, false).reshape({C}).cast(to_engine(pt)), pt);
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("native_batch_norm_backward", native_batch_norm_backward);
  m.impl("_native_batch_norm_legit", native_batch_norm_legit);
  m.impl("_native_batch_norm_legit.no_stats", native_batch_norm_legit_no_stats);
  m.impl("_batch_norm_with_update", batch_norm_with_update);
  m.impl("batch_norm_backward", batch_norm_backward);
  m.impl("native_layer_norm", native_layer_norm);
  m.impl("native_layer_norm_backward", native_layer_norm_backward);
  m.impl("native_group_norm", native_group_norm);
  m.impl("native_group_norm_backward", native_group_norm_backward);
}

}  // namespace torch_tiny
