// Helpers shared by the engine tests: host data in, host data out, reference
// conversions, an interpreter for index expressions.
#pragma once
#include <gtest/gtest.h>
#include <pthread.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "engine/runtime/counters.h"
#include "engine/shape/symbolic.h"
#include "engine/tensor/tensor.h"

namespace tiny::test {

template <typename T>
DType dtype_of();
template <> inline DType dtype_of<bool>() { return DType::Bool; }
template <> inline DType dtype_of<float>() { return DType::Float32; }
template <> inline DType dtype_of<double>() { return DType::Float64; }
template <> inline DType dtype_of<int32_t>() { return DType::Int32; }
template <> inline DType dtype_of<int64_t>() { return DType::Int64; }
template <> inline DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> inline DType dtype_of<int8_t>() { return DType::Int8; }
template <> inline DType dtype_of<int16_t>() { return DType::Int16; }

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::Bool,  DType::UInt8,   DType::Int8,     DType::Int16,   DType::Int32,
                                       DType::Int64, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  return v;
}

template <typename T>
Tensor from(const std::vector<T>& v, const Shape& shape) {
  return Tensor::from_host(v.data(), shape, dtype_of<T>());
}
// Host bytes of elements of `dtype` (T only fixes the element size).
template <typename T>
Tensor from_as(const std::vector<T>& v, const Shape& shape, DType dtype) {
  EXPECT_EQ(sizeof(T), itemsize(dtype));
  return Tensor::from_host(v.data(), shape, dtype);
}

template <typename T>
std::vector<T> to_vec(const Tensor& t) {
  EXPECT_EQ(sizeof(T), itemsize(t.dtype())) << dtype_name(t.dtype());
  std::vector<T> out(size_t(t.numel()));
  t.contiguous().copy_to_host(out.data());
  return out;
}

inline std::vector<float> iota_f(int64_t n, float start = 0, float step = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = start + step * float(i);
  return v;
}

// ---- values of any dtype as doubles (the reference side of a comparison)

inline float half_to_float(uint16_t h) { return half_bits_to_float(h); }
inline float bf16_to_float(uint16_t h) { return bfloat16_bits_to_float(h); }

// Element i of raw host bytes of `dt`, as a double.
inline double load_as_double(const void* p, DType dt, size_t i) {
  auto c = static_cast<const char*>(p);
  switch (dt) {
    case DType::Bool: return double(reinterpret_cast<const uint8_t*>(c)[i] != 0);
    case DType::UInt8: return double(reinterpret_cast<const uint8_t*>(c)[i]);
    case DType::Int8: return double(reinterpret_cast<const int8_t*>(c)[i]);
    case DType::Int16: return double(reinterpret_cast<const int16_t*>(c)[i]);
    case DType::Int32: return double(reinterpret_cast<const int32_t*>(c)[i]);
    case DType::Int64: return double(reinterpret_cast<const int64_t*>(c)[i]);
    case DType::Float16: return double(half_to_float(reinterpret_cast<const uint16_t*>(c)[i]));
    case DType::BFloat16: return double(bf16_to_float(reinterpret_cast<const uint16_t*>(c)[i]));
    case DType::Float32: return double(reinterpret_cast<const float*>(c)[i]);
    case DType::Float64: return reinterpret_cast<const double*>(c)[i];
  }
  return 0;
}

// Raw bytes of a realized tensor (row-major).
inline std::vector<uint8_t> to_bytes(const Tensor& t) {
  std::vector<uint8_t> out(size_t(t.numel()) * itemsize(t.dtype()));
  t.contiguous().copy_to_host(out.data());
  return out;
}

inline std::vector<double> to_doubles(const Tensor& t) {
  auto bytes = to_bytes(t);
  std::vector<double> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); i++) out[i] = load_as_double(bytes.data(), t.dtype(), i);
  return out;
}

