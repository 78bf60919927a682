// The CUDA C renderer. It walks a kernel's expression trees the way the LLVM
// generator does (same memoization by node + index + validity, same order of
// operations) and prints one `const T vN = ...;` line per value.
#include "engine/codegen/cuda_renderer.h"

#include "engine/codegen/index_walk.h"
#include "engine/codegen/lowering.h"
#include "engine/codegen/register_tile.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace tiny {
namespace {

// Helpers every kernel can use. Conversions mirror engine/dtype/dtype.cpp bit
// for bit; integer helpers mirror the select chains in llvm_codegen.cpp.
const char* kPrelude = R"(#pragma nv_diag_suppress 177  // helpers a kernel does not use
#pragma nv_diag_suppress 186  // "x < 0" in templates instantiated for unsigned types
typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
// Neighbouring elements moved as one aligned access (ld/st.global.v4 for 32 bits).
template <class T, int N> struct alignas(N * sizeof(T)) tiny_vec { T v[N]; };
template <class T> using tiny_vec4 = tiny_vec<T, 4>;
#define TINY_INF_F __uint_as_float(0x7f800000u)

// ---- 16-bit floats (round to nearest even; NaN payloads as the CPU keeps them). The GPU
// converts with its cvt instructions (IEEE, subnormals kept) and picks a NaN's bits by a
// select: a branch per conversion kept the loads of a float16 matmul's staging loop from
// overlapping (4096^3 on tensor cores: 14.7 ms, 6x its TF32 twin).
#ifdef __CUDA_ARCH__
static __device__ __forceinline__ float tiny_half_to_float(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  const u32 nan = ((u32)(h & 0x8000u) << 16) | 0x7f800000u | ((u32)(h & 0x3ffu) << 13);
  return (h & 0x7fffu) > 0x7c00u ? __uint_as_float(nan) : f;
}
static __device__ __forceinline__ u16 tiny_float_to_half(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  const u32 x = __float_as_uint(f);
  const u16 nan = (u16)(((x >> 16) & 0x8000u) | 0x7e00u | ((x & 0x7fffffu) >> 13));
  return (x & 0x7fffffffu) > 0x7f800000u ? nan : h;
}
#else
static __device__ __forceinline__ float tiny_half_to_float(u16 h) {
  u32 sign = (u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do { e++; mant <<= 1; } while (!(mant & 0x400u));
      x = sign | ((u32)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return __uint_as_float(x);
}
static __device__ __forceinline__ u16 tiny_float_to_half(float f) {
  u32 x = __float_as_uint(f);
  u32 sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int exp = (int)((x >> 23) & 0xffu);
  if (exp == 0xff) return (u16)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = exp - 127 + 15;
  if (e >= 0x1f) return (u16)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (u16)sign;
    mant |= 0x800000u;
    u32 shift = (u32)(14 - e), half = mant >> shift, rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (u16)(sign | half);
  }
  u32 half = sign | ((u32)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
  return (u16)half;
}
#endif
static __device__ __forceinline__ float tiny_bf16_to_float(u16 b) { return __uint_as_float((u32)b << 16); }
static __device__ __forceinline__ u16 tiny_float_to_bf16(float f) {
  const u32 x = __float_as_uint(f);
  return f != f ? (u16)0x7fc0u : (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ float tiny_round_f16(float f) { return tiny_half_to_float(tiny_float_to_half(f)); }
static __device__ __forceinline__ float tiny_round_bf16(float f) { return tiny_bf16_to_float(tiny_float_to_bf16(f)); }

// ---- tensor cores: a warp's D += A * B (mma.sync: m16n8k16 for 16-bit factors, m16n8k8 for
// TF32), each lane holding its fragments as the PTX ISA lays them out; on the emulated device
// tiny_warp_mma plays the warp from the same fragments
#ifdef __CUDA_ARCH__
static __device__ __forceinline__ u32 tiny_pair(const u16* p) { return *(const u32*)p; }
static __device__ __forceinline__ u32 tiny_to_tf32(float f) { u32 r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r; }
#define TINY_MMA(name, shape, type)                                                                              \
  static __device__ __forceinline__ void name(float* d, const u32* a, const u32* b) {                            \
    asm volatile("mma.sync.aligned." shape ".row.col.f32." type "." type ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%0,%1,%2,%3};"                                                                       \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                            \
  }
TINY_MMA(tiny_mma_f16, "m16n8k16", "f16")
TINY_MMA(tiny_mma_bf16, "m16n8k16", "bf16")
TINY_MMA(tiny_mma_tf32, "m16n8k8", "tf32")
// ldmatrix: lane i gives the address of row i % 8 of 8x8 matrix i / 8 (16 bytes of 16-bit values,
// or 4 TF32 values); each lane gets 32 bits of every matrix: word i % 4 of row i / 4 (.trans: the
// 16-bit values at column i / 4 of rows 2 (i % 4) and 2 (i % 4) + 1), as the fragments lie
static __device__ __forceinline__ u32 tiny_smem(const void* p) {
  u64 a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return (u32)a;
}
#define TINY_LDSM(name, shape)                                                                           \
  static __device__ __forceinline__ void name##_x4(u32* d, const void* p) {                              \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" shape ".shared.b16 {%0,%1,%2,%3}, [%4];"               \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(tiny_smem(p)));                  \
  }                                                                                                      \
  static __device__ __forceinline__ void name##_x2(u32* d, const void* p) {                              \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2" shape ".shared.b16 {%0,%1}, [%2];"                     \
                 : "=r"(d[0]), "=r"(d[1]) : "r"(tiny_smem(p)));                                          \
  }
TINY_LDSM(tiny_ldsm, "")
TINY_LDSM(tiny_ldsm_trans, ".trans")
// cp.async: 16 bytes from global to shared memory without registers (zeros where !ok); a thread's
// copies form a group per commit, and wait_group(n) waits until at most n of its groups are pending
static __device__ __forceinline__ void tiny_cp_async16(void* to, const void* from, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(to)), "l"(from),
               "r"(ok ? 16 : 0) : "memory");
}
#define tiny_cp_async_commit() asm volatile("cp.async.commit_group;" ::: "memory")
#define tiny_cp_async_wait(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
#else
static inline u32 tiny_pair(const u16* p) { return (u32)p[0] | ((u32)p[1] << 16); }
// as cvt.rna: to nearest with ties away from zero, 10 mantissa bits kept; NaN and infinities stay
static inline u32 tiny_to_tf32(float f) {
  const u32 x = __float_as_uint(f);
  return (x & 0x7f800000u) == 0x7f800000u ? x : (x + 0x1000u) & 0xffffe000u;
}
template <float (*to_float)(u16)> static inline void tiny_mma_16(float* d, const u32* a, const u32* b) {
  float fa[8], fb[4];
  for (int i = 0; i < 8; i++) fa[i] = to_float((u16)(a[i / 2] >> (16 * (i % 2))));
  for (int i = 0; i < 4; i++) fb[i] = to_float((u16)(b[i / 2] >> (16 * (i % 2))));
  tiny_warp_mma(d, fa, fb, 16);
}
static inline void tiny_mma_f16(float* d, const u32* a, const u32* b) { tiny_mma_16<tiny_half_to_float>(d, a, b); }
static inline void tiny_mma_bf16(float* d, const u32* a, const u32* b) { tiny_mma_16<tiny_bf16_to_float>(d, a, b); }
static inline void tiny_mma_tf32(float* d, const u32* a, const u32* b) {
  const float fa[4] = {__uint_as_float(a[0]), __uint_as_float(a[1]), __uint_as_float(a[2]), __uint_as_float(a[3])};
  const float fb[2] = {__uint_as_float(b[0]), __uint_as_float(b[1])};
  tiny_warp_mma(d, fa, fb, 8);
}
static inline void tiny_ldsm_x4(u32* d, const void* p) { tiny_warp_ldmatrix(d, p, 4, false); }
static inline void tiny_ldsm_x2(u32* d, const void* p) { tiny_warp_ldmatrix(d, p, 2, false); }
static inline void tiny_ldsm_trans_x4(u32* d, const void* p) { tiny_warp_ldmatrix(d, p, 4, true); }
static inline void tiny_ldsm_trans_x2(u32* d, const void* p) { tiny_warp_ldmatrix(d, p, 2, true); }
// The emulated device lands a thread's copies only when it waits for their group, so that
// shared memory read before the wait holds what it held before the copy, as it may on a GPU.
struct tiny_async_copy {
  u32* to;
  u32 bits[4];
  unsigned group;
};
static thread_local tiny_async_copy tiny_async_pending[256][32];  // tensor-core blocks: 128 or 256 threads
static thread_local unsigned tiny_async_count[256], tiny_async_groups[256];
static inline void tiny_cp_async16(void* to, const void* from, bool ok) {
  const unsigned t = threadIdx.x;
  if (t >= 256 || tiny_async_count[t] == 32) __builtin_trap();  // more than the renderer's kernels issue
  tiny_async_copy& c = tiny_async_pending[t][tiny_async_count[t]++];
  c.to = (u32*)to;
  for (int i = 0; i < 4; i++) c.bits[i] = ok ? ((const u32*)from)[i] : 0u;
  c.group = tiny_async_groups[t];
}
static inline void tiny_cp_async_commit() { tiny_async_groups[threadIdx.x]++; }
// lands every copy but those of the newest `n` committed groups (and any not committed)
static inline void tiny_cp_async_wait(unsigned n) {
  const unsigned t = threadIdx.x;
  unsigned kept = 0;
  for (unsigned i = 0; i < tiny_async_count[t]; i++) {
    tiny_async_copy& c = tiny_async_pending[t][i];
    if (c.group + n < tiny_async_groups[t])
      for (int w = 0; w < 4; w++) c.to[w] = c.bits[w];
    else
      tiny_async_pending[t][kept++] = c;
  }
  tiny_async_count[t] = kept;
}
#endif

// ---- index math: floor division and modulo by a positive constant
static __device__ __forceinline__ i64 tiny_floordiv(i64 a, i64 c) { i64 q = a / c; return q - (i64)((q * c != a) & (a < 0)); }
static __device__ __forceinline__ i64 tiny_floormod(i64 a, i64 c) { i64 m = a % c; return m < 0 ? m + c : m; }

// ---- float -> integer through a saturating int64 (NaN -> 0)
static __device__ __forceinline__ i64 tiny_f2i(float x) {
  return x != x ? 0 : x >= 9223372036854775808.0f ? (i64)0x7fffffffffffffffLL
       : x < -9223372036854775808.0f ? (i64)(-0x7fffffffffffffffLL - 1) : (i64)x;
}
static __device__ __forceinline__ i64 tiny_f2i(double x) {
  return x != x ? 0 : x >= 9223372036854775808.0 ? (i64)0x7fffffffffffffffLL
       : x < -9223372036854775808.0 ? (i64)(-0x7fffffffffffffffLL - 1) : (i64)x;
}

// ---- integer division and modulo: a zero divisor gives 0, x / -1 wraps
template <class T> static __device__ __forceinline__ bool tiny_signed() { return (T)-1 < (T)0; }
template <class T> static __device__ __forceinline__ T tiny_idiv(T a, T b) {
  if (b == (T)0) return (T)0;
  if (tiny_signed<T>() && b == (T)-1) return (T)(0ull - (u64)a);
  return (T)(a / b);
}
template <class T> static __device__ __forceinline__ T tiny_imod(T a, T b) {
  if (b == (T)0 || (tiny_signed<T>() && b == (T)-1)) return (T)0;
  return (T)(a % b);
}
template <class T> static __device__ __forceinline__ T tiny_ifloordiv(T a, T b) {
  T q = tiny_idiv(a, b);
  if (!tiny_signed<T>()) return q;
  T r = tiny_imod(a, b);
  bool adjust = r != (T)0 && ((r < (T)0) != (b < (T)0));
  return (T)((u64)q - (u64)adjust);
}
template <class T> static __device__ __forceinline__ T tiny_ifloormod(T a, T b) {
  T r = tiny_imod(a, b);
  if (!tiny_signed<T>()) return r;
  bool adjust = r != (T)0 && ((r < (T)0) != (b < (T)0));
  return adjust ? (T)((u64)r + (u64)b) : r;
}
// Power by squaring; a negative exponent gives 0 except for bases 1 and -1.
template <class T> static __device__ __forceinline__ T tiny_ipow(T base, T exp) {
  bool neg = tiny_signed<T>() && exp < (T)0;
  T e = neg ? (T)0 : exp, r = (T)1, b = base;
  while (e != (T)0) {
    if (e & (T)1) r = (T)((u64)r * (u64)b);
    b = (T)((u64)b * (u64)b);
    e = (T)(e >> 1);
  }
  if (!neg) return r;
  if (base == (T)1) return (T)1;
  if (base == (T)-1) return (exp & (T)1) ? (T)-1 : (T)1;
  return (T)0;
}

// ---- Python-style float floor division and modulo, as PyTorch computes them
static __device__ __forceinline__ float tiny_floordiv_f32(float a, float c) {
  float m = fmodf(a, c), d = (a - m) / c;
  if (m != 0.0f && ((c < 0.0f) != (m < 0.0f))) d = d - 1.0f;
  float fl = floorf(d), fixed = (d - fl > 0.5f) ? fl + 1.0f : fl;
  float res = (d != 0.0f) ? fixed : copysignf(0.0f, a / c);
  return (c == 0.0f) ? a / c : res;
}
static __device__ __forceinline__ double tiny_floordiv_f64(double a, double c) {
  double m = fmod(a, c), d = (a - m) / c;
  if (m != 0.0 && ((c < 0.0) != (m < 0.0))) d = d - 1.0;
  double fl = floor(d), fixed = (d - fl > 0.5) ? fl + 1.0 : fl;
  double res = (d != 0.0) ? fixed : copysign(0.0, a / c);
  return (c == 0.0) ? a / c : res;
}
static __device__ __forceinline__ float tiny_floormod_f32(float a, float c) {
  float m = fmodf(a, c);
  return (m != 0.0f && ((c < 0.0f) != (m < 0.0f))) ? m + c : m;
}
static __device__ __forceinline__ double tiny_floormod_f64(double a, double c) {
  double m = fmod(a, c);
  return (m != 0.0 && ((c < 0.0) != (m < 0.0))) ? m + c : m;
}

// ---- erfinv as the CPU generator computes it: a rational first guess, two Newton steps
#define TINY_ERFINV(NAME, T, S, INF, NAN_)                                                                   \
  static __device__ __forceinline__ T NAME(T y) {                                                          \
    const T ya = fabs##S(y), z = y * y;                                                                    \
    const T num = ((((T)-0.140543331 * z + (T)0.914624893) * z + (T)-1.645349621) * z + (T)0.886226899);    \
    const T dem = (((((T)0.012229801 * z + (T)-0.329097515) * z + (T)1.442710462) * z + (T)-2.118377725) * z \
                   + (T)1.0);                                                                              \
    const T central = (y * num) / dem;                                                                     \
    const T t = sqrt##S(-log##S(((T)1.0 - ya) / (T)2.0));                                                  \
    const T tnum = ((((T)1.641345311 * t + (T)3.429567803) * t + (T)-1.624906493) * t + (T)-1.970840454);   \
    const T tdem = (((T)1.637067800 * t + (T)3.543889200) * t + (T)1.0);                                    \
    T x = ya <= (T)0.7 ? central : copysign##S(tnum, y) / tdem;                                            \
    const T k = (T)2.0 / (T)1.7724538509055160273;                                                         \
    for (int i = 0; i < 2; i++) x = x - (erf##S(x) - y) / (k * exp##S(-x * x));                           \
    if (ya == (T)1.0) x = copysign##S(INF, y);                                                             \
    return ya > (T)1.0 ? NAN_ : x;                                                                         \
  }
TINY_ERFINV(tiny_erfinv_f32, float, f, __uint_as_float(0x7f800000u), __uint_as_float(0x7fc00000u))
TINY_ERFINV(tiny_erfinv_f64, double, , __longlong_as_double(0x7ff0000000000000LL), __longlong_as_double(0x7ff8000000000000LL))

// ---- Philox-4x32-10 (seed -> key, counter = offset + flat index); the first
// word's top 24 bits become a float in [0, 1)
static __device__ __forceinline__ float tiny_rand(u64 ctr, u32 k0, u32 k1) {
  u32 c0 = (u32)ctr, c1 = (u32)(ctr >> 32), c2 = 0u, c3 = 0u;
  for (int i = 0; i < 10; i++) {
    u64 p0 = (u64)c0 * 0xD2511F53ull, p1 = (u64)c2 * 0xCD9E8D57ull;
    u32 n0 = (u32)(p1 >> 32) ^ c1 ^ k0, n2 = (u32)(p0 >> 32) ^ c3 ^ k1;
    c1 = (u32)p1; c3 = (u32)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return (float)(c0 >> 8) * (1.0f / 16777216.0f);
}
)";

// The C type a value of `t` lives in while computing.
const char* reg_type(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "u8";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Float16: case DType::BFloat16: case DType::Float32: return "float";
    case DType::Float64: return "double";
  }
  return "?";
}
// The C type of an element in memory.
const char* mem_type(DType t) {
  switch (t) {
    case DType::Bool: return "u8";
    case DType::Float16: case DType::BFloat16: return "u16";
    default: return reg_type(t);
  }
}
// Unsigned type of the same width (shift-count checks) and the wide unsigned
// type integer arithmetic wraps in (no signed overflow in C).
const char* same_width_unsigned(DType t) {
  switch (itemsize(t)) {
    case 1: return "u8";
    case 2: return "u16";
    case 4: return "u32";
    default: return "u64";
  }
}
const char* wrap_type(DType t) { return itemsize(t) == 8 ? "u64" : "u32"; }
bool reg_is_float(DType t) { return is_float(t); }

// Negative literals come parenthesized so they can follow any operator.
std::string i64_literal(int64_t v) {
  if (v == INT64_MIN) return "(-0x7fffffffffffffffLL - 1)";
  if (v < 0) return "(" + std::to_string(v) + "LL)";
  return std::to_string(v) + "LL";
}

// A floating constant in `t`'s register type, exactly.
std::string float_literal(double v, DType t) {
  char buf[64];
  if (reg_type(t) == std::string("double")) {
    if (std::isfinite(v)) {
      std::snprintf(buf, sizeof buf, "%.17g", v);
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s[0] == '-' ? "(" + s + ")" : s;
    }
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016llxLL)", (unsigned long long)bits);
    return buf;
  }
  float f = float(v);
  if (std::isfinite(f)) {
    std::snprintf(buf, sizeof buf, "%.9g", double(f));
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s[0] == '-' ? "(" + s + "f)" : s + "f";
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::snprintf(buf, sizeof buf, "__uint_as_float(0x%08xu)", bits);
  return buf;
}

bool fits32(const Expr& e) {
  if (e->vmin < INT32_MIN || e->vmax > INT32_MAX) return false;
  for (auto& s : e->src)
    if (!fits32(s)) return false;
  return true;
}

class Renderer {
 public:
  Renderer(const Kernel& k, const CudaRenderOptions& opt)
      : given_(k), opt_(opt), plan_(lower_cuda(k, opt)), k_(plan_.view ? *plan_.view : k) {}

