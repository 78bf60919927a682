#include "engine/dtype/dtype.h"
#include "engine/dtype/text_out.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace tiny {

size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
    case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  static const char* names[] = {"bool", "uint8", "int8", "int16", "int32",
                                "int64", "float16", "bfloat16", "float32", "float64"};
  return names[static_cast<int>(t)];
}

bool is_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
bool is_int(DType t) { return !is_float(t) && t != DType::Bool; }
bool is_signed(DType t) { return is_float(t) || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64; }
DType compute_dtype(DType t) {
  return (t == DType::Float16 || t == DType::BFloat16) ? DType::Float32 : t;
}

int64_t Scalar::to_int() const {
  if (kind != F) return i;
  if (std::isnan(f)) return 0;
  if (f >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (f <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(f);
}

bool Scalar::operator==(const Scalar& o) const {
  if (kind != o.kind) return false;
  if (kind == F) {
    uint64_t a, b;
    std::memcpy(&a, &f, 8);
    std::memcpy(&b, &o.f, 8);
    return a == b;
  }
  return i == o.i;
}

Scalar Scalar::cast(DType t) const {
  // An integer converts to float32 in one rounding (int64 -> double -> float
  // could round twice); 16-bit floats construct from that float, as c10's do.
  float f32 = kind == F ? static_cast<float>(f) : static_cast<float>(i);
  switch (t) {
    case DType::Bool: return from_bool(kind == F ? f != 0 : i != 0);
    case DType::UInt8: return from_int(static_cast<uint8_t>(to_int()));
    case DType::Int8: return from_int(static_cast<int8_t>(to_int()));
    case DType::Int16: return from_int(static_cast<int16_t>(to_int()));
    case DType::Int32: return from_int(static_cast<int32_t>(to_int()));
    case DType::Int64: return from_int(to_int());
    case DType::Float16: return from_double(half_bits_to_float(float_to_half_bits(f32)));
    case DType::BFloat16: return from_double(bfloat16_bits_to_float(float_to_bfloat16_bits(f32)));
    case DType::Float32: return from_double(f32);
    case DType::Float64: return from_double(to_double());
  }
  return *this;
}

std::string Scalar::str() const {
  std::ostringstream os;
  print(os);
  return os.str();
}

template <class Out>
void Scalar::print_to(Out& os) const {
  // Every digit: kernel keys (the program cache) are built from this text.
  constexpr int kDigits = std::numeric_limits<double>::max_digits10;
  if (kind == F) {
    if constexpr (std::is_same_v<Out, TextOut>) {
      os.put(f, kDigits);
    } else {
      auto precision = os.precision(kDigits);
      os << f;
      os.precision(precision);
    }
  } else if (kind == B) {
    os << (i ? "true" : "false");
  } else {
    os << i;
  }
}
void Scalar::print(std::ostream& os) const { print_to(os); }
void Scalar::print(TextOut& os) const { print_to(os); }

uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  int32_t exp = int32_t((x >> 23) & 0xff);
  if (exp == 0xff) return uint16_t(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
  return uint16_t(half);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do { e++; mant <<= 1; } while (!(mant & 0x400u));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return uint16_t((x + rounding_bias) >> 16);
}

float bfloat16_bits_to_float(uint16_t b) {
  uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace tiny
