// The profiler's marks on GPUs (LayoutLowering::emit_profile): one thread of the program, or of
// each warpgroup in a warp-specialized kernel, writes the next record of its share of the
// launch's ProfileBuffer (support/profile_abi.h), where the share has room: the GPU's clock in
// ns, the program's linear id, the multiprocessor, the region and phase, the mark's arguments.
// No atomic and no barrier: nothing waits on a mark (its count lives in a register).
#include "ir/profile.h"

#include <cstddef>

#include "codegen/gpu_ir/lowering.h"
#include "support/profile_abi.h"

namespace tiledist::codegen::gpu_ir {

using runtime::ProfileBuffer;
using runtime::ProfileRecord;

void LayoutLowering::begin_profile() {
  // The marks so far of this thread (a marker's): an alloca LLVM keeps in a register.
  const llvm::IRBuilderBase::InsertPoint here = b_.saveIP();
  llvm::BasicBlock& entry = fn_->getEntryBlock();
  b_.SetInsertPoint(&entry, entry.getFirstInsertionPt());
  const unsigned as = module_->getDataLayout().getAllocaAddrSpace();
  profile_marks_ = b_.CreateAlloca(b_.getInt32Ty(), as, nullptr, "profile.marks");
  b_.restoreIP(here);
  b_.CreateStore(b_.getInt32(0), profile_marks_);
  // This marker's share: (program x groups + warpgroup) x share records on.
  const int groups = (threads_ + producer_threads_ + 127) / 128;
  llvm::Value* programs =
      b_.CreateMul(target_->num_programs(0), b_.CreateMul(target_->num_programs(1), target_->num_programs(2)));
  llvm::Value* capacity = b_.CreateLoad(
      b_.getInt32Ty(), b_.CreateConstGEP1_64(b_.getInt8Ty(), profile_buffer_, offsetof(ProfileBuffer, capacity)));
  profile_share_ = b_.CreateUDiv(capacity, b_.CreateMul(programs, b_.getInt32(groups)));
  llvm::Value* program = b_.CreateAdd(
      target_->program_id(0), b_.CreateMul(target_->num_programs(0),
                                           b_.CreateAdd(target_->program_id(1), b_.CreateMul(target_->num_programs(1),
                                                                                             target_->program_id(2)))));
  profile_program_ = program;
  profile_unit_ = b_.CreateTrunc(target_->processor_id(), b_.getInt16Ty());  // (a program stays on its SM)
  llvm::Value* group = b_.CreateUDiv(tid_, b_.getInt32(128));
  profile_group_ = group;
  profile_first_ =
      b_.CreateMul(b_.CreateZExt(b_.CreateAdd(b_.CreateMul(program, b_.getInt32(groups)), group), b_.getInt64Ty()),
                   b_.CreateZExt(profile_share_, b_.getInt64Ty()));
}

void LayoutLowering::emit_profile(const ir::Op& op) {
  TD_ASSERT(profile_buffer_, "a profile op without the kernel's profile buffer");
  // Who records: the producer's one thread in its region; else the first thread of each
  // warpgroup where the kernel is warp specialized (its roles apart), of the program otherwise.
  llvm::Value* leader = producer_           ? b_.getTrue()
                        : producer_threads_ ? b_.CreateICmpEQ(b_.CreateURem(tid_, b_.getInt32(128)), b_.getInt32(0))
                                            : is_thread0();
  auto* mark = llvm::BasicBlock::Create(b_.getContext(), "profile.mark", fn_);
  auto* write = llvm::BasicBlock::Create(b_.getContext(), "profile.write", fn_);
  auto* full = llvm::BasicBlock::Create(b_.getContext(), "profile.full", fn_);
  auto* done = llvm::BasicBlock::Create(b_.getContext(), "profile.done", fn_);
  b_.CreateCondBr(leader, mark, done);

  b_.SetInsertPoint(mark);
  llvm::Value* now = target_->nanoseconds();
  llvm::Value* index = b_.CreateLoad(b_.getInt32Ty(), profile_marks_);
  b_.CreateStore(b_.CreateAdd(index, b_.getInt32(1)), profile_marks_);
  b_.CreateCondBr(b_.CreateICmpULT(index, profile_share_), write, full);

  b_.SetInsertPoint(write);
  llvm::Value* slot = b_.CreateAdd(profile_first_, b_.CreateZExt(index, b_.getInt64Ty()));
  llvm::Value* rec = b_.CreateGEP(
      b_.getInt8Ty(), profile_buffer_,
      b_.CreateAdd(b_.getInt64(sizeof(ProfileBuffer)), b_.CreateMul(slot, b_.getInt64(sizeof(ProfileRecord)))));
  auto field = [&](size_t offset, llvm::Value* v) {
    b_.CreateStore(v, b_.CreateConstGEP1_64(b_.getInt8Ty(), rec, static_cast<int64_t>(offset)));
  };
  field(offsetof(ProfileRecord, time), now);
  field(offsetof(ProfileRecord, program), profile_program_);
  field(offsetof(ProfileRecord, unit), profile_unit_);
  field(offsetof(ProfileRecord, region),
        b_.getInt8(static_cast<uint8_t>(ir::profile_region_index(profile_regions_, op))));
  field(offsetof(ProfileRecord, phase), b_.getInt8(static_cast<uint8_t>(ir::enum_attr<ir::ProfilePhase>(op, "phase"))));
  for (size_t i = 0; i < op.operands.size(); ++i)
    field(offsetof(ProfileRecord, args) + 4 * i, val(op.operands[i]).scalar);
  field(offsetof(ProfileRecord, nargs), b_.getInt8(static_cast<uint8_t>(op.operands.size())));
  field(offsetof(ProfileRecord, warpgroup), b_.CreateTrunc(profile_group_, b_.getInt8Ty()));
  b_.CreateBr(done);

  // Past the share: counted (an atomic whose result nothing waits for).
  b_.SetInsertPoint(full);
  target_->atomic(ir::RmwKind::add, ir::DType::i32,
                  b_.CreateConstGEP1_64(b_.getInt8Ty(), profile_buffer_, offsetof(ProfileBuffer, dropped)),
                  b_.getInt32(1), nullptr, ir::MemOrder::relaxed, ir::MemScope::gpu, false);
  b_.CreateBr(done);

  b_.SetInsertPoint(done);
}

}  // namespace tiledist::codegen::gpu_ir
