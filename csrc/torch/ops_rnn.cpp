// The fused LSTM and GRU cells, and whole sequences through them.
//
// ATen's LSTMCell / GRUCell call the fused cells on any device but the CPU, which has no
// kernel for them: the CPU fallback could not run them. Formulas follow ATen's CUDA kernels
// (RNN.cu): gates computed in opmath, the workspace holding what the backward needs, so
// autograd's formulas (derivatives.yaml) pair them. Only these kernels read the workspace:
// the LSTM's holds the summed gates before activation (one value the graph has anyway, where
// the four activated gates joined took seven nodes a step), which its backward activates again.
//
// nn.LSTM / nn.GRU / nn.RNN call lstm.input, gru.input and rnn_{tanh,relu}.input: ATen's
// composites, which off the CPU multiply each time step's input by W_ih on its own. Here,
// as ATen does on the CPU, each layer and direction multiplies all its steps' inputs at once,
// then runs its steps as one autograd node (below); an LSTM with projections runs them through
// the cells step by step.
#include <ATen/ATen.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/tensor/subgraph.h"
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

// The activated gates i, f, g, o of the summed gates (batch, 4 * H).
std::array<T, 4> lstm_gates(const T& g, int64_t H) {
  return {sigmoid(gate(g, 0, H)), sigmoid(gate(g, 1, H)), un(Op::Tanh, gate(g, 2, H)), sigmoid(gate(g, 3, H))};
}

// (hy, cy, workspace): the workspace holds the summed gates, before activation.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  TinyOp op("_thnn_fused_lstm_cell");
  const int64_t H = check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  const c10::ScalarType dt = input_gates.scalar_type();
  T g = summed_gates(input_gates, hidden_gates, input_bias, hidden_bias);
  auto [i, f, c, o] = lstm_gates(g, H);
  T cy = f * operand_op(cx, dt, to_shape(cx.sizes())) + i * c;
  T hy = o * un(Op::Tanh, cy);
  const tiny::DType e = to_engine(dt);
  return {make_result(hy.cast(e), dt), make_result(cy.cast(e), dt), make_result(g.cast(e), dt)};
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
  auto [i, f, c, o] = lstm_gates(operand_op(workspace, dt, to_shape(workspace.sizes())), H);
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

// ---- Whole sequences ----

enum class CellKind { Lstm, Gru, Tanh, Relu };

// One layer and direction's parameters, in the order ATen's params list holds them.
struct CellWeights {
  at::Tensor w_ih, w_hh, b_ih, b_hh, w_hr;  // biases and w_hr (an LSTM's projection) may be undefined
};

// One direction's state: h, and for an LSTM c.
struct CellState {
  at::Tensor h, c;
};

// The parameters per layer and direction, or none when the list has the wrong length.
std::vector<CellWeights> gather_weights(at::TensorList params, bool has_biases, bool has_projection,
                                        size_t expected) {
  const size_t per = 2 + (has_biases ? 2 : 0) + (has_projection ? 1 : 0);
  if (params.size() != expected * per) return {};
  std::vector<CellWeights> out;
  for (size_t i = 0; i < params.size(); i += per) {
    CellWeights w;
    w.w_ih = params[i], w.w_hh = params[i + 1];
    if (has_biases) w.b_ih = params[i + 2], w.b_hh = params[i + 3];
    if (has_projection) w.w_hr = params[i + per - 1];
    out.push_back(std::move(w));
  }
  return out;
}

// One direction's steps through the cells, each an ATen op autograd records: from the input
// gates (T, B, n * H) of every step, its outputs (T, B, H_out) and final state.
std::pair<at::Tensor, CellState> cell_steps(CellKind kind, const at::Tensor& input_gates, CellState state,
                                            const CellWeights& w, const at::Tensor& hidden_bias, bool reverse) {
  const std::vector<at::Tensor> gates = input_gates.unbind(0);
  const int64_t steps = input_gates.size(0);
  std::vector<at::Tensor> outputs(steps);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const at::Tensor& ig = gates[t];
    const at::Tensor hg = at::linear(state.h, w.w_hh, hidden_bias);
    switch (kind) {
      case CellKind::Lstm: {
        auto [hy, cy, workspace] = at::_thnn_fused_lstm_cell(ig, hg, state.c, {}, {});
        state.h = w.w_hr.defined() ? at::matmul(hy, w.w_hr.t()) : hy;
        state.c = cy;
        break;
      }
      case CellKind::Gru: state.h = std::get<0>(at::_thnn_fused_gru_cell(ig, hg, state.h, {}, {})); break;
      case CellKind::Tanh: state.h = at::tanh(ig + hg); break;
      case CellKind::Relu: state.h = at::relu(ig + hg); break;
    }
    outputs[t] = state.h;
  }
  return {at::stack(outputs, 0), std::move(state)};
}

// ---- A direction as one autograd node
//
// Through cell_steps, a training step's LSTM, GRU or RNN records two or three ATen ops a time step,
// each with its dispatch and autograd node, and autograd adds W_hh's gradient up one product
// per step. Built here in engine values, the forward is one loop with no dispatch, and its
// backward (one node, backpropagation through time) one loop too: W_hh's gradient is one
// product over all steps. Values round to the dtype where the per-step ops round them.

