// dot on AMD's matrix cores (codegen/gpu/lowering.h): MFMA on operands staged in LDS.
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

bool GpuLowering::emit_dot_mfma(const ir::Op& op) {
  const ir::Type& at = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  if (!target_->mfma_tile(rt.shape[0], rt.shape[1]) || !mma_eligible(op)) return false;
  MmaTiles m = mma_tiles(rt);
  const DType da = at.dtype, db = op.operands[1]->type.dtype;
  const int64_t M = at.shape[0], K = at.shape[1], eb = ir::dtype_bytes(da);
  const int64_t per_lane = 8 / eb, kstep = mfma_k(m.tile, da);
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  // The product falls short by `scale` (see mfma_product_scale): the accumulator is divided by
  // it going in, multiplied coming out.
  const double scale = target_->mfma_product_scale(da, db);
  GVal acc_in = mma_from(op.operands[2]);
  const int64_t a_bytes = (M * padded_row(K) * eb + 15) / 16 * 16;
  auto operand_bits = [&](DType d) { return [this, d](llvm::Value* x) { return target_->mfma_operand(x, d); }; };
  llvm::Value* a = stage_narrow(op.operands[0], 0, false, operand_bits(da));        // A[m][k], rows padded
  llvm::Value* bb = stage_narrow(op.operands[1], a_bytes, true, operand_bits(db));  // B^T[n][k], rows padded
  barrier();
  auto* acc_t = llvm::FixedVectorType::get(b_.getFloatTy(), static_cast<unsigned>(m.regs));
  llvm::Value* lane = b_.CreateURem(tid_, c(64));
  llvm::Value* k_lane = b_.CreateMul(b_.CreateUDiv(lane, c(m.tile)), c(per_lane));
  auto load = [&](llvm::Value* arr, llvm::Value* row, llvm::Value* k) {
    llvm::Value* at = b_.CreateMul(b_.CreateAdd(b_.CreateMul(row, c(padded_row(K))), b_.CreateAdd(k, k_lane)), c(eb));
    return b_.CreateAlignedLoad(b_.getInt64Ty(), b_.CreateGEP(b_.getInt8Ty(), arr, at), llvm::Align(8));
  };
  auto scaled = [&](llvm::Value* x, double f) {
    return f == 1.0 ? x : b_.CreateFMul(x, llvm::ConstantFP::get(b_.getFloatTy(), f));
  };
  GVal out;
  out.mma = true;
  for (int64_t ti = 0; ti < m.per_warp; ++ti) {
    llvm::Value* init = llvm::PoisonValue::get(acc_t);
    for (int r = 0; r < m.regs; ++r)
      init = b_.CreateInsertElement(init, scaled(acc_in.slots[ti * m.regs + r], 1.0 / scale), uint64_t(r));
    llvm::Value* acc = local(acc_t, init);
    when(tile_ok(m, ti), [&] {
      llvm::Value* tile = tile_of(m, ti);
      llvm::Value* row =
          b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(tile, c(m.tiles_n)), c(m.tile)), b_.CreateURem(lane, c(m.tile)));
      llvm::Value* col =
          b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, c(m.tiles_n)), c(m.tile)), b_.CreateURem(lane, c(m.tile)));
      counted_loop(c(0), c(K), kstep, [&](llvm::Value* k0) {
        b_.CreateStore(target_->mfma(da, db, m.tile, load(a, row, k0), load(bb, col, k0), b_.CreateLoad(acc_t, acc)),
                       acc);
      });
    });
    llvm::Value* result = b_.CreateLoad(acc_t, acc);
    for (int r = 0; r < m.regs; ++r) out.slots.push_back(scaled(b_.CreateExtractElement(result, uint64_t(r)), scale));
  }
  barrier();  // A and B may be restaged by the next op
  define(op, out);
  return true;
}

}  // namespace tiledist::codegen::gpu
