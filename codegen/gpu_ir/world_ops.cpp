// The distributed ops' code (codegen/gpu_ir/world_ops.h).
#include "codegen/gpu_ir/world_ops.h"

#include "llvm/IR/MDBuilder.h"

namespace tiledist::codegen {

using Order = ir::MemOrder;
using Scope = ir::MemScope;

bool WorldOps::uses_world(const ir::Block& block) {
  for (const auto& op : block.ops) {
    if (op->code == OpCode::Rank || op->code == OpCode::NumRanks || op->code == OpCode::SymmAt ||
        op->code == OpCode::Wait || op->code == OpCode::Barrier)
      return true;
    for (const auto& r : op->regions)
      if (uses_world(*r)) return true;
  }
  return false;
}

llvm::Value* WorldOps::world_field(size_t offset, llvm::Type* t, llvm::Value* index) {
  TD_ASSERT(world_, "a world field read by a kernel without the world parameter");
  llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), world_, offset);
  if (index) at = b_.CreateGEP(t, at, index);
  // (Alignment spelled out: the module has no data layout yet, and LLVM's default aligns i64 to 4.)
  auto* ld = b_.CreateAlignedLoad(t, at, llvm::Align(t->getPrimitiveSizeInBits() / 8));
  ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(b_.getContext(), {}));
  return ld;
}

void WorldOps::fail(runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected, llvm::Value* seen) {
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* rec = b_.CreateIntToPtr(world_field(offsetof(runtime::DeviceWorld, failure), i64), b_.getPtrTy(1));
  llvm::Value* old = target_->atomic(std::nullopt, ir::DType::i32, rec, b_.getInt32(0),
                                     b_.getInt32(static_cast<uint32_t>(kind)), Order::relaxed, Scope::sys, true);
  when(b_.CreateICmpEQ(old, b_.getInt32(0)), [&] {
    auto field = [&](size_t offset, llvm::Value* v) {
      b_.CreateAlignedStore(v, b_.CreateConstGEP1_64(b_.getInt8Ty(), rec, offset),
                            llvm::Align(v->getType()->getPrimitiveSizeInBits() / 8), /*volatile*/ true);
    };
    llvm::Value* x = target_->program_id(0);
    llvm::Value* y = target_->program_id(1);
    llvm::Value* z = target_->program_id(2);
    llvm::Value* nx = target_->num_programs(0);
    llvm::Value* ny = target_->num_programs(1);
    field(offsetof(runtime::DeviceFailureRecord, block),
          b_.CreateAdd(x, b_.CreateMul(nx, b_.CreateAdd(y, b_.CreateMul(ny, z)))));
    field(offsetof(runtime::DeviceFailureRecord, address), b_.CreatePtrToInt(address, i64));
    field(offsetof(runtime::DeviceFailureRecord, expected), b_.CreateSExt(expected, i64));
    field(offsetof(runtime::DeviceFailureRecord, seen), b_.CreateSExt(seen, i64));
    field(offsetof(runtime::DeviceFailureRecord, kernel), b_.getInt32(runtime::kernel_tag(kernel_)));
    fence(Order::seq_cst, Scope::sys);
    field(offsetof(runtime::DeviceFailureRecord, complete), b_.getInt32(1));
    fence(Order::seq_cst, Scope::sys);
  });
  target_->give_up();
}

void WorldOps::fail_if(llvm::Value* cond, runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected,
                       llvm::Value* seen) {
  auto* bad = llvm::BasicBlock::Create(b_.getContext(), "fail", fn_);
  auto* ok = llvm::BasicBlock::Create(b_.getContext(), "ok", fn_);
  b_.CreateCondBr(cond, bad, ok, llvm::MDBuilder(b_.getContext()).createBranchWeights(1, 1 << 20));
  b_.SetInsertPoint(bad);
  fail(kind, address, expected, seen);
  b_.CreateUnreachable();
  b_.SetInsertPoint(ok);
}

