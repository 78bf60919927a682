// The CPU code generator. A kernel becomes
//   void k(i8** buffers, i64 begin, i64 end)
// with one loop per iteration dim (the first non-unit dim runs [begin, end),
// which is how the thread pool splits work), an inner loop nest per reduce,
// and loads whose indices come from each view's simplified index expression.
// Loops are plain scalar loops with simple index math; LLVM's O3 pipeline
// vectorizes them for the host's widest vector unit.
#include "engine/codegen/llvm_codegen.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <unordered_map>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "engine/runtime/llvm_jit.h"

namespace tiny {
namespace {

using llvm::Value;

class Builder {
 public:
  Builder(const Kernel& k, llvm::LLVMContext& ctx, llvm::Module& m, std::string fn_name)
      : k_(k), ctx_(ctx), m_(m), b_(ctx), fn_name_(std::move(fn_name)) {}

  void build() {
    auto* i8pp = llvm::Type::getInt8PtrTy(ctx_)->getPointerTo();
    auto* i64 = b_.getInt64Ty();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {i8pp, i64, i64}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, fn_name_, m_);
    fn_->addFnAttr("target-cpu", LLVMJit::get().cpu_name());
    fn_->addFnAttr("target-features", LLVMJit::get().cpu_features());
    fn_->addFnAttr("prefer-vector-width", "512");
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    auto args = fn_->arg_begin();
    Value* bufs = &*args++;
    Value* begin = &*args++;
    Value* end = &*args++;
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    for (size_t i = 0; i < k_.buffers.size(); i++) {
      Value* p = b_.CreateLoad(b_.getInt8PtrTy(), b_.CreateConstGEP1_64(b_.getInt8PtrTy(), bufs, i));
      buf_ptrs_.push_back(b_.CreateBitCast(p, mem_type(k_.buffers[i]->dtype())->getPointerTo()));
    }
    memo_.emplace_back();

    const Shape& shape = k_.shape;
    int par = -1;
    for (size_t d = 0; d < shape.size(); d++)
      if (shape[d] > 1) { par = int(d); break; }
    std::vector<Expr> idx(shape.size(), cnst(0));
    std::function<void(size_t)> nest = [&](size_t d) {
      if (d == shape.size()) {
        emit_stores(idx);
        return;
      }
      if (shape[d] == 1) {
        nest(d + 1);
        return;
      }
      Value* lo = int(d) == par ? begin : b_.getInt64(0);
      Value* hi = int(d) == par ? end : b_.getInt64(shape[d]);
      emit_loop(lo, hi, [&](Value* iv) {
        idx[d] = new_var(iv, shape[d]);
        nest(d + 1);
      });
    };
    if (par < 0) {
      // a single element: run once when the slice is non-empty
      auto* body = llvm::BasicBlock::Create(ctx_, "once", fn_);
      auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(begin, end), body, exit);
      b_.SetInsertPoint(body);
      nest(0);
      b_.CreateBr(exit);
      b_.SetInsertPoint(exit);
    } else {
      nest(0);
    }
    b_.CreateRetVoid();
  }

 private:
  // ---- types
  llvm::Type* reg_type(DType t) {
    switch (t) {
      case DType::Bool: return b_.getInt1Ty();
      case DType::UInt8: case DType::Int8: return b_.getInt8Ty();
      case DType::Int16: return b_.getInt16Ty();
      case DType::Int32: return b_.getInt32Ty();
      case DType::Int64: return b_.getInt64Ty();
      case DType::Float16: case DType::BFloat16: case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
    }
    return nullptr;
  }
  llvm::Type* mem_type(DType t) {
    switch (t) {
      case DType::Bool: return b_.getInt8Ty();
      case DType::Float16: case DType::BFloat16: return b_.getInt16Ty();
      default: return reg_type(t);
    }
  }

