// The CPU code generator. A kernel becomes
//   void k(i8** buffers, i64 begin, i64 end)
// with one loop per iteration dim (the first non-unit dim runs [begin, end),
// which is how the thread pool splits work), an inner loop nest per reduce,
// and loads whose indices come from each view's simplified index expression.
// Loops are plain scalar loops with simple index math; LLVM's O3 pipeline
// vectorizes them for the host's widest vector unit.
#include "engine/codegen/llvm_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/CodeExtractor.h>

#include "engine/codegen/index_walk.h"
#include "engine/codegen/lowering.h"
#include "engine/codegen/register_tile.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/llvm_jit.h"
#include "engine/runtime/thread_pool.h"

namespace tiny {
namespace {

using llvm::Value;

// Whether `pred` holds for a node the kernel computes (its loads' sources not included).
bool any_node(const Kernel& k, const std::function<bool(const Node*)>& pred) {
  std::unordered_set<const Node*> seen;
  std::function<bool(const Node*)> any = [&](const Node* n) {
    if (k.loads.count(n) || !seen.insert(n).second) return false;
    if (pred(n)) return true;
    for (auto& s : n->src)
      if (any(s.get())) return true;
    return false;
  };
  for (auto* r : output_roots(k))
    if (any(r)) return true;
  return false;
}

// The CPU this process generates kernels for.
CpuTarget cpu_target() {
  const VectorUnit& v = LLVMJit::get().vector_unit();
  return {v.lanes, v.registers, thread_pool().size()};
}

class Builder {
 public:
  enum class Part { Whole, SplitPartials, SplitFinish };
  // Prints `plan` (lowering.h): the whole kernel, or a split reduce's partial or finishing part.
  Builder(const Kernel& k, const CpuPlan& plan, llvm::LLVMContext& ctx, llvm::Module& m, std::string fn_name,
          Part part = Part::Whole)
      : k_(k), plan_(plan), ctx_(ctx), m_(m), b_(ctx), fn_name_(std::move(fn_name)),
        split_(plan.split ? &*plan.split : nullptr), part_(part) {}

  // Whether the kernel packs its tile's `a` (pack_a): each slice of the threads does, for all
  // of its rows.
  bool packs_a = false;

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
    // the launch parameters (random keys) follow the buffers
    params_ = b_.CreateBitCast(
        b_.CreateLoad(b_.getInt8PtrTy(), b_.CreateConstGEP1_64(b_.getInt8PtrTy(), bufs, k_.buffers.size())),
        b_.getInt64Ty()->getPointerTo());
    memo_.emplace_back();
    if (part_ != Part::Whole) {
      Value* scratch = b_.CreateLoad(b_.getInt8PtrTy(), b_.CreateConstGEP1_64(b_.getInt8PtrTy(), bufs, k_.buffers.size() + 1));
      scratch_ = b_.CreateBitCast(scratch, reg_type(split_->reduce->dtype)->getPointerTo());
      if (part_ == Part::SplitPartials) emit_split_partials(begin, end);
      else emit_split_finish();
      b_.CreateRetVoid();
      return;
    }

    const Shape& shape = k_.shape;
    const int par = plan_.parallel_dim;
    // All output loop variables exist up front so reduces can be hoisted
    // above the loops their index does not depend on; the plan's own follow them.
    std::vector<Expr> idx(shape.size(), cnst(0));
    for (size_t d = 0; d < shape.size(); d++) idx[d] = placeholder_var(shape[d]);
    vars_.resize(size_t(plan_.num_vars), nullptr);
    const std::optional<ChannelTile>& ct = plan_.channel;
    const std::optional<VectorTile>& vt = plan_.vector_tile;
    Value* pack_buf = nullptr;
    if (ct && !ct->unit) {  // panels packed once per call (or per outer index: pack_inner)
      bool at_par = ct->j == par;
      pack_buf = emit_pack(*ct, at_par ? begin : b_.getInt64(0), at_par ? end : b_.getInt64(shape[size_t(ct->j)]),
                           !ct->pack_inner);
    }
    // the loops outermost first: the dims in order, the plan's inner loop moved last
    std::vector<size_t> order;
    for (size_t d = 0; d < shape.size(); d++)
      if (!plan_.inner_loop || int(d) != plan_.inner_loop->dim) order.push_back(d);
    if (plan_.inner_loop) order.push_back(size_t(plan_.inner_loop->dim));
    // the variables of the loops from order[at] inwards, as idx holds them now
    auto inner_vars = [&](size_t at) {
      std::vector<int> ids;
      for (size_t q = at; q < order.size(); q++) collect_vars(idx[order[q]], ids);
      return ids;
    };
    size_t innermost = 0;  // the position in `order` of the innermost loop
    for (size_t q = 0; q < order.size(); q++)
      if (shape[order[q]] > 1) innermost = q;
    const bool widen_inner = !ct && !vt && has_window_reduce();
    // The innermost loop's iterations said to be independent (each stores its own elements and
    // loads none that any stores): the vectorizer otherwise checks every pair of a store's and
    // a load's buffers at run time and, past 8 pairs, left the loop scalar (an LSTM cell's
    // 5 outputs of 10 inputs: 11 us for 512 elements).
    bool independent = !k_.reads_what_it_writes();
    for (auto& o : k_.outputs) independent &= !o.scatter_index;
    std::function<void(size_t)> nest = [&](size_t at) {
      if (at == order.size()) {
        emit_stores(idx);
        return;
      }
      const size_t d = order[at];
      const bool pack_here = ct && ct->pack_inner && ct->pack_at >= 0 && ct->pack_at < ct->first_dim();
      if (pack_here && int(d) == ct->pack_at) {  // b moves with none of the loops from here to the tiles
        bool at_par = ct->j == par;
        emit_pack(*ct, at_par ? begin : b_.getInt64(0), at_par ? end : b_.getInt64(shape[size_t(ct->j)]));
      }
      if (shape[d] == 1) {
        nest(at + 1);
        return;
      }
      if (plan_.transpose && int(d) == plan_.transpose->run.from) {
        const bool sliced = int(d) == par;  // the run is this thread's slice (whole blocks)
        transposed_blocks(idx, *plan_.transpose, sliced ? begin : b_.getInt64(0),
                          sliced ? end : b_.getInt64(plan_.transpose->run.count));
        return;
      }
      if (plan_.flat_tail && int(d) == plan_.flat_tail->from) {  // the contiguous tail as one loop
        const FlatTail& t = *plan_.flat_tail;
        std::vector<Expr> flat = flat_tail_index(idx, t);
        hoist_invariants(flat, {t.var});
        emit_loop(b_.getInt64(0), b_.getInt64(t.count), [&](Value* iv) {
          vars_[size_t(t.var)] = iv;
          emit_stores(flat);
        });
        return;
      }
      hoist_reduces(output_roots(k_), idx, cnst(1), int(idx[d]->value));
      if (!ct && !vt) hoist_invariants(idx, inner_vars(at));
      Value* lo = int(d) == par ? begin : b_.getInt64(0);
      Value* hi = int(d) == par ? end : b_.getInt64(shape[d]);
      if (ct && int(d) == ct->first_dim()) {
        // the channels and the rows, each this thread's slice where it is the parallel dim
        auto range = [&](int dim) {
          return dim == par ? std::make_pair(begin, end)
                            : std::make_pair<Value*, Value*>(b_.getInt64(0), b_.getInt64(shape[size_t(dim)]));
        };
        auto [lo_j, hi_j] = range(ct->j);
        auto [lo_i, hi_i] = range(ct->i);
        if (ct->row_dims().front() == par) {  // the thread's slice of the flat rows
          int64_t inner = ct->row_count(k_.shape) / shape[size_t(par)];
          lo_i = b_.CreateMul(begin, b_.getInt64(inner));
          hi_i = b_.CreateMul(end, b_.getInt64(inner));
        }
        if (ct->pack_inner && !pack_here) emit_pack(*ct, lo_j, hi_j);
        tiled_channels(idx, *ct, lo_j, hi_j, lo_i, hi_i);
        return;
      }
      if (vt && int(d) == vt->at) {
        const size_t last = size_t(vt->d);
        bool two = vt->d2 >= 0;
        Value* lo_j = two ? (int(last) == par ? begin : b_.getInt64(0)) : lo;
        Value* hi_j = two ? (int(last) == par ? end : b_.getInt64(shape[last])) : hi;
        if (tiled(idx, *vt, lo, hi, lo_j, hi_j)) return;
      }
      // The loop of var v over [lo, hi), dim d at place(v).
      auto loop_over = [&](const Expr& v, const std::function<Expr(const Expr&)>& place, Value* lo, Value* hi) {
        idx[d] = place(v);
        std::vector<int64_t> cuts = mask_cuts(idx, v);
        if (cuts.size() > 2 && split_copies_ * int64_t(cuts.size() - 1) <= kMaxSplitCopies) {
          // Index-set splitting: one loop per segment between mask boundaries,
          // its var ranged so that the masks decided there fold away (the
          // middle segment of a padded view loads unmasked and vectorizes).
          split_copies_ *= int64_t(cuts.size() - 1);
          for (size_t s = 0; s + 1 < cuts.size(); s++) {
            Value* seg_lo = clamp_to(b_.getInt64(cuts[s]), lo, hi);
            Value* seg_hi = clamp_to(b_.getInt64(cuts[s + 1]), lo, hi);
            idx[d] = place(var_range(int(v->value), cuts[s], cuts[s + 1]));
            // where the masks fold away, what they guarded may no longer depend on the
            // loops (a padded copy's per-channel batch-norm terms)
            if (!ct && !vt) hoist_invariants(idx, inner_vars(at));
            emit_loop(seg_lo, seg_hi, [&](Value* iv) {
              vars_[size_t(v->value)] = iv;
              nest(at + 1);
            }, false, widen_inner && at == innermost, independent && at == innermost);
          }
          split_copies_ /= int64_t(cuts.size() - 1);
          return;
        }
        emit_loop(lo, hi, [&](Value* iv) {
          if (v->op == EOp::Var) vars_[size_t(v->value)] = iv;  // a one-step residue's var folds to 0
          nest(at + 1);
        }, false, widen_inner && at == innermost, independent && at == innermost);
      };
      const Expr whole = idx[d];
      // (the dims a channel tile's b is packed per index of keep their variables: b_idx reads them)
      const int64_t m = int(d) == par || k_.serial || (ct && ct->pack_inner && int(d) < ct->first_dim())
                            ? 1
                            : mask_residues(idx, whole);
      if (m > 1 && split_copies_ * m <= kMaxSplitCopies) {
        split_copies_ *= m;
        for (int64_t r = 0; r < m && r < shape[d]; r++) {
          const int64_t count = (shape[d] - r + m - 1) / m;  // v = m * u + r < shape[d]
          loop_over(placeholder_var(count), [&](const Expr& u) { return add(mul(u, m), cnst(r)); },
                    b_.getInt64(0), b_.getInt64(count));
        }
        split_copies_ /= m;
      } else {
        loop_over(whole, [](const Expr& v) { return v; }, lo, hi);
      }
      idx[d] = whole;
    };
    if (plan_.blocks) {
      blocks_.emplace();
      static_cast<ReduceBlocking&>(*blocks_) = *plan_.blocks;
    }
    if (par < 0) {
      // a single element: run once when the slice is non-empty
      auto* body = llvm::BasicBlock::Create(ctx_, "once", fn_);
      auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(begin, end), body, exit);
      b_.SetInsertPoint(body);
      nest(0);
      b_.CreateBr(exit);
      b_.SetInsertPoint(exit);
    } else if (blocks_) {
      ReduceBlocks& rb = *blocks_;
      // the thread's tile elements: its slice of the parallel dim times the
      // other dims, the channels rounded up to whole tiles
      int64_t per_index = round_up(shape[size_t(ct->j)], ct->cols);
      for (size_t d = 0; d < shape.size(); d++)
        if (int(d) != par && int(d) != ct->j) per_index *= shape[d];
      Value* bytes = b_.CreateMul(b_.CreateSub(end, begin), b_.getInt64(per_index * 4));
      rb.scratch = b_.CreateBitCast(b_.CreateCall(scratch_alloc(), {bytes}), b_.getFloatTy()->getPointerTo());
      rb.cursor = llvm::IRBuilder<>(entry_, entry_->begin()).CreateAlloca(b_.getInt64Ty());
      emit_loop(b_.getInt64(0), b_.getInt64(rb.count), [&](Value* block) {
        rb.block = block;
        rb.first = b_.CreateICmpEQ(block, b_.getInt64(0));
        rb.last = b_.CreateICmpEQ(block, b_.getInt64(rb.count - 1));
        b_.CreateStore(b_.getInt64(0), rb.cursor);
        nest(0);
      }, /*scalar=*/true);
      b_.CreateCall(scratch_free(), {b_.CreateBitCast(rb.scratch, b_.getInt8PtrTy())});
      blocks_.reset();
    } else {
      nest(0);
    }
    if (pack_buf) b_.CreateCall(scratch_free(), {pack_buf});
    b_.CreateRetVoid();
    for (const auto& blocks : epilogues_) outline(blocks, "epilogue");
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
  // A loop variable whose value is bound when its loop is emitted.
  Expr placeholder_var(int64_t size) { return new_var(nullptr, size); }

  // Computes, here and now, the reduces under `roots` that the loops numbered
  // `min_id` and above do not change (see hoistable_reduces).
  void hoist_reduces(const std::vector<const Node*>& roots, const std::vector<Expr>& idx, const Expr& valid, int min_id) {
    auto found = hoistable_reduces(
        roots, idx, valid, min_id, [&](const Node* n) { return k_.loads.count(n) > 0; },
        [&](int64_t size) { return placeholder_var(size); });
    for (auto& r : found) eval(r.node, r.idx, r.valid);
  }

  // Computes, here and now, the values under the outputs that the loops over the variables
  // `inner` do not change (a batch norm's per-channel scale, 1/sqrt(var + eps), above the
  // loops over the spatial dims): LLVM cannot move their loads above the loops' stores, as it
  // cannot tell the buffers apart. Not a buffer this kernel writes (hoisted, a load would miss
  // the stores), nor under a reduce (hoist_reduces) or a gather (its index is data).
  void hoist_invariants(const std::vector<Expr>& idx, const std::vector<int>& inner) {
    auto varies = [&](const Expr& e) {
      for (int id : inner)
        if (uses_vars(e, id, id + 1)) return true;
      return false;
    };
    std::unordered_set<int> written;
    for (auto& o : k_.outputs) written.insert(o.buffer);
    auto reads_written = [&](const Node* root) {
      std::vector<const Node*> stack{root};
      std::unordered_set<const Node*> seen;
      while (!stack.empty()) {
        const Node* n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        auto load = k_.loads.find(n);
        if (load != k_.loads.end()) {
          if (written.count(load->second)) return true;
          continue;
        }
        if (n->op == Op::Reduce || n->op == Op::Gather) return true;
        for (auto& src : n->src) stack.push_back(src.get());
      }
      return false;
    };
    std::vector<std::tuple<const Node*, std::vector<Expr>, Expr>> found;
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = [&](int64_t size) { return placeholder_var(size); };
    auto invariant = [&](const std::vector<Expr>& ix, const Expr& v) {
      bool inv = !varies(v);
      for (auto& e : ix) inv = inv && !varies(e);
      return inv;
    };
    w.visit = [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      if (n->op == Op::Gather) {
        // the parts of a gather's index its run does not change (an embedding's row, a load:
        // LLVM cannot move it above the stores), as gather_run_index takes them apart
        index_terms(n->src[1].get(), ix, v, [&](const Node* part, const std::vector<Expr>& pix, const Expr& pv) {
          if (invariant(pix, pv) && part->op != Op::Const && !reads_written(part)) found.emplace_back(part, pix, pv);
          return nullptr;
        });
        return false;
      }
      if (n->op == Op::Reduce) return false;
      if (!invariant(ix, v)) return true;
      // a constant or a lone load costs nothing to leave in the loop
      if (n->op != Op::Const && !k_.loads.count(n) && !reads_written(n)) found.emplace_back(n, ix, v);
      return false;
    };
    for (auto* r : output_roots(k_)) w.walk(r, idx, cnst(1));
    for (auto& [n, ix, v] : found) eval(n, ix, v);
  }

  // parallel: no iteration reads what another writes (an epilogue's in-place optimizer update
  // loads and stores each element once): said so to the vectorizer, which would otherwise need
  // a run-time overlap check per pair of buffers and, past its limit of them, stays scalar.
  void emit_loop(Value* lo, Value* hi, const std::function<void(Value*)>& body, bool scalar = false,
                 bool widen = false, bool parallel = false) {
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
    auto* br = b_.CreateBr(header);
    iv->addIncoming(next, b_.GetInsertBlock());
    llvm::MDNode* accesses = nullptr;
    if (parallel) {  // the body's blocks: bodyb and those made after `exit`
      accesses = llvm::MDNode::getDistinct(ctx_, {});
      auto tag = [&](llvm::BasicBlock& bb) {
        for (llvm::Instruction& in : bb)
          if (in.mayReadOrWriteMemory()) in.setMetadata(llvm::LLVMContext::MD_access_group, accesses);
      };
      tag(*bodyb);
      for (auto it = std::next(exit->getIterator()); it != fn_->end(); ++it) tag(*it);
    }
    if (scalar || widen || parallel) {
      // scalar: the body is already wide (an unrolled tile): keep the loop vectorizer off it;
      // widen: vectorize even below the vectorizer's 16 iterations (a pooling window's row
      // of 15 outputs past the padded one), where it would not without a scalar remainder.
      auto md = [&](const char* name, llvm::Constant* v) {
        return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(v)});
      };
      std::vector<llvm::Metadata*> ops{nullptr};
      if (accesses) ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"), accesses}));
      if (scalar) {
        ops.push_back(md("llvm.loop.vectorize.width", b_.getInt32(1)));
        // nor interleaved: a channel tile's reduce step (28 accumulators) in two interleaved
        // copies came out of the register allocator rotating them through copies, two of them
        // spilled (a linear layer's weight gradient 2.55 -> 1.9 ms, its forward with GELU 3.5
        // -> 1.8)
        ops.push_back(md("llvm.loop.interleave.count", b_.getInt32(1)));
      } else if (widen) {
        ops.push_back(md("llvm.loop.vectorize.enable", b_.getTrue()));
        ops.push_back(md("llvm.loop.vectorize.predicate.enable", b_.getTrue()));
      }
      auto* self = llvm::MDNode::getDistinct(ctx_, ops);
      self->replaceOperandWith(0, self);
      br->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    b_.SetInsertPoint(exit);
  }

  // ---- index-set splitting at mask boundaries
  static constexpr int64_t kMaxSplitCopies = 64;  // loop bodies one innermost loop may become
  int64_t split_copies_ = 1;

