// Shape ops that move data: cat, flip, roll, repeat, repeat_interleave,
// constant / reflection / replication padding (and their backward ops),
// unfold_backward. Everything is built from lazy views, selects and
// gathers, so each op fuses with whatever consumes it.
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Padding.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/reflection_pad1d_backward_meta.h>
#include <ATen/ops/reflection_pad1d_meta.h>
#include <ATen/ops/reflection_pad3d_backward_meta.h>
#include <ATen/ops/reflection_pad3d_meta.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/replication_pad1d_backward_meta.h>
#include <ATen/ops/replication_pad1d_meta.h>
#include <ATen/ops/replication_pad2d_meta.h>
#include <ATen/ops/replication_pad3d_meta.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/index_util.h"
#include "torch/ops_util.h"
#include "torch/storage_only.h"
#include "torch/tensor_value.h"

namespace torch_tiny {

using T = tiny::Tensor;
using tiny::DType;
using tiny::Op;

namespace {

// ---------------------------------------------------------------- cat

T cat_value(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out, c10::ScalarType* dtype) {
  MetaOnly<at::meta::structured_cat> m(out.defined() ? std::vector<at::Tensor>{out} : std::vector<at::Tensor>{});
  auto pre = m.meta(tensors, dim);
  *dtype = m.dtype();
  tiny::Shape shape = m.shape();
  std::vector<T> parts;
  for (const at::Tensor& t : tensors) {
    if (at::native::cat_should_skip_tensor(t)) continue;
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "Expected all tensors to be on the same device, but found at least two devices, tiny:0 and ",
                t.device(), "!");
    parts.push_back(read(t).cast(to_engine(*dtype)));
  }
  T v = tiny::numel(shape) == 0 ? T() : T::concat(parts, int(pre.dim));
  if (!v.defined()) v = T::full(shape, tiny::Scalar::from_int(0), to_engine(*dtype));
  return v;
}
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  TinyOp op("cat");
  c10::ScalarType dt;
  T v = cat_value(tensors, dim, {}, &dt);
  return make_result(v, dt);
}
at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  TinyOp op("cat");
  c10::ScalarType dt;
  T v = cat_value(tensors, dim, out, &dt);
  std::vector<at::Tensor> inputs(tensors.begin(), tensors.end());
  return assign_out(out, v, dt, inputs);
}

// ---------------------------------------------------------------- channel_shuffle

// (N, C, ...) -> (N, g, C/g, ...) -> swap g and C/g -> (N, C, ...): a view, copied (ShuffleNet).
at::Tensor channel_shuffle(const at::Tensor& self, int64_t groups) {
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input with > 2 dims, but got input with sizes ", self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive. Value of groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  TinyOp op("channel_shuffle");
  tiny::Shape shape = to_shape(self.sizes());
  tiny::Shape grouped = shape;
  grouped[1] = c / groups;
  grouped.insert(grouped.begin() + 1, groups);
  std::vector<int> order(grouped.size());
  for (size_t d = 0; d < order.size(); d++) order[d] = int(d);
  std::swap(order[1], order[2]);
  return make_result(read(self).reshape(grouped).permute(order).reshape(shape), self.scalar_type());
}

// ---------------------------------------------------------------- flip / roll / repeat

T flip_value(const at::Tensor& self, at::IntArrayRef dims) {
  auto bits = at::dim_list_to_bitset(dims, self.dim());
  std::vector<bool> f(size_t(self.dim()), false);
  for (int64_t d = 0; d < self.dim(); d++) f[size_t(d)] = bits[size_t(d)];
  T v = read(self);
  return self.dim() == 0 ? v : v.flip(f);
}
at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  TinyOp op("flip");
  return make_result(flip_value(self, dims), self.scalar_type());
}
at::Tensor& flip_out(const at::Tensor& self, at::IntArrayRef dims, at::Tensor& out) {
  TinyOp op("flip");
  return assign_out(out, flip_value(self, dims), self.scalar_type(), {self});
}