  Value* from_mem(Value* v, DType t) {
    switch (t) {
      case DType::Bool: return b_.CreateICmpNE(v, b_.getInt8(0));
      case DType::Float16: return b_.CreateFPExt(b_.CreateBitCast(v, b_.getHalfTy()), b_.getFloatTy());
      case DType::BFloat16:
        return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
      default: return v;
    }
  }
  Value* bf16_bits(Value* f) {  // round to nearest even, NaN -> 0x7fc0
    Value* x = b_.CreateBitCast(f, b_.getInt32Ty());
    Value* lsb = b_.CreateAnd(b_.CreateLShr(x, 16), 1);
    Value* r = b_.CreateLShr(b_.CreateAdd(x, b_.CreateAdd(lsb, b_.getInt32(0x7fff))), 16);
    Value* nan = b_.CreateFCmpUNO(f, f);
    return b_.CreateSelect(nan, b_.getInt16(0x7fc0), b_.CreateTrunc(r, b_.getInt16Ty()));
  }
  Value* to_mem(Value* v, DType t) {
    switch (t) {
      case DType::Bool: return b_.CreateZExt(v, b_.getInt8Ty());
      case DType::Float16: return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getInt16Ty());
      case DType::BFloat16: return bf16_bits(v);
      default: return v;
    }
  }
  // Rounds a float register to the precision of a 16-bit float dtype.
  Value* round_to(Value* v, DType t) {
    if (t == DType::Float16 || t == DType::BFloat16) return from_mem(to_mem(v, t), t);
    return v;
  }

  Value* zero(DType t) {
    llvm::Type* ty = reg_type(t);
    return ty->isFloatingPointTy() ? llvm::ConstantFP::get(ty, 0.0) : llvm::ConstantInt::get(ty, 0);
  }
  Value* constant(const Scalar& s, DType t) {
    llvm::Type* ty = reg_type(t);
    if (ty->isFloatingPointTy()) return llvm::ConstantFP::get(ty, s.to_double());
    if (t == DType::Bool) return b_.getInt1(s.to_int() != 0);
    return llvm::ConstantInt::get(ty, uint64_t(s.to_int()), true);
  }

  // ---- loops and variables
  Expr new_var(Value* iv, int64_t size) {
    int id = int(vars_.size());
    vars_.push_back(iv);
    return var(id, size);
  }

  void emit_loop(Value* lo, Value* hi, const std::function<void(Value*)>& body) {
    auto* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* bodyb = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "endloop", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    auto* iv = b_.CreatePHI(b_.getInt64Ty(), 2);
    iv->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    memo_.emplace_back();
    body(iv);
    memo_.pop_back();
    Value* next = b_.CreateAdd(iv, b_.getInt64(1), "", true, true);
    b_.CreateBr(header);
    iv->addIncoming(next, b_.GetInsertBlock());
    b_.SetInsertPoint(exit);
  }

  // ---- index expressions
  Value* index(const Expr& e) {
    std::string key = "#" + to_string(e);
    if (Value* v = lookup(key)) return v;
    Value* r = nullptr;
    switch (e->op) {
      case EOp::Const: r = b_.getInt64(e->value); break;
      case EOp::Var: r = vars_[size_t(e->value)]; break;
      case EOp::Add: {
        r = index(e->src[0]);
        for (size_t i = 1; i < e->src.size(); i++) r = b_.CreateAdd(r, index(e->src[i]), "", false, true);
        break;
      }
      case EOp::Mul: r = b_.CreateMul(index(e->src[0]), b_.getInt64(e->value), "", false, true); break;
      case EOp::Div: {
        Value* a = index(e->src[0]);
        if (e->src[0]->vmin >= 0) {
          r = b_.CreateUDiv(a, b_.getInt64(e->value));
        } else {  // floor division
          Value* q = b_.CreateSDiv(a, b_.getInt64(e->value));
          Value* fix = b_.CreateAnd(b_.CreateICmpNE(b_.CreateMul(q, b_.getInt64(e->value)), a),
                                    b_.CreateICmpSLT(a, b_.getInt64(0)));
          r = b_.CreateSub(q, b_.CreateZExt(fix, b_.getInt64Ty()));
        }
        break;
      }
      case EOp::Mod: {
        Value* a = index(e->src[0]);
        if (e->src[0]->vmin >= 0) {
          r = b_.CreateURem(a, b_.getInt64(e->value));
        } else {
          Value* m = b_.CreateSRem(a, b_.getInt64(e->value));
          r = b_.CreateSelect(b_.CreateICmpSLT(m, b_.getInt64(0)), b_.CreateAdd(m, b_.getInt64(e->value)), m);
        }
        break;
      }
      case EOp::Lt: r = b_.CreateZExt(b_.CreateICmpSLT(index(e->src[0]), b_.getInt64(e->value)), b_.getInt64Ty()); break;
      case EOp::And: r = b_.CreateAnd(index(e->src[0]), index(e->src[1])); break;
    }
    remember(key, r);
    return r;
  }
  Value* condition(const Expr& valid) { return b_.CreateICmpNE(index(valid), b_.getInt64(0)); }

  Value* lookup(const std::string& key) {
    for (auto it = memo_.rbegin(); it != memo_.rend(); ++it) {
      auto f = it->find(key);
      if (f != it->end()) return f->second;
    }
    return nullptr;
  }
  void remember(const std::string& key, Value* v) { memo_.back()[key] = v; }

  static Expr row_major(const std::vector<Expr>& idx, const Shape& shape) {
    Expr flat = cnst(0);
    Shape st = contiguous_strides(shape);
    for (size_t d = 0; d < shape.size(); d++) flat = add(flat, mul(idx[d], st[d]));
    return flat;
  }

  // ---- stores
  void emit_stores(const std::vector<Expr>& idx) {
    for (auto& o : k_.outputs) {
      DType dt = k_.buffers[o.buffer]->dtype();
      // Pure data movement stores the bits it loaded (NaN payloads survive).
      Value* m = o.value->dtype == dt ? eval_bits(o.value.get(), idx, cnst(1)) : nullptr;
      if (!m) m = to_mem(eval(o.value.get(), idx, cnst(1)), dt);
      auto [ix, valid] = o.store.index_valid(idx);
      Value* ptr = b_.CreateGEP(mem_type(dt), buf_ptrs_[o.buffer], index(ix));
      b_.CreateStore(m, ptr);
    }
  }

  // The value as stored bits when it is only loads seen through views;
  // nullptr when it computes anything.
  Value* eval_bits(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    auto load = k_.loads.find(n);
    if (load != k_.loads.end()) {
      DType dt = k_.buffers[load->second]->dtype();
      if (dt != n->dtype) return nullptr;
      Value* ix = index(row_major(idx, n->shape));
      if (!is_true(valid)) ix = b_.CreateSelect(condition(valid), ix, b_.getInt64(0));
      return b_.CreateLoad(mem_type(dt), b_.CreateGEP(mem_type(dt), buf_ptrs_[load->second], ix));
    }
    if (n->op == Op::Contiguous) return eval_bits(n->src[0].get(), idx, valid);
    if (n->op != Op::View) return nullptr;
    const Node* src = n->src[0].get();
    auto [flat, v2] = n->args.st.index_valid(idx);
    std::vector<Expr> sub(src->shape.size());
    int64_t acc = 1;
    for (size_t d = src->shape.size(); d-- > 0;) {
      sub[d] = mod(floordiv(flat, acc), src->shape[d]);
      acc *= src->shape[d];
    }
    if (is_false(v2)) return nullptr;
    Value* v = eval_bits(src, sub, land(valid, v2));
    if (v && !is_true(v2)) v = b_.CreateSelect(condition(v2), v, llvm::Constant::getNullValue(v->getType()));
    return v;
  }

  // ---- expression evaluation
  Value* eval(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    std::ostringstream key;
    key << n;
    for (auto& e : idx) key << "," << to_string(e);
    key << "|" << to_string(valid);
    if (Value* v = lookup(key.str())) return v;
    Value* r = eval_uncached(n, idx, valid);
    remember(key.str(), r);
    return r;
  }

  Value* eval_uncached(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    auto load = k_.loads.find(n);
    if (load != k_.loads.end()) {
      DType dt = k_.buffers[load->second]->dtype();
      Value* ix = index(row_major(idx, n->shape));
      if (!is_true(valid)) ix = b_.CreateSelect(condition(valid), ix, b_.getInt64(0));
      Value* v = b_.CreateLoad(mem_type(dt), b_.CreateGEP(mem_type(dt), buf_ptrs_[load->second], ix));
      return from_mem(v, dt);
    }
    switch (n->op) {
      case Op::Const: return constant(n->args.value, n->dtype);
      case Op::Arange: {
        Value* i = index(row_major(idx, n->shape));
        if (is_float(n->dtype)) {
          Value* x = b_.CreateFAdd(llvm::ConstantFP::get(b_.getDoubleTy(), n->args.value.to_double()),
                                   b_.CreateFMul(b_.CreateSIToFP(i, b_.getDoubleTy()),
                                                 llvm::ConstantFP::get(b_.getDoubleTy(), n->args.value2.to_double())));
          return round_to(b_.CreateFPTrunc(x, reg_type(n->dtype)), n->dtype);
        }
        Value* x = b_.CreateAdd(b_.getInt64(n->args.value.to_int()), b_.CreateMul(i, b_.getInt64(n->args.value2.to_int())));
        return b_.CreateTrunc(x, reg_type(n->dtype));
      }
      case Op::Rand: return rand(n, idx);
      case Op::View: {
        const Node* src = n->src[0].get();
        auto [flat, v2] = n->args.st.index_valid(idx);
        std::vector<Expr> sub(src->shape.size());
        int64_t acc = 1;
        for (size_t d = src->shape.size(); d-- > 0;) {
          sub[d] = mod(floordiv(flat, acc), src->shape[d]);
          acc *= src->shape[d];
        }
        if (is_false(v2)) return zero(n->dtype);
        Value* v = eval(src, sub, land(valid, v2));
        if (!is_true(v2)) v = b_.CreateSelect(condition(v2), v, zero(n->dtype));
        return v;
      }
      case Op::Contiguous: return eval(n->src[0].get(), idx, valid);
      case Op::Reduce: return reduce(n, idx, valid);
      case Op::Where: {
        Value* c = eval(n->src[0].get(), idx, valid);
        return b_.CreateSelect(c, eval(n->src[1].get(), idx, valid), eval(n->src[2].get(), idx, valid));
      }
      case Op::Cast: return cast(eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
      case Op::Bitcast: {
        DType from = n->src[0]->dtype;
        Value* bits = to_mem(eval(n->src[0].get(), idx, valid), from);
        if (from == DType::Bool) bits = b_.CreateZExt(bits, b_.getInt8Ty());
        return from_mem(b_.CreateBitCast(bits, mem_type(n->dtype)), n->dtype);
      }
      default: break;
    }
    if (is_unary(n->op)) return unary(n->op, eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
    if (is_binary(n->op))
      return binary(n->op, eval(n->src[0].get(), idx, valid), eval(n->src[1].get(), idx, valid), n->src[0]->dtype);
    throw std::runtime_error(std::string("tiny codegen: cannot generate ") + op_name(n->op));
  }

  Value* reduce(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    const Node* src = n->src[0].get();
    DType dt = n->dtype, sdt = src->dtype;
    llvm::Type* ty = reg_type(dt);
    // the accumulator lives in an entry-block slot; mem2reg turns it into a phi
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    auto* acc = eb.CreateAlloca(ty);
    b_.CreateStore(identity(n->args.rop, dt), acc);
    std::vector<Expr> sub = idx;
    std::vector<int> axes;
    for (int a : n->args.axes)
      if (src->shape[a] > 1) axes.push_back(a);
    std::function<void(size_t)> nest = [&](size_t i) {
      if (i == axes.size()) {
        Value* v = eval(src, sub, valid);
        if (sdt != dt) v = cast(v, sdt, dt);
        Value* cur = b_.CreateLoad(ty, acc);
        b_.CreateStore(combine(n->args.rop, cur, v, dt), acc);
        return;
      }
      int a = axes[i];
      emit_loop(b_.getInt64(0), b_.getInt64(src->shape[a]), [&](Value* iv) {
        sub[a] = new_var(iv, src->shape[a]);
        nest(i + 1);
      });
    };
    nest(0);
    return round_to(b_.CreateLoad(ty, acc), dt);
  }

  Value* identity(ReduceOp op, DType dt) {
    llvm::Type* ty = reg_type(dt);
    bool f = ty->isFloatingPointTy();
    switch (op) {
      case ReduceOp::Sum: return zero(dt);
      case ReduceOp::Prod: return f ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
      case ReduceOp::Any: return b_.getInt1(false);
      case ReduceOp::All: return b_.getInt1(true);
      case ReduceOp::Max:
        if (f) return llvm::ConstantFP::getInfinity(ty, true);
        if (dt == DType::Bool) return b_.getInt1(false);
        return is_signed(dt) ? llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()))
                             : llvm::ConstantInt::get(ty, 0);
      case ReduceOp::Min:
        if (f) return llvm::ConstantFP::getInfinity(ty, false);
        if (dt == DType::Bool) return b_.getInt1(true);
        return is_signed(dt) ? llvm::ConstantInt::get(ty, llvm::APInt::getSignedMaxValue(ty->getIntegerBitWidth()))
                             : llvm::ConstantInt::get(ty, llvm::APInt::getMaxValue(ty->getIntegerBitWidth()));
    }
    return nullptr;
  }

  Value* combine(ReduceOp op, Value* a, Value* v, DType dt) {
    bool f = is_float(dt);
    switch (op) {
      case ReduceOp::Sum:
        if (f) {
          auto* r = llvm::cast<llvm::Instruction>(b_.CreateFAdd(a, v));
          r->setHasAllowReassoc(true);
          return r;
        }
        return dt == DType::Bool ? b_.CreateOr(a, v) : b_.CreateAdd(a, v);
      case ReduceOp::Prod:
        if (f) {
          auto* r = llvm::cast<llvm::Instruction>(b_.CreateFMul(a, v));
          r->setHasAllowReassoc(true);
          return r;
        }
        return dt == DType::Bool ? b_.CreateAnd(a, v) : b_.CreateMul(a, v);
      case ReduceOp::Any: return b_.CreateOr(a, v);
      case ReduceOp::All: return b_.CreateAnd(a, v);
      case ReduceOp::Max: return binary(Op::Max, a, v, dt);
      case ReduceOp::Min: return binary(Op::Min, a, v, dt);
    }
    return nullptr;
  }

  // ---- casts
  Value* cast(Value* v, DType from, DType to) {
    if (from == to) return v;
    llvm::Type* fty = reg_type(from);
    llvm::Type* tty = reg_type(to);
    if (to == DType::Bool) {
      return fty->isFloatingPointTy() ? b_.CreateFCmpUNE(v, llvm::ConstantFP::get(fty, 0.0))
                                      : b_.CreateICmpNE(v, llvm::ConstantInt::get(fty, 0));
    }
    if (from == DType::Bool) {
      return tty->isFloatingPointTy() ? b_.CreateUIToFP(v, tty) : b_.CreateZExt(v, tty);
    }
    if (fty->isFloatingPointTy() && tty->isFloatingPointTy()) {
      Value* r = v;
      if (fty->getPrimitiveSizeInBits() > tty->getPrimitiveSizeInBits()) r = b_.CreateFPTrunc(v, tty);
      else if (fty->getPrimitiveSizeInBits() < tty->getPrimitiveSizeInBits()) r = b_.CreateFPExt(v, tty);
      return round_to(r, to);
    }
    if (fty->isFloatingPointTy()) {
      // float -> int: through a saturating int64 conversion, then wrap (C behaviour for in-range values)
      llvm::Function* sat = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::fptosi_sat, {b_.getInt64Ty(), fty});
      Value* i = b_.CreateCall(sat, {v});
      return tty == b_.getInt64Ty() ? i : b_.CreateTrunc(i, tty);
    }
    if (tty->isFloatingPointTy()) {
      Value* r = is_signed(from) ? b_.CreateSIToFP(v, tty) : b_.CreateUIToFP(v, tty);
      return round_to(r, to);
    }
    return b_.CreateIntCast(v, tty, is_signed(from));
  }

  // ---- elementwise
  Value* call(llvm::Intrinsic::ID id, Value* a) {
    return b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, id, {a->getType()}), {a});
  }
  Value* call2(llvm::Intrinsic::ID id, Value* a, Value* c) {
    return b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, id, {a->getType()}), {a, c});
  }
  Value* libm(const char* name, Value* a) {
    bool dbl = a->getType()->isDoubleTy();
    std::string fname = dbl ? name : std::string(name) + "f";
    auto callee = m_.getOrInsertFunction(fname, llvm::FunctionType::get(a->getType(), {a->getType()}, false));
    auto* c = b_.CreateCall(callee, {a});
    c->setDoesNotAccessMemory();
    c->setDoesNotThrow();
    return c;
  }
  Value* libm2(const char* name, Value* a, Value* c) {
    bool dbl = a->getType()->isDoubleTy();
    std::string fname = dbl ? name : std::string(name) + "f";
    auto callee = m_.getOrInsertFunction(fname, llvm::FunctionType::get(a->getType(), {a->getType(), a->getType()}, false));
    auto* r = b_.CreateCall(callee, {a, c});
    r->setDoesNotAccessMemory();
    r->setDoesNotThrow();
    return r;
  }

  Value* unary(Op op, Value* a, DType in, DType out) {
    bool f = a->getType()->isFloatingPointTy();
    auto fp = [&](Value* r) { return round_to(r, out); };
    switch (op) {
      case Op::Neg: return f ? fp(b_.CreateFNeg(a)) : b_.CreateNeg(a);
      case Op::Not: return b_.CreateNot(a);
      case Op::Abs:
        if (f) return call(llvm::Intrinsic::fabs, a);
        if (!is_signed(in)) return a;
        return b_.CreateSelect(b_.CreateICmpSLT(a, llvm::ConstantInt::get(a->getType(), 0)), b_.CreateNeg(a), a);
      case Op::Exp: return fp(call(llvm::Intrinsic::exp, a));
      case Op::Log: return fp(call(llvm::Intrinsic::log, a));
      case Op::Sin: return fp(call(llvm::Intrinsic::sin, a));
      case Op::Cos: return fp(call(llvm::Intrinsic::cos, a));
      case Op::Sqrt: return fp(call(llvm::Intrinsic::sqrt, a));
      case Op::Trunc: return f ? call(llvm::Intrinsic::trunc, a) : a;
      case Op::Floor: return f ? call(llvm::Intrinsic::floor, a) : a;
      case Op::Ceil: return f ? call(llvm::Intrinsic::ceil, a) : a;
      case Op::Round: return f ? call(llvm::Intrinsic::roundeven, a) : a;
      case Op::Recip: return fp(b_.CreateFDiv(llvm::ConstantFP::get(a->getType(), 1.0), a));
      case Op::Tan: return fp(libm("tan", a));
      case Op::Erf: return fp(libm("erf", a));
      case Op::Tanh: return fp(libm("tanh", a));
      case Op::Asin: return fp(libm("asin", a));
      case Op::Acos: return fp(libm("acos", a));
      case Op::Atan: return fp(libm("atan", a));
      case Op::Sinh: return fp(libm("sinh", a));
      case Op::Cosh: return fp(libm("cosh", a));
      case Op::Asinh: return fp(libm("asinh", a));
      case Op::Acosh: return fp(libm("acosh", a));
      case Op::Atanh: return fp(libm("atanh", a));
      case Op::Expm1: return fp(libm("expm1", a));
      case Op::Log1p: return fp(libm("log1p", a));
      case Op::Erfc: return fp(libm("erfc", a));
      case Op::Exp2: return fp(call(llvm::Intrinsic::exp2, a));
      case Op::Log2: return fp(call(llvm::Intrinsic::log2, a));
      case Op::Log10: return fp(call(llvm::Intrinsic::log10, a));
      case Op::Lgamma: return fp(libm("lgamma", a));
      case Op::Sign: {
        if (!f) {
          if (in == DType::Bool) return a;
          Value* z = llvm::ConstantInt::get(a->getType(), 0);
          Value* pos = b_.CreateZExt(is_signed(in) ? b_.CreateICmpSGT(a, z) : b_.CreateICmpUGT(a, z), a->getType());
          Value* neg = is_signed(in) ? b_.CreateZExt(b_.CreateICmpSLT(a, z), a->getType()) : z;
          return b_.CreateSub(pos, neg);
        }
        Value* z = llvm::ConstantFP::get(a->getType(), 0.0);
        Value* pos = b_.CreateUIToFP(b_.CreateFCmpOGT(a, z), a->getType());
        Value* neg = b_.CreateUIToFP(b_.CreateFCmpOLT(a, z), a->getType());
        Value* s = b_.CreateFSub(pos, neg);
        return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, s);
      }
      case Op::IsNan: return f ? b_.CreateFCmpUNO(a, a) : b_.getInt1(false);
      default: break;
    }
    throw std::runtime_error(std::string("tiny codegen: unsupported unary ") + op_name(op));
  }

  Value* binary(Op op, Value* a, Value* c, DType dt) {
    bool f = a->getType()->isFloatingPointTy();
    bool s = is_signed(dt);
    auto fp = [&](Value* r) { return round_to(r, dt); };
    llvm::Type* ty = a->getType();
    switch (op) {
      case Op::Add: return f ? fp(b_.CreateFAdd(a, c)) : (dt == DType::Bool ? b_.CreateOr(a, c) : b_.CreateAdd(a, c));
      case Op::Sub: return f ? fp(b_.CreateFSub(a, c)) : b_.CreateSub(a, c);
      case Op::Mul: return f ? fp(b_.CreateFMul(a, c)) : (dt == DType::Bool ? b_.CreateAnd(a, c) : b_.CreateMul(a, c));
      case Op::Div: {
        if (f) return fp(b_.CreateFDiv(a, c));
        // integer division truncates; a zero divisor gives 0 instead of a trap
        Value* z = llvm::ConstantInt::get(ty, 0);
        Value* safe = b_.CreateSelect(b_.CreateICmpEQ(c, z), llvm::ConstantInt::get(ty, 1), c);
        if (s) {
          Value* minus1 = b_.CreateICmpEQ(safe, llvm::ConstantInt::get(ty, uint64_t(-1), true));
          Value* q = b_.CreateSDiv(a, b_.CreateSelect(minus1, llvm::ConstantInt::get(ty, 1), safe));
          q = b_.CreateSelect(minus1, b_.CreateNeg(a), q);
          return b_.CreateSelect(b_.CreateICmpEQ(c, z), z, q);
        }
        return b_.CreateSelect(b_.CreateICmpEQ(c, z), z, b_.CreateUDiv(a, safe));
      }
      case Op::Mod: case Op::Fmod: {
        if (f) return fp(b_.CreateFRem(a, c));
        Value* z = llvm::ConstantInt::get(ty, 0);
        Value* bad = b_.CreateICmpEQ(c, z);
        if (s) bad = b_.CreateOr(bad, b_.CreateICmpEQ(c, llvm::ConstantInt::get(ty, uint64_t(-1), true)));
        Value* safe = b_.CreateSelect(bad, llvm::ConstantInt::get(ty, 1), c);
        Value* r = s ? b_.CreateSRem(a, safe) : b_.CreateURem(a, safe);
        return b_.CreateSelect(bad, z, r);
      }
      case Op::FloorDiv: {
        if (f) {
          // Python semantics: floor((a - fmod(a, b)) / b), as PyTorch computes it
          Value* m = b_.CreateFRem(a, c);
          Value* d = b_.CreateFDiv(b_.CreateFSub(a, m), c);
          Value* zf = llvm::ConstantFP::get(ty, 0.0);
          Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(m, zf),
                                       b_.CreateXor(b_.CreateFCmpOLT(c, zf), b_.CreateFCmpOLT(m, zf)));
          d = b_.CreateSelect(adjust, b_.CreateFSub(d, llvm::ConstantFP::get(ty, 1.0)), d);
          Value* fl = call(llvm::Intrinsic::floor, d);
          Value* fixed = b_.CreateSelect(b_.CreateFCmpOGT(b_.CreateFSub(d, fl), llvm::ConstantFP::get(ty, 0.5)),
                                         b_.CreateFAdd(fl, llvm::ConstantFP::get(ty, 1.0)), fl);
          Value* res = b_.CreateSelect(b_.CreateFCmpUNE(d, zf), fixed,
                                       call2(llvm::Intrinsic::copysign, zf, b_.CreateFDiv(a, c)));
          // b == 0 -> a / b (inf or nan)
          return fp(b_.CreateSelect(b_.CreateFCmpOEQ(c, zf), b_.CreateFDiv(a, c), res));
        }
        Value* q = binary(Op::Div, a, c, dt);
        if (!s) return q;
        Value* z = llvm::ConstantInt::get(ty, 0);
        Value* r = binary(Op::Mod, a, c, dt);
        Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, z), b_.CreateICmpNE(b_.CreateICmpSLT(r, z), b_.CreateICmpSLT(c, z)));
        return b_.CreateSub(q, b_.CreateZExt(adjust, ty));
      }
      case Op::FloorMod: {
        if (f) {
          Value* m = b_.CreateFRem(a, c);
          Value* zf = llvm::ConstantFP::get(ty, 0.0);
          Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(m, zf), b_.CreateXor(b_.CreateFCmpOLT(c, zf), b_.CreateFCmpOLT(m, zf)));
          return fp(b_.CreateSelect(adjust, b_.CreateFAdd(m, c), m));
        }
        Value* r = binary(Op::Mod, a, c, dt);
        if (!s) return r;
        Value* z = llvm::ConstantInt::get(ty, 0);
        Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, z), b_.CreateICmpNE(b_.CreateICmpSLT(r, z), b_.CreateICmpSLT(c, z)));
        return b_.CreateSelect(adjust, b_.CreateAdd(r, c), r);
      }
      case Op::Max: case Op::Min: {
        bool mx = op == Op::Max;
        if (f) {
          Value* pick = mx ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c);
          Value* r = b_.CreateSelect(pick, a, c);
          // NaN in either operand propagates
          return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, r);
        }
        Value* pick = mx ? (s ? b_.CreateICmpSGT(a, c) : b_.CreateICmpUGT(a, c))
                         : (s ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c));
        return b_.CreateSelect(pick, a, c);
      }
      case Op::Pow: {
        if (f) return fp(call2(llvm::Intrinsic::pow, a, c));
        return int_pow(a, c, s);
      }
      case Op::Atan2: return fp(libm2("atan2", a, c));
      case Op::Hypot: return fp(libm2("hypot", a, c));
      case Op::Copysign: return fp(call2(llvm::Intrinsic::copysign, a, c));
      case Op::CmpLt: return f ? b_.CreateFCmpOLT(a, c) : (s ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c));
      case Op::CmpLe: return f ? b_.CreateFCmpOLE(a, c) : (s ? b_.CreateICmpSLE(a, c) : b_.CreateICmpULE(a, c));
      case Op::CmpEq: return f ? b_.CreateFCmpOEQ(a, c) : b_.CreateICmpEQ(a, c);
      case Op::CmpNe: return f ? b_.CreateFCmpUNE(a, c) : b_.CreateICmpNE(a, c);
      case Op::And: return b_.CreateAnd(a, c);
      case Op::Or: return b_.CreateOr(a, c);
      case Op::Xor: return b_.CreateXor(a, c);
      case Op::Shl: case Op::Shr: {
        unsigned bits = ty->getIntegerBitWidth();
        Value* big = b_.CreateICmpUGE(c, llvm::ConstantInt::get(ty, bits));
        Value* amt = b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), c);
        if (op == Op::Shl) return b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), b_.CreateShl(a, amt));
        if (!s) return b_.CreateSelect(big, llvm::ConstantInt::get(ty, 0), b_.CreateLShr(a, amt));
        return b_.CreateSelect(big, b_.CreateAShr(a, llvm::ConstantInt::get(ty, bits - 1)), b_.CreateAShr(a, amt));
      }
      default: break;
    }
    throw std::runtime_error(std::string("tiny codegen: unsupported binary ") + op_name(op));
  }

  // Integer power by squaring; negative exponents give 0 except for bases 1 and -1.
  Value* int_pow(Value* base, Value* exp, bool is_signed_type) {
    llvm::Type* ty = base->getType();
    auto* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "pow", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "powbody", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "powend", fn_);
    Value* one = llvm::ConstantInt::get(ty, 1);
    Value* z = llvm::ConstantInt::get(ty, 0);
    Value* e0 = is_signed_type ? b_.CreateSelect(b_.CreateICmpSLT(exp, z), z, exp) : exp;
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    auto* r = b_.CreatePHI(ty, 2);
    auto* bb = b_.CreatePHI(ty, 2);
    auto* e = b_.CreatePHI(ty, 2);
    r->addIncoming(one, pre);
    bb->addIncoming(base, pre);
    e->addIncoming(e0, pre);
    b_.CreateCondBr(b_.CreateICmpNE(e, z), body, exit);
    b_.SetInsertPoint(body);
    Value* odd = b_.CreateICmpNE(b_.CreateAnd(e, one), z);
    Value* r2 = b_.CreateSelect(odd, b_.CreateMul(r, bb), r);
    Value* b2 = b_.CreateMul(bb, bb);
    Value* e2 = b_.CreateLShr(e, one);
    r->addIncoming(r2, body);
    bb->addIncoming(b2, body);
    e->addIncoming(e2, body);
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    Value* result = r;
    if (is_signed_type) {
      Value* neg = b_.CreateICmpSLT(exp, z);
      Value* m1 = llvm::ConstantInt::get(ty, uint64_t(-1), true);
      Value* odd_exp = b_.CreateICmpNE(b_.CreateAnd(exp, one), z);
      Value* neg_val = b_.CreateSelect(b_.CreateICmpEQ(base, one), one,
                                       b_.CreateSelect(b_.CreateICmpEQ(base, m1), b_.CreateSelect(odd_exp, m1, one), z));
      result = b_.CreateSelect(neg, neg_val, r);
    }
    return result;
  }

  // Philox-4x32-10 keyed by the node's seed, counter = offset + flat index;
  // the first output word becomes a float in [0, 1) (24 random bits).
  Value* rand(const Node* n, const std::vector<Expr>& idx) {
    Value* i = index(row_major(idx, n->shape));
    uint64_t seed = n->args.seed;
    Value* ctr = b_.CreateAdd(i, b_.getInt64(n->args.offset));
    auto* i32 = b_.getInt32Ty();
    auto* i64 = b_.getInt64Ty();
    Value* c0 = b_.CreateTrunc(ctr, i32);
    Value* c1 = b_.CreateTrunc(b_.CreateLShr(ctr, 32), i32);
    Value* c2 = b_.getInt32(0);
    Value* c3 = b_.getInt32(0);
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; round++) {
      Value* p0 = b_.CreateMul(b_.CreateZExt(c0, i64), b_.getInt64(0xD2511F53u));
      Value* p1 = b_.CreateMul(b_.CreateZExt(c2, i64), b_.getInt64(0xCD9E8D57u));
      Value* hi0 = b_.CreateTrunc(b_.CreateLShr(p0, 32), i32);
      Value* lo0 = b_.CreateTrunc(p0, i32);
      Value* hi1 = b_.CreateTrunc(b_.CreateLShr(p1, 32), i32);
      Value* lo1 = b_.CreateTrunc(p1, i32);
      Value* n0 = b_.CreateXor(b_.CreateXor(hi1, c1), b_.getInt32(k0));
      Value* n2 = b_.CreateXor(b_.CreateXor(hi0, c3), b_.getInt32(k1));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    Value* bits = b_.CreateLShr(c0, 8);
    return b_.CreateFMul(b_.CreateUIToFP(bits, b_.getFloatTy()), llvm::ConstantFP::get(b_.getFloatTy(), 1.0 / 16777216.0));
  }

  const Kernel& k_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  std::string fn_name_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<Value*> buf_ptrs_;
  std::vector<Value*> vars_;
  std::vector<std::unordered_map<std::string, Value*>> memo_;
};

