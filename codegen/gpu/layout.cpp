// The cyclic layout of block tensors (codegen/gpu/lowering.h): which slot of which thread holds
// which element, how wide its vector accesses may be, and the staging of tensors in shared
// memory between two barriers, through which elements move between threads.
#include "codegen/gpu/lowering.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tiledist::codegen::gpu {

int64_t GpuLowering::vec_of(const ir::Type& t) const {
  for (int64_t v = max_vec_; v >= 2; v /= 2)
    if (t.numel() % (v * threads_) == 0) return v;
  return 1;
}

bool GpuLowering::narrow_memory(const ir::Function& f) {
  bool any = false, wide = false;
  f.walk([&](const ir::Op& op) {
    const ir::Type* t = op.code == OpCode::Load    ? &op.results[0]->type
                        : op.code == OpCode::Store ? &op.operands[0]->type
                                                   : nullptr;
    if (!t || !t->is_tensor()) return;
    any = true;
    wide |= ir::dtype_bytes(t->dtype) > 2;
  });
  return any && !wide;
}

int64_t GpuLowering::vector_width(const ir::Type& t, const ir::Value* ptr, const ir::Value* mask) {
  for (int64_t v = vec_of(t); v > 1; v /= 2)
    if (axis_.vectorizable(ptr, mask, v)) return v;
  return 1;
}

llvm::Value* GpuLowering::element_index(const ir::Type& t, int64_t j) {
  int64_t v = vec_of(t);
  llvm::Value* lane = v == 1 ? tid_ : b_.CreateMul(tid_, b_.getInt32(static_cast<int32_t>(v)));
  return b_.CreateAdd(lane, b_.getInt32(static_cast<int32_t>((j / v) * v * threads_ + j % v)));
}

llvm::Value* GpuLowering::valid(const ir::Type& t, int64_t j) {
  if ((j + 1) * threads_ <= t.numel()) return b_.getTrue();
  return b_.CreateICmpSLT(element_index(t, j), b_.getInt32(static_cast<int32_t>(t.numel())));
}

std::vector<int64_t> GpuLowering::strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

std::vector<llvm::Value*> GpuLowering::multi_index(llvm::Value* e, const std::vector<int64_t>& shape) {
  auto strides = strides_of(shape);
  std::vector<llvm::Value*> idx;
  for (size_t d = 0; d < shape.size(); ++d)
    idx.push_back(b_.CreateURem(b_.CreateUDiv(e, b_.getInt32(static_cast<int32_t>(strides[d]))),
                                b_.getInt32(static_cast<int32_t>(shape[d]))));
  return idx;
}

llvm::Value* GpuLowering::linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& strides) {
  llvm::Value* off = b_.getInt32(0);
  for (size_t d = 0; d < idx.size(); ++d)
    if (strides[d]) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt32(static_cast<int32_t>(strides[d]))));
  return off;
}

llvm::Value* GpuLowering::scratch(int64_t base, int64_t bytes) {
  smem_bytes_ = std::max(smem_bytes_, smem_floor_ + base + bytes);
  return b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, smem_floor_ + base);
}

void GpuLowering::barrier() {
  TD_ASSERT(!producer_, "a barrier in the producer's code");
  if (ws_)
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_sync_cnt, {}, {b_.getInt32(1), b_.getInt32(threads_)});
  else
    target_->barrier();
}

int64_t GpuLowering::elem_bytes(const ir::Type& t) {
  return static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(buf_type(t)));
}

llvm::Value* GpuLowering::stage(const ir::Value* v, int64_t base) {
  const ir::Type& t = v->type;
  llvm::Value* arr = scratch(base, t.numel() * elem_bytes(t));
  const GVal& g = val(v);
  for (int64_t j = 0; j < slots_of(t); ++j)
    when(valid(t, j), [&] {
      llvm::Value* x = g.slots[j];
      if (!t.is_ptr && t.dtype == DType::i1) x = b_.CreateZExt(x, b_.getInt8Ty());
      b_.CreateStore(x, b_.CreateGEP(buf_type(t), arr, element_index(t, j)));
    });
  return arr;
}

llvm::Value* GpuLowering::staged_load(llvm::Value* arr, const ir::Type& t, llvm::Value* index) {
  llvm::Value* x = b_.CreateLoad(buf_type(t), b_.CreateGEP(buf_type(t), arr, index));
  return !t.is_ptr && t.dtype == DType::i1 ? b_.CreateTrunc(x, b_.getInt1Ty()) : x;
}

llvm::Value* GpuLowering::from_thread0(llvm::Type* t, const std::function<llvm::Value*()>& value) {
  if (producer_) return value();  // (one thread runs the producer's code)
  llvm::Value* v = when_value(is_thread0(), t, llvm::UndefValue::get(t), value);
  int64_t bytes = static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(t));
  llvm::Value* slot = scratch(0, bytes);
  barrier();
  when(is_thread0(), [&] { b_.CreateStore(v, slot); });
  barrier();
  llvm::Value* r = b_.CreateLoad(t, slot);
  barrier();
  return r;
}

}  // namespace tiledist::codegen::gpu