T roll_value(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  T v = read(self);
  if (dims.empty() && shifts.size() == 1) {
    // roll the flattened tensor
    int64_t n = self.numel();
    if (n == 0) return v;
    int64_t start = ((n - shifts[0]) % n + n) % n;
    T flat = v.reshape({n});
    T r = start == 0 ? flat : T::concat({flat.shrink({{start, n}}), flat.shrink({{0, start}})}, 0);
    return r.reshape(to_shape(self.sizes()));
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:",
              dims.size());
  if (self.numel() == 0) return v;
  for (size_t i = 0; i < dims.size(); i++) {
    int64_t d = at::maybe_wrap_dim(dims[i], self.dim());
    int64_t n = self.size(d);
    int64_t start = ((n - shifts[i]) % n + n) % n;
    if (start == 0) continue;
    tiny::Ranges a, b;
    for (int64_t k = 0; k < self.dim(); k++) {
      a.push_back(k == d ? std::pair<int64_t, int64_t>{start, n} : std::pair<int64_t, int64_t>{0, self.size(k)});
      b.push_back(k == d ? std::pair<int64_t, int64_t>{0, start} : std::pair<int64_t, int64_t>{0, self.size(k)});
    }
    v = T::concat({v.shrink(a), v.shrink(b)}, int(d));
  }
  return v;
}
at::Tensor roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TinyOp op("roll");
  return make_result(roll_value(self, shifts, dims), self.scalar_type());
}
at::Tensor& roll_out(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims, at::Tensor& out) {
  TinyOp op("roll");
  return assign_out(out, roll_value(self, shifts, dims), self.scalar_type(), {self});
}