void WorldOps::spin_until(const std::function<llvm::Value*()>& poll, runtime::DeviceFailure kind,
                          const std::function<std::array<llvm::Value*, 3>()>& report, llvm::Value* timeout) {
  if (!timeout) timeout = world_field(offsetof(runtime::DeviceWorld, timeout_ns), b_.getInt64Ty());
  llvm::Value* started = local(b_.getInt64Ty(), b_.getInt64(0));  // the clock at the first poll that failed
  auto* spin = llvm::BasicBlock::Create(b_.getContext(), "spin", fn_);
  auto* late = llvm::BasicBlock::Create(b_.getContext(), "spin.late", fn_);
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "spin.done", fn_);
  b_.CreateBr(spin);
  b_.SetInsertPoint(spin);
  b_.CreateCondBr(poll(), done, late);
  b_.SetInsertPoint(late);
  llvm::Value* now = target_->nanoseconds();
  llvm::Value* was = b_.CreateLoad(b_.getInt64Ty(), started);
  llvm::Value* start = b_.CreateSelect(b_.CreateICmpEQ(was, b_.getInt64(0)), now, was);
  b_.CreateStore(start, started);
  llvm::Value* waited = b_.CreateSub(now, start);
  llvm::Value* late_enough = b_.CreateAnd(b_.CreateICmpNE(timeout, b_.getInt64(0)), b_.CreateICmpUGT(waited, timeout));
  if (world_) {
    auto [address, expected, seen] = report();
    fail_if(late_enough, kind, address, expected, seen);
  } else {
    when(late_enough, [&] { b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {}); });
  }
  b_.CreateBr(spin);
  b_.SetInsertPoint(done);
}

std::function<llvm::Value*(llvm::Value*)> WorldOps::symm_at(llvm::Value* r, llvm::Value* probe) {
  using runtime::DeviceFailure;
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* ranks = num_ranks();
  fail_if(b_.CreateICmpUGE(r, ranks), DeviceFailure::symm_at_bad_rank, probe, r, ranks);
  const size_t bases = offsetof(runtime::DeviceWorld, bases);
  llvm::Value* mine = world_field(bases, i64, rank());
  llvm::Value* theirs = world_field(bases, i64, r);
  llvm::Value* size = world_field(offsetof(runtime::DeviceWorld, heap_size), i64);
  return [this, i64, mine, theirs, size, r](llvm::Value* p) {
    llvm::Value* off = b_.CreateSub(b_.CreatePtrToInt(p, i64), mine);
    fail_if(b_.CreateICmpUGE(off, size), DeviceFailure::symm_at_outside_heap, p, r, size);
    // (a heap's address is global memory: said, so that LLVM's address-space inference makes
    // the accesses through it global ones, not generic)
    llvm::Value* global = b_.CreateIntToPtr(b_.CreateAdd(theirs, off), b_.getPtrTy(1));
    return p->getType() == global->getType() ? global : b_.CreateAddrSpaceCast(global, p->getType());
  };
}

llvm::Value* WorldOps::poll_words(const ir::Op& wait, llvm::Type* t, llvm::Value* p, llvm::Value* n, llvm::Value* want,
                                  llvm::Value* first, int64_t step) {
  const Order order = ir::enum_attr<Order>(wait, "order") == Order::acquire ? Order::acquire : Order::relaxed;
  const Scope scope = ir::enum_attr<Scope>(wait, "scope");
  const llvm::CmpInst::Predicate pred = int_predicate(ir::enum_attr<ir::CmpPred>(wait, "cmp"), false);
  llvm::Value* seen = local(t, llvm::Constant::getNullValue(t));
  counted_loop(first ? first : b_.getInt32(0), n, step, [&](llvm::Value* i) {
    llvm::Value* at = b_.CreateGEP(t, p, i);
    llvm::Value* v = nullptr;
    spin_until(
        [&] {
          v = target_->load(t, at, order, scope);
          return b_.CreateICmp(pred, v, want);
        },
        runtime::DeviceFailure::wait_timeout, [&] { return std::array<llvm::Value*, 3>{at, want, v}; });
    b_.CreateStore(v, seen);
  });
  return b_.CreateLoad(t, seen);
}

void WorldOps::poll_each(const ir::Op& wait, llvm::Type* t, const std::vector<llvm::Value*>& ptrs,
                         const std::vector<llvm::Value*>& wants) {
  if (ptrs.empty()) return;
  const Scope scope = ir::enum_attr<Scope>(wait, "scope");
  const llvm::CmpInst::Predicate pred = int_predicate(ir::enum_attr<ir::CmpPred>(wait, "cmp"), false);
  std::vector<llvm::Value*> seen(ptrs.size()), ok(ptrs.size());
  spin_until(
      [&] {
        for (size_t j = 0; j < ptrs.size(); ++j) seen[j] = target_->load(t, ptrs[j], Order::relaxed, scope);
        llvm::Value* all = b_.getTrue();
        for (size_t j = 0; j < ptrs.size(); ++j)
          all = b_.CreateAnd(all, ok[j] = b_.CreateICmp(pred, seen[j], wants[j]));
        return all;
      },
      runtime::DeviceFailure::wait_timeout,
      [&] {  // (the first that did not compare)
        std::array<llvm::Value*, 3> r{ptrs.back(), wants.back(), seen.back()};
        for (size_t j = ptrs.size() - 1; j-- > 0;)
          for (int k = 0; k < 3; ++k)
            r[size_t(k)] = b_.CreateSelect(ok[j], r[size_t(k)], std::array{ptrs[j], wants[j], seen[j]}[size_t(k)]);
        return r;
      });
  if (ir::enum_attr<Order>(wait, "order") == Order::acquire) fence(Order::acquire, scope);
}

