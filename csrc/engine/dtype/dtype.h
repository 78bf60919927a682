// Element types the engine computes with, and the facts about them that the
// graph, the scheduler and the code generators need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace tiny {

class TextOut;

enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64
};
constexpr int kNumDTypes = 10;

size_t itemsize(DType t);
const char* dtype_name(DType t);
bool is_float(DType t);
bool is_int(DType t);  // integer, not bool
bool is_signed(DType t);
// The type arithmetic happens in: float16/bfloat16 compute in float32.
DType compute_dtype(DType t);

// A scalar carried by a CONST node, stored as the widest type of its kind.
struct Scalar {
  enum Kind : uint8_t { F, I, B } kind = I;
  double f = 0;
  int64_t i = 0;
  static Scalar from_double(double v) { Scalar s; s.kind = F; s.f = v; return s; }
  static Scalar from_int(int64_t v) { Scalar s; s.kind = I; s.i = v; return s; }
  static Scalar from_bool(bool v) { Scalar s; s.kind = B; s.i = v; return s; }
  double to_double() const { return kind == F ? f : double(i); }
  int64_t to_int() const;
  bool operator==(const Scalar& o) const;
  // The scalar converted the way a cast to `t` converts it.
  Scalar cast(DType t) const;
  std::string str() const;
  void print(std::ostream& os) const;  // str() into a stream (no stream of its own)
  void print(TextOut& os) const;  // the same text (graph keys)

 private:
  template <class Out>
  void print_to(Out& os) const;
};

// Bit-exact conversions for the 16-bit float formats (round to nearest even).
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bfloat16_bits(float f);
float bfloat16_bits_to_float(uint16_t b);

}  // namespace tiny