  static int64_t floordiv_i(int64_t a, int64_t b) {  // b > 0
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
  }
  Value* smin(Value* a, Value* b) { return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b); }
  Value* smax(Value* a, Value* b) { return b_.CreateSelect(b_.CreateICmpSGT(a, b), a, b); }
  Value* clamp_to(Value* v, Value* lo, Value* hi) { return smin(smax(v, lo), hi); }
  // floor(a / d), d > 0; a plain unsigned division where a is known not to be negative
  Value* floor_div(Value* a, int64_t d, bool nonnegative = false) {
    if (nonnegative) return b_.CreateUDiv(a, b_.getInt64(d));
    Value* q = b_.CreateSDiv(a, b_.getInt64(d));
    Value* fix = b_.CreateAnd(b_.CreateICmpNE(b_.CreateMul(q, b_.getInt64(d)), a), b_.CreateICmpSLT(a, b_.getInt64(0)));
    return b_.CreateSub(q, b_.CreateZExt(fix, b_.getInt64Ty()));
  }
  static void collect_lts(const Expr& e, std::vector<Expr>& out) {
    if (e->op == EOp::Lt) out.push_back(e);
    for (auto& s : e->src) collect_lts(s, out);
  }

  // The segment bounds of loop var v in which every mask atom
  // lt(a*v + r, c) under the outputs is either provably true or provably
  // false (r ranging over the other variables, reduce loops included) or
  // neither throughout: {0, cuts..., size}; fewer than 3 entries means no
  // split. Atoms where v is not linear are left as they are.
  std::vector<int64_t> mask_cuts(const std::vector<Expr>& idx, const Expr& v) {
    return mask_cuts(output_roots(k_), idx, cnst(1), v);
  }
  // The same below `roots` evaluated at `idx` where `valid` holds (a reduce's source at its
  // loop variables).
  std::vector<int64_t> mask_cuts(const std::vector<const Node*>& roots, const std::vector<Expr>& idx,
                                 const Expr& valid, const Expr& v) {
    if (v->op != EOp::Var) return {};
    int vid = int(v->value);
    std::vector<Expr> atoms;
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = [&](int64_t size) { return placeholder_var(size); };
    w.visit = [&](const Node* n, const std::vector<Expr>&, const Expr& valid) {
      collect_lts(valid, atoms);
      return true;
    };
    w.on_leaf = [&](const Node*, const std::vector<Expr>&, const Expr& valid) { collect_lts(valid, atoms); };
    for (auto* r : roots) w.walk(r, idx, valid);
    std::vector<int64_t> cuts{v->vmin, v->vmax + 1};
    for (auto& at : atoms) {
      const Expr& x = at->src[0];
      int64_t c = at->value;
      auto a = linear_coefficient(x, vid);
      if (!a || *a == 0) continue;
      int64_t lo_term = std::min(*a * v->vmin, *a * v->vmax), hi_term = std::max(*a * v->vmin, *a * v->vmax);
      int64_t rmin = x->vmin - lo_term, rmax = x->vmax - hi_term;
      int64_t t, f;  // where the atom starts / stops being decided
      if (*a > 0) {
        t = floordiv_i(c - rmax - 1, *a) + 1;  // true for v < t
        f = -floordiv_i(rmin - c, *a);         // false for v >= f (ceil((c - rmin) / a))
      } else {
        t = floordiv_i(rmax - c, -*a) + 1;  // true for v >= t
        f = floordiv_i(rmin - c, -*a) + 1;  // false for v < f
      }
      for (int64_t p : {t, f})
        if (p > v->vmin && p <= v->vmax) cuts.push_back(p);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    return cuts;
  }

  // Runs `loop(lo, hi)` over [0, extent) of a reduce loop variable, once per segment between
  // the places where the masks below `roots` at `idx` (where `valid`) change along it (a reduce
  // over a concatenated axis: an RNN's gate gradients, its time steps' stored runs), each slot
  // in `places` (the variable, as the loop body reads it) narrowed to the segment: there the
  // selects among the parts fold and a step loads its one part. Once over the whole range
  // where nothing changes or the splits would copy the body too often.
  void split_at_masks(const std::vector<const Node*>& roots, const std::vector<Expr>& idx, const Expr& valid,
                      const std::vector<Expr*>& places, int64_t extent,
                      const std::function<void(int64_t, int64_t)>& loop) {
    const Expr whole = *places[0];
    std::vector<int64_t> cuts = mask_cuts(roots, idx, valid, whole);
    const int64_t segments = int64_t(cuts.size()) - 1;
    if (segments < 2 || split_copies_ * segments > kMaxSplitCopies) return loop(0, extent);
    split_copies_ *= segments;
    for (size_t s = 0; s + 1 < cuts.size(); s++) {
      for (Expr* p : places) *p = var_range(int(whole->value), cuts[s], cuts[s + 1]);
      loop(cuts[s], cuts[s + 1]);
    }
    for (Expr* p : places) *p = whole;
    split_copies_ /= segments;
  }

  // The small modulus m (2..kMaxResidues) of the divisions and remainders of loop var v in the
  // kernel's masks and load indices (a strided convolution's dilated gradient: mask
  // (h - 1) % 2 == 0, load at (h - 1) / 2): the loop then runs once per residue r,
  // v = m * u + r, where they fold to constants and the index moves by 1 along u. 1: none.
  static constexpr int64_t kMaxResidues = 4;
  int64_t mask_residues(const std::vector<Expr>& idx, const Expr& v) {
    if (v->op != EOp::Var) return 1;
    const int vid = int(v->value);
    int64_t m = 1;
    std::function<void(const Expr&)> scan = [&](const Expr& e) {
      if ((e->op == EOp::Mod || e->op == EOp::Div) && uses_vars(e, vid, vid + 1)) {
        auto a = linear_coefficient(e->src[0], vid);
        int64_t c = e->value;
        int64_t need = a && *a != 0 ? c / std::gcd(std::abs(*a), c) : kMaxResidues + 1;
        if (need <= kMaxResidues) m = std::lcm(m, need);  // lcm of numbers <= 4: no overflow
      }
      for (auto& s : e->src) scan(s);
    };
    IndexWalker w;
    w.is_leaf = [&](const Node* n) { return k_.loads.count(n) > 0; };
    w.fresh_var = [&](int64_t size) { return placeholder_var(size); };
    w.visit = [&](const Node*, const std::vector<Expr>&, const Expr& valid) {
      scan(valid);
      return true;
    };
    w.on_leaf = [&](const Node* n, const std::vector<Expr>& ix, const Expr& valid) {
      scan(valid);
      scan(row_major(ix, n->shape));
    };
    for (auto* r : output_roots(k_)) w.walk(r, idx, cnst(1));
    return m <= kMaxResidues ? m : 1;
  }

  // ---- index expressions
  Value* index(const Expr& e) {
    std::string key = "#" + to_string(e);
    if (Value* v = lookup(key)) return v;
    Value* r = nullptr;
    switch (e->op) {
      case EOp::Const: r = b_.getInt64(e->value); break;
      case EOp::Var:
        r = vars_[size_t(e->value)];
        if (!r) throw std::logic_error("tiny codegen: variable " + std::to_string(e->value) + " used outside its loop");
        break;
      case EOp::Add: {
        // The terms summed in groups by the newest variable they use, oldest first: a group's
        // sum is one value, loop-invariant where its variables are outer loops' (LLVM hoists
        // it), so an access in the innermost loop adds one value. A matmul reading a head
        // permutation, (i / 128) 65536 + (k / 64) 8192 + (i % 128) 64 + k % 64, added each
        // row's terms per reduce step: 4.8 ms where its contiguous copy took 2.6.
        std::map<int, Expr> groups;  // newest variable's id (-1: none) -> the sum of its terms
        for (auto& t : e->src) {
          std::vector<int> ids;
          collect_vars(t, ids);
          int newest = ids.empty() ? -1 : *std::max_element(ids.begin(), ids.end());
          auto [at, fresh] = groups.emplace(newest, t);
          if (!fresh) at->second = add(at->second, t);
        }
        if (groups.size() > 1) {
          for (auto& [id, sum] : groups) r = r ? b_.CreateAdd(r, index(sum), "", false, true) : index(sum);
          break;
        }
        r = index(e->src[0]);
        for (size_t i = 1; i < e->src.size(); i++) r = b_.CreateAdd(r, index(e->src[i]), "", false, true);
        break;
      }
      case EOp::Mul: r = b_.CreateMul(index(e->src[0]), b_.getInt64(e->value), "", false, true); break;
      case EOp::Div: r = floor_div(index(e->src[0]), e->value, e->src[0]->vmin >= 0); break;
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
      case EOp::Bounded: r = index(e->src[0]); break;
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

  // ---- stores
  void emit_stores(const std::vector<Expr>& idx) { emit_stores(std::vector<std::vector<Expr>>{idx}); }

  // The outputs at several iteration indices (a register tile): every value
  // is computed (its loads done) before the first store, and the stores go
  // output by output. Interleaved, a load could alias an earlier store for
  // all LLVM knows, and the SLP vectorizer would give up on the whole tile.
  void emit_stores(const std::vector<std::vector<Expr>>& idxs) {
    std::vector<std::vector<Value*>> vals(idxs.size());
    for (size_t c = 0; c < idxs.size(); c++)
      for (auto& o : k_.outputs) {
        if (o.scatter_index) continue;
        DType dt = k_.buffers[o.buffer]->dtype();
        // Pure data movement stores the bits it loaded (NaN payloads survive).
        Value* m = o.value->dtype == dt ? eval_bits(o.value.get(), idxs[c], cnst(1)) : nullptr;
        if (!m) m = to_mem(eval(o.value.get(), idxs[c], cnst(1)), dt);
        vals[c].push_back(m);
      }
    size_t k = 0;
    for (auto& o : k_.outputs) {
      if (o.scatter_index) continue;
      DType dt = k_.buffers[o.buffer]->dtype();
      for (size_t c = 0; c < idxs.size(); c++) {
        auto [ix, valid] = o.store.index_valid(idxs[c]);
        b_.CreateStore(vals[c][k], b_.CreateGEP(mem_type(dt), buf_ptrs_[o.buffer], index(ix)));
      }
      k++;
    }
    for (auto& o : k_.outputs)
      if (o.scatter_index)
        for (auto& idx : idxs) emit_scatter(o, idx);
  }

  // Stores (or combines) at a data-dependent flat index; out-of-range
  // indices are skipped (the torch layer has checked them already).
  void emit_scatter(const KernelOutput& o, const std::vector<Expr>& idx) {
    DType dt = k_.buffers[o.buffer]->dtype();
    int64_t n = k_.buffers[o.buffer]->numel();
    Value* at = eval(o.scatter_index.get(), idx, cnst(1));
    Value* ok = b_.CreateAnd(b_.CreateICmpSGE(at, b_.getInt64(0)), b_.CreateICmpSLT(at, b_.getInt64(n)));
    auto* store = llvm::BasicBlock::Create(ctx_, "scatter", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "scattered", fn_);
    b_.CreateCondBr(ok, store, done);
    b_.SetInsertPoint(store);
    Value* ptr = b_.CreateGEP(mem_type(dt), buf_ptrs_[o.buffer], at);
    Value* v = eval(o.value.get(), idx, cnst(1));
    if (o.accumulate) v = combine(o.rop, from_mem(b_.CreateLoad(mem_type(dt), ptr), dt), v, dt);
    b_.CreateStore(to_mem(v, dt), ptr);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    memo_.back().clear();  // values computed in the conditional block do not dominate what follows
  }

  // The value as stored bits when it is loads seen through views (or a
  // same-size bitcast of anything); nullptr when it computes something.
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
    if (n->op == Op::Bitcast && itemsize(n->dtype) == itemsize(n->src[0]->dtype)) {
      // The source's bits, never through a float register (NaN payloads survive).
      const Node* src = n->src[0].get();
      Value* bits = eval_bits(src, idx, valid);
      if (!bits) bits = to_mem(eval(src, idx, valid), src->dtype);
      return b_.CreateBitCast(bits, mem_type(n->dtype));
    }
    if (n->op != Op::View) return nullptr;
    SourceIndex s = view_source_index(n, idx);
    if (is_false(s.valid)) return nullptr;
    Value* v = eval_bits(n->src[0].get(), s.idx, land(valid, s.valid));
    if (v && !is_true(s.valid)) v = b_.CreateSelect(condition(s.valid), v, llvm::Constant::getNullValue(v->getType()));
    return v;
  }

  // ---- expression evaluation
  // An int64 index as opaque runtime values times constants plus an index expression (an
  // arange seen through views, constants): the row an embedding or index_select reads,
  // idx[i] * 512, plus its column j.
  struct IndexTerms {
    std::vector<std::pair<Value*, int64_t>> values;  // value x coefficient
    Expr affine = cnst(0);
  };
  using OpaqueIndex = std::function<Value*(const Node*, const std::vector<Expr>&, const Expr&)>;
  IndexTerms index_terms(const Node* n, const std::vector<Expr>& idx, const Expr& valid, const OpaqueIndex& opaque) {
    IndexTerms t;
    if (n->dtype != DType::Int64 || k_.loads.count(n)) {
      t.values.push_back({opaque(n, idx, valid), 1});
      return t;
    }
    switch (n->op) {
      case Op::Const: t.affine = cnst(n->args.value.to_int()); return t;
      case Op::Arange:
        t.affine = add(cnst(n->args.value.to_int()), mul(row_major(idx, n->shape), n->args.value2.to_int()));
        return t;
      case Op::View: {
        SourceIndex s = view_source_index(n, idx);
        if (is_true(s.valid)) return index_terms(n->src[0].get(), s.idx, valid, opaque);
        break;
      }
      case Op::Add: {
        t = index_terms(n->src[0].get(), idx, valid, opaque);
        IndexTerms o = index_terms(n->src[1].get(), idx, valid, opaque);
        t.values.insert(t.values.end(), o.values.begin(), o.values.end());
        t.affine = add(t.affine, o.affine);
        return t;
      }
      case Op::Mul:
        for (int side = 0; side < 2; side++) {
          const Node* c = n->src[size_t(side)].get();
          while (c->op == Op::View && !k_.loads.count(c)) c = c->src[0].get();  // a broadcast constant
          if (c->op != Op::Const || k_.loads.count(c)) continue;
          int64_t factor = c->args.value.to_int();
          t = index_terms(n->src[size_t(1 - side)].get(), idx, valid, opaque);
          for (auto& v : t.values) v.second *= factor;
          t.affine = mul(t.affine, factor);
          return t;
        }
        break;
      default: break;
    }
    t.values.push_back({opaque(n, idx, valid), 1});
    return t;
  }

  // A gather's flat index where it is one runtime value u times c plus an expression of the
  // loop variables (an embedding's row u = idx[i] * 512, its column j): u is clamped to where
  // the whole run c u + [min, max] of the expression lies in the source, rather than each
  // element's index on its own, so the loads stay consecutive along j and vectorize (an
  // embedding was one element per compare and select). Indices out of range are errors the
  // torch layer raises first; the clamp only keeps a bad one's loads inside the buffer.
  std::optional<Expr> gather_run_index(const Node* index, const std::vector<Expr>& idx, const Expr& valid,
                                       int64_t count) {
    IndexTerms t = index_terms(index, idx, valid, [&](const Node* n, const std::vector<Expr>& ix, const Expr& v) {
      return eval(n, ix, v);
    });
    if (t.affine->is_const() || t.values.empty()) return std::nullopt;
    Value* u = nullptr;
    int64_t c = 1;
    if (t.values.size() == 1) {
      u = t.values[0].first;
      c = t.values[0].second;
    } else {
      for (auto& [v, f] : t.values) {
        Value* term = b_.CreateMul(v, b_.getInt64(f));
        u = u ? b_.CreateAdd(u, term) : term;
      }
    }
    if (c <= 0) return std::nullopt;
    // c u + affine in [0, count) for every u in [lo, hi)
    const int64_t lo = -floordiv_i(t.affine->vmin, c);  // ceil(-vmin / c)
    const int64_t hi = floordiv_i(count - 1 - t.affine->vmax, c) + 1;
    if (lo >= hi) return std::nullopt;
    Value* ok = b_.CreateAnd(b_.CreateICmpSGE(u, b_.getInt64(lo)), b_.CreateICmpSLT(u, b_.getInt64(hi)));
    Expr run = var_range(int(vars_.size()), lo, hi);
    vars_.push_back(b_.CreateSelect(ok, u, b_.getInt64(lo)));
    return add(mul(run, c), t.affine);
  }

  Value* eval(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    std::string key = context_key(n, idx, valid);
    if (Value* v = lookup(key)) return v;
    Value* r = eval_uncached(n, idx, valid);
    remember(key, r);
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
      case Op::Param: return param(n);
      case Op::View: {
        SourceIndex s = view_source_index(n, idx);
        if (is_false(s.valid)) return zero(n->dtype);
        Value* v = eval(n->src[0].get(), s.idx, land(valid, s.valid));
        if (!is_true(s.valid)) v = b_.CreateSelect(condition(s.valid), v, zero(n->dtype));
        return v;
      }
      case Op::Contiguous: return eval(n->src[0].get(), idx, valid);
      case Op::Reduce: return reduce(n, idx, valid);
      case Op::Gather: {
        // the source evaluated at a runtime flat index (clamped into range)
        const Node* src = n->src[0].get();
        int64_t count = std::max<int64_t>(1, src->numel());
        if (auto flat = gather_run_index(n->src[1].get(), idx, valid, count)) return eval(src, unflatten(*flat, src->shape), valid);
        Value* at = eval(n->src[1].get(), idx, valid);
        Value* ok = b_.CreateAnd(b_.CreateICmpSGE(at, b_.getInt64(0)), b_.CreateICmpSLT(at, b_.getInt64(count)));
        Expr flat = new_var(b_.CreateSelect(ok, at, b_.getInt64(0)), count);
        return eval(src, unflatten(flat, src->shape), valid);
      }
      case Op::Where: {
        Value* c = eval(n->src[0].get(), idx, valid);
        return b_.CreateSelect(c, eval(n->src[1].get(), idx, valid), eval(n->src[2].get(), idx, valid));
      }
      case Op::Cast: return cast(eval(n->src[0].get(), idx, valid), n->src[0]->dtype, n->dtype);
      case Op::Bitcast: {
        if (Value* bits = eval_bits(n, idx, valid)) return from_mem(bits, n->dtype);
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

  // A reduce over a few taps of short axes (a pooling window, not a row of logits).
  static constexpr int64_t kMaxWindowTaps = 27, kMaxWindowAxis = 4;
  bool has_window_reduce() const {
    return any_node(k_, [](const Node* n) {
      if (n->op != Op::Reduce) return false;
      std::vector<int> axes;
      for (int a : n->args.axes)
        if (n->src[0]->shape[size_t(a)] > 1) axes.push_back(a);
      return !axes.empty() && small_window(n->src[0].get(), axes);
    });
  }
  static bool small_window(const Node* src, const std::vector<int>& axes) {
    int64_t taps = 1;
    for (int a : axes) {
      if (src->shape[size_t(a)] > kMaxWindowAxis) return false;
      taps *= src->shape[size_t(a)];
    }
    return taps <= kMaxWindowTaps;
  }

  Value* reduce(const Node* n, const std::vector<Expr>& idx, const Expr& valid) {
    const Node* src = n->src[0].get();
    DType dt = n->dtype, sdt = src->dtype;
    for (int a : n->args.axes)
      if (src->shape[a] == 0) return identity(n->args.rop, dt);  // nothing to combine (and nothing to read)
    llvm::Type* ty = reg_type(dt);
    // the accumulator lives in an entry-block slot; mem2reg turns it into a phi
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    auto* acc = eb.CreateAlloca(ty);
    b_.CreateStore(identity(n->args.rop, dt), acc);
    std::vector<Expr> sub = idx;
    std::vector<int> axes;
    for (int a : n->args.axes) {
      if (src->shape[a] == 0) return round_to(identity(n->args.rop, dt), dt);  // nothing to reduce
      if (src->shape[a] > 1) axes.push_back(a);
    }
    if (axes.empty()) return round_to(cast(eval(src, sub, valid), sdt, dt), dt);
    if (small_window(src, axes)) {
      // A pooling window: its taps in line, at constant offsets, so that the masks fold per
      // tap and the loop of the output's last dim around it is the one the vectorizer widens
      // (a 3-tap loop vectorized poorly: masked gathers of 4 with 3 lanes used). The same
      // order as the loops: the same result.
      Value* r = identity(n->args.rop, dt);
      std::function<void(size_t)> taps = [&](size_t i) {
        if (i == axes.size()) {
          Value* v = eval(src, sub, valid);
          r = combine(n->args.rop, r, sdt != dt ? cast(v, sdt, dt) : v, dt);
          return;
        }
        for (int64_t t = 0; t < src->shape[size_t(axes[i])]; t++) {
          sub[size_t(axes[i])] = cnst(t);
          taps(i + 1);
        }
      };
      taps(0);
      return round_to(r, dt);
    }
    for (int a : axes) sub[a] = placeholder_var(src->shape[a]);
    // reduces inside that do not depend on these loops are computed first
    hoist_reduces({src}, sub, valid, int(sub[axes[0]]->value));
    // A float sum over several loops keeps one accumulator per loop: each
    // inner loop's partial sum starts from zero and is added once to the one
    // outside, so rounding error grows with the loops' lengths added, not
    // multiplied (batch norm's statistics over N*H*W).
    bool cascade = n->args.rop == ReduceOp::Sum && is_float(dt) && axes.size() > 1;
    std::vector<llvm::AllocaInst*> accs{acc};
    if (cascade)
      for (size_t i = 1; i < axes.size(); i++) accs.push_back(eb.CreateAlloca(ty));
    // A float max or min that propagates NaN is a compare-and-select chain the loop vectorizer
    // does not take (a softmax row's max: one element per 4-5 cycles). It runs as maxnum /
    // minnum without NaNs or signed zeros, which it takes, beside two ors it also takes:
    // whether a NaN was seen (the result is NaN) and whether the zero that wins a max (+0) or a
    // min (-0) was: a zero result gets its sign from that, as IEEE's maximum and minimum.
    const bool minmax = is_float(dt) && (n->args.rop == ReduceOp::Max || n->args.rop == ReduceOp::Min);
    llvm::AllocaInst *nan_seen = nullptr, *zero_seen = nullptr;
    llvm::Type* bits_ty = b_.getIntNTy(ty->getPrimitiveSizeInBits());
    Value* sign_bit = llvm::ConstantInt::get(bits_ty, llvm::APInt::getSignMask(bits_ty->getIntegerBitWidth()));
    // the bits of the winning zero: +0 for a max, -0 for a min
    Value* win_zero = n->args.rop == ReduceOp::Max ? llvm::ConstantInt::get(bits_ty, 0) : sign_bit;
    if (minmax) {
      nan_seen = eb.CreateAlloca(b_.getInt1Ty());
      zero_seen = eb.CreateAlloca(b_.getInt1Ty());
      b_.CreateStore(b_.getFalse(), nan_seen);
      b_.CreateStore(b_.getFalse(), zero_seen);
    }
    std::function<void(size_t)> nest = [&](size_t i) {
      if (i == axes.size()) {
        Value* v = eval(src, sub, valid);
        if (sdt != dt) v = cast(v, sdt, dt);
        llvm::AllocaInst* a = accs.back();
        Value* cur = b_.CreateLoad(ty, a);
        if (minmax) {
          b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt1Ty(), nan_seen), b_.CreateFCmpUNO(v, v)), nan_seen);
          b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt1Ty(), zero_seen), b_.CreateICmpEQ(b_.CreateBitCast(v, bits_ty), win_zero)), zero_seen);
          llvm::FastMathFlags fmf;
          fmf.setNoNaNs();
          fmf.setNoSignedZeros();
          auto id = n->args.rop == ReduceOp::Max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum;
          auto* r = llvm::cast<llvm::Instruction>(call2(id, cur, v));
          r->setFastMathFlags(fmf);
          b_.CreateStore(r, a);
          return;
        }
        b_.CreateStore(combine(n->args.rop, cur, v, dt), a);
        return;
      }
      const int a = axes[i];
      const int var = int(sub[a]->value);
      split_at_masks({src}, sub, valid, {&sub[a]}, src->shape[a], [&](int64_t lo, int64_t hi) {
        emit_loop(b_.getInt64(lo), b_.getInt64(hi), [&](Value* iv) {
          vars_[size_t(var)] = iv;
          if (cascade && i + 1 < axes.size()) {
            b_.CreateStore(identity(n->args.rop, dt), accs[i + 1]);
            nest(i + 1);
            Value* cur = b_.CreateLoad(ty, accs[i]);
            b_.CreateStore(combine(n->args.rop, cur, b_.CreateLoad(ty, accs[i + 1]), dt), accs[i]);
          } else {
            nest(i + 1);
          }
        });
      });
    };
    nest(0);
    Value* r = b_.CreateLoad(ty, acc);
    if (minmax) {
      Value* lose_zero = b_.CreateXor(win_zero, sign_bit);
      Value* zero = b_.CreateBitCast(b_.CreateSelect(b_.CreateLoad(b_.getInt1Ty(), zero_seen), win_zero, lose_zero), ty);
      r = b_.CreateSelect(b_.CreateFCmpOEQ(r, llvm::ConstantFP::get(ty, 0.0)), zero, r);
      r = b_.CreateSelect(b_.CreateLoad(b_.getInt1Ty(), nan_seen), llvm::ConstantFP::getNaN(ty), r);
    }
    return round_to(r, dt);
  }

  // ---- split reductions (see SplitPlan)
  void emit_split_partials(Value* begin, Value* end) {
    const SplitPlan& p = *split_;
    const Node* r = p.reduce;
    const Node* src = r->src[0].get();
    DType dt = r->dtype, sdt = src->dtype;
    llvm::Type* ty = reg_type(dt);
    int64_t extent = src->shape[size_t(p.axis)];
    emit_loop(begin, end, [&](Value* chunk) {
      Value* lo = b_.CreateSDiv(b_.CreateMul(chunk, b_.getInt64(extent)), b_.getInt64(p.chunks));
      Value* hi = b_.CreateSDiv(b_.CreateMul(b_.CreateAdd(chunk, b_.getInt64(1)), b_.getInt64(extent)), b_.getInt64(p.chunks));
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      auto* acc = eb.CreateAlloca(ty);
      b_.CreateStore(identity(r->args.rop, dt), acc);
      std::vector<Expr> sub = p.idx;
      std::vector<int> axes;
      for (int a : r->args.axes)
        if (src->shape[a] > 1) axes.push_back(a);
      for (int a : axes) sub[a] = placeholder_var(src->shape[a]);
      std::function<void(size_t)> nest = [&](size_t i) {
        if (i == axes.size()) {
          Value* v = eval(src, sub, p.valid);
          if (sdt != dt) v = cast(v, sdt, dt);
          b_.CreateStore(combine(r->args.rop, b_.CreateLoad(ty, acc), v, dt), acc);
          return;
        }
        int a = axes[i];
        Value* from = a == p.axis ? lo : b_.getInt64(0);
        Value* to = a == p.axis ? hi : b_.getInt64(src->shape[a]);
        emit_loop(from, to, [&](Value* iv) {
          vars_[size_t(sub[a]->value)] = iv;
          nest(i + 1);
        });
      };
      nest(0);
      b_.CreateStore(b_.CreateLoad(ty, acc), b_.CreateGEP(ty, scratch_, chunk));
    });
  }

  void emit_split_finish() {
    const SplitPlan& p = *split_;
    const Node* r = p.reduce;
    DType dt = r->dtype;
    llvm::Type* ty = reg_type(dt);
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    auto* acc = eb.CreateAlloca(ty);
    b_.CreateStore(identity(r->args.rop, dt), acc);
    emit_loop(b_.getInt64(0), b_.getInt64(p.chunks), [&](Value* c) {
      Value* part = b_.CreateLoad(ty, b_.CreateGEP(ty, scratch_, c));
      b_.CreateStore(combine(r->args.rop, b_.CreateLoad(ty, acc), part, dt), acc);
    });
    remember(context_key(r, p.idx, p.valid), round_to(b_.CreateLoad(ty, acc), dt));
    emit_stores(std::vector<Expr>(k_.shape.size(), cnst(0)));
  }

  // ---- register tiling of the innermost output loop
  //
  // A reduce evaluated in the innermost output loop whose loads are unit
  // stride (or constant) along that loop but not along the reduce loop
  // (matmul, convolution, column sums) runs the other way round: for a tile
  // of kTile outputs, the reduce loop is outside and kTile accumulators are
  // updated per step. The tile is unrolled, so accumulators live in
  // registers and the SLP vectorizer turns the tile into vector FMAs.
  // Tile sizes follow the vector unit (decided in lowering.cpp): two vectors of
  // columns, and rows enough for the accumulators to fill half the registers
  // (AVX-512: 8 x 32 in 16 of 32 zmm; AVX2: 4 x 16 in 8 of 16 ymm).
  const int64_t kLanes = LLVMJit::get().vector_unit().lanes;  // float32 lanes of a vector register
  const int64_t kRegisters = LLVMJit::get().vector_unit().registers;

  std::optional<TiledReduce> find_tiled_reduce(const std::vector<Expr>& idx, int jid) {
    return tiny::find_tiled_reduce(k_, idx, jid, [&](int64_t size) { return placeholder_var(size); });
  }

  // Tiles the last output dim `d` (the plan's VectorTile: cols wide) and, when there is one,
  // the dim `d2` before it (rows tall): the column tile loop runs outside the row loop so the
  // tile's slice of the other operand stays in cache across rows. Returns false (emitting
  // nothing) when the outputs here have no reduce to tile.
  bool tiled(std::vector<Expr>& idx, const VectorTile& vt, Value* lo_i, Value* hi_i, Value* lo_j, Value* hi_j) {
    const int d2 = vt.d2;
    const size_t d = size_t(vt.d);
    int jid = int(idx[d]->value);
    auto cand = find_tiled_reduce(idx, jid);
    if (!cand) return false;
    const Node* r = cand->reduce;
    const int64_t tile_cols = vt.cols, tile_rows = vt.rows;
    Value* ntj = b_.CreateSDiv(b_.CreateSub(hi_j, lo_j), b_.getInt64(tile_cols));
    // the tiles of `ncols` columns from j0 (all rows)
    auto column_tiles = [&](Value* j0, int64_t ncols) {
      std::vector<Value*> cols;
      for (int64_t c = 0; c < ncols; c++) cols.push_back(b_.CreateAdd(j0, b_.getInt64(c)));
      if (d2 < 0) {
        tile_block(r, idx, d2, {}, d, cols);
        return;
      }
      Value* nti = b_.CreateSDiv(b_.CreateSub(hi_i, lo_i), b_.getInt64(tile_rows));
      emit_loop(b_.getInt64(0), nti, [&](Value* it) {
        Value* i0 = b_.CreateAdd(lo_i, b_.CreateMul(it, b_.getInt64(tile_rows)));
        std::vector<Value*> rows;
        for (int64_t q = 0; q < tile_rows; q++) rows.push_back(b_.CreateAdd(i0, b_.getInt64(q)));
        tile_block(r, idx, d2, rows, d, cols);
      }, /*scalar=*/true);
      Value* rest_i = b_.CreateAdd(lo_i, b_.CreateMul(nti, b_.getInt64(tile_rows)));
      emit_loop(rest_i, hi_i, [&](Value* i) { tile_block(r, idx, d2, {i}, d, cols); }, /*scalar=*/true);
    };
    emit_loop(b_.getInt64(0), ntj, [&](Value* jt) {
      column_tiles(b_.CreateAdd(lo_j, b_.CreateMul(jt, b_.getInt64(tile_cols))), tile_cols);
    }, /*scalar=*/true);
    Value* rest_j = b_.CreateAdd(lo_j, b_.CreateMul(ntj, b_.getInt64(tile_cols)));
    // A static remainder of a vector or more (a 24-wide convolution output: 16 + 8) takes
    // one narrower tile: one output at a time, it ran a third of MNIST's conv1 in scalar code.
    auto* lo_c = llvm::dyn_cast<llvm::ConstantInt>(lo_j);
    auto* hi_c = llvm::dyn_cast<llvm::ConstantInt>(hi_j);
    if (lo_c && hi_c) {
      const int64_t rem = (hi_c->getSExtValue() - lo_c->getSExtValue()) % tile_cols;
      if (rem >= kLanes) {
        column_tiles(rest_j, rem);
        rest_j = hi_j;
      }
    }
    // the columns left over, one output at a time
    auto plain = [&]() {
      emit_loop(rest_j, hi_j, [&](Value* j) {
        vars_[size_t(idx[d]->value)] = j;
        emit_stores(idx);
      });
    };
    if (d2 < 0) {
      plain();
    } else {
      emit_loop(lo_i, hi_i, [&](Value* i) {
        vars_[size_t(idx[size_t(d2)]->value)] = i;
        plain();
      });
    }
    return true;
  }

  // Accumulates reduce `r` for every (row, col) of a tile, then stores the outputs.
  void tile_block(const Node* r, const std::vector<Expr>& idx, int d2, const std::vector<Value*>& rows, size_t d,
                  const std::vector<Value*>& cols) {
    const Node* src = r->src[0].get();
    DType dt = r->dtype, sdt = src->dtype;
    llvm::Type* ty = reg_type(dt);
    std::vector<std::vector<Expr>> out_idx;
    std::vector<TiledReduce> ctx;
    size_t nrows = d2 < 0 ? 1 : rows.size();
    std::vector<Expr> row_vars;
    for (size_t q = 0; q < nrows; q++) row_vars.push_back(d2 < 0 ? idx[0] : new_var(rows[q], k_.shape[size_t(d2)]));
    for (size_t q = 0; q < nrows; q++) {
      for (auto* col : cols) {
        std::vector<Expr> o = idx;
        if (d2 >= 0) o[size_t(d2)] = row_vars[q];
        o[d] = new_var(col, k_.shape[d]);
        auto cc = find_tiled_reduce(o, int(o[d]->value));
        if (!cc || cc->reduce != r) throw std::logic_error("tiny codegen: tile context mismatch");
        out_idx.push_back(o);
        ctx.push_back(*cc);
      }
    }
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    std::vector<llvm::AllocaInst*> acc(ctx.size());
    for (size_t c = 0; c < ctx.size(); c++) {
      acc[c] = eb.CreateAlloca(ty);
      b_.CreateStore(identity(r->args.rop, dt), acc[c]);
    }
    std::vector<int> axes;
    for (int a : r->args.axes)
      if (src->shape[a] > 1) axes.push_back(a);
    std::vector<Expr> kv(src->shape.size());
    for (int a : axes) kv[a] = placeholder_var(src->shape[a]);
    // reduces under the source that do not depend on the reduce loops (a row
    // statistic feeding a matmul) are computed once per tile, before them
    for (size_t c = 0; c < ctx.size(); c++) {
      std::vector<Expr> sub = ctx[c].idx;
      for (int a : axes) sub[a] = kv[a];
      hoist_reduces({src}, sub, ctx[c].valid, int(kv[axes[0]]->value));
    }
    std::function<void(size_t)> nest = [&](size_t i) {
      if (i == axes.size()) {
        for (size_t c = 0; c < ctx.size(); c++) {
          std::vector<Expr> sub = ctx[c].idx;
          for (int a : axes) sub[a] = kv[a];
          Value* v = eval(src, sub, ctx[c].valid);
          if (sdt != dt) v = cast(v, sdt, dt);
          b_.CreateStore(combine(r->args.rop, b_.CreateLoad(ty, acc[c]), v, dt), acc[c]);
        }
        return;
      }
      const int a = axes[i];
      const int var = int(kv[a]->value);
      std::vector<Expr> at = ctx[0].idx;
      for (int b : axes) at[b] = kv[b];
      split_at_masks({src}, at, ctx[0].valid, {&kv[a]}, src->shape[a], [&](int64_t lo, int64_t hi) {
        emit_loop(b_.getInt64(lo), b_.getInt64(hi), [&](Value* iv) {
          vars_[size_t(var)] = iv;
          nest(i + 1);
        }, /*scalar=*/true);
      });
    };
    nest(0);
    for (size_t c = 0; c < ctx.size(); c++)
      remember(context_key(r, ctx[c].idx, ctx[c].valid), round_to(b_.CreateLoad(ty, acc[c]), dt));
    emit_stores(out_idx);
  }

  // ---- output-channel tiles (ChannelTile in lowering.h: the plan's tile of channels x rows,
  // its packed operand b and broadcast a)
  // ---- reduce blocking (ReduceBlocking in lowering.h): the plan's blocks, and where this
  // function stands in them
  struct ReduceBlocks : ReduceBlocking {
    Value* block = nullptr;  // the current block
    Value* first = nullptr;  // i1: block 0 starts from zero
    Value* last = nullptr;   // i1: the last block stores the outputs
    Value* scratch = nullptr;
    llvm::AllocaInst* cursor = nullptr;
  };
  std::optional<ReduceBlocks> blocks_;

  static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

  void emit_if(Value* cond, const std::function<void()>& body) {
    auto* then = llvm::BasicBlock::Create(ctx_, "then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    memo_.emplace_back();  // values computed here do not dominate what follows
    body();
    memo_.pop_back();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // kernel_scratch_alloc / kernel_scratch_free (device.h), as the JIT names them
  llvm::FunctionCallee scratch_alloc() {
    llvm::FunctionCallee f =
        m_.getOrInsertFunction("tiny_scratch_alloc", llvm::FunctionType::get(b_.getInt8PtrTy(), {b_.getInt64Ty()}, false));
    // fresh memory, as malloc's: the optimizer may assume it aliases no buffer
    if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
      fn->addRetAttr(llvm::Attribute::NoAlias);
      fn->addFnAttr(llvm::Attribute::NoUnwind);
    }
    return f;
  }
  llvm::FunctionCallee scratch_free() {
    llvm::FunctionCallee f =
        m_.getOrInsertFunction("tiny_scratch_free", llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt8PtrTy()}, false));
    // as free: the pointer does not escape through it, so the scratch memory stays provably
    // apart from every buffer (else a packed operand's loop kept its loads in the loop, unhoisted
    // and unvectorized, for fear they alias its stores)
    if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
      fn->addParamAttr(0, llvm::Attribute::NoCapture);
      fn->addFnAttr(llvm::Attribute::NoUnwind);
    }
    return f;
  }

  // The tile's reduce loops, outermost first, binding `kv` (one variable per non-unit reduce
  // axis, ct.kvars or fresh ones); the innermost left to the vectorizer unless `scalar`.
  void each_reduce_step(const ChannelTile& ct, const std::vector<Expr>& kv, const std::function<void()>& body,
                        bool scalar = true, size_t q = 0) {
    if (q == kv.size()) return body();
    emit_loop(b_.getInt64(0), b_.getInt64(ct.kext[q]), [&](Value* iv) {
      vars_[size_t(kv[q]->value)] = iv;
      each_reduce_step(ct, kv, body, scalar, q + 1);
    }, scalar || q + 1 < kv.size());
  }

  // The panel of channels [j0, j0 + ncols), zero-padded to ct.cols, at `panel`: its rows written
  // in order, reads streaming from kChanCols rows of the weight at once.
  void pack_panel(const ChannelTile& ct, Value* j0, Value* panel, int64_t ncols) {
    llvm::Type* f32 = b_.getFloatTy();
    if (ncols == ct.cols)
      if (auto runs = panel_runs(ct)) return pack_panel_transposed(ct, j0, panel, *runs);
    if (ct.computed) {
      // in a loop over the channels: the expression once in the code, where unrolled per
      // channel a 1x1 convolution's weight gradient behind a batch norm's backward (32 copies
      // of 50 operations per step) took 0.7 s to compile
      each_reduce_step(ct, ct.kvars, [&] {
        Value* at = b_.CreateMul(index(ct.kflat(ct.kvars)), b_.getInt64(ct.cols));
        emit_loop(b_.getInt64(0), b_.getInt64(ncols), [&](Value* c) {
          vars_[size_t(ct.jvar)] = b_.CreateAdd(j0, c);
          b_.CreateStore(eval(ct.b, ct.b_idx, cnst(1)), b_.CreateGEP(f32, panel, b_.CreateAdd(at, c)));
        });
        for (int64_t c = ncols; c < ct.cols; c++)
          b_.CreateStore(llvm::ConstantFP::get(f32, 0.0), b_.CreateGEP(f32, panel, b_.CreateAdd(at, b_.getInt64(c))));
      });
      return;
    }
    each_reduce_step(ct, ct.kvars, [&] {
      Value* at = b_.CreateMul(index(ct.kflat(ct.kvars)), b_.getInt64(ct.cols));
      for (int64_t c = 0; c < ct.cols; c++) {
        memo_.emplace_back();  // the index differs per channel
        vars_[size_t(ct.jvar)] = b_.CreateAdd(j0, b_.getInt64(c));
        Value* v = c >= ncols ? (Value*)llvm::ConstantFP::get(f32, 0.0)
                              : b_.CreateLoad(f32, b_.CreateGEP(f32, buf_ptrs_[k_.loads.at(ct.packed)], index(ct.packed_flat)));
        b_.CreateStore(v, b_.CreateGEP(f32, panel, b_.CreateAdd(at, b_.getInt64(c))));
        memo_.pop_back();
      }
    });
  }

  // Copies the packed leaf for the channels [lo, lo + whole tiles) into panels: panel t holds
  // [k][c] for channel lo + t*kChanCols + c. Returns the scratch buffer (freed at the function's
  // end); with pack_per_tile it only allocates one panel's.
  Value* emit_pack(const ChannelTile& ct, Value* lo, Value* hi, bool fill = true) {
    llvm::Type* f32 = b_.getFloatTy();
    Value* n = b_.CreateMul(b_.CreateSDiv(b_.CreateSub(hi, lo), b_.getInt64(ct.cols)), b_.getInt64(ct.cols));
    const int64_t rem = partial_cols(ct, lo, hi);
    // pack_per_tile: one panel's buffer, filled by tiled_channels before each tile
    Value* bytes = ct.pack_per_tile ? b_.getInt64(ct.ck * ct.cols * 4)
                                    : b_.CreateMul(b_.CreateAdd(n, b_.getInt64(rem ? ct.cols : 0)), b_.getInt64(ct.ck * 4));
    Value* raw = nullptr;
    if (!pack_buf_) {
      raw = b_.CreateCall(scratch_alloc(), {b_.CreateAdd(bytes, b_.getInt64(64))});
      pack_buf_ = b_.CreateBitCast(raw, f32->getPointerTo());
    }
    if (!fill || ct.pack_per_tile) return raw;
    auto panel_at = [&](Value* t) { return b_.CreateGEP(f32, pack_buf_, b_.CreateMul(t, b_.getInt64(ct.ck * ct.cols))); };
    auto pack_whole = [&](Value* t) {
      pack_panel(ct, b_.CreateAdd(lo, b_.CreateMul(t, b_.getInt64(ct.cols))), panel_at(t), ct.cols);
    };
    if (ct.jstride1) {
      // b's rows are contiguous along j: read them in order (reduce steps
      // outside, panels inside: rows kChanCols apart in one panel would be
      // N*4 bytes apart, a new page each), two vector copies per panel row
      auto* vty = llvm::FixedVectorType::get(f32, unsigned(kLanes));
      each_reduce_step(ct, ct.kvars, [&] {
        Value* at = b_.CreateMul(index(ct.kflat(ct.kvars)), b_.getInt64(ct.cols));
        emit_loop(b_.getInt64(0), b_.CreateUDiv(n, b_.getInt64(ct.cols)), [&](Value* t) {
          vars_[size_t(ct.jvar)] = b_.CreateAdd(lo, b_.CreateMul(t, b_.getInt64(ct.cols)));
          Value* from = b_.CreateGEP(f32, buf_ptrs_[k_.loads.at(ct.packed)], index(ct.packed_flat));
          Value* to = b_.CreateGEP(f32, pack_buf_, b_.CreateAdd(b_.CreateMul(t, b_.getInt64(ct.ck * ct.cols)), at));
          for (int64_t v = 0; v < ct.cols / kLanes; v++) {
            auto vp = [&](Value* p) {
              return b_.CreateBitCast(b_.CreateConstGEP1_64(f32, p, uint64_t(v * kLanes)), vty->getPointerTo());
            };
            b_.CreateAlignedStore(b_.CreateAlignedLoad(vty, vp(from), llvm::Align(4)), vp(to), llvm::Align(4));
          }
        }, /*scalar=*/true);
      });
    } else {
      emit_loop(b_.getInt64(0), b_.CreateUDiv(n, b_.getInt64(ct.cols)), pack_whole);
    }
    if (rem) {  // the last channels, zero-padded to a whole panel
      Value* t = b_.CreateUDiv(n, b_.getInt64(ct.cols));
      at_last_channel(ct, hi, [&] { pack_panel(ct, b_.CreateAdd(lo, b_.CreateMul(t, b_.getInt64(ct.cols))), panel_at(t), rem); });
    }
    return raw;
  }

  // How each channel's reduce steps lie in the packed leaf, where the panel is then the
  // transpose of (channels x steps) blocks: `run` consecutive steps at consecutive elements
  // (descending where `reversed`: a transposed convolution's flipped taps), over the steps of
  // the first `outer` reduce variables; a run of all ck steps is copied kLanes steps at a time.
  struct PanelRuns {
    int64_t row = 0;  // the leaf's stride along the channels
    size_t outer = 0;
    int64_t run = 0;
    bool reversed = false;
  };
  std::optional<PanelRuns> panel_runs(const ChannelTile& ct) {
    if (ct.computed || ct.cols % kLanes != 0 || ct.kvars.empty()) return std::nullopt;
    auto row = linear_coefficient(ct.packed_flat, ct.jvar);
    if (!row) return std::nullopt;
    bool in_order = ct.ck % kLanes == 0;  // every step one element after the last
    for (size_t q = 0; q < ct.kvars.size(); q++)
      in_order &= linear_coefficient(ct.packed_flat, int(ct.kvars[q]->value)) == ct.kstrides[q];
    if (in_order) return PanelRuns{*row, 0, ct.ck, false};
    // else the innermost reduce variables whose steps, flattened, fill a vector at most; the
    // leaf's index a sum of terms over them and terms over the others (flipped taps read as
    // (2 k + 2) % 3: probed, not matched)
    size_t first = ct.kvars.size();
    int64_t run = 1;
    while (first > 0 && run * ct.kext[first - 1] <= kLanes) run *= ct.kext[--first];
    if (run < 2) return std::nullopt;
    const int lo_id = int(ct.kvars[first]->value), hi_id = int(ct.kvars.back()->value) + 1;
    for (int q = int(first); q < int(ct.kvars.size()); q++)  // the run's variables: consecutive ids
      if (int(ct.kvars[size_t(q)]->value) != lo_id + q - int(first)) return std::nullopt;
    const std::vector<Expr> terms = ct.packed_flat->op == EOp::Add ? ct.packed_flat->src : std::vector<Expr>{ct.packed_flat};
    Expr inner = cnst(0);
    for (auto& t : terms) {
      std::vector<int> ids;
      collect_vars(t, ids);
      bool in_run = false, other = false;
      for (int id : ids) (id >= lo_id && id < hi_id ? in_run : other) = true;
      if (in_run && other) return std::nullopt;
      if (in_run) inner = add(inner, t);
    }
    std::vector<int64_t> at;  // the run's element offsets, step by step
    for (int64_t e = 0; e < run; e++) {
      std::unordered_map<int, int64_t> value;
      for (int64_t q = int64_t(ct.kvars.size()), rest = e; q-- > int64_t(first);) {
        value[int(ct.kvars[size_t(q)]->value)] = rest % ct.kext[size_t(q)];
        rest /= ct.kext[size_t(q)];
      }
      auto v = evaluate(inner, value);
      if (!v) return std::nullopt;
      at.push_back(*v);
    }
    const int64_t dir = at[1] - at[0];
    if (dir != 1 && dir != -1) return std::nullopt;
    for (int64_t e = 0; e < run; e++)
      if (at[size_t(e)] != at[0] + dir * e) return std::nullopt;
    return PanelRuns{*row, first, run, dir < 0};
  }

  // One panel, [k][c] = the leaf at channel j0 + c, step k, by blocks of kLanes channels and
  // kLanes steps (or one run): a vector load along each channel's steps, a transpose in
  // registers, a vector store along the channels per step. Element by element, the copy of
  // the weights took 57 % of a batch-1 resnet18 layer4 convolution's time, half of a batch-16
  // layer4 input gradient's (flipped taps, runs of 9).
  void pack_panel_transposed(const ChannelTile& ct, Value* j0, Value* panel, const PanelRuns& pr) {
    llvm::Type* f32 = b_.getFloatTy();
    auto* vty = llvm::FixedVectorType::get(f32, unsigned(kLanes));
    const bool whole = pr.run == ct.ck;  // one run: blocks of kLanes steps
    const int64_t n = whole ? kLanes : pr.run;
    std::vector<llvm::Constant*> lanes;
    for (int64_t l = 0; l < kLanes; l++) lanes.push_back(b_.getInt1(l < n));
    Value* mask = llvm::ConstantVector::get(lanes);
    // rows of `n` steps from the leaf at `first` (the run's lowest element for channel j0) into
    // the panel from step `k0`
    auto blocks = [&](Value* first, Value* k0) {
      for (int64_t cb = 0; cb < ct.cols; cb += kLanes) {
        std::vector<Value*> r;  // r[c]: channel cb + c
        for (int64_t c = 0; c < kLanes; c++) {
          Value* p = b_.CreateBitCast(b_.CreateGEP(f32, first, b_.getInt64((cb + c) * pr.row)), vty->getPointerTo());
          r.push_back(whole ? (Value*)b_.CreateAlignedLoad(vty, p, llvm::Align(4))
                            : b_.CreateMaskedLoad(vty, p, llvm::Align(4), mask, llvm::ConstantFP::get(vty, 0.0)));
        }
        transpose_square(r, "panel.transpose");
        for (int64_t e = 0; e < n; e++) {  // r[e]: element e of the run, step e or n - 1 - e
          Value* k = b_.CreateAdd(k0, b_.getInt64(pr.reversed ? n - 1 - e : e));
          Value* at = b_.CreateAdd(b_.CreateMul(k, b_.getInt64(ct.cols)), b_.getInt64(cb));
          b_.CreateAlignedStore(r[size_t(e)], b_.CreateBitCast(b_.CreateGEP(f32, panel, at), vty->getPointerTo()),
                                llvm::Align(4));
        }
      }
    };
    Value* leaf = buf_ptrs_[k_.loads.at(ct.packed)];
    vars_[size_t(ct.jvar)] = j0;
    if (whole) {
      memo_.emplace_back();
      for (auto& kv : ct.kvars) vars_[size_t(kv->value)] = b_.getInt64(0);
      Value* base = b_.CreateGEP(f32, leaf, index(ct.packed_flat));
      memo_.pop_back();
      emit_loop(b_.getInt64(0), b_.getInt64(ct.ck / kLanes), [&](Value* kb) {
        Value* k0 = b_.CreateMul(kb, b_.getInt64(kLanes));
        blocks(b_.CreateGEP(f32, base, k0), k0);
      }, /*scalar=*/true);
      return;
    }
    std::vector<Expr> outer(ct.kvars.begin(), ct.kvars.begin() + long(pr.outer));
    each_reduce_step(ct, outer, [&] {
      memo_.emplace_back();
      for (size_t q = pr.outer; q < ct.kvars.size(); q++) vars_[size_t(ct.kvars[q]->value)] = b_.getInt64(0);
      Value* k0 = index(ct.kflat(ct.kvars));
      memo_.pop_back();  // (the memo holds the variables' values: a new scope for new ones)
      memo_.emplace_back();
      if (pr.reversed)  // the run's lowest element is its last step's
        for (size_t q = pr.outer; q < ct.kvars.size(); q++)
          vars_[size_t(ct.kvars[q]->value)] = b_.getInt64(ct.kext[q] - 1);
      Value* first = b_.CreateGEP(f32, leaf, index(ct.packed_flat));
      memo_.pop_back();
      blocks(first, k0);
    });
  }

  // Channels left after the whole tiles that get a zero-padded partial panel (and tile).
  // A thread's slice of the channels starts at a multiple of kChanCols (the parallel
  // grain), so only the slice ending at the last channel has any: see at_last_channel.
  int64_t partial_cols(const ChannelTile& ct, Value* lo, Value* hi) {
    auto* l = llvm::dyn_cast<llvm::ConstantInt>(lo);
    auto* h = llvm::dyn_cast<llvm::ConstantInt>(hi);
    const int64_t rem = l && h ? (h->getSExtValue() - l->getSExtValue()) % ct.cols : k_.shape[size_t(ct.j)] % ct.cols;
    // b read in place has no padded panel: its tile takes the whole vectors (read in bounds)
    return ct.unit ? rem / kLanes * kLanes : rem;
  }
  // Runs `body` where the channels [.., hi) end at the last one (always, when hi is constant).
  void at_last_channel(const ChannelTile& ct, Value* hi, const std::function<void()>& body) {
    if (llvm::isa<llvm::Constant>(hi)) return body();
    emit_if(b_.CreateICmpEQ(hi, b_.getInt64(k_.shape[size_t(ct.j)])), body);
  }

  // Flat row `flat` as a coordinate per dim of row_dims(): (dim, value) pairs.
  std::vector<std::pair<int, Value*>> row_coords(const ChannelTile& ct, Value* flat) {
    const std::vector<int> dims = ct.row_dims();
    std::vector<std::pair<int, Value*>> out;
    for (size_t q = dims.size(); q-- > 0;) {
      Value* extent = b_.getInt64(k_.shape[size_t(dims[q])]);
      out.emplace_back(dims[q], q == 0 ? flat : b_.CreateSRem(flat, extent));
      if (q > 0) flat = b_.CreateSDiv(flat, extent);
    }
    return out;
  }

  // Column tiles of dim j, per tile a loop over the mid dims and row tiles of
  // the last dim; leftover channels one output at a time.
  void tiled_channels(const std::vector<Expr>& idx, const ChannelTile& ct, Value* lo_j, Value* hi_j, Value* lo_i,
                      Value* hi_i) {
    const int64_t T = ct.cols, R = ct.rows;
    // the rows: dim i, or row_dims() flattened
    const int64_t W = ct.row_count(k_.shape);
    std::vector<int> tile_mid;  // looped per tile: the mid dims but the rows'
    for (int m : ct.mid)
      if (std::find(ct.row_outer.begin(), ct.row_outer.end(), m) == ct.row_outer.end()) tile_mid.push_back(m);
    auto loops = [&](const std::vector<int>& dims, const std::function<void()>& body) {
      std::function<void(size_t)> go = [&](size_t q) {
        if (q == dims.size()) return body();
        emit_loop(b_.getInt64(0), b_.getInt64(k_.shape[size_t(dims[q])]), [&](Value* iv) {
          vars_[size_t(idx[size_t(dims[q])]->value)] = iv;
          go(q + 1);
        });
      };
      go(0);
    };
    Value* ntj = b_.CreateSDiv(b_.CreateSub(hi_j, lo_j), b_.getInt64(T));
    Value* a_raw = tile_mid.empty() ? pack_a(ct, idx, lo_i, hi_i, W) : nullptr;
    Value* strip_raw = rows_by_column(ct, idx, lo_i, hi_i, W)
                           ? b_.CreateCall(scratch_alloc(), {b_.getInt64(T * W * 4)})
                           : nullptr;
    Value* strip = strip_raw ? b_.CreateBitCast(strip_raw, b_.getFloatTy()->getPointerTo()) : nullptr;
    int64_t ncols = T;
    // column tile jt's first channel and its packed panel
    auto first_channel = [&](Value* jt) { return b_.CreateAdd(lo_j, b_.CreateMul(jt, b_.getInt64(T))); };
    auto panel_of = [&](Value* jt) {
      return ct.unit ? nullptr : b_.CreateGEP(b_.getFloatTy(), pack_buf_, b_.CreateMul(jt, b_.getInt64(ct.ck * T)));
    };
    std::function<void(Value*)> tile = [&](Value* jt) {
      Value* j0 = first_channel(jt);
      Value* panel = panel_of(jt);
      if (ct.pack_per_tile) {
        panel = pack_buf_;
        pack_panel(ct, j0, panel, ncols);
      }
      loops(tile_mid, [&]() {
        if (llvm::isa<llvm::Constant>(lo_i) && llvm::isa<llvm::Constant>(hi_i)) {  // all W rows
          if (strip && ncols == T) column_strip_ = ColumnStrip{strip, W};
          if (ct.padding_taps && W / R <= kMaxStaticTiles) {  // at constant rows (static_taps)
            for (int64_t it = 0; it < W / R; it++) channel_block(ct, idx, b_.getInt64(it * R), R, j0, panel, ncols);
          } else {
            emit_loop(b_.getInt64(0), b_.getInt64(W / R), [&](Value* it) {
              channel_block(ct, idx, b_.CreateMul(it, b_.getInt64(R)), R, j0, panel, ncols, /*aligned=*/true);
            }, /*scalar=*/true);
          }
          if (W % R) channel_block(ct, idx, b_.getInt64(W / R * R), W % R, j0, panel, ncols);
          if (column_strip_) {
            column_strip_.reset();
            epilogue_columns(ct, idx, b_.getInt64(0), W, j0, T, strip, W);
          }
          return;
        }
        // the rows are this thread's slice: blocks of R, then 4, then 1
        Value* i0 = lo_i;
        for (int64_t rb : {R, int64_t(4), int64_t(1)}) {
          if (rb > R) continue;
          Value* n = b_.CreateSDiv(b_.CreateSub(hi_i, i0), b_.getInt64(rb));
          Value* base = i0;
          emit_loop(b_.getInt64(0), n, [&](Value* it) {
            channel_block(ct, idx, b_.CreateAdd(base, b_.CreateMul(it, b_.getInt64(rb))), rb, j0, panel, ncols);
          }, /*scalar=*/true);
          i0 = b_.CreateAdd(base, b_.CreateMul(n, b_.getInt64(rb)));
          if (rb == 1) break;
        }
      });
    };
    if (ct.rows_outside) {  // each row tile across the whole tiles' panels (all packed already)
      // epilogue_per_row_tile: the row tile's accumulators wait in a buffer for one epilogue
      // loop after all its column tiles (a 3072 x 768 weight gradient's AdamW epilogue ran at
      // 13 GB/s of this machine's 29 per tile)
      Value* width = b_.CreateMul(ntj, b_.getInt64(T));
      Value* raw = nullptr;
      if (ct.epilogue_per_row_tile) raw = b_.CreateCall(scratch_alloc(), {b_.CreateMul(width, b_.getInt64(R * 4))});
      auto across = [&](Value* i0, int64_t nrows, bool aligned) {
        if (raw) row_tile_ = RowTileBuffer{b_.CreateBitCast(raw, b_.getFloatTy()->getPointerTo()), width, lo_j};
        emit_loop(b_.getInt64(0), ntj, [&](Value* jt) {
          channel_block(ct, idx, i0, nrows, first_channel(jt), panel_of(jt), T, aligned);
        }, /*scalar=*/true);
        if (!raw) return;
        RowTileBuffer rt = *row_tile_;
        row_tile_.reset();
        epilogue_rows(ct, idx, i0, nrows, lo_j, width, rt.buffer, rt.pitch);
      };
      emit_loop(b_.getInt64(0), b_.getInt64(W / R), [&](Value* it) { across(b_.CreateMul(it, b_.getInt64(R)), R, true); },
                /*scalar=*/true);
      if (W % R) across(b_.getInt64(W / R * R), W % R, false);
      if (raw) b_.CreateCall(scratch_free(), {raw});
    } else {
      emit_loop(b_.getInt64(0), ntj, tile, /*scalar=*/true);
    }
    Value* rest_j = b_.CreateAdd(lo_j, b_.CreateMul(ntj, b_.getInt64(T)));
    // the last channels: a zero-padded panel, or for b read in place their whole vectors (the
    // rest one at a time below: 16 of a 1x1 convolution's 144 channels so took 9/10 of its time)
    if (int64_t rem = partial_cols(ct, lo_j, hi_j)) {
      ncols = rem;
      at_last_channel(ct, hi_j, [&] { tile(ntj); });
      if (!ct.unit) {
        rest_j = hi_j;
      } else {  // (where this thread's channels end at the last one: else it has whole tiles only)
        Value* last = b_.CreateICmpEQ(hi_j, b_.getInt64(k_.shape[size_t(ct.j)]));
        rest_j = b_.CreateSelect(last, b_.CreateAdd(rest_j, b_.getInt64(rem)), rest_j);
      }
    }
    auto leftovers = [&]() {
      emit_loop(rest_j, hi_j, [&](Value* j) {
        vars_[size_t(idx[size_t(ct.j)]->value)] = j;
        loops(tile_mid, [&]() {
          // rows [lo_i, hi_i) of the flattened row_dims(), or all W of them
          bool all = llvm::isa<llvm::Constant>(lo_i) && llvm::isa<llvm::Constant>(hi_i);
          emit_loop(all ? b_.getInt64(0) : lo_i, all ? b_.getInt64(W) : hi_i, [&](Value* flat) {
            for (auto [d, v] : row_coords(ct, flat))  // (a unit row dim has no variable)
              if (idx[size_t(d)]->op == EOp::Var) vars_[size_t(idx[size_t(d)]->value)] = v;
            emit_stores(idx);
          });
        });
      });
    };
    if (blocks_) emit_if(blocks_->last, leftovers);  // whole reduces, once
    else leftovers();
    if (a_raw) b_.CreateCall(scratch_free(), {a_raw});
    if (strip_raw) b_.CreateCall(scratch_free(), {strip_raw});
    a_rows_ = nullptr;
  }

  // A computed `a` (a LayerNorm's output or a GELU's feeding a linear layer) is evaluated
  // once per (row, reduce step) for the thread's rows into a buffer, before the panels, rather
  // than once per panel: a transformer block's MLP, 128 x 2048 x 512 behind a LayerNorm, took
  // 20 ms so (356 ms before its row statistics were hoisted), 2048 x 512 behind a GELU 9.7 ms.
  // So is a loaded `a` whose reduce step moves through a division or modulo (attention's heads
  // read back as (batch, token, head * dim)): its rows are runs too short for the prefetchers,
  // and the product took 4.8 ms where it took 2.6 on a contiguous copy.
  // The rows are the flat rows of row_dims(), [lo_i, hi_i) or all W of them. Returns the
  // malloc'ed buffer to free, or null (a plain `a`, or too large a buffer).
  Value* pack_a(const ChannelTile& ct, const std::vector<Expr>& idx, Value* lo_i, Value* hi_i, int64_t W) {
    const Node* leaf = ct.a;
    while (!k_.loads.count(leaf) && leaf->op == Op::View) leaf = leaf->src[0].get();
    constexpr int64_t kMaxPackedA = int64_t(1) << 24;  // floats
    // (not per block of a blocked reduce: that would pack it once per block)
    if ((k_.loads.count(leaf) && !a_steps_unevenly(ct, idx) && !a_rows_alias(ct, idx)) || W * ct.ck > kMaxPackedA ||
        blocks_)
      return nullptr;
    // rows a multiple of 2 KiB apart would alias in L1 here too: one line more per row
    a_pitch_ = ct.ck % 512 == 0 ? ct.ck + 16 : ct.ck;
    bool all = llvm::isa<llvm::Constant>(lo_i) && llvm::isa<llvm::Constant>(hi_i);
    Value* rlo = all ? b_.getInt64(0) : lo_i;
    Value* rhi = all ? b_.getInt64(W) : hi_i;
    Value* raw = b_.CreateCall(scratch_alloc(), {b_.CreateMul(b_.CreateSub(rhi, rlo), b_.getInt64(a_pitch_ * 4))});
    Value* buf = b_.CreateBitCast(raw, b_.getFloatTy()->getPointerTo());
    const Node* src = ct.reduce->src[0].get();
    std::vector<int> axes;
    for (int a : ct.reduce->args.axes)
      if (src->shape[a] > 1) axes.push_back(a);
    // a's rows at one (row, step) context, o's row and channel given
    auto row_context = [&](std::vector<Expr> o) {
      o[size_t(ct.j)] = new_var(b_.getInt64(0), k_.shape[size_t(ct.j)]);  // a does not move along j
      auto cc = find_tiled_reduce(o, int(o[size_t(ct.j)]->value));
      if (!cc || cc->reduce != ct.reduce) throw std::logic_error("tiny codegen: packed a lost its reduce");
      return *cc;
    };
    a_step_major_ = !k_.loads.count(leaf) && a_reads_along_rows(ct, idx, axes, row_context);
    if (a_step_major_) {  // step by step, each step's rows in one loop that vectorizes along them
      a_rows_count_ = b_.CreateSub(rhi, rlo);
      std::vector<Expr> kv;
      for (int a : axes) kv.push_back(placeholder_var(src->shape[size_t(a)]));
      each_reduce_step(ct, kv, [&] {
        Value* step_at = b_.CreateMul(index(ct.kflat(kv)), a_rows_count_);
        emit_loop(rlo, rhi, [&](Value* row) {
          memo_.emplace_back();
          std::vector<Expr> o = idx;
          for (auto [d, v] : row_coords(ct, row)) o[size_t(d)] = new_var(v, k_.shape[size_t(d)]);
          TiledReduce cc = row_context(o);
          std::vector<Expr> sub = cc.idx;
          for (size_t q = 0; q < axes.size(); q++) sub[size_t(axes[q])] = kv[q];
          Value* at = b_.CreateAdd(step_at, b_.CreateSub(row, rlo));
          b_.CreateStore(eval(ct.a, sub, cc.valid), b_.CreateGEP(b_.getFloatTy(), buf, at, "a.by_step"));
          memo_.pop_back();
        }, false, false, /*parallel=*/true);  // (each row's value stored once, its inputs only read)
      });
      a_rows_ = buf;
      a_first_row_ = rlo;
      packs_a = true;
      return raw;
    }
    emit_loop(rlo, rhi, [&](Value* row) {
      memo_.emplace_back();  // values computed here do not dominate what follows
      std::vector<Expr> o = idx;
      for (auto [d, v] : row_coords(ct, row)) o[size_t(d)] = new_var(v, k_.shape[size_t(d)]);
      o[size_t(ct.j)] = new_var(b_.getInt64(0), k_.shape[size_t(ct.j)]);  // a does not move along j
      auto cc = find_tiled_reduce(o, int(o[size_t(ct.j)]->value));
      if (!cc || cc->reduce != ct.reduce) throw std::logic_error("tiny codegen: packed a lost its reduce");
      std::vector<Expr> kv, sub = cc->idx;
      for (int a : axes) {
        kv.push_back(placeholder_var(src->shape[size_t(a)]));
        sub[size_t(a)] = kv.back();
      }
      hoist_reduces({ct.a}, sub, cc->valid, int(kv[0]->value));  // row statistics: once per row
      Value* base = b_.CreateMul(b_.CreateSub(row, rlo), b_.getInt64(a_pitch_));
      auto store = [&](const std::vector<Expr>& at_sub, const std::vector<Expr>& at_kv) {
        Value* at = b_.CreateAdd(base, index(ct.kflat(at_kv)));
        b_.CreateStore(eval(ct.a, at_sub, cc->valid), b_.CreateGEP(b_.getFloatTy(), buf, at));
      };
      const int64_t extent = ct.kext.back();
      const int64_t run = k_.loads.count(leaf) ? even_run(leaf_flat(ct.a, sub), int(kv.back()->value)) : 1;
      if (run > 1 && extent % run == 0) {
        // the innermost step as (run index, position in the run): the divisions and modulos
        // fold, and the copy of a run vectorizes (one element per division was 5 cycles)
        std::vector<Expr> outer(kv.begin(), kv.end() - 1);
        each_reduce_step(ct, outer, [&] {
          emit_loop(b_.getInt64(0), b_.getInt64(extent / run), [&](Value* r) {
            Expr at_run = mul(new_var(r, extent / run), run);
            emit_loop(b_.getInt64(0), b_.getInt64(run), [&](Value* q) {
              std::vector<Expr> at_sub = sub, at_kv = kv;
              at_kv.back() = at_sub[size_t(axes.back())] = add(at_run, new_var(q, run));
              store(at_sub, at_kv);
            });
          }, /*scalar=*/true);
        });
      } else {
        std::function<void(size_t)> steps = [&](size_t q) {
          if (q == kv.size()) return store(sub, kv);
          const int var = int(kv[q]->value);
          split_at_masks({ct.a}, sub, cc->valid, {&kv[q], &sub[size_t(axes[q])]}, ct.kext[q],
                         [&](int64_t lo, int64_t hi) {
            emit_loop(b_.getInt64(lo), b_.getInt64(hi), [&](Value* iv) {
              vars_[size_t(var)] = iv;
              steps(q + 1);
            }, /*scalar=*/q + 1 < kv.size());
          });
        };
        steps(0);
      }
      memo_.pop_back();
    }, /*scalar=*/true);
    a_rows_ = buf;
    a_first_row_ = rlo;
    packs_a = true;
    return raw;
  }

  // Whether a computed `a` (no reduce or gather under it) reads the loads that move along both
  // its rows and its steps along the rows, none along the steps: a weight gradient's
  // grad_output, computed (positions, channels) and read as (channels, positions) (ConvNeXt's,
  // through its layer scales and stochastic depth). Packed row by row, its evaluation ran
  // scalar, strided, and took 84 % of such a kernel; packed step by step (a_step_major_), it
  // vectorizes along the rows.
  bool a_reads_along_rows(const ChannelTile& ct, const std::vector<Expr>& idx, const std::vector<int>& axes,
                          const std::function<TiledReduce(std::vector<Expr>)>& row_context) {
    if (ct.row_dims().size() != 1 || axes.empty()) return false;
    const int rd = ct.row_dims()[0];
    std::vector<Expr> o = idx;
    o[size_t(rd)] = placeholder_var(k_.shape[size_t(rd)]);
    const int row_id = int(o[size_t(rd)]->value);
    TiledReduce cc = row_context(o);
    std::vector<Expr> sub = cc.idx;
    for (int a : axes) sub[size_t(a)] = placeholder_var(ct.reduce->src[0]->shape[size_t(a)]);
    const int step_id = int(sub[size_t(axes.back())]->value);
    std::unordered_set<const Node*> seen;
    bool along_rows = false, along_steps = false;
    std::function<bool(const Node*, const std::vector<Expr>&)> walk = [&](const Node* n, const std::vector<Expr>& at) {
      if (!seen.insert(n).second) return true;  // (a's nodes are shared: each once)
      if (k_.loads.count(n)) {
        // (tables of the rows alone or of the steps alone, a LayerNorm's terms, read from cache)
        Expr flat = row_major(at, n->shape);
        const bool both = uses_vars(flat, row_id, row_id + 1) && uses_vars(flat, step_id, step_id + 1);
        along_rows |= both && linear_coefficient(flat, row_id) == 1;
        along_steps |= both && linear_coefficient(flat, step_id) == 1;
        return true;
      }
      if (n->op == Op::Reduce || n->op == Op::Gather) return false;
      if (n->op == Op::View) return walk(n->src[0].get(), view_source_index(n, at).idx);
      for (auto& s : n->src)
        if (!walk(s.get(), at)) return false;
      return true;
    };
    return walk(ct.a, sub) && along_rows && !along_steps;
  }

  // The longest runs of variable `id` along which `flat` is affine: the greatest common divisor
  // of the divisions and modulos of sums holding it (1: none, or no common run).
  static int64_t even_run(const Expr& flat, int id) {
    int64_t run = 0;
    std::function<void(const Expr&)> walk = [&](const Expr& e) {
      if ((e->op == EOp::Div || e->op == EOp::Mod) && uses_vars(e->src[0], id, id + 1)) {
        std::optional<int64_t> c = linear_coefficient(e->src[0], id);
        run = std::gcd(run, c && *c == 1 ? e->value : int64_t(1));
      }
      for (auto& s : e->src) walk(s);
    };
    walk(flat);
    return std::max<int64_t>(run, 1);
  }

  // The flat index of a loaded `a`'s leaf at output index `o` (dim j at a fresh variable), the
  // reduce's steps as fresh variables (their ids in `steps`); null where `o` is not the tile's.
  Expr a_leaf_flat(const ChannelTile& ct, std::vector<Expr> o, std::vector<int>& steps) {
    o[size_t(ct.j)] = placeholder_var(k_.shape[size_t(ct.j)]);
    auto cc = find_tiled_reduce(o, int(o[size_t(ct.j)]->value));
    if (!cc || cc->reduce != ct.reduce) return nullptr;
    const Node* src = ct.reduce->src[0].get();
    std::vector<Expr> sub = cc->idx;
    for (int a : ct.reduce->args.axes)
      if (src->shape[a] > 1) {
        sub[size_t(a)] = placeholder_var(src->shape[size_t(a)]);
        steps.push_back(int(sub[size_t(a)]->value));
      }
    return leaf_flat(ct.a, sub);
  }

  // Whether a loaded `a` moves through its storage by a division or modulo of a reduce step.
  bool a_steps_unevenly(const ChannelTile& ct, const std::vector<Expr>& o) {
    std::vector<int> steps;
    Expr flat = a_leaf_flat(ct, o, steps);
    if (!flat) return false;
    for (int id : steps)
      if (!linear_coefficient(flat, id)) return true;
    return false;
  }

  // Whether a loaded `a`'s neighbouring tile rows lie a multiple of 2 KiB apart: the tile's
  // row streams (14 with AVX-512) then share one or two of L1's 64 sets (4 KiB apart) and
  // evict each other, so its broadcasts wait on L2. A 1024^3 matmul ran at 173 GFLOP/s on an
  // AMD EPYC, at 218 with K = 1000; packed rows (pack_a) a cache line apart do not alias.
  // (Not for rows over the images, row_fastest: a small map's convolution, its packing dearer
  // than the misses: resnet18's layer4 at 64x64 went from 11-13 to 17-19 ms in an SGD step.)
  // (Nor for a wide matmul tile's 6 rows: ChannelTile::a_in_place.)
  bool a_rows_alias(const ChannelTile& ct, const std::vector<Expr>& o) {
    if (ct.row_fastest >= 0 || ct.a_in_place) return false;
    std::vector<int> steps;
    Expr flat = a_leaf_flat(ct, o, steps);
    if (!flat) return false;
    const Node* leaf = ct.a;
    while (!k_.loads.count(leaf)) leaf = leaf->src[0].get();
    auto stride = linear_coefficient(flat, int(o[size_t(ct.row_dims().back())]->value));
    const int64_t bytes = stride ? std::abs(*stride) * int64_t(itemsize(leaf->dtype)) : 0;
    return bytes > 0 && bytes % 2048 == 0;
  }

  // The flat index of the leaf under a chain of views.
  Expr leaf_flat(const Node* n, std::vector<Expr> idx) {
    while (!k_.loads.count(n)) {
      idx = view_source_index(n, idx).idx;
      n = n->src[0].get();
    }
    return row_major(idx, n->shape);
  }

  // ---- a channel tile's padding taps
  // Where `a` is read through a view whose mask fails (a convolution's zero padding), a * b
  // adds nothing, so the reduce loops skip those steps, as oneDNN does (a NaN weight at a tap
  // that only ever meets padding then stays out of the sum, there as here). Per reduce
  // axis: the steps at which some row of the tile passes every mask atom that involves that
  // axis alone among the reduce variables, computed once per tile. In resnet18's layer4 at
  // 64x64 images (2x2 maps, the images as a tile's rows: row_fastest) 4 of the 9 taps run.

  // Affine `e` (constants, variables bound to values, sums, products by constants) with
  // variable `zero` at 0; null when it is not affine or a variable is unbound.
  Value* affine_at_zero(const Expr& e, int zero) {
    switch (e->op) {
      case EOp::Const: return b_.getInt64(e->value);
      case EOp::Var: return e->value == zero ? b_.getInt64(0) : vars_[size_t(e->value)];
      case EOp::Bounded: return affine_at_zero(e->src[0], zero);
      case EOp::Mul: {
        Value* v = affine_at_zero(e->src[0], zero);
        return v ? b_.CreateMul(v, b_.getInt64(e->value)) : nullptr;
      }
      case EOp::Add: {
        Value* sum = b_.getInt64(0);
        for (auto& t : e->src) {
          Value* v = affine_at_zero(t, zero);
          if (!v) return nullptr;
          sum = b_.CreateAdd(sum, v);
        }
        return sum;
      }
      default: return nullptr;
    }
  }
  // [lo, hi) per reduce axis (kv: their variables, unbound) over the tile's rows (ctx: per
  // row and column); null where the masks do not narrow the axis.
  std::vector<std::pair<Value*, Value*>> tap_ranges(const ChannelTile& ct, const std::vector<TiledReduce>& ctx,
                                                    int64_t nrows, int64_t ncols, const std::vector<int>& axes,
                                                    const std::vector<Expr>& kv) {
    std::vector<std::pair<Value*, Value*>> ranges(axes.size(), {nullptr, nullptr});
    std::vector<std::vector<MaskAtom>> rows;
    for (int64_t row = 0; row < nrows; row++) {
      std::vector<Expr> sub = ctx[size_t(row * ncols)].idx;
      for (size_t k = 0; k < axes.size(); k++) sub[size_t(axes[k])] = kv[k];
      rows.push_back(zero_masks(ct.a, sub));
    }
    for (size_t q = 0; q < axes.size(); q++) {
      const int id = int(kv[q]->value);
      const int64_t extent = kv[q]->vmax + 1;
      Value *lo = nullptr, *hi = nullptr;  // over the rows: the least lo, the greatest hi
      for (auto& atoms : rows) {
        Value* row_lo = b_.getInt64(0);
        Value* row_hi = b_.getInt64(extent);
        bool narrowed = false;
        for (const MaskAtom& at : atoms) {
          auto a = linear_coefficient(at.x, id);
          if (!a || *a == 0) continue;
          bool others = false;
          for (auto& v : kv) others |= v->value != id && uses_vars(at.x, int(v->value), int(v->value) + 1);
          if (others) continue;
          Value* m = affine_at_zero(at.x, id);  // x = a * k + m
          if (!m) continue;
          Value* c_minus_m = b_.CreateSub(b_.getInt64(at.c), m);
          Value* m_minus_c = b_.CreateSub(m, b_.getInt64(at.c));
          const int64_t mag = std::abs(*a);
          if (!at.ge && *a > 0)  // a k < c - m
            row_hi = smin(row_hi, b_.CreateAdd(floor_div(b_.CreateSub(c_minus_m, b_.getInt64(1)), mag), b_.getInt64(1)));
          else if (!at.ge)  // |a| k > m - c
            row_lo = smax(row_lo, b_.CreateAdd(floor_div(m_minus_c, mag), b_.getInt64(1)));
          else if (*a > 0)  // a k >= c - m
            row_lo = smax(row_lo, b_.CreateNeg(floor_div(m_minus_c, mag)));
          else  // |a| k <= m - c
            row_hi = smin(row_hi, b_.CreateAdd(floor_div(m_minus_c, mag), b_.getInt64(1)));
          narrowed = true;
        }
        if (!narrowed) {  // this row runs every step of the axis
          lo = hi = nullptr;
          break;
        }
        lo = lo ? smin(lo, row_lo) : row_lo;
        hi = hi ? smax(hi, row_hi) : row_hi;
      }
      if (lo) ranges[q] = {lo, hi};
    }
    return ranges;
  }

  // Static taps: where a tile's rows are constants (a 4x4 map's 16 positions as 2 tiles, a 3x3
  // weight gradient's 9 taps as one) or their innermost coordinate is (a tile per row of an 8x8
  // map), its innermost reduce loops, up to kMaxStaticSteps steps, are unrolled, so that at
  // each step the masks of each row's `a` fold to constants where they involve only those; a
  // row whose `a` is padding there has no FMA (a 2x2 map's weight gradient: 5 of every 9). Axes
  // whose range over the rows is known at run time only stay loops over it (tap_ranges).
  // Standalone, 16 images, 2 threads (AMD EPYC): 2x2 weight gradient 1.7-3.4 -> 0.74-0.81 ms,
  // 4x4 one 2.65 -> 0.93, 4x4 forward 1.37 -> 0.99, 8x8 forward 1.24 -> 1.14.
  static constexpr int64_t kMaxStaticTiles = 4, kMaxStaticSteps = 16;

  // Whether a row's `a` (its masks `atoms`, at the variables' current values) is zero for
  // certain: a mask folds to false.
  bool statically_padding(const std::vector<MaskAtom>& atoms) {
    for (const MaskAtom& at : atoms) {
      Value* x = index(at.x);
      Value* ok = at.ge ? b_.CreateICmpSGE(x, b_.getInt64(at.c)) : b_.CreateICmpSLT(x, b_.getInt64(at.c));
      if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(ok); c && c->isZero()) return true;
    }
    return false;
  }

  // The coordinates of rows i0 .. i0 + nrows - 1. Where i0 is a multiple of nrows (`aligned`)
  // and the tile is one row of the innermost row dim (an 8x8 map's), that dim's coordinate of
  // row q is the constant q, the others the first row's (static taps).
  std::vector<std::vector<std::pair<int, Value*>>> tile_row_coords(const ChannelTile& ct, Value* i0, int64_t nrows,
                                                                     bool aligned) {
    std::vector<std::vector<std::pair<int, Value*>>> rows;
    const int inner = ct.row_dims().back();
    const bool one_row = aligned && k_.shape[size_t(inner)] == nrows;
    for (int64_t q = 0; q < nrows; q++) {
      rows.push_back(one_row && q ? rows.front() : row_coords(ct, b_.CreateAdd(i0, b_.getInt64(q))));
      if (one_row)
        for (auto& [d, v] : rows.back())
          if (d == inner) v = b_.getInt64(q);
    }
    return rows;
  }

  // One tile: rows [i0, i0 + nrows) x channels [j0, j0 + kChanCols).
  void channel_block(const ChannelTile& ct, const std::vector<Expr>& idx, Value* i0, int64_t nrows, Value* j0,
                     Value* panel, int64_t ncols, bool aligned = false) {
    // a partial tile (ncols < kChanCols: the last channels, from a
    // zero-padded panel) computes the vectors it needs, stores its channels
    const int64_t nvecs = (ncols + kLanes - 1) / kLanes;
    const Node* r = ct.reduce;
    const Node* src = r->src[0].get();
    auto* vty = llvm::FixedVectorType::get(b_.getFloatTy(), unsigned(kLanes));
    std::vector<std::vector<Expr>> out_idx;
    std::vector<TiledReduce> ctx;  // per (row, column)
    const auto coords = tile_row_coords(ct, i0, nrows, aligned);
    bool some_constant = false;  // a coordinate of the rows (static taps)
    for (int64_t q = 0; q < nrows; q++) {
      std::vector<Expr> row = idx;
      for (auto [d, v] : coords[size_t(q)]) {
        row[size_t(d)] = new_var(v, k_.shape[size_t(d)]);
        some_constant |= llvm::isa<llvm::Constant>(v) && k_.shape[size_t(d)] > 1;
      }
      for (int64_t c = 0; c < ncols; c++) {
        std::vector<Expr> o = row;
        o[size_t(ct.j)] = new_var(b_.CreateAdd(j0, b_.getInt64(c)), k_.shape[size_t(ct.j)]);
        auto cc = find_tiled_reduce(o, int(o[size_t(ct.j)]->value));
        if (!cc || cc->reduce != r) throw std::logic_error("tiny codegen: channel tile context mismatch");
        out_idx.push_back(o);
        ctx.push_back(*cc);
      }
    }
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    std::vector<llvm::AllocaInst*> acc(size_t(nrows * nvecs));
    Value* saved = nullptr;  // this tile's accumulators in the scratch buffer
    if (blocks_) saved = b_.CreateGEP(b_.getFloatTy(), blocks_->scratch, b_.CreateLoad(b_.getInt64Ty(), blocks_->cursor));
    auto saved_vec = [&](size_t a) {
      return b_.CreateBitCast(b_.CreateConstGEP1_64(b_.getFloatTy(), saved, uint64_t(a) * uint64_t(kLanes)),
                              vty->getPointerTo());
    };
    for (size_t a = 0; a < acc.size(); a++) {
      acc[a] = eb.CreateAlloca(vty);
      Value* init = llvm::ConstantFP::get(vty, 0.0);
      if (blocks_)
        init = b_.CreateSelect(blocks_->first, init, b_.CreateAlignedLoad(vty, saved_vec(a), llvm::Align(4)));
      b_.CreateStore(init, acc[a]);
    }
    std::vector<int> axes;
    for (int a : r->args.axes)
      if (src->shape[a] > 1) axes.push_back(a);
    std::vector<Expr> kv;
    for (int a : axes) kv.push_back(placeholder_var(src->shape[a]));
    llvm::Function* fma = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::fmuladd, {vty});
    // reduces under `a` that do not depend on the reduce loops (a LayerNorm's row statistics
    // feeding a linear layer) are computed once per tile row, before them, not once per step
    // (a transformer block's MLP: 356 -> 2 ms)
    for (int64_t row = 0; row < nrows && !a_rows_; row++) {
      const TiledReduce& c0 = ctx[size_t(row * ncols)];
      std::vector<Expr> sub = c0.idx;
      for (size_t k = 0; k < axes.size(); k++) sub[size_t(axes[k])] = kv[k];
      hoist_reduces({ct.a}, sub, c0.valid, int(kv[0]->value));
    }
    const std::vector<std::pair<Value*, Value*>> taps = tap_ranges(ct, ctx, nrows, ncols, axes, kv);
    // static taps: the reduce axes from `unrolled` on, each step at constant values. Not for
    // tiles whose accumulators take more than 5/8 of the vector registers (LLVM keeps the
    // broadcasts that neighbouring unrolled steps share: with 28 accumulators it spilled them,
    // a 14x14 map's convolution ran 1.3x slower), nor over an axis whose range is known at run
    // time only (branches around the steps spilled them too: 1.7x slower).
    size_t unrolled = axes.size();
    std::vector<std::vector<MaskAtom>> row_masks;
    if (ct.padding_taps && some_constant && nrows * nvecs * 8 <= kRegisters * 5) {
      auto constant_range = [&](size_t q) {
        return !taps[q].first || (llvm::isa<llvm::ConstantInt>(taps[q].first) && llvm::isa<llvm::ConstantInt>(taps[q].second));
      };
      int64_t steps = 1;
      while (unrolled > (blocks_ ? 1u : 0u) && steps * src->shape[size_t(axes[unrolled - 1])] <= kMaxStaticSteps &&
             constant_range(unrolled - 1))
        steps *= src->shape[size_t(axes[--unrolled])];
      for (int64_t row = 0; row < nrows && unrolled < axes.size(); row++) {
        std::vector<Expr> sub = ctx[size_t(row * ncols)].idx;
        for (size_t k = 0; k < axes.size(); k++) sub[size_t(axes[k])] = kv[k];
        row_masks.push_back(zero_masks(ct.a, sub));
      }
    }
    std::function<void(size_t)> nest = [&](size_t q) {
      if (q >= unrolled && q < axes.size()) {
        int64_t lo = 0, hi = src->shape[size_t(axes[q])];
        if (taps[q].first) {  // the rows' range, a constant here
          lo = llvm::cast<llvm::ConstantInt>(taps[q].first)->getSExtValue();
          hi = llvm::cast<llvm::ConstantInt>(taps[q].second)->getSExtValue();
        }
        for (int64_t k = lo; k < hi; k++) {
          vars_[size_t(kv[q]->value)] = b_.getInt64(k);
          memo_.emplace_back();
          nest(q + 1);
          memo_.pop_back();
        }
        return;
      }
      if (q == axes.size()) {
        auto vload = [&](Value* base, Value* at) {
          Value* p = b_.CreateGEP(b_.getFloatTy(), base, at);
          return b_.CreateAlignedLoad(vty, b_.CreateBitCast(p, vty->getPointerTo()), llvm::Align(4));
        };
        std::vector<Value*> wv;
        if (!ct.unit) {
          Value* at = b_.CreateMul(index(ct.kflat(kv)), b_.getInt64(ct.cols));
          for (int64_t v = 0; v < nvecs; v++) wv.push_back(vload(panel, b_.CreateAdd(at, b_.getInt64(v * kLanes))));
        }
        for (int64_t row = 0; row < nrows; row++) {
          if (!row_masks.empty() && statically_padding(row_masks[size_t(row)])) continue;
          if (ct.unit) {  // b in place: 16 channels from each vector's first column
            wv.clear();
            for (int64_t v = 0; v < nvecs; v++) {
              const TiledReduce& cv = ctx[size_t(row * ncols + v * kLanes)];
              std::vector<Expr> sub = cv.idx;
              for (size_t k = 0; k < axes.size(); k++) sub[size_t(axes[k])] = kv[k];
              wv.push_back(vload(buf_ptrs_[k_.loads.at(ct.packed)], index(leaf_flat(ct.b, sub))));
            }
          }
          // a does not move along the channels: column 0's context serves the row
          const TiledReduce& c0 = ctx[size_t(row * ncols)];
          std::vector<Expr> sub = c0.idx;
          for (size_t k = 0; k < axes.size(); k++) sub[size_t(axes[k])] = kv[k];
          Value* a_value;
          if (a_rows_) {  // packed before the panels (pack_a)
            Value* r0 = b_.CreateSub(b_.CreateAdd(i0, b_.getInt64(row)), a_first_row_);
            Value* at = a_step_major_ ? b_.CreateAdd(b_.CreateMul(index(ct.kflat(kv)), a_rows_count_), r0)
                                      : b_.CreateAdd(b_.CreateMul(r0, b_.getInt64(a_pitch_)), index(ct.kflat(kv)));
            a_value = b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(b_.getFloatTy(), a_rows_, at));
          } else {
            a_value = eval(ct.a, sub, c0.valid);
          }
          Value* av = b_.CreateVectorSplat(unsigned(kLanes), a_value);
          for (int64_t v = 0; v < nvecs; v++) {
            auto* a = acc[size_t(row * nvecs + v)];
            b_.CreateStore(b_.CreateCall(fma, {av, wv[size_t(v)], b_.CreateLoad(vty, a)}), a);
          }
        }
        return;
      }
      Value* lo = b_.getInt64(0);
      Value* hi = b_.getInt64(src->shape[axes[q]]);
      if (blocks_ && q == 0) {  // this block's slice of the outermost reduce loop
        lo = b_.CreateMul(blocks_->block, b_.getInt64(blocks_->step));
        hi = b_.CreateAdd(lo, b_.getInt64(blocks_->step));
        hi = b_.CreateSelect(b_.CreateICmpSLT(hi, b_.getInt64(blocks_->extent)), hi, b_.getInt64(blocks_->extent));
      }
      if (taps[q].first) {
        lo = smax(lo, taps[q].first);
        hi = smin(hi, taps[q].second);
      }
      const int var = int(kv[q]->value);
      auto loop = [&](Value* lo, Value* hi) {
        emit_loop(lo, hi, [&](Value* iv) {
          vars_[size_t(var)] = iv;
          nest(q + 1);
        }, /*scalar=*/true);
      };
      if (a_rows_ || taps[q].first || (blocks_ && q == 0)) return loop(lo, hi);  // a packed, or a part
      std::vector<Expr> at = ctx[0].idx;
      for (size_t k = 0; k < axes.size(); k++) at[size_t(axes[k])] = kv[k];
      split_at_masks({ct.a}, at, ctx[0].valid, {&kv[q]}, src->shape[size_t(axes[q])],
                     [&](int64_t lo, int64_t hi) { loop(b_.getInt64(lo), b_.getInt64(hi)); });
    };
    nest(0);
    auto store_outputs = [&]() {
      if (!column_strip_ && store_transposed(ct, idx, out_idx, acc, nrows, ncols)) return;
      if (epilogue_loop(ct, idx, i0, nrows, j0, ncols, acc)) return;
      for (int64_t row = 0; row < nrows; row++)
        for (int64_t v = 0; v < nvecs; v++) {
          Value* vec = b_.CreateLoad(vty, acc[size_t(row * nvecs + v)]);
          for (int64_t l = 0; l < kLanes && v * kLanes + l < ncols; l++) {
            const TiledReduce& c = ctx[size_t(row * ncols + v * kLanes + l)];
            remember(context_key(r, c.idx, c.valid), b_.CreateExtractElement(vec, uint64_t(l)));
          }
        }
      emit_stores(out_idx);
    };
    if (!blocks_) return store_outputs();
    for (size_t a = 0; a < acc.size(); a++)
      b_.CreateAlignedStore(b_.CreateLoad(vty, acc[a]), saved_vec(a), llvm::Align(4));
    Value* cursor = b_.CreateLoad(b_.getInt64Ty(), blocks_->cursor);
    b_.CreateStore(b_.CreateAdd(cursor, b_.getInt64(int64_t(acc.size()) * kLanes)), blocks_->cursor);
    emit_if(blocks_->last, store_outputs);
  }

  // A tile's outputs through a loop over its rows and channels instead of once per output: the
  // accumulators wait in a stack buffer and what follows the reduce (a bias, a ReLU, an
  // optimizer's update of the weight a gradient belongs to) is emitted once, for the loop
  // vectorizer to run along the channels. Unrolled, a 14 x 32 tile's 448 scalar epilogues were
  // most of a kernel's IR, and the SLP vectorizer and instruction selection spent 0.3-1.1 s on
  // each such kernel of a small MLP's training step. False (nothing emitted) where the epilogue
  // reads another reduce, gathers or scatters.
  bool epilogue_loop(const ChannelTile& ct, const std::vector<Expr>& idx, Value* i0, int64_t nrows, Value* j0,
                     int64_t ncols, const std::vector<llvm::AllocaInst*>& acc) {
    if (!elementwise_epilogue(k_, ct.reduce)) return false;
    const int64_t nvecs = (ncols + kLanes - 1) / kLanes, width = nvecs * kLanes;
    auto* vty = llvm::FixedVectorType::get(b_.getFloatTy(), unsigned(kLanes));
    if (column_strip_) {  // into the column strip, turned around, at these rows (its loop comes later)
      std::vector<llvm::Constant*> mask;
      for (int64_t l = 0; l < kLanes; l++) mask.push_back(b_.getInt1(l < nrows));
      Value* lanes = llvm::ConstantVector::get(mask);
      for (int64_t v = 0; v < nvecs; v++) {
        std::vector<Value*> m = transposed_rows(acc, nrows, nvecs, v);
        for (int64_t l = 0; l < kLanes; l++) {
          Value* at = b_.CreateAdd(b_.getInt64((v * kLanes + l) * column_strip_->pitch), i0);
          Value* ptr = b_.CreateGEP(b_.getFloatTy(), column_strip_->buffer, at);
          b_.CreateMaskedStore(m[size_t(l)], b_.CreateBitCast(ptr, vty->getPointerTo()), llvm::Align(4), lanes);
        }
      }
      return true;
    }
    // Outputs that store each channel's rows consecutively (a 1x1 convolution's weight
    // gradient, (o, c) from a tile over c x o, its AdamW update fused): the accumulators turned
    // around in registers and the loop run down each channel's rows, where along the channels
    // every load and store of the epilogue was a gather or a scatter.
    bool by_column = !row_tile_ && nrows >= 2 && nrows <= kLanes && ncols == ct.cols;
    for (auto& o : k_.outputs) by_column = by_column && rows_consecutive(o, ct, idx);
    if (by_column) {
      auto* tile = llvm::IRBuilder<>(entry_, entry_->begin()).CreateAlloca(llvm::ArrayType::get(vty, uint64_t(ncols)));
      Value* first = b_.CreateConstGEP2_64(tile->getAllocatedType(), tile, 0, 0);
      for (int64_t v = 0; v < nvecs; v++) {
        std::vector<Value*> m = transposed_rows(acc, nrows, nvecs, v);
        for (int64_t l = 0; l < kLanes; l++) b_.CreateAlignedStore(m[size_t(l)], b_.CreateConstGEP1_64(vty, first, uint64_t(v * kLanes + l)), llvm::Align(4));
      }
      epilogue_columns(ct, idx, i0, nrows, j0, ncols, b_.CreateBitCast(first, b_.getFloatTy()->getPointerTo()), kLanes);
      return true;
    }
    Value* first;
    Value* pitch;
    if (row_tile_) {  // into the row tile's buffer, at this tile's channels (its loop comes later)
      first = b_.CreateGEP(b_.getFloatTy(), row_tile_->buffer, b_.CreateSub(j0, row_tile_->first_channel));
      pitch = row_tile_->pitch;
    } else {
      auto* tile = llvm::IRBuilder<>(entry_, entry_->begin()).CreateAlloca(llvm::ArrayType::get(b_.getFloatTy(), uint64_t(nrows * width)));
      first = b_.CreateConstGEP2_64(tile->getAllocatedType(), tile, 0, 0);
      pitch = b_.getInt64(width);
    }
    for (int64_t row = 0; row < nrows; row++)
      for (int64_t v = 0; v < nvecs; v++) {
        Value* at = b_.CreateGEP(b_.getFloatTy(), first, b_.CreateAdd(b_.CreateMul(b_.getInt64(row), pitch), b_.getInt64(v * kLanes)));
        b_.CreateAlignedStore(b_.CreateLoad(vty, acc[size_t(row * nvecs + v)]), b_.CreateBitCast(at, vty->getPointerTo()),
                              llvm::Align(4));
      }
    if (!row_tile_) epilogue_rows(ct, idx, i0, nrows, j0, b_.getInt64(ncols), first, pitch);
    return true;
  }

  // The epilogue loop of `nrows` rows from i0 by `ncols` channels from j0, the accumulators
  // at `first`, rows `pitch` floats apart: for each output, its value stored.
  void epilogue_rows(const ChannelTile& ct, const std::vector<Expr>& idx, Value* i0, int64_t nrows, Value* j0,
                     Value* ncols, Value* first, Value* pitch) {
    epilogue(ct, idx, i0, nrows, j0, ncols, first, pitch, /*by_column=*/false);
  }

  // The same epilogue with the loops the other way round, each channel's rows innermost (their
  // outputs consecutive in memory), the accumulators at `first` channel by channel, `pitch`
  // floats apart.
  void epilogue_columns(const ChannelTile& ct, const std::vector<Expr>& idx, Value* i0, int64_t nrows, Value* j0,
                        int64_t ncols, Value* first, int64_t pitch) {
    epilogue(ct, idx, i0, nrows, j0, b_.getInt64(ncols), first, b_.getInt64(pitch), /*by_column=*/true);
  }

  // Both orders' loops: the accumulator of row q, channel c at first[c * pitch + q] by column,
  // first[q * pitch + c] by row; the inner loop marked parallel.
  void epilogue(const ChannelTile& ct, const std::vector<Expr>& idx, Value* i0, int64_t nrows, Value* j0, Value* ncols,
                Value* first, Value* pitch, bool by_column) {
    llvm::BasicBlock* last = &fn_->back();
    auto element = [&](Value* q, Value* c) {
      std::vector<Expr> o = idx;
      for (auto [d, v] : row_coords(ct, b_.CreateAdd(i0, q))) o[size_t(d)] = new_var(v, k_.shape[size_t(d)]);
      o[size_t(ct.j)] = new_var(b_.CreateAdd(j0, c), k_.shape[size_t(ct.j)]);
      auto cc = find_tiled_reduce(o, int(o[size_t(ct.j)]->value));
      if (!cc || cc->reduce != ct.reduce) throw std::logic_error("tiny codegen: channel tile context mismatch");
      Value* at = by_column ? b_.CreateAdd(b_.CreateMul(c, pitch), q) : b_.CreateAdd(b_.CreateMul(q, pitch), c);
      remember(context_key(ct.reduce, cc->idx, cc->valid),
               b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(b_.getFloatTy(), first, at)));
      emit_stores(o);
    };
    Value* rows = b_.getInt64(nrows);
    if (by_column)
      emit_loop(b_.getInt64(0), ncols, [&](Value* c) {
        emit_loop(b_.getInt64(0), rows, [&](Value* q) { element(q, c); }, false, false, /*parallel=*/true);
      }, /*scalar=*/true);
    else
      emit_loop(b_.getInt64(0), rows, [&](Value* q) {
        emit_loop(b_.getInt64(0), ncols, [&](Value* c) { element(q, c); }, false, false, /*parallel=*/true);
      }, /*scalar=*/true);
    // the loop's blocks (those made since, but the one code goes on in) become a function
    std::vector<llvm::BasicBlock*> blocks;
    for (auto it = std::next(last->getIterator()); it != fn_->end(); ++it)
      if (&*it != b_.GetInsertBlock()) blocks.push_back(&*it);
    epilogues_.push_back(std::move(blocks));
  }

  // Moves `blocks` (one loop nest, entered at its first block) into a function of their own,
  // called where they were. For a tile's epilogue: in the kernel's function, machine LICM
  // hoisted its constants (an exp's dozen coefficients) above the tile's reduce loop, where
  // they took the registers of the 28 accumulators, spilled in each step (a 128 x 1536
  // linear layer with an exp after it ran at 40 GMAC/s, 96 without).
  void outline(const std::vector<llvm::BasicBlock*>& blocks, const std::string& suffix) {
    llvm::CodeExtractorAnalysisCache cache(*fn_);
    llvm::CodeExtractor extractor(blocks, nullptr, false, nullptr, nullptr, nullptr, false, false, suffix);
    if (!extractor.isEligible()) throw std::logic_error("tiny codegen: a tile epilogue cannot be outlined");
    llvm::Function* f = extractor.extractCodeRegion(cache);
    if (!f) throw std::logic_error("tiny codegen: outlining a tile epilogue failed");
    f->addFnAttr(llvm::Attribute::NoInline);
  }

  // The L x L matrix whose rows are the L vectors `m` (L lanes each), transposed in place:
  // log2(L) rounds of two-vector shuffles (named `name` in the IR).
  void transpose_square(std::vector<Value*>& m, const char* name = "") {
    const int64_t L = int64_t(m.size());
    for (int64_t half = 1; half < L; half *= 2)
      for (int64_t q = 0; q < L; q++) {
        if (q & half) continue;
        std::vector<int> lo, hi;  // lane l of row q takes row q + half's l - half where l has bit `half`
        for (int64_t l = 0; l < L; l++) {
          lo.push_back(int((l & half) ? L + l - half : l));
          hi.push_back(int((l & half) ? L + l : l + half));
        }
        Value* a = m[size_t(q)];
        Value* b = m[size_t(q + half)];
        m[size_t(q)] = b_.CreateShuffleVector(a, b, lo, name);
        m[size_t(q + half)] = b_.CreateShuffleVector(a, b, hi, name);
      }
  }

  // TransposeTile: blocks of L run positions x L positions along the stored dim. Each
  // output's block is computed along the run into a buffer (the loads stream, the loop
  // vectorizes), then its L rows are transposed in registers and stored along the dim.
  void transposed_blocks(std::vector<Expr> idx, const TransposeTile& tt, Value* run_lo, Value* run_hi, size_t mid = 0) {
    if (mid < tt.mid.size()) {  // the dims between the run and the stored dim, each a loop
      const int d = tt.mid[mid];
      emit_loop(b_.getInt64(0), b_.getInt64(k_.shape[size_t(d)]), [&](Value* v) {
        idx[size_t(d)] = new_var(v, k_.shape[size_t(d)]);
        transposed_blocks(idx, tt, run_lo, run_hi, mid + 1);
      });
      return;
    }
    const int64_t L = kLanes;
    const FlatTail& run = tt.run;
    const size_t sd = size_t(tt.dim);
    for (int d = run.from; d < run.last; d++) idx[size_t(d)] = cnst(0);
    std::vector<llvm::AllocaInst*> block;
    std::vector<llvm::Type*> elem;
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    for (auto& o : k_.outputs) {
      elem.push_back(mem_type(k_.buffers[size_t(o.buffer)]->dtype()));
      block.push_back(eb.CreateAlloca(llvm::ArrayType::get(elem.back(), uint64_t(L * L))));
    }
    emit_loop(b_.getInt64(0), b_.getInt64(k_.shape[sd] / L), [&](Value* sb) {
      Expr s0 = mul(new_var(sb, k_.shape[sd] / L), L);
      emit_loop(b_.CreateSDiv(run_lo, b_.getInt64(L)), b_.CreateSDiv(run_hi, b_.getInt64(L)), [&](Value* rb) {
        Expr r0 = mul(new_var(rb, run.count / L), L);
        emit_loop(b_.getInt64(0), b_.getInt64(L), [&](Value* c) {
          idx[sd] = add(s0, new_var(c, L));
          Value* row = b_.CreateMul(c, b_.getInt64(L));
          hoist_invariants(idx, {int(idx[size_t(run.last)]->value)});
          emit_loop(b_.getInt64(0), b_.getInt64(L), [&](Value* r) {
            Expr rv = new_var(r, L);
            idx[size_t(run.last)] = add(r0, rv);
            for (size_t q = 0; q < k_.outputs.size(); q++) {
              const auto& o = k_.outputs[q];
              DType dt = k_.buffers[size_t(o.buffer)]->dtype();
              Value* v = o.value->dtype == dt ? eval_bits(o.value.get(), idx, cnst(1)) : nullptr;
              if (!v) v = to_mem(eval(o.value.get(), idx, cnst(1)), dt);
              b_.CreateStore(v, b_.CreateGEP(elem[q], b_.CreateBitCast(block[q], elem[q]->getPointerTo()), b_.CreateAdd(row, r)));
            }
          });
        });
        idx[sd] = s0;
        for (size_t q = 0; q < k_.outputs.size(); q++) {
          const auto& o = k_.outputs[q];
          auto* vty = llvm::FixedVectorType::get(elem[q], unsigned(L));
          Value* base = b_.CreateBitCast(block[q], vty->getPointerTo());
          std::vector<Value*> m;
          for (int64_t c = 0; c < L; c++) m.push_back(b_.CreateAlignedLoad(vty, b_.CreateConstGEP1_64(vty, base, uint64_t(c)), llvm::Align(4)));
          transpose_square(m);  // m[r]: run position r0 + r at s0 .. s0 + L
          for (int64_t r = 0; r < L; r++) {
            idx[size_t(run.last)] = add(r0, cnst(r));
            Value* at = index(o.store.index_valid(idx).first);
            Value* ptr = b_.CreateGEP(elem[q], buf_ptrs_[size_t(o.buffer)], at);
            b_.CreateAlignedStore(m[size_t(r)], b_.CreateBitCast(ptr, vty->getPointerTo()), llvm::Align(4));
          }
        }
      });
    });
    // the stored dim's last shape % L positions one output at a time (a 56-wide map's last 8)
    if (const int64_t rest = k_.shape[sd] % L) {
      emit_loop(b_.getInt64(k_.shape[sd] - rest), b_.getInt64(k_.shape[sd]), [&](Value* sv) {
        idx[sd] = new_var(sv, k_.shape[sd]);
        emit_loop(run_lo, run_hi, [&](Value* r) {
          idx[size_t(run.last)] = new_var(r, run.count);
          emit_stores(idx);
        });
      });
    }
  }

  // Whether a tile's epilogue runs down each channel's rows across all W of them, after all
  // its row tiles (ColumnStrip): several outputs, each storing a channel's rows consecutively, only
  // element-wise work follows the reduce, the tile covers every row, and a strip of its
  // accumulators fits in L2. Per row tile, a 1280 x 320 weight gradient's AdamW epilogue read
  // and wrote 7 arrays in runs of 10 floats, 32 channels apart: 224 streams, more than the
  // prefetchers follow.
  bool rows_by_column(const ChannelTile& ct, const std::vector<Expr>& idx, Value* lo_i, Value* hi_i, int64_t W) {
    constexpr int64_t kMaxStripBytes = int64_t(256) << 10;
    if (k_.outputs.size() < 2 || ct.rows_outside || !ct.mid.empty() || blocks_ || ct.rows > kLanes ||
        ct.cols * W * 4 > kMaxStripBytes ||
        !llvm::isa<llvm::Constant>(lo_i) || !llvm::isa<llvm::Constant>(hi_i) || !elementwise_epilogue(k_, ct.reduce))
      return false;
    for (auto& o : k_.outputs)
      if (!rows_consecutive(o, ct, idx)) return false;
    return true;
  }

  // Whether output `o` stores the tile's rows consecutively: its index linear in the row dims
  // with their row-major strides (consecutive flat rows are consecutive elements), unmasked,
  // and not unit-stride along the channels.
  bool rows_consecutive(const KernelOutput& o, const ChannelTile& ct, const std::vector<Expr>& idx) {
    if (o.scatter_index) return false;
    auto [at, valid] = o.store.index_valid(idx);
    if (!is_true(valid)) return false;
    const std::vector<int> rows = ct.row_dims();
    int64_t stride = 1;
    for (size_t q = rows.size(); q-- > 0;) {
      auto c = linear_coefficient(at, int(idx[size_t(rows[q])]->value));
      if (!c || *c != stride) return false;
      stride *= k_.shape[size_t(rows[q])];
    }
    auto cj = linear_coefficient(at, int(idx[size_t(ct.j)]->value));
    return !(cj && *cj == 1);
  }

  // Vector `v` of a tile's channels (accumulators `acc`, row by row, `nvecs` per row) turned
  // around: one vector per channel of that vector, lane q its row q, zeros past `nrows`.
  std::vector<Value*> transposed_rows(const std::vector<llvm::AllocaInst*>& acc, int64_t nrows, int64_t nvecs, int64_t v) {
    auto* vty = llvm::FixedVectorType::get(b_.getFloatTy(), unsigned(kLanes));
    std::vector<Value*> m;
    for (int64_t q = 0; q < kLanes; q++)
      m.push_back(q < nrows ? (Value*)b_.CreateLoad(vty, acc[size_t(q * nvecs + v)]) : llvm::ConstantFP::get(vty, 0.0));
    transpose_square(m);
    return m;
  }

  // A tile whose only output is the reduce (through views at most), stored with the tile's
  // rows consecutive and its channels apart (a weight gradient requested in the weight's
  // layout, (o, c, kh, kw), from a tile over (c, kh, kw) x o): the accumulators are transposed in registers
  // (log2(lanes) rounds of two-vector shuffles), each channel's rows then stored as one
  // masked vector, instead of every value extracted and stored on its own. Measured on an
  // Intel CPU, 16 images: resnet18's 2x2 weight gradients 4.7 -> 1.9-2.3 ms with AVX-512
  // (4.3 -> 4.0 for AVX2), 4x4 and 8x8 ones 20 % faster; the SGD step 160-165 -> 145-150 ms
  // (AVX2: 194 -> 176-186). False (nothing emitted) where that does not apply.
  bool store_transposed(const ChannelTile& ct, const std::vector<Expr>& idx, const std::vector<std::vector<Expr>>& out_idx,
                        const std::vector<llvm::AllocaInst*>& acc, int64_t nrows, int64_t ncols) {
    if (k_.outputs.size() != 1 || ncols != ct.cols || nrows > kLanes || nrows < 2) return false;
    const auto& o = k_.outputs[0];
    if (o.scatter_index || k_.buffers[o.buffer]->dtype() != DType::Float32) return false;
    // the value is the reduce, seen through unmasked views at most (each output then stores
    // its own accumulator)
    std::vector<Expr> at_node = idx;
    for (const Node* n = o.value.get(); n != ct.reduce; n = n->src[0].get()) {
      if (n->op == Op::Contiguous) continue;
      if (n->op != Op::View) return false;
      SourceIndex v = view_source_index(n, at_node);
      if (!is_true(v.valid)) return false;
      at_node = v.idx;
    }
    if (!rows_consecutive(o, ct, idx)) return false;
    const int64_t L = kLanes, nvecs = ncols / L;
    auto* vty = llvm::FixedVectorType::get(b_.getFloatTy(), unsigned(L));
    std::vector<llvm::Constant*> mask;
    for (int64_t l = 0; l < L; l++) mask.push_back(b_.getInt1(l < nrows));
    Value* lanes = llvm::ConstantVector::get(mask);
    for (int64_t v = 0; v < nvecs; v++) {
      std::vector<Value*> m = transposed_rows(acc, nrows, nvecs, v);
      DType dt = DType::Float32;
      for (int64_t l = 0; l < L; l++) {  // channel v * L + l: rows 0..nrows from its row 0's place
        Value* first = index(o.store.index_valid(out_idx[size_t(v * L + l)]).first);
        Value* ptr = b_.CreateGEP(mem_type(dt), buf_ptrs_[o.buffer], first);
        b_.CreateMaskedStore(m[size_t(l)], b_.CreateBitCast(ptr, vty->getPointerTo()), llvm::Align(4), lanes);
      }
    }
    return true;
  }

  Value* identity(ReduceOp op, DType dt) {
    llvm::Type* ty = reg_type(dt);
    bool f = ty->isFloatingPointTy();
    switch (op) {
      case ReduceOp::Sum: return zero(dt);
      case ReduceOp::Prod: return f ? llvm::ConstantFP::get(ty, 1.0) : llvm::ConstantInt::get(ty, 1);
      case ReduceOp::Any: return b_.getInt1(false);
      case ReduceOp::All: return b_.getInt1(true);
      case ReduceOp::Xor: return zero(dt);
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
          // reassociable (vector partial sums) and contractible into an FMA
          // with a product feeding it
          auto* r = llvm::cast<llvm::Instruction>(b_.CreateFAdd(a, v));
          r->setHasAllowReassoc(true);
          r->setHasAllowContract(true);
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
      case ReduceOp::Xor: return b_.CreateXor(a, v);
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
  // A polynomial in z of z's type, coefficients from the highest degree.
  Value* horner(Value* z, std::initializer_list<double> coef) {
    Value* r = llvm::ConstantFP::get(z->getType(), *coef.begin());
    for (auto it = coef.begin() + 1; it != coef.end(); ++it)
      r = b_.CreateFAdd(b_.CreateFMul(r, z), llvm::ConstantFP::get(z->getType(), *it));
    return r;
  }
  // The same with fused multiply-adds and float coefficients (the fitted polynomials below).
  template <size_t N>
  Value* horner_fma(Value* z, const float (&coef)[N]) {
    Value* r = llvm::ConstantFP::get(z->getType(), double(coef[0]));
    for (size_t i = 1; i < N; i++) r = fma_f(r, z, llvm::ConstantFP::get(z->getType(), double(coef[i])));
    return r;
  }

  // float32 erf in float lanes, two polynomials (fitted by scripts/fit_float_math.py, which
  // checks every result within one unit of the correctly rounded value on 2 million points):
  // x + x q(x^2) below 1, 1 - erfc(|x|) above (a polynomial in |x| - mid, so its rounding
  // errors scale with erfc, at most 0.16), 1 from 3.9192058 (erfc under half a unit of 1).
  // About 30 vector instructions on 16 lanes, where its Taylor series in double took 64 on
  // 8 (a GELU over 1024 x 2048: 7.9 ms, PyTorch 1.3) and erff is a call per element.
  Value* erf_f32(Value* a) {
    static const float kErfSmall[] = {  // q, from the highest degree
        7.847262e-05f,   -8.008193e-04f, 5.1880996e-03f, -2.6853692e-02f,
        1.12835824e-01f, -3.7612626e-01f, 1.2837917e-01f};
    static const float kErfLarge[] = {  // erfc(mid + t), from the highest degree
        -1.0965422e-06f, -9.0204644e-08f, 1.7347134e-05f, -2.4779458e-05f, -7.5759424e-05f,
        2.9989466e-04f,  -3.569161e-04f,  -4.581722e-04f, 2.9384105e-03f,  -6.8065603e-03f,
        9.927703e-03f,   -9.848212e-03f,  6.5462417e-03f, -2.6614317e-03f, 5.044094e-04f};
    constexpr float kMid = 2.4596029f, kOne = 3.9192058f;
    llvm::Type* fty = a->getType();
    auto c = [&](float v) { return llvm::ConstantFP::get(fty, double(v)); };
    Value* ax = call(llvm::Intrinsic::fabs, a);
    Value* small = fma_f(ax, horner_fma(b_.CreateFMul(ax, ax), kErfSmall), ax);
    Value* large = b_.CreateFSub(c(1.0f), horner_fma(b_.CreateFSub(ax, c(kMid)), kErfLarge));
    Value* r = b_.CreateSelect(b_.CreateFCmpOGE(ax, c(kOne)), c(1.0f), large);  // NaN stays NaN
    r = b_.CreateSelect(b_.CreateFCmpOLT(ax, c(1.0f)), small, r);
    return call2(llvm::Intrinsic::copysign, r, a);
  }

  // float32 exp and exp2 in float lanes (scripts/fit_float_math.py fits p and checks every
  // result within one unit of the correctly rounded value): exp(x) = 2^n (1 + r + r^2 p(r))
  // with n = round(x / ln 2), r = x - n ln 2 in two FMAs; exp2 with n = round(x), r = (x - n)
  // ln 2 (x - n is exact, so integers give exact powers). x is clamped to where the result
  // is 0 and inf in float (NaN stays NaN). LLVM's exp was libmvec's 8-wide call (0.88 ms over
  // 2^21 floats, PyTorch 0.65; a sigmoid 2.0 ms, PyTorch 0.93), and exp2 through double exp
  // made a kernel that also holds 16-lane float math call a scalar exp per element.
  Value* exp_f32(Value* a) {
    auto [n, r] = exp_reduce(clamp_keeping_nan(a, -104.0f, 89.0f));
    return pow2_exp(n, r);
  }
  // n = round(x / ln 2) and r = x - n ln 2 (two FMAs, ln 2 as kLn2 + kLn2Rest)
  std::pair<Value*, Value*> exp_reduce(Value* x) {
    auto c = [&](float v) { return llvm::ConstantFP::get(x->getType(), double(v)); };
    Value* n = call(llvm::Intrinsic::roundeven, b_.CreateFMul(x, c(1.442695e+00f)));
    return {n, fma_f(b_.CreateFNeg(n), c(kLn2Rest), fma_f(b_.CreateFNeg(n), c(kLn2), x))};
  }
  Value* exp2_f32(Value* a) {
    auto c = [&](float v) { return llvm::ConstantFP::get(a->getType(), double(v)); };
    Value* x = clamp_keeping_nan(a, -151.0f, 129.0f);
    Value* n = call(llvm::Intrinsic::roundeven, x);
    Value* r = b_.CreateFSub(x, n);
    return pow2_exp(n, fma_f(r, c(kLn2), b_.CreateFMul(r, c(kLn2Rest))));
  }
  static constexpr float kLn2 = 6.931472e-01f, kLn2Rest = -1.9046542e-09f;  // ln 2 - kLn2
  Value* fma_f(Value* m, Value* f, Value* add) { return b_.CreateIntrinsic(llvm::Intrinsic::fma, {m->getType()}, {m, f, add}); }
  Value* clamp_keeping_nan(Value* a, float lo, float hi) {
    auto c = [&](float v) { return llvm::ConstantFP::get(a->getType(), double(v)); };
    Value* x = b_.CreateSelect(b_.CreateFCmpOGT(a, c(hi)), c(hi), a);
    return b_.CreateSelect(b_.CreateFCmpOLT(x, c(lo)), c(lo), x);
  }
  // 2^n (1 + r + r^2 p(r)) for integral n in [-151, 129], 2^n as two normal factors 2^h 2^(n - h),
  // h = n >> 1 (exponent fields (h + 127) << 23), so that results below the normal range
  // round once. A NaN's n counts as 0: a plain conversion, which vectorizes where
  // fptosi.sat did not, makes NaN poison.
  Value* pow2_exp(Value* n, Value* r) {
    llvm::Type* fty = n->getType();
    Value* k = b_.CreateFPToSI(b_.CreateSelect(b_.CreateFCmpUNO(n, n), llvm::ConstantFP::get(fty, 0.0), n), int_lanes(fty));
    Value* h = b_.CreateAShr(k, llvm::ConstantInt::get(k->getType(), 1));
    return b_.CreateFMul(b_.CreateFMul(exp_poly(r), pow2(h)), pow2(b_.CreateSub(k, h)));
  }
  // 1 + r + r^2 p(r), exp(r) for |r| <= ln 2 / 2
  Value* exp_poly(Value* r) {
    static const float kExp[] = {1.3814586e-03f, 8.362821e-03f, 4.166789e-02f, 1.666658e-01f, 4.9999997e-01f};
    return b_.CreateFAdd(llvm::ConstantFP::get(r->getType(), 1.0), fma_f(b_.CreateFMul(r, r), horner_fma(r, kExp), r));
  }
  // The float 2^m for integral m in [-126, 127] (its exponent field (m + 127) << 23).
  Value* pow2(Value* m) {
    llvm::Type* ity = m->getType();
    llvm::Type* fty = b_.getFloatTy();
    if (auto* v = llvm::dyn_cast<llvm::VectorType>(ity)) fty = llvm::VectorType::get(fty, v->getElementCount());
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(m, llvm::ConstantInt::get(ity, 127)), llvm::ConstantInt::get(ity, 23)), fty);
  }
  // int32 lanes as many as float type `fty` has
  llvm::Type* int_lanes(llvm::Type* fty) {
    llvm::Type* ity = b_.getInt32Ty();
    if (auto* v = llvm::dyn_cast<llvm::VectorType>(fty)) ity = llvm::VectorType::get(ity, v->getElementCount());
    return ity;
  }

  // Whether float32 erf, exp, exp2, tanh and log are the polynomials here: their coefficients
  // were fitted for FMA rounding (without FMA, llvm.fma is a call to fmaf per element).
  bool float_poly_pays(Value* a) const { return a->getType()->isFloatTy() && LLVMJit::get().vector_unit().fma; }

  // float32 tanh in float lanes (t fitted by scripts/fit_float_math.py, which checks every
  // result within one unit of the correctly rounded value): x + x^3 t(x^2) below 1, else
  // 1 - 2 / (exp(2|x|) + 1) with exp_f32's reduction and polynomial (NaN takes the small
  // branch), the sign copied. tanhf is a scalar call, and tanh through double exp took 2.6 ms over 2^21
  // floats (PyTorch 0.8).
  Value* tanh_f32(Value* a) {
    static const float kTanhSmall[] = {-3.138714e-04f, 2.135124e-03f,   -7.699351e-03f, 2.1301879e-02f,
                                       -5.3807173e-02f, 1.3330951e-01f, -3.3333197e-01f};
    llvm::Type* fty = a->getType();
    auto c = [&](float v) { return llvm::ConstantFP::get(fty, double(v)); };
    Value* ax = call(llvm::Intrinsic::fabs, a);
    Value* z = b_.CreateFMul(ax, ax);
    Value* small = fma_f(b_.CreateFMul(z, ax), horner_fma(z, kTanhSmall), ax);
    // exp(2|x|) as exp_f32 for 2|x| in [0, 20] (from 20 the result rounds to 1): 2^n one normal
    // factor, no clamp below, and minnum makes a NaN 20 (no poison n), its result then being
    // `small`'s NaN; 8 of about 50 vector instructions less
    auto [n, r] = exp_reduce(call2(llvm::Intrinsic::minnum, b_.CreateFAdd(ax, ax), c(20.0f)));
    Value* e = b_.CreateFMul(exp_poly(r), pow2(b_.CreateFPToSI(n, int_lanes(fty))));
    Value* large = b_.CreateFSub(c(1.0f), b_.CreateFDiv(c(2.0f), b_.CreateFAdd(e, c(1.0f))));
    return call2(llvm::Intrinsic::copysign, b_.CreateSelect(b_.CreateFCmpULT(ax, c(1.0f)), small, large), a);
  }

  // float32 log in float lanes (l fitted by scripts/fit_float_math.py, which checks every
  // result within one unit of the correctly rounded value): x = 2^e m with m in [sqrt(1/2),
  // sqrt(2)), taken from the bits (subtracting sqrt(1/2)'s bits carries into the exponent where
  // the mantissa passes it; subnormals scaled by 2^23 first), then e ln 2 + (f + f^2 l(f)) with
  // f = m - 1, exact. 0 gives -inf, +inf itself, negatives and NaN NaN. LLVM's log was
  // libmvec's 8-wide call: 0.8-1.0 ms over 2^21 floats, PyTorch 0.5.
  Value* log_f32(Value* a) {
    static const float kLog[] = {-7.473268e-02f, 1.2819615e-01f,  -1.3262025e-01f, 1.4196675e-01f, -1.6608591e-01f,
                                 2.0001175e-01f,  -2.5001577e-01f, 3.3333337e-01f,  -4.9999988e-01f};
    constexpr int32_t kSqrtHalfBits = 0x3f3504f3;
    llvm::Type* fty = a->getType();
    llvm::Type* ity = int_lanes(fty);
    auto c = [&](float v) { return llvm::ConstantFP::get(fty, double(v)); };
    auto i = [&](int32_t v) { return llvm::ConstantInt::get(ity, uint64_t(uint32_t(v))); };
    Value* sub = b_.CreateFCmpOLT(a, c(0x1p-126f));
    Value* bits = b_.CreateBitCast(b_.CreateSelect(sub, b_.CreateFMul(a, c(0x1p23f)), a), ity);
    Value* t = b_.CreateSub(bits, i(kSqrtHalfBits));
    Value* e = b_.CreateSub(b_.CreateAShr(t, i(23)), b_.CreateSelect(sub, i(23), i(0)));
    Value* m = b_.CreateBitCast(b_.CreateAdd(b_.CreateAnd(t, i(0x7fffff)), i(kSqrtHalfBits)), fty);
    Value* f = b_.CreateFSub(m, c(1.0f));
    Value* y = fma_f(b_.CreateFMul(f, f), horner_fma(f, kLog), f);
    Value* ef = b_.CreateSIToFP(e, fty);
    Value* r = fma_f(ef, c(kLn2), fma_f(ef, c(kLn2Rest), y));
    r = b_.CreateSelect(b_.CreateFCmpOEQ(a, c(INFINITY)), a, r);
    r = b_.CreateSelect(b_.CreateFCmpOEQ(a, c(0.0f)), c(-INFINITY), r);
    return b_.CreateSelect(b_.CreateFCmpULT(a, c(0.0f)), llvm::ConstantFP::getNaN(fty), r);  // and NaN
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

  // PyTorch's calc_erfinv, in the register type: a rational first guess
  // (central range |y| <= 0.7, else a tail formula), then two Newton steps.
  Value* erfinv(Value* y) {
    llvm::Type* ty = y->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(ty, v); };
    Value* ya = call(llvm::Intrinsic::fabs, y);
    Value* z = b_.CreateFMul(y, y);
    Value* num = horner(z, {-0.140543331, 0.914624893, -1.645349621, 0.886226899});
    Value* dem = horner(z, {0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0});
    Value* central = b_.CreateFDiv(b_.CreateFMul(y, num), dem);
    Value* t = call(llvm::Intrinsic::sqrt,
                    b_.CreateFNeg(call(llvm::Intrinsic::log, b_.CreateFDiv(b_.CreateFSub(c(1.0), ya), c(2.0)))));
    Value* tnum = horner(t, {1.641345311, 3.429567803, -1.624906493, -1.970840454});
    Value* tdem = horner(t, {1.637067800, 3.543889200, 1.0});
    Value* tail = b_.CreateFDiv(call2(llvm::Intrinsic::copysign, tnum, y), tdem);
    Value* x = b_.CreateSelect(b_.CreateFCmpOLE(ya, c(0.7)), central, tail);
    // 2/sqrt(pi) rounded to the type, as PyTorch's T(2.0) / T(sqrt(pi))
    Value* k = b_.CreateFDiv(c(2.0), c(1.7724538509055160273));
    for (int i = 0; i < 2; i++) {
      Value* e = b_.CreateFSub(libm("erf", x), y);
      Value* d = b_.CreateFMul(k, call(llvm::Intrinsic::exp, b_.CreateFMul(b_.CreateFNeg(x), x)));
      x = b_.CreateFSub(x, b_.CreateFDiv(e, d));
    }
    x = b_.CreateSelect(b_.CreateFCmpOEQ(ya, c(1.0)), call2(llvm::Intrinsic::copysign, llvm::ConstantFP::getInfinity(ty), y), x);
    return b_.CreateSelect(b_.CreateFCmpOGT(ya, c(1.0)), llvm::ConstantFP::getNaN(ty), x);
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
      case Op::Exp: return fp(float_poly_pays(a) ? exp_f32(a) : call(llvm::Intrinsic::exp, a));
      case Op::Log: return fp(float_poly_pays(a) ? log_f32(a) : call(llvm::Intrinsic::log, a));
      case Op::Sin: return fp(call(llvm::Intrinsic::sin, a));
      case Op::Cos: return fp(call(llvm::Intrinsic::cos, a));
      case Op::Sqrt: return fp(call(llvm::Intrinsic::sqrt, a));
      case Op::Trunc: return f ? call(llvm::Intrinsic::trunc, a) : a;
      case Op::Floor: return f ? call(llvm::Intrinsic::floor, a) : a;
      case Op::Ceil: return f ? call(llvm::Intrinsic::ceil, a) : a;
      case Op::Round: return f ? call(llvm::Intrinsic::roundeven, a) : a;
      case Op::Recip: return fp(b_.CreateFDiv(llvm::ConstantFP::get(a->getType(), 1.0), a));
      case Op::Tan: return fp(libm("tan", a));
      case Op::Erf: return fp(float_poly_pays(a) ? erf_f32(a) : libm("erf", a));
      case Op::Tanh: return fp(float_poly_pays(a) ? tanh_f32(a) : libm("tanh", a));
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
      case Op::Erfinv: return fp(erfinv(a));
      case Op::Erfc: return fp(libm("erfc", a));
      case Op::Exp2: return fp(float_poly_pays(a) ? exp2_f32(a) : call(llvm::Intrinsic::exp2, a));
      case Op::Log2: return fp(call(llvm::Intrinsic::log2, a));
      case Op::Log10: return fp(call(llvm::Intrinsic::log10, a));
      case Op::Lgamma: return fp(libm("lgamma", a));
      case Op::Sigmoid: {  // 1 / (1 + exp(-x)) in the register type, rounded once (as every op)
        llvm::Constant* one = llvm::ConstantFP::get(a->getType(), 1.0);
        Value* na = b_.CreateFNeg(a);
        Value* e = float_poly_pays(na) ? exp_f32(na) : call(llvm::Intrinsic::exp, na);
        return fp(b_.CreateFDiv(one, b_.CreateFAdd(one, e)));
      }
      case Op::Sign: {
        if (!f) {
          if (in == DType::Bool) return a;
          Value* z = llvm::ConstantInt::get(a->getType(), 0);
          Value* pos = b_.CreateZExt(is_signed(in) ? b_.CreateICmpSGT(a, z) : b_.CreateICmpUGT(a, z), a->getType());
          Value* neg = is_signed(in) ? b_.CreateZExt(b_.CreateICmpSLT(a, z), a->getType()) : z;
          return b_.CreateSub(pos, neg);
        }
        // (x > 0) - (x < 0): NaN gives 0, as torch.sign
        Value* z = llvm::ConstantFP::get(a->getType(), 0.0);
        Value* pos = b_.CreateUIToFP(b_.CreateFCmpOGT(a, z), a->getType());
        Value* neg = b_.CreateUIToFP(b_.CreateFCmpOLT(a, z), a->getType());
        return b_.CreateFSub(pos, neg);
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
      case Op::Mul: {
        if (!f) return dt == DType::Bool ? b_.CreateAnd(a, c) : b_.CreateMul(a, c);
        // contract only pairs with a reduce's accumulation (whose add allows it too)
        auto* m = llvm::cast<llvm::Instruction>(b_.CreateFMul(a, c));
        m->setHasAllowContract(true);
        return fp(m);
      }
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
          // Python semantics: floor((a - fmod(a, b)) / b), as PyTorch's
          // div_floor_floating, which for 16-bit floats rounds every step
          Value* m = fp(b_.CreateFRem(a, c));
          Value* d = fp(b_.CreateFDiv(fp(b_.CreateFSub(a, m)), c));
          Value* zf = llvm::ConstantFP::get(ty, 0.0);
          Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(m, zf),
                                       b_.CreateXor(b_.CreateFCmpOLT(c, zf), b_.CreateFCmpOLT(m, zf)));
          d = b_.CreateSelect(adjust, fp(b_.CreateFSub(d, llvm::ConstantFP::get(ty, 1.0))), d);
          Value* fl = call(llvm::Intrinsic::floor, d);
          Value* fixed = b_.CreateSelect(b_.CreateFCmpOGT(fp(b_.CreateFSub(d, fl)), llvm::ConstantFP::get(ty, 0.5)),
                                         fp(b_.CreateFAdd(fl, llvm::ConstantFP::get(ty, 1.0))), fl);
          Value* quotient = fp(b_.CreateFDiv(a, c));
          Value* res = b_.CreateSelect(b_.CreateFCmpUNE(d, zf), fixed, call2(llvm::Intrinsic::copysign, zf, quotient));
          // b == 0 -> a / b (inf or nan)
          return b_.CreateSelect(b_.CreateFCmpOEQ(c, zf), quotient, res);
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
  // Word `w` (0 or 1) of launch node `n`'s two in the parameter array
  // (launch_nodes() order), loaded once at the function's entry.
  // Each is loaded and converted once: a fused optimizer step reads its learning rate in every
  // output's epilogue, and hundreds of copies of the load only cost the optimizer time to merge.
  Value* launch_word(const Node* n, int w) {
    Value*& word = launch_words_[{n, w}];
    if (word) return word;
    auto nodes = k_.launch_nodes();
    int64_t slot = std::find(nodes.begin(), nodes.end(), n) - nodes.begin();
    llvm::IRBuilder<> eb(entry_, std::next(llvm::BasicBlock::iterator(llvm::cast<llvm::Instruction>(params_))));
    return word = eb.CreateLoad(b_.getInt64Ty(), eb.CreateConstGEP1_64(b_.getInt64Ty(), params_, uint64_t(2 * slot + w)));
  }

  // A Param's value: exactly representable in its dtype (Tensor::param casts
  // it), so converting the double is exact. Converted in the entry block, after its word.
  Value* param(const Node* n) {
    Value*& value = param_values_[n];
    if (value) return value;
    Value* bits = launch_word(n, 0);
    llvm::IRBuilder<> eb(entry_, std::next(llvm::BasicBlock::iterator(llvm::cast<llvm::Instruction>(bits))));
    llvm::Type* ty = reg_type(n->dtype);
    if (ty->isFloatingPointTy()) return value = eb.CreateFPTrunc(eb.CreateBitCast(bits, b_.getDoubleTy()), ty);
    if (n->dtype == DType::Bool) return value = eb.CreateICmpNE(bits, b_.getInt64(0));
    return value = eb.CreateTrunc(bits, ty);
  }

  Value* rand(const Node* n, const std::vector<Expr>& idx) {
    Value* i = index(row_major(idx, n->shape));
    // (seed, offset) come from the parameter array
    Value* seed = launch_word(n, 0);
    Value* offset = launch_word(n, 1);
    Value* ctr = b_.CreateAdd(i, offset);
    auto* i32 = b_.getInt32Ty();
    auto* i64 = b_.getInt64Ty();
    Value* c0 = b_.CreateTrunc(ctr, i32);
    Value* c1 = b_.CreateTrunc(b_.CreateLShr(ctr, 32), i32);
    Value* c2 = b_.getInt32(0);
    Value* c3 = b_.getInt32(0);
    Value* k0 = b_.CreateTrunc(seed, i32);
    Value* k1 = b_.CreateTrunc(b_.CreateLShr(seed, 32), i32);
    for (int round = 0; round < 10; round++) {
      Value* p0 = b_.CreateMul(b_.CreateZExt(c0, i64), b_.getInt64(0xD2511F53u));
      Value* p1 = b_.CreateMul(b_.CreateZExt(c2, i64), b_.getInt64(0xCD9E8D57u));
      Value* hi0 = b_.CreateTrunc(b_.CreateLShr(p0, 32), i32);
      Value* lo0 = b_.CreateTrunc(p0, i32);
      Value* hi1 = b_.CreateTrunc(b_.CreateLShr(p1, 32), i32);
      Value* lo1 = b_.CreateTrunc(p1, i32);
      Value* n0 = b_.CreateXor(b_.CreateXor(hi1, c1), k0);
      Value* n2 = b_.CreateXor(b_.CreateXor(hi0, c3), k1);
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 = b_.CreateAdd(k0, b_.getInt32(0x9E3779B9u));
      k1 = b_.CreateAdd(k1, b_.getInt32(0xBB67AE85u));
    }
    Value* bits = b_.CreateLShr(c0, 8);
    return b_.CreateFMul(b_.CreateUIToFP(bits, b_.getFloatTy()), llvm::ConstantFP::get(b_.getFloatTy(), 1.0 / 16777216.0));
  }

  const Kernel& k_;
  const CpuPlan& plan_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  std::string fn_name_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::map<std::pair<const Node*, int>, Value*> launch_words_;  // loaded in the entry block
  std::unordered_map<const Node*, Value*> param_values_;         // and converted there
  std::vector<Value*> buf_ptrs_;
  std::vector<Value*> vars_;
  std::vector<std::unordered_map<std::string, Value*>> memo_;
  const SplitPlan* split_ = nullptr;
  Part part_ = Part::Whole;
  Value* scratch_ = nullptr;
  Value* params_ = nullptr;
  std::vector<std::vector<llvm::BasicBlock*>> epilogues_;  // epilogue loops to outline (see outline)
  // where a row tile's accumulators wait for its epilogue (ChannelTile::epilogue_per_row_tile)
  struct RowTileBuffer {
    Value* buffer;         // floats, the row tile's rows `pitch` apart
    Value* pitch;          // the thread's whole column tiles' channels
    Value* first_channel;  // the channel at the start of each row
  };
  std::optional<RowTileBuffer> row_tile_;
  // where a column tile's accumulators, turned around, wait for its epilogue down all the rows
  // (see rows_by_column): channel c's rows from `buffer` + c * `pitch`
  struct ColumnStrip {
    Value* buffer;
    int64_t pitch;  // the rows
  };
  std::optional<ColumnStrip> column_strip_;
  // channel tiling's packed operand (see ChannelTile)
  Value* pack_buf_ = nullptr;
  Value* a_rows_ = nullptr;       // a channel tile's `a` packed per (row, step) (pack_a), or null
  int64_t a_pitch_ = 0;           // ... its rows this many floats apart
  bool a_step_major_ = false;     // ... or step by step, each step's rows consecutive
  Value* a_rows_count_ = nullptr; // ... that many of them
  Value* a_first_row_ = nullptr;  // the row its first values belong to
};

