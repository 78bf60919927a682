// Shape ops that build new values from pieces: cat.
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny {
namespace {

using T = tiny::Tensor;

// Each piece padded into place; a chain of selects keeps it one fused,
// bit-exact kernel.
T cat_value(const at::ITensorListRef& tensors, int64_t dim, c10::ScalarType dt, std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) {
    inputs.push_back(t);
    // legacy: 1-D empty tensors are skipped whatever the other shapes
    if (t.dim() == 1 && t.numel() == 0) continue;
    ts.push_back(t);
  }
  TORCH_CHECK(!inputs.empty(), "torch.cat(): expected a non-empty list of Tensors");
  if (ts.empty()) return T::full({0}, tiny::Scalar::from_int(0), to_engine(dt));
  const at::Tensor& first = ts[0];
  int64_t nd = first.dim();
  TORCH_CHECK(nd > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
  dim = c10::maybe_wrap_dim(dim, nd);
  tiny::Shape shape = to_shape(first.sizes());
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const at::Tensor& t = ts[i];
    TORCH_CHECK(t.dim() == nd, "Tensors must have same number of dimensions: got ", nd, " and ", t.dim());
    for (int64_t d = 0; d < nd; d++)
      TORCH_CHECK(d == dim || t.size(d) == first.size(d), "Sizes of tensors must match except in dimension ", dim,
                  ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number ", i,
                  " in the list.");
    total += t.size(dim);
  }
  shape[dim] = total;
  T acc;
  int64_t at = 0;
  for (auto& t : ts) {
    int64_t len = t.size(dim);
    if (len == 0) continue;
    tiny::Ranges pads(size_t(nd), {0, 0});
    pads[size_t(dim)] = {at, total - at - len};
    T piece = read(t).cast(to_engine(dt)).pad(pads);
    if (!acc.defined()) {
      acc = piece;
    } else {
      T inside = T::full(to_shape(t.sizes()), tiny::Scalar::from_bool(true), tiny::DType::Bool).pad(pads);
      acc = T::where(inside, piece, acc);
    }
    at += len;
  }
  if (!acc.defined()) acc = T::full(shape, tiny::Scalar::from_int(0), to_engine(dt));
  return acc;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  TinyOp op("cat");
  std::vector<at::Tensor> inputs;
  c10::ScalarType dt = at::native::result_type(tensors);
  T v = cat_value(tensors, dim, dt, inputs);
  return assign_out(out, v, dt, inputs);
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  TinyOp op("cat");
  std::vector<at::Tensor> inputs;
  c10::ScalarType dt = at::native::result_type(tensors);
  return make_result(cat_value(tensors, dim, dt, inputs), dt);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
}

}  // namespace torch_tiny