  CudaKernelSource render() {
    CudaKernelSource out;
    std::ostringstream nm;
    nm << given_.name() << "_" << std::hex << std::hash<std::string>()(given_.key());
    out.name = nm.str();
    out.outputs = numel(k_.shape);
    out.num_buffers = int(k_.buffers.size());
    for (const Node* n : k_.launch_nodes()) {
      param_word_[n] = out.num_params;
      out.num_params += 2;
    }

    out.tile_rows = plan_.tile_rows;
    out.tile_cols = plan_.tile_cols;
    out.lanes = plan_.lanes;
    out.outputs = plan_.launch_outputs;
    out.block_size = plan_.block_size;
    out.block_reduce = plan_.block_reduce;
    out.shared_tile = plan_.shared;
    out.tensor_cores = plan_.mma != CudaMma::None ? plan_.mma_name() : "";
    out.split = plan_.split;
    out.split_threads = plan_.split_threads;
    out.partial_slots = plan_.split_threads ? plan_.tile_rows * plan_.tile_cols : plan_.shared ? plan_.block_rows() * plan_.block_cols() : 1;
    out.serial = k_.serial;

    // which buffers are stored to (the others are read-only: const pointers)
    std::vector<bool> written(k_.buffers.size(), false);
    for (auto& o : k_.outputs) written[size_t(o.buffer)] = true;

    std::ostringstream src;
    const CudaPlan& p = plan_;
    auto num = [](int64_t v) { return std::to_string(v); };
    std::string how =
        k_.serial ? "one thread, in order"
        : p.split_threads
            ? "one thread per " + num(p.tile_rows) + " x " + num(p.tile_cols) + " tile of outputs (dims " +
                  num(p.tile_d2) + ", " + num(p.tile_d) + ") and slice of " + num(p.split) +
                  " of the reduce, partials combined in order"
        : p.split > 1 && !p.shared ? num(p.split) + " blocks per output, shared-memory reduce, partials combined in order"
        : p.block_reduce ? "one block per output, shared-memory reduce"
        : p.mma != CudaMma::None
            ? "one block per " + num(p.block_rows()) + " x " + num(p.block_cols()) + " outputs (dims " + num(p.tile_d2) +
                  ", " + num(p.tile_d) + "), a warp per " + num(p.mma_m * 16) + " x " + num(p.mma_n * 8) + ", " +
                  p.mma_name() + " factors staged in shared memory, products on tensor cores"
        : p.shared ? "one block per " + num(p.block_rows()) + " x " + num(p.block_cols()) + " outputs (dims " +
                         num(p.tile_d2) + ", " + num(p.tile_d) + "), a thread per " + num(p.tile_rows) + " x " +
                         num(p.tile_cols) + ", factors staged in shared memory"
        : p.tiled() ? "one thread per " + num(p.tile_rows) + " x " + num(p.tile_cols) + " tile of outputs (dims " +
                          num(p.tile_d2) + ", " + num(p.tile_d) + "), an accumulator each"
        : p.lanes > 1 ? "one thread per " + num(p.lanes) + " neighbouring outputs along dim " + num(p.lanes_d) +
                            ", vector loads and stores where aligned"
                      : "one thread per output";
    if (p.shared && p.split > 1) how += ", the reduce split across " + num(p.split) + " blocks, partials combined in order";
    if (plan_.view) how += ", seen as " + shape_str(k_.shape);
    src << "// tiny kernel " << given_.name() << " (" << how << ")\n// reason: " << k_.reason << "\n";
    src << "extern \"C\" __global__ void __launch_bounds__(" << plan_.block_size
        << (plan_.min_blocks_per_sm ? ", " + std::to_string(plan_.min_blocks_per_sm) : "") << ") " << out.name << "(";
    for (size_t i = 0; i < k_.buffers.size(); i++) {
      DType dt = k_.buffers[i]->dtype();
      src << (written[i] ? "" : "const ") << mem_type(dt) << "* b" << i << ", ";
    }
    // launch values (Rand keys, Param bits) come by value, so a new one needs no new program
    for (int i = 0; i < out.num_params; i++) src << "const u64 p" << i << ", ";
    if (plan_.split > 1) src << "u64* tiny_partials, unsigned* tiny_tickets, ";
    src << "i64 tiny_begin, i64 tiny_end) {\n";
    if (plan_.block_reduce) src << "  __shared__ u64 tiny_smem[" << plan_.block_size << "];\n";
    build_body();
    if (plan_.split > 1 && !plan_.split_threads && !plan_.shared) out.partial_slots = std::max<int64_t>(1, int64_t(staged_.size()));
    out.vectors = vectors_;
    src << body_.str() << "}\n";
    out.kernel = src.str();
    out.source = std::string(kPrelude) + "\n" + out.kernel;
    return out;
  }

 private:
  // ---- output: statements with indentation
  void line(const std::string& s) { body_ << std::string(size_t(indent_) * 2, ' ') << s << "\n"; }
  std::string tmp(const char* prefix = "v") { return prefix + std::to_string(next_id_++); }
  std::string define(const std::string& type, const std::string& expr, const char* prefix = "v") {
    std::string n = tmp(prefix);
    line("const " + type + " " + n + " = " + expr + ";");
    return n;
  }

  std::string lookup(const std::string& key) {
    for (auto it = memo_.rbegin(); it != memo_.rend(); ++it) {
      auto f = it->find(key);
      if (f != it->end()) return f->second;
    }
    return "";
  }
  void remember(const std::string& key, const std::string& v) { memo_.back()[key] = v; }

  // ---- structure
  // Computes, here and now, the reduces under `root` that the loops numbered
  // `min_id` and above do not change (see hoistable_reduces), as the LLVM
  // generator does.
  void hoist_reduces(const Node* root, const std::vector<Expr>& idx, const Expr& valid, int min_id) {
    auto found = hoistable_reduces(
        {root}, idx, valid, min_id, [&](const Node* n) { return k_.loads.count(n) > 0; },
        [&](int64_t size) { return new_var("", size); });
    for (auto& r : found) eval(r.node, r.idx, r.valid);
  }

  // ---- register tiles (see register_tile.h and lowering.h)
  // The tile at `idx` (its first row and column): one loop over the reduce
  // axes updates every output's accumulator, then each output is stored.
  void emit_tile(const std::vector<Expr>& idx) {
    std::vector<std::vector<Expr>> outs;
    std::vector<TiledReduce> ctx;
    auto fresh = [&](int64_t size) { return new_var("", size); };
    for (int64_t r = 0; r < plan_.tile_rows; r++)
      for (int64_t c = 0; c < plan_.tile_cols; c++) {
        std::vector<Expr> o = idx;
        if (plan_.tile_d2 >= 0) o[size_t(plan_.tile_d2)] = add(idx[size_t(plan_.tile_d2)], cnst(r));
        o[size_t(plan_.tile_d)] = add(idx[size_t(plan_.tile_d)], cnst(c));
        // the kernel's one reduce (one_flat_reduce), whose context may be constant here (a
        // tile as wide as its dim)
        auto cc = find_tiled_reduce(k_, o, -1, fresh);
        if (!cc) throw std::logic_error("tiny cuda: a tile's output lost its reduce");
        outs.push_back(o);
        ctx.push_back(*cc);
      }
    const Node* r = ctx[0].reduce;
    const Node* src = r->src[0].get();
    DType dt = r->dtype;
    std::vector<int> axes;
    for (int a : r->args.axes)
      if (src->shape[size_t(a)] > 1) axes.push_back(a);
    std::vector<std::string> acc;
    for (size_t i = 0; i < ctx.size(); i++) {
      acc.push_back(tmp("acc"));
      line(std::string(reg_type(dt)) + " " + acc.back() + " = " + identity(r->args.rop, dt) + ";");
    }
    bool empty = false;
    for (int a : r->args.axes) empty |= src->shape[size_t(a)] == 0;
    std::vector<Expr> kv(src->shape.size());
    std::vector<std::string> names;
    for (int a : axes) {
      names.push_back(tmp("r"));
      kv[size_t(a)] = new_var(names.back(), src->shape[size_t(a)]);
    }
    // a split's slice: a range of the outermost reduce axis
    int64_t chunk = plan_.split_threads && !axes.empty() ? (src->shape[size_t(axes[0])] + plan_.split - 1) / plan_.split : 0;
    if (!empty)
      nested_loops(
          names, src->shape, axes,
          [&]() {
            for (size_t t = 0; t < ctx.size(); t++) {
              std::vector<Expr> sub = ctx[t].idx;
              for (int a : axes) sub[size_t(a)] = kv[size_t(a)];
              line(acc[t] + " = " + accumulate(r->args.rop, acc[t], src, sub, ctx[t].valid, dt) + ";");
            }
          },
          0, chunk);
    if (plan_.split_threads) {
      combine_thread_slices(acc, r->args.rop, dt);
      indent_++;
      memo_.emplace_back();  // values computed by the last slice's thread stay in its block
    }
    for (size_t t = 0; t < ctx.size(); t++)
      remember(context_key(r, ctx[t].idx, ctx[t].valid), value(dt, round_to(acc[t], dt)));
    for (auto& o : outs) emit_stores(o);
    if (plan_.split_threads) {
      memo_.pop_back();
      indent_--;
      line("}");
    }
  }

  // A thread-split tile's meeting point: every thread leaves its slice's partials in slots
  // (slice * tile + t) * tiles + gid (neighbouring threads, neighbouring tiles: neighbouring
  // slots); the last of the tile's threads to take a ticket combines them in slice order (so
  // the result does not depend on timing), resets the ticket and goes on into the block this
  // opens (the others skip it).
  void combine_thread_slices(const std::vector<std::string>& acc, ReduceOp op, DType dt) {
    const std::string t = reg_type(dt), s = std::to_string(plan_.split), tile = std::to_string(acc.size());
    auto slot = [&](size_t i, const std::string& q) {
      return "tiny_partials + ((u64)" + q + " * " + tile + " + " + std::to_string(i) + ") * " +
             std::to_string(plan_.launch_outputs) + " + gid";
    };
    for (size_t i = 0; i < acc.size(); i++) line("*(" + t + "*)(" + slot(i, "tiny_slice") + ") = " + acc[i] + ";");
    line("__threadfence();  // the partials are visible before the ticket is taken");
    line("if (atomicAdd(tiny_tickets + gid, 1u) == " + s + "u - 1u) {");
    indent_++;
    line("__threadfence();");
    for (size_t i = 0; i < acc.size(); i++) {
      line(acc[i] + " = " + identity(op, dt) + ";");
      line("for (unsigned q = 0; q < " + s + "u; q++) {");
      indent_++;
      line("const " + t + " part = *(volatile " + t + "*)(" + slot(i, "q") + ");");
      line(acc[i] + " = " + combine(op, acc[i], "part", dt) + ";");
      indent_--;
      line("}");
    }
    line("tiny_tickets[gid] = 0u;  // ready for the next launch");
    indent_--;
  }

  // A split shared tile's meeting point: every thread of a block leaves its slice's partials
  // in slots ((gid * split + slice) * n + i) * threads + thread (a warp's 32 values side by
  // side; with the slice fastest, each of a warp's stores and loads touched 32 sectors); the
  // last of the block's slices to take a ticket combines them in slice order (so the result
  // does not depend on timing), resets the ticket and goes on to the stores; the others'
  // blocks leave.
  void combine_block_slices(const std::vector<std::string>& acc, DType dt) {
    const std::string t = reg_type(dt), s = std::to_string(plan_.split), n = std::to_string(acc.size());
    auto slot = [&](size_t i, const std::string& q) {
      return "tiny_partials + (((u64)gid * " + s + " + " + q + ") * " + n + " + " + std::to_string(i) + ") * " +
             std::to_string(plan_.shared_threads()) + " + threadIdx.x";
    };
    for (size_t i = 0; i < acc.size(); i++) line("*(" + t + "*)(" + slot(i, "tiny_slice") + ") = " + acc[i] + ";");
    line("__threadfence();  // the partials are visible before the ticket is taken");
    line("__syncthreads();");
    line("if (threadIdx.x == 0) tiny_ticket = atomicAdd(tiny_tickets + gid, 1u);");
    line("__syncthreads();");
    line("if (tiny_ticket != " + s + "u - 1u) continue;  // the last slice's block combines");
    line("__threadfence();");
    for (size_t i = 0; i < acc.size(); i++) {
      line(acc[i] + " = " + identity(ReduceOp::Sum, dt) + ";");
      line("for (unsigned q = 0; q < " + s + "u; q++) " + acc[i] + " = " +
           combine(ReduceOp::Sum, acc[i], "*(volatile " + t + "*)(" + slot(i, "q") + ")", dt) + ";");
    }
    line("if (threadIdx.x == 0) tiny_tickets[gid] = 0u;  // ready for the next launch");
  }

