// Helpers shared by the engine tests: host data in, host data out.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "engine/runtime/counters.h"
#include "engine/tensor/tensor.h"

namespace tiny::test {

template <typename T>
DType dtype_of();
template <> inline DType dtype_of<float>() { return DType::Float32; }
template <> inline DType dtype_of<double>() { return DType::Float64; }
template <> inline DType dtype_of<int32_t>() { return DType::Int32; }
template <> inline DType dtype_of<int64_t>() { return DType::Int64; }
template <> inline DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> inline DType dtype_of<int8_t>() { return DType::Int8; }
template <> inline DType dtype_of<int16_t>() { return DType::Int16; }

template <typename T>
Tensor from(const std::vector<T>& v, const Shape& shape) {
  return Tensor::from_host(v.data(), shape, dtype_of<T>());
}

template <typename T>
std::vector<T> to_vec(const Tensor& t) {
  std::vector<T> out(size_t(t.numel()));
  t.contiguous().copy_to_host(out.data());
  return out;
}

inline std::vector<float> iota_f(int64_t n, float start = 0, float step = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = start + step * float(i);
  return v;
}

// Kernels run while evaluating `fn`.
template <typename F>
int64_t kernels_run(F&& fn) {
  int64_t before = counters().kernels.load();
  fn();
  return counters().kernels.load() - before;
}

}  // namespace tiny::test