// A (B, n) value as step `t` of a (T, B, n) stack.
T step_of(const T& stacked, int64_t t) {
  const tiny::Shape& s = stacked.shape();
  return stacked.shrink({{t, t + 1}, {0, s[1]}, {0, s[2]}}).reshape({s[1], s[2]});
}
// (B, n) values, in time order, as one (T, B, n) value
T stack_steps(const std::vector<T>& steps) {
  std::vector<T> parts;
  parts.reserve(steps.size());
  for (const T& v : steps) parts.push_back(v.reshape({1, v.shape()[0], v.shape()[1]}));
  return T::concat(std::move(parts), 0);
}

// What every direction's forward leaves its backward: its dtype (and opmath), its order, h0
// and the outputs.
struct Direction {
  c10::ScalarType dtype = at::kFloat;
  tiny::DType e = tiny::DType::Float32, opm = tiny::DType::Float32;  // the dtype's, opmath's
  bool reverse = false;
  T h0;      // the dtype
  T w_hh;    // (n * H, H), the dtype
  T out;     // (T, B, H), the dtype
  T h_last;  // the dtype
};

// The engine values a direction's body reads, by place (direction_values gives them).
enum DirectionInput { kGates, kH0, kWhh, kC0OrBias };

// Where a direction's forward starts: sets d's dtypes, order, h0 and W_hh; returns the input
// gates and W_hh's transpose (H, n * H), stored once: every step reads it in place, where a step
// packed its panels from W_hh, costing as much as its product (LSTM 64 -> 128: 5.7 -> 3.4 us a step).
std::pair<T, T> start_direction(Direction& d, c10::ScalarType dtype, const std::vector<T>& in, bool reverse) {
  d.dtype = dtype;
  d.e = to_engine(d.dtype);
  d.opm = to_engine(opmath(d.dtype));
  d.reverse = reverse;
  d.h0 = in[kH0];
  d.w_hh = in[kWhh];
  return {in[kGates], in[kWhh].permute({1, 0}).contiguous()};
}

// What an LSTM direction's forward leaves its backward, in engine values. Values the cells
// round to the dtype (states, workspace) are kept rounded and widened again, as the per-step
// ops pass them.
struct LstmStep {
  std::array<T, 4> gates;  // i, f, g, o activated (opmath)
  T cell, tanh_cell;       // c_t and tanh(c_t) (opmath)
};
struct LstmSequence : Direction {
  std::vector<LstmStep> steps;  // per time step
  T c0;                         // opmath
  T c_last;                     // the dtype
};

// a (n, k) @ (k, m) product in `dt`'s accumulation type (plus `bias`, (n, m) in that type, as
// addmm adds it), rounded to `dt`, as mm computes it
T product_of(const T& a, const T& b, c10::ScalarType dt, const T& bias = T()) {
  const tiny::DType acc = tiny::compute_dtype(to_engine(dt));
  T product = a.cast(acc).matmul(b.cast(acc), dt == at::kFloat && allow_tf32());
  if (bias.defined()) product = bias + product;
  return product.cast(to_engine(dt));
}

// The gradient reaching step t's h (opmath): the next step's (dh, the dtype) and the output's
// (gout, opmath) added in the dtype, as autograd adds them; undefined where neither is.
T gradient_at_step(const T& dh, const T& gout, int64_t t, tiny::DType e, tiny::DType opm) {
  T g = dh.defined() ? dh.cast(opm) : T();
  if (gout.defined()) g = g.defined() ? (g + step_of(gout, t)).cast(e).cast(opm) : step_of(gout, t);
  return g;
}

// W_hh's gradient: the sum over the steps of d_t^T @ h_{t-1}, one product over all (T * B) rows.
// d (T, B, n * H) in time order; h0 (B, H) and out (T, B, H) in the dtype.
T hidden_weight_gradient(const T& d, const T& h0, const T& out, bool reverse, c10::ScalarType dt) {
  const int64_t steps = out.shape()[0], B = out.shape()[1], H = out.shape()[2];
  const T first = h0.reshape({1, B, H});
  const T later = out.shrink({{reverse ? 1 : 0, reverse ? steps : steps - 1}, {0, B}, {0, H}});
  const T h_prev = T::concat(reverse ? std::vector<T>{later, first} : std::vector<T>{first, later}, 0);
  return product_of(d.reshape({steps * B, d.shape()[2]}).permute({1, 0}), h_prev.reshape({steps * B, H}), dt);
}

LstmSequence lstm_sequence_forward(c10::ScalarType dt, const std::vector<T>& in, bool reverse) {
  LstmSequence seq;
  const auto [gates_in, w_t] = start_direction(seq, dt, in, reverse);
  const tiny::DType e = seq.e, opm = seq.opm;
  const int64_t steps = gates_in.shape()[0], H = seq.h0.shape()[1];
  seq.c0 = in[kC0OrBias];
  seq.steps.resize(size_t(steps));
  std::vector<T> outputs(static_cast<size_t>(steps));
  T h = seq.h0, c = seq.c0, c_rounded;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const T g = step_of(gates_in, t) + product_of(h, w_t, dt).cast(opm);
    const std::array<T, 4> act = lstm_gates(g, H);
    const auto& [i, f, cg, o] = act;
    const T cy = f * c + i * cg, tanh_cy = un(Op::Tanh, cy);
    h = (o * tanh_cy).cast(e);
    c_rounded = cy.cast(e);
    c = c_rounded.cast(opm);
    // The backward reads the gates and the state rounded as the per-step ops pass them (the
    // same values in float32, where it reuses the forward's)
    const T g_rounded = g.cast(e).cast(opm);
    LstmStep& saved = seq.steps[size_t(t)];
    saved.gates = g_rounded.node() == g.node() ? act : lstm_gates(g_rounded, H);
    saved.cell = c;
    saved.tanh_cell = c.node() == cy.node() ? tanh_cy : un(Op::Tanh, c);
    outputs[size_t(t)] = h;
  }
  seq.out = stack_steps(outputs);
  seq.h_last = h;
  seq.c_last = c_rounded;
  return seq;
}

