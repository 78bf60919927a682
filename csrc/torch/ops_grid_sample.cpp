// grid_sampler_2d / grid_sampler_3d (F.grid_sample): each output point reads
// the input at a grid coordinate in [-1, 1], unnormalized as ATen does
// (align_corners), taken through the padding mode (zeros, border clip,
// reflection) and interpolated (bilinear / trilinear, nearest, bicubic in
// 2-d). Every tap is a gather of the flat input at a clamped index, zeroed
// where it falls outside; all taps of a point fuse into one kernel.
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "torch/pointwise.h"
#include "torch/reduce_util.h"

namespace torch_tiny {
namespace {

using namespace pw;
using T = tiny::Tensor;

enum Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

T unnormalize(const T& coord, int64_t size, bool align_corners) {
  if (align_corners) return (coord + 1.0) * (0.5 * double(size - 1));
  return ((coord + 1.0) * double(size) - 1.0) * 0.5;
}
// x reflected into [low, high] = [twice_low / 2, twice_high / 2], as ATen's reflect_coordinates.
T reflect(const T& x, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return cnst(x, 0.0);
  double lo = double(twice_low) / 2, span = double(twice_high - twice_low) / 2;
  T in = un(Op::Abs, x - lo);
  T flips = un(Op::Floor, in / span);
  T extra = in - flips * span;  // fmod for in >= 0
  T even = eq(flips - un(Op::Floor, flips * 0.5) * 2.0, 0.0);
  return where(even, extra + lo, (span - extra) + lo);
}

// The CPU's 2-d kernel is vectorized, its 3-d one scalar, and they differ on NaN
// coordinates: clipped to 0 (2-d) or to size - 1 (3-d: std::min / std::max);
// a zero-padded NaN point is NaN (2-d) or 0 (3-d: every tap out of bounds).
struct Padder {
  int64_t padding;
  bool align_corners, scalar_kernel;

  T clip(const T& x, int64_t size) const {  // into [0, size - 1]
    double nan_to = scalar_kernel ? double(size - 1) : 0.0;
    return where(isnan(x), nan_to, min(max(x, cnst(x, 0.0)), cnst(x, double(size - 1))));
  }
  // compute_coordinates: the padding mode applied to an unnormalized coordinate
  T operator()(const T& x, int64_t size) const {
    if (padding == kBorder) return clip(x, size);
    if (padding == kReflection)
      return clip(align_corners ? reflect(x, 0, 2 * (size - 1)) : reflect(x, -1, 2 * size - 1), size);
    return x;
  }
};

// The input's values at integer coordinates `at` (one per spatial dim, each
// (N, 1, out...)), 0 outside; the result is (N, C, out...).
struct Sampler {
  T flat;                    // the input, flat
  std::vector<int64_t> size;  // spatial sizes
  int64_t channels, batch;
  tiny::Shape out;  // (N, C, out...)

  bool scalar_kernel;

