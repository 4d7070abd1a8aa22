// The distributed ops in the GPU IR lowering (codegen/gpu_ir/lowering.h): rank, num_ranks,
// symm_at, wait, consume_token, memcpy, fence (and quiet) and the barrier of every program on
// every rank, their code world_ops.h's.
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

void LayoutLowering::emit_distributed(const ir::Op& op) {
  switch (op.code) {
    case OpCode::Rank:
      return define(op, LVal::of(rank()));
    case OpCode::NumRanks:
      return define(op, LVal::of(num_ranks()));
    case OpCode::ConsumeToken:  // (orders its pointer's uses after the token's wait: by data)
      return define(op, val(op.operands[0]));
    case OpCode::SymmAt: {
      llvm::Value* r = val(op.operands[1]).scalar;
      const LVal& p = val(op.operands[0]);
      if (!op.operands[0]->type.is_tensor()) return define(op, LVal::of(symm_at(r, p.scalar)(p.scalar)));
      auto at = symm_at(r, p.regs.at(0));
      LVal g;
      for (llvm::Value* x : p.regs) g.regs.push_back(at(x));
      return define(op, g);
    }
    case OpCode::Wait:
      return emit_wait(op);
    case OpCode::Fence: {
      const auto order = ir::enum_attr<ir::MemOrder>(op, "order");
      fence(order, ir::enum_attr<ir::MemScope>(op, "scope"));
      // shmem::fence and shmem::quiet (the DSL's only fences) on the NVSHMEM world are NVSHMEM's
      // too: ours orders the threads' own stores, nvshmem_fence orders the puts NVSHMEM made to
      // each peer, nvshmem_quiet completes them (beyond one host its proxy's).
      if (opts_.nvshmem) nvshmem_order(order == ir::MemOrder::seq_cst);
      return;
    }
    case OpCode::Memcpy: {
      if (producer_) unsupported(op, "memcpy by a warp-specialized producer");
      if (opts_.nvshmem && emit_nvshmem_memcpy(op)) return;
      llvm::Value* dst = global_ptr(val(op.operands[0]).scalar);
      llvm::Value* src = global_ptr(val(op.operands[1]).scalar);
      llvm::Value* n = b_.CreateSExtOrTrunc(val(op.operands[2]).scalar, b_.getInt64Ty());
      barrier();  // (the source is written)
      copy_by_threads(dst, src, n, threads_);
      barrier();  // (the copy is done before what follows: its signal)
      return;
    }
    case OpCode::Barrier:
      if (producer_) unsupported(op, "the barrier of every program in a warp-specialized producer");
      barrier();  // (the program's writes before thread 0's release)
      when(is_thread0(), [&] { device_barrier_by_thread0(); });
      barrier();
      return;
    default:
      TD_ASSERT(false, "not a distributed op");
  }
}

bool LayoutLowering::emit_nvshmem_memcpy(const ir::Op& op) {
  // A copy to (from) the heap of the peer that a symm_at names: NVSHMEM's put (get) of the
  // program's threads, given the symmetric address here and the peer. Local copies, and copies
  // between two peers' heaps (which NVSHMEM has no call for), go by the threads as elsewhere.
  // (NVSHMEM's block calls need every thread of the CTA: not in a warp-specialized kernel's
  // consumers' region, whose producer warps have left)
  if (consumers_) return false;
  const ir::Op* to = symm_at_of(op.operands[0]);
  const ir::Op* from = symm_at_of(op.operands[1]);
  if ((to == nullptr) == (from == nullptr)) return false;
  const ir::Op& at = to ? *to : *from;
  llvm::Value* here = val(at.operands[0]).scalar;
  llvm::Value* pe = b_.CreateSExtOrTrunc(val(at.operands[1]).scalar, b_.getInt32Ty());
  llvm::Value* other = val(op.operands[to ? 1 : 0]).scalar;
  llvm::Value* n = b_.CreateSExtOrTrunc(val(op.operands[2]).scalar, b_.getInt64Ty());
  const bool nbi = op.int_attr("nbi") != 0;
  barrier();  // (the source is written)
  nvshmem_copy(to != nullptr, nbi, here, other, n, pe);
  barrier();  // (as the threads' copy: done, or issued, before what follows)
  return true;
}

