// Dtypes tiny stores but does not compute with: complex tensors (their storage
// holds pairs of the component type, as on the CPU) and unsigned 16/32/64-bit
// integers (the bits of the signed type). Copies, views and the few ops that
// only move data (complex, polar, hash_tensor's result) reach them through an
// engine view: the real view [..., 2] of a complex tensor, the signed view of
// an unsigned one, over the same storage. Arithmetic on them is not supported
// (read() of such a tensor raises).
#pragma once
#include <ATen/Tensor.h>

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

}  // namespace torch_tiny
