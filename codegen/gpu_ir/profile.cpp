// The profiler's marks on GPUs (LayoutLowering::emit_profile): one thread of the program, or of
// each warpgroup in a warp-specialized kernel, claims a record of the launch's ProfileBuffer by
// an atomic add on its count and writes it, where the buffer has room: the GPU's clock in ns,
// the program's linear id, the multiprocessor, the region and phase, the mark's arguments. No
// barrier: the other threads go on (a mark costs its thread a few instructions and one atomic).
#include <cstddef>

#include "codegen/gpu_ir/lowering.h"
#include "ir/profile.h"
#include "support/profile_abi.h"

namespace tiledist::codegen::gpu_ir {

using runtime::ProfileBuffer;
using runtime::ProfileRecord;

void LayoutLowering::emit_profile(const ir::Op& op) {
  TD_ASSERT(profile_buffer_, "a profile op without the kernel's profile buffer");
  // Who records: the producer's one thread in its region; else the first thread of each
  // warpgroup where the kernel is warp specialized (its roles apart), of the program otherwise.
  llvm::Value* leader = producer_ ? b_.getTrue()
                        : producer_threads_ ? b_.CreateICmpEQ(b_.CreateURem(tid_, b_.getInt32(128)), b_.getInt32(0))
                                            : is_thread0();
  auto* mark = llvm::BasicBlock::Create(b_.getContext(), "profile.mark", fn_);
  auto* write = llvm::BasicBlock::Create(b_.getContext(), "profile.write", fn_);
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "profile.done", fn_);
  b_.CreateCondBr(leader, mark, done);

  b_.SetInsertPoint(mark);
  llvm::Value* now = target_->nanoseconds();
  llvm::Value* buf = profile_buffer_;
  llvm::Value* index =
      target_->atomic(ir::RmwKind::add, ir::DType::i32, b_.CreateConstGEP1_64(b_.getInt8Ty(), buf, offsetof(ProfileBuffer, count)),
                      b_.getInt32(1), nullptr, ir::MemOrder::relaxed, ir::MemScope::gpu, true);
  llvm::Value* capacity =
      b_.CreateLoad(b_.getInt32Ty(), b_.CreateConstGEP1_64(b_.getInt8Ty(), buf, offsetof(ProfileBuffer, capacity)));
  b_.CreateCondBr(b_.CreateICmpULT(index, capacity), write, done);

  b_.SetInsertPoint(write);
  llvm::Value* rec = b_.CreateGEP(b_.getInt8Ty(), buf,
                                  b_.CreateAdd(b_.getInt64(sizeof(ProfileBuffer)),
                                               b_.CreateMul(b_.CreateZExt(index, b_.getInt64Ty()),
                                                            b_.getInt64(sizeof(ProfileRecord)))));
  auto field = [&](size_t offset, llvm::Value* v) {
    b_.CreateStore(v, b_.CreateConstGEP1_64(b_.getInt8Ty(), rec, static_cast<int64_t>(offset)));
  };
  // The program's linear id: x + nx * (y + ny * z).
  llvm::Value* program = b_.CreateAdd(
      target_->program_id(0),
      b_.CreateMul(target_->num_programs(0),
                   b_.CreateAdd(target_->program_id(1), b_.CreateMul(target_->num_programs(1), target_->program_id(2)))));
  field(offsetof(ProfileRecord, time), now);
  field(offsetof(ProfileRecord, program), program);
  field(offsetof(ProfileRecord, unit), b_.CreateTrunc(target_->processor_id(), b_.getInt16Ty()));
  field(offsetof(ProfileRecord, region), b_.getInt8(static_cast<uint8_t>(ir::profile_region_index(profile_regions_, op))));
  field(offsetof(ProfileRecord, phase), b_.getInt8(static_cast<uint8_t>(ir::enum_attr<ir::ProfilePhase>(op, "phase"))));
  for (size_t i = 0; i < op.operands.size(); ++i)
    field(offsetof(ProfileRecord, args) + 4 * i, val(op.operands[i]).scalar);
  field(offsetof(ProfileRecord, nargs), b_.getInt8(static_cast<uint8_t>(op.operands.size())));
  field(offsetof(ProfileRecord, warpgroup), b_.CreateTrunc(b_.CreateUDiv(tid_, b_.getInt32(128)), b_.getInt8Ty()));
  b_.CreateBr(done);

  b_.SetInsertPoint(done);
}

}  // namespace tiledist::codegen::gpu_ir