using KernelFn = void (*)(void**, int64_t, int64_t);

class LLVMProgram final : public Program {
 public:
  LLVMProgram(KernelFn fn, KernelFn finish) : fn_(fn), finish_(finish) {}
  void run(void** buffers, int64_t begin, int64_t end) const override { fn_(buffers, begin, end); }
  void finish(void** buffers) const override {
    if (finish_) finish_(buffers, 0, 1);
  }

 private:
  KernelFn fn_, finish_;
};

std::string function_name(const Kernel& k) {
  std::ostringstream os;
  os << k.name() << "_" << std::hex << std::hash<std::string>()(k.key());
  return os.str();
}

std::unique_ptr<llvm::Module> build_module(const Kernel& k, const CpuPlan& plan, llvm::LLVMContext& ctx,
                                           const std::string& fn, bool* packs_a = nullptr) {
  auto m = std::make_unique<llvm::Module>("kernel", ctx);
  LLVMJit::get().configure(*m);
  if (plan.split) {
    Builder(k, plan, ctx, *m, fn, Builder::Part::SplitPartials).build();
    Builder(k, plan, ctx, *m, fn + "_finish", Builder::Part::SplitFinish).build();
  } else {
    Builder whole(k, plan, ctx, *m, fn);
    whole.build();
    if (packs_a) *packs_a = whole.packs_a;
  }
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
  auto m = build_module(k, lower_cpu(k, cpu_target()), ctx, function_name(k));
  std::string ir;
  llvm::raw_string_ostream os(ir);
  m->print(os, nullptr);
  return os.str();
}

