// The fused LSTM and GRU cells. ATen's nn.LSTM / nn.GRU (and LSTMCell / GRUCell) call
// them for every time step on any device but the CPU, which has no kernel for them: the
// CPU fallback could not run them. Formulas and workspace layouts follow ATen's CUDA
// kernels (RNN.cu): gates computed in opmath, the workspace holding what the backward
// needs, so autograd's formulas (derivatives.yaml) pair them.
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "torch/pointwise.h"

namespace torch_tiny {
using namespace pw;

namespace {

// Columns [k * H, (k + 1) * H) of a (batch, n * H) value: gate k.
T gate(const T& g, int64_t k, int64_t H) { return g.shrink({{0, g.shape()[0]}, {k * H, (k + 1) * H}}); }

// A bias passed (ATen passes an RNN without biases undefined ones).
bool given(const std::optional<at::Tensor>& b) { return b.has_value() && b->defined(); }

// The checks of ATen's checkSizes for a cell: gates (batch, n * H) alike, the state
// (batch, H), biases (n * H).
int64_t check_cell(const char* name, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                   const at::Tensor& state, const std::optional<at::Tensor>& input_bias,
                   const std::optional<at::Tensor>& hidden_bias, int64_t n) {
  TORCH_CHECK(input_gates.dim() == 2, name, ": input_gates must be 2-D, got ", input_gates.dim(), "-D");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), name, ": input_gates ", input_gates.sizes(),
              " and hidden_gates ", hidden_gates.sizes(), " differ in size");
  TORCH_CHECK(input_gates.size(1) % n == 0, name, ": gates have ", input_gates.size(1), " columns, not a multiple of ",
              n);
  const int64_t H = input_gates.size(1) / n;
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) && state.size(1) == H, name,
              ": the state must be (", input_gates.size(0), ", ", H, "), got ", state.sizes());
  TORCH_CHECK(given(input_bias) == given(hidden_bias), name,
              ": input_bias and hidden_bias must both be given or both be None");
  for (const auto* b : {&input_bias, &hidden_bias})
    if (given(*b))
      TORCH_CHECK((*b)->dim() == 1 && (*b)->size(0) == n * H, name, ": a bias must be (", n * H, "), got ",
                  (*b)->sizes());
  for (const at::Tensor* t : {&input_gates, &hidden_gates, &state})
    TORCH_CHECK(t->scalar_type() == input_gates.scalar_type(), name, ": expected ", input_gates.scalar_type(),
                " tensors, got ", t->scalar_type());
  check_dtype(input_gates.scalar_type(), kFloatOnly, name);
  return H;
}

// input_gates + hidden_gates (+ both biases), in opmath
T summed_gates(const at::Tensor& ig, const at::Tensor& hg, const std::optional<at::Tensor>& ib,
               const std::optional<at::Tensor>& hb) {
  const c10::ScalarType dt = ig.scalar_type();
  const tiny::Shape shape = to_shape(ig.sizes());
  T g = operand_op(ig, dt, shape) + operand_op(hg, dt, shape);
  if (given(ib)) g = g + operand_op(*ib, dt, shape) + operand_op(*hb, dt, shape);
  return g;
}

// (hy, cy, workspace): the workspace holds the activated gates i, f, g, o.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  TinyOp op("_thnn_fused_lstm_cell");
  const int64_t H = check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  const c10::ScalarType dt = input_gates.scalar_type();
  T g = summed_gates(input_gates, hidden_gates, input_bias, hidden_bias);
  T i = sigmoid(gate(g, 0, H)), f = sigmoid(gate(g, 1, H)), c = un(Op::Tanh, gate(g, 2, H)),
    o = sigmoid(gate(g, 3, H));
  T cy = f * operand_op(cx, dt, to_shape(cx.sizes())) + i * c;
  T hy = o * un(Op::Tanh, cy);
  const tiny::DType e = to_engine(dt);
  return {make_result(hy.cast(e), dt), make_result(cy.cast(e), dt),
          make_result(T::concat({i, f, c, o}, 1).cast(e), dt)};
}