T repeat_value(const at::Tensor& self, at::IntArrayRef repeats) {
  TORCH_CHECK(repeats.size() >= size_t(self.dim()),
              "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  size_t n = repeats.size();
  tiny::Shape padded(n - size_t(self.dim()), 1), target;
  padded.insert(padded.end(), self.sizes().begin(), self.sizes().end());
  for (size_t i = 0; i < n; i++) target.push_back(padded[i] * repeats[i]);
  for (auto t : target)
    TORCH_CHECK(t >= 0, "Trying to create tensor with negative dimension ", t, ": ", c10::IntArrayRef(target));
  DType dt = to_engine(self.scalar_type());
  if (tiny::numel(target) == 0) return T::full(target, tiny::Scalar::from_int(0), dt);
  // (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...), then merged pairwise
  tiny::Shape inter, expanded;
  for (size_t i = 0; i < n; i++) {
    inter.insert(inter.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
  }
  return read(self).reshape(inter).expand(expanded).reshape(target);
}
at::Tensor repeat(const at::Tensor& self, at::IntArrayRef repeats) {
  TinyOp op("repeat");
  return make_result(repeat_value(self, repeats), self.scalar_type());
}
at::Tensor& repeat_out(const at::Tensor& self, at::IntArrayRef repeats, at::Tensor& out) {
  TinyOp op("repeat");
  return assign_out(out, repeat_value(self, repeats), self.scalar_type(), {self});
}

// The output size depends on the repeat counts: they are read on the host
// (a sync point for a lazy tensor) and the result is uploaded.
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  at::Tensor host = repeats.device().type() == c10::DeviceType::CPU ? repeats : repeats.cpu();
  at::Tensor r = at::repeat_interleave(host, output_size);
  TinyOp op("repeat_interleave");
  return make_result(from_cpu(r), r.scalar_type());
}
at::Tensor& repeat_interleave_out(const at::Tensor& repeats, std::optional<int64_t> output_size, at::Tensor& out) {
  at::Tensor host = repeats.device().type() == c10::DeviceType::CPU ? repeats : repeats.cpu();
  at::Tensor r = at::repeat_interleave(host, output_size);
  TinyOp op("repeat_interleave");
  return assign_out(out, from_cpu(r), r.scalar_type(), {repeats});
}

// ---------------------------------------------------------------- constant padding

// `v` (self's value, or one component of a complex self) padded by `pad`, with
// `fill` (made for the output shape) outside.
template <class Fill>
T constant_pad(const at::Tensor& self, const T& value_of_self, at::IntArrayRef pad, DType dt, Fill fill) {
  TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  int64_t nd = self.dim(), npad = int64_t(pad.size() / 2);
  TORCH_CHECK(nd >= npad, "Length of pad should be no more than twice the number of dimensions of the input. Pad length is ",
              pad.size(), "while the input has ", nd, "dimensions.");
  tiny::Ranges keep, grow;
  tiny::Shape out = to_shape(self.sizes());
  bool any_pad = false;
  for (int64_t d = 0; d < nd; d++) {
    int64_t size = self.size(d), before = 0, after = 0;
    if (d >= nd - npad) {
      size_t k = size_t(2 * (nd - d - 1));
      before = pad[k];
      after = pad[k + 1];
    }
    int64_t begin = std::max<int64_t>(0, -before);
    TORCH_CHECK(size - begin >= 0 && size - begin - std::max<int64_t>(0, -after) >= 0,
                "narrow(): length must be non-negative.");
    keep.push_back({begin, size - std::max<int64_t>(0, -after)});
    grow.push_back({std::max<int64_t>(0, before), std::max<int64_t>(0, after)});
    any_pad |= before > 0 || after > 0;
    out[size_t(d)] = size + before + after;
  }
  if (tiny::numel(out) == 0) return T::full(out, tiny::Scalar::from_int(0), dt);
  T v = value_of_self;
  if (nd == 0) return v;
  v = v.shrink(keep);
  if (!any_pad) return v;
  T padded = v.pad(grow);
  // outside the input: the fill value (a select keeps -0.0 and NaN payloads exact)
  tiny::Shape inner = v.shape();
  T inside = T::full(inner, tiny::Scalar::from_bool(true), DType::Bool).pad(grow);
  return T::where(inside, padded, fill(out));
}
T constant_pad_value(const at::Tensor& self, at::IntArrayRef pad, const c10::Scalar& value) {
  DType dt = to_engine(self.scalar_type());
  return constant_pad(self, read(self), pad, dt,
                      [&](const tiny::Shape& out) { return scalar_operand(value, self.scalar_type(), out); });
}
// Complex tensors (storage-only) pad their real and imaginary parts.
at::Tensor& constant_pad_complex(const at::Tensor& self, at::IntArrayRef pad, const c10::Scalar& value,
                                 at::Tensor& out) {
  DType comp = to_engine(c10::toRealValueType(self.scalar_type()));
  auto [re, im] = complex_parts(self, comp, to_shape(self.sizes()));
  c10::complex<double> z = value.toComplexDouble();
  auto fill = [comp](double v) {
    return [comp, v](const tiny::Shape& out) { return T::full(out, tiny::Scalar::from_double(v), comp); };
  };
  T r = constant_pad(self, re, pad, comp, fill(z.real())), i = constant_pad(self, im, pad, comp, fill(z.imag()));
  return write_complex(out, r, i, r.shape(), {self});
}
at::Tensor constant_pad_nd(const at::Tensor& self, at::IntArrayRef pad, const c10::Scalar& value) {
  TinyOp op("constant_pad_nd");
  if (self.is_complex()) {
    at::Tensor out = at::empty({0}, self.options().dtype(self.scalar_type()));
    return constant_pad_complex(self, pad, value, out);
  }
  return make_result(constant_pad_value(self, pad, value), self.scalar_type());
}
at::Tensor& constant_pad_nd_out(const at::Tensor& self, at::IntArrayRef pad, const c10::Scalar& value, at::Tensor& out) {
  TinyOp op("constant_pad_nd");
  if (self.is_complex()) return constant_pad_complex(self, pad, value, out);
  return assign_out(out, constant_pad_value(self, pad, value), self.scalar_type(), {self});
}

// ---------------------------------------------------------------- reflection / replication padding

enum class PadMode { Reflect, Replicate };

// The input coordinate each output position of one padded dim reads.
T source_coords(int64_t out_size, int64_t in_size, int64_t before, PadMode mode) {
  T o = T::arange(out_size, tiny::Scalar::from_int(-before), tiny::Scalar::from_int(1), DType::Int64);
  tiny::Shape s{out_size};
  T zero = i64(0, s), last = i64(in_size - 1, s);
  if (mode == PadMode::Replicate) {
    T lo = T::where(o.binary(Op::CmpLt, zero), zero, o);
    return T::where(last.binary(Op::CmpLt, lo), last, lo);
  }
  T neg = o.binary(Op::CmpLt, zero);
  T r = T::where(neg, o.unary(Op::Neg), o);
  T over = last.binary(Op::CmpLt, r);
  return T::where(over, i64(2 * (in_size - 1), s).binary(Op::Sub, r), r);
}

// Storage offsets (or, with `row_major`, row-major positions) in `input` of
// the element each output element of the padding reads. `padding` pairs run
// from the last dim backwards, as ATen orders them.
T pad_offsets(const at::Tensor& input, at::IntArrayRef padding, PadMode mode, bool row_major) {
  int64_t nd = input.dim(), npad = int64_t(padding.size() / 2);
  tiny::Shape out = to_shape(input.sizes());
  auto strides = row_major ? c10::contiguous_strides(input.sizes()) : c10::DimVector(input.strides());
  std::vector<T> coords(static_cast<size_t>(nd));
  for (int64_t i = 0; i < npad; i++) {
    int64_t d = nd - 1 - i;
    int64_t before = padding[size_t(2 * i)], after = padding[size_t(2 * i + 1)];
    out[size_t(d)] = input.size(d) + before + after;
    coords[size_t(d)] = source_coords(out[size_t(d)], input.size(d), before, mode);
  }
  OffsetSum os(out, row_major ? 0 : input.storage_offset());
  for (int64_t d = 0; d < nd; d++) {
    if (coords[size_t(d)].defined()) os.add(place_dims(coords[size_t(d)], int(nd), int(d)), strides[size_t(d)]);
    else os.add_axis(int(d), strides[size_t(d)]);
  }
  return os.value();
}

at::Tensor pad_forward(const at::Tensor& input, at::IntArrayRef padding, PadMode mode, const tiny::Shape& out_shape) {
  DType dt = to_engine(input.scalar_type());
  if (tiny::numel(out_shape) == 0) return make_result(T::full(out_shape, tiny::Scalar::from_int(0), dt), input.scalar_type());
  return make_result(gather_storage(input, pad_offsets(input, padding, mode, false)), input.scalar_type());
}

// grad_input: every grad_output element added into the input element it read.
T pad_backward_value(const at::Tensor& grad_output, const at::Tensor& input, at::IntArrayRef padding, PadMode mode) {
  DType dt = to_engine(grad_output.scalar_type());
  int64_t n = input.numel(), m = grad_output.numel();
  T base = T::full({n}, tiny::Scalar::from_int(0), dt);
  if (n == 0 || m == 0) return base.reshape(to_shape(input.sizes()));
  T at = pad_offsets(input, padding, mode, true).reshape({m});
  T g = read(grad_output).reshape({m});
  return base.scatter(at, g, true, tiny::ReduceOp::Sum).reshape(to_shape(input.sizes()));
}

template <class Meta, PadMode M>
at::Tensor pad_structured(const at::Tensor& self, at::IntArrayRef padding) {
  TinyOp op(M == PadMode::Reflect ? "reflection_pad" : "replication_pad");
  MetaOnly<Meta> m;
  m.meta(self, padding);
  return pad_forward(self, padding, M, m.shape());
}
template <class Meta, PadMode M>
at::Tensor& pad_structured_out(const at::Tensor& self, at::IntArrayRef padding, at::Tensor& out) {
  TinyOp op(M == PadMode::Reflect ? "reflection_pad" : "replication_pad");
  MetaOnly<Meta> m({out});
  m.meta(self, padding);
  at::Tensor r = pad_forward(self, padding, M, m.shape());
  return assign_out(out, read(r), self.scalar_type(), {self});
}
template <class Meta, PadMode M>
at::Tensor pad_structured_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  TinyOp op(M == PadMode::Reflect ? "reflection_pad_backward" : "replication_pad_backward");
  MetaOnly<Meta> m;
  m.meta(grad_output, self, padding);
  return make_result(pad_backward_value(grad_output, self, padding, M), grad_output.scalar_type());
}
template <class Meta, PadMode M>
at::Tensor& pad_structured_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding,
                                        at::Tensor& grad_input) {
  TinyOp op(M == PadMode::Reflect ? "reflection_pad_backward" : "replication_pad_backward");
  MetaOnly<Meta> m({grad_input});
  m.meta(grad_output, self, padding);
  return assign_out(grad_input, pad_backward_value(grad_output, self, padding, M), grad_output.scalar_type(),
                    {grad_output});
}