// The gradients of the node's inputs (input gates, h0, c0, W_hh) from those of its outputs
// (out in opmath, h_last and c_last in the dtype), any undefined; `want` says which to compute.
std::vector<T> sequence_backward(const LstmSequence& seq, const std::vector<T>& grads, const std::vector<bool>& want) {
  const c10::ScalarType dt = seq.dtype;
  const tiny::DType e = seq.e, opm = seq.opm;
  const int64_t steps = int64_t(seq.steps.size());
  const T& w = seq.w_hh;  // (4H, H)
  // the gradients reaching the current step's h and c (the dtype), undefined for none
  T gout = grads[0], dh = grads[1], dc = grads[2];
  std::vector<T> dgates(static_cast<size_t>(steps));
  const T one = cnst(seq.c0, 1.0), zero = cnst(seq.c0, 0.0);
  for (int64_t k = steps - 1; k >= 0; --k) {
    const int64_t t = seq.reverse ? steps - 1 - k : k;
    const T ghy = gradient_at_step(dh, gout, t, e, opm);
    const LstmStep& step = seq.steps[size_t(t)];
    const T& cx = k == 0 ? seq.c0 : seq.steps[size_t(seq.reverse ? t + 1 : t - 1)].cell;
    const auto& [i, f, cg, o] = step.gates;
    const T& tanh_cy = step.tanh_cell;
    T gcy = ghy.defined() ? ghy * o * (one - tanh_cy * tanh_cy) : T();
    if (dc.defined()) gcy = gcy.defined() ? gcy + dc.cast(opm) : dc.cast(opm);
    if (!gcy.defined()) gcy = zero;
    const T go = ghy.defined() ? ghy * tanh_cy * o * (one - o) : zero;
    const T gi = gcy * cg * i * (one - i);
    const T gf = gcy * cx * f * (one - f);
    const T gc = gcy * i * (one - cg * cg);
    const T g = T::concat({gi, gf, gc, go}, 1).cast(e);
    dgates[size_t(t)] = g;
    const bool first = k == 0;
    dc = !first || want[2] ? (gcy * f).cast(e) : T();
    dh = !first || want[1] ? product_of(g, w, dt) : T();
  }
  std::vector<T> out(4);
  const T g_all = stack_steps(dgates);  // (T, B, 4H), the dtype
  if (want[0]) out[0] = g_all;
  if (want[1]) out[1] = dh;
  if (want[2]) out[2] = dc;
  if (want[3]) out[3] = hidden_weight_gradient(g_all, seq.h0, seq.out, seq.reverse, dt);
  return out;
}

// ---- A GRU direction, the same way

struct GruStep {
  T r, z, n, hn;  // the reset and update gates, n, and n's hidden part (opmath)
};
struct GruSequence : Direction {
  std::vector<GruStep> steps;  // per time step
  bool hidden_bias = false;
};

GruSequence gru_sequence_forward(c10::ScalarType dt, const std::vector<T>& in, bool reverse) {
  GruSequence seq;
  const auto [gates_in, w_t] = start_direction(seq, dt, in, reverse);
  const tiny::DType e = seq.e, opm = seq.opm, acc = tiny::compute_dtype(e);
  const int64_t steps = gates_in.shape()[0], B = seq.h0.shape()[0], H = seq.h0.shape()[1];
  // the hidden bias joins each step's product
  seq.hidden_bias = in.size() > kC0OrBias;
  const T bias = seq.hidden_bias ? in[kC0OrBias].cast(acc).reshape({1, 3 * H}).expand({B, 3 * H}) : T();
  seq.steps.resize(size_t(steps));
  std::vector<T> outputs(static_cast<size_t>(steps));
  T h = seq.h0;
  auto rounded = [&](const T& v) { return v.cast(e).cast(opm); };
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const T hg = product_of(h, w_t, dt, bias).cast(opm), ig = step_of(gates_in, t);
    const T r = sigmoid(gate(ig, 0, H) + gate(hg, 0, H)), z = sigmoid(gate(ig, 1, H) + gate(hg, 1, H));
    const T hn = gate(hg, 2, H), n = un(Op::Tanh, gate(ig, 2, H) + r * hn);
    const T hx = h.cast(opm);
    h = (n + z * (hx - n)).cast(e);
    // the backward reads them rounded, as the cell's workspace passed them
    seq.steps[size_t(t)] = {rounded(r), rounded(z), rounded(n), rounded(hn)};
    outputs[size_t(t)] = h;
  }
  seq.out = stack_steps(outputs);
  seq.h_last = h;
  return seq;
}