// (grad of the summed gates, grad_cx, grad of the bias or undefined)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  TinyOp op("_thnn_fused_lstm_cell_backward_impl");
  const bool has_hy = grad_hy && grad_hy->defined(), has_cy = grad_cy && grad_cy->defined();
  if (!has_hy && !has_cy) return {at::Tensor(), at::Tensor(), at::Tensor()};
  const c10::ScalarType dt = workspace.scalar_type();
  const int64_t H = cx.size(1);
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) == 4 * H && cy.sizes() == cx.sizes(),
              "_thnn_fused_lstm_cell_backward_impl: workspace ", workspace.sizes(), ", cx ", cx.sizes(), " and cy ",
              cy.sizes(), " do not match");
  const tiny::Shape state = to_shape(cx.sizes());
  T w = operand_op(workspace, dt, to_shape(workspace.sizes()));
  T i = gate(w, 0, H), f = gate(w, 1, H), c = gate(w, 2, H), o = gate(w, 3, H);
  T tanh_cy = un(Op::Tanh, operand_op(cy, dt, state));
  T ghy = has_hy ? operand_op(*grad_hy, dt, state) : cnst(tanh_cy, 0.0);
  T gcy = ghy * o * (1.0 - tanh_cy * tanh_cy);
  if (has_cy) gcy = gcy + operand_op(*grad_cy, dt, state);
  T go = ghy * tanh_cy * o * (1.0 - o);
  T gi = gcy * c * i * (1.0 - i);
  T gf = gcy * operand_op(cx, dt, state) * f * (1.0 - f);
  T gc = gcy * i * (1.0 - c * c);
  const tiny::DType e = to_engine(dt);
  T gates = T::concat({gi, gf, gc, go}, 1);
  at::Tensor grad_bias = has_bias ? make_result(gates.reduce(tiny::ReduceOp::Sum, {0}, false).cast(e), dt) : at::Tensor();
  return {make_result(gates.cast(e), dt), make_result((gcy * f).cast(e), dt), grad_bias};
}

// (hy, workspace): the workspace holds r, z, n, hx and the hidden part of n's pre-activation.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  TinyOp op("_thnn_fused_gru_cell");
  const int64_t H = check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3);
  const c10::ScalarType dt = input_gates.scalar_type();
  const tiny::Shape shape = to_shape(input_gates.sizes());
  T ig = operand_op(input_gates, dt, shape), hg = operand_op(hidden_gates, dt, shape);
  if (given(input_bias)) {
    ig = ig + operand_op(*input_bias, dt, shape);
    hg = hg + operand_op(*hidden_bias, dt, shape);
  }
  T r = sigmoid(gate(ig, 0, H) + gate(hg, 0, H));
  T z = sigmoid(gate(ig, 1, H) + gate(hg, 1, H));
  T hn = gate(hg, 2, H);
  T n = un(Op::Tanh, gate(ig, 2, H) + r * hn);
  T h = operand_op(hx, dt, to_shape(hx.sizes()));
  T hy = n + z * (h - n);
  const tiny::DType e = to_engine(dt);
  return {make_result(hy.cast(e), dt), make_result(T::concat({r, z, n, h, hn}, 1).cast(e), dt)};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TinyOp op("_thnn_fused_gru_cell_backward");
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) % 5 == 0 && grad_hy.dim() == 2 &&
                  workspace.size(1) / 5 == grad_hy.size(1) && workspace.size(0) == grad_hy.size(0),
              "_thnn_fused_gru_cell_backward: workspace ", workspace.sizes(), " does not match grad_hy ",
              grad_hy.sizes());
  const c10::ScalarType dt = workspace.scalar_type();
  const int64_t H = grad_hy.size(1);
  T w = operand_op(workspace, dt, to_shape(workspace.sizes()));
  T r = gate(w, 0, H), z = gate(w, 1, H), n = gate(w, 2, H), h = gate(w, 3, H), hn = gate(w, 4, H);
  T go = operand_op(grad_hy, dt, to_shape(grad_hy.sizes()));
  T gz = go * (h - n) * (1.0 - z) * z;
  T gn = go * (1.0 - z) * (1.0 - n * n);
  T gr = gn * hn * (1.0 - r) * r;
  const tiny::DType e = to_engine(dt);
  T g_input = T::concat({gr, gz, gn}, 1), g_hidden = T::concat({gr, gz, gn * r}, 1);
  auto bias = [&](const T& g) {
    return has_bias ? make_result(g.reduce(tiny::ReduceOp::Sum, {0}, false).cast(e), dt) : at::Tensor();
  };
  return {make_result(g_input.cast(e), dt), make_result(g_hidden.cast(e), dt), make_result((go * z).cast(e), dt),
          bias(g_input), bias(g_hidden)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace torch_tiny