void WorldOps::device_barrier_by_thread0() {
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* i64 = b_.getInt64Ty();
  const size_t bases = offsetof(runtime::DeviceWorld, bases);
  llvm::Value* ranks = num_ranks();
  auto word = [&](llvm::Value* rank, uint64_t offset) {
    return b_.CreateIntToPtr(b_.CreateAdd(world_field(bases, i64, rank), b_.getInt64(offset)), b_.getPtrTy(1));
  };
  llvm::Value* counter = word(b_.getInt32(0), runtime::kBarrierCounterOffset);
  llvm::Value* mine = word(rank(), runtime::kBarrierGenerationOffset);
  llvm::Value* nx = target_->num_programs(0);
  llvm::Value* ny = target_->num_programs(1);
  llvm::Value* nz = target_->num_programs(2);
  llvm::Value* total = b_.CreateMul(b_.CreateMul(b_.CreateMul(nx, ny), nz), ranks);
  llvm::Value* generation = target_->load(i32, mine, Order::acquire, Scope::sys);
  llvm::Value* before = target_->atomic(ir::RmwKind::add, ir::DType::i32, counter, b_.getInt32(1), nullptr,
                                        Order::acq_rel, Scope::sys, true);
  llvm::Value* last = b_.CreateICmpEQ(before, b_.CreateSub(total, b_.getInt32(1)));
  auto* release = llvm::BasicBlock::Create(b_.getContext(), "barrier.release", fn_);
  auto* wait = llvm::BasicBlock::Create(b_.getContext(), "barrier.wait", fn_);
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "barrier.done", fn_);
  b_.CreateCondBr(last, release, wait);
  b_.SetInsertPoint(release);
  target_->store(counter, b_.getInt32(0), Order::relaxed, Scope::sys);
  counted_loop(b_.getInt32(0), ranks, 1, [&](llvm::Value* r) {
    target_->store(word(r, runtime::kBarrierGenerationOffset), b_.CreateAdd(generation, b_.getInt32(1)), Order::release,
                   Scope::sys);
  });
  b_.CreateBr(done);
  b_.SetInsertPoint(wait);
  spin_until(
      [&] {
        llvm::Value* now = target_->load(i32, mine, Order::acquire, Scope::sys);
        return b_.CreateICmpNE(now, generation);
      },
      runtime::DeviceFailure::barrier_timeout,
      [&] {
        llvm::Value* arrived = target_->load(i32, counter, Order::relaxed, Scope::sys);
        return std::array<llvm::Value*, 3>{counter, total, arrived};
      });
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

void WorldOps::nvshmem_copy(bool put, bool nbi, llvm::Value* here, llvm::Value* other, llvm::Value* n,
                            llvm::Value* pe) {
  const std::string name = str_cat("nvshmemx_", put ? "putmem" : "getmem", nbi ? "_nbi" : "", "_block");
  llvm::Type* ptr = b_.getPtrTy();
  llvm::FunctionCallee fn = helper(name.c_str(), b_.getVoidTy(), {ptr, ptr, b_.getInt64Ty(), b_.getInt32Ty()});
  llvm::Value* generic_here = b_.CreatePointerCast(here, ptr);
  llvm::Value* generic_other = b_.CreatePointerCast(other, ptr);
  if (put)
    b_.CreateCall(fn, {generic_here, generic_other, n, pe});  // (dest on pe, source here)
  else
    b_.CreateCall(fn, {generic_other, generic_here, n, pe});  // (dest here, source on pe)
}

llvm::Value* WorldOps::nvshmem_atomic(bool add, bool wide, bool fetch, bool release, llvm::Value* here, llvm::Value* v,
                                      llvm::Value* pe) {
  llvm::Type* ptr = b_.getPtrTy();
  llvm::Type* t = wide ? b_.getInt64Ty() : b_.getInt32Ty();
  if (release) {  // (ours: every write before it, to any rank, as atom.release.sys orders them; NVSHMEM's:
                  // its puts to pe, which by the spec is all nvshmem_fence orders)
    fence(ir::MemOrder::release, ir::MemScope::sys);
    nvshmem_order(false);
  }
  const char* op = fetch ? (add ? "atomic_fetch_add" : "atomic_swap") : (add ? "atomic_add" : "atomic_set");
  const std::string name = str_cat("nvshmem_", wide ? "int64" : "int", "_", op);
  llvm::FunctionCallee fn = helper(name.c_str(), fetch ? t : b_.getVoidTy(), {ptr, t, b_.getInt32Ty()});
  llvm::Value* call = b_.CreateCall(fn, {b_.CreatePointerCast(here, ptr), b_.CreateSExtOrTrunc(v, t), pe});
  return fetch ? call : nullptr;
}

