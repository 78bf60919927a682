// Dtypes tiny stores but does not compute with: complex tensors (their storage
// holds pairs of the component type, as on the CPU) and unsigned 16/32/64-bit
// integers (the bits of the signed type). Copies, views and the few ops that
// only move data (complex, polar, hash_tensor's result) reach them through an
// engine view: the real view [..., 2] of a complex tensor, the signed view of
// an unsigned one, over the same storage. Arithmetic on them is not supported
// (read() of such a tensor raises), except complex mul and sgn (ops_complex).
#pragma once
#include <ATen/Tensor.h>

#include <utility>
#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

bool is_storage_only(c10::ScalarType t);
// The same storage seen in a dtype the engine has (t itself if it is one).
at::Tensor engine_view(const at::Tensor& t);
// The values of the tiny tensor `self` converted to dst_dtype (storage-only
// on at least one side), shaped as engine_view of a tensor of self's sizes
// and dst_dtype.
tiny::Tensor convert_for_storage_only(const at::Tensor& self, c10::ScalarType dst_dtype);
// Interleaves two equally shaped values as [..., 2] (real, imaginary).
tiny::Tensor interleave(const tiny::Tensor& re, const tiny::Tensor& im);
// Writes a complex result into `out` (resized to `shape`, overlap-checked against
// `inputs`) through its real view: re and im interleaved.
at::Tensor& write_complex(at::Tensor& out, const tiny::Tensor& re, const tiny::Tensor& im, const tiny::Shape& shape,
                          const std::vector<at::Tensor>& inputs);
// A complex tensor without its lazy conjugate / negative bits (the same storage).
at::Tensor strip_math_bits(const at::Tensor& t);
// Real and imaginary parts of `t` (tiny, or a 0-d CPU scalar; real tensors have
// imaginary part 0) in `component`, broadcast to `shape`, conj / neg bits applied.
std::pair<tiny::Tensor, tiny::Tensor> complex_parts(const at::Tensor& t, tiny::DType component, const tiny::Shape& shape);

// The complex arithmetic tiny has (ops_complex.cpp), reached from mul / sgn when
// a result is complex: out is resized, then written through its real view.
at::Tensor& complex_mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out);
at::Tensor complex_mul(const at::Tensor& a, const at::Tensor& b);
at::Tensor& complex_sgn_out(const at::Tensor& self, at::Tensor& out);

}  // namespace torch_tiny