// The gradients of (input gates, h0, W_hh, b_hh) from those of (out, h_last).
std::vector<T> sequence_backward(const GruSequence& seq, const std::vector<T>& grads, const std::vector<bool>& want) {
  const c10::ScalarType dt = seq.dtype;
  const tiny::DType e = seq.e, opm = seq.opm;
  const int64_t steps = int64_t(seq.steps.size());
  const T& w = seq.w_hh;  // (3H, H)
  T gout = grads[0], dh = grads[1];  // dh: reaching the current step's h
  std::vector<T> d_input(static_cast<size_t>(steps)), d_hidden(static_cast<size_t>(steps));
  const T one = cnst(seq.h0.cast(opm), 1.0), zero = cnst(one, 0.0);
  // h_{t-1} of step t (the dtype)
  auto h_prev = [&](int64_t k, int64_t t) { return k == 0 ? seq.h0 : step_of(seq.out, seq.reverse ? t + 1 : t - 1); };
  for (int64_t k = steps - 1; k >= 0; --k) {
    const int64_t t = seq.reverse ? steps - 1 - k : k;
    T go = gradient_at_step(dh, gout, t, e, opm);
    if (!go.defined()) go = zero;
    const auto& [r, z, n, hn] = seq.steps[size_t(t)];
    const T gz = go * (h_prev(k, t).cast(opm) - n) * (one - z) * z;
    const T gn = go * (one - z) * (one - n * n);
    const T gr = gn * hn * (one - r) * r;
    d_input[size_t(t)] = T::concat({gr, gz, gn}, 1).cast(e);
    const T gh = T::concat({gr, gz, gn * r}, 1).cast(e);
    d_hidden[size_t(t)] = gh;
    // the cell's gradient of h and the hidden product's add up in the dtype
    if (k > 0 || want[1]) dh = ((go * z).cast(e).cast(opm) + product_of(gh, w, dt).cast(opm)).cast(e);
  }
  std::vector<T> out(4);
  if (want[0]) out[0] = stack_steps(d_input);
  if (want[1]) out[1] = dh;
  const T g_hidden = stack_steps(d_hidden);
  if (want[2]) out[2] = hidden_weight_gradient(g_hidden, seq.h0, seq.out, seq.reverse, dt);
  if (want[3] && seq.hidden_bias)
    out[3] = g_hidden.cast(tiny::compute_dtype(e)).reduce(tiny::ReduceOp::Sum, {0, 1}, false).cast(e);
  return out;
}

// ---- A plain RNN direction (tanh or relu), the same way

struct RnnSequence : Direction {
  bool relu = false;
};

RnnSequence rnn_sequence_forward(c10::ScalarType dt, const std::vector<T>& in, bool relu, bool reverse) {
  RnnSequence seq;
  const auto [gates_in, w_t] = start_direction(seq, dt, in, reverse);
  const tiny::DType e = seq.e, opm = seq.opm;
  seq.relu = relu;
  const int64_t steps = gates_in.shape()[0];
  std::vector<T> outputs(static_cast<size_t>(steps));
  T h = seq.h0;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    // the sum rounded to the dtype, then activated, as add and tanh / relu round them
    const T pre = (step_of(gates_in, t) + product_of(h, w_t, dt).cast(opm)).cast(e).cast(opm);
    h = (relu ? max(pre, cnst(pre, 0.0)) : un(Op::Tanh, pre)).cast(e);
    outputs[size_t(t)] = h;
  }
  seq.out = stack_steps(outputs);
  seq.h_last = h;
  return seq;
}

// The gradients of (input gates, h0, W_hh) from those of (out, h_last).
std::vector<T> sequence_backward(const RnnSequence& seq, const std::vector<T>& grads, const std::vector<bool>& want) {
  const c10::ScalarType dt = seq.dtype;
  const tiny::DType e = seq.e, opm = seq.opm;
  const int64_t steps = int64_t(seq.out.shape()[0]);
  const T& w = seq.w_hh;  // (H, H)
  T gout = grads[0], dh = grads[1];  // dh: reaching the current step's h
  std::vector<T> d_pre(static_cast<size_t>(steps));
  const T one = cnst(seq.h0.cast(opm), 1.0), zero = cnst(one, 0.0);
  for (int64_t k = steps - 1; k >= 0; --k) {
    const int64_t t = seq.reverse ? steps - 1 - k : k;
    T g = gradient_at_step(dh, gout, t, e, opm);
    if (!g.defined()) g = zero;
    const T y = step_of(seq.out, t).cast(opm);
    const T d = (seq.relu ? where(le(y, zero), zero, g) : g * (one - y * y)).cast(e);
    d_pre[size_t(t)] = d;
    if (k > 0 || want[1]) dh = product_of(d, w, dt);
  }
  std::vector<T> out(3);
  const T d_all = stack_steps(d_pre);
  if (want[0]) out[0] = d_all;
  if (want[1]) out[1] = dh;
  if (want[2]) out[2] = hidden_weight_gradient(d_all, seq.h0, seq.out, seq.reverse, dt);
  return out;
}

// ---- The autograd node of a direction over a whole sequence

using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// The per-step path as ATen ops autograd records: outputs (out, h[, c]) of inputs as a sequence
// node holds them, LSTM (input gates, h0, c0, W_hh), GRU (input gates, h0, W_hh, b_hh) and plain
// RNN (input gates, h0, W_hh).
variable_list recorded_steps(CellKind kind, const std::vector<at::Tensor>& inputs, bool reverse) {
  CellWeights w;
  if (kind == CellKind::Lstm) {
    w.w_hh = inputs[3];
    auto [out, state] = cell_steps(kind, inputs[0], {inputs[1], inputs[2]}, w, {}, reverse);
    return {out, state.h, state.c};
  }
  w.w_hh = inputs[2];
  const at::Tensor hidden_bias = kind == CellKind::Gru ? inputs[3] : at::Tensor();
  auto [out, state] = cell_steps(kind, inputs[0], {inputs[1], {}}, w, hidden_bias, reverse);
  return {out, state.h};
}

