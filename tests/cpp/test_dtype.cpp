// dtypes: their facts, the 16-bit float conversions (against an independent
// nearest-value oracle and known bit patterns), casts between every pair
// (kernel, constant folding and C++ semantics must agree), and bitcasts.
//
// Cast semantics (PyTorch's CPU results, which are C++ static_cast where C++
// defines it):
// - to bool: x != 0 (NaN is true).
// - int -> int: wraps modulo 2^bits (static_cast).
// - float -> int: truncates toward zero; exact for every value in range of the
//   target. Outside it the engine's choice is: NaN -> 0, otherwise saturate to
//   int64 and wrap to the target (so 300.5 -> uint8 44, like PyTorch's uint8
//   cast through int64; -1.5 -> uint8 255).
// - int -> float16/bfloat16 and float64 -> float16/bfloat16 go through float32
//   (two roundings), as c10::Half / c10::BFloat16 construct from float.
// - int -> float32 rounds once (static_cast<float>(int64)).
#include <algorithm>
#include <map>
#include <random>

#include "test_helpers.h"

using namespace tiny;
using namespace tiny::test;

namespace {

// ---- an element of any dtype, kept exactly

struct Elem {
  bool is_int = true;
  int64_t i = 0;
  double f = 0;
};

Elem read_elem(const uint8_t* p, DType dt, size_t k) {
  Elem e;
  switch (dt) {
    case DType::Bool: e.i = p[k] != 0; break;
    case DType::UInt8: e.i = p[k]; break;
    case DType::Int8: e.i = reinterpret_cast<const int8_t*>(p)[k]; break;
    case DType::Int16: e.i = reinterpret_cast<const int16_t*>(p)[k]; break;
    case DType::Int32: e.i = reinterpret_cast<const int32_t*>(p)[k]; break;
    case DType::Int64: e.i = reinterpret_cast<const int64_t*>(p)[k]; break;
    default: e.is_int = false; e.f = load_as_double(p, dt, k); break;
  }
  return e;
}

void write_elem(uint8_t* p, DType dt, size_t k, const Elem& e) {
  if (e.is_int) {
    switch (dt) {
      case DType::Bool: p[k] = e.i != 0; return;
      case DType::UInt8: p[k] = uint8_t(e.i); return;
      case DType::Int8: reinterpret_cast<int8_t*>(p)[k] = int8_t(e.i); return;
      case DType::Int16: reinterpret_cast<int16_t*>(p)[k] = int16_t(e.i); return;
      case DType::Int32: reinterpret_cast<int32_t*>(p)[k] = int32_t(e.i); return;
      case DType::Int64: reinterpret_cast<int64_t*>(p)[k] = e.i; return;
      default: break;
    }
  }
  store_double(p, dt, k, e.f);
}

// The reference cast (see the header comment).
Elem ref_cast(const Elem& x, DType to) {
  Elem r;
  if (to == DType::Bool) {
    r.i = x.is_int ? x.i != 0 : x.f != 0;  // NaN != 0 is true
    return r;
  }
  if (is_int(to)) {
    int64_t v;
    if (x.is_int) {
      v = x.i;
    } else if (std::isnan(x.f)) {
      v = 0;
    } else if (x.f >= 9223372036854775808.0) {
      v = std::numeric_limits<int64_t>::max();
    } else if (x.f <= -9223372036854775808.0) {
      v = std::numeric_limits<int64_t>::min();
    } else {
      v = int64_t(x.f);
    }
    switch (to) {
      case DType::UInt8: r.i = uint8_t(v); break;
      case DType::Int8: r.i = int8_t(v); break;
      case DType::Int16: r.i = int16_t(v); break;
      case DType::Int32: r.i = int32_t(v); break;
      default: r.i = v; break;
    }
    return r;
  }
  r.is_int = false;
  if (to == DType::Float64) {
    r.f = x.is_int ? double(x.i) : x.f;
    return r;
  }
  float f = x.is_int ? static_cast<float>(x.i) : static_cast<float>(x.f);
  if (to == DType::Float32) r.f = f;
  if (to == DType::Float16) r.f = half_bits_to_float(float_to_half_bits(f));
  if (to == DType::BFloat16) r.f = bfloat16_bits_to_float(float_to_bfloat16_bits(f));
  return r;
}

bool same_elem(const Elem& a, const Elem& b) {
  if (a.is_int != b.is_int) return false;
  if (a.is_int) return a.i == b.i;
  if (std::isnan(a.f) || std::isnan(b.f)) return std::isnan(a.f) && std::isnan(b.f);
  return a.f == b.f && std::signbit(a.f) == std::signbit(b.f);
}

std::string elem_str(const Elem& e) {
  return e.is_int ? std::to_string(e.i) : std::to_string(e.f) + (std::signbit(e.f) ? "(neg)" : "");
}

// Interesting source values of every dtype, as raw bytes.
std::vector<uint8_t> cast_inputs(DType dt, size_t* n) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Elem> v;
  auto I = [&](int64_t x) { Elem e; e.i = x; v.push_back(e); };
  auto F = [&](double x) { Elem e; e.is_int = false; e.f = x; v.push_back(e); };
  switch (dt) {
    case DType::Bool: for (int64_t x : {0, 1, 1, 0}) I(x); break;
    case DType::UInt8: for (int64_t x : {0, 1, 2, 127, 128, 200, 255}) I(x); break;
    case DType::Int8: for (int64_t x : {-128, -127, -1, 0, 1, 2, 127}) I(x); break;
    case DType::Int16: for (int64_t x : {-32768, -129, -128, -1, 0, 1, 127, 128, 255, 256, 2049, 32767}) I(x); break;
    case DType::Int32:
      for (int64_t x : {int64_t(INT32_MIN), int64_t(-65537), int64_t(-32769), int64_t(-257), int64_t(-1), int64_t(0),
                        int64_t(1), int64_t(255), int64_t(256), int64_t(65535), int64_t(65519), int64_t(65520),
                        int64_t(16777217), int64_t(16777219), int64_t(INT32_MAX)})
        I(x);
      break;
    case DType::Int64:
      for (int64_t x : {INT64_MIN, -(int64_t(1) << 53) - 1, -(int64_t(1) << 31) - 1, int64_t(-1), int64_t(0),
                        int64_t(1), int64_t(1) << 31, (int64_t(1) << 53) + 1,
                        (int64_t(1) << 60) + (int64_t(1) << 36) + 1,  // int64 -> double -> float would round twice
                        int64_t(4294967296LL + 255), INT64_MAX})
        I(x);
      break;
    case DType::Float16:
      for (double x : {0.0, -0.0, 1.0, -1.0, 0.5, 1.5, -2.5, 65504.0, -65504.0, 5.9604644775390625e-08, inf, -inf, nan,
                       100.75, 255.5, 256.0, -129.875, 127.9375})
        F(x);
      break;
    case DType::BFloat16:
      for (double x : {0.0, -0.0, 1.0, -1.5, 3.3895313892515355e+38, 9.183549615799121e-41, inf, -inf, nan, 1e10,
                       -1e10, 255.0, 65536.0, 2147483648.0})
        F(x);
      break;
    case DType::Float32:
    case DType::Float64:
      for (double x : {0.0, -0.0, 0.3, -0.7, 1.5, 2.5, -2.5, 127.9, 128.5, 255.9, 256.1, 300.5, -1.5, -128.9, -129.5,
                       65504.0, 65519.0, 65520.0, 1e10, -1e10, 3e9, 2147483647.0, 2147483648.0, -2147483648.0,
                       -2147483649.0, 9223372036854775808.0, -9223372036854775808.0, 1e20, -1e20,
                       1.1754943508222875e-38, 1.401298464324817e-45, 1.00048828125 /* 1+2^-11: half tie */,
                       1.00146484375 /* 1+3*2^-11 */, 1.00390625 /* 1+2^-8: bfloat16 tie */, 6.103515625e-05,
                       2.98023223876953125e-08 /* 2^-25: half tie to 0 */, 3.4028234663852886e+38, inf, -inf, nan})
        F(x);
      if (dt == DType::Float64)
        for (double x : {1e300, -1e300, 4.9406564584124654e-324, 1e-320, 9007199254740993.0 /* 2^53+1 */, 0.1,
                         1.0000000596046448 /* 1+2^-24: float tie */, 1.0000000596046450, 3.4028235677973366e+38,
                         65519.99999999})
          F(x);
      break;
  }
  std::vector<uint8_t> bytes(v.size() * itemsize(dt));
  for (size_t k = 0; k < v.size(); k++) write_elem(bytes.data(), dt, k, v[k]);
  *n = v.size();
  return bytes;
}