  // ---- shared-memory tiles (see lowering.h)
  // A block of threads (or of warps, on tensor cores) owns a block of tiles; per chunk of the
  // reduce's steps its threads stage both factors of the product for the whole block in shared
  // memory (each value computed and loaded once per block instead of once per thread), meet at
  // a barrier, and run the chunk from there. Each output still adds its products in reduce
  // order, so the results equal the untiled kernel's (on tensor cores, up to their own order);
  // steps past the reduce's end stage zeros (adding +0 changes no sum).
  // The reduce's source context at output index `o`, its reduce axes at flat step `k`.
  std::pair<std::vector<Expr>, Expr> shared_context(const std::vector<Expr>& o, const Expr& k) {
    auto ctx = find_tiled_reduce(k_, o, -1, [&](int64_t size) { return new_var("", size); });
    if (!ctx) throw std::logic_error("tiny cuda: a shared tile's output lost its reduce");
    const Node* src = ctx->reduce->src[0].get();
    std::vector<Expr> sub = ctx->idx;
    int64_t stride = plan_.shared_k;
    for (int a : ctx->reduce->args.axes) {
      int64_t size = src->shape[size_t(a)];
      stride /= size;
      sub[size_t(a)] = mod(floordiv(k, stride), size);
    }
    return {sub, ctx->valid};
  }

  // A thread's rows (and columns) in the block come in groups of 4 neighbours
  // where the tile allows, the groups a block's width of groups apart: one
  // vector read from shared memory per group and step, and the threads reading
  // a step's row touch consecutive 16-byte words (no bank conflicts).
  static constexpr int64_t kSharedGroup = 4;
  static int64_t shared_group(int64_t side) { return side % kSharedGroup == 0 ? kSharedGroup : side; }

  void emit_shared_tiles() {
    const Shape& shape = k_.shape;
    const int64_t R = plan_.tile_rows, C = plan_.tile_cols, TY = plan_.shared_ty, TX = plan_.shared_tx, T = TY * TX;
    const int64_t BM = TY * R, BN = TX * C, M = shape[size_t(plan_.tile_d2)], N = shape[size_t(plan_.tile_d)];
    const int64_t RG = shared_group(R), CG = shared_group(C);
    const std::string rt = reg_type(plan_.row_factor.node->dtype), ct = reg_type(plan_.col_factor.node->dtype);
    const std::string BK = std::to_string(kSharedK);
    // Rows padded so that threads staging along k (down a column) hit different banks;
    // by a whole vector where the reads are vectors, which keeps every row aligned.
    auto declare = [&](const std::string& type, const std::string& name, int64_t width, int64_t group) {
      int64_t pitch = width + (group == kSharedGroup ? kSharedGroup : 1);
      line("alignas(tiny_vec4<" + type + ">) __shared__ " + type + " " + name + "[" + BK + "][" + std::to_string(pitch) + "];");
      return pitch;
    };
    const int64_t a_pitch = declare(rt, "tiny_as", BM, RG), b_pitch = declare(ct, "tiny_bs", BN, CG);
    std::string bm, bn;
    std::vector<Expr> base = open_block_loop(&bm, &bn);
    line("const int tiny_ty = (int)threadIdx.x / " + std::to_string(TX) + ", tiny_tx = (int)threadIdx.x % " +
         std::to_string(TX) + ";");
    // group g of the thread's rows starts at column tiny_ty * RG + g * TY * RG of tiny_as
    // and at output row r<g>; likewise its column groups in tiny_bs and c<g>
    std::vector<std::string> group_names;  // r0, r1, ..., c0, c1, ...
    auto group_starts = [&](const char* prefix, const std::string& block, int64_t width, int64_t side, int64_t group,
                            int64_t threads, const char* thread, int64_t size) {
      std::vector<Expr> starts;
      for (int64_t g = 0; g < side / group; g++) {
        std::string name = prefix + std::to_string(g);
        group_names.push_back(name);
        line("const int " + name + " = " + block + " * " + std::to_string(width) + " + " + std::to_string(g * threads * group) +
             " + " + thread + " * " + std::to_string(group) + ";");
        // where stored: groups past the end are not (nor, at a ragged edge, its elements past the end)
        starts.push_back(new_var(name, size % group ? size : size - group + 1));
      }
      return starts;
    };
    std::vector<Expr> rows = group_starts("r", bm, BM, R, RG, TY, "tiny_ty", M);
    std::vector<Expr> cols = group_starts("c", bn, BN, C, CG, TX, "tiny_tx", N);
    // the thread's outputs, group pair by group pair, and their contexts
    std::vector<std::vector<Expr>> outs;
    for (int64_t i = 0; i < R; i++)
      for (int64_t j = 0; j < C; j++) {
        std::vector<Expr> o = base;
        // at a ragged edge an element's index is its own variable, in range where it is stored
        o[size_t(plan_.tile_d2)] = M % RG && i % RG ? new_var("(" + group_names[size_t(i / RG)] + " + " + std::to_string(i % RG) + ")", M)
                                                    : add(rows[size_t(i / RG)], cnst(i % RG));
        o[size_t(plan_.tile_d)] = N % CG && j % CG ? new_var("(" + group_names[rows.size() + size_t(j / CG)] + " + " + std::to_string(j % CG) + ")", N)
                                                   : add(cols[size_t(j / CG)], cnst(j % CG));
        outs.push_back(o);
      }
    const Node* r = find_tiled_reduce(k_, outs[0], -1, [&](int64_t size) { return new_var("", size); })->reduce;
    DType dt = r->dtype;
    std::vector<std::string> acc;
    for (size_t t = 0; t < outs.size(); t++) {
      acc.push_back(tmp("acc"));
      line(std::string(reg_type(dt)) + " " + acc.back() + " = " + identity(ReduceOp::Sum, dt) + ";");
    }
    // The next chunk's factors are loaded into registers while the block computes
    // from the current one, then stored to shared memory after the barrier.
    Staging sa{plan_.row_factor, "tiny_as", rt, true, bm, BM, M, kSharedK}, sb{plan_.col_factor, "tiny_bs", ct, false, bn, BN, N, kSharedK};
    sa.pitch = a_pitch;
    sb.pitch = b_pitch;
    for (Staging* s : {&sa, &sb}) plan_vector_staging(*s, base);
    declare_staging_alignment();
    for (Staging* s : {&sa, &sb}) declare_staging_registers(*s, T);
    for (Staging* s : {&sa, &sb}) stage_load(*s, base, T, k_begin_);
    line("for (int k0 = " + k_begin_ + "; k0 < " + k_end_ + "; k0 += " + BK + ") {");
    indent_++;
    for (Staging* s : {&sa, &sb}) stage_store(*s, T);
    line("__syncthreads();");
    line("if (k0 + " + BK + " < " + k_end_ + ") {");
    indent_++;
    for (Staging* s : {&sa, &sb}) stage_load(*s, base, T, "k0 + " + BK);
    indent_--;
    line("}");
    line("#pragma unroll");
    line("for (int kk = 0; kk < " + BK + "; kk++) {");
    indent_++;
    memo_.emplace_back();
    // this step's row and column values from shared memory, a vector per group of 4
    auto read = [&](const std::string& array, const std::string& type, int64_t side, int64_t group, int64_t threads,
                    const char* thread) {
      std::vector<std::string> values;
      for (int64_t g = 0; g < side / group; g++) {
        std::string at = std::to_string(g * threads * group) + " + " + thread + " * " + std::to_string(group);
        if (group == kSharedGroup) {
          std::string vt = "tiny_vec4<" + type + ">", v = tmp("s");
          line("const " + vt + " " + v + " = *reinterpret_cast<const " + vt + "*>(&" + array + "[kk][" + at + "]);");
          for (int64_t e = 0; e < group; e++) values.push_back(v + ".v[" + std::to_string(e) + "]");
        } else {
          for (int64_t e = 0; e < group; e++) values.push_back(array + "[kk][" + at + " + " + std::to_string(e) + "]");
        }
      }
      return values;
    };
    std::vector<std::string> row_values = read("tiny_as", rt, R, RG, TY, "tiny_ty");
    std::vector<std::string> col_values = read("tiny_bs", ct, C, CG, TX, "tiny_tx");
    Expr kx = new_var("k0 + kk", plan_.shared_k);  // names contexts only: the factors come from shared memory
    for (size_t t = 0; t < outs.size(); t++) {
      auto [sub, valid] = shared_context(outs[t], kx);
      remember(context_key(plan_.row_factor.node, sub, valid), row_values[t / size_t(C)]);
      remember(context_key(plan_.col_factor.node, sub, valid), col_values[t % size_t(C)]);
      line(acc[t] + " = " + accumulate(ReduceOp::Sum, acc[t], r->src[0].get(), sub, valid, dt) + ";");
    }
    memo_.pop_back();
    indent_--;
    line("}");
    line("__syncthreads();");
    indent_--;
    line("}");
    if (plan_.split > 1) combine_block_slices(acc, dt);
    // stores, a group pair at a time: groups past the ends of partial blocks are not stored
    for (size_t g = 0; g < rows.size(); g++)
      for (size_t h = 0; h < cols.size(); h++) {
        line("if (" + group_names[g] + " < " + std::to_string(M) + " && " + group_names[rows.size() + h] + " < " +
             std::to_string(N) + ") {");
        indent_++;
        memo_.emplace_back();
        std::vector<size_t> group;
        for (int64_t i = 0; i < RG; i++)
          for (int64_t j = 0; j < CG; j++) group.push_back(size_t((int64_t(g) * RG + i) * C + int64_t(h) * CG + j));
        for (size_t t : group) {
          auto ctx = find_tiled_reduce(k_, outs[t], -1, [&](int64_t size) { return new_var("", size); });
          remember(context_key(r, ctx->idx, ctx->valid), value(dt, round_to(acc[t], dt)));
        }
        for (size_t t : group) {
          // ragged edges (tiles that do not divide the dims): each element's own guard
          int64_t i = int64_t(t) / C % RG, j = int64_t(t) % C % CG;
          std::string guard;
          if (M % RG && i) guard = group_names[g] + " + " + std::to_string(i) + " < " + std::to_string(M);
          if (N % CG && j)
            guard += (guard.empty() ? "" : " && ") + group_names[rows.size() + h] + " + " + std::to_string(j) + " < " +
                     std::to_string(N);
          if (!guard.empty()) {
            line("if (" + guard + ") {");
            indent_++;
            memo_.emplace_back();  // what the guarded stores compute stays inside the guard
          }
          emit_stores(outs[t]);
          if (!guard.empty()) {
            memo_.pop_back();
            indent_--;
            line("}");
          }
        }
        memo_.pop_back();
        indent_--;
        line("}");
      }
    close_block_loop();
  }

  // Opens the grid-stride loop over blocks (gid: the block's number), names the block's
  // coordinates along the tile's row and column dims (tiny_bm, tiny_bn; "0" where there is one
  // block) and returns its other coordinates.
  std::vector<Expr> open_block_loop(std::string* bm, std::string* bn) {
    const Shape& shape = k_.shape;
    k_begin_ = "0";
    k_end_ = std::to_string(plan_.shared_k);
    if (plan_.split > 1) {
      // blocks [gid * split, (gid + 1) * split) share block of tiles gid, a slice of the steps each
      std::string sp = std::to_string(plan_.split) + "u";
      line("__shared__ unsigned tiny_ticket;");
      line("const unsigned tiny_slice = blockIdx.x % " + sp + ";");
      std::string steps = std::to_string(plan_.split_steps);
      line("const int tiny_k0 = (int)tiny_slice * " + steps + ", tiny_k1 = tiny_k0 + " + steps + " < " + k_end_ +
           " ? tiny_k0 + " + steps + " : " + k_end_ + ";");
      line("for (i64 gid = tiny_begin + (i64)(blockIdx.x / " + sp + "); gid < tiny_end; gid += (i64)(gridDim.x / " + sp + ")) {");
      k_begin_ = "tiny_k0";
      k_end_ = "tiny_k1";
    } else {
      line("for (i64 gid = tiny_begin + (i64)blockIdx.x; gid < tiny_end; gid += (i64)gridDim.x) {");
    }
    indent_++;
    memo_.emplace_back();
    Shape grid = plan_.shared_grid(k_.shape);
    int64_t stride = numel(grid);
    std::vector<Expr> base(shape.size(), cnst(0));
    *bm = *bn = "0";
    for (size_t d = 0; d < grid.size(); d++) {
      stride /= grid[d];
      if (grid[d] == 1) continue;
      std::string e = "(int)((gid / " + std::to_string(stride) + "ll) % " + std::to_string(grid[d]) + "ll)";
      std::string name = int(d) == plan_.tile_d2 ? "tiny_bm" : int(d) == plan_.tile_d ? "tiny_bn" : "i" + std::to_string(d);
      line("const int " + name + " = " + e + ";");
      if (int(d) == plan_.tile_d2) *bm = name;
      else if (int(d) == plan_.tile_d) *bn = name;
      else base[d] = new_var(name, shape[d]);
    }
    return base;
  }
  void close_block_loop() {
    memo_.pop_back();
    indent_--;
    line("}");
  }

