// The host lowering's memory ops (codegen/host/lowering.h): loads and stores (bounds-checked
// where asked), atomics, and the GPU IR's shared-memory buffers and copies, done at once.
#include "codegen/host/lowering.h"

namespace tiledist::codegen::host {

llvm::Value* HostLowering::guarded(llvm::Value* mask, llvm::Value* addr, int64_t bytes, bool is_store,
                                   llvm::Type* result, llvm::Value* fallback,
                                   const std::function<llvm::Value*()>& access) {
  llvm::Value* ok = mask;
  if (opts_.check_bounds) {
    auto check = helper(kHostHelperCheckAccess, b_.getInt32Ty(),
                        {b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty(), b_.getInt32Ty()});
    auto call_check = [&] {
      return b_.CreateICmpNE(b_.CreateCall(check, {rt_, addr, b_.getInt64(bytes), b_.getInt32(is_store)}),
                             b_.getInt32(0));
    };
    // Only accesses the mask enables are checked.
    ok = ok ? when_value(ok, b_.getInt1Ty(), b_.getFalse(), call_check) : call_check();
  }
  if (!ok) return access();
  return when_value(ok, result, fallback, access);
}

llvm::Value* HostLowering::loaded_element(const ir::Op& op, size_t first, DType d, llvm::Value* i) {
  llvm::Type* rt = reg_type(ir::Type::scalar(d));
  llvm::Value* p = element(op.operands[first], i);
  llvm::Value* mask = op.operands.size() > first + 1 ? element(op.operands[first + 1], i) : nullptr;
  llvm::Value* other =
      op.operands.size() > first + 2 ? element(op.operands[first + 2], i) : llvm::Constant::getNullValue(rt);
  return guarded(mask, p, ir::dtype_bytes(d), false, rt, other,
                 [&] { return from_mem(b_.CreateLoad(mem_type(d), p), d); });
}

void HostLowering::emit_load(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  auto one = [&](llvm::Value* i) { return loaded_element(op, 0, rt.dtype, i); };
  if (!rt.is_tensor()) {
    vals_[op.results[0].get()] = CVal{one(nullptr), nullptr};
    return;
  }
  llvm::Value* buf = alloc_buf(rt);
  loop(rt.numel(), [&](llvm::Value* i) { buf_store(buf, rt, i, one(i)); });
  vals_[op.results[0].get()] = CVal{nullptr, buf};
}

void HostLowering::emit_async_copy(const ir::Op& op) {
  const ir::Type& bt = op.operands[0]->type;
  const ir::Type& pt = op.operands[2]->type;
  llvm::Value* buf = val(op.operands[0]).buf;
  llvm::Value* first =
      b_.CreateMul(b_.CreateSExt(val(op.operands[1]).scalar, b_.getInt64Ty()), b_.getInt64(pt.numel()));
  loop(pt.numel(),
       [&](llvm::Value* i) { buf_store(buf, bt, b_.CreateAdd(first, i), loaded_element(op, 2, bt.dtype, i)); });
}

void HostLowering::emit_async_tma_copy(const ir::Op& op) {
  const ir::Type& bt = op.operands[0]->type;
  const int64_t rows = bt.shape[1], cols = bt.shape[2];
  auto r = runtime::TmaRecipe::parse(op.str_attr("tensor"));
  TD_ASSERT(r, "a malformed tensor map recipe");
  llvm::Type* i64 = b_.getInt64Ty();
  auto size = [&](const runtime::TmaRecipe::Dim& d) {
    llvm::Value* v = b_.getInt64(d.value);
    for (int p : d.params)
      v = b_.CreateMul(v, b_.CreateSExtOrTrunc(val(f_.body.args[static_cast<size_t>(p)].get()).scalar, i64));
    return v;
  };
  llvm::Value* base = val(f_.body.args[static_cast<size_t>(r->pointer)].get()).scalar;
  llvm::Value* buf = val(op.operands[0]).buf;
  llvm::Value* first = b_.CreateMul(b_.CreateSExt(val(op.operands[1]).scalar, i64), b_.getInt64(rows * cols));
  when(val(op.operands[3]).scalar, [&] {
    nest({rows, cols}, [&](const std::vector<llvm::Value*>& at) {
      llvm::Value* inside = b_.getTrue();
      llvm::Value* offset = b_.getInt64(0);
      for (size_t d = 0; d < r->dims.size(); ++d) {
        llvm::Value* c = b_.CreateSExt(val(op.operands[4 + d]).scalar, i64);
        if (d < 2) c = b_.CreateAdd(c, at[1 - d]);  // (dimension 0 runs along the tile's row)
        inside = b_.CreateAnd(inside,
                              b_.CreateAnd(b_.CreateICmpSGE(c, b_.getInt64(0)), b_.CreateICmpSLT(c, size(r->dims[d]))));
        offset = b_.CreateAdd(offset, d ? b_.CreateMul(c, size(r->strides[d - 1])) : c);
      }
      llvm::Type* mt = mem_type(bt.dtype);
      llvm::Value* x = when_value(inside, reg_type(ir::Type::scalar(bt.dtype)),
                                  llvm::Constant::getNullValue(reg_type(ir::Type::scalar(bt.dtype))), [&] {
                                    return from_mem(b_.CreateLoad(mt, b_.CreateGEP(mt, base, offset)), bt.dtype);
                                  });
      buf_store(buf, bt, b_.CreateAdd(first, b_.CreateAdd(b_.CreateMul(at[0], b_.getInt64(cols)), at[1])), x);
    });
  });
}

void HostLowering::emit_local_load(const ir::Op& op) {
  const ir::Type& bt = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const int64_t rows = bt.shape[bt.shape.size() - 2], cols = bt.shape.back();
  const bool trans = op.has_attr("perm") && op.ints_attr("perm")[0] == 1;
  llvm::Value* src = val(op.operands[0]).buf;
  llvm::Value* first =
      b_.CreateMul(b_.CreateSExt(val(op.operands[1]).scalar, b_.getInt64Ty()), b_.getInt64(rows * cols));
  llvm::Value* out = alloc_buf(rt);
  nest(rt.shape, [&](const std::vector<llvm::Value*>& at) {  // at: (row, col) of the result
    llvm::Value* from = trans ? linear({at[1], at[0]}, {cols, 1}) : linear(at, {cols, 1});
    buf_store(out, rt, linear(at, {rt.shape[1], 1}), buf_load(src, bt, b_.CreateAdd(first, from)));
  });
  vals_[op.results[0].get()] = CVal{nullptr, out};
}

void HostLowering::emit_store(const ir::Op& op) {
  const ir::Type& pt = op.operands[0]->type;
  DType d = pt.dtype;
  auto one = [&](llvm::Value* i) {
    llvm::Value* p = element(op.operands[0], i);
    llvm::Value* v = element(op.operands[1], i);
    llvm::Value* mask = op.operands.size() > 2 ? element(op.operands[2], i) : nullptr;
    guarded(mask, p, ir::dtype_bytes(d), true, nullptr, nullptr, [&]() -> llvm::Value* {
      b_.CreateStore(to_mem(v, d), p);
      return nullptr;
    });
  };
  if (!pt.is_tensor()) return one(nullptr);
  loop(pt.numel(), one);
}

void HostLowering::emit_atomic(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  DType d = rt.dtype;
  bool cas = op.code == OpCode::AtomicCAS;
  auto one = [&](llvm::Value* i) -> llvm::Value* {
    llvm::Value* p = element(op.operands[0], i);
    llvm::Value* v = element(op.operands[1], i);
    llvm::Value* mask = !cas && op.operands.size() > 2 ? element(op.operands[2], i) : nullptr;
    llvm::Value* zero = llvm::Constant::getNullValue(reg_type(rt.element()));
    return guarded(mask, p, ir::dtype_bytes(d), true, reg_type(rt.element()), zero,
                   [&] { return atomic_update(op, p, v, cas ? element(op.operands[2], i) : nullptr); });
  };
  if (!rt.is_tensor()) {
    vals_[op.results[0].get()] = CVal{one(nullptr), nullptr};
    return;
  }
  llvm::Value* buf = alloc_buf(rt);
  loop(rt.numel(), [&](llvm::Value* i) { buf_store(buf, rt, i, one(i)); });
  vals_[op.results[0].get()] = CVal{nullptr, buf};
}

}  // namespace tiledist::codegen::host