// reflection_pad2d has no meta function: ATen's checks, written out.
tiny::Shape reflection_pad2d_shape(const at::Tensor& input, at::IntArrayRef padding) {
  at::native::padding::check_valid_input<2>(input, padding);
  int64_t dim_w = 2, dim_h = 1;
  if (input.dim() == 4) {
    dim_w++;
    dim_h++;
  }
  int64_t pad_l = padding[0], pad_r = padding[1], pad_t = padding[2], pad_b = padding[3];
  int64_t input_h = input.size(dim_h), input_w = input.size(dim_w);
  int64_t output_h = input_h + pad_t + pad_b, output_w = input_w + pad_l + pad_r;
  TORCH_CHECK(pad_l < input_w && pad_r < input_w, "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
              pad_l, ", ", pad_r, ") at dimension ", dim_w, " of input ", input.sizes());
  TORCH_CHECK(pad_t < input_h && pad_b < input_h, "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (",
              pad_t, ", ", pad_b, ") at dimension ", dim_h, " of input ", input.sizes());
  TORCH_CHECK(output_w >= 1 || output_h >= 1, "input (H: ", input_h, ", W: ", input_w, ")is too small.  Calculated output H: ",
              output_h, " W: ", output_w);
  tiny::Shape out = to_shape(input.sizes());
  out[size_t(dim_h)] = output_h;
  out[size_t(dim_w)] = output_w;
  return out;
}
at::Tensor reflection_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  TinyOp op("reflection_pad2d");
  return pad_forward(self, padding, PadMode::Reflect, reflection_pad2d_shape(self, padding));
}
at::Tensor& reflection_pad2d_out(const at::Tensor& self, at::IntArrayRef padding, at::Tensor& out) {
  TinyOp op("reflection_pad2d");
  at::Tensor r = pad_forward(self, padding, PadMode::Reflect, reflection_pad2d_shape(self, padding));
  return assign_out(out, read(r), self.scalar_type(), {self});
}

