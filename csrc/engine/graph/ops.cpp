#include "engine/graph/ops.h"

namespace tiny {

const char* op_name(Op op) {
  static const char* names[] = {
      "BUFFER", "CONST", "RAND", "PARAM", "ARANGE", "VIEW",
      "NEG", "NOT", "ABS", "EXP", "LOG", "SIN", "COS", "TAN", "SQRT", "RECIP", "TRUNC", "FLOOR", "CEIL", "ROUND",
      "ERF", "TANH", "ASIN", "ACOS", "ATAN", "SINH", "COSH", "ASINH", "ACOSH", "ATANH", "EXPM1", "LOG1P", "ERFINV", "SIGN",
      "ERFC", "EXP2", "LOG2", "LOG10", "LGAMMA", "SIGMOID",
      "ISNAN", "CAST", "BITCAST",
      "ADD", "SUB", "MUL", "DIV", "MOD", "MAX", "MIN", "POW", "ATAN2", "CMPLT", "CMPLE", "CMPEQ", "CMPNE",
      "AND", "OR", "XOR", "SHL", "SHR", "FLOORDIV", "FLOORMOD", "FMOD", "COPYSIGN", "HYPOT",
      "WHERE", "GATHER", "REDUCE", "CONTIGUOUS", "WRITE", "SCATTER",
      "PLACEHOLDER", "CALL", "CALL_OUTPUT"};
  return names[static_cast<int>(op)];
}

const char* reduce_name(ReduceOp op) {
  static const char* names[] = {"SUM", "PROD", "MAX", "MIN", "ANY", "ALL", "XOR"};
  return names[static_cast<int>(op)];
}

bool is_unary(Op op) { return op >= Op::Neg && op <= Op::Bitcast; }
bool is_binary(Op op) { return op >= Op::Add && op <= Op::Hypot; }
bool is_elementwise(Op op) { return is_unary(op) || is_binary(op) || op == Op::Where; }
bool is_comparison(Op op) { return op >= Op::CmpLt && op <= Op::CmpNe; }

bool op_accepts(Op op, DType dt) {
  bool f = is_float(dt), b = dt == DType::Bool;
  switch (op) {
    case Op::Neg: case Op::Abs: case Op::Trunc: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Sign:
    case Op::IsNan: case Op::Cast: case Op::Bitcast:
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Max: case Op::Min:
    case Op::CmpLt: case Op::CmpLe: case Op::CmpEq: case Op::CmpNe:
      return true;
    case Op::Not: case Op::And: case Op::Or: case Op::Xor: case Op::Shl: case Op::Shr:
      return !f;
    case Op::Div: case Op::Mod: case Op::Pow: case Op::FloorDiv: case Op::FloorMod: case Op::Fmod:
      return !b;
    default:
      return f && (is_unary(op) || is_binary(op));  // math
  }
}

}  // namespace tiny