// Stores `v` (representable in dt, or a float value to be rounded to nearest
// even for the float types) as element i of raw bytes of `dt`.
inline void store_double(void* p, DType dt, size_t i, double v) {
  auto c = static_cast<char*>(p);
  switch (dt) {
    case DType::Bool: reinterpret_cast<uint8_t*>(c)[i] = v != 0; break;
    case DType::UInt8: reinterpret_cast<uint8_t*>(c)[i] = uint8_t(int64_t(v)); break;
    case DType::Int8: reinterpret_cast<int8_t*>(c)[i] = int8_t(v); break;
    case DType::Int16: reinterpret_cast<int16_t*>(c)[i] = int16_t(v); break;
    case DType::Int32: reinterpret_cast<int32_t*>(c)[i] = int32_t(v); break;
    case DType::Int64: reinterpret_cast<int64_t*>(c)[i] = int64_t(v); break;
    case DType::Float16: reinterpret_cast<uint16_t*>(c)[i] = float_to_half_bits(float(v)); break;
    case DType::BFloat16: reinterpret_cast<uint16_t*>(c)[i] = float_to_bfloat16_bits(float(v)); break;
    case DType::Float32: reinterpret_cast<float*>(c)[i] = float(v); break;
    case DType::Float64: reinterpret_cast<double*>(c)[i] = v; break;
  }
}

inline Tensor from_doubles(const std::vector<double>& v, const Shape& shape, DType dt) {
  std::vector<uint8_t> bytes(v.size() * itemsize(dt));
  for (size_t i = 0; i < v.size(); i++) store_double(bytes.data(), dt, i, v[i]);
  return Tensor::from_host(bytes.data(), shape, dt);
}

// ---- floating point comparisons

// Distance in units in the last place between two floats of the same type
// (0 for equal values and for two NaNs; max for NaN vs number).
template <typename F>
int64_t ulp_distance(F a, F b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<int64_t>::max();
  if (a == b) return 0;
  using I = std::conditional_t<sizeof(F) == 4, int32_t, int64_t>;
  I ia, ib;
  std::memcpy(&ia, &a, sizeof(F));
  std::memcpy(&ib, &b, sizeof(F));
  // map to a monotonic integer line
  auto lin = [](I x) -> int64_t { return x < 0 ? int64_t(std::numeric_limits<I>::min()) - int64_t(x) : int64_t(x); };
  int64_t d = lin(ia) - lin(ib);
  return d < 0 ? -d : d;
}

// Same value, NaN matching NaN, zeros of either sign equal.
// Runs `fn` on a thread with a 1 MiB stack (threads may get less than the main thread's 8):
// what recurses per level of a graph overflows it on a chain a few thousand nodes long.
inline void on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t(1) << 20), 0);
  pthread_t thread;
  auto run = [](void* f) -> void* {
    (*static_cast<const std::function<void()>*>(f))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, run, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

inline bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// ---- multi-index iteration

inline void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& fn) {
  int64_t n = numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f;
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = r % shape[d];
      r /= shape[d];
    }
    fn(idx);
  }
}

// ---- an interpreter for index expressions (the reference semantics of EOp)

inline int64_t floordiv_ref(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}
inline int64_t floormod_ref(int64_t a, int64_t b) { return a - floordiv_ref(a, b) * b; }

// Evaluates `e` with Var i = vars[i]. When `check_range`, every subexpression's
// value must lie in its declared [vmin, vmax] (fails the current test otherwise).
inline int64_t eval_expr(const Expr& e, const std::vector<int64_t>& vars, bool check_range = true) {
  int64_t r = 0;
  switch (e->op) {
    case EOp::Const: r = e->value; break;
    case EOp::Var: r = vars.at(size_t(e->value)); break;
    case EOp::Add:
      for (auto& s : e->src) r += eval_expr(s, vars, check_range);
      break;
    case EOp::Mul: r = eval_expr(e->src[0], vars, check_range) * e->value; break;
    case EOp::Div: r = floordiv_ref(eval_expr(e->src[0], vars, check_range), e->value); break;
    case EOp::Mod: r = floormod_ref(eval_expr(e->src[0], vars, check_range), e->value); break;
    case EOp::Lt: r = eval_expr(e->src[0], vars, check_range) < e->value; break;
    case EOp::And: r = eval_expr(e->src[0], vars, check_range) && eval_expr(e->src[1], vars, check_range); break;
    case EOp::Bounded: r = eval_expr(e->src[0], vars, check_range); break;  // in range where used
  }
  if (check_range) {
    EXPECT_TRUE(r >= e->vmin && r <= e->vmax)
        << "value " << r << " outside [" << e->vmin << ", " << e->vmax << "] for " << to_string(e);
  }
  return r;
}

// ---- counting what the engine did

// Kernels run while evaluating `fn`.
template <typename F>
int64_t kernels_run(F&& fn) {
  int64_t before = counters().kernels.load();
  fn();
  return counters().kernels.load() - before;
}

}  // namespace tiny::test
