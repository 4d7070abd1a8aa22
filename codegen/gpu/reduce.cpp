// Reductions on the GPU (codegen/gpu/lowering.h): a whole 1-D tensor to a scalar through
// warp shuffles and shared memory, and reductions along an axis through a staged operand.
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

bool GpuLowering::emit_reduce_to_scalar(const ir::Op& op) {
  const ir::Type& in = op.operands[0]->type;
  const ir::ReduceKind kind = ir::enum_attr<ir::ReduceKind>(op, "kind");
  llvm::Type* t = reg_type(in.element());
  if (in.shape.size() != 1 || ir::is_arg(kind) || !(t->isFloatTy() || t->isIntegerTy(32))) return false;
  bool fl = t->isFloatTy();
  llvm::Value* identity = reduce_identity(kind, t);
  auto combine = [&](llvm::Value* a, llvm::Value* x) -> llvm::Value* {
    if (kind == ir::ReduceKind::sum) return fl ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
    const bool up = ir::takes_larger(kind);
    if (fl) return b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, a, x);
    return b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, a, x);
  };
  llvm::Value* partial = identity;
  for (int64_t j = 0; j < slots_of(in); ++j)
    partial = combine(partial, b_.CreateSelect(valid(in, j), element(op.operands[0], j), identity));
  const int warp_size = target_->warp_size();
  for (int offset = warp_size / 2; offset >= 1; offset /= 2)
    partial = combine(partial, target_->shuffle_xor(partial, offset));
  int warps = threads_ / warp_size;
  if (warps > 1) {
    llvm::Value* buf = scratch(0, warps * 4);
    llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(warp_size - 1));
    llvm::Value* warp = b_.CreateUDiv(tid_, b_.getInt32(warp_size));
    barrier();  // the staging area may still be read by an earlier op
    when(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] { b_.CreateStore(partial, b_.CreateGEP(t, buf, warp)); });
    barrier();
    partial = identity;
    for (int w = 0; w < warps; ++w) partial = combine(partial, b_.CreateLoad(t, b_.CreateConstGEP1_32(t, buf, w)));
    barrier();
  }
  define(op, {round(partial, op.results[0]->type.dtype), {}});
  return true;
}

void GpuLowering::emit_reduce(const ir::Op& op) {
  if (emit_reduce_to_scalar(op)) return;
  const ir::Type& in = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const ir::ReduceKind kind = ir::enum_attr<ir::ReduceKind>(op, "kind");
  int axis = static_cast<int>(op.int_attr("axis"));
  bool arg = ir::is_arg(kind);
  bool fl = in.is_float();
  llvm::Type* acc_t = reg_type(in.element());
  auto in_strides = strides_of(in.shape);
  std::vector<int64_t> kept;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (static_cast<int>(d) != axis) kept.push_back(in_strides[d]);
  llvm::Value* arr = stage(op.operands[0], 0);
  barrier();
  auto reduce_one = [&](llvm::Value* base) -> llvm::Value* {
    // A loop over the reduced axis (not unrolled: it can be long).
    llvm::Value* acc = local(acc_t, reduce_identity(kind, acc_t));
    llvm::Value* best = local(b_.getInt32Ty(), b_.getInt32(0));
    counted_loop(b_.getInt32(0), b_.getInt32(static_cast<int32_t>(in.shape[axis])), 1, [&](llvm::Value* k) {
      llvm::Value* x = staged_load(
          arr, in, b_.CreateAdd(base, b_.CreateMul(k, b_.getInt32(static_cast<int32_t>(in_strides[axis])))));
      llvm::Value* a = b_.CreateLoad(acc_t, acc);
      if (kind == ir::ReduceKind::sum) {
        b_.CreateStore(fl ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x), acc);
        return;
      }
      bool greater = ir::takes_larger(kind);
      llvm::Value* better = fl ? (greater ? b_.CreateFCmpOGT(x, a) : b_.CreateFCmpOLT(x, a))
                               : (greater ? b_.CreateICmpSGT(x, a) : b_.CreateICmpSLT(x, a));
      b_.CreateStore(b_.CreateSelect(better, x, a), acc);
      b_.CreateStore(b_.CreateSelect(better, k, b_.CreateLoad(b_.getInt32Ty(), best)), best);
    });
    return arg ? b_.CreateLoad(b_.getInt32Ty(), best) : round(b_.CreateLoad(acc_t, acc), rt.dtype);
  };
  GVal g;
  if (!rt.is_tensor()) {
    g.scalar = reduce_one(b_.getInt32(0));
  } else {
    for (int64_t j = 0; j < slots_of(rt); ++j) {
      llvm::Value* base = linear(multi_index(element_index(rt, j), rt.shape), kept);
      g.slots.push_back(when_value(valid(rt, j), reg_type(rt.element()), llvm::UndefValue::get(reg_type(rt.element())),
                                   [&] { return reduce_one(base); }));
    }
  }
  barrier();
  define(op, g);
}

}  // namespace tiledist::codegen::gpu
