// Convolution (1d/2d/3d, strided, padded, dilated, grouped, transposed) and
// its backward as lazy engine graphs. ATen's convolution / _convolution do
// the argument checks, padding modes and batching, then call the
// *_overrideable entry points for out-of-tree backends; the autograd formula
// of `convolution` reaches convolution_backward_overrideable the same way.
//
// A convolution is the padded input seen through a window view (as_strided:
// free) times the weight, summed over (C_in/groups, kernel...): one fused
// reduce, no materialized im2col. A transposed convolution is a convolution
// over the zero-interleaved input (also a view) with the flipped weight.
#include <ATen/core/Tensor.h>
#include <ATen/native/im2col_shape_check.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/nn_util.h"
#include "torch/ops_util.h"

namespace torch_tiny {
namespace {

using namespace nn;
using Dims = std::vector<int64_t>;

Dims dims_of(c10::IntArrayRef a, size_t d, int64_t fill) {
  Dims out(d, fill);
  for (size_t i = 0; i < d; i++) out[i] = a.size() == 1 ? a[0] : a.size() > i ? a[i] : fill;
  return out;
}

// A convolution of one input channel per output channel (depthwise: Cg = OCg = 1; with more
// output channels they make a channel tile) reduces over its taps alone, so its outputs tile
// along the output width only: 14 or 7 wide in ConvNeXt's 7x7 depthwise
// layers, not a whole vector, which left a tile of scalar accumulators (5-7x slower than
// PyTorch's CPU backend). With the last two strides 1, output (y, x) reads the padded input
// from y*P + x (P its width) on, so the rows are one run of positions q = y*P + x, affine in
// q: computed as one (the P - W positions between two rows dropped), viewed back as rows.
// Where the width is whole vectors already, or the run shorter than a vector, the extra positions
// are not worth it; where it is not, they are even at 2x the outputs (a 4x4 map with 7x7 taps:
// 34 positions computed for 16, 0.92 -> 0.33 ms for 8 images of 384 channels; with 3x3 taps,
// 22 for 16, stored_conv_operand).
// Returns the run's length, or 0 where the rows stay rows.
int64_t rows_as_one_run(const tiny::Shape& xs, int64_t Cg, int64_t OCg, const Dims& stride, const Dims& out) {
  const size_t D = stride.size();
  if (D < 2 || Cg != 1 || OCg != 1 || stride[D - 1] != 1 || stride[D - 2] != 1 || out[D - 2] < 2) return 0;
  const int64_t W = out[D - 1], P = xs.back(), run = (out[D - 2] - 1) * P + W;
  return W % 16 != 0 && run >= 16 ? run : 0;
}

// out[n, g*OCg + o, y...] = sum_{c, k} xp[n, g*Cg + c, y*s + k*d] * w[g, o, c, k]
// xp: (N, G*Cg, P...) already padded; w: (G, OCg, Cg, K...). Accumulates in
// w's dtype (the caller casts).
T conv_core(const T& xp, const T& w, const Dims& stride, const Dims& dil, const Dims& out) {
  const auto& xs = xp.shape();
  const auto& ws = w.shape();
  size_t D = xs.size() - 2;
  int64_t N = xs[0], C = xs[1], G = ws[0], OCg = ws[1], Cg = ws[2];
  Dims pstr(xs.size(), 1);  // row-major strides of the padded input
  for (int i = int(xs.size()) - 2; i >= 0; i--) pstr[size_t(i)] = pstr[size_t(i) + 1] * xs[size_t(i) + 1];
  // window: (N, G, 1, O..., Cg, K...)
  tiny::Shape wshape{N, G, 1}, wstr{C * pstr[1], Cg * pstr[1], 0};
  for (size_t i = 0; i < D; i++) { wshape.push_back(out[i]); wstr.push_back(stride[i] * pstr[2 + i]); }
  wshape.push_back(Cg);
  wstr.push_back(pstr[1]);
  for (size_t i = 0; i < D; i++) { wshape.push_back(ws[3 + i]); wstr.push_back(dil[i] * pstr[2 + i]); }
  tiny::Shape full = wshape;
  full[2] = OCg;
  tiny::Shape o{N, G * OCg};
  o.insert(o.end(), out.begin(), out.end());
  if (tiny::numel(full) == 0 || xp.numel() == 0) return cnst(o, 0, w.dtype());
  // weight: (1, G, OCg, 1..., Cg, K...)
  tiny::Shape wr{1, G, OCg};
  for (size_t i = 0; i < D; i++) wr.push_back(1);
  wr.push_back(Cg);
  for (size_t i = 0; i < D; i++) wr.push_back(ws[3 + i]);
  const int64_t run = rows_as_one_run(xs, Cg, OCg, stride, out);
  if (run) {
    // the last two output dims as one run of `run` positions q = y*P + x, each reading the
    // padded input at q plus its taps' offsets
    for (tiny::Shape* s : {&wshape, &full}) s->erase(s->begin() + int64_t(1 + D), s->begin() + int64_t(3 + D));
    wshape.insert(wshape.begin() + int64_t(1 + D), run);
    full.insert(full.begin() + int64_t(1 + D), run);
    wstr.erase(wstr.begin() + int64_t(1 + D), wstr.begin() + int64_t(3 + D));
    wstr.insert(wstr.begin() + int64_t(1 + D), 1);
    wr.erase(wr.begin() + int64_t(1 + D));
  }
  T win = xp.as_strided(wshape, wstr, 0).expand(full);
  T wv = w.reshape(wr).expand(full);
  const int first_reduced = int(full.size() - 1 - D);  // Cg, then the taps
  T r = mul(win, wv).reduce(ReduceOp::Sum, range_axes(first_reduced, int(full.size())), false, allow_tf32());
  if (run) {  // the run stored, viewed back as rows: the P - W positions between them dropped
    TinyOp op("convolution (its rows computed as one run)");  // names the realize reason
    tiny::Shape rs(o.size(), 1);
    rs[D] = xs.back();
    rs[D - 1] = run;
    for (size_t i = D - 1; i-- > 0;) rs[i] = rs[i + 1] * o[i + 1];
    return r.contiguous().as_strided(o, rs, 0);
  }
  return r.reshape(o);
}

// An operand of a convolution's reduce is read many times per element (once
// per output channel and kernel tap). Fused into the reduce, whatever computes
// it (batch norm, ReLU, a concatenation's selects, padding masks) is redone
// per read, and masked loads are selects on clamped indices (no vector loads:
// 5-40x slower; the tiled conv loops are not split at mask boundaries, and the
// resnet18 stem fused its pad at 3x the cost). So a computed or padded operand
// is stored first: the padded copy is split and vectorized, one cheap
// kernel, except for small operands, where that costs more than it saves.
// A small grad_output is stored too where the weight gradient reads it many times per
// element (`reads`): resnet18's layer4 at 32x32 input has 1x1 maps, and its weight gradient
// read the 8192-element batch-norm backward 4608 times per element, recomputing it each time
// (a 16-image SGD step 7x slower than PyTorch's CPU backend). The same rule for the other
// operands stored copies of values the scheduler stores anyway (a residual block's output,
// read by the next block's shortcut too): 4 more kernels in that step and no time saved.
constexpr int64_t kStoreOperandFrom = int64_t(1) << 15;  // elements
constexpr int64_t kStoreReadsFrom = int64_t(1) << 20;    // element reads in all

// Whether a fused reader of `x` would compute it again per read: not where it is stored, nor
// where it is a reduce (the scheduler stores a reduce read through a broadcast).
bool recomputed(const T& x) {
  const tiny::Node* n = x.node().get();
  while (!n->realized() && n->op == tiny::Op::View) n = n->src[0].get();
  return !is_stored(x) && n->op != tiny::Op::Reduce;
}

// Whether `y`, `x` padded (or `x` itself) and read `reads` times per element, is worth storing.
bool store_pays(const T& y, const T& x, int64_t reads = 0) {
  if (y.shape() == x.shape() && is_stored(x)) return false;
  return y.numel() >= kStoreOperandFrom || (recomputed(x) && y.numel() * reads >= kStoreReadsFrom);
}

T stored_operand(const T& y, const T& x, int64_t reads = 0) {
  if (!store_pays(y, x, reads)) return y;
  TinyOp op("convolution (its operand is stored)");  // names the realize reason
  return y.contiguous();
}

// A convolution computed as one run (rows_as_one_run) vectorizes along the run only where its
// padded operand is stored: read through the padding's masks, its loads are selects on clamped
// indices, one element at a time. So a padded operand is stored from kStoreRunOperandFrom
// elements there (MobileNetV2's 3x3 depthwise layers at 4x4, 2 images of 384 channels: 0.25 ms
// fused, the copy and the run 0.04).
constexpr int64_t kStoreRunOperandFrom = int64_t(1) << 12;  // elements

T stored_conv_operand(const T& xp, const T& x, int64_t Cg, int64_t OCg, const Dims& stride, const Dims& out) {
  if (xp.shape() != x.shape() && xp.numel() >= kStoreRunOperandFrom &&
      rows_as_one_run(xp.shape(), Cg, OCg, stride, out)) {
    TinyOp op("convolution (its padded operand is stored for a run)");  // names the realize reason
    return xp.contiguous();
  }
  return stored_operand(xp, x);
}

// gw[g, o, c, k] = sum_{n, y} go[n, g*OCg + o, y] * xp[n, g*Cg + c, y*s + k*d]
// xp: (N, G*Cg, P...) padded input; go: (N, G*OCg, O...). Returns (G, OCg, Cg, K...). A
// computed go read `go_reads` times in all is stored first (stored_operand).
// A depthwise one sums over its rows as one run too (rows_as_one_run): go's rows padded with
// zeros to the input's width P and stored, the run's positions q read go at q and the input at
// q plus a tap's offset, both unit-stride along the reduce's innermost loop, which vectorizes
// (its 7x7 taps as a tile of scalar sums ran at 3 GMAC/s: 9 ms at 8x384x14x14).
T wgrad_core(const T& xp, const T& go, int64_t G, const Dims& K, const Dims& stride, const Dims& dil,
             int64_t go_reads = 0) {
  const auto& xs = xp.shape();
  const auto& gs = go.shape();
  size_t D = xs.size() - 2;
  int64_t N = xs[0], C = xs[1], Cg = C / G, OCg = gs[1] / G;
  Dims pstr(xs.size(), 1);
  for (int i = int(xs.size()) - 2; i >= 0; i--) pstr[size_t(i)] = pstr[size_t(i) + 1] * xs[size_t(i) + 1];
  Dims out(gs.begin() + 2, gs.end()), sizes = out, steps(D);  // go's positions as the sum runs over them
  for (size_t i = 0; i < D; i++) steps[i] = stride[i] * pstr[2 + i];
  T g = go;
  const int64_t run = tiny::numel(gs) > 0 ? rows_as_one_run(xs, Cg, OCg, stride, out) : 0;
  if (run) {
    const int64_t P = xs.back(), H = out[D - 2], W = out[D - 1];
    TinyOp op("convolution (its rows computed as one run)");  // names the realize reason
    tiny::Ranges pads(gs.size(), {0, 0}), keep;
    pads.back() = {0, P - W};
    tiny::Shape flat(gs.begin(), gs.end() - 1);
    flat.back() = H * P;
    for (int64_t e : flat) keep.push_back({0, e});
    keep.back() = {0, run};
    g = go.pad(pads).contiguous().reshape(flat).shrink(keep);
    sizes.pop_back();
    steps.pop_back();
    sizes.back() = run;
    steps.back() = 1;
  } else {
    g = stored_operand(go, go, go_reads);
  }
  const size_t S = sizes.size();
  // window: (G, 1, Cg, K..., N, positions...)
  tiny::Shape wshape{G, 1, Cg}, wstr{Cg * pstr[1], 0, pstr[1]};
  for (size_t i = 0; i < D; i++) { wshape.push_back(K[i]); wstr.push_back(dil[i] * pstr[2 + i]); }
  wshape.push_back(N);
  wstr.push_back(C * pstr[1]);
  for (size_t i = 0; i < S; i++) { wshape.push_back(sizes[i]); wstr.push_back(steps[i]); }
  tiny::Shape full = wshape;
  full[1] = OCg;
  tiny::Shape res{G, OCg, Cg};
  res.insert(res.end(), K.begin(), K.end());
  if (tiny::numel(full) == 0) return cnst(res, 0, go.dtype());
  T win = xp.as_strided(wshape, wstr, 0).expand(full);
  // go: (N, G, OCg, positions...) -> (G, OCg, 1, 1..., N, positions...)
  tiny::Shape g5{N, G, OCg};
  g5.insert(g5.end(), sizes.begin(), sizes.end());
  std::vector<int> perm{1, 2, 0};
  for (size_t i = 0; i < S; i++) perm.push_back(int(3 + i));
  tiny::Shape gr{G, OCg, 1};
  for (size_t i = 0; i < D; i++) gr.push_back(1);
  gr.push_back(N);
  gr.insert(gr.end(), sizes.begin(), sizes.end());
  T gv = g.reshape(g5).permute(perm).reshape(gr).expand(full);
  return mul(win, gv).reduce(ReduceOp::Sum, range_axes(int(3 + D), int(full.size())), false, allow_tf32()).reshape(res);
}

// The weight gradient of an ungrouped convolution with the output channels
// innermost: gw is computed as (C, K..., OC) from grad_output stored
// channels-last, (N, O..., OC). Along the output channels grad_output moves by
// one element and the input by none, so the code generator tiles them like a
// matmul's columns: each input element is loaded once per tile, not once per
// output channel (the plain layout streams both operands per output: 10x
// slower). The caller returns it as a permuted view.
bool wgrad_channels_last_pays(const T& xp, const T& go, int64_t G, int64_t taps) {
  return G == 1 && go.shape()[1] >= 16 && xp.numel() > 0 &&
         (go.numel() >= kStoreOperandFrom || (recomputed(go) && go.numel() * xp.shape()[1] * taps >= kStoreReadsFrom));
}

// (C, K..., OC) -> (OC, C, K...)
std::vector<int> channels_first(size_t D) {
  std::vector<int> perm{int(D + 1)};
  for (size_t i = 0; i <= D; i++) perm.push_back(int(i));
  return perm;
}

T wgrad_channels_last(const T& xp, const T& go, const Dims& K, const Dims& stride, const Dims& dil) {
  const auto& xs = xp.shape();
  const auto& gs = go.shape();
  size_t D = xs.size() - 2;
  int64_t N = xs[0], C = xs[1], OC = gs[1];
  Dims pstr(xs.size(), 1);
  for (int i = int(xs.size()) - 2; i >= 0; i--) pstr[size_t(i)] = pstr[size_t(i) + 1] * xs[size_t(i) + 1];
  // grad_output channels-last: (N, OC, O...) -> (N, O..., OC), stored
  std::vector<int> to_last{0};
  for (size_t i = 0; i < D; i++) to_last.push_back(int(2 + i));
  to_last.push_back(1);
  T gl = go.permute(to_last).contiguous();
  Dims gstr_o(D);  // gl's strides along O...
  int64_t acc = OC;
  for (size_t i = D; i-- > 0;) { gstr_o[i] = acc; acc *= gs[2 + i]; }
  // iteration (C, K..., OC, N, O...), the last 1 + D dims reduced
  tiny::Shape full{C}, xstr{pstr[1]}, gstr{0};
  for (size_t i = 0; i < D; i++) {
    full.push_back(K[i]);
    xstr.push_back(dil[i] * pstr[2 + i]);
    gstr.push_back(0);
  }
  full.push_back(OC);
  xstr.push_back(0);
  gstr.push_back(1);
  full.push_back(N);
  xstr.push_back(C * pstr[1]);
  gstr.push_back(acc);
  for (size_t i = 0; i < D; i++) {
    full.push_back(gs[2 + i]);
    xstr.push_back(stride[i] * pstr[2 + i]);
    gstr.push_back(gstr_o[i]);
  }
  T prod = mul(xp.as_strided(full, xstr, 0), gl.as_strided(full, gstr, 0));
  return prod.reduce(ReduceOp::Sum, range_axes(int(2 + D), int(full.size())), false, allow_tf32());  // (C, K..., OC)
}

T pad_spatial(const T& x, const Dims& before, const Dims& after) {
  T y = x;
  for (size_t i = 0; i < before.size(); i++) y = pad_dim(y, int(2 + i), before[i], after[i]);
  return y;
}

// x with (s - 1) zeros between neighbours along each spatial dim (a view).
T interleave_zeros(const T& x, const Dims& stride) {
  T y = x;
  for (size_t i = 0; i < stride.size(); i++) {
    int64_t s = stride[i];
    if (s == 1) continue;
    int d = int(2 + i);
    tiny::Shape sh = y.shape();
    int64_t n = sh[size_t(d)];
    if (n == 0) continue;
    tiny::Shape s1 = sh;
    s1.insert(s1.begin() + d + 1, 1);
    tiny::Ranges pads(s1.size(), {0, 0});
    pads[size_t(d) + 1] = {0, s - 1};
    tiny::Shape s2 = sh;
    s2[size_t(d)] = n * s;
    y = y.reshape(s1).pad(pads).reshape(s2);
    tiny::Ranges r;
    for (auto v : s2) r.push_back({0, v});
    r[size_t(d)] = {0, (n - 1) * s + 1};
    y = y.shrink(r);
  }
  return y;
}

// A transposed convolution of stride 2 (1 along some dims; one group, no dilation) as one
// reduce over its output phases: output position o = 2q + r takes the taps k = rho_r + 2a
// only, rho_r = (r + p) % 2, from x[q + m_r - a], m_r = (r + p) / 2. Over a zero-interleaved
// input 3/4 of the products would multiply zeros (a 3x3 stride-2 input gradient: 9 taps
// per output instead of 4). With two phases, rho_r and m_r are affine in r, so both operands
// are strided views. Its iteration (s1, ..., N, C, Q1, ..., OC, A...) is read as
// (N, C, Q1*s1, ...), which the scheduler stores it as (permuted_reduces). Null where another
// stride, dilation, a group or an output size the stride does not divide asks for the general
// form, or where the phases save nothing (a 1x1 kernel) or serve few rows.
std::optional<T> conv_transposed_phases(const T& x, const T& w, int64_t G, const Dims& stride, const Dims& pad,
                                        const Dims& dil, const Dims& out) {
  const size_t D = stride.size();
  const auto& xs = x.shape();
  const auto& ws = w.shape();
  if (G != 1) return std::nullopt;
  int64_t taps = 1, phase_taps = 1;
  bool strided = false;
  Dims A(D), Q(D), m0(D), dm(D), rho0(D), drho(D), before(D), after(D), Kp(D);
  for (size_t i = 0; i < D; i++) {
    const int64_t s = stride[i], p = pad[i], K = ws[2 + i], S = xs[2 + i];
    // (an output size the stride does not divide would be a crop of the reduce, which its
    // readers could not take as a permutation of it)
    if (dil[i] != 1 || (s != 1 && s != 2) || out[i] % s != 0) return std::nullopt;
    strided |= s == 2;
    A[i] = (K + s - 1) / s;
    Q[i] = out[i] / s;
    Kp[i] = s * A[i];
    m0[i] = p / s;
    rho0[i] = p % s;
    dm[i] = s == 2 ? (p + 1) / 2 - m0[i] : 0;
    drho[i] = s == 2 ? (p + 1) % 2 - rho0[i] : 0;
    const int64_t m_min = std::min(m0[i], m0[i] + dm[i]), m_max = std::max(m0[i], m0[i] + dm[i]);
    before[i] = std::max<int64_t>(0, A[i] - 1 - m_min);  // x[q + m_r - a] for a < A, q < Q
    after[i] = std::max<int64_t>(0, Q[i] - 1 + m_max - (S - 1));
    taps *= K;
    phase_taps *= A[i];
  }
  const int64_t N = xs[0], OC = xs[1], C = ws[1];
  // Each phase's taps of the weight serve N * Q... output rows; below kMinPhaseRows the
  // per-phase weight panels (a CPU tile packs them once per phase) cost more than the zeros
  // saved (resnet18's layer4 at 64x64, 16 images: 2x2 rows each, 5.5 ms against 4.7).
  constexpr int64_t kMinPhaseRows = 512;
  int64_t rows = N;
  for (size_t i = 0; i < D; i++) rows *= Q[i];
  if (!strided || phase_taps >= taps || rows < kMinPhaseRows) return std::nullopt;
  T xp = stored_operand(pad_spatial(x, before, after), x);
  Dims xstr(D + 2, 1);  // xp's row-major strides
  for (size_t i = D + 2; i-- > 1;) xstr[i - 1] = xstr[i] * xp.shape()[i];
  T wp = w;
  for (size_t i = 0; i < D; i++) wp = pad_dim(wp, int(2 + i), 0, Kp[i] - ws[2 + i]);
  Dims wstr(D + 2, 1);
  wstr[D + 1] = 1;
  for (size_t i = D + 2; i-- > 1;) wstr[i - 1] = wstr[i] * (i >= 2 ? Kp[i - 2] : C);
  // iteration (s1, ..., sD, N, C, Q1, ..., QD, OC, A1, ..., AD): a convolution of N images
  // per output phase (the code generator tiles C x Q as it tiles channels x rows, the
  // weight's phase panels packed once per phase)
  tiny::Shape full, xv, xvs, wv, wvs;
  int64_t xoff = 0, woff = 0;
  for (size_t i = 0; i < D; i++) {
    full.push_back(stride[i]);
    xv.push_back(stride[i]);
    xvs.push_back(dm[i] * xstr[2 + i]);
    wv.push_back(stride[i]);
    wvs.push_back(drho[i] * wstr[2 + i]);
    // tap a' = A - 1 - a: x moves forward with it (a backward stride would leave a modulo
    // in the tile's index math), the packed weight backward
    xoff += (m0[i] + before[i] - (A[i] - 1)) * xstr[2 + i];
    woff += (rho0[i] + stride[i] * (A[i] - 1)) * wstr[2 + i];
  }
  full.insert(full.end(), {N, C});
  xv.insert(xv.end(), {N, 1});
  xvs.insert(xvs.end(), {xstr[0], 0});
  wv.insert(wv.end(), {1, C});
  wvs.insert(wvs.end(), {0, wstr[1]});
  for (size_t i = 0; i < D; i++) {
    full.push_back(Q[i]);
    xv.push_back(Q[i]);
    xvs.push_back(xstr[2 + i]);
    wv.push_back(1);
    wvs.push_back(0);
  }
  full.push_back(OC);
  xv.push_back(OC);
  xvs.push_back(xstr[1]);
  wv.push_back(OC);
  wvs.push_back(wstr[0]);
  for (size_t i = 0; i < D; i++) {
    full.push_back(A[i]);
    xv.push_back(A[i]);
    xvs.push_back(xstr[2 + i]);
    wv.push_back(A[i]);
    wvs.push_back(-stride[i] * wstr[2 + i]);
  }
  T prod = mul(xp.as_strided(xv, xvs, xoff).expand(full), wp.as_strided(wv, wvs, woff).expand(full));
  const int reduced = int(2 + 2 * D);  // the first reduced dim
  T r = prod.reduce(ReduceOp::Sum, range_axes(reduced, int(full.size())), false, allow_tf32());
  // (s..., N, C, Q...) -> (N, C, Q1, s1, ..., QD, sD) -> (N, C, Q1*s1, ...)
  std::vector<int> perm{int(D), int(D + 1)};
  for (size_t i = 0; i < D; i++) perm.insert(perm.end(), {int(2 + D + i), int(i)});
  tiny::Shape flat{N, C};
  for (size_t i = 0; i < D; i++) flat.push_back(out[i]);
  return r.permute(perm).reshape(flat);
}

// A transposed convolution whose kernel equals its stride (no padding, dilation or groups:
// U-Net's 2x2 stride-2 upsampling) has no overlapping windows: each input position writes
// its own K1 x ... block of outputs. It is one product, (N, S...) rows by C * K1 * ... columns
// over the input channels, stored in its own order, where the code generator tiles it as a
// matmul, and read back through the block-to-image view. As phases of a convolution, each
// phase a product of the output channels alone (16: too few to tile), a 32 -> 16 one over
// 4 x 64 x 64 ran in plain loops, 12 ms.
std::optional<T> conv_transposed_blocks(const T& x, const T& w, int64_t G, const Dims& stride, const Dims& pad,
                                        const Dims& dil, const Dims& opad) {
  const size_t D = stride.size();
  const auto& xs = x.shape();
  const auto& ws = w.shape();
  bool strided = false;  // (a 1x1 kernel of stride 1 is a plain convolution: left to it)
  for (size_t i = 0; i < D; i++) {
    if (ws[2 + i] != stride[i] || pad[i] != 0 || dil[i] != 1 || opad[i] != 0) return std::nullopt;
    strided |= stride[i] > 1;
  }
  if (G != 1 || !strided) return std::nullopt;
  const int64_t N = xs[0], IC = xs[1], C = ws[1];
  int64_t S = 1, KK = 1;
  for (size_t i = 0; i < D; i++) {
    S *= xs[2 + i];
    KK *= ws[2 + i];
  }
  const int64_t J = C * KK;
  // iteration (N, S1, ..., SD, J, IC): x along its rows and channels, w as (IC, J)
  tiny::Shape full{N}, xstr{IC * S}, wstr{0};
  int64_t inner = 1;
  Dims sstr(D);
  for (size_t i = D; i-- > 0;) {
    sstr[i] = inner;
    inner *= xs[2 + i];
  }
  for (size_t i = 0; i < D; i++) {
    full.push_back(xs[2 + i]);
    xstr.push_back(sstr[i]);
    wstr.push_back(0);
  }
  full.insert(full.end(), {J, IC});
  xstr.insert(xstr.end(), {0, S});
  wstr.insert(wstr.end(), {1, J});
  T r = mul(x.as_strided(full, xstr, 0), w.as_strided(full, wstr, 0))
            .reduce(ReduceOp::Sum, {int(full.size()) - 1}, false, allow_tf32())
            .contiguous();
  // (N, S1, ..., SD, C, K1, ..., KD) -> (N, C, S1, K1, ..., SD, KD) -> (N, C, S1 * K1, ...)
  tiny::Shape split{N}, image{N, C};
  for (size_t i = 0; i < D; i++) split.push_back(xs[2 + i]);
  split.push_back(C);
  for (size_t i = 0; i < D; i++) split.push_back(ws[2 + i]);
  std::vector<int> perm{0, int(D + 1)};
  for (size_t i = 0; i < D; i++) {
    perm.insert(perm.end(), {int(1 + i), int(D + 2 + i)});
    image.push_back(xs[2 + i] * ws[2 + i]);
  }
  return r.reshape(split).permute(perm).reshape(image);
}

// Transposed convolution. x: (N, G*ICg, S...), w: (G*ICg, OCg, K...). `stored_x`
// (if given) receives x read back from the stored, padded operand where there is one
// and the stride is 1: a second reader of a computed x loads it instead of computing it.
T conv_transposed_value(const T& x, const T& w, int64_t G, const Dims& stride, const Dims& pad, const Dims& dil,
                        const Dims& opad, T* stored_x = nullptr) {
  size_t D = stride.size();
  const auto& ws = w.shape();
  int64_t ICg = ws[0] / G, OCg = ws[1];
  Dims K(ws.begin() + 2, ws.end()), before(D), after(D), out(D), one(D, 1);
  for (size_t i = 0; i < D; i++) {
    int64_t S = x.shape()[2 + i];
    before[i] = dil[i] * (K[i] - 1) - pad[i];
    after[i] = before[i] + opad[i];
    out[i] = (S - 1) * stride[i] - 2 * pad[i] + dil[i] * (K[i] - 1) + opad[i] + 1;
  }
  if (x.numel() > 0 && w.numel() > 0) {
    if (auto blocks = conv_transposed_blocks(x, w, G, stride, pad, dil, opad)) return *blocks;
    if (auto phases = conv_transposed_phases(x, w, G, stride, pad, dil, out)) return *phases;
  }
  T xt = stored_conv_operand(pad_spatial(interleave_zeros(x, stride), before, after), x, ICg, OCg, one, out);
  bool whole_inside = true;  // x is all there: unit stride, padded rather than cropped
  for (size_t i = 0; i < D; i++) whole_inside &= stride[i] == 1 && before[i] >= 0 && after[i] >= 0;
  if (stored_x && whole_inside && xt.node()->op == tiny::Op::Contiguous) {
    tiny::Ranges interior;
    for (size_t d = 0; d < x.shape().size(); d++) interior.push_back({0, x.shape()[d]});
    for (size_t i = 0; i < D; i++) interior[2 + i] = {before[i], before[i] + x.shape()[2 + i]};
    *stored_x = xt.shrink(interior);
  }
  // (G, ICg, OCg, K...) -> (G, OCg, ICg, K...) flipped over K
  tiny::Shape w5{G, ICg, OCg};
  w5.insert(w5.end(), K.begin(), K.end());
  std::vector<int> perm{0, 2, 1};
  std::vector<bool> flips{false, false, false};
  for (size_t i = 0; i < D; i++) { perm.push_back(int(3 + i)); flips.push_back(true); }
  T wt = w.reshape(w5).permute(perm).flip(flips);
  if (x.shape()[0] == 0 || x.numel() == 0) {
    tiny::Shape o{x.shape()[0], G * OCg};
    o.insert(o.end(), out.begin(), out.end());
    return cnst(o, 0, w.dtype());
  }
  return conv_core(xt, wt, one, dil, out);
}

T conv_value(const T& x, const T& w, int64_t G, const Dims& stride, const Dims& pad, const Dims& dil) {
  size_t D = stride.size();
  const auto& ws = w.shape();
  Dims out(D);
  for (size_t i = 0; i < D; i++)
    out[i] = (x.shape()[2 + i] + 2 * pad[i] - dil[i] * (ws[2 + i] - 1) - 1) / stride[i] + 1;
  tiny::Shape w5{G, ws[0] / G};
  w5.insert(w5.end(), ws.begin() + 1, ws.end());
  return conv_core(stored_conv_operand(pad_spatial(x, pad, pad), x, ws[1], ws[0] / G, stride, out), w.reshape(w5),
                   stride, dil, out);
}

struct Params {
  Dims stride, pad, dil, opad;
  size_t D;
};
Params params(const at::Tensor& input, c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
              c10::IntArrayRef output_padding) {
  TORCH_CHECK(input.dim() >= 3 && input.dim() <= 5, "tiny: convolution expects a batched 3-D, 4-D or 5-D input, got ",
              input.dim(), "-D");
  size_t D = size_t(input.dim() - 2);
  return {dims_of(stride, D, 1), dims_of(padding, D, 0), dims_of(dilation, D, 1), dims_of(output_padding, D, 0), D};
}

// A convolution's taps that read only padding for every output (8 of a 3x3 kernel's 9 over
// a 1x1 map: resnet18's layer4 at 32x32 input) add nothing; computed, they are 9x the work.
// Where the live taps [lo, lo + K') with the padding p - lo*d give the same outputs, the
// convolution is that one (the dead taps' weight gradient is zero). Dead taps multiply zeros
// only, so the result is the same but for an inf or NaN among their weights, which the zeros
// would have turned into NaN (as a padding-skipping backend such as oneDNN does not either).
struct LiveTaps {
  Dims lo, K, pad;  // the first live tap, the live taps' extent and their padding per dim
};
std::optional<LiveTaps> live_taps(const at::Tensor& input, const Dims& K, const Params& p) {
  LiveTaps t{Dims(p.D), Dims(p.D), Dims(p.D)};
  bool trims = false;
  for (size_t i = 0; i < p.D; i++) {
    const int64_t S = input.size(int64_t(2 + i)), s = p.stride[i], d = p.dil[i], pad = p.pad[i];
    const int64_t O = (S + 2 * pad - d * (K[i] - 1) - 1) / s + 1;
    if (O <= 0 || S <= 0) return std::nullopt;
    int64_t lo = -1, hi = -1;
    for (int64_t k = 0; k < K[i]; k++) {
      const int64_t first = k * d - pad;                // where output 0 reads
      const int64_t o = first >= 0 ? 0 : (-first + s - 1) / s;  // the first output inside
      if (o < O && o * s + first <= S - 1) {
        if (lo < 0) lo = k;
        hi = k + 1;
      }
    }
    if (lo < 0) return std::nullopt;  // all padding: left as it is
    t.lo[i] = lo;
    t.K[i] = hi - lo;
    t.pad[i] = pad - lo * d;
    if (t.pad[i] < 0 || (S + 2 * t.pad[i] - d * (t.K[i] - 1) - 1) / s + 1 != O) return std::nullopt;
    trims |= t.K[i] < K[i];
  }
  if (!trims) return std::nullopt;
  return t;
}

// The weight's live taps (a view).
T live_weight(const T& w, const LiveTaps& t) {
  tiny::Ranges r;
  for (size_t d = 0; d < w.shape().size(); d++) r.push_back({0, w.shape()[d]});
  for (size_t i = 0; i < t.lo.size(); i++) r[2 + i] = {t.lo[i], t.lo[i] + t.K[i]};
  return w.shrink(r);
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  TinyOp op("convolution");
  Params p = params(input, stride, padding, dilation, output_padding);
  c10::ScalarType dt = input.scalar_type();
  T x = read_acc(input), w = read_acc(weight);
  if (!transposed)
    if (auto t = live_taps(input, Dims(weight.sizes().begin() + 2, weight.sizes().end()), p)) {
      w = live_weight(w, *t);
      p.pad = t->pad;
    }
  T out = transposed ? conv_transposed_value(x, w, groups, p.stride, p.pad, p.dil, p.opad)
                     : conv_value(x, w, groups, p.stride, p.pad, p.dil);
  if (present(bias)) out = add(out, channel_bcast(read_acc(*bias), out.shape()));
  return make_result(out.cast(to_engine(dt)), dt);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  TinyOp op("convolution_backward");
  Params p = params(input, stride, padding, dilation, output_padding);
  c10::ScalarType dt = input.scalar_type();
  tiny::DType edt = to_engine(dt);
  T x = read_acc(input), w = read_acc(weight), go = read_acc(grad_output);
  T go_for_weight = go;
  Dims K(weight.sizes().begin() + 2, weight.sizes().end());
  std::optional<LiveTaps> live = transposed ? std::nullopt : live_taps(input, K, p);
  if (live) {  // computed over the live taps; the weight gradient is padded back with zeros
    w = live_weight(w, *live);
    K = live->K;
    p.pad = live->pad;
  }
  at::Tensor gi, gw, gb;
  if (output_mask[0]) {
    T v;
    if (!transposed) {
      // the transposed convolution of grad_output, sized back to the input
      Dims opad(p.D);
      for (size_t i = 0; i < p.D; i++)
        opad[i] = input.size(int64_t(2 + i)) -
                  ((grad_output.size(int64_t(2 + i)) - 1) * p.stride[i] - 2 * p.pad[i] + p.dil[i] * (K[i] - 1) + 1);
      // A computed grad_output (batch norm, pool and ReLU backward) is stored padded for
      // this; a large one is read back from there by the weight gradient's copy rather
      // than computed again (MNIST's conv2: that copy 22 -> 2.6 ms). Below kReadBackFrom
      // the copy would otherwise merge with a kernel computing the same elements, and
      // reading back costs a kernel (resnet18's step: 3 more for 2.5 % of its time). The
      // bias gradient, a reduce, fuses with the kernels computing grad_output: left as is.
      constexpr int64_t kReadBackFrom = int64_t(1) << 20;
      T stored_go;
      v = conv_transposed_value(go, w, groups, p.stride, p.pad, p.dil, opad,
                                is_stored(go) || go.numel() < kReadBackFrom ? nullptr : &stored_go);
      if (stored_go.defined()) go_for_weight = stored_go;
    } else {
      v = conv_value(go, w, groups, p.stride, p.pad, p.dil);
    }
    gi = make_result(v.cast(edt), dt);
  }
  if (output_mask[1]) {
    T v;
    if (!transposed) {
      const int64_t taps = tiny::numel(K);
      const Dims out(go.shape().begin() + 2, go.shape().end());
      T xp = stored_conv_operand(pad_spatial(x, p.pad, p.pad), x, x.shape()[1] / groups, go.shape()[1] / groups,
                                 p.stride, out);
      const bool channels_last = wgrad_channels_last_pays(xp, go_for_weight, groups, taps);
      if (channels_last && !live) {
        // stored (C, K..., OC); the gradient is its (OC, C, K...) permutation
        gw = make_result(wgrad_channels_last(xp, go_for_weight, K, p.stride, p.dil).cast(edt), dt);
        std::vector<int> perm = channels_first(p.D);
        gw = gw.permute(std::vector<int64_t>(perm.begin(), perm.end()));
      } else {
        v = channels_last ? wgrad_channels_last(xp, go_for_weight, K, p.stride, p.dil).permute(channels_first(p.D))
                          : wgrad_core(xp, go_for_weight, groups, K, p.stride, p.dil, weight.size(1) * taps)
                                .reshape(w.shape());
        if (live)  // the live taps' gradient, padded back to the weight's taps
          for (size_t i = 0; i < p.D; i++)
            v = pad_dim(v, int(2 + i), live->lo[i], weight.size(int64_t(2 + i)) - live->lo[i] - K[i]);
      }
    } else {
      // gw[ic, o, k] = sum x[n, ic, i] * go[n, o, i*s - p + k*d]: the weight
      // gradient of a convolution of grad_output with x in the output's role
      T gp = stored_operand(pad_spatial(go, p.pad, p.pad), go);
      v = wgrad_core(gp, x, groups, K, p.stride, p.dil);
    }
    if (v.defined()) gw = make_result(v.reshape(to_shape(weight.sizes())).cast(edt), dt);
  }
  if (output_mask[2]) {
    std::vector<int> axes{0};
    for (size_t i = 0; i < p.D; i++) axes.push_back(int(2 + i));
    gb = make_result(go.reduce(ReduceOp::Sum, axes, false).cast(edt), dt);
  }
  return {gi, gw, gb};
}

// ---------------------------------------------------------------- im2col (nn.Unfold)
void check_window_args(at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                       at::IntArrayRef stride) {
  TORCH_CHECK(kernel.size() == 2, "It is expected kernel_size equals to 2, but got size ", kernel.size());
  TORCH_CHECK(dilation.size() == 2, "It is expected dilation equals to 2, but got size ", dilation.size());
  TORCH_CHECK(padding.size() == 2, "It is expected padding equals to 2, but got size ", padding.size());
  TORCH_CHECK(stride.size() == 2, "It is expected stride equals to 2, but got size ", stride.size());
}

// Window positions along a padded axis of `padded` elements.
int64_t window_positions(int64_t padded, int64_t kernel, int64_t dilation, int64_t stride) {
  return (padded - (dilation * (kernel - 1) + 1)) / stride + 1;
}

// out[n, (c, ki, kj), (i, j)] = padded[n, c, ki*dh + i*sh, kj*dw + j*sw]: one strided view of
// the padded input.
T im2col_value(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
               at::IntArrayRef stride) {
  check_window_args(kernel, dilation, padding, stride);
  at::native::im2col_shape_check(self, at::Tensor(), kernel[0], kernel[1], dilation[0], dilation[1], padding[0],
                                 padding[1], stride[0], stride[1]);
  const bool batched = self.dim() == 4;
  T x = read(self);
  if (!batched) x = x.reshape({1, self.size(0), self.size(1), self.size(2)});
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t hp = x.shape()[2] + 2 * padding[0], wp = x.shape()[3] + 2 * padding[1];
  const int64_t oh = window_positions(hp, kernel[0], dilation[0], stride[0]);
  const int64_t ow = window_positions(wp, kernel[1], dilation[1], stride[1]);
  T padded = x.pad({{0, 0}, {0, 0}, {padding[0], padding[0]}, {padding[1], padding[1]}});
  T cols = padded.as_strided({n, c, kernel[0], kernel[1], oh, ow},
                             {c * hp * wp, hp * wp, dilation[0] * wp, dilation[1], stride[0] * wp, stride[1]}, 0);
  tiny::Shape out{n, c * kernel[0] * kernel[1], oh * ow};
  if (!batched) out.erase(out.begin());
  return cols.reshape(out);
}
at::Tensor im2col(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                  at::IntArrayRef stride) {
  TinyOp op("im2col");
  return make_result(im2col_value(self, kernel, dilation, padding, stride), self.scalar_type());
}
at::Tensor& im2col_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation,
                       at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  TinyOp op("im2col");
  return assign_out(out, im2col_value(self, kernel, dilation, padding, stride), self.scalar_type(), {self});
}

// ---------------------------------------------------------------- col2im (nn.Fold, unfold's backward)
// Each kernel offset's slab of columns spread to its strided, dilated positions in the padded
// image (a pad between elements: reshape to (n, 1), pad to (n, s), flatten), the slabs summed in
// the CPU's order, then the padding cut away: one fused elementwise kernel.
T spread(const T& v, int axis, int64_t stride, int64_t offset, int64_t size) {
  tiny::Shape shape = v.shape();
  const int64_t n = shape[size_t(axis)];
  tiny::Shape split = shape;
  split.insert(split.begin() + axis + 1, 1);
  tiny::Ranges pad(split.size(), {0, 0});
  pad[size_t(axis + 1)] = {0, stride - 1};
  tiny::Shape spaced = shape;
  spaced[size_t(axis)] = n * stride;
  T r = v.reshape(split).pad(pad).reshape(spaced);  // element i at i * stride
  tiny::Ranges place(spaced.size(), {0, 0});
  const int64_t end = offset + n * stride;
  place[size_t(axis)] = {offset, std::max<int64_t>(0, size - end)};
  r = r.pad(place);
  tiny::Ranges keep;
  for (size_t d = 0; d < spaced.size(); d++) keep.push_back({0, r.shape()[d]});
  keep[size_t(axis)] = {0, size};
  return r.shrink(keep);
}

T col2im_value(const at::Tensor& self, at::IntArrayRef output_size, at::IntArrayRef kernel, at::IntArrayRef dilation,
               at::IntArrayRef padding, at::IntArrayRef stride) {
  TORCH_CHECK(output_size.size() == 2, "It is expected output_size equals to 2, but got size ", output_size.size());
  check_window_args(kernel, dilation, padding, stride);
  at::native::col2im_shape_check(self, at::Tensor(), output_size[0], output_size[1], kernel[0], kernel[1],
                                 dilation[0], dilation[1], padding[0], padding[1], stride[0], stride[1]);
  const bool batched = self.dim() == 3;
  T x = read(self);
  if (!batched) x = x.reshape({1, self.size(0), self.size(1)});
  const int64_t n = x.shape()[0], kk = kernel[0] * kernel[1], c = x.shape()[1] / kk;
  const int64_t h = output_size[0], w = output_size[1];
  const int64_t hp = h + 2 * padding[0], wp = w + 2 * padding[1];
  const int64_t oh = window_positions(hp, kernel[0], dilation[0], stride[0]);
  const int64_t ow = window_positions(wp, kernel[1], dilation[1], stride[1]);
  T cols = x.reshape({n, c, kernel[0], kernel[1], oh, ow});
  T image;
  for (int64_t ki = 0; ki < kernel[0]; ki++) {
    for (int64_t kj = 0; kj < kernel[1]; kj++) {
      T slab = cols.shrink({{0, n}, {0, c}, {ki, ki + 1}, {kj, kj + 1}, {0, oh}, {0, ow}}).reshape({n, c, oh, ow});
      T placed = spread(spread(slab, 2, stride[0], ki * dilation[0], hp), 3, stride[1], kj * dilation[1], wp);
      image = image.defined() ? image.binary(Op::Add, placed) : placed;
    }
  }
  image = image.shrink({{0, n}, {0, c}, {padding[0], padding[0] + h}, {padding[1], padding[1] + w}});
  return batched ? image : image.reshape({c, h, w});
}
at::Tensor col2im(const at::Tensor& self, at::IntArrayRef output_size, at::IntArrayRef kernel,
                  at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
  TinyOp op("col2im");
  return make_result(col2im_value(self, output_size, kernel, dilation, padding, stride), self.scalar_type());
}
at::Tensor& col2im_out(const at::Tensor& self, at::IntArrayRef output_size, at::IntArrayRef kernel,
                       at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  TinyOp op("col2im");
  return assign_out(out, col2im_value(self, output_size, kernel, dilation, padding, stride), self.scalar_type(), {self});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("col2im", col2im);
  m.impl("col2im.out", col2im_out);
  m.impl("im2col", im2col);
  m.impl("im2col.out", im2col_out);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_tiny
