// Elementwise ops on the GPU (codegen/gpu/lowering.h): the hooks of the shared elementwise
// lowering (codegen/elements.h) whose form is the GPU's: math functions and bf16 (the f8 formats'
// conversions are the target's, codegen/gpu_f8.cpp).
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

llvm::Value* GpuLowering::bf16_bits(llvm::Value* v) {
  if (!target_->bf16_convert()) return Elements::bf16_bits(v);
  return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getInt16Ty());
}

}  // namespace tiledist::codegen::gpu
