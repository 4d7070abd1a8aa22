// The host CPU lowering (codegen/codegen.h: lower_host): one call of the generated function
// runs one program instance. Scalars are LLVM values; each block tensor gets a slot in the
// scratch buffer and each op on tensors becomes a loop (nest) over its elements. Narrow floats
// (f16, bf16, f8) are held as f32 in registers and scratch, rounded to their format after every
// op, and converted at loads and stores, so results match a device that computes in the narrow
// format. The class here (the values, scratch slots, loops and elementwise ops); its memory ops
// in memory.cpp; reductions, dots and control flow in compute.cpp.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "ir/numeric.h"
#include "ir/profile.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

#pragma GCC visibility push(hidden)
namespace tiledist::codegen::host {

/// How an IR value lives in generated code: a scalar is an LLVM value; a tensor is the
/// address of its elements in scratch.
struct CVal {
  llvm::Value* scalar = nullptr;
  llvm::Value* buf = nullptr;
};

class HostLowering : public Elements {
 public:
  HostLowering(const ir::Function& f, llvm::LLVMContext& ctx, const HostOptions& opts)
      : HostLowering(f, ctx, opts, std::make_unique<llvm::Module>(f.name, ctx)) {}

  HostModule run() {
    auto* ptr = b_.getPtrTy();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, ptr}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f_.name, module_.get());
    fn_->addParamAttr(3, llvm::Attribute::NoAlias);
    for (int i = 0; i < 5; ++i) fn_->addParamAttr(i, llvm::Attribute::NoUndef);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    args_ = fn_->getArg(0);
    pid_ = fn_->getArg(1);
    nprog_ = fn_->getArg(2);
    scratch_ = fn_->getArg(3);
    rt_ = fn_->getArg(4);
    profile_regions_ = ir::profile_regions(f_);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    for (auto& a : f_.body.args) {
      llvm::Value* slot = b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, args_, a->index), "arg.slot");
      vals_[a.get()] = CVal{b_.CreateLoad(reg_type(a->type), slot, a->name), nullptr};
    }
    emit_block(f_.body);
    verify_lowered("host");
    return HostModule{std::move(module_), f_.name, scratch_size_, distributed_};
  }

 private:
  llvm::Value* to_buf(llvm::Value* v, const ir::Type& t) {
    return !t.is_ptr && t.dtype == DType::i1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
  }
  llvm::Value* from_buf(llvm::Value* v, const ir::Type& t) {
    return !t.is_ptr && t.dtype == DType::i1 ? b_.CreateTrunc(v, b_.getInt1Ty()) : v;
  }

  // ---- scratch buffers and loops
  /// A slot in scratch for a tensor: the smallest free one that fits, else a new one. Slots
  /// are given back when the value that owns them is dead (see emit_block), so scratch grows
  /// with the live tensors, not with all of them.
  llvm::Value* alloc_buf(const ir::Type& t) {
    int64_t bytes = t.numel() * static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(buf_type(t)));
    if (bytes == 0) bytes = t.numel() * 8;
    bytes = (bytes + 63) / 64 * 64;
    int64_t off;
    auto it = free_slots_.lower_bound(bytes);
    if (it != free_slots_.end()) {
      bytes = it->first;
      off = it->second;
      free_slots_.erase(it);
    } else {
      off = scratch_size_;
      scratch_size_ += bytes;
    }
    llvm::Value* p = b_.CreateConstGEP1_64(b_.getInt8Ty(), scratch_, off);
    slot_of_[p] = {bytes, off};
    return p;
  }
  void release_buf(llvm::Value* p) {
    auto it = slot_of_.find(p);
    if (it == slot_of_.end()) return;
    free_slots_.emplace(it->second.first, it->second.second);
    slot_of_.erase(it);
  }
  llvm::Value* buf_load(llvm::Value* buf, const ir::Type& t, llvm::Value* i) {
    llvm::Type* et = buf_type(t);
    return from_buf(b_.CreateLoad(et, b_.CreateGEP(et, buf, i)), t);
  }
  void buf_store(llvm::Value* buf, const ir::Type& t, llvm::Value* i, llvm::Value* v) {
    llvm::Type* et = buf_type(t);
    b_.CreateStore(to_buf(v, t), b_.CreateGEP(et, buf, i));
  }
  void copy_buf(llvm::Value* dst, llvm::Value* src, const ir::Type& t) {
    if (dst == src) return;
    int64_t bytes = t.numel() * static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(buf_type(t)));
    b_.CreateMemCpy(dst, llvm::MaybeAlign(16), src, llvm::MaybeAlign(16), bytes);
  }

  /// for (i = 0; i < n; ++i) body(i), with i an i64.
  void loop(int64_t n, const std::function<void(llvm::Value*)>& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.end", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
    i->addIncoming(b_.getInt64(0), pre);
    body(i);
    llvm::Value* next = b_.CreateAdd(i, b_.getInt64(1), "", true, true);
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, b_.getInt64(n)), header, exit);
    b_.SetInsertPoint(exit);
  }
  /// A loop nest over `shape`; body gets one index per dimension.
  void nest(const std::vector<int64_t>& shape, const std::function<void(const std::vector<llvm::Value*>&)>& body,
            std::vector<llvm::Value*> idx = {}) {
    if (idx.size() == shape.size()) return body(idx);
    loop(shape[idx.size()], [&](llvm::Value* i) {
      auto next = idx;
      next.push_back(i);
      nest(shape, body, next);
    });
  }
  llvm::Value* linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& strides) {
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d < idx.size(); ++d)
      if (strides[d] != 0) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt64(strides[d])));
    return off;
  }
  static std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size(), 1);
    for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
    return s;
  }

  // ---- ops
  CVal& val(const ir::Value* v) {
    auto it = vals_.find(v);
    TD_ASSERT(it != vals_.end(), "value used before lowering");
    return it->second;
  }
  llvm::Value* element(const ir::Value* v, llvm::Value* i) {
    const CVal& c = val(v);
    return c.buf ? buf_load(c.buf, v->type, i) : c.scalar;
  }

  /// The value whose buffer `v` shares (hint, consume_token and convert_layout pass their
  /// operand through).
  static bool alias_op(OpCode c) {
    return c == OpCode::Hint || c == OpCode::ConsumeToken || c == OpCode::ConvertLayout;
  }
  static const ir::Value* owner(const ir::Value* v) {
    while (v->def && alias_op(v->def->code)) v = v->def->operands[0];
    return v;
  }
  /// Values of `block` whose buffers can be given back after op i: their last use (in the op or
  /// its regions) is op i. Values the terminator uses, and while results (they live in the
  /// loop's own buffers), are never given back.
  std::vector<std::vector<const ir::Value*>> deaths(const ir::Block& block) {
    std::map<const ir::Value*, size_t> last;
    std::map<const ir::Value*, size_t> defined;  // value -> the order it was defined in
    std::set<const ir::Value*> kept;
    size_t i = 0;
    std::function<void(const ir::Op&, size_t)> note_uses = [&](const ir::Op& op, size_t at) {
      for (const ir::Value* v : op.operands) last[owner(v)] = at;
      for (auto& r : op.regions)
        for (auto& inner : r->ops) note_uses(*inner, at);
    };
    for (auto& op : block.ops) {
      note_uses(*op, i);
      bool term = (op->info().flags & ir::TERM) != 0;
      if (term)
        for (const ir::Value* v : op->operands) kept.insert(owner(v));
      // Aliases (hint, consume_token) own nothing: their uses count for the value they alias.
      bool alias = alias_op(op->code);
      if (op->code != OpCode::While && !alias)
        for (auto& r : op->results)
          defined.emplace(r.get(), defined.size()), last.emplace(r.get(), i);  // unused: dies at once
      ++i;
    }
    std::vector<std::vector<const ir::Value*>> out(block.ops.size());
    for (auto& [v, at] : last)
      if (defined.count(v) && !kept.count(v)) out[at].push_back(v);
    // In the order they were defined, not by address: buffers given back in the same order every
    // compile are reused alike (the same code from the same IR, compile after compile).
    for (auto& dying : out)
      std::sort(dying.begin(), dying.end(),
                [&](const ir::Value* a, const ir::Value* b) { return defined.at(a) < defined.at(b); });
    return out;
  }

  void emit_block(const ir::Block& block) {
    auto dead = deaths(block);
    size_t i = 0;
    for (auto& op : block.ops) {
      emit(*op);
      for (const ir::Value* v : dead[i]) {
        auto it = vals_.find(v);
        if (it != vals_.end() && it->second.buf) release_buf(it->second.buf);
      }
      ++i;
    }
  }

  void emit(const ir::Op& op) {
    const ir::Type* rt = op.results.empty() ? nullptr : &op.results[0]->type;
    auto define_tensor = [&](const std::function<void(llvm::Value * buf)>& fill) {
      llvm::Value* buf = alloc_buf(*rt);
      fill(buf);
      vals_[op.results[0].get()] = CVal{nullptr, buf};
    };
    switch (op.code) {
      case OpCode::Constant:
        vals_[op.results[0].get()] = CVal{constant_of(op), nullptr};
        return;
      case OpCode::ProgramId:
      case OpCode::NumPrograms: {
        llvm::Value* base = op.code == OpCode::ProgramId ? pid_ : nprog_;
        llvm::Value* v =
            b_.CreateLoad(b_.getInt32Ty(), b_.CreateConstGEP1_64(b_.getInt32Ty(), base, op.int_attr("axis")));
        vals_[op.results[0].get()] = CVal{v, nullptr};
        return;
      }
      case OpCode::Arange:
        return define_tensor([&](llvm::Value* buf) {
          int64_t start = op.int_attr("start");
          loop(rt->numel(), [&](llvm::Value* i) {
            buf_store(buf, *rt, i, b_.CreateTrunc(b_.CreateAdd(i, b_.getInt64(start)), b_.getInt32Ty()));
          });
        });
      case OpCode::Splat:
        return define_tensor([&](llvm::Value* buf) {
          llvm::Value* s = val(op.operands[0]).scalar;
          loop(rt->numel(), [&](llvm::Value* i) { buf_store(buf, *rt, i, s); });
        });
      case OpCode::Reshape:
      case OpCode::ExpandDims:
        return define_tensor([&](llvm::Value* buf) { copy_buf(buf, val(op.operands[0]).buf, *rt); });
      case OpCode::Broadcast:
      case OpCode::Trans: {
        const ir::Type& in = op.operands[0]->type;
        auto in_strides = strides_of(in.shape);
        std::vector<int64_t> s(rt->shape.size());
        for (size_t d = 0; d < s.size(); ++d) {
          if (op.code == OpCode::Trans)
            s[d] = in_strides[op.ints_attr("perm")[d]];
          else
            s[d] = in.shape[d] == 1 && rt->shape[d] != 1 ? 0 : in_strides[d];
        }
        auto out_strides = strides_of(rt->shape);
        return define_tensor([&](llvm::Value* buf) {
          llvm::Value* src = val(op.operands[0]).buf;
          nest(rt->shape, [&](const std::vector<llvm::Value*>& idx) {
            buf_store(buf, *rt, linear(idx, out_strides), buf_load(src, in, linear(idx, s)));
          });
        });
      }
      case OpCode::Load:
        return emit_load(op);
      case OpCode::Store:
        return emit_store(op);
      case OpCode::Prefetch:  // (the host has no L2 to fill ahead)
        return;
      case OpCode::AtomicRMW:
      case OpCode::AtomicCAS:
        return emit_atomic(op);
      case OpCode::Rank:
      case OpCode::NumRanks: {
        distributed_ = true;
        auto f =
            helper(op.code == OpCode::Rank ? "tiledist_rank" : "tiledist_num_ranks", b_.getInt32Ty(), {b_.getPtrTy()});
        vals_[op.results[0].get()] = CVal{b_.CreateCall(f, {rt_}), nullptr};
        return;
      }
      case OpCode::SymmAt: {
        distributed_ = true;
        auto f = helper("tiledist_symm_at", b_.getPtrTy(), {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty()});
        llvm::Value* r = b_.CreateSExt(val(op.operands[1]).scalar, b_.getInt64Ty());
        if (!rt->is_tensor()) {
          vals_[op.results[0].get()] = CVal{b_.CreateCall(f, {rt_, val(op.operands[0]).scalar, r}), nullptr};
          return;
        }
        return define_tensor([&](llvm::Value* buf) {
          loop(rt->numel(),
               [&](llvm::Value* i) { buf_store(buf, *rt, i, b_.CreateCall(f, {rt_, element(op.operands[0], i), r})); });
        });
      }
      case OpCode::Wait: {
        distributed_ = true;
        const ir::Type& pt = op.operands[0]->type;
        // (the runtime's helper numbers the comparisons eq, ne, lt, le, gt, ge, as CmpPred does)
        const int cmp = static_cast<int>(ir::enum_attr<ir::CmpPred>(op, "cmp"));
        auto f = helper("tiledist_wait", b_.getInt64Ty(),
                        {b_.getPtrTy(), b_.getPtrTy(), b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty(),
                         b_.getInt64Ty(), b_.getInt32Ty()});
        auto wait = [&](llvm::Value* p, llvm::Value* want) {
          return b_.CreateCall(f, {rt_, p, b_.getInt32(ir::dtype_bytes(pt.dtype)), val(op.operands[1]).scalar,
                                   b_.getInt32(cmp), b_.CreateSExt(want, b_.getInt64Ty()),
                                   b_.getInt32(ir::enum_attr<ir::MemOrder>(op, "order") == ir::MemOrder::acquire)});
        };
        if (pt.is_tensor()) {  // (a block of pointers: each in turn; the token 0)
          loop(pt.numel(), [&](llvm::Value* i) { wait(element(op.operands[0], i), element(op.operands[2], i)); });
          vals_[op.results[0].get()] = CVal{llvm::Constant::getNullValue(reg_type(*rt)), nullptr};
          return;
        }
        llvm::Value* got = wait(val(op.operands[0]).scalar, val(op.operands[2]).scalar);
        vals_[op.results[0].get()] = CVal{b_.CreateTrunc(got, reg_type(*rt)), nullptr};
        return;
      }
      case OpCode::ConsumeToken:
        // The wait that made the token is an opaque call: nothing after it moves above it.
        vals_[op.results[0].get()] = val(op.operands[0]);
        return;
      case OpCode::Memcpy: {
        distributed_ = true;
        auto f =
            helper("tiledist_memcpy", b_.getVoidTy(), {b_.getPtrTy(), b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty()});
        b_.CreateCall(f, {rt_, val(op.operands[0]).scalar, val(op.operands[1]).scalar,
                          b_.CreateSExt(val(op.operands[2]).scalar, b_.getInt64Ty())});
        return;
      }
      case OpCode::Fence:
        b_.CreateFence(ordering(ir::enum_attr<ir::MemOrder>(op, "order")));
        return;
      case OpCode::Barrier:
        distributed_ = true;
        b_.CreateCall(helper("tiledist_barrier", b_.getVoidTy(), {b_.getPtrTy()}), {rt_});
        return;
      case OpCode::Profile: {
        auto* i32 = b_.getInt32Ty();
        auto f = helper("tiledist_profile", b_.getVoidTy(), {b_.getPtrTy(), i32, i32, i32, i32, i32});
        llvm::Value* a[2] = {b_.getInt32(0), b_.getInt32(0)};
        for (size_t i = 0; i < op.operands.size(); ++i) a[i] = val(op.operands[i]).scalar;
        b_.CreateCall(f, {rt_, b_.getInt32(ir::profile_region_index(profile_regions_, op)),
                          b_.getInt32(static_cast<int>(ir::enum_attr<ir::ProfilePhase>(op, "phase"))),
                          b_.getInt32(static_cast<int>(op.operands.size())), a[0], a[1]});
        return;
      }
      case OpCode::Reduce:
        return emit_reduce(op);
      case OpCode::Dot:
        return emit_dot(op);
      case OpCode::For:
        return emit_for(op);
      case OpCode::If:
        return emit_if(op);
      case OpCode::While:
        return emit_while(op);
      case OpCode::Yield:
      case OpCode::Condition:
        return;  // handled by the parent op
      case OpCode::Return:
        b_.CreateRetVoid();
        return;
      // GPU IR (CompileOptions::gpu_passes): layouts are nothing here, copies land at once.
      case OpCode::ConvertLayout:
        vals_[op.results[0].get()] = val(op.operands[0]);  // (an alias: see owner())
        return;
      case OpCode::LocalAlloc:
        return define_tensor([](llvm::Value*) {});
      case OpCode::AsyncCopy:
        return emit_async_copy(op);
      case OpCode::AsyncTmaCopy:
        return emit_async_tma_copy(op);
      case OpCode::AsyncCommit:
      case OpCode::AsyncWait:
      case OpCode::InitBarrier:
      case OpCode::WaitBarrier:
      case OpCode::ArriveBarrier:
        return;  // (copies done at once: nothing to wait for)
      case OpCode::LocalLoad:
        return emit_local_load(op);
      case OpCode::WarpSpecialize:
        // (its producer would fill a ring ahead of consumers that do not run beside it)
        throw Error::at(op.name(), op.loc, "a warp-specialized kernel runs on sm_90a GPUs only, not on the CPU");
      default:
        break;
    }
    // Elementwise ops.
    if (!rt->is_tensor()) {
      std::vector<llvm::Value*> in;
      for (auto* v : op.operands) in.push_back(val(v).scalar);
      vals_[op.results[0].get()] = CVal{elementwise(op, in), nullptr};
      return;
    }
    if (op.code == OpCode::Hint) {
      vals_[op.results[0].get()] = val(op.operands[0]);
      return;
    }
    define_tensor([&](llvm::Value* buf) {
      loop(rt->numel(), [&](llvm::Value* i) {
        std::vector<llvm::Value*> in;
        for (auto* v : op.operands) in.push_back(element(v, i));
        buf_store(buf, *rt, i, elementwise(op, in));
      });
    });
  }

  /// Runs `access` when the mask (if any) holds and, in checked builds, the address is in
  /// bounds; returns the loaded value or `fallback`.
  llvm::Value* guarded(llvm::Value* mask, llvm::Value* addr, int64_t bytes, bool is_store, llvm::Type* result,
                       llvm::Value* fallback, const std::function<llvm::Value*()>& access);

  /// Element i of a masked load of `d` whose pointers, mask and other are op's operands from
  /// `first` on (load's from 0, async_copy's from 2): masked-off elements are `other`, or zero.
  llvm::Value* loaded_element(const ir::Op& op, size_t first, DType d, llvm::Value* i);

  void emit_load(const ir::Op& op);

  /// A tile of global memory into tile `index` of a memdesc, at once (masked-off elements:
  /// `other`, or zero).
  void emit_async_copy(const ir::Op& op);
  /// A box of a tensor map's tensor (support/tma.h) into tile `index`, at once: elements
  /// outside the tensor's extents read as zeros, as TMA's do.
  void emit_async_tma_copy(const ir::Op& op);
  /// Tile `index` of a memdesc as a tensor (perm [1, 0]: transposed).
  void emit_local_load(const ir::Op& op);

  void emit_store(const ir::Op& op);

  void emit_atomic(const ir::Op& op);

  void emit_reduce(const ir::Op& op);

  void emit_dot(const ir::Op& op);

  /// Copies the values a region yields into the loop's carried slots: scalars become phi
  /// inputs (returned), tensors are copied into their buffers (through temporaries when one
  /// carried buffer feeds another, e.g. a swap).
  std::vector<llvm::Value*> carry(const ir::Op& term, size_t skip, const std::vector<CVal>& slots) {
    std::vector<llvm::Value*> scalars(slots.size(), nullptr);
    std::vector<llvm::Value*> srcs(slots.size(), nullptr);
    for (size_t i = 0; i < slots.size(); ++i) {
      const ir::Value* v = term.operands[i + skip];
      if (slots[i].buf) {
        llvm::Value* src = val(v).buf;
        for (size_t j = 0; j < slots.size(); ++j)
          if (j != i && slots[j].buf == src) {
            llvm::Value* tmp = alloc_buf(v->type);
            copy_buf(tmp, src, v->type);
            src = tmp;
            break;
          }
        srcs[i] = src;
      } else {
        scalars[i] = val(v).scalar;
      }
    }
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].buf) copy_buf(slots[i].buf, srcs[i], term.operands[i + skip]->type);
    return scalars;
  }

  /// Slots for carried values: a phi for each scalar (created in `header`), a buffer for each
  /// tensor (initialized from `init`).
  std::vector<CVal> carried_slots(const std::vector<const ir::Value*>& init, const std::vector<ir::Type>& types,
                                  llvm::BasicBlock* header, llvm::BasicBlock* pre, std::vector<llvm::PHINode*>& phis) {
    std::vector<CVal> slots;
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i].is_tensor()) {
        llvm::Value* buf = alloc_buf(types[i]);
        copy_buf(buf, val(init[i]).buf, types[i]);
        slots.push_back(CVal{nullptr, buf});
        phis.push_back(nullptr);
      } else {
        llvm::IRBuilder<> hb(header);
        llvm::PHINode* phi = hb.CreatePHI(reg_type(types[i]), 2);
        phi->addIncoming(val(init[i]).scalar, pre);
        slots.push_back(CVal{phi, nullptr});
        phis.push_back(phi);
      }
    }
    return slots;
  }

  void emit_for(const ir::Op& op);

  void emit_if(const ir::Op& op);

  void emit_while(const ir::Op& op);

  HostLowering(const ir::Function& f, llvm::LLVMContext& ctx, const HostOptions& opts, std::unique_ptr<llvm::Module> m)
      : Elements(ctx, *m), f_(f), ctx_(ctx), opts_(opts), module_(std::move(m)) {}

  llvm::Value* math(OpCode code, llvm::Value* x) override {
    switch (code) {
      case OpCode::Exp:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
      case OpCode::Exp2:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp2, x);
      case OpCode::Log:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
      case OpCode::Log2:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log2, x);
      case OpCode::Sqrt:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
      case OpCode::Sin:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sin, x);
      case OpCode::Cos:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::cos, x);
      case OpCode::Floor:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
      case OpCode::Ceil:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
      case OpCode::Rsqrt:
        return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0),
                             b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
      default: {  // erf, from the C library
        llvm::Type* t = x->getType();
        return b_.CreateCall(helper(t->isDoubleTy() ? "erf" : "erff", t, {t}), {x});
      }
    }
  }
  llvm::Value* f8_to_bits(llvm::Value* v, DType d) override {
    const char* name = d == DType::f8e4m3 ? kHostHelperF32ToF8E4M3 : kHostHelperF32ToF8E5M2;
    return b_.CreateCall(helper(name, b_.getInt8Ty(), {b_.getFloatTy()}), {v});
  }
  llvm::Value* f8_from_bits(llvm::Value* v, DType d) override {
    const char* name = d == DType::f8e4m3 ? kHostHelperF8E4M3ToF32 : kHostHelperF8E5M2ToF32;
    return b_.CreateCall(helper(name, b_.getFloatTy(), {b_.getInt8Ty()}), {v});
  }

  const ir::Function& f_;
  llvm::LLVMContext& ctx_;
  HostOptions opts_;
  std::unique_ptr<llvm::Module> module_;
  llvm::Function* fn_ = nullptr;
  llvm::Value *args_ = nullptr, *pid_ = nullptr, *nprog_ = nullptr, *scratch_ = nullptr, *rt_ = nullptr;
  int64_t scratch_size_ = 0;
  std::multimap<int64_t, int64_t> free_slots_;                   // size -> offset
  std::map<llvm::Value*, std::pair<int64_t, int64_t>> slot_of_;  // buffer -> (size, offset)
  bool distributed_ = false;
  std::vector<std::string> profile_regions_;  // the profile ops' regions (ir/profile.h)
  std::map<const ir::Value*, CVal> vals_;
};

}  // namespace tiledist::codegen::host
#pragma GCC visibility pop
