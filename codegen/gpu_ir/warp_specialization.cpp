// A warp-specialized kernel in the GPU IR lowering (codegen/gpu_ir/lowering.h; sm_90a): the
// `warp_specialize` op the warp_specialization pass makes (codegen/passes/passes.h).
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

void LayoutLowering::emit_warp_specialize(const ir::Op& op) {
  auto* producer = llvm::BasicBlock::Create(ctx_, "producer", fn_);
  auto* consumer = llvm::BasicBlock::Create(ctx_, "consumer", fn_);
  b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(static_cast<uint32_t>(threads_))), producer, consumer);
  // (setmaxnreg is per warpgroup, .sync.aligned: every thread of each side runs it)
  auto regs = [&](const char* key, const char* how) {
    if (op.has_attr(key))
      ptx(b_.getVoidTy(), str_cat("setmaxnreg.", how, ".sync.aligned.u32 ", op.int_attr(key), ";"), "", {});
  };
  b_.SetInsertPoint(producer);
  regs("producer_regs", "dec");
  when(b_.CreateICmpEQ(tid_, b_.getInt32(static_cast<uint32_t>(threads_))), [&] {
    producer_ = true;
    emit_block(*op.regions[0]);
    producer_ = false;
  });
  b_.CreateRetVoid();
  b_.SetInsertPoint(consumer);
  regs("consumer_regs", "inc");
  // An aligned warpgroup instruction where the consumers start: without one (setmaxnreg's, at
  // 8 warps) ptxas takes their wgmma for divergent code and serializes it, waiting after each
  // (C7518: the skinny GEMM's tiles at 4 warps ran at 0.74 of the optimized IR's lowering, since deleted, their waits
  // on every wgmma half the stalls; ncu, H200).
  if (!op.has_attr("consumer_regs")) ptx(b_.getVoidTy(), "wgmma.fence.sync.aligned;", "", {});
  consumers_ = true;  // (to the kernel's end: what follows the op is its return)
  emit_block(*op.regions[1]);
}

}  // namespace tiledist::codegen::gpu_ir