using KernelFn = void (*)(void**, int64_t, int64_t);

class LLVMProgram final : public Program {
 public:
  explicit LLVMProgram(KernelFn fn) : fn_(fn) {}
  void run(void** buffers, int64_t begin, int64_t end) const override { fn_(buffers, begin, end); }

 private:
  KernelFn fn_;
};

std::string function_name(const Kernel& k) {
  std::ostringstream os;
  os << k.name() << "_" << std::hex << std::hash<std::string>()(k.key());
  return os.str();
}

std::unique_ptr<llvm::Module> build_module(const Kernel& k, llvm::LLVMContext& ctx, const std::string& fn) {
  auto m = std::make_unique<llvm::Module>("kernel", ctx);
  LLVMJit::get().configure(*m);
  Builder(k, ctx, *m, fn).build();
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(*m, &es)) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    m->print(os, nullptr);
    throw std::runtime_error("tiny codegen produced invalid IR: " + es.str() + "\n" + os.str());
  }
  return m;
}

}  // namespace

std::string llvm_ir(const Kernel& k) {
  llvm::LLVMContext ctx;
  auto m = build_module(k, ctx, function_name(k));
  std::string ir;
  llvm::raw_string_ostream os(ir);
  m->print(os, nullptr);
  return os.str();
}

std::unique_ptr<Program> compile_llvm(const Kernel& k) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::string fn = function_name(k);
  auto m = build_module(k, *ctx, fn);
  void* addr = LLVMJit::get().compile(std::move(m), std::move(ctx), fn);
  auto p = std::make_unique<LLVMProgram>(reinterpret_cast<KernelFn>(addr));
  p->name = k.name();
  int par = -1;
  for (size_t d = 0; d < k.shape.size(); d++)
    if (k.shape[d] > 1) { par = int(d); break; }
  p->parallel_size = par < 0 ? 1 : k.shape[size_t(par)];
  int64_t per = std::max<int64_t>(1, numel(k.shape) / std::max<int64_t>(1, p->parallel_size));
  int64_t flops = k.flops();
  p->work_per_item = std::max<int64_t>(per, flops / std::max<int64_t>(1, p->parallel_size));
  return p;
}

}  // namespace tiny