  // One factor's chunk for the whole block: `extent` rows (or columns) from the
  // block's first, kSharedK steps, spread over the block's threads, through
  // registers `regs` on their way to shared memory `array`.
  struct Staging {
    SharedFactor f;
    std::string array, type;  // type: the registers' (the factor's values)
    bool rows;          // the row factor (else the column factor)
    std::string block;  // the block's coordinate along the factor's output dim
    int64_t extent, size;
    int64_t chunk;      // reduce steps per chunk
    // tensor cores: shared memory holds [extent][chunk] (the steps innermost), each value
    // converted by this function; else [chunk][extent] as it is
    std::string to_shared = {};
    std::string regs = {};
    bool raw16 = false;  // the factor is a cast of 16-bit data read as it is: its bits are staged
    // Vector staging (plan_vector_staging): `vec` neighbours along the staged side (k where
    // along_k) are one 16-byte load; a thread stages groups of them, and registers hold groups.
    int64_t vec = 1;
    bool k_major = false;  // tensor cores: shared memory holds [chunk][extent] (staged along the rows)
    int64_t pitch = 0;     // elements per row of shared memory
    int64_t fast_extent() const { return f.along_k ? chunk : extent; }
    // shared memory [outer][inner]: [kk][m] for scalar tiles and k-major tensor-core factors
    bool k_outer() const { return to_shared.empty() || k_major; }
    // the element at row (or column) m, step kk, of shared memory (of ring stage `stage` if named)
    std::string place(const std::string& m, const std::string& kk, const std::string& stage = "") const {
      return array + (stage.empty() ? "" : "[" + stage + "]") + (k_outer() ? "[" + kk + "][" + m + "]" : "[" + m + "][" + kk + "]");
    }
    // A vector group that lies in shared memory as loaded (16-bit bits in rows of 16-byte multiples):
    // what an asynchronous copy can move without registers.
    bool copies_as_loaded() const { return raw16 && vec > 1 && f.along_k == !k_outer() && pitch % vec == 0; }
    // A group's registers: raw16 pairs packed in 32-bit words, so that a vector load's result
    // is used as it arrives (unpacked 16-bit lanes had every load wait for its data at once).
    std::string group_type() const {
      return raw16 ? "tiny_vec<u32, " + std::to_string(vec / 2) + ">" : "tiny_vec<" + type + ", " + std::to_string(vec) + ">";
    }
    // element l of group `r`
    std::string group_element(const std::string& r, int64_t l) const {
      if (!raw16) return r + ".v[" + std::to_string(l) + "]";
      return "(u16)(" + r + ".v[" + std::to_string(l / 2) + "]" + (l % 2 ? " >> 16" : "") + ")";
    }
  };
  // Whether a tensor-core factor is a cast of `held`-typed values read straight from memory
  // (through views): then its chunk is staged as the stored bits, without the conversions to
  // float and back (with their NaN-payload handling: most of a float16 tile's instructions).
  bool raw16_factor(const Node* n, DType held) {
    bool cast = false;  // one cast of `held` values to float32, views above and below it
    for (;; n = n->src[0].get()) {
      if (k_.loads.count(n)) return cast && n->dtype == held;
      if (n->op == Op::Cast && !cast && n->dtype == DType::Float32 && n->src[0]->dtype == held) cast = true;
      else if (n->op != Op::View && n->op != Op::Contiguous) return false;
    }
  }
  // The stored bits of such a value at `idx`; +0 where a view's mask is false (as eval's zero).
  std::string raw16(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    auto load = factor_load(n, idx, cnst(1), /*through_cast=*/true);  // the views' masks alone
    if (!load) throw std::logic_error("tiny cuda: a raw16 factor lost its load");
    if (is_false(load->valid)) return "(u16)0";
    std::string v = "b" + std::to_string(load->buffer) + "[" + load_index_flat(load->flat, land(valid, load->valid)) + "]";
    return is_true(load->valid) ? v : define("u16", condition(load->valid) + " ? " + v + " : (u16)0");
  }
  // The element a staged factor that only reads memory (through views, and raw16's cast) reads
  // at `idx`: its buffer, flat index and mask.
  struct FactorLoad {
    int buffer = -1;
    DType dtype = DType::Float32;
    Expr flat, valid;
  };
  std::optional<FactorLoad> factor_load(const Node* n, std::vector<Expr> idx, Expr valid, bool through_cast) {
    for (;;) {
      auto load = k_.loads.find(n);
      if (load != k_.loads.end()) return FactorLoad{load->second, n->dtype, row_major(idx, n->shape), valid};
      if (n->op == Op::Contiguous || (through_cast && n->op == Op::Cast)) {
        n = n->src[0].get();
        continue;
      }
      if (n->op != Op::View) return std::nullopt;
      auto [flat, v2] = n->args.st.index_valid(idx);
      valid = land(valid, v2);
      idx = unflatten(flat, n->src[0]->shape);
      n = n->src[0].get();
    }
  }
  // Vector staging: where the factor only reads memory, every element one the staged side's
  // coordinate moves by one along (and a mask that does not look at it), a group of 16 bytes
  // starting at a multiple of their count is one aligned load (a matmul's rows along k, its b
  // along the columns; not a convolution's windows). On tensor cores a factor staged along its
  // rows then lies [chunk][extent] in shared memory (16-byte stores), its fragments read
  // transposed (ldmatrix.trans), or by 32-bit loads for TF32.
  void plan_vector_staging(Staging& s, const std::vector<Expr>& base) {
    const bool mma = !s.to_shared.empty(), tf32 = plan_.mma == CudaMma::TF32;
    if (!opt_.vector_staging || (mma && !s.f.along_k && !tf32 && !opt_.ldmatrix)) return;
    const int64_t fast_size = s.f.along_k ? plan_.shared_k : s.size;
    // the fast coordinate made last: lane_run takes variables made after it for ones it depends on
    Expr slow = new_var("", s.f.along_k ? s.size : plan_.shared_k), fast = new_var("", fast_size);
    std::vector<Expr> o = base;
    o[size_t(s.rows ? plan_.tile_d2 : plan_.tile_d)] = s.f.along_k ? slow : fast;
    auto [sub, valid] = shared_context(o, s.f.along_k ? fast : slow);
    auto load = factor_load(s.f.node, sub, valid, s.raw16);
    if (!load || itemsize(load->dtype) != (s.raw16 ? 2 : 4) || (!s.raw16 && mem_type(load->dtype) != s.type)) return;
    const int64_t vec = 16 / itemsize(load->dtype);
    if (s.fast_extent() % vec || fast_size % vec || !tiny::lane_run(load->flat, int(fast->value), vec) ||
        uses_vars(load->valid, int(fast->value), INT32_MAX))
      return;
    s.vec = vec;
    s.k_major = mma && !s.f.along_k;
    vector_buffers_.insert(load->buffer);
  }
  // The condition that vector staging's buffers are aligned for 16-byte loads (one test per
  // kernel; elsewhere the same groups load element by element).
  void declare_staging_alignment() {
    if (vector_buffers_.empty()) return;
    vectors_ = true;
    std::string bits;
    for (int b : vector_buffers_) bits += (bits.empty() ? "" : " | ") + std::string("(u64)b") + std::to_string(b);
    line("const bool tiny_aligned = ((" + bits + ") & 15ull) == 0ull;");
  }
  static int64_t staged_per_thread(const Staging& s, int64_t threads) {
    return (s.extent * s.chunk / s.vec + threads - 1) / threads;
  }
  // The registers a factor's chunk passes through: a value, or a group of `vec`, per element.
  void declare_staging_registers(Staging& s, int64_t threads) {
    s.regs = tmp("stage");
    std::string type = s.vec > 1 ? s.group_type() : s.type;
    line(type + " " + s.regs + "[" + std::to_string(staged_per_thread(s, threads)) + "];");
  }
  // Element (or group) `e`'s (lin, m, kk): its place in the chunk and in shared memory. In a
  // matrix view (flattened rows or columns: divisions in their indices), where the threads
  // divide the fastest side (or it divides them), the place is a thread's own offset plus a
  // constant per element, so elements at one row (or step) share its index arithmetic.
  void staged_element(const Staging& s, int64_t threads, const std::string& e, std::string* lin, std::string* m,
                      std::string* kk) {
    *lin = tmp("lin");
    *m = tmp("m");
    *kk = tmp("kk");
    line("const int " + *lin + " = (int)threadIdx.x + " + e + " * " + std::to_string(threads) + ";");
    // the fastest side (in groups) and the other: threads take consecutive places along the fastest
    const int64_t fast = s.fast_extent() / s.vec;
    std::string* fast_at = s.f.along_k ? kk : m;
    std::string* slow_at = s.f.along_k ? m : kk;
    auto str = [](int64_t v) { return std::to_string(v); };
    std::string f = *lin + " % " + str(fast), w = *lin + " / " + str(fast);
    if ((plan_.view || s.vec > 1) && fast % threads == 0) {
      int64_t per = fast / threads;  // elements along the fastest side per thread
      f = "(int)threadIdx.x + " + e + " % " + str(per) + " * " + str(threads);
      w = e + " / " + str(per);
    } else if ((plan_.view || s.vec > 1) && threads % fast == 0) {
      f = "(int)threadIdx.x % " + str(fast);
      w = "(int)threadIdx.x / " + str(fast) + " + " + e + " * " + str(threads / fast);
    }
    if (s.vec > 1) f = "(" + f + ") * " + str(s.vec);
    line("const int " + *fast_at + " = " + f + ", " + *slow_at + " = " + w + ";");
  }
  // Loads the chunk starting at step `k_start` into the registers. Rows and steps past the
  // ends read an element in range and stage zeros. In a matrix view each is clamped on its own,
  // so a row's index arithmetic does not depend on the step (and is computed once); elsewhere
  // together (a 4096^3 matmul ran at half speed with its row indices kept across the steps).
  // With `stage` (the cp.async ring, emit_mma_pipeline) each group goes straight to that stage of
  // shared memory instead: as one asynchronous 16-byte copy (zeros where out of range) for aligned
  // buffers (`aligned`), else element by element through registers.
  void stage_load(const Staging& s, const std::vector<Expr>& base, int64_t threads, const std::string& k_start,
                  const std::string& stage = "", bool aligned = false) {
    std::string e = tmp("e"), lin, m, kk;
    line("#pragma unroll");
    line("for (int " + e + " = 0; " + e + " < " + std::to_string(staged_per_thread(s, threads)) + "; " + e + "++) {");
    indent_++;
    memo_.emplace_back();
    staged_element(s, threads, e, &lin, &m, &kk);
    std::string at = tmp("at"), k = tmp("k"), row_ok = tmp("ok"), k_ok = tmp("ok"),
                row = s.block + " * " + std::to_string(s.extent) + " + " + m;
    const int64_t places = s.extent * s.chunk / s.vec;
    std::string whole = places < threads && stage.empty() ? lin + " < " + std::to_string(places) + " && " : "";
    if (places < threads && !stage.empty()) {  // no place in the chunk for this thread's last group
      line("if (" + lin + " < " + std::to_string(places) + ") {");
      indent_++;
    }
    line("const bool " + row_ok + " = " + row + " < " + std::to_string(s.size) + ", " + k_ok + " = " + k_start + " + " + kk +
         " < " + k_end_ + ";");
    std::string row_in = plan_.view ? row_ok : row_ok + " && " + k_ok, k_in = plan_.view ? k_ok : row_in;
    line("const int " + at + " = " + row_in + " ? " + row + " : 0, " + k + " = " + k_in + " ? " + k_start + " + " + kk + " : 0;");
    std::vector<Expr> o = base;
    o[size_t(s.rows ? plan_.tile_d2 : plan_.tile_d)] = new_var(at, s.size);
    auto [sub, valid] = shared_context(o, new_var(k, plan_.shared_k));
    if (s.vec > 1) {
      // the group's first element (the index moves by one per element from there)
      auto load = factor_load(s.f.node, sub, valid, s.raw16);
      if (!load) throw std::logic_error("tiny cuda: a vector-staged factor lost its load");
      std::string b = "b" + std::to_string(load->buffer), ix = load_index_flat(load->flat, load->valid);
      std::string ok = whole + row_ok + " && " + k_ok + (is_true(load->valid) ? "" : " && " + condition(load->valid));
      std::string vt = s.group_type(), r = s.regs + "[" + e + "]";
      if (!stage.empty()) {
        std::string to = "&" + s.place(m, kk, stage);
        if (aligned)
          line("tiny_cp_async16(" + to + ", " + b + " + " + ix + ", " + ok + ");");
        else
          line("for (int l = 0; l < " + std::to_string(s.vec / 2) + "; l++) ((u32*)" + to + ")[l] = " + ok + " ? (u32)" + b +
               "[" + ix + " + 2 * l] | (u32)" + b + "[" + ix + " + 2 * l + 1] << 16 : 0u;");
      } else {
        line("if (tiny_aligned) " + r + " = " + ok + " ? *(const " + vt + "*)(" + b + " + " + ix + ") : " + vt + "{};");
        if (s.raw16)
          line("else for (int l = 0; l < " + std::to_string(s.vec / 2) + "; l++) " + r + ".v[l] = " + ok + " ? (u32)" + b +
               "[" + ix + " + 2 * l] | (u32)" + b + "[" + ix + " + 2 * l + 1] << 16 : 0u;");
        else
          line("else for (int l = 0; l < " + std::to_string(s.vec) + "; l++) " + r + ".v[l] = " + ok + " ? " + b + "[" + ix +
               " + l] : (" + s.type + ")0;");
      }
    } else {
      std::string v = s.raw16 ? raw16(s.f.node, sub, valid) : eval(s.f.node, sub, valid);
      line(s.regs + "[" + e + "] = " + whole + row_ok + " && " + k_ok + " ? " + v + " : (" + s.type + ")0;");
    }
    if (places < threads && !stage.empty()) {
      indent_--;
      line("}");
    }
    memo_.pop_back();
    indent_--;
    line("}");
  }
  void stage_store(const Staging& s, int64_t threads) {
    std::string e = tmp("e"), lin, m, kk;
    line("#pragma unroll");
    line("for (int " + e + " = 0; " + e + " < " + std::to_string(staged_per_thread(s, threads)) + "; " + e + "++) {");
    indent_++;
    staged_element(s, threads, e, &lin, &m, &kk);
    const int64_t places = s.extent * s.chunk / s.vec;
    std::string guard = places < threads ? "if (" + lin + " < " + std::to_string(places) + ") " : "";
    const bool k_outer = s.k_outer();
    auto at = [&](const std::string& m_at, const std::string& k_at) { return s.place(m_at, k_at); };
    auto converted = [&](const std::string& v) { return s.to_shared.empty() ? v : s.to_shared + "(" + v + ")"; };
    if (s.vec == 1) {
      line(guard + at(m, kk) + " = " + converted(s.regs + "[" + e + "]") + ";");
    } else if (s.f.along_k == !k_outer && s.pitch % s.vec == 0) {
      // the group is a run of shared memory too (rows of 16-byte multiples): one store
      // as loaded, or converted to TF32 lane by lane
      const bool as_loaded = s.to_shared.empty() || s.raw16;
      std::string vt = as_loaded ? s.group_type() : "tiny_vec<u32, " + std::to_string(s.vec) + ">", r = s.regs + "[" + e + "]";
      std::string v = r;
      if (!as_loaded) {
        v = vt + "{{";
        for (int64_t l = 0; l < s.vec; l++) v += (l ? ", " : "") + converted(r + ".v[" + std::to_string(l) + "]");
        v += "}}";
      }
      line(guard + "*reinterpret_cast<" + vt + "*>(&" + at(m, kk) + ") = " + v + ";");
    } else {
      for (int64_t l = 0; l < s.vec; l++) {
        std::string plus = " + " + std::to_string(l);
        line(guard + at(s.f.along_k ? m : m + plus, s.f.along_k ? kk + plus : kk) + " = " +
             converted(s.group_element(s.regs + "[" + e + "]", l)) + ";");
      }
    }
    indent_--;
    line("}");
  }