// ---- A direction as two subgraphs
//
// A direction's steps are thousands of engine nodes (128 LSTM steps, forward and backward:
// 7.7k), and a training step built, keyed and released every one of them: most of its host
// time. Each direction's forward and backward are built once instead, over placeholders, per
// kind, order, dtype, shapes and constant inputs (a zero initial state, compiled in); a step's
// graph holds a call of each, which the scheduler expands on its cache misses only. Built and
// looked up under the engine's lock, as every graph is.

// The engine values a direction reads, from the node's inputs: the input gates (T, B, n * H) in
// opmath, h0 and W_hh in the dtype, then an LSTM's c0 (opmath) or a GRU's hidden bias (the
// dtype), where given.
std::vector<T> direction_values(CellKind kind, const std::vector<at::Tensor>& inputs) {
  const c10::ScalarType dt = inputs[0].scalar_type();
  const bool lstm = kind == CellKind::Lstm;
  const at::Tensor &w_hh = inputs[lstm ? 3 : 2], *last = lstm ? &inputs[2] : kind == CellKind::Gru ? &inputs[3] : nullptr;
  std::vector<T> v{operand_op(inputs[0], dt, to_shape(inputs[0].sizes())), read(inputs[1]), read(w_hh)};
  if (lstm) v.push_back(operand_op(*last, dt, to_shape(last->sizes())));
  else if (last && last->defined()) v.push_back(read(*last));
  return v;
}

// Whether a body reads `v` as it is: undefined, or a constant (compiled in).
bool compiled_in(const T& v) { return !v.defined() || v.node()->op == tiny::Op::Const; }

// What a body reads for `v`: itself where compiled in, else a placeholder (input `next`,
// counted up).
T body_input(const T& v, int& next) {
  if (compiled_in(v)) return v;
  return tiny::placeholder(v.shape(), v.dtype(), next++);
}
// `v` in a body's key: undefined, a constant (its node, which the body keeps alive), or a
// placeholder's dtype and shape
void append_key(std::vector<int64_t>& key, const T& v) {
  if (!v.defined()) return key.push_back(-1);
  if (v.node()->op == tiny::Op::Const) {
    key.push_back(-2);
    return key.push_back(int64_t(reinterpret_cast<intptr_t>(v.node().get())));
  }
  key.push_back(int64_t(v.dtype()));
  key.push_back(v.ndim());
  key.insert(key.end(), v.shape().begin(), v.shape().end());
}
// What a call of a body passes: its values that are not compiled in.
std::vector<T> call_args(const std::vector<T>& values) {
  std::vector<T> args;
  for (const T& v : values)
    if (!compiled_in(v)) args.push_back(v);
  return args;
}

// A direction's forward and backward, built once over placeholders (see above).
template <class Sequence>
struct DirectionBody {
  CellKind kind;
  Sequence seq;                    // over `inputs`
  std::vector<T> inputs;           // what direction_values gives, as the body reads it
  int placeholders = 0;            // among them
  std::shared_ptr<const tiny::Subgraph> forward;  // (out, h_last[, c_last])
  struct Backward {
    std::shared_ptr<const tiny::Subgraph> fn;
    std::vector<size_t> gradients;  // which of the node's inputs' gradients its outputs are
  };
  std::map<std::vector<int64_t>, Backward> backwards;  // by the incoming gradients and which are wanted

  // The gradients of the node's inputs from those of its outputs (`incoming`, as
  // sequence_backward takes them), for `forward`, the call that passed `args`.
  std::vector<T> backward(const tiny::NodeRef& forward, const std::vector<T>& args, const std::vector<T>& incoming,
                          const std::vector<bool>& want) {
    TinyOp op(kind == CellKind::Lstm ? "lstm_backward" : kind == CellKind::Gru ? "gru_backward"
              : kind == CellKind::Tanh ? "rnn_tanh_backward" : "rnn_relu_backward");
    std::vector<int64_t> key(want.begin(), want.end());
    key.push_back(allow_tf32());
    for (const T& g : incoming) append_key(key, g);
    auto it = backwards.find(key);
    if (it == backwards.end()) {
      int next = placeholders;
      std::vector<T> grads;
      for (const T& g : incoming) grads.push_back(body_input(g, next));
      const std::vector<T> g = sequence_backward(seq, grads, want);
      Backward b;
      std::vector<T> outputs;
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i].defined()) outputs.push_back(g[i]), b.gradients.push_back(i);
      std::vector<T> in = call_args(inputs);
      for (const T& p : call_args(grads)) in.push_back(p);
      b.fn = tiny::make_subgraph(std::move(in), outputs);
      it = backwards.emplace(std::move(key), std::move(b)).first;
    }
    std::vector<T> call_with = args;
    for (const T& g : call_args(incoming)) call_with.push_back(g);
    // (what the forward's schedules stored of its insides, where it was realized first, is read)
    const std::vector<T> outputs = tiny::call(it->second.fn, call_with, {forward});
    std::vector<T> out(want.size());
    for (size_t i = 0; i < outputs.size(); ++i) out[it->second.gradients[i]] = outputs[i];
    return out;
  }
};

