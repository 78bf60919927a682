// ATen semantics for elementwise ops, shared by every op family: operands
// from tiny tensors or CPU scalars, type promotion, broadcasting, and the
// functional / in-place / out= result conventions.
#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

#include <functional>
#include <initializer_list>
#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

// `t` as an engine value of dtype `dt` broadcast to `shape`. CPU tensors are
// accepted only as 0-d scalars (wrapped numbers), as on other devices.
tiny::Tensor operand(const at::Tensor& t, c10::ScalarType dt, const tiny::Shape& shape);
// A scalar the user passed (a Python number, alpha, a fill value). Floating
// ones are launch parameters (tiny::Tensor::param): an optimizer step whose
// learning rate or bias correction changes reuses its schedule and programs.
// Integer ones stay constants (they feed index math and exactness checks).
tiny::Tensor scalar_operand(const c10::Scalar& s, c10::ScalarType dt, const tiny::Shape& shape);
tiny::Tensor broadcast_to(tiny::Tensor v, const tiny::Shape& shape);
// References, not a vector of tensors: copying an at::Tensor that has a Python object takes
// the GIL (TensorImpl::incref_pyobject), 5 % of dispatching an add.
tiny::Shape broadcast_shape(std::initializer_list<std::reference_wrapper<const at::Tensor>> ts);
bool is_float_type(c10::ScalarType t);
// Integers and bool compute in the default float type (for exp, div, ...).
c10::ScalarType float_type_for(c10::ScalarType t);

// Delivers a computed value: a new tensor, into `self` (in-place) or into `out`
// (resized as ATen does), with the cast checks ATen makes.
at::Tensor make_result(const tiny::Tensor& v, c10::ScalarType dtype);
at::Tensor& assign_inplace(at::Tensor& self, const tiny::Tensor& v, c10::ScalarType computed,
                           const std::vector<at::Tensor>& inputs);
at::Tensor& assign_out(at::Tensor& out, const tiny::Tensor& v, c10::ScalarType computed,
                       const std::vector<at::Tensor>& inputs);

}  // namespace torch_tiny
