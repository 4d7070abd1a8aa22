// dot on the GPU (codegen/gpu/lowering.h): the choice of matrix instructions (dot_nvidia.cpp,
// dot_mfma.cpp) and, where none applies, both operands staged in shared memory and each
// thread's output elements accumulated with FMAs; the staging of 16- and 8-bit operand tiles in
// the format matrix instructions read.
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

llvm::Value* GpuLowering::stage_narrow(const ir::Value* v, int64_t base, bool transpose,
                                       const std::function<llvm::Value*(llvm::Value*)>& bits) {
  const ir::Type& t = v->type;
  int64_t rows = t.shape[0], cols = t.shape[1];
  int64_t stored_rows = transpose ? cols : rows, row_len = padded_row(transpose ? rows : cols);
  llvm::Value* arr = scratch(base, stored_rows * row_len * ir::dtype_bytes(t.dtype));
  llvm::Type* mt = mem_type(t.dtype);
  auto i = [&](int64_t x) { return b_.getInt32(static_cast<int32_t>(x)); };
  for (int64_t j = 0; j < slots_of(t); ++j)
    when(valid(t, j), [&] {
      llvm::Value* e = element_index(t, j);
      llvm::Value* r = b_.CreateUDiv(e, i(cols));
      llvm::Value* c = b_.CreateURem(e, i(cols));
      llvm::Value* at =
          transpose ? b_.CreateAdd(b_.CreateMul(c, i(row_len)), r) : b_.CreateAdd(b_.CreateMul(r, i(row_len)), c);
      llvm::Value* x = to_mem(element(v, j), t.dtype);
      b_.CreateStore(bits ? bits(x) : x, b_.CreateGEP(mt, arr, at));
    });
  return arr;
}

void GpuLowering::emit_dot(const ir::Op& op) {
  if (auto it = pipe_dots_.find(&op); it != pipe_dots_.end())
    return it->second->wgmma ? pipe_dot_wgmma(*it->second, op) : pipe_dot(*it->second, op);
  if (emit_dot_mma(op) || emit_dot_mfma(op)) return;
  const ir::Type& at = op.operands[0]->type;
  const ir::Type& bt = op.operands[1]->type;
  const ir::Type& rt = op.results[0]->type;
  int64_t K = at.shape[1], N = rt.shape[1];
  llvm::Value* a = stage(op.operands[0], 0);
  int64_t b_off = (at.numel() * elem_bytes(at) + 15) / 16 * 16;
  llvm::Value* bb = stage(op.operands[1], b_off);
  barrier();
  GVal g;
  llvm::Type* f32 = b_.getFloatTy();
  for (int64_t j = 0; j < slots_of(rt); ++j) {
    llvm::Value* e = element_index(rt, j);
    llvm::Value* m = b_.CreateUDiv(e, b_.getInt32(static_cast<int32_t>(N)));
    llvm::Value* n = b_.CreateURem(e, b_.getInt32(static_cast<int32_t>(N)));
    llvm::Value* init = element(op.operands[2], j);
    g.slots.push_back(when_value(valid(rt, j), f32, init, [&] {
      llvm::Value* acc = local(f32, init);
      counted_loop(b_.getInt32(0), b_.getInt32(static_cast<int32_t>(K)), 1, [&](llvm::Value* k) {
        llvm::Value* av = staged_load(a, at, b_.CreateAdd(b_.CreateMul(m, b_.getInt32(static_cast<int32_t>(K))), k));
        llvm::Value* bv = staged_load(bb, bt, b_.CreateAdd(b_.CreateMul(k, b_.getInt32(static_cast<int32_t>(N))), n));
        if (av->getType()->isDoubleTy()) av = b_.CreateFPTrunc(av, f32), bv = b_.CreateFPTrunc(bv, f32);
        b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32}, {av, bv, b_.CreateLoad(f32, acc)}), acc);
      });
      return b_.CreateLoad(f32, acc);
    }));
  }
  barrier();
  define(op, g);
}

}  // namespace tiledist::codegen::gpu