template <class Sequence>
Sequence forward_of(CellKind kind, c10::ScalarType dt, const std::vector<T>& in, bool reverse) {
  if constexpr (std::is_same_v<Sequence, LstmSequence>) return lstm_sequence_forward(dt, in, reverse);
  else if constexpr (std::is_same_v<Sequence, GruSequence>) return gru_sequence_forward(dt, in, reverse);
  else return rnn_sequence_forward(dt, in, kind == CellKind::Relu, reverse);
}
std::vector<T> outputs_of(const LstmSequence& s) { return {s.out, s.h_last, s.c_last}; }
std::vector<T> outputs_of(const Direction& s) { return {s.out, s.h_last}; }

// The body of a direction reading `values` (direction_values'), built on first use.
template <class Sequence>
std::shared_ptr<DirectionBody<Sequence>> direction_body(CellKind kind, c10::ScalarType dt,
                                                        const std::vector<T>& values, bool reverse) {
  static auto* bodies = new std::map<std::vector<int64_t>, std::shared_ptr<DirectionBody<Sequence>>>();
  static size_t nodes = 0;  // in the bodies' forwards (a 128-step LSTM's body and its backward: 7.5k in all)
  std::vector<int64_t> key{int64_t(kind), int64_t(dt), reverse, allow_tf32()};
  for (const T& v : values) append_key(key, v);
  auto it = bodies->find(key);
  if (it != bodies->end()) return it->second;
  // Sequences of many lengths would keep a body each: past ~100k nodes (~150 MB with their
  // backwards) they are forgotten, and built again when used (those in use live on in their
  // autograd nodes).
  if (nodes > 100000) bodies->clear(), nodes = 0;
  auto body = std::make_shared<DirectionBody<Sequence>>();
  body->kind = kind;
  for (const T& v : values) body->inputs.push_back(body_input(v, body->placeholders));
  body->seq = forward_of<Sequence>(kind, dt, body->inputs, reverse);
  body->forward = tiny::make_subgraph(call_args(body->inputs), outputs_of(body->seq));
  nodes += body->forward->order.size();
  bodies->emplace(std::move(key), body);
  return body;
}

template <class Sequence>
struct SequenceBackward : torch::autograd::Node {
  std::shared_ptr<DirectionBody<Sequence>> body;
  tiny::NodeRef forward;  // the forward's call
  std::vector<T> args;    // what it passed
  std::vector<SavedVariable> inputs;

  std::string name() const override {
    return body->kind == CellKind::Lstm ? "LstmSequenceBackward"
           : body->kind == CellKind::Gru ? "GruSequenceBackward"
                                         : "RnnSequenceBackward";
  }
  void release_variables() override {
    forward.reset();
    args.clear();
    for (SavedVariable& v : inputs) v.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    std::vector<bool> want;
    for (size_t i = 0; i < inputs.size(); ++i) want.push_back(task_should_compute_output(i));
    std::vector<at::Tensor> values;
    for (SavedVariable& v : inputs) values.push_back(v.unpack());  // (checks nothing changed them)
    if (c10::GradMode::is_enabled()) return differentiable_backward(values, grads, want);
    variable_list out(inputs.size());
    if (std::none_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.defined(); })) return out;
    // the outputs' gradients: out's in opmath, the final states' in the dtype
    const c10::ScalarType dt = body->seq.dtype;
    std::vector<T> incoming;
    for (size_t i = 0; i < grads.size(); ++i)
      incoming.push_back(!grads[i].defined() ? T()
                         : i == 0            ? operand_op(grads[0], dt, to_shape(grads[0].sizes()))
                                             : read(grads[i]));
    const std::vector<T> g = body->backward(forward, args, incoming, want);
    for (size_t i = 0; i < out.size(); ++i)
      if (g[i].defined()) out[i] = make_result(g[i], dt);
    return out;
  }

 private:
  // With create_graph, gradients must be differentiable: the steps run again as ATen ops that
  // autograd records, and autograd differentiates them.
  variable_list differentiable_backward(const std::vector<at::Tensor>& values, const variable_list& grads,
                                        const std::vector<bool>& want) {
    const variable_list outputs = recorded_steps(body->kind, values, body->seq.reverse);
    variable_list outs, gouts, ins;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (grads[i].defined() && outputs[i].requires_grad()) outs.push_back(outputs[i]), gouts.push_back(grads[i]);
    std::vector<size_t> at;
    for (size_t i = 0; i < values.size(); ++i)
      if (want[i] && values[i].defined() && values[i].requires_grad()) ins.push_back(values[i]), at.push_back(i);
    variable_list result(values.size());
    if (outs.empty() || ins.empty()) return result;
    variable_list g = torch::autograd::grad(outs, ins, gouts, /*retain_graph=*/true, /*create_graph=*/true,
                                            /*allow_unused=*/true);
    for (size_t j = 0; j < at.size(); ++j) result[at[j]] = g[j];
    return result;
  }
};