  // ---- asynchronous copies (cp.async, compute capability 8.0+; CudaRenderOptions::async_copies)
  // Where both tensor-core factors are 16-bit data staged as stored, in 16-byte groups that lie in
  // shared memory as loaded, chunks go from global to shared memory without registers, through a
  // ring of `stages` buffers: chunks ahead of the one being multiplied are in flight, and one
  // barrier per chunk both publishes a landed chunk and frees the stage the next copy overwrites.
  // Returns the ring's stages that fit the 48 KiB of static shared memory (at most 4), or 1: the
  // register double buffering instead.
  int64_t pipeline_stages(const Staging& a, const Staging& b) const {
    if (!opt_.async_copies || opt_.arch < 80 || !a.copies_as_loaded() || !b.copies_as_loaded()) return 1;
    auto bytes = [&](const Staging& s) { return (s.k_major ? kMmaK : s.extent) * s.pitch * 2; };  // 16-bit values
    return std::min<int64_t>(4, (48 << 10) / (bytes(a) + bytes(b)));
  }
  template <class Products>
  void emit_mma_pipeline(const Staging& sa, const Staging& sb, const std::vector<Expr>& base, int64_t stages,
                         const Products& chunk_products) {
    const int64_t T = plan_.shared_threads();
    auto str = [](int64_t v) { return std::to_string(v); };
    auto issue = [&](const std::string& k_start, const std::string& stage) {
      line("if (" + k_start + " < " + k_end_ + ") {");
      indent_++;
      line("if (tiny_aligned) {");
      indent_++;
      for (const Staging* s : {&sa, &sb}) stage_load(*s, base, T, k_start, stage, /*aligned=*/true);
      indent_--;
      line("} else {");
      indent_++;
      for (const Staging* s : {&sa, &sb}) stage_load(*s, base, T, k_start, stage, /*aligned=*/false);
      indent_--;
      line("}");
      indent_--;
      line("}");
      line("tiny_cp_async_commit();");  // every thread commits a group per chunk, empty past the end
    };
    for (int64_t st = 0; st + 1 < stages; st++) issue(k_begin_ + " + " + str(st * kMmaK), str(st));
    // unrolled by the ring's size, so that every stage is a constant (addresses fold into offsets)
    line("for (int k0 = " + k_begin_ + "; k0 < " + k_end_ + "; k0 += " + str(stages * kMmaK) + ") {");
    indent_++;
    for (int64_t st = 0; st < stages; st++) {
      const std::string k = st ? "k0 + " + str(st * kMmaK) : "k0";
      if (st) line("if (" + k + " >= " + k_end_ + ") break;");
      line("tiny_cp_async_wait(" + str(stages - 2) + ");  // this thread's copies of chunk " + k + " have landed");
      line("__syncthreads();  // everyone's have, and every warp is done with the stage the next copies overwrite");
      issue(k + " + " + str((stages - 1) * kMmaK), str((st + stages - 1) % stages));
      Staging ra = sa, rb = sb;
      ra.array += "[" + str(st) + "]";
      rb.array += "[" + str(st) + "]";
      chunk_products(ra, rb);
    }
    indent_--;
    line("}");
    line("tiny_cp_async_wait(0);  // only groups past the end are left: none copies anything");
    line("__syncthreads();  // the next block's first copies overwrite stages still being read");
  }

  // ---- tensor cores (planned in lowering.cpp)
  // Per chunk of kMmaK reduce steps the threads stage both factors in the form the tensor
  // cores take (16-bit values, or TF32 rounded to nearest, ties away) in shared memory with
  // the steps innermost, and every warp loads its fragments from there. Tensor cores add the
  // products in an order of their own (and TF32 rounds the factors), so results differ from
  // the CPU's by rounding, as cuBLAS's do from PyTorch's CPU backend.
  void emit_mma_tiles() {
    const Shape& shape = k_.shape;
    const int64_t M = shape[size_t(plan_.tile_d2)], N = shape[size_t(plan_.tile_d)], T = plan_.shared_threads();
    const int64_t BM = plan_.block_rows(), BN = plan_.block_cols(), WTM = plan_.mma_m * 16, WTN = plan_.mma_n * 8;
    const bool tf32 = plan_.mma == CudaMma::TF32;
    const int64_t step = tf32 ? 8 : 16;  // reduce steps per mma.sync
    auto str = [](int64_t v) { return std::to_string(v); };
    const std::string held = tf32 ? "u32" : "u16";
    std::string bm, bn;
    std::vector<Expr> base = open_block_loop(&bm, &bn);
    // lane = 4 * g + t (the PTX ISA's groupID and threadID_in_group); the warp's first row and column
    line("const int tiny_warp = (int)threadIdx.x / 32, tiny_lane = (int)threadIdx.x % 32, tiny_g = tiny_lane / 4, tiny_t = tiny_lane % 4;");
    line("const int tiny_wm = tiny_warp / " + str(plan_.mma_warps_n) + " * " + str(WTM) + ", tiny_wn = tiny_warp % " +
         str(plan_.mma_warps_n) + " * " + str(WTN) + ";");
    std::vector<std::string> acc;  // piece (i, j) of the warp: acc[i * plan_.mma_n + j], its 4 values
    for (int64_t p = 0; p < plan_.mma_m * plan_.mma_n; p++) {
      acc.push_back(tmp("acc"));
      line("float " + acc.back() + "[4] = {0.0f, 0.0f, 0.0f, 0.0f};");
    }
    const std::string to_shared = tf32 ? "tiny_to_tf32" : plan_.mma == CudaMma::F16 ? "tiny_float_to_half" : "tiny_float_to_bf16";
    Staging sa{plan_.row_factor, "tiny_as", "float", true, bm, BM, M, kMmaK, to_shared},
        sb{plan_.col_factor, "tiny_bs", "float", false, bn, BN, N, kMmaK, to_shared};
    const DType held16 = plan_.mma == CudaMma::F16 ? DType::Float16 : DType::BFloat16;
    for (Staging* s : {&sa, &sb}) {
      if (!tf32 && raw16_factor(s->f.node, held16)) {
        s->raw16 = true;
        s->type = "u16";
        s->to_shared = "(u16)";
      }
      plan_vector_staging(*s, base);
      // rows padded so that the 8 rows a fragment load reads fall in different banks: by 16
      // bytes (an ldmatrix row), or for TF32 k-major by 8 words (4 steps x 8 rows of 32-bit loads)
      s->pitch = s->k_major ? s->extent + 8 : kMmaK + (tf32 ? 4 : 8);
    }
    const int64_t stages = pipeline_stages(sa, sb);
    for (Staging* s : {&sa, &sb})
      line("alignas(16) __shared__ " + held + " " + s->array + (stages > 1 ? "[" + str(stages) + "]" : "") + "[" +
           str(s->k_major ? kMmaK : s->extent) + "][" + str(s->pitch) + "];");
    declare_staging_alignment();
    // One chunk's products, from shared memory as `a` and `b` name it.
    auto chunk_products = [&](const Staging& a, const Staging& b) {
      line("#pragma unroll");
      line("for (int kk = 0; kk < " + str(kMmaK) + "; kk += " + str(step) + ") {");
      indent_++;
      // Fragments (the PTX ISA's layouts; g = lane / 4, t = lane % 4): A's piece i holds rows g and
      // g + 8 at steps 2t, 2t + 1 and those + 8 (TF32: rows g, g + 8 at steps t, t + 4); B's piece
      // j column g at the same steps. By ldmatrix: lane L names row L % 8 of matrix L / 8, 16
      // bytes of a row of [m][k] memory (or, transposed, of a k-major factor's [k][m]).
      const int64_t H = tf32 ? 4 : 8;  // a matrix's width in steps (16 bytes)
      // B's pieces j and j + 1 come from one ldmatrix.x4 (its matrices 2 and 3: piece j + 1)
      const bool ldsm_b = sb.k_major ? !tf32 : opt_.ldmatrix;
      auto fragment_loads = [&](const Staging& s, const std::string& first, const std::string& name, bool a_side, int64_t pieces) {
        // an element pair (16-bit) or element (TF32) at row or column `at`, step `k`, of [m][k] memory
        auto held_at = [&](const std::string& at, const std::string& k) {
          return tf32 ? s.array + "[" + at + "][kk + tiny_t" + k + "]" : "tiny_pair(&" + s.array + "[" + at + "][kk + 2 * tiny_t" + k + "])";
        };
        const std::string half_k = tf32 ? " + 4" : " + 8";
        const int64_t count = a_side ? 4 : 2 * pieces;
        if (s.k_major && tf32) {  // [k][m]: 32-bit loads, the steps t and t + 4 of rows (columns) g and g + 8
          std::string g0 = first + " + tiny_g", g8 = first + " + 8 + tiny_g", lo = s.array + "[kk + tiny_t][",
                      hi = s.array + "[kk + tiny_t + 4][";
          line("const u32 " + name + "[" + str(count) + "] = {" +
               (a_side ? lo + g0 + "], " + lo + g8 + "], " + hi + g0 + "], " + hi + g8 + "]" : lo + g0 + "], " + hi + g0 + "]") + "};");
        } else if (s.k_major) {  // A: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15); B: (k 0-7), (k 8-15)
          line("u32 " + name + "[" + str(count) + "];");
          std::string k_row = a_side ? "kk + tiny_lane / 16 * 8 + tiny_lane % 8" : "kk + tiny_lane / 8 % 2 * 8 + tiny_lane % 8";
          std::string m_at = first + (a_side ? " + tiny_lane / 8 % 2 * 8" : pieces > 1 ? " + tiny_lane / 16 * 8" : "");
          line("tiny_ldsm_trans_x" + str(count) + "(" + name + ", &" + s.array + "[" + k_row + "][" + m_at + "]);");
        } else if (opt_.ldmatrix) {
          line("u32 " + name + "[" + str(count) + "];");
          std::string row = a_side ? first + " + tiny_lane % 16" : first + (pieces > 1 ? " + tiny_lane / 16 * 8" : "") + " + tiny_lane % 8";
          std::string k_at = a_side ? "kk + tiny_lane / 16 * " + str(H) : "kk + tiny_lane / 8 % 2 * " + str(H);
          line("tiny_ldsm_x" + str(count) + "(" + name + ", &" + s.array + "[" + row + "][" + k_at + "]);");
        } else if (a_side) {
          std::string r0 = first + " + tiny_g", r1 = first + " + 8 + tiny_g";
          line("const u32 " + name + "[4] = {" + held_at(r0, "") + ", " + held_at(r1, "") + ", " + held_at(r0, half_k) + ", " +
               held_at(r1, half_k) + "};");
        } else {
          std::string c = first + " + tiny_g";
          line("const u32 " + name + "[2] = {" + held_at(c, "") + ", " + held_at(c, half_k) + "};");
        }
    };
    std::vector<std::string> fa, fb;
    for (int64_t i = 0; i < plan_.mma_m; i++) {
      fa.push_back(tmp("fa"));
      fragment_loads(a, "tiny_wm + " + str(i * 16), fa.back(), true, 1);
    }
    for (int64_t j = 0; j < plan_.mma_n;) {
      int64_t pieces = ldsm_b && j + 1 < plan_.mma_n ? 2 : 1;
      std::string name = tmp("fb");
      fragment_loads(b, "tiny_wn + " + str(j * 8), name, false, pieces);
      fb.push_back(name);
      if (pieces == 2) fb.push_back(name + " + 2");
      j += pieces;
    }
    for (int64_t i = 0; i < plan_.mma_m; i++)
      for (int64_t j = 0; j < plan_.mma_n; j++)
        line("tiny_mma_" + plan_.mma_name() + "(" + acc[size_t(i * plan_.mma_n + j)] + ", " + fa[size_t(i)] + ", " + fb[size_t(j)] + ");");
    indent_--;
    line("}");
    };
    if (stages > 1) {
      emit_mma_pipeline(sa, sb, base, stages, chunk_products);
    } else {
      // the next chunk's factors wait in registers while the block computes from this one
      for (Staging* s : {&sa, &sb}) declare_staging_registers(*s, T);
      for (Staging* s : {&sa, &sb}) stage_load(*s, base, T, k_begin_);
      line("for (int k0 = " + k_begin_ + "; k0 < " + k_end_ + "; k0 += " + str(kMmaK) + ") {");
      indent_++;
      for (Staging* s : {&sa, &sb}) stage_store(*s, T);
      line("__syncthreads();");
      line("if (k0 + " + str(kMmaK) + " < " + k_end_ + ") {");
      indent_++;
      for (Staging* s : {&sa, &sb}) stage_load(*s, base, T, "k0 + " + str(kMmaK));
      indent_--;
      line("}");
      chunk_products(sa, sb);
      line("__syncthreads();");
      indent_--;
      line("}");
    }
    if (plan_.split > 1) {
      std::vector<std::string> values;
      for (auto& a : acc)
        for (int e = 0; e < 4; e++) values.push_back(a + "[" + str(e) + "]");
      combine_block_slices(values, DType::Float32);
    }
    // stores: value e of a piece is at row g (+ 8 for e >= 2), column 2 t + e % 2 of the piece;
    // those past the ends of partial blocks are not stored
    const Node* r = find_tiled_reduce(k_, base, -1, [&](int64_t size) { return new_var("", size); })->reduce;
    for (int64_t i = 0; i < plan_.mma_m; i++)
      for (int64_t h = 0; h < 2; h++) {
        std::string row = tmp("row");
        line("const int " + row + " = " + bm + " * " + str(BM) + " + tiny_wm + " + str(i * 16 + h * 8) + " + tiny_g;");
        line("if (" + row + " < " + str(M) + ") {");
        indent_++;
        memo_.emplace_back();
        for (int64_t j = 0; j < plan_.mma_n; j++) {
          std::string col = tmp("col");
          line("const int " + col + " = " + bn + " * " + str(BN) + " + tiny_wn + " + str(j * 8) + " + 2 * tiny_t;");
          // the pair shares its guard where N is even (the column is)
          for (int64_t e = 0; e < 2; e++) {
            if (e == 0 || N % 2) {
              line("if (" + col + (e ? " + 1" : "") + " < " + str(N) + ") {");
              indent_++;
              memo_.emplace_back();
            }
            std::vector<Expr> o = base;
            o[size_t(plan_.tile_d2)] = new_var(row, M);
            o[size_t(plan_.tile_d)] = e ? add(new_var(col, N - 1), cnst(1)) : new_var(col, N);
            auto ctx = find_tiled_reduce(k_, o, -1, [&](int64_t size) { return new_var("", size); });
            remember(context_key(r, ctx->idx, ctx->valid),
                     value(DType::Float32, acc[size_t(i * plan_.mma_n + j)] + "[" + str(2 * h + e) + "]"));
            emit_stores(o);
            if (e == 1 || N % 2) {
              memo_.pop_back();
              indent_--;
              line("}");
            }
          }
        }
        memo_.pop_back();
        indent_--;
        line("}");
      }
    close_block_loop();
  }

  // ---- vector lanes (see the header; planned in lowering.cpp)
  static constexpr int64_t kLanes = kCudaLanes;
  bool lane_run(const Expr& e) const { return tiny::lane_run(e, lane_var_, kLanes); }
  bool lane_dependent(const std::vector<Expr>& idx, const Expr& valid) const {
    for (auto& e : idx)
      if (uses_vars(e, lane_var_, INT32_MAX)) return true;
    return uses_vars(valid, lane_var_, INT32_MAX);
  }

  // The element of buffer `buf` at `idx` (masked by `valid`) as a memory-typed
  // expression: in a vector pass, one lane of a vector load where the lanes run
  // along the buffer and agree on the mask.
  std::string load_element(int buf, DType dt, const std::vector<Expr>& idx, const Shape& shape, const Expr& valid) {
    std::string b = "b" + std::to_string(buf);
    Expr e = row_major(idx, shape);
    if (lane_ < 0 || !lane_vectors_ || !lane_run(e) || uses_vars(valid, lane_var_, INT32_MAX))
      return b + "[" + load_index(idx, shape, valid) + "]";
    std::string key = b + "#" + to_string(e) + "|" + to_string(valid);
    auto it = vector_loads_.find(key);
    if (it == vector_loads_.end()) {
      std::string vt = std::string("tiny_vec4<") + mem_type(dt) + ">";
      std::string ld = "*(const " + vt + "*)(" + b + " + " + lane_base(e) + ")";
      if (!is_true(valid)) ld = condition(valid) + " ? " + ld + " : " + vt + "{}";
      it = vector_loads_.emplace(key, define(vt, ld, "q")).first;
      vector_bytes_[buf] = kLanes * itemsize(dt);
    }
    return it->second + ".v[" + std::to_string(lane_) + "]";
  }
  // A lane run's index at lane 0, as a temporary.
  std::string lane_base(const Expr& e) {
    std::string name = var_names_[size_t(lane_var_)];
    var_names_[size_t(lane_var_)] = "0";
    bool wide = !fits32(e);
    std::string ix = define(wide ? "i64" : "int", render_expr(e, wide), "x");
    var_names_[size_t(lane_var_)] = name;
    return ix;
  }