Scalar scalar_of(const Elem& e, DType dt) {
  if (dt == DType::Bool) return Scalar::from_bool(e.i != 0);
  return e.is_int ? Scalar::from_int(e.i) : Scalar::from_double(e.f);
}

Elem elem_of(const Scalar& s) {
  Elem e;
  if (s.kind == Scalar::F) {
    e.is_int = false;
    e.f = s.f;
  } else {
    e.i = s.i;
  }
  return e;
}

// ---- an independent oracle for rounding to a 16-bit float: the nearest
// representable value, ties to the even bit pattern.

struct Nearest16 {
  std::vector<std::pair<double, uint16_t>> finite;  // sorted positive finite values
  double max_plus_half_ulp;                        // values >= this round to inf
  Nearest16(float (*to_float)(uint16_t), uint16_t max_finite, uint16_t before_max) {
    for (uint32_t h = 0; h <= max_finite; h++) finite.push_back({double(to_float(uint16_t(h))), uint16_t(h)});
    double mx = to_float(max_finite), prev = to_float(before_max);
    max_plus_half_ulp = mx + (mx - prev) / 2;
  }
  uint16_t round(float f) const {
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    double a = std::fabs(double(f));
    if (a >= max_plus_half_ulp) {
      if (a == max_plus_half_ulp && !(finite.back().second & 1)) return uint16_t(sign | finite.back().second);
      return uint16_t(sign | (finite.back().second + 1));  // infinity follows max finite
    }
    auto it = std::lower_bound(finite.begin(), finite.end(), std::make_pair(a, uint16_t(0)));
    if (it == finite.end()) return uint16_t(sign | finite.back().second);  // above max, below the inf threshold
    if (it != finite.end() && it->first == a) return uint16_t(sign | it->second);
    auto hi = *it, lo = *(it - 1);
    double dl = a - lo.first, dh = hi.first - a;
    uint16_t pick = dl < dh ? lo.second : dh < dl ? hi.second : ((lo.second & 1) ? hi.second : lo.second);
    return uint16_t(sign | pick);
  }
};