void LayoutLowering::emit_wait(const ir::Op& op) {
  llvm::Type* t = reg_type(op.results[0]->type);
  auto poll = [&] {
    return poll_words(op, t, val(op.operands[0]).scalar, val(op.operands[1]).scalar, val(op.operands[2]).scalar);
  };
  const bool used = uses_[op.results[0].get()] > 0;
  llvm::Value* last = llvm::UndefValue::get(t);
  auto* one = llvm::dyn_cast<llvm::ConstantInt>(val(op.operands[1]).scalar);
  const bool one_word = one && one->isOne();
  if (op.operands[0]->type.is_tensor()) {
    // A block of pointers: each thread polls the words of the elements it holds, a word each
    // all at once (one round trip, not one a word), and the program meets. Its token: 0.
    if (producer_) unsupported(op, "a wait on a block of pointers in a warp-specialized producer");
    const LVal& ptrs = val(op.operands[0]);
    const LVal& want = val(op.operands[2]);
    if (one_word) {
      poll_each(op, t, ptrs.regs, want.regs);
    } else {
      for (size_t j = 0; j < ptrs.regs.size(); ++j)
        poll_words(op, t, ptrs.regs[j], val(op.operands[1]).scalar, want.regs.at(j));
    }
    barrier();
    last = llvm::Constant::getNullValue(t);
  } else if (!producer_ && !one_word) {
    // Many words (or a count known only at run time): each thread polls its share, the
    // program meets, and the last word is read again where the token's value is used (one
    // thread polling n words one after the other took ~1 us a word at sys scope).
    llvm::Value* p = val(op.operands[0]).scalar;
    llvm::Value* n = val(op.operands[1]).scalar;
    poll_words(op, t, p, n, val(op.operands[2]).scalar, tid_, threads_);
    barrier();
    if (used)
      last = from_thread0(t, [&] {
        using Order = ir::MemOrder;
        const Order order = ir::enum_attr<Order>(op, "order") == Order::acquire ? Order::acquire : Order::relaxed;
        llvm::Value* at = b_.CreateGEP(t, p, b_.CreateSub(n, llvm::ConstantInt::get(n->getType(), 1)));
        llvm::Value* any = b_.CreateICmpSGT(n, llvm::ConstantInt::get(n->getType(), 0));
        return when_value(any, t, llvm::Constant::getNullValue(t),
                          [&] { return target_->load(t, at, order, ir::enum_attr<ir::MemScope>(op, "scope")); });
      });
  } else if (used) {
    last = from_thread0(t, poll);
  } else if (producer_) {
    poll();
  } else {  // (the token unused: thread 0 polls, and the program meets after it)
    when(is_thread0(), [&] { poll(); });
    barrier();
  }
  // (what the acquire ordered, seen by TMA's copies, which read through the async proxy; a
  // warp-specialized kernel's consumers copy nothing)
  if (!tma_recipes_.empty() && !consumers_) ptx(b_.getVoidTy(), "fence.proxy.async.global;", "", {});
  define(op, LVal::of(last));
}

llvm::Value* LayoutLowering::from_thread0(llvm::Type* t, const std::function<llvm::Value*()>& value) {
  if (producer_) return value();
  return to_every_thread(when_value(is_thread0(), t, llvm::UndefValue::get(t), value));
}

llvm::Value* LayoutLowering::to_every_thread(llvm::Value* v) {
  llvm::Value* slot = smem_at(scratch(8));
  barrier();
  when(is_thread0(), [&] { b_.CreateStore(v, slot); });
  barrier();
  llvm::Value* r = b_.CreateLoad(v->getType(), slot);
  barrier();
  return r;
}

}  // namespace tiledist::codegen::gpu_ir