  // Every lane's outputs, then their stores: twice, with vector accesses where
  // the buffers they touch are aligned for them, else element by element.
  void emit_lanes(const std::vector<Expr>& idx) {
    indent_++;
    std::string vectors = capture([&] { lane_pass(idx, true); });
    std::string scalars = capture([&] { lane_pass(idx, false); });
    indent_--;
    line("if (" + aligned_test() + ") {");
    body_ << vectors;
    line("} else {");
    body_ << scalars;
    line("}");
  }
  // The condition that the buffers of this pass's vector accesses are all
  // aligned for them ("" when it made none); notes that the kernel has some.
  std::string aligned_test() {
    vectors_ |= !vector_bytes_.empty();
    std::string bits;
    for (auto& [buf, bytes] : vector_bytes_)
      bits += (bits.empty() ? "" : " | ") + std::string("((u64)b") + std::to_string(buf) + " & " + std::to_string(bytes - 1) + "ull)";
    return bits.empty() ? "" : "(" + bits + ") == 0ull";
  }
  // `body` once per lane, the lane's variable (the newest) naming it; values
  // that do not depend on the lane are computed once for all of them.
  void for_each_lane(bool vectors, const std::function<void()>& body) {
    lane_vectors_ = vectors;
    vector_loads_.clear();
    memo_.emplace_back();
    lane_shared_ = memo_.size() - 1;
    for (int l = 0; l < int(kLanes); l++) {
      lane_ = l;
      var_names_[size_t(lane_var_)] = std::to_string(l);
      memo_.emplace_back();
      body();
      memo_.pop_back();
    }
    lane_ = -1;
    memo_.pop_back();
  }
  void lane_pass(const std::vector<Expr>& idx, bool vectors) {
    std::vector<std::vector<std::string>> values(k_.outputs.size());
    std::vector<std::string> scalar_stores;
    for_each_lane(vectors, [&] {
      for (size_t i = 0; i < k_.outputs.size(); i++) {
        const KernelOutput& o = k_.outputs[i];
        std::string m = stored_value(o, idx);
        values[i].push_back(m);
        if (!vectors)
          scalar_stores.push_back("b" + std::to_string(o.buffer) + "[" + index(o.store.index_valid(idx).first) + "] = " + m + ";");
      }
    });
    for (auto& s : scalar_stores) line(s);
    if (vectors)
      for (size_t i = 0; i < k_.outputs.size(); i++) {
        const KernelOutput& o = k_.outputs[i];
        DType dt = k_.buffers[size_t(o.buffer)]->dtype();
        std::string vt = std::string("tiny_vec4<") + mem_type(dt) + ">", w = tmp("w");
        line(vt + " " + w + ";");
        for (int64_t l = 0; l < kLanes; l++) line(w + ".v[" + std::to_string(l) + "] = " + values[i][size_t(l)] + ";");
        line("*(" + vt + "*)(b" + std::to_string(o.buffer) + " + " + lane_base(o.store.index_valid(idx).first) + ") = " + w + ";");
        vector_bytes_[o.buffer] = kLanes * itemsize(dt);
      }
  }
  // What `emit` writes to the body, returned instead.
  std::string capture(const std::function<void()>& emit) {
    std::ostringstream saved;
    std::swap(saved, body_);
    emit();
    std::swap(saved, body_);
    return saved.str();
  }

  Expr new_var(const std::string& name, int64_t size) {
    int id = int(var_names_.size());
    var_names_.push_back(name);
    return var(id, size);
  }
  static const char* index_type(int64_t extent) { return extent - 1 <= INT32_MAX ? "int" : "i64"; }

  void build_body() {
    const Shape& shape = k_.shape;
    indent_ = 1;
    memo_.emplace_back();
    if (plan_.mma != CudaMma::None) {
      emit_mma_tiles();
      return;
    }
    if (plan_.shared) {
      emit_shared_tiles();
      return;
    }
    if (plan_.split > 1 && !plan_.split_threads) {
      // blocks [gid * split, (gid + 1) * split) share output gid, one slice each
      std::string s = std::to_string(plan_.split) + "u";
      line("const unsigned tiny_slice = blockIdx.x % " + s + ";");
      line("for (i64 gid = tiny_begin + (i64)(blockIdx.x / " + s + "); gid < tiny_end; gid += (i64)(gridDim.x / " + s +
           ")) {");
    } else if (plan_.block_reduce) {
      line("for (i64 gid = tiny_begin + (i64)blockIdx.x; gid < tiny_end; gid += (i64)gridDim.x) {");
    } else if (plan_.split_threads) {
      // thread t takes tile t % n of the n in [begin, end) and slice t / n of its reduce
      // (neighbouring threads, neighbouring tiles); the launch has a thread for each, once
      std::string s = std::to_string(plan_.split) + "u";
      line("const i64 tiny_n = tiny_end - tiny_begin, tiny_t = (i64)blockIdx.x * blockDim.x + threadIdx.x;");
      line("const unsigned tiny_slice = (unsigned)(tiny_t / tiny_n);");
      line("for (i64 gid = tiny_begin + tiny_t % tiny_n; tiny_slice < " + s + " && gid < tiny_end; gid = tiny_end) {");
    } else {
      line("for (i64 gid = tiny_begin + (i64)blockIdx.x * blockDim.x + threadIdx.x; gid < tiny_end;");
      line("     gid += (i64)gridDim.x * blockDim.x) {");
    }
    indent_++;
    memo_.emplace_back();
    std::vector<Expr> idx(shape.size(), cnst(0));
    // gid counts output elements, or tiles: then dims d2 and d count tiles, each
    // coordinate the tile's first row or column
    Shape grid = shape;
    if (plan_.tiled()) {
      grid[size_t(plan_.tile_d)] /= plan_.tile_cols;
      if (plan_.tile_d2 >= 0) grid[size_t(plan_.tile_d2)] /= plan_.tile_rows;
    }
    if (plan_.lanes > 1) grid[size_t(plan_.lanes_d)] /= plan_.lanes;
    int64_t total = numel(grid);
    bool narrow = total - 1 <= INT32_MAX;
    if (narrow) line("const u32 g = (u32)gid;");
    int64_t stride = total;
    bool first = true;
    for (size_t d = 0; d < grid.size(); d++) {
      if (grid[d] == 0) break;
      stride /= grid[d];
      if (shape[d] == 1) continue;
      std::string name = "i" + std::to_string(d);
      std::string g = narrow ? "g" : "gid";
      std::string e = stride == 1 ? g : "(" + g + " / " + std::to_string(stride) + (narrow ? "u" : "ll") + ")";
      if (!first) e = "(" + e + " % " + std::to_string(grid[d]) + (narrow ? "u" : "ll") + ")";
      first = false;
      int64_t step = int(d) == plan_.tile_d ? plan_.tile_cols : int(d) == plan_.tile_d2 ? plan_.tile_rows : 1;
      if (step > 1) e = "(" + e + " * " + std::to_string(step) + ")";
      line("const " + std::string(index_type(shape[d])) + " " + name + " = (" + index_type(shape[d]) + ")" + e + ";");
      // a tile's first coordinate plus its offset stays inside the dim
      idx[d] = int(d) == plan_.lanes_d ? new_var(name, grid[d]) : new_var(name, shape[d] - step + 1);
    }
    if (plan_.lanes > 1) {
      // lane l of group q is output q * lanes + l; the lane is the newest variable
      Expr lane = new_var("0", plan_.lanes);
      lane_var_ = int(lane->value);
      idx[size_t(plan_.lanes_d)] = add(mul(idx[size_t(plan_.lanes_d)], plan_.lanes), lane);
      emit_lanes(idx);
    } else if (plan_.tiled()) {
      emit_tile(idx);
    } else {
      if (plan_.split > 1) {  // every reduce's partial first, then the blocks meet once
        for (auto& o : k_.outputs)
          for (const NodeRef& root : {o.value, o.scatter_index})
            if (root) hoist_reduces(root.get(), idx, cnst(1), int(var_names_.size()));
        meet_split_blocks();
      }
      emit_stores(idx);
    }
    memo_.pop_back();
    indent_--;
    line("}");
  }

  // ---- index expressions
  std::string render_expr(const Expr& e, bool wide) {
    auto c = [&](int64_t v) {
      if (wide) return i64_literal(v);
      return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
    };
    switch (e->op) {
      case EOp::Const: return c(e->value);
      case EOp::Var: return wide ? "(i64)" + var_names_[size_t(e->value)] : var_names_[size_t(e->value)];
      case EOp::Add: {
        std::string s = "(";
        for (size_t i = 0; i < e->src.size(); i++) s += (i ? " + " : "") + render_expr(e->src[i], wide);
        return s + ")";
      }
      case EOp::Mul: return "(" + render_expr(e->src[0], wide) + " * " + c(e->value) + ")";
      case EOp::Div:
      case EOp::Mod: {
        bool div = e->op == EOp::Div;
        std::string a = render_expr(e->src[0], wide);
        if (e->src[0]->vmin >= 0) {  // unsigned division by a constant is cheapest
          if (wide) return "(i64)((u64)" + a + (div ? " / " : " % ") + std::to_string(e->value) + "ull)";
          return "(int)((u32)" + a + (div ? " / " : " % ") + std::to_string(e->value) + "u)";
        }
        std::string r = std::string(div ? "tiny_floordiv(" : "tiny_floormod(") + a + ", " + i64_literal(e->value) + ")";
        return wide ? r : "(int)" + r;
      }
      case EOp::Lt:
        return std::string(wide ? "(i64)" : "(int)") + "(" + render_expr(e->src[0], wide) + " < " + c(e->value) + ")";
      case EOp::And: return "(" + render_expr(e->src[0], wide) + " & " + render_expr(e->src[1], wide) + ")";
      case EOp::Bounded: return render_expr(e->src[0], wide);
    }
    return "0";
  }
  // An index as a named temporary (memoized per scope like the LLVM builder).
  std::string index(const Expr& e) {
    if (e->is_const()) return i64_literal(e->value);
    if (e->op == EOp::Var) return var_names_[size_t(e->value)];
    std::string key = "#" + to_string(e);
    std::string v = lookup(key);
    if (!v.empty()) return v;
    bool wide = !fits32(e);
    v = define(wide ? "i64" : "int", render_expr(e, wide), "x");
    remember(key, v);
    return v;
  }
  std::string condition(const Expr& valid) { return index(valid); }

  // The load index, clamped to 0 where the element is masked out.
  std::string load_index(const std::vector<Expr>& idx, const Shape& shape, const Expr& valid) {
    return load_index_flat(row_major(idx, shape), valid);
  }
  std::string load_index_flat(const Expr& flat, const Expr& valid) {
    std::string ix = index(flat);
    if (is_true(valid)) return ix;
    return define(fits32(flat) ? "int" : "i64", condition(valid) + " ? " + ix + " : 0", "x");
  }

  // ---- conversions between memory and registers
  std::string from_mem(const std::string& v, DType t) {
    switch (t) {
      case DType::Bool: return "(" + v + " != 0)";
      case DType::Float16: return "tiny_half_to_float(" + v + ")";
      case DType::BFloat16: return "tiny_bf16_to_float(" + v + ")";
      default: return v;
    }
  }
  std::string to_mem(const std::string& v, DType t) {
    switch (t) {
      case DType::Bool: return "(u8)" + v;
      case DType::Float16: return "tiny_float_to_half(" + v + ")";
      case DType::BFloat16: return "tiny_float_to_bf16(" + v + ")";
      default: return v;
    }
  }
  std::string round_to(const std::string& v, DType t) {
    if (t == DType::Float16) return "tiny_round_f16(" + v + ")";
    if (t == DType::BFloat16) return "tiny_round_bf16(" + v + ")";
    return v;
  }

  std::string zero(DType t) {
    if (t == DType::Bool) return "false";
    if (reg_is_float(t)) return float_literal(0.0, t);
    return std::string("(") + reg_type(t) + ")0";
  }
  std::string constant(const Scalar& s, DType t) {
    if (reg_is_float(t)) return float_literal(s.to_double(), t);
    if (t == DType::Bool) return s.to_int() != 0 ? "true" : "false";
    return std::string("(") + reg_type(t) + ")" + i64_literal(s.to_int());
  }

  // ---- stores
  void emit_stores(const std::vector<Expr>& idx) {
    for (auto& o : k_.outputs) {
      if (o.scatter_index) continue;
      std::string m = stored_value(o, idx);
      auto iv = o.store.index_valid(idx);
      std::string ix = index(iv.first);
      std::string stmt = "b" + std::to_string(o.buffer) + "[" + ix + "] = " + m + ";";
      line(plan_.block_reduce ? "if (threadIdx.x == 0) " + stmt : stmt);
    }
    for (auto& o : k_.outputs)
      if (o.scatter_index) emit_scatter(o, idx);
  }

  // Output `o`'s value at `idx` in its buffer's memory type.
  std::string stored_value(const KernelOutput& o, const std::vector<Expr>& idx) {
    DType dt = k_.buffers[size_t(o.buffer)]->dtype();
    // Pure data movement stores the bits it loaded (NaN payloads survive).
    std::string m = o.value->dtype == dt ? eval_bits(o.value.get(), idx, cnst(1)) : "";
    return m.empty() ? to_mem(eval(o.value.get(), idx, cnst(1)), dt) : m;
  }

  // Stores (or combines) at a data-dependent flat index; out-of-range indices
  // are skipped (the torch layer has checked them already). The index and the
  // value are computed by every thread (a block reduction needs them all).
  void emit_scatter(const KernelOutput& o, const std::vector<Expr>& idx) {
    DType dt = k_.buffers[size_t(o.buffer)]->dtype();
    std::string at = eval(o.scatter_index.get(), idx, cnst(1));
    std::string v = eval(o.value.get(), idx, cnst(1));
    std::string buf = "b" + std::to_string(o.buffer);
    line(std::string(plan_.block_reduce ? "if (threadIdx.x == 0 && " : "if (") + at + " >= 0LL && " + at + " < " +
         i64_literal(k_.buffers[size_t(o.buffer)]->numel()) + ") {");
    indent_++;
    memo_.emplace_back();  // values computed here do not exist after the block
    if (o.accumulate) v = value(dt, combine(o.rop, from_mem(buf + "[" + at + "]", dt), v, dt));
    line(buf + "[" + at + "] = " + to_mem(v, dt) + ";");
    memo_.pop_back();
    indent_--;
    line("}");
  }

  // The value as stored bits when it is only loads seen through views; "" when it computes.
  std::string eval_bits(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    auto load = k_.loads.find(n);
    if (load != k_.loads.end()) {
      DType dt = k_.buffers[size_t(load->second)]->dtype();
      if (dt != n->dtype) return "";
      return define(mem_type(dt), load_element(load->second, dt, idx, n->shape, valid));
    }
    if (n->op == Op::Contiguous) return eval_bits(n->src[0].get(), idx, valid);
    if (n->op != Op::View) return "";
    const Node* src = n->src[0].get();
    auto [flat, v2] = n->args.st.index_valid(idx);
    std::vector<Expr> sub = unflatten(flat, src->shape);
    if (is_false(v2)) return "";
    std::string v = eval_bits(src, sub, land(valid, v2));
    if (!v.empty() && !is_true(v2))
      v = define(mem_type(n->dtype), condition(v2) + " ? " + v + " : (" + mem_type(n->dtype) + ")0");
    return v;
  }

  static std::vector<Expr> unflatten(const Expr& flat, const Shape& shape) {
    std::vector<Expr> sub(shape.size());
    int64_t acc = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      sub[d] = mod(floordiv(flat, acc), shape[d]);
      acc *= shape[d];
    }
    return sub;
  }