// A direction's outputs (out, h[, c]) from its inputs as its node holds them (see
// recorded_steps): one call of its forward, recorded by one node where any input needs a gradient.
template <class Sequence>
variable_list sequence_outputs(CellKind kind, const std::vector<at::Tensor>& inputs, bool reverse) {
  const c10::ScalarType dt = inputs[0].scalar_type();
  std::shared_ptr<DirectionBody<Sequence>> body;
  std::vector<T> args, values;
  tiny::NodeRef forward;  // the call
  {
    TinyOp op(kind == CellKind::Lstm ? "lstm" : kind == CellKind::Gru ? "gru"
              : kind == CellKind::Tanh ? "rnn_tanh" : "rnn_relu");
    const std::vector<T> direction = direction_values(kind, inputs);
    body = direction_body<Sequence>(kind, dt, direction, reverse);
    args = call_args(direction);
    values = tiny::call(body->forward, args);
    forward = tiny::call_of(values[0]);
  }
  variable_list outputs;
  for (const T& v : values) outputs.push_back(make_result(v, dt));
  bool requires_grad = false;
  for (const at::Tensor& t : inputs) requires_grad |= torch::autograd::compute_requires_grad(t);
  if (!requires_grad) return outputs;
  auto node = c10::make_intrusive<SequenceBackward<Sequence>>();
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (const at::Tensor& t : inputs) node->inputs.emplace_back(t, false);
  // a forward realized before its backward (its loss read first) keeps what the backward reads
  tiny::keep_stored_values(forward.get());
  node->forward = std::move(forward);
  node->body = std::move(body);
  node->args = std::move(args);
  for (const at::Tensor& o : outputs) torch::autograd::set_history(o, node);
  return outputs;
}

// Whether one sequence node takes the direction: no LSTM projection, nothing empty, states and
// weights of the gates' dtype and sizes, no forward-mode gradients, no tensor subclass or
// functorch wrapper (torch.func.grad, vmap: those run ATen's ops, whose transforms they know).
// cell_steps takes the rest (and reports what is wrong as ATen does).
bool sequence_node_applies(CellKind kind, const at::Tensor& input_gates, const CellState& state,
                           const CellWeights& w, const at::Tensor& hidden_bias) {
  using torch::autograd::isFwGradDefined;
  if (w.w_hr.defined() || input_gates.numel() == 0) return false;
  for (const at::Tensor* t : {&input_gates, &state.h, &state.c, &w.w_hh, &hidden_bias})
    if (t->defined() && at::isTensorSubclassLike(*t)) return false;
  const int64_t gates = kind == CellKind::Lstm ? 4 : kind == CellKind::Gru ? 3 : 1;
  const int64_t B = input_gates.size(1), H = w.w_hh.dim() == 2 ? w.w_hh.size(1) : -1;
  std::vector<const at::Tensor*> states{&state.h};
  if (kind == CellKind::Lstm) states.push_back(&state.c);
  for (const at::Tensor* s : states)
    if (s->scalar_type() != input_gates.scalar_type() || s->sizes() != c10::IntArrayRef{B, H} || isFwGradDefined(*s))
      return false;
  if (hidden_bias.defined() && (hidden_bias.scalar_type() != input_gates.scalar_type() ||
                                hidden_bias.sizes() != c10::IntArrayRef{gates * H} || isFwGradDefined(hidden_bias)))
    return false;
  return w.w_hh.scalar_type() == input_gates.scalar_type() && w.w_hh.size(0) == gates * H &&
         input_gates.size(2) == gates * H && !isFwGradDefined(input_gates) && !isFwGradDefined(w.w_hh);
}

// A direction over its input gates (T, B, n * H): one autograd node.
std::pair<at::Tensor, CellState> sequence_direction(CellKind kind, const at::Tensor& input_gates,
                                                    const CellState& state, const at::Tensor& w_hh,
                                                    const at::Tensor& hidden_bias, bool reverse) {
  if (kind == CellKind::Lstm) {
    variable_list o = sequence_outputs<LstmSequence>(kind, {input_gates, state.h, state.c, w_hh}, reverse);
    return {o[0], {o[1], o[2]}};
  }
  variable_list o = kind == CellKind::Gru
                        ? sequence_outputs<GruSequence>(kind, {input_gates, state.h, w_hh, hidden_bias}, reverse)
                        : sequence_outputs<RnnSequence>(kind, {input_gates, state.h, w_hh}, reverse);
  return {o[0], {o[1], at::Tensor()}};
}

// One direction of one layer over input (T, B, I): its outputs (T, B, H_out) and final state.
std::pair<at::Tensor, CellState> run_direction(CellKind kind, const at::Tensor& input, CellState state,
                                               const CellWeights& w, bool reverse) {
  TORCH_CHECK(input.size(0) > 0, "Expected sequence length to be larger than 0 in RNN");
  // Biases that are only added to the gates join the input product (an LSTM's two and a plain
  // RNN's two): their gradient is one sum over every step, not one per step. A GRU's hidden bias
  // is scaled by its reset gate: it joins each step's hidden product, and the cells take none.
  const bool bias = w.b_ih.defined();
  at::Tensor joined_bias;
  if (bias) joined_bias = kind == CellKind::Gru ? w.b_ih : w.b_ih + w.b_hh;
  const at::Tensor input_gates = at::linear(input, w.w_ih, joined_bias);
  const at::Tensor hidden_bias = kind == CellKind::Gru && bias ? w.b_hh : at::Tensor();
  if (sequence_node_applies(kind, input_gates, state, w, hidden_bias))
    return sequence_direction(kind, input_gates, state, w.w_hh, hidden_bias, reverse);
  return cell_steps(kind, input_gates, std::move(state), w, hidden_bias, reverse);
}

