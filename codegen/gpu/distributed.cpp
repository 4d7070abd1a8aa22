// The distributed ops (codegen/gpu/lowering.h): symm_at, wait, the barrier of every program on
// every rank, and failing loudly (the world's failure record, timeouts). Orders and scopes are
// the target's (GpuTarget's load, store, atomic, fence); the world (rank, heaps, timeout) comes
// from a trailing kernel parameter that points at a runtime::DeviceWorld.
#include "codegen/gpu/lowering.h"
#include "llvm/IR/MDBuilder.h"

namespace tiledist::codegen::gpu {

bool GpuLowering::uses_world(const ir::Block& block) {
  for (const auto& op : block.ops) {
    if (op->code == OpCode::Rank || op->code == OpCode::NumRanks || op->code == OpCode::SymmAt ||
        op->code == OpCode::Wait || op->code == OpCode::Barrier)
      return true;
    for (const auto& r : op->regions)
      if (uses_world(*r)) return true;
  }
  return false;
}

llvm::Value* GpuLowering::world_field(size_t offset, llvm::Type* t, llvm::Value* index) {
  TD_ASSERT(world_, "a world field read by a kernel without the world parameter");
  llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), world_, offset);
  if (index) at = b_.CreateGEP(t, at, index);
  // (Alignment spelled out: the module has no data layout yet, and LLVM's default aligns i64 to 4.)
  auto* ld = b_.CreateAlignedLoad(t, at, llvm::Align(t->getPrimitiveSizeInBits() / 8));
  ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  return ld;
}

void GpuLowering::fail(runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected, llvm::Value* seen) {
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* rec = b_.CreateIntToPtr(world_field(offsetof(runtime::DeviceWorld, failure), i64), b_.getPtrTy(1));
  llvm::Value* old = target_->atomic("cas", ir::DType::i32, rec, b_.getInt32(0),
                                     b_.getInt32(static_cast<uint32_t>(kind)), "relaxed", "sys", true);
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
    field(offsetof(runtime::DeviceFailureRecord, kernel), b_.getInt32(runtime::kernel_tag(f_.name)));
    fence("seq_cst", "sys");
    field(offsetof(runtime::DeviceFailureRecord, complete), b_.getInt32(1));
    fence("seq_cst", "sys");
  });
  target_->give_up();
}

void GpuLowering::fail_if(llvm::Value* cond, runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected,
                          llvm::Value* seen) {
  auto* bad = llvm::BasicBlock::Create(ctx_, "fail", fn_);
  auto* ok = llvm::BasicBlock::Create(ctx_, "ok", fn_);
  b_.CreateCondBr(cond, bad, ok, llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20));
  b_.SetInsertPoint(bad);
  fail(kind, address, expected, seen);
  b_.CreateUnreachable();
  b_.SetInsertPoint(ok);
}

