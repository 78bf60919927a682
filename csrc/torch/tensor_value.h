// The bridge between ATen tensors on "tiny" and engine values: reading a
// tensor is its storage cell's value seen through (sizes, strides, offset);
// writing gives the cell a new value.
#pragma once
#include <ATen/Tensor.h>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

tiny::DType to_engine(c10::ScalarType t);
c10::ScalarType to_aten(tiny::DType t);
bool is_supported(c10::ScalarType t);
tiny::Scalar to_engine(const c10::Scalar& s);
tiny::Shape to_shape(c10::IntArrayRef s);

// The lazy value of a tiny tensor (shape = sizes, dtype = its dtype).
tiny::Tensor read(const at::Tensor& t);
// Makes `t` hold `v` (same shape and dtype); every view of the storage sees it.
void write(const at::Tensor& t, const tiny::Tensor& v);
// Host tensors in, for copies.
tiny::Tensor from_cpu(const at::Tensor& cpu);
// A new tiny tensor (contiguous, on device 0) holding `v`.
at::Tensor wrap(const tiny::Tensor& v, c10::ScalarType dtype);
at::Tensor wrap(const tiny::Tensor& v);
// Copies `self` (tiny) into the CPU tensor `dst` (any strides/dtype, broadcast).
void copy_to_cpu(const at::Tensor& self, const at::Tensor& dst);
// Realizes every storage with pending work: launches it, and with synchronize waits for it.
void launch_pending();
void synchronize();

}  // namespace torch_tiny
