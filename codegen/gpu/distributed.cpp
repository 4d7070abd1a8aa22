// The distributed ops (codegen/gpu/lowering.h): symm_at, wait and the barrier of every program
// on every rank, around their code shared with the GPU IR lowering (codegen/world_ops.h).
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

void GpuLowering::emit_symm_at(const ir::Op& op) {
  llvm::Value* r = val(op.operands[1]).scalar;
  const bool tensor = op.operands[0]->type.is_tensor();
  auto at = symm_at(r, tensor ? element(op.operands[0], 0) : val(op.operands[0]).scalar);
  if (!tensor) return define(op, {at(val(op.operands[0]).scalar), {}});
  GVal g;
  for (int64_t j = 0; j < slots_of(op.operands[0]->type); ++j) g.slots.push_back(at(element(op.operands[0], j)));
  define(op, g);
}

void GpuLowering::emit_wait(const ir::Op& op) {
  llvm::Type* t = reg_type(op.results[0]->type);
  if (!producer_ && producer_only_waits_.count(&op))  // (warp specialized: the producer waits)
    return define(op, {llvm::Constant::getNullValue(t), {}});
  llvm::Value* last = from_thread0(t, [&] {
    return poll_words(op, t, val(op.operands[0]).scalar, val(op.operands[1]).scalar, val(op.operands[2]).scalar);
  });
  define(op, {last, {}});
}

void GpuLowering::emit_device_barrier() {
  barrier();  // the program's threads are here, their writes before thread 0's release
  when(is_thread0(), [&] { device_barrier_by_thread0(); });
  barrier();
}

}  // namespace tiledist::codegen::gpu