void GpuLowering::spin_until(const std::function<llvm::Value*()>& poll, runtime::DeviceFailure kind,
                             const std::function<std::array<llvm::Value*, 3>()>& report, llvm::Value* timeout) {
  if (!timeout) timeout = world_field(offsetof(runtime::DeviceWorld, timeout_ns), b_.getInt64Ty());
  llvm::Value* started = local(b_.getInt64Ty(), b_.getInt64(0));  // the clock at the first poll that failed
  auto* spin = llvm::BasicBlock::Create(ctx_, "spin", fn_);
  auto* late = llvm::BasicBlock::Create(ctx_, "spin.late", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "spin.done", fn_);
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

void GpuLowering::emit_symm_at(const ir::Op& op) {
  using runtime::DeviceFailure;
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* r = val(op.operands[1]).scalar;
  llvm::Value* ranks = world_field(offsetof(runtime::DeviceWorld, num_ranks), b_.getInt32Ty());
  llvm::Value* probe = op.operands[0]->type.is_tensor() ? element(op.operands[0], 0) : val(op.operands[0]).scalar;
  fail_if(b_.CreateICmpUGE(r, ranks), DeviceFailure::symm_at_bad_rank, probe, r, ranks);
  const size_t bases = offsetof(runtime::DeviceWorld, bases);
  llvm::Value* mine = world_field(bases, i64, world_field(offsetof(runtime::DeviceWorld, rank), b_.getInt32Ty()));
  llvm::Value* theirs = world_field(bases, i64, r);
  llvm::Value* size = world_field(offsetof(runtime::DeviceWorld, heap_size), i64);
  auto one = [&](llvm::Value* p) {
    llvm::Value* off = b_.CreateSub(b_.CreatePtrToInt(p, i64), mine);
    fail_if(b_.CreateICmpUGE(off, size), DeviceFailure::symm_at_outside_heap, p, r, size);
    return b_.CreateIntToPtr(b_.CreateAdd(theirs, off), p->getType());
  };
  if (!op.operands[0]->type.is_tensor()) return define(op, {one(val(op.operands[0]).scalar), {}});
  GVal g;
  for (int64_t j = 0; j < slots_of(op.operands[0]->type); ++j) g.slots.push_back(one(element(op.operands[0], j)));
  define(op, g);
}

void GpuLowering::emit_wait(const ir::Op& op) {
  llvm::Type* t = reg_type(op.results[0]->type);
  if (!producer_ && producer_only_waits_.count(&op))  // (warp specialized: the producer waits)
    return define(op, {llvm::Constant::getNullValue(t), {}});
  const std::string order = op.str_attr("order") == "acquire" ? "acquire" : "relaxed";
  const std::string& cmp = op.str_attr("cmp");
  llvm::CmpInst::Predicate pred = cmp == "eq"   ? llvm::CmpInst::ICMP_EQ
                                  : cmp == "ne" ? llvm::CmpInst::ICMP_NE
                                  : cmp == "lt" ? llvm::CmpInst::ICMP_SLT
                                  : cmp == "le" ? llvm::CmpInst::ICMP_SLE
                                  : cmp == "gt" ? llvm::CmpInst::ICMP_SGT
                                                : llvm::CmpInst::ICMP_SGE;
  llvm::Value* p = val(op.operands[0]).scalar;
  llvm::Value* n = val(op.operands[1]).scalar;
  llvm::Value* want = val(op.operands[2]).scalar;
  llvm::Value* last = from_thread0(t, [&]() -> llvm::Value* {
    llvm::Value* seen = local(t, llvm::Constant::getNullValue(t));
    counted_loop(b_.getInt32(0), n, 1, [&](llvm::Value* i) {
      llvm::Value* at = b_.CreateGEP(t, p, i);
      llvm::Value* v = nullptr;
      spin_until(
          [&] {
            v = target_->load(t, at, order, op.str_attr("scope"));
            return b_.CreateICmp(pred, v, want);
          },
          runtime::DeviceFailure::wait_timeout, [&] { return std::array<llvm::Value*, 3>{at, want, v}; });
      b_.CreateStore(v, seen);
    });
    return b_.CreateLoad(t, seen);
  });
  define(op, {last, {}});
}

void GpuLowering::emit_device_barrier() {
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* i64 = b_.getInt64Ty();
  barrier();  // the program's threads are here, their writes before thread 0's release
  when(is_thread0(), [&] {
    const size_t bases = offsetof(runtime::DeviceWorld, bases);
    llvm::Value* ranks = world_field(offsetof(runtime::DeviceWorld, num_ranks), i32);
    auto word = [&](llvm::Value* rank, uint64_t offset) {
      return b_.CreateIntToPtr(b_.CreateAdd(world_field(bases, i64, rank), b_.getInt64(offset)), b_.getPtrTy(1));
    };
    llvm::Value* counter = word(b_.getInt32(0), runtime::kBarrierCounterOffset);
    llvm::Value* mine = word(world_field(offsetof(runtime::DeviceWorld, rank), i32), runtime::kBarrierGenerationOffset);
    llvm::Value* nx = target_->num_programs(0);
    llvm::Value* ny = target_->num_programs(1);
    llvm::Value* nz = target_->num_programs(2);
    llvm::Value* total = b_.CreateMul(b_.CreateMul(b_.CreateMul(nx, ny), nz), ranks);
    llvm::Value* generation = target_->load(i32, mine, "acquire", "sys");
    llvm::Value* before =
        target_->atomic("add", ir::DType::i32, counter, b_.getInt32(1), nullptr, "acq_rel", "sys", true);
    llvm::Value* last = b_.CreateICmpEQ(before, b_.CreateSub(total, b_.getInt32(1)));
    auto* release = llvm::BasicBlock::Create(ctx_, "barrier.release", fn_);
    auto* wait = llvm::BasicBlock::Create(ctx_, "barrier.wait", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "barrier.done", fn_);
    b_.CreateCondBr(last, release, wait);
    b_.SetInsertPoint(release);
    target_->store(counter, b_.getInt32(0), "relaxed", "sys");
    counted_loop(b_.getInt32(0), ranks, 1, [&](llvm::Value* r) {
      target_->store(word(r, runtime::kBarrierGenerationOffset), b_.CreateAdd(generation, b_.getInt32(1)), "release",
                     "sys");
    });
    b_.CreateBr(done);
    b_.SetInsertPoint(wait);
    spin_until(
        [&] {
          llvm::Value* now = target_->load(i32, mine, "acquire", "sys");
          return b_.CreateICmpNE(now, generation);
        },
        runtime::DeviceFailure::barrier_timeout,
        [&] {
          llvm::Value* arrived = target_->load(i32, counter, "relaxed", "sys");
          return std::array<llvm::Value*, 3>{counter, total, arrived};
        });
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  });
  barrier();
}

}  // namespace tiledist::codegen::gpu