// The layers in turn, both directions of each where bidirectional, with dropout between layers
// as ATen applies it: the last layer's outputs (T, B, D * H_out) and every direction's final state.
std::pair<at::Tensor, std::vector<CellState>> run_layers(CellKind kind, at::Tensor x,
                                                         const std::vector<CellState>& initial,
                                                         const std::vector<CellWeights>& weights,
                                                         int64_t num_layers, double dropout, bool train,
                                                         bool bidirectional) {
  const int64_t directions = bidirectional ? 2 : 1;
  std::vector<CellState> finals;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < directions; ++d) {
      const size_t at = layer * directions + d;
      auto [out, state] = run_direction(kind, x, initial[at], weights[at], d == 1);
      outs.push_back(std::move(out));
      finals.push_back(std::move(state));
    }
    x = directions == 2 ? at::cat(outs, -1) : outs[0];
    if (dropout != 0 && train && layer < num_layers - 1) x = at::dropout(x, dropout, true);
  }
  return {x, std::move(finals)};
}

// Whether the call is the common one this path takes: a batched 3-D input, states of
// (layers * directions, B, *) and a full parameter list, all on the input's device. Anything
// else goes to ATen's composite, which reports what is wrong as PyTorch does.
bool whole_sequence_applies(const at::Tensor& input, at::TensorList states, at::TensorList params,
                            int64_t num_layers, bool bidirectional) {
  if (input.dim() != 3 || !at::isFloatingType(input.scalar_type()) || num_layers < 1) return false;
  for (const at::Tensor& s : states)
    if (!s.defined() || s.dim() != 3 || s.size(0) != num_layers * (bidirectional ? 2 : 1)) return false;
  for (at::TensorList list : {states, params})
    for (const at::Tensor& t : list)
      if (t.device() != input.device()) return false;
  return true;
}

// The states of every layer and direction: unbound along dim 0.
std::vector<CellState> unbind_states(const at::Tensor& h, const at::Tensor& c) {
  std::vector<at::Tensor> hs = h.unbind(0), cs = c.defined() ? c.unbind(0) : std::vector<at::Tensor>();
  std::vector<CellState> out(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) out[i] = {hs[i], cs.empty() ? at::Tensor() : cs[i]};
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_sequence(const at::Tensor& input, at::TensorList hx,
                                                             at::TensorList params, bool has_biases,
                                                             int64_t num_layers, double dropout, bool train,
                                                             bool bidirectional, bool batch_first) {
  std::vector<CellWeights> weights;
  if (hx.size() == 2 && whole_sequence_applies(input, hx, params, num_layers, bidirectional))
    weights = gather_weights(params, has_biases, hx[0].size(2) != hx[1].size(2),
                             num_layers * (bidirectional ? 2 : 1));
  if (weights.empty())
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  auto [out, finals] = run_layers(CellKind::Lstm, batch_first ? input.transpose(0, 1) : input,
                                  unbind_states(hx[0], hx[1]), weights, num_layers, dropout, train, bidirectional);
  std::vector<at::Tensor> hy, cy;
  for (const CellState& s : finals) hy.push_back(s.h), cy.push_back(s.c);
  return {batch_first ? out.transpose(0, 1) : out, at::stack(hy, 0), at::stack(cy, 0)};
}

// gru.input, rnn_tanh.input and rnn_relu.input: one state per direction.
template <CellKind kind>
std::tuple<at::Tensor, at::Tensor> one_state_sequence(const at::Tensor& input, const at::Tensor& hx,
                                                      at::TensorList params, bool has_biases, int64_t num_layers,
                                                      double dropout, bool train, bool bidirectional,
                                                      bool batch_first) {
  std::vector<CellWeights> weights;
  if (whole_sequence_applies(input, {hx}, params, num_layers, bidirectional))
    weights = gather_weights(params, has_biases, false, num_layers * (bidirectional ? 2 : 1));
  if (weights.empty()) {
    using Composite = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, at::TensorList,
                                                             bool, int64_t, double, bool, bool, bool);
    const Composite composite = kind == CellKind::Gru    ? Composite(&at::native::gru)
                                : kind == CellKind::Tanh ? Composite(&at::native::rnn_tanh)
                                                         : Composite(&at::native::rnn_relu);
    return composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  auto [out, finals] = run_layers(kind, batch_first ? input.transpose(0, 1) : input, unbind_states(hx, {}), weights,
                                  num_layers, dropout, train, bidirectional);
  std::vector<at::Tensor> hy;
  for (const CellState& s : finals) hy.push_back(s.h);
  return {batch_first ? out.transpose(0, 1) : out, at::stack(hy, 0)};
}

void register_whole_sequences(torch::Library& m) {
  m.impl("lstm.input", lstm_sequence);
  m.impl("gru.input", one_state_sequence<CellKind::Gru>);
  m.impl("rnn_tanh.input", one_state_sequence<CellKind::Tanh>);
  m.impl("rnn_relu.input", one_state_sequence<CellKind::Relu>);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
  register_whole_sequences(m);
}

// Autograd's key too: ATen's composites are registered there, and the path above is a
// composite of differentiable ops (the PrivateUse1 registration alone serves inference mode).
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { register_whole_sequences(m); }

}  // namespace torch_tiny