// Backward ops without a meta function: grad_output must have the forward's output shape.
void check_pad_backward(const at::Tensor& grad_output, const at::Tensor& input, at::IntArrayRef padding, int dims) {
  TORCH_CHECK(int64_t(padding.size()) == 2 * dims, "padding size is expected to be ", 2 * dims, ", but got: ", padding.size());
  TORCH_CHECK(grad_output.dim() == input.dim(), "grad_output must have the same number of dims as input");
  const char* names[] = {"width", "height", "depth"};
  for (int i = 0; i < dims; i++) {
    int64_t d = input.dim() - 1 - i;
    int64_t expected = input.size(d) + padding[size_t(2 * i)] + padding[size_t(2 * i + 1)];
    TORCH_CHECK(grad_output.size(d) == expected, "grad_output ", names[i], " unexpected. Expected: ", expected,
                ", Got: ", grad_output.size(d));
  }
}
template <PadMode M, int Dims>
at::Tensor pad_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding) {
  TinyOp op("pad_backward");
  check_pad_backward(grad_output, self, padding, Dims);
  return make_result(pad_backward_value(grad_output, self, padding, M), grad_output.scalar_type());
}
template <PadMode M, int Dims>
at::Tensor& pad_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef padding,
                             at::Tensor& grad_input) {
  TinyOp op("pad_backward");
  check_pad_backward(grad_output, self, padding, Dims);
  return assign_out(grad_input, pad_backward_value(grad_output, self, padding, M), grad_output.scalar_type(),
                    {grad_output});
}

// ---------------------------------------------------------------- unfold_backward

