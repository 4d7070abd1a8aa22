// Loads, stores, memcpy and atomics on the GPU (codegen/gpu/lowering.h): vectorized where the
// axis analysis allows, stores of an MMA accumulator from its own layout, copies by the
// program's threads, atomics in the order and scope the kernel names.
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

void GpuLowering::emit_load(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  DType d = rt.dtype;
  auto one = [&](int64_t j, llvm::Value* ok) -> llvm::Value* {
    llvm::Value* p = element(op.operands[0], j);
    llvm::Value* mask = op.operands.size() > 1 ? element(op.operands[1], j) : nullptr;
    llvm::Value* other =
        op.operands.size() > 2 ? element(op.operands[2], j) : llvm::Constant::getNullValue(reg_type(rt.element()));
    llvm::Value* cond = mask ? (ok == b_.getTrue() ? mask : b_.CreateAnd(ok, mask)) : ok;
    return when_value(cond, reg_type(rt.element()), other, [&] { return from_mem(b_.CreateLoad(mem_type(d), p), d); });
  };
  // A scalar must be the same in every thread (branches on it contain barriers): thread 0
  // loads it and shares it, rather than each thread reading memory that may be changing.
  if (!rt.is_tensor()) return define(op, {from_thread0(reg_type(rt), [&] { return one(0, b_.getTrue()); }), {}});
  GVal g;
  const ir::Value* mask = op.operands.size() > 1 ? op.operands[1] : nullptr;
  int64_t v = vector_width(rt, op.operands[0], mask);
  if (v > 1) {
    // Each vector of slots is contiguous and aligned in memory, and masked as a whole.
    auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
    llvm::Align align(v * ir::dtype_bytes(d));
    for (int64_t j = 0; j < slots_of(rt); j += v) {
      llvm::Value* on = mask ? element(mask, j) : b_.getTrue();
      llvm::Value* x = when_value(on, vt, llvm::Constant::getNullValue(vt),
                                  [&] { return b_.CreateAlignedLoad(vt, element(op.operands[0], j), align); });
      for (int64_t k = 0; k < v; ++k) {
        llvm::Value* e = from_mem(b_.CreateExtractElement(x, uint64_t(k)), d);
        if (op.operands.size() > 2) e = b_.CreateSelect(on, e, element(op.operands[2], j + k));
        g.slots.push_back(e);
      }
    }
    return define(op, g);
  }
  for (int64_t j = 0; j < slots_of(rt); ++j) g.slots.push_back(one(j, valid(rt, j)));
  define(op, g);
}

bool GpuLowering::stores_from_mma(const ir::Op& op) {
  if (op.code != OpCode::Store || !vals_.count(op.operands[1]) || !raw(op.operands[1]).mma) return false;
  return recomputable(op.operands[0]) && (op.operands.size() < 3 || recomputable(op.operands[2]));
}

void GpuLowering::emit_store_from_mma(const ir::Op& op) {
  const ir::Type& pt = op.operands[0]->type;
  DType d = pt.dtype;
  const ir::Value* mask = op.operands.size() > 2 ? op.operands[2] : nullptr;
  const GVal& g = raw(op.operands[1]);
  MmaTiles m = mma_tiles(pt);
  bool pairs = !m.tile && axis_.vectorizable(op.operands[0], mask, 2);  // (MFMA: a thread's registers are rows)
  llvm::Type* mt = mem_type(d);
  for (int64_t i = 0; i < m.per_warp; ++i)
    when(tile_ok(m, i), [&] {
      llvm::Value* tile = tile_of(m, i);
      for (int r = 0; r < m.regs; r += pairs ? 2 : 1) {
        llvm::Value* e = mma_index(m, tile, r);
        llvm::Value* ok = mask ? recompute(mask, e) : b_.getTrue();
        when(ok, [&] {
          llvm::Value* p = recompute(op.operands[0], e);
          if (!pairs) return void(b_.CreateStore(to_mem(g.slots[i * m.regs + r], d), p));
          llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, 2));
          v = b_.CreateInsertElement(v, to_mem(g.slots[i * m.regs + r], d), uint64_t{0});
          v = b_.CreateInsertElement(v, to_mem(g.slots[i * m.regs + r + 1], d), uint64_t{1});
          b_.CreateAlignedStore(v, p, llvm::Align(2 * ir::dtype_bytes(d)));
        });
      }
    });
}