std::unique_ptr<Program> compile_llvm(const Kernel& k) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  // The optimizer's remarks and warnings (a loop the code generator asked to vectorize that it
  // could not) are missed optimizations, not the user's concern: printed, they reached the
  // stderr of a script convolving a 2x2 map. Errors still print.
  ctx->setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo& d, void*) {
        if (d.getSeverity() != llvm::DS_Error) return;
        llvm::DiagnosticPrinterRawOStream printer(llvm::errs());
        d.print(printer);
        llvm::errs() << "\n";
      },
      nullptr);
  std::string fn = function_name(k);
  const CpuPlan plan = lower_cpu(k, cpu_target());
  const auto& split = plan.split;
  bool packs_a = false;
  auto m = build_module(k, plan, *ctx, fn, &packs_a);
  if (debug_level() >= 3) std::fprintf(stderr, "tiny: plan    %-28s %s\n", k.name().c_str(), describe(plan).c_str());
  std::vector<std::string> names{fn};
  if (split) names.push_back(fn + "_finish");
  auto addrs = LLVMJit::get().compile(std::move(m), std::move(ctx), names);
  auto p = std::make_unique<LLVMProgram>(reinterpret_cast<KernelFn>(addrs[0]),
                                         split ? reinterpret_cast<KernelFn>(addrs[1]) : nullptr);
  p->name = k.name();
  if (split) {
    p->parallel_size = split->chunks;
    p->work_per_item = std::max<int64_t>(1, split->reduce->src[0]->numel() / split->chunks);
    p->scratch_bytes = size_t(split->chunks) * 8;
    p->scratch_index = k.buffers.size() + 1;  // after the buffers and the parameter array
    return p;
  }
  const int par = plan.parallel_dim;
  p->parallel_size = par < 0 ? 1 : k.shape[size_t(par)];
  p->parallel_grain = plan.parallel_grain;
  int64_t per = std::max<int64_t>(1, numel(k.shape) / std::max<int64_t>(1, p->parallel_size));
  int64_t flops = k.flops();
  p->work_per_item = std::max<int64_t>(per, flops / std::max<int64_t>(1, p->parallel_size));
  // (a reduce hoisted above the parallel loop would be computed once per slice)
  // (not where every slice packs `a` for all rows: a LayerNorm feeding a linear layer was
  // evaluated 8 times instead of twice, 3.4 -> 3.0 ms at 1024 x 512 x 512)
  p->fine_slices = plan.channel ? plan.channel->j == par && !plan.blocks && !packs_a
                                 : !any_node(k, [](const Node* n) { return n->op == Op::Reduce; });
  return p;
}

}  // namespace tiny
