// Shared machinery of the pointwise op files (ops_unary, ops_binary, ops_ternary,
// ops_activation, ops_special): an op's lazy value and ATen dtype, formula
// helpers over engine values, ATen's dtype errors, and templates that turn one
// compute function into ATen's functional, in-place and out= kernels.
#pragma once
#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "torch/elementwise.h"
#include "torch/ops_util.h"
#include "torch/tensor_value.h"

namespace torch_tiny::pw {

using T = tiny::Tensor;
using tiny::Op;

// An op's lazy result and the dtype ATen gives it.
struct Computed {
  T value;
  c10::ScalarType dtype;
};

// ---------------------------------------------------------------- formulas
// A constant shaped and typed like `like` (a double is truncated for integer dtypes).
T cnst(const T& like, double v);
T cnst(const T& like, const c10::Scalar& s);
// A user-given scalar (alpha, value, weight) shaped and typed like `like`: see scalar_operand.
T user_scalar(const T& like, const c10::Scalar& s);

inline T operator+(const T& a, const T& b) { return a.binary(Op::Add, b); }
inline T operator-(const T& a, const T& b) { return a.binary(Op::Sub, b); }
inline T operator*(const T& a, const T& b) { return a.binary(Op::Mul, b); }
inline T operator/(const T& a, const T& b) { return a.binary(Op::Div, b); }
inline T operator-(const T& a) { return a.unary(Op::Neg); }
inline T operator+(const T& a, double b) { return a + cnst(a, b); }
inline T operator-(const T& a, double b) { return a - cnst(a, b); }
inline T operator*(const T& a, double b) { return a * cnst(a, b); }
inline T operator/(const T& a, double b) { return a / cnst(a, b); }
inline T operator+(double a, const T& b) { return cnst(b, a) + b; }
inline T operator-(double a, const T& b) { return cnst(b, a) - b; }
inline T operator*(double a, const T& b) { return cnst(b, a) * b; }
inline T operator/(double a, const T& b) { return cnst(b, a) / b; }

inline T lt(const T& a, const T& b) { return a.binary(Op::CmpLt, b); }
inline T le(const T& a, const T& b) { return a.binary(Op::CmpLe, b); }
inline T gt(const T& a, const T& b) { return b.binary(Op::CmpLt, a); }
inline T ge(const T& a, const T& b) { return b.binary(Op::CmpLe, a); }
inline T eq(const T& a, const T& b) { return a.binary(Op::CmpEq, b); }
inline T ne(const T& a, const T& b) { return a.binary(Op::CmpNe, b); }
inline T lt(const T& a, double b) { return lt(a, cnst(a, b)); }
inline T le(const T& a, double b) { return le(a, cnst(a, b)); }
inline T gt(const T& a, double b) { return gt(a, cnst(a, b)); }
inline T ge(const T& a, double b) { return ge(a, cnst(a, b)); }
inline T eq(const T& a, double b) { return eq(a, cnst(a, b)); }
inline T ne(const T& a, double b) { return ne(a, cnst(a, b)); }
inline T land(const T& a, const T& b) { return a.binary(Op::And, b); }
inline T lor(const T& a, const T& b) { return a.binary(Op::Or, b); }
inline T lnot(const T& a) { return a.unary(Op::Not); }
inline T where(const T& c, const T& a, const T& b) { return T::where(c, a, b); }
inline T where(const T& c, double a, const T& b) { return T::where(c, cnst(b, a), b); }
inline T where(const T& c, const T& a, double b) { return T::where(c, a, cnst(a, b)); }
inline T isnan(const T& a) { return a.unary(Op::IsNan); }
// NaN-propagating maximum / minimum
inline T max(const T& a, const T& b) { return a.binary(Op::Max, b); }
inline T min(const T& a, const T& b) { return a.binary(Op::Min, b); }
inline T un(Op op, const T& a) { return a.unary(op); }
inline T sigmoid(const T& x) { return un(Op::Sigmoid, x); }  // 1 / (1 + exp(-x)), as ATen's CPU kernel

// self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w): exact at both ends.
// A weight known when the graph is built (a scalar: a launch parameter or a constant) picks its
// formula here, as it does uniformly in ATen's kernel: half the nodes of exp_avg.lerp_(grad, 0.1).
T lerp_formula(const T& s, const T& e, const T& w);

// ---------------------------------------------------------------- dtypes
// The type composite formulas compute in: 16-bit floats compute in float32 and
// round once at the end, as ATen's CPU kernels do.
c10::ScalarType opmath(c10::ScalarType t);
// `t` converted to `dt` (ATen's type promotion, rounding included) and widened to
// opmath(dt) for computing.
inline T operand_op(const at::Tensor& t, c10::ScalarType dt, const tiny::Shape& shape) {
  return operand(t, dt, shape).cast(to_engine(opmath(dt)));
}

// What ATen's CPU dispatch raises for a dtype a kernel does not cover:
// NotImplementedError: "<kernel>" not implemented for '<dtype>'.
[[noreturn]] void not_implemented_for(const char* kernel, c10::ScalarType t);
enum Deny : unsigned { kAllowAll = 0, kNoBool = 1, kNoInt = 2, kNoFloat = 4 };
void check_dtype(c10::ScalarType t, unsigned deny, const char* kernel);
constexpr unsigned kFloatOnly = kNoBool | kNoInt;
constexpr unsigned kIntOnly = kNoFloat;  // bitwise ops: bool and integers

// ATen's `scalar.to<scalar_t>()`: a value out of an integer dtype's range is an error
// ("value cannot be converted to type uint8_t without overflow").
void check_convertible(const c10::Scalar& s, c10::ScalarType t);

// Integer division by zero raises on the CPU. The divisor's values can only be
// seen without running anything when it is a CPU scalar, a constant or an
// already computed tensor; those are checked (ZeroDivisionError). A zero in a
// divisor that is still lazy yields 0 instead of raising.
void check_int_divisor(const at::Tensor& divisor, c10::ScalarType common);

// clamp with ATen's promotion and NaN rules (a NaN input stays NaN, a NaN bound
// gives NaN); `kernel` names the CPU kernel in bool's error (nullptr: bool is fine).
Computed clamp_compute(const at::Tensor& x, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                       const char* kernel);

// ---------------------------------------------------------------- kernels
// An op name usable as a template argument (labels the graph nodes an op makes).
template <size_t N>
struct Name {
  char s[N];
  constexpr Name(const char (&v)[N]) { std::copy_n(v, N, s); }
};

inline void collect(std::vector<at::Tensor>& v, const at::Tensor& t) {
  if (t.defined()) v.push_back(t);
}
inline void collect(std::vector<at::Tensor>& v, const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) v.push_back(*t);
}
template <typename X>
inline void collect(std::vector<at::Tensor>&, const X&) {}

