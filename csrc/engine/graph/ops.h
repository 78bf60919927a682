// The operations a lazy graph node can hold.
#pragma once
#include <cstdint>

#include "engine/dtype/dtype.h"

namespace tiny {

enum class Op : uint8_t {
  // leaves
  Buffer,  // an already realized buffer
  Const,   // one scalar, broadcast to the node's shape
  Rand,    // uniform [0,1) float32 from Philox(seed, counter = offset + flat index)
  Param,   // one scalar like Const, but passed at launch: graphs and kernels that
           // differ only in its value share a schedule and a program (optimizer steps)
  Arange,  // start + step * flat index (the Const value is start, arg2 is step)
  // movement: src[0] seen through a ShapeTracker
  View,
  // unary
  Neg, Not, Abs, Exp, Log, Sin, Cos, Tan, Sqrt, Recip, Trunc, Floor, Ceil, Round,
  Erf, Tanh, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Expm1, Log1p, Erfinv, Sign,
  Erfc, Exp2, Log2, Log10,  // direct, so exact powers and tails match libm
  Lgamma,
  Sigmoid,  // 1 / (1 + exp(-x)): one node, where its four ops made an RNN cell's graph a third longer
  IsNan, Cast, Bitcast,
  // binary
  Add, Sub, Mul, Div, Mod, Max, Min, Pow, Atan2, CmpLt, CmpLe, CmpEq, CmpNe,
  And, Or, Xor, Shl, Shr, FloorDiv, FloorMod, Fmod, Copysign, Hypot,
  // ternary
  Where,
  // data-dependent read: src[0] (seen as row-major flat) at the int64 flat indices src[1]
  Gather,
  // reductions over `axes` (kept as size-1 dims)
  Reduce,
  // scheduling markers
  Contiguous,  // realize src[0] into its own buffer
  Write,       // src[0] (flat base) with the region `st` replaced by src[1]
  Scatter,     // src[0] (flat base) with base[src[1][i]] = src[2][i] (or combined by `rop` if accumulate)
  // subgraphs (engine/tensor/subgraph.h), expanded before scheduling
  Placeholder,  // a leaf standing for input `value` of a subgraph
  Call,         // a subgraph (NodeArgs::subgraph) applied to src: its outputs are CallOutput nodes
  CallOutput,   // output `value` of the Call src[0]
};

enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, Any, All, Xor };  // Xor: integers and bool

const char* op_name(Op op);
const char* reduce_name(ReduceOp op);
bool is_unary(Op op);
bool is_binary(Op op);
bool is_elementwise(Op op);  // unary, binary, ternary ALU ops
bool is_comparison(Op op);
// Whether the elementwise op `op` takes operands of `dt` (the contract every
// code generator implements): transcendental math, atan2, hypot and copysign
// take floats; bitwise ops and shifts integers and bool; bool also takes no
// division, modulo or power.
bool op_accepts(Op op, DType dt);

}  // namespace tiny