  // The tap's value times its weight (w may be undefined: 1); 0 outside.
  T fetch(const std::vector<T>& at, const T& w = T()) const {
    tiny::Shape point = out;
    point[1] = 1;
    T inside, offset;
    int64_t plane = 1;
    for (size_t d = 0; d < size.size(); d++) {
      T in_d = land(ge(at[d], 0.0), le(at[d], double(size[d] - 1)));  // false for NaN
      T i = where(in_d, at[d], 0.0).cast(tiny::DType::Int64);
      inside = inside.defined() ? land(inside, in_d) : in_d;
      offset = offset.defined() ? offset * double(size[d]) + i : i;
      plane *= size[d];
    }
    T index = iota(out, 0) * double(channels * plane) + iota(out, 1) * double(plane) + offset.expand(out);
    T value = flat.gather(index);
    if (!w.defined()) return where(inside.expand(out), value, 0.0);
    if (scalar_kernel) return where(inside.expand(out), value * w.expand(out), 0.0);
    return where(inside.expand(out), value, 0.0) * w.expand(out);
  }
};

// ATen's cubic convolution weights (A = -0.75) for the four taps at distance t from the second.
std::vector<T> cubic_weights(const T& t) {
  const double A = -0.75;
  auto near = [&](const T& x) { return ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0; };
  auto far = [&](const T& x) { return ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A; };
  return {far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)};
}

T grid_sample_value(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation, int64_t padding,
                    bool align_corners, int nd) {
  const char* name = nd == 2 ? "grid_sampler_2d" : "grid_sampler_3d";
  TORCH_CHECK(input.dim() == nd + 2 && grid.dim() == nd + 2, name, "(): expected ", nd + 2, "D input and grid, got ",
              input.dim(), "D and ", grid.dim(), "D");
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(), "expected scalar type ", input.scalar_type(),
              " but found ", grid.scalar_type());
  TORCH_CHECK(input.size(0) == grid.size(0), name, "(): expected grid and input to have same batch size, but got "
              "input with sizes ", input.sizes(), " and grid with sizes ", grid.sizes());
  TORCH_CHECK(grid.size(-1) == nd, name, "(): expected grid to have size ", nd, " in last dimension, but got grid "
              "with sizes ", grid.sizes());
  TORCH_CHECK(interpolation >= 0 && interpolation <= (nd == 2 ? 2 : 1), name, "(): unsupported interpolation mode ",
              interpolation);
  TORCH_CHECK(padding >= 0 && padding <= 2, name, "(): unsupported padding mode ", padding);
  c10::ScalarType dt = input.scalar_type();
  if (!c10::isFloatingType(dt)) not_implemented_for(nd == 2 ? "grid_sampler_2d_cpu_kernel_impl" : "grid_sampler_3d_cpu", dt);
  tiny::DType e = to_engine(opmath(dt));
  Sampler s;
  s.scalar_kernel = nd == 3;
  Padder pad{padding, align_corners, s.scalar_kernel};
  s.batch = input.size(0);
  s.channels = input.size(1);
  s.out = {s.batch, s.channels};
  tiny::Shape point{s.batch, 1};
  for (int i = 0; i < nd; i++) {
    s.size.push_back(input.size(2 + i));
    s.out.push_back(grid.size(1 + i));
    point.push_back(grid.size(1 + i));
  }
  if (tiny::numel(s.out) == 0 || input.numel() == 0) return constant(s.out, 0, to_engine(dt));
  s.flat = read(input).cast(e).reshape({input.numel()});
  // grid (N, out..., nd): component d (x, y[, z]) addresses spatial dim nd - 1 - d
  T g = read(grid).cast(e);
  std::vector<T> coord(static_cast<size_t>(nd), T());
  for (int d = 0; d < nd; d++) {
    tiny::Ranges r;
    for (auto v : g.shape()) r.push_back({0, v});
    r.back() = {d, d + 1};
    int dim = nd - 1 - d;
    T c = unnormalize(g.shrink(r).reshape(point), s.size[size_t(dim)], align_corners);
    coord[size_t(dim)] = interpolation == kBicubic ? c : pad(c, s.size[size_t(dim)]);
  }
  T result;
  if (interpolation == kNearest) {
    std::vector<T> at;
    for (auto& c : coord) at.push_back(un(Op::Round, c));  // nearbyint: half to even
    result = s.fetch(at);
  } else if (interpolation == kBilinear) {
    std::vector<T> low, frac;
    for (auto& c : coord) {
      low.push_back(un(Op::Floor, c));
      frac.push_back(c - low.back());
    }
    for (int corner = 0; corner < (1 << nd); corner++) {
      std::vector<T> at;
      T w;
      for (int d = 0; d < nd; d++) {
        bool high = (corner >> (nd - 1 - d)) & 1;
        at.push_back(high ? low[size_t(d)] + 1.0 : low[size_t(d)]);
        T wd = high ? frac[size_t(d)] : 1.0 - frac[size_t(d)];
        w = w.defined() ? w * wd : wd;
      }
      T term = s.fetch(at, w);
      result = result.defined() ? result + term : term;
    }
  } else {  // bicubic (2-d): 4 x 4 taps, each coordinate through the padding mode
    T x0 = un(Op::Floor, coord[1]), y0 = un(Op::Floor, coord[0]);
    std::vector<T> wx = cubic_weights(coord[1] - x0), wy = cubic_weights(coord[0] - y0);
    auto bounded = [&](const T& c, int64_t size) { return un(Op::Trunc, pad(c, size)); };
    for (int i = 0; i < 4; i++) {
      T row;
      T y = bounded(y0 + double(i - 1), s.size[0]);
      for (int j = 0; j < 4; j++) {
        T x = bounded(x0 + double(j - 1), s.size[1]);
        T term = s.fetch({y, x}, wx[size_t(j)]);
        row = row.defined() ? row + term : term;
      }
      T term = row * wy[size_t(i)].expand(s.out);
      result = result.defined() ? result + term : term;
    }
  }
  return result.cast(to_engine(dt));
}

template <int nd>
at::Tensor grid_sampler(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation, int64_t padding,
                        bool align_corners) {
  TinyOp op(nd == 2 ? "grid_sampler_2d" : "grid_sampler_3d");
  return make_result(grid_sample_value(input, grid, interpolation, padding, align_corners, nd), input.scalar_type());
}
template <int nd>
at::Tensor& grid_sampler_out(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation, int64_t padding,
                             bool align_corners, at::Tensor& out) {
  TinyOp op(nd == 2 ? "grid_sampler_2d" : "grid_sampler_3d");
  return assign_out(out, grid_sample_value(input, grid, interpolation, padding, align_corners, nd),
                    input.scalar_type(), {input, grid});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("grid_sampler_2d", grid_sampler<2>);
  m.impl("grid_sampler_2d.out", grid_sampler_out<2>);
  m.impl("grid_sampler_3d", grid_sampler<3>);
  m.impl("grid_sampler_3d.out", grid_sampler_out<3>);
}

}  // namespace torch_tiny