// grad of unfold(dim, size, step): window element (i, j) came from position
// i * step + j along dim; overlapping windows add up.
at::Tensor unfold_backward(const at::Tensor& grad_in, at::IntArrayRef input_sizes, int64_t dim, int64_t size, int64_t step) {
  TinyOp op("unfold_backward");
  int64_t nd = int64_t(input_sizes.size());
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(nd, 1));
  DType dt = to_engine(grad_in.scalar_type());
  int64_t n = c10::multiply_integers(input_sizes), m = grad_in.numel();
  T base = T::full({n}, tiny::Scalar::from_int(0), dt);
  if (n > 0 && m > 0) {
    tiny::Shape gshape = to_shape(grad_in.sizes());
    auto strides = c10::contiguous_strides(input_sizes);
    int64_t dstride = nd == 0 ? 1 : strides[size_t(dim)];
    OffsetSum os(gshape);
    for (int64_t d = 0; d < nd; d++) os.add_axis(int(d), d == dim ? step * dstride : strides[size_t(d)]);
    os.add_axis(int(gshape.size()) - 1, dstride);
    base = base.scatter(os.value().reshape({m}), read(grad_in).reshape({m}), true, tiny::ReduceOp::Sum);
  }
  return make_result(base.reshape(tiny::Shape(input_sizes.begin(), input_sizes.end())), grad_in.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
  m.impl("channel_shuffle", channel_shuffle);
  m.impl("flip", flip);
  m.impl("flip.out", flip_out);
  m.impl("roll", roll);
  m.impl("roll.out", roll_out);
  m.impl("repeat", repeat);
  m.impl("repeat.out", repeat_out);
  m.impl("repeat_interleave.Tensor", repeat_interleave);
  m.impl("repeat_interleave.Tensor_out", repeat_interleave_out);
  m.impl("constant_pad_nd", constant_pad_nd);
  m.impl("constant_pad_nd.out", constant_pad_nd_out);
  m.impl("reflection_pad1d", pad_structured<at::meta::structured_reflection_pad1d, PadMode::Reflect>);
  m.impl("reflection_pad1d.out", pad_structured_out<at::meta::structured_reflection_pad1d, PadMode::Reflect>);
  m.impl("reflection_pad2d", reflection_pad2d);
  m.impl("reflection_pad2d.out", reflection_pad2d_out);
  m.impl("reflection_pad3d", pad_structured<at::meta::structured_reflection_pad3d, PadMode::Reflect>);
  m.impl("reflection_pad3d.out", pad_structured_out<at::meta::structured_reflection_pad3d, PadMode::Reflect>);
  m.impl("replication_pad1d", pad_structured<at::meta::structured_replication_pad1d, PadMode::Replicate>);
  m.impl("replication_pad1d.out", pad_structured_out<at::meta::structured_replication_pad1d, PadMode::Replicate>);
  m.impl("replication_pad2d", pad_structured<at::meta::structured_replication_pad2d, PadMode::Replicate>);
  m.impl("replication_pad2d.out", pad_structured_out<at::meta::structured_replication_pad2d, PadMode::Replicate>);
  m.impl("replication_pad3d", pad_structured<at::meta::structured_replication_pad3d, PadMode::Replicate>);
  m.impl("replication_pad3d.out", pad_structured_out<at::meta::structured_replication_pad3d, PadMode::Replicate>);
  m.impl("reflection_pad1d_backward",
         pad_structured_backward<at::meta::structured_reflection_pad1d_backward, PadMode::Reflect>);
  m.impl("reflection_pad1d_backward.grad_input",
         pad_structured_backward_out<at::meta::structured_reflection_pad1d_backward, PadMode::Reflect>);
  m.impl("reflection_pad2d_backward", pad_backward<PadMode::Reflect, 2>);
  m.impl("reflection_pad2d_backward.grad_input", pad_backward_out<PadMode::Reflect, 2>);
  m.impl("reflection_pad3d_backward",
         pad_structured_backward<at::meta::structured_reflection_pad3d_backward, PadMode::Reflect>);
  m.impl("reflection_pad3d_backward.grad_input",
         pad_structured_backward_out<at::meta::structured_reflection_pad3d_backward, PadMode::Reflect>);
  m.impl("replication_pad1d_backward",
         pad_structured_backward<at::meta::structured_replication_pad1d_backward, PadMode::Replicate>);
  m.impl("replication_pad1d_backward.grad_input",
         pad_structured_backward_out<at::meta::structured_replication_pad1d_backward, PadMode::Replicate>);
  m.impl("replication_pad2d_backward", pad_backward<PadMode::Replicate, 2>);
  m.impl("replication_pad2d_backward.grad_input", pad_backward_out<PadMode::Replicate, 2>);
  m.impl("replication_pad3d_backward", pad_backward<PadMode::Replicate, 3>);
  m.impl("replication_pad3d_backward.grad_input", pad_backward_out<PadMode::Replicate, 3>);
  m.impl("unfold_backward", unfold_backward);
}

}  // namespace torch_tiny