void WorldOps::nvshmem_order(bool quiet) {
  b_.CreateCall(helper(quiet ? "nvshmem_quiet" : "nvshmem_fence", b_.getVoidTy(), {}), {});
}

void WorldOps::copy_by_threads(llvm::Value* dst, llvm::Value* src, llvm::Value* n, int threads) {
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* bits = b_.CreateOr(b_.CreateOr(b_.CreatePtrToInt(dst, i64), b_.CreatePtrToInt(src, i64)), n);
  llvm::Value* tid = b_.CreateZExt(tid_, i64);
  // Each thread moves `unroll` chunks per round, all loads before the stores: enough bytes in
  // flight to cover the latency of a peer's memory. The rest goes a chunk at a time.
  auto copy = [&](int64_t width, int64_t unroll) {
    llvm::Type* t =
        width == 16 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(b_.getInt32Ty(), 4)) : b_.getInt8Ty();
    const int64_t stride = width * threads;
    llvm::Value* start = b_.CreateMul(tid, b_.getInt64(width));
    llvm::Value* rest = start;
    if (unroll > 1) {
      llvm::Value* bound = b_.CreateSub(n, b_.getInt64((unroll - 1) * stride));  // a round fits below it
      counted_loop(start, bound, unroll * stride, [&](llvm::Value* at) {
        std::vector<llvm::Value*> v;
        for (int64_t k = 0; k < unroll; ++k)
          v.push_back(b_.CreateAlignedLoad(
              t, b_.CreateGEP(b_.getInt8Ty(), src, b_.CreateAdd(at, b_.getInt64(k * stride))), llvm::Align(width)));
        for (int64_t k = 0; k < unroll; ++k)
          b_.CreateAlignedStore(v[k], b_.CreateGEP(b_.getInt8Ty(), dst, b_.CreateAdd(at, b_.getInt64(k * stride))),
                                llvm::Align(width));
      });
      // Where the rounds stopped: start + cdiv(bound - start, unroll * stride) rounds.
      llvm::Value* span = b_.CreateSub(bound, start);
      llvm::Value* rounds = b_.CreateSelect(
          b_.CreateICmpSGT(span, b_.getInt64(0)),
          b_.CreateSDiv(b_.CreateAdd(span, b_.getInt64(unroll * stride - 1)), b_.getInt64(unroll * stride)),
          b_.getInt64(0));
      rest = b_.CreateAdd(start, b_.CreateMul(rounds, b_.getInt64(unroll * stride)));
    }
    counted_loop(rest, n, stride, [&](llvm::Value* at) {
      llvm::Value* v = b_.CreateAlignedLoad(t, b_.CreateGEP(b_.getInt8Ty(), src, at), llvm::Align(width));
      b_.CreateAlignedStore(v, b_.CreateGEP(b_.getInt8Ty(), dst, at), llvm::Align(width));
    });
  };
  llvm::Value* aligned = b_.CreateICmpEQ(b_.CreateAnd(bits, b_.getInt64(15)), b_.getInt64(0));
  auto* vec = llvm::BasicBlock::Create(b_.getContext(), "copy.v4", fn_);
  auto* bytes = llvm::BasicBlock::Create(b_.getContext(), "copy.bytes", fn_);
  auto* join = llvm::BasicBlock::Create(b_.getContext(), "copy.done", fn_);
  b_.CreateCondBr(aligned, vec, bytes);
  b_.SetInsertPoint(vec);
  copy(16, 4);
  b_.CreateBr(join);
  b_.SetInsertPoint(bytes);
  copy(1, 1);
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
}

llvm::Value* WorldOps::local(llvm::Type* t, llvm::Value* init) {
  llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::Value* slot = entry.CreateAlloca(t);
  b_.CreateStore(init, slot);
  return slot;
}

void WorldOps::counted_loop(llvm::Value* start, llvm::Value* n, int64_t step,
                            const std::function<void(llvm::Value*)>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(b_.getContext(), "loop", fn_);
  auto* body_bb = llvm::BasicBlock::Create(b_.getContext(), "loop.body", fn_);
  auto* exit = llvm::BasicBlock::Create(b_.getContext(), "loop.end", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* i = b_.CreatePHI(start->getType(), 2);
  i->addIncoming(start, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(i, n), body_bb, exit);
  b_.SetInsertPoint(body_bb);
  body(i);
  i->addIncoming(b_.CreateAdd(i, llvm::ConstantInt::get(start->getType(), step)), b_.GetInsertBlock());
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
}

}  // namespace tiledist::codegen