const Nearest16& half_oracle() {
  static Nearest16 o(half_bits_to_float, 0x7bff, 0x7bfe);
  return o;
}
const Nearest16& bf16_oracle() {
  static Nearest16 o(bfloat16_bits_to_float, 0x7f7f, 0x7f7e);
  return o;
}

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Floats that probe every rounding decision: each 16-bit value's neighborhood
// (exact, just below/above the midpoints) plus random bit patterns.
std::vector<float> rounding_probes(bool bf16) {
  std::vector<float> out;
  std::mt19937 rng(11);
  for (uint32_t h = 0; h < 0x8000; h++) {
    float v = bf16 ? bfloat16_bits_to_float(uint16_t(h)) : half_bits_to_float(uint16_t(h));
    if (std::isnan(v) || std::isinf(v)) continue;
    float next = bf16 ? bfloat16_bits_to_float(uint16_t(h + 1)) : half_bits_to_float(uint16_t(h + 1));
    float mid = float((double(v) + double(next)) / 2);  // exact in float for both formats
    for (float x : {v, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  std::uniform_int_distribution<uint32_t> bits;
  for (int k = 0; k < 200000; k++) {
    float f = bits_to_float(bits(rng));
    if (!std::isnan(f)) out.push_back(f);
  }
  return out;
}

}  // namespace

// ---- facts

TEST(DType, Facts) {
  struct Row { DType t; size_t size; const char* name; bool f, i, s; DType compute; };
  std::vector<Row> rows = {
      {DType::Bool, 1, "bool", false, false, false, DType::Bool},
      {DType::UInt8, 1, "uint8", false, true, false, DType::UInt8},
      {DType::Int8, 1, "int8", false, true, true, DType::Int8},
      {DType::Int16, 2, "int16", false, true, true, DType::Int16},
      {DType::Int32, 4, "int32", false, true, true, DType::Int32},
      {DType::Int64, 8, "int64", false, true, true, DType::Int64},
      {DType::Float16, 2, "float16", true, false, true, DType::Float32},
      {DType::BFloat16, 2, "bfloat16", true, false, true, DType::Float32},
      {DType::Float32, 4, "float32", true, false, true, DType::Float32},
      {DType::Float64, 8, "float64", true, false, true, DType::Float64},
  };
  ASSERT_EQ(int(rows.size()), kNumDTypes);
  for (auto& r : rows) {
    EXPECT_EQ(itemsize(r.t), r.size) << r.name;
    EXPECT_STREQ(dtype_name(r.t), r.name);
    EXPECT_EQ(is_float(r.t), r.f) << r.name;
    EXPECT_EQ(is_int(r.t), r.i) << r.name;
    EXPECT_EQ(is_signed(r.t), r.s) << r.name;
    EXPECT_EQ(compute_dtype(r.t), r.compute) << r.name;
  }
}

// ---- 16-bit floats

TEST(DType, HalfKnownBitPatterns) {
  std::vector<std::pair<float, uint16_t>> cases = {
      {0.f, 0x0000}, {-0.f, 0x8000}, {1.f, 0x3c00}, {-2.f, 0xc000}, {0.5f, 0x3800}, {65504.f, 0x7bff},
      {65519.f, 0x7bff}, {65520.f, 0x7c00} /* halfway to the next binade: rounds to inf */,
      {1e6f, 0x7c00}, {-1e6f, 0xfc00}, {5.9604644775390625e-08f, 0x0001} /* 2^-24, smallest subnormal */,
      {2.98023223876953125e-08f, 0x0000} /* 2^-25: tie, even is 0 */, {4.4703483581542969e-08f, 0x0001},
      {6.103515625e-05f, 0x0400} /* smallest normal */, {6.097555160522461e-05f, 0x03ff} /* largest subnormal */,
      {1.00048828125f, 0x3c00} /* 1 + 2^-11: tie to even */, {1.00146484375f, 0x3c02} /* 1 + 3*2^-11: tie up */,
      {0.1f, 0x2e66}, {3.14159265f, 0x4248}, {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00}};
  for (auto [f, bits] : cases) {
    EXPECT_EQ(float_to_half_bits(f), bits) << f;
    if ((bits & 0x7c00) != 0x7c00 || !(bits & 0x3ff)) {
      EXPECT_EQ(float_to_half_bits(half_bits_to_float(bits)), bits);
    }
  }
  EXPECT_EQ(half_bits_to_float(0x3c00), 1.f);
  EXPECT_EQ(half_bits_to_float(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(half_bits_to_float(0x7bff), 65504.f);
  EXPECT_TRUE(std::isinf(half_bits_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7c01)));
  // NaN stays NaN, keeps its sign, becomes quiet
  uint16_t qn = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(qn & 0x7c00, 0x7c00);
  EXPECT_NE(qn & 0x3ff, 0);
  EXPECT_EQ(float_to_half_bits(-std::numeric_limits<float>::quiet_NaN()) & 0x8000, 0x8000);
}

TEST(DType, BFloat16KnownBitPatterns) {
  std::vector<std::pair<float, uint16_t>> cases = {
      {0.f, 0x0000}, {-0.f, 0x8000}, {1.f, 0x3f80}, {-2.f, 0xc000}, {3.14159265f, 0x4049},
      {1.00390625f, 0x3f80} /* 1 + 2^-8: tie to even */, {1.01171875f, 0x3f82} /* 1 + 3*2^-8: tie up */,
      {std::nextafter(1.00390625f, 2.f), 0x3f81} /* just above the tie */, {3.3895313892515355e+38f, 0x7f7f},
      {3.4028234663852886e+38f, 0x7f80} /* FLT_MAX rounds to inf */, {9.183549615799121e-41f, 0x0001},
      {std::numeric_limits<float>::infinity(), 0x7f80}, {-std::numeric_limits<float>::infinity(), 0xff80}};
  for (auto [f, bits] : cases) {
    EXPECT_EQ(float_to_bfloat16_bits(f), bits) << f;
    EXPECT_EQ(float_to_bfloat16_bits(bfloat16_bits_to_float(bits)), bits);
  }
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::quiet_NaN()), 0x7fc0);  // as c10::BFloat16
}

TEST(DType, SixteenBitRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t b = uint16_t(h);
    float hf = half_bits_to_float(b);
    if (std::isnan(hf)) {
      EXPECT_EQ((h & 0x7c00), 0x7c00u);
      EXPECT_EQ(float_to_half_bits(hf), uint16_t(b | 0x200)) << std::hex << h;  // quieted, payload kept
    } else {
      EXPECT_EQ(float_to_half_bits(hf), b) << std::hex << h;
    }
    float bf = bfloat16_bits_to_float(b);
    if (!std::isnan(bf)) {
      EXPECT_EQ(float_to_bfloat16_bits(bf), b) << std::hex << h;
    }
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  const Nearest16& o = half_oracle();
  int bad = 0;
  for (float f : rounding_probes(false)) {
    uint16_t got = float_to_half_bits(f), want = o.round(f);
    if (got != want && bad++ < 10) ADD_FAILURE() << f << ": got 0x" << std::hex << got << " want 0x" << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(DType, BFloat16RoundsToNearestEven) {
  const Nearest16& o = bf16_oracle();
  int bad = 0;
  for (float f : rounding_probes(true)) {
    uint16_t got = float_to_bfloat16_bits(f), want = o.round(f);
    if (got != want && bad++ < 10) ADD_FAILURE() << f << ": got 0x" << std::hex << got << " want 0x" << want;
  }
  EXPECT_EQ(bad, 0);
}

// The kernels' float32 <-> 16-bit conversions agree with dtype.cpp bit for bit.
TEST(DType, KernelSixteenBitConversionsMatchHost) {
  for (bool bf16 : {false, true}) {
    DType dt = bf16 ? DType::BFloat16 : DType::Float16;
    std::vector<float> probes = rounding_probes(bf16);
    probes.push_back(std::numeric_limits<float>::infinity());
    probes.push_back(-std::numeric_limits<float>::infinity());
    auto down = to_vec<uint16_t>(from(probes, {int64_t(probes.size())}).cast(dt));
    int bad = 0;
    for (size_t k = 0; k < probes.size(); k++) {
      uint16_t want = bf16 ? float_to_bfloat16_bits(probes[k]) : float_to_half_bits(probes[k]);
      if (down[k] != want && bad++ < 10)
        ADD_FAILURE() << dtype_name(dt) << " " << probes[k] << ": kernel 0x" << std::hex << down[k] << " host 0x" << want;
    }
    EXPECT_EQ(bad, 0);
    // every bit pattern up to float32 and back
    std::vector<uint16_t> all(0x10000);
    for (uint32_t h = 0; h < 0x10000; h++) all[h] = uint16_t(h);
    Tensor t = from_as(all, {0x10000}, dt);
    auto up = to_vec<float>(t.cast(DType::Float32));
    auto back = to_vec<uint16_t>(t.cast(DType::Float32).cast(dt));
    for (uint32_t h = 0; h < 0x10000; h++) {
      float want = bf16 ? bfloat16_bits_to_float(uint16_t(h)) : half_bits_to_float(uint16_t(h));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(up[h])) << std::hex << h;
        continue;
      }
      EXPECT_EQ(std::memcmp(&up[h], &want, 4), 0) << dtype_name(dt) << std::hex << " 0x" << h;
      EXPECT_EQ(back[h], h) << dtype_name(dt) << std::hex << " 0x" << h;
    }
  }
}

// ---- casts between every pair

TEST(DType, CastsBetweenAllPairs) {
  for (DType from_dt : all_dtypes()) {
    size_t n = 0;
    std::vector<uint8_t> src = cast_inputs(from_dt, &n);
    Tensor t = Tensor::from_host(src.data(), {int64_t(n)}, from_dt);
    std::vector<Tensor> outs;
    for (DType to : all_dtypes()) outs.push_back(t.cast(to));
    Tensor::realize_all(outs);
    for (size_t j = 0; j < outs.size(); j++) {
      DType to = all_dtypes()[j];
      std::vector<uint8_t> got = to_bytes(outs[j]);
      for (size_t k = 0; k < n; k++) {
        Elem x = read_elem(src.data(), from_dt, k);
        Elem want = ref_cast(x, to);
        Elem g = read_elem(got.data(), to, k);
        EXPECT_TRUE(same_elem(g, want)) << dtype_name(from_dt) << " " << elem_str(x) << " -> " << dtype_name(to)
                                        << ": kernel " << elem_str(g) << ", want " << elem_str(want);
        // constant folding casts the same way
        Elem folded = elem_of(scalar_of(x, from_dt).cast(to));
        EXPECT_TRUE(same_elem(folded, want)) << dtype_name(from_dt) << " " << elem_str(x) << " -> " << dtype_name(to)
                                             << ": folded " << elem_str(folded) << ", want " << elem_str(want);
      }
    }
  }
}

// A constant node evaluated by a kernel holds the value Scalar::cast gives.
TEST(DType, ConstantsInKernels) {
  for (DType dt : all_dtypes()) {
    size_t n = 0;
    std::vector<uint8_t> src = cast_inputs(dt, &n);
    // assemble the constants into one tensor: each padded into its slot, summed
    Tensor acc;
    for (size_t k = 0; k < n; k++) {
      Elem x = read_elem(src.data(), dt, k);
      Tensor c = Tensor::full({1}, scalar_of(x, dt), dt).pad({{int64_t(k), int64_t(n - k - 1)}});
      acc = acc.defined() ? acc.binary(Op::Add, c) : c;
    }
    // adding +0 turns -0 into +0 and that is fine: compare by value here
    std::vector<uint8_t> got = to_bytes(acc);
    for (size_t k = 0; k < n; k++) {
      Elem x = read_elem(src.data(), dt, k), g = read_elem(got.data(), dt, k);
      if (!x.is_int && x.f == 0) continue;
      EXPECT_TRUE(same_elem(g, x)) << dtype_name(dt) << ": " << elem_str(g) << " want " << elem_str(x);
    }
  }
}

TEST(DType, ScalarBasics) {
  EXPECT_EQ(Scalar::from_double(std::nan("")).to_int(), 0);
  EXPECT_EQ(Scalar::from_double(1e30).to_int(), INT64_MAX);
  EXPECT_EQ(Scalar::from_double(-1e30).to_int(), INT64_MIN);
  EXPECT_EQ(Scalar::from_double(-2.7).to_int(), -2);
  EXPECT_EQ(Scalar::from_int(5).to_double(), 5.0);
  EXPECT_TRUE(Scalar::from_double(0.0) == Scalar::from_double(0.0));
  EXPECT_FALSE(Scalar::from_double(0.0) == Scalar::from_double(-0.0));  // bitwise: distinct constants
  EXPECT_TRUE(Scalar::from_double(std::nan("")) == Scalar::from_double(std::nan("")));
  EXPECT_FALSE(Scalar::from_int(1) == Scalar::from_bool(true));
  EXPECT_EQ(Scalar::from_bool(true).str(), "true");
  EXPECT_EQ(Scalar::from_int(-3).str(), "-3");
  EXPECT_EQ(Scalar::from_int(300).cast(DType::UInt8).i, 44);
  EXPECT_EQ(Scalar::from_int(-1).cast(DType::UInt8).i, 255);
  EXPECT_EQ(Scalar::from_double(0.1).cast(DType::Float32).f, double(0.1f));
  EXPECT_EQ(Scalar::from_int(7).cast(DType::Bool).kind, Scalar::B);
  EXPECT_EQ(Scalar::from_int(7).cast(DType::Float64).kind, Scalar::F);
}

// ---- bitcasts

TEST(DType, BitcastSameSize) {
  // NaN payloads, signaling NaNs, negative NaNs and denormals survive untouched.
  std::vector<uint16_t> h = {0x0000, 0x8000, 0x3c00, 0x7c01, 0xfd00, 0x7e00, 0xffff, 0x0001, 0x7fc1, 0xff81, 0x1234};
  std::vector<uint32_t> w = {0, 0x80000000u, 0x3f800000u, 0x7f800001u, 0xffc00001u, 0x00000001u, 0xdeadbeefu};
  std::vector<uint64_t> q = {0, 0x8000000000000000ull, 0x7ff0000000000001ull, 0xfff8000000000123ull, 1, 0x0123456789abcdefull};
  struct Case { DType from, to; };
  for (auto c : std::vector<Case>{{DType::Int16, DType::Float16}, {DType::Int16, DType::BFloat16},
                                  {DType::Float16, DType::Int16}, {DType::BFloat16, DType::Int16},
                                  {DType::Float16, DType::BFloat16}, {DType::BFloat16, DType::Float16}}) {
    Tensor t = from_as(h, {int64_t(h.size())}, c.from);
    EXPECT_EQ(to_vec<uint16_t>(t.bitcast(c.to)), h) << dtype_name(c.from) << " -> " << dtype_name(c.to);
    // and through a view (transpose of a 1-row matrix) on the way
    Tensor v = t.reshape({1, int64_t(h.size())}).permute({1, 0}).bitcast(c.to);
    EXPECT_EQ(to_vec<uint16_t>(v), h) << dtype_name(c.from) << " -> " << dtype_name(c.to) << " (view)";
  }
  for (auto c : std::vector<Case>{{DType::Int32, DType::Float32}, {DType::Float32, DType::Int32}}) {
    Tensor t = from_as(w, {int64_t(w.size())}, c.from);
    EXPECT_EQ(to_vec<uint32_t>(t.bitcast(c.to)), w) << dtype_name(c.from) << " -> " << dtype_name(c.to);
  }
  for (auto c : std::vector<Case>{{DType::Int64, DType::Float64}, {DType::Float64, DType::Int64}}) {
    Tensor t = from_as(q, {int64_t(q.size())}, c.from);
    EXPECT_EQ(to_vec<uint64_t>(t.bitcast(c.to)), q) << dtype_name(c.from) << " -> " << dtype_name(c.to);
  }
  std::vector<uint8_t> b = {0, 1, 127, 128, 255};
  EXPECT_EQ(to_vec<uint8_t>(from_as(b, {5}, DType::UInt8).bitcast(DType::Int8)), b);
  std::vector<uint8_t> bools = {0, 1, 1, 0};
  EXPECT_EQ(to_vec<uint8_t>(from_as(bools, {4}, DType::UInt8).bitcast(DType::Bool)), bools);
  EXPECT_EQ(to_vec<uint8_t>(from_as(bools, {4}, DType::Bool).bitcast(DType::UInt8)), bools);
}

TEST(DType, BitcastComputedValue) {
  // The bits of a computed value: 1.0f + x
  std::vector<float> x = {0.f, 1.f, -3.f, 0.5f};
  Tensor one = Tensor::full({4}, Scalar::from_double(1.0), DType::Float32);
  auto bits = to_vec<uint32_t>(from(x, {4}).binary(Op::Add, one).bitcast(DType::Int32));
  for (size_t k = 0; k < x.size(); k++) {
    float s = x[k] + 1.f;
    uint32_t want;
    std::memcpy(&want, &s, 4);
    EXPECT_EQ(bits[k], want);
  }
  // ... and a computation on the reinterpreted bits: flip the sign bit
  Tensor flipped = from(x, {4}).bitcast(DType::Int32).binary(Op::Xor, Tensor::full({4}, Scalar::from_int(INT32_MIN), DType::Int32)).bitcast(DType::Float32);
  auto f = to_vec<float>(flipped);
  for (size_t k = 0; k < x.size(); k++) EXPECT_EQ(f[k], -x[k]);
}

TEST(DType, BitcastBetweenItemsizes) {
  std::vector<float> x = {1.f, -2.5f, std::numeric_limits<float>::quiet_NaN(), 1e-45f};
  auto bytes = to_vec<uint8_t>(from(x, {4}).bitcast(DType::UInt8));
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(std::memcmp(bytes.data(), x.data(), 16), 0);
  // int64 -> int32 halves (little endian), and a computed int64 source
  std::vector<int64_t> q = {0x0000000100000002ll, -1, 0x7fffffff80000000ll};
  auto halves = to_vec<int32_t>(from(q, {3}).bitcast(DType::Int32));
  ASSERT_EQ(halves.size(), 6u);
  EXPECT_EQ(std::memcmp(halves.data(), q.data(), 24), 0);
  Tensor plus = from(q, {3}).binary(Op::Add, Tensor::full({3}, Scalar::from_int(1), DType::Int64));
  auto h2 = to_vec<int32_t>(plus.bitcast(DType::Int32));
  std::vector<int64_t> q1 = {q[0] + 1, q[1] + 1, q[2] + 1};
  EXPECT_EQ(std::memcmp(h2.data(), q1.data(), 24), 0);
  // bytes -> float64, then computed on
  std::vector<double> d = {1.5, -0.25};
  std::vector<uint8_t> db(16);
  std::memcpy(db.data(), d.data(), 16);
  Tensor as_f64 = from(db, {16}).bitcast(DType::Float64);
  EXPECT_EQ(as_f64.shape(), (Shape{2}));
  auto twice = to_vec<double>(as_f64.binary(Op::Mul, Tensor::full({2}, Scalar::from_double(2), DType::Float64)));
  EXPECT_EQ(twice, (std::vector<double>{3.0, -0.5}));
  // 16-bit halves of a float32 view as bfloat16: the high half is the bfloat16 truncation
  std::vector<float> y = {1.f, 3.14159265f};
  auto hb = to_vec<uint16_t>(from(y, {2}).bitcast(DType::BFloat16));
  uint32_t b1;
  std::memcpy(&b1, &y[1], 4);
  EXPECT_EQ(hb[3], uint16_t(b1 >> 16));
  EXPECT_EQ(hb[1], 0x3f80);
}