// out= dtype rules beyond "the result can be cast to it" (assign_out's check).
using OutCheck = void (*)(const at::Tensor& out, c10::ScalarType computed);
// ATen's unary_op / same-dtype kernels: the out tensor must have the result's dtype.
void exact_out(const at::Tensor& out, c10::ScalarType computed);

// From `Computed F(const at::Tensor& self, A...)`: the functional kernel
// (self, A...), the in-place one (self!, A...) and the out= one (self, A..., out!).
template <Name N, auto F, OutCheck Check = nullptr>
struct Kernels;
template <Name N, typename... A, Computed (*F)(const at::Tensor&, A...), OutCheck Check>
struct Kernels<N, F, Check> {
  static at::Tensor fn(const at::Tensor& self, A... a) {
    TinyOp op(N.s);
    Computed r = F(self, a...);
    return make_result(r.value, r.dtype);
  }
  static at::Tensor& inplace(at::Tensor& self, A... a) {
    TinyOp op(N.s);
    Computed r = F(self, a...);
    std::vector<at::Tensor> in;
    (collect(in, a), ...);
    return assign_inplace(self, r.value, r.dtype, in);
  }
  static at::Tensor& out(const at::Tensor& self, A... a, at::Tensor& out) {
    TinyOp op(N.s);
    Computed r = F(self, a...);
    if constexpr (Check != nullptr) Check(out, r.dtype);
    std::vector<at::Tensor> in{self};
    (collect(in, a), ...);
    return assign_out(out, r.value, r.dtype, in);
  }
};

// What a unary op's result dtype is: the input's, int/bool -> the default float, bool.
enum class Kind { Same, Float, Bool };

// F on self as an engine value of the op's compute type; the result is cast back.
template <T (*F)(const T&), Kind K = Kind::Float, unsigned Deny = kAllowAll, Name Kernel = "">
Computed unary(const at::Tensor& self) {
  check_dtype(self.scalar_type(), Deny, Kernel.s);
  c10::ScalarType dt = K == Kind::Float ? float_type_for(self.scalar_type()) : self.scalar_type();
  T x = operand_op(self, dt, to_shape(self.sizes()));
  if (K == Kind::Bool) return {F(x), c10::kBool};
  return {F(x).cast(to_engine(dt)), dt};
}

// Registers name, name_ and name.out from one compute function.
#define TINY_PW3(name, ...)                                                   \
  m.impl(name, ::torch_tiny::pw::Kernels<name, __VA_ARGS__>::fn);             \
  m.impl(name "_", ::torch_tiny::pw::Kernels<name, __VA_ARGS__>::inplace);    \
  m.impl(name ".out", ::torch_tiny::pw::Kernels<name, __VA_ARGS__>::out)

}  // namespace torch_tiny::pw