  // ---- expression evaluation
  std::string eval(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    std::string key = context_key(n, idx, valid);
    std::string v = lookup(key);
    if (!v.empty()) return v;
    v = eval_uncached(n, idx, valid);
    if (lane_ >= 0 && !lane_dependent(idx, valid)) memo_[lane_shared_][key] = v;  // every lane's value
    else remember(key, v);
    return v;
  }

  // Names a computed value (constants and names stay inline).
  std::string value(DType t, const std::string& expr) { return define(reg_type(t), expr); }

  std::string eval_uncached(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    auto load = k_.loads.find(n);
    if (load != k_.loads.end()) {
      DType dt = k_.buffers[size_t(load->second)]->dtype();
      return value(dt, from_mem(load_element(load->second, dt, idx, n->shape, valid), dt));
    }
    switch (n->op) {
      case Op::Const: return constant(n->args.value, n->dtype);
      case Op::Param: {
        // the launch word holds a double for float dtypes, else an int64 (kernel.h)
        std::string bits = "p" + std::to_string(param_word_.at(n));
        if (reg_is_float(n->dtype)) return value(n->dtype, std::string("(") + reg_type(n->dtype) + ")__longlong_as_double((i64)" + bits + ")");
        if (n->dtype == DType::Bool) return value(n->dtype, "(" + bits + " != 0ull)");
        return value(n->dtype, std::string("(") + reg_type(n->dtype) + ")" + bits);
      }
      case Op::Arange: {
        std::string i = index(row_major(idx, n->shape));
        if (is_float(n->dtype)) {
          std::string x = "(" + float_literal(n->args.value.to_double(), DType::Float64) + " + (double)" + i + " * " +
                          float_literal(n->args.value2.to_double(), DType::Float64) + ")";
          return value(n->dtype, round_to(std::string("(") + reg_type(n->dtype) + ")" + x, n->dtype));
        }
        return value(n->dtype, std::string("(") + reg_type(n->dtype) + ")((u64)" + i64_literal(n->args.value.to_int()) +
                                   " + (u64)" + i + " * (u64)" + i64_literal(n->args.value2.to_int()) + ")");
      }
      case Op::Rand: {
        std::string i = index(row_major(idx, n->shape));
        // (seed, offset) are launch words
        std::string seed = "p" + std::to_string(param_word_.at(n)), offset = "p" + std::to_string(param_word_.at(n) + 1);
        return value(DType::Float32, "tiny_rand((u64)" + i + " + " + offset + ", (u32)" + seed + ", (u32)(" + seed + " >> 32))");
      }
      case Op::View: {
        const Node* src = n->src[0].get();
        auto [flat, v2] = n->args.st.index_valid(idx);
        std::vector<Expr> sub = unflatten(flat, src->shape);
        if (is_false(v2)) return zero(n->dtype);
        std::string v = eval(src, sub, land(valid, v2));
        if (!is_true(v2)) v = value(n->dtype, condition(v2) + " ? " + v + " : " + zero(n->dtype));
        return v;
      }
      case Op::Contiguous: return eval(n->src[0].get(), idx, valid);
      case Op::Reduce: return reduce(n, idx, valid);
      case Op::Gather: {
        // the source at a runtime flat index, clamped into range as on the CPU
        const Node* src = n->src[0].get();
        int64_t count = std::max<int64_t>(1, src->numel());
        std::string at = eval(n->src[1].get(), idx, valid);
        std::string name = define("i64", "(" + at + " >= 0LL && " + at + " < " + i64_literal(count) + ") ? " + at + " : 0LL", "gi");
        Expr flat = new_var(name, count);
        return eval(src, unflatten(flat, src->shape), valid);
      }
      case Op::Where: {
        std::string c = eval(n->src[0].get(), idx, valid);
        std::string a = eval(n->src[1].get(), idx, valid);
        std::string b = eval(n->src[2].get(), idx, valid);
        return value(n->dtype, c + " ? " + a + " : " + b);
      }
      case Op::Cast: return cast(eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
      case Op::Bitcast: return bitcast(eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
      default: break;
    }
    if (is_unary(n->op)) return unary(n->op, eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
    if (is_binary(n->op))
      return binary(n->op, eval(n->src[0].get(), idx, valid), eval(n->src[1].get(), idx, valid), n->src[0]->dtype);
    throw std::runtime_error(std::string("tiny cuda: cannot generate ") + op_name(n->op));
  }

  // ---- reductions
  std::string reduce(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    const Node* src = n->src[0].get();
    DType dt = n->dtype;
    std::vector<int> axes;
    for (int a : n->args.axes) {
      if (src->shape[size_t(a)] == 0) return value(dt, identity(n->args.rop, dt));  // empty: nothing to combine
      if (src->shape[size_t(a)] > 1) axes.push_back(a);
    }
    std::string acc = tmp("acc");
    line(std::string(reg_type(dt)) + " " + acc + " = " + identity(n->args.rop, dt) + ";");
    std::vector<Expr> sub = idx;
    auto accumulate_one = [&]() { line(acc + " = " + accumulate(n->args.rop, acc, src, sub, valid, dt) + ";"); };
    // the loops' variables first, so reduces inside that do not depend on them are computed before
    int min_id = int(var_names_.size());
    std::vector<std::string> names;
    for (int a : axes) {
      names.push_back(tmp("r"));
      sub[size_t(a)] = new_var(names.back(), src->shape[size_t(a)]);
    }
    hoist_reduces(src, sub, valid, min_id);
    bool cooperative = plan_.block_reduce && reduce_depth_ == 0;
    reduce_depth_++;
    if (cooperative) {
      // The block's threads stride over the flattened reduce axes: by groups of
      // lanes along the last one where its loads run along them (vector loads
      // when aligned), else element by element.
      std::vector<int64_t> sizes;
      for (int a : axes) sizes.push_back(src->shape[size_t(a)]);
      std::string vectors, aligned;
      if (opt_.vector_lanes && !axes.empty() && sizes.back() % kLanes == 0 && lane_ < 0) {
        std::vector<std::string> group_names = names;
        std::vector<int64_t> groups = sizes;
        groups.back() /= kLanes;
        group_names.back() = tmp("r");
        Expr group = new_var(group_names.back(), groups.back());
        Expr lane = new_var("0", kLanes);
        lane_var_ = int(lane->value);
        Expr element = sub[size_t(axes.back())];
        sub[size_t(axes.back())] = add(mul(group, kLanes), lane);
        auto saved = std::move(vector_bytes_);
        vector_bytes_.clear();
        vectors = capture([&] {
          indent_++;
          cooperative_loop(group_names, groups, [&] { for_each_lane(true, accumulate_one); });
          indent_--;
        });
        aligned = aligned_test();
        vector_bytes_ = std::move(saved);
        sub[size_t(axes.back())] = element;
      }
      if (!aligned.empty()) {  // some loads run along the lanes
        line("if (" + aligned + ") {");
        body_ << vectors;
        line("} else {");
        indent_++;
      }
      cooperative_loop(names, sizes, accumulate_one);
      if (!aligned.empty()) {
        indent_--;
        line("}");
      }
      block_combine(acc, n->args.rop, dt);
      if (plan_.split > 1) {
        // this block's partial; the block that meets last combines them (meet_split_blocks), and
        // `acc` then holds the whole reduce where the outputs read it
        stage_partial(acc, n->args.rop, dt);
        reduce_depth_--;
        return round_to(acc, dt);
      }
    } else {
      nested_loops(names, src->shape, axes, accumulate_one);
    }
    reduce_depth_--;
    return value(dt, round_to(acc, dt));
  }

  // The block's threads stride over the row-major elements of `sizes` (a split
  // reduction's blocks over its slices too), each naming its coordinates `names`.
  void cooperative_loop(const std::vector<std::string>& names, const std::vector<int64_t>& sizes,
                        const std::function<void()>& body) {
    int64_t total = 1;
    for (int64_t size : sizes) total *= size;
    std::string rr = tmp("rr");
    const char* t = index_type(total);
    if (plan_.split > 1)
      line(std::string("for (") + t + " " + rr + " = (" + t + ")(tiny_slice * blockDim.x + threadIdx.x); " + rr + " < " +
           std::to_string(total) + "; " + rr + " += " + std::to_string(plan_.split) + " * blockDim.x) {");
    else
      line(std::string("for (") + t + " " + rr + " = threadIdx.x; " + rr + " < " + std::to_string(total) + "; " + rr +
           " += blockDim.x) {");
    indent_++;
    memo_.emplace_back();
    int64_t stride = total;
    for (size_t i = 0; i < sizes.size(); i++) {
      stride /= sizes[i];
      std::string e = stride == 1 ? rr : "(" + rr + " / " + std::to_string(stride) + ")";
      if (i > 0) e = "(" + e + " % " + std::to_string(sizes[i]) + ")";
      line(std::string("const ") + index_type(sizes[i]) + " " + names[i] + " = " + e + ";");
    }
    body();
    memo_.pop_back();
    indent_--;
    line("}");
  }

  // One loop per reduce axis, named `names`, around `body`; values computed inside stay there.
  // `chunk` > 0: the first loop runs over this thread's slice of that many steps (split_threads).
  void nested_loops(const std::vector<std::string>& names, const Shape& shape, const std::vector<int>& axes,
                    const std::function<void()>& body, size_t i = 0, int64_t chunk = 0) {
    if (i == axes.size()) {
      body();
      return;
    }
    int64_t size = shape[size_t(axes[i])];
    const std::string& name = names[i];
    const char* t = index_type(size);
    if (i == 0 && chunk > 0) {
      std::string c = std::to_string(chunk), lo = "(" + std::string(t) + ")(tiny_slice * " + c + "u)";
      line(std::string("for (") + t + " " + name + " = " + lo + "; " + name + " < " + lo + " + " + c + " && " + name +
           " < " + std::to_string(size) + "; " + name + "++) {");
    } else {
      line(std::string("for (") + t + " " + name + " = 0; " + name + " < " + std::to_string(size) + "; " + name + "++) {");
    }
    indent_++;
    memo_.emplace_back();
    nested_loops(names, shape, axes, body, i + 1);
    memo_.pop_back();
    indent_--;
    line("}");
  }

  // Tree reduction of every thread's `acc`; all threads get the result. Through shared
  // memory down to one warp's worth, then by warp shuffles (no barriers): at each step
  // element t combines with element t + s, the same order as a tree all in shared memory.
  // Every warp shuffles (warp 0's result is the block's): all threads meet the same barriers.
  void block_combine(const std::string& acc, ReduceOp op, DType dt) {
    std::string t = reg_type(dt);
    line("{");
    indent_++;
    line(t + "* red = (" + t + "*)tiny_smem;");
    line("red[threadIdx.x] = " + acc + ";");
    line("__syncthreads();");
    line("for (unsigned s = blockDim.x / 2; s >= 32u; s >>= 1) {");
    indent_++;
    line("if (threadIdx.x < s) {");
    indent_++;
    line("const " + t + " a = red[threadIdx.x], b = red[threadIdx.x + s];");
    line("red[threadIdx.x] = " + combine(op, "a", "b", dt) + ";");
    indent_--;
    line("}");
    line("__syncthreads();");
    indent_--;
    line("}");
    line(t + " w = red[threadIdx.x];");
    line("for (unsigned s = 16u; s > 0u; s >>= 1) {");
    indent_++;
    // __shfl_down_sync takes 32- and 64-bit values: narrower integers travel as int
    std::string moved = is_float(dt) || (itemsize(dt) >= 4 && dt != DType::Bool)
                            ? "__shfl_down_sync(0xffffffffu, w, s)"
                            : "(" + t + ")__shfl_down_sync(0xffffffffu, (int)w, s)";
    line("const " + t + " a = w, b = " + moved + ";");
    line("w = " + combine(op, "a", "b", dt) + ";");
    indent_--;
    line("}");
    line("if (threadIdx.x == 0) red[0] = w;");
    line("__syncthreads();");
    line(acc + " = red[0];");
    line("__syncthreads();");
    indent_--;
    line("}");
  }

  // A split block reduce: every block leaves its partial of each of the kernel's reduces in
  // slot (reduce * outputs + gid) * split + slice (thread 0, after block_combine).
  struct StagedReduce {
    std::string acc;
    ReduceOp op;
    DType dt;
  };
  std::string partial_slot(size_t reduce, const std::string& slice) {
    return "tiny_partials + ((i64)" + std::to_string(reduce) + " * " + std::to_string(plan_.launch_outputs) +
           " + gid) * " + std::to_string(plan_.split) + " + " + slice;
  }
  void stage_partial(const std::string& acc, ReduceOp op, DType dt) {
    // a reduce first met after the blocks met would be combined by no one
    if (split_met_) throw std::logic_error("tiny cuda: a split reduce was not computed before the blocks met");
    line("if (threadIdx.x == 0) *(" + std::string(reg_type(dt)) + "*)(" + partial_slot(staged_.size(), "tiny_slice") + ") = " + acc + ";");
    staged_.push_back({acc, op, dt});
  }
  // Where the blocks of an output meet, after all its reduces: the last block to take a ticket
  // (the others return) combines each reduce's partials in slice order, so the result does
  // not depend on which block finished first, and resets the ticket for the next launch.
  // Every reduce meets here at once: a batch norm's backward (a sum of the gradient and one
  // of its product with the normalized input) splits like a lone sum.
  void meet_split_blocks() {
    split_met_ = true;
    const std::string s = std::to_string(plan_.split);
    line("{");
    indent_++;
    line("__shared__ unsigned tiny_ticket;");
    line("if (threadIdx.x == 0) {");
    indent_++;
    line("__threadfence();  // the partials are visible before the ticket is taken");
    line("tiny_ticket = atomicAdd(tiny_tickets + gid, 1u);");
    indent_--;
    line("}");
    line("__syncthreads();");
    line("if (tiny_ticket != " + s + "u - 1u) return;  // one output per block: nothing else to do");
    line("__threadfence();");
    indent_--;
    line("}");
    for (size_t r = 0; r < staged_.size(); r++) {
      const StagedReduce& st = staged_[r];
      const std::string t = reg_type(st.dt);
      line(st.acc + " = " + identity(st.op, st.dt) + ";");
      line("for (unsigned q = threadIdx.x; q < " + s + "u; q += blockDim.x) {");
      indent_++;
      line("const " + t + " part = *(volatile " + t + "*)(" + partial_slot(r, "q") + ");");
      line(st.acc + " = " + combine(st.op, st.acc, "part", st.dt) + ";");
      indent_--;
      line("}");
      block_combine(st.acc, st.op, st.dt);
    }
    line("if (threadIdx.x == 0) tiny_tickets[gid] = 0u;  // ready for the next launch");
  }

  std::string identity(ReduceOp op, DType dt) {
    bool f = reg_is_float(dt);
    switch (op) {
      case ReduceOp::Sum: return zero(dt);
      case ReduceOp::Prod: return f ? float_literal(1.0, dt) : dt == DType::Bool ? "true" : std::string("(") + reg_type(dt) + ")1";
      case ReduceOp::Any: return "false";
      case ReduceOp::All: return "true";
      case ReduceOp::Xor: return zero(dt);
      case ReduceOp::Max:
        if (f) return float_literal(-INFINITY, dt);
        if (dt == DType::Bool) return "false";
        return min_value(dt);
      case ReduceOp::Min:
        if (f) return float_literal(INFINITY, dt);
        if (dt == DType::Bool) return "true";
        return max_value(dt);
    }
    return "0";
  }
  static std::string min_value(DType dt) {
    switch (dt) {
      case DType::Int8: return "(i8)-128";
      case DType::Int16: return "(i16)-32768";
      case DType::Int32: return "(i32)(-2147483647 - 1)";
      case DType::Int64: return "(i64)(-0x7fffffffffffffffLL - 1)";
      default: return std::string("(") + reg_type(dt) + ")0";  // unsigned
    }
  }
  static std::string max_value(DType dt) {
    switch (dt) {
      case DType::UInt8: return "(u8)255";
      case DType::Int8: return "(i8)127";
      case DType::Int16: return "(i16)32767";
      case DType::Int32: return "(i32)2147483647";
      case DType::Int64: return "(i64)0x7fffffffffffffffLL";
      default: return "0";
    }
  }

  // A reduce's running value `acc` combined with its source at `idx`. A float sum adds a
  // product of its own dtype as one fused multiply-add, as the CPU's generator contracts the
  // pair (its Mul and the sum's add allow it): one instruction per step of a matmul's or a
  // convolution's inner loop, where a multiply and an add took two (NVRTC runs --fmad=false,
  // so elementwise products stay rounded as on the CPU).
  std::string accumulate(ReduceOp op, const std::string& acc, const Node* src, const std::vector<Expr>& idx,
                         const Expr& valid, DType dt) {
    bool product = opt_.fused_multiply_add && op == ReduceOp::Sum && src->op == Op::Mul && src->dtype == dt &&
                   (dt == DType::Float32 || dt == DType::Float64) && !k_.loads.count(src);
    if (product) {
      std::string f = eval(src->src[0].get(), idx, valid), g = eval(src->src[1].get(), idx, valid);
      return std::string(dt == DType::Float32 ? "fmaf(" : "fma(") + f + ", " + g + ", " + acc + ")";
    }
    std::string v = eval(src, idx, valid);
    if (src->dtype != dt) v = cast(v, src->dtype, dt);
    return combine(op, acc, v, dt);
  }
  // The combined value as an expression of two names.
  std::string combine(ReduceOp op, const std::string& a, const std::string& v, DType dt) {
    bool f = reg_is_float(dt);
    std::string t = reg_type(dt);
    switch (op) {
      case ReduceOp::Sum:
        if (f) return a + " + " + v;
        if (dt == DType::Bool) return "(" + a + " | " + v + ")";
        return wrap(dt, a, "+", v);
      case ReduceOp::Prod:
        if (f) return a + " * " + v;
        if (dt == DType::Bool) return "(" + a + " & " + v + ")";
        return wrap(dt, a, "*", v);
      case ReduceOp::Any: return "(" + a + " | " + v + ")";
      case ReduceOp::All: return "(" + a + " & " + v + ")";
      case ReduceOp::Xor: return dt == DType::Bool ? "(" + a + " != " + v + ")" : std::string("(") + reg_type(dt) + ")(" + a + " ^ " + v + ")";
      case ReduceOp::Max: return max_min(true, a, v, dt);
      case ReduceOp::Min: return max_min(false, a, v, dt);
    }
    return a;
  }
  // Integer arithmetic that wraps like LLVM's: in a wide unsigned type, then truncated.
  std::string wrap(DType dt, const std::string& a, const char* op, const std::string& b) {
    std::string w = wrap_type(dt);
    return std::string("(") + reg_type(dt) + ")((" + w + ")" + a + " " + op + " (" + w + ")" + b + ")";
  }
  std::string max_min(bool mx, const std::string& a, const std::string& c, DType dt) {
    std::string pick = a + (mx ? " > " : " < ") + c;
    if (reg_is_float(dt)) return "(" + a + " != " + a + " || " + pick + ") ? " + a + " : " + c;  // NaN propagates
    return "(" + pick + ") ? " + a + " : " + c;
  }

  // ---- casts
  std::string cast(const std::string& v, DType from, DType to) {
    if (from == to) return v;
    std::string tt = reg_type(to);
    if (to == DType::Bool) return value(to, "(" + v + " != " + zero(from) + ")");
    if (from == DType::Bool) return value(to, "(" + tt + ")" + v);
    if (is_float(from) && is_float(to)) {
      std::string r = std::string(reg_type(from)) == tt ? v : "(" + tt + ")" + v;
      return value(to, round_to(r, to));
    }
    if (is_float(from)) return value(to, "(" + tt + ")tiny_f2i(" + v + ")");
    if (is_float(to)) return value(to, round_to("(" + tt + ")" + v, to));
    return value(to, "(" + tt + ")" + v);  // C widens by the source's signedness, as LLVM's intcast
  }

  std::string bitcast(const std::string& v, DType from, DType to) {
    // raw bits of `from` as an unsigned integer of its width
    std::string m = to_mem(v, from);
    std::string bits;
    switch (from) {
      case DType::Float32: bits = "__float_as_uint(" + v + ")"; break;
      case DType::Float64: bits = "(u64)__double_as_longlong(" + v + ")"; break;
      default: bits = std::string("(") + same_width_unsigned(from) + ")" + m; break;
    }
    std::string b = define(same_width_unsigned(from), bits, "bits");
    std::string mem;
    switch (to) {
      case DType::Float32: mem = "__uint_as_float((u32)" + b + ")"; break;
      case DType::Float64: mem = "__longlong_as_double((i64)" + b + ")"; break;
      default: mem = std::string("(") + mem_type(to) + ")" + b; break;
    }
    return value(to, from_mem(mem, to));
  }

  // ---- elementwise
  std::string fn1(const char* name, const std::string& a, DType t) {
    std::string n = name;
    if (reg_type(t) == std::string("float")) n += "f";
    return n + "(" + a + ")";
  }
  std::string fn2(const char* name, const std::string& a, const std::string& b, DType t) {
    std::string n = name;
    if (reg_type(t) == std::string("float")) n += "f";
    return n + "(" + a + ", " + b + ")";
  }

  std::string unary(Op op, const std::string& a, DType in, DType out) {
    bool f = reg_is_float(in);
    auto fp = [&](const std::string& r) { return value(out, round_to(r, out)); };
    auto math = [&](const char* name) {
      if (!f) throw std::runtime_error(std::string("tiny cuda: ") + op_name(op) + " on " + dtype_name(in));
      return fp(fn1(name, a, in));
    };
    switch (op) {
      case Op::Neg:
        if (f) return fp("-" + a);
        if (in == DType::Bool) return a;
        return value(out, std::string("(") + reg_type(in) + ")(0ull - (u64)" + a + ")");
      case Op::Not:
        if (in == DType::Bool) return value(out, "!" + a);
        if (f) throw std::runtime_error("tiny cuda: NOT on a float");
        return value(out, std::string("(") + reg_type(in) + ")~" + a);
      case Op::Abs:
        if (f) return value(out, fn1("fabs", a, in));
        if (!is_signed(in)) return a;
        return value(out, a + " < 0 ? " + std::string("(") + reg_type(in) + ")(0ull - (u64)" + a + ") : " + a);
      case Op::Exp: return math("exp");
      case Op::Log: return math("log");
      case Op::Sin: return math("sin");
      case Op::Cos: return math("cos");
      case Op::Sqrt: return math("sqrt");
      case Op::Trunc: return f ? value(out, fn1("trunc", a, in)) : a;
      case Op::Floor: return f ? value(out, fn1("floor", a, in)) : a;
      case Op::Ceil: return f ? value(out, fn1("ceil", a, in)) : a;
      case Op::Round: return f ? value(out, fn1("rint", a, in)) : a;  // half to even
      case Op::Recip:
        if (!f) throw std::runtime_error("tiny cuda: RECIP on an integer");
        return fp(float_literal(1.0, in) + " / " + a);
      case Op::Tan: return math("tan");
      case Op::Erf: return math("erf");
      case Op::Erfinv:  // the CPU's algorithm, not CUDA's erfinv, so both agree
        if (!f) throw std::runtime_error("tiny cuda: ERFINV on an integer");
        return fp(std::string(reg_type(in) == std::string("double") ? "tiny_erfinv_f64(" : "tiny_erfinv_f32(") + a + ")");
      case Op::Erfc: return math("erfc");
      case Op::Exp2: return math("exp2");
      case Op::Sigmoid: {  // as the CPU: 1 / (1 + exp(-x)) in the register type, rounded once
        if (!f) throw std::runtime_error("tiny cuda: SIGMOID on an integer");
        const std::string one = float_literal(1.0, in);
        return fp(one + " / (" + one + " + " + fn1("exp", "-" + a, in) + ")");
      }
      case Op::Log2: return math("log2");
      case Op::Log10: return math("log10");
      case Op::Lgamma: return math("lgamma");
      case Op::Tanh: return math("tanh");
      case Op::Asin: return math("asin");
      case Op::Acos: return math("acos");
      case Op::Atan: return math("atan");
      case Op::Sinh: return math("sinh");
      case Op::Cosh: return math("cosh");
      case Op::Asinh: return math("asinh");
      case Op::Acosh: return math("acosh");
      case Op::Atanh: return math("atanh");
      case Op::Expm1: return math("expm1");
      case Op::Log1p: return math("log1p");
      case Op::Sign: {
        if (!f) {
          if (in == DType::Bool) return a;
          std::string t = reg_type(in);
          if (!is_signed(in)) return value(out, "(" + t + ")(" + a + " > 0)");
          return value(out, "(" + t + ")((int)(" + a + " > 0) - (int)(" + a + " < 0))");
        }
        std::string t = reg_type(in);
        // (x > 0) - (x < 0): NaN gives 0, as torch.sign
        return value(out, "(" + t + ")(" + a + " > 0) - (" + t + ")(" + a + " < 0)");
      }
      case Op::IsNan: return f ? value(DType::Bool, "(" + a + " != " + a + ")") : "false";
      default: break;
    }
    throw std::runtime_error(std::string("tiny cuda: unsupported unary ") + op_name(op));
  }

  std::string binary(Op op, const std::string& a, const std::string& c, DType dt) {
    bool f = reg_is_float(dt);
    bool s = is_signed(dt);
    bool b = dt == DType::Bool;
    std::string t = reg_type(dt);
    auto fp = [&](const std::string& r) { return value(dt, round_to(r, dt)); };
    auto as = [&](const std::string& r) { return value(dt, r); };
    auto boolean = [&](const std::string& r) { return value(DType::Bool, r); };
    auto need_int = [&]() {
      if (f) throw std::runtime_error(std::string("tiny cuda: ") + op_name(op) + " on a float");
    };
    switch (op) {
      case Op::Add:
        if (f) return fp(a + " + " + c);
        return as(b ? "(bool)(" + a + " | " + c + ")" : wrap(dt, a, "+", c));
      case Op::Sub:
        if (f) return fp(a + " - " + c);
        return as(b ? "(bool)(" + a + " ^ " + c + ")" : wrap(dt, a, "-", c));
      case Op::Mul:
        if (f) return fp(a + " * " + c);
        return as(b ? "(bool)(" + a + " & " + c + ")" : wrap(dt, a, "*", c));
      case Op::Div:
        if (f) return fp(a + " / " + c);
        return as("tiny_idiv<" + t + ">(" + a + ", " + c + ")");
      case Op::Mod:
      case Op::Fmod:
        if (f) return fp(fn2("fmod", a, c, dt));
        return as("tiny_imod<" + t + ">(" + a + ", " + c + ")");
      case Op::FloorDiv:
        if (f) return fp(std::string(t == "double" ? "tiny_floordiv_f64(" : "tiny_floordiv_f32(") + a + ", " + c + ")");
        return as("tiny_ifloordiv<" + t + ">(" + a + ", " + c + ")");
      case Op::FloorMod:
        if (f) return fp(std::string(t == "double" ? "tiny_floormod_f64(" : "tiny_floormod_f32(") + a + ", " + c + ")");
        return as("tiny_ifloormod<" + t + ">(" + a + ", " + c + ")");
      case Op::Max: return as(max_min(true, a, c, dt));
      case Op::Min: return as(max_min(false, a, c, dt));
      case Op::Pow:
        if (f) return fp(fn2("pow", a, c, dt));
        return as("tiny_ipow<" + t + ">(" + a + ", " + c + ")");
      case Op::Atan2:
        if (!f) throw std::runtime_error("tiny cuda: ATAN2 on integers");
        return fp(fn2("atan2", a, c, dt));
      case Op::Hypot:
        if (!f) throw std::runtime_error("tiny cuda: HYPOT on integers");
        return fp(fn2("hypot", a, c, dt));
      case Op::Copysign:
        if (!f) throw std::runtime_error("tiny cuda: COPYSIGN on integers");
        return fp(fn2("copysign", a, c, dt));
      // C's float comparisons are the ordered ones, except != which is unordered, as in LLVM
      case Op::CmpLt: return boolean("(" + a + " < " + c + ")");
      case Op::CmpLe: return boolean("(" + a + " <= " + c + ")");
      case Op::CmpEq: return boolean("(" + a + " == " + c + ")");
      case Op::CmpNe: return boolean("(" + a + " != " + c + ")");
      case Op::And: need_int(); return as("(" + t + ")(" + a + " & " + c + ")");
      case Op::Or: need_int(); return as("(" + t + ")(" + a + " | " + c + ")");
      case Op::Xor: need_int(); return as("(" + t + ")(" + a + " ^ " + c + ")");
      case Op::Shl:
      case Op::Shr: {
        need_int();
        if (b) return as("(" + c + " ? false : " + a + ")");
        std::string bits = std::to_string(itemsize(dt) * 8);
        std::string big = "(" + std::string(same_width_unsigned(dt)) + ")" + c + " >= " + bits;
        if (op == Op::Shl)
          return as(big + " ? (" + t + ")0 : (" + t + ")((" + wrap_type(dt) + ")" + a + " << " + c + ")");
        if (!s) return as(big + " ? (" + t + ")0 : (" + t + ")(" + a + " >> " + c + ")");
        return as(big + " ? (" + t + ")(" + a + " >> " + std::to_string(itemsize(dt) * 8 - 1) + ") : (" + t + ")(" + a +
                  " >> " + c + ")");
      }
      default: break;
    }
    throw std::runtime_error(std::string("tiny cuda: unsupported binary ") + op_name(op));
  }

  const Kernel& given_;
  CudaRenderOptions opt_;
  const CudaPlan plan_;  // how the kernel runs (lowering.h)
  const Kernel& k_;      // the kernel as planned: given_, or its matrix view
  std::string k_begin_, k_end_;  // a shared tile's steps: all, or its split's slice
  int lane_var_ = -1;          // the lane's variable id (the newest when the lanes are emitted)
  int lane_ = -1;              // the lane being emitted (-1: none)
  bool lane_vectors_ = false;  // the pass with vector accesses
  size_t lane_shared_ = 0;     // the memo scope holding values all lanes share
  std::unordered_map<std::string, std::string> vector_loads_;  // buffer + index -> the vector
  std::map<int, int64_t> vector_bytes_;  // buffer -> the alignment its vector accesses need
  bool vectors_ = false;                 // some pass moved vectors
  std::set<int> vector_buffers_;         // buffers that vector staging reads
  int indent_ = 0;
  int next_id_ = 0;
  int reduce_depth_ = 0;
  std::vector<StagedReduce> staged_;  // a split block reduce's reduces, in the order they were staged
  bool split_met_ = false;            // past meet_split_blocks
  std::unordered_map<const Node*, int> param_word_;  // launch node -> its first launch word
  std::ostringstream body_;
  std::vector<std::string> var_names_;
  std::vector<std::unordered_map<std::string, std::string>> memo_;
};

}  // namespace

CudaKernelSource render_cuda(const Kernel& k, const CudaRenderOptions& opt) { return Renderer(k, opt).render(); }
const char* cuda_prelude() { return kPrelude; }

}  // namespace tiny