void GpuLowering::emit_store(const ir::Op& op) {
  if (stores_from_mma(op)) return emit_store_from_mma(op);
  const ir::Type& pt = op.operands[0]->type;
  DType d = pt.dtype;
  auto one = [&](int64_t j, llvm::Value* ok) {
    llvm::Value* mask = op.operands.size() > 2 ? element(op.operands[2], j) : nullptr;
    llvm::Value* cond = mask ? (ok == b_.getTrue() ? mask : b_.CreateAnd(ok, mask)) : ok;
    when(cond, [&] { b_.CreateStore(to_mem(element(op.operands[1], j), d), element(op.operands[0], j)); });
  };
  if (!pt.is_tensor()) return one(0, is_thread0());
  const ir::Value* mask = op.operands.size() > 2 ? op.operands[2] : nullptr;
  int64_t v = vector_width(pt, op.operands[0], mask);
  if (v > 1) {
    auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
    llvm::Align align(v * ir::dtype_bytes(d));
    for (int64_t j = 0; j < slots_of(pt); j += v)
      when(mask ? element(mask, j) : b_.getTrue(), [&] {
        llvm::Value* x = llvm::PoisonValue::get(vt);
        for (int64_t k = 0; k < v; ++k)
          x = b_.CreateInsertElement(x, to_mem(element(op.operands[1], j + k), d), uint64_t(k));
        b_.CreateAlignedStore(x, element(op.operands[0], j), align);
      });
    return;
  }
  for (int64_t j = 0; j < slots_of(pt); ++j) one(j, valid(pt, j));
}

void GpuLowering::emit_memcpy(const ir::Op& op) {
  llvm::Value* dst = global_ptr(val(op.operands[0]).scalar);
  llvm::Value* src = global_ptr(val(op.operands[1]).scalar);
  llvm::Value* n = b_.CreateSExtOrTrunc(val(op.operands[2]).scalar, b_.getInt64Ty());
  barrier();
  copy_by_threads(dst, src, n, threads_);
  barrier();
}

void GpuLowering::emit_atomic(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  bool cas = op.code == OpCode::AtomicCAS;
  const std::optional<ir::RmwKind> kind = atomic_kind(op);
  const ir::MemOrder order = ir::enum_attr<ir::MemOrder>(op, "order");
  const ir::MemScope scope = ir::enum_attr<ir::MemScope>(op, "scope");
  const bool used = uses_[op.results[0].get()] > 0;
  auto one = [&](int64_t j, llvm::Value* ok) -> llvm::Value* {
    llvm::Value* p = element(op.operands[0], j);
    llvm::Value* v = element(op.operands[1], j);
    llvm::Value* mask = !cas && op.operands.size() > 2 ? element(op.operands[2], j) : nullptr;
    llvm::Value* cond = mask ? b_.CreateAnd(ok, mask) : ok;
    llvm::Type* t = reg_type(rt.element());
    return when_value(cond, t, llvm::Constant::getNullValue(t), [&] {
      return target_->atomic(kind, rt.dtype, p, v, cas ? element(op.operands[2], j) : nullptr, order, scope, used);
    });
  };
  if (!rt.is_tensor()) {
    // One thread performs it for the program; a releasing atomic must follow every thread's
    // earlier writes, so the program's threads meet first.
    if (order != ir::MemOrder::relaxed && order != ir::MemOrder::acquire) barrier();
    if (uses_[op.results[0].get()] == 0) {  // nothing to share: an acquire still orders what follows
      when(is_thread0(), [&] { one(0, b_.getTrue()); });
      if (order != ir::MemOrder::relaxed && order != ir::MemOrder::release) barrier();
      return define(op, {llvm::UndefValue::get(reg_type(rt)), {}});
    }
    return define(op, {from_thread0(reg_type(rt), [&] { return one(0, b_.getTrue()); }), {}});
  }
  GVal g;
  for (int64_t j = 0; j < slots_of(rt); ++j) g.slots.push_back(one(j, valid(rt, j)));
  define(op, g);
}

}  // namespace tiledist::codegen::gpu
