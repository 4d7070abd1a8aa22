// The host lowering's reductions, dots and control flow (codegen/host/lowering.h).
#include "codegen/host/lowering.h"

namespace tiledist::codegen::host {

void HostLowering::emit_reduce(const ir::Op& op) {
  const ir::Type& in = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const ir::ReduceKind kind = ir::enum_attr<ir::ReduceKind>(op, "kind");
  int axis = static_cast<int>(op.int_attr("axis"));
  bool arg = ir::is_arg(kind);
  bool fl = in.is_float();
  llvm::Type* acc_t = reg_type(in.element());
  auto in_strides = strides_of(in.shape);
  std::vector<int64_t> out_shape = rt.shape;
  std::vector<int64_t> outer_strides;  // input strides of the kept dimensions
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (static_cast<int>(d) != axis) outer_strides.push_back(in_strides[d]);
  llvm::Value* src = val(op.operands[0]).buf;
  llvm::Value* out_buf = rt.is_tensor() ? alloc_buf(rt) : nullptr;
  llvm::Value* scalar_slot = nullptr;
  if (!out_buf) {
    // A rank-0 result: accumulate through a stack slot so the value leaves the loop nest.
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    scalar_slot = entry.CreateAlloca(reg_type(rt));
  }
  auto out_strides = strides_of(out_shape);
  auto body = [&](const std::vector<llvm::Value*>& idx) {
    llvm::Value* base = linear(idx, outer_strides);
    llvm::Value* init = reduce_identity(kind, acc_t);
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::Value* acc_slot = entry.CreateAlloca(acc_t);
    llvm::Value* idx_slot = entry.CreateAlloca(b_.getInt32Ty());
    b_.CreateStore(init, acc_slot);
    b_.CreateStore(b_.getInt32(0), idx_slot);
    loop(in.shape[axis], [&](llvm::Value* k) {
      llvm::Value* x = buf_load(src, in, b_.CreateAdd(base, b_.CreateMul(k, b_.getInt64(in_strides[axis]))));
      llvm::Value* acc = b_.CreateLoad(acc_t, acc_slot);
      llvm::Value* next;
      if (kind == ir::ReduceKind::sum) {
        next = fl ? b_.CreateFAdd(acc, x) : b_.CreateAdd(acc, x);
      } else {
        bool greater = ir::takes_larger(kind);
        llvm::Value* better = fl ? (greater ? b_.CreateFCmpOGT(x, acc) : b_.CreateFCmpOLT(x, acc))
                                 : (greater ? b_.CreateICmpSGT(x, acc) : b_.CreateICmpSLT(x, acc));
        next = b_.CreateSelect(better, x, acc);
        if (arg) {
          llvm::Value* cur = b_.CreateLoad(b_.getInt32Ty(), idx_slot);
          b_.CreateStore(b_.CreateSelect(better, b_.CreateTrunc(k, b_.getInt32Ty()), cur), idx_slot);
        }
      }
      b_.CreateStore(next, acc_slot);
    });
    llvm::Value* result =
        arg ? b_.CreateLoad(b_.getInt32Ty(), idx_slot) : round(b_.CreateLoad(acc_t, acc_slot), rt.dtype);
    if (out_buf)
      buf_store(out_buf, rt, linear(idx, out_strides), result);
    else
      b_.CreateStore(result, scalar_slot);
  };
  nest(out_shape, body);
  if (out_buf)
    vals_[op.results[0].get()] = CVal{nullptr, out_buf};
  else
    vals_[op.results[0].get()] = CVal{b_.CreateLoad(reg_type(rt), scalar_slot), nullptr};
}

void HostLowering::emit_dot(const ir::Op& op) {
  const ir::Type& at = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  int64_t M = at.shape[0], K = at.shape[1], N = rt.shape[1];
  llvm::Value* a = val(op.operands[0]).buf;
  llvm::Value* bb = val(op.operands[1]).buf;
  llvm::Value* out = alloc_buf(rt);
  copy_buf(out, val(op.operands[2]).buf, rt);
  llvm::Type* f32 = b_.getFloatTy();
  bool f64_in = at.dtype == DType::f64;
  loop(M, [&](llvm::Value* m) {
    loop(K, [&](llvm::Value* k) {
      llvm::Value* av = buf_load(a, at, b_.CreateAdd(b_.CreateMul(m, b_.getInt64(K)), k));
      if (f64_in) av = b_.CreateFPTrunc(av, f32);
      loop(N, [&](llvm::Value* n) {
        llvm::Value* bv = buf_load(bb, at, b_.CreateAdd(b_.CreateMul(k, b_.getInt64(N)), n));
        if (f64_in) bv = b_.CreateFPTrunc(bv, f32);
        llvm::Value* ci = b_.CreateAdd(b_.CreateMul(m, b_.getInt64(N)), n);
        llvm::Value* c = buf_load(out, rt, ci);
        llvm::Value* r = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32}, {av, bv, c});
        buf_store(out, rt, ci, r);
      });
    });
  });
  vals_[op.results[0].get()] = CVal{nullptr, out};
}

void HostLowering::emit_for(const ir::Op& op) {
  const ir::Block& body = *op.regions[0];
  std::vector<const ir::Value*> init(op.operands.begin() + 3, op.operands.end());
  std::vector<ir::Type> types;
  for (auto* v : init) types.push_back(v->type);
  llvm::Value* lo = val(op.operands[0]).scalar;
  llvm::Value* hi = val(op.operands[1]).scalar;
  llvm::Value* step = val(op.operands[2]).scalar;
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.end", fn_);
  std::vector<llvm::PHINode*> phis;
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto slots = carried_slots(init, types, header, pre, phis);
  pre = b_.GetInsertBlock();
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lo->getType(), 2, "iv");
  iv->addIncoming(lo, pre);
  // Scalar phis were created first in the header; the preheader edge is their first input.
  for (auto* phi : phis)
    if (phi) phi->setIncomingBlock(0, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), body_bb, exit);
  b_.SetInsertPoint(body_bb);
  vals_[body.args[0].get()] = CVal{iv, nullptr};
  for (size_t i = 0; i < slots.size(); ++i) vals_[body.args[i + 1].get()] = slots[i];
  emit_block(body);
  auto scalars = carry(*body.terminator(), 0, slots);
  llvm::Value* next = b_.CreateAdd(iv, step);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  iv->addIncoming(next, latch);
  for (size_t i = 0; i < phis.size(); ++i)
    if (phis[i]) phis[i]->addIncoming(scalars[i], latch);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < slots.size(); ++i) vals_[op.results[i].get()] = slots[i];
}

void HostLowering::emit_if(const ir::Op& op) {
  auto* then_bb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* else_bb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  std::vector<CVal> out;
  for (auto& r : op.results) out.push_back(CVal{nullptr, r->type.is_tensor() ? alloc_buf(r->type) : nullptr});
  b_.CreateCondBr(val(op.operands[0]).scalar, then_bb, else_bb);
  std::vector<std::pair<std::vector<llvm::Value*>, llvm::BasicBlock*>> incoming;
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r == 0 ? then_bb : else_bb);
    emit_block(*op.regions[r]);
    const ir::Op& term = *op.regions[r]->terminator();
    std::vector<llvm::Value*> scalars;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].buf) copy_buf(out[i].buf, val(term.operands[i]).buf, term.operands[i]->type);
      scalars.push_back(out[i].buf ? nullptr : val(term.operands[i]).scalar);
    }
    incoming.emplace_back(scalars, b_.GetInsertBlock());
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].buf) {
      llvm::PHINode* phi = b_.CreatePHI(reg_type(op.results[i]->type), 2);
      for (auto& [vals, bb] : incoming) phi->addIncoming(vals[i], bb);
      out[i].scalar = phi;
    }
    vals_[op.results[i].get()] = out[i];
  }
}

void HostLowering::emit_while(const ir::Op& op) {
  const ir::Block& before = *op.regions[0];
  const ir::Block& after = *op.regions[1];
  std::vector<const ir::Value*> init(op.operands.begin(), op.operands.end());
  std::vector<ir::Type> types;
  for (auto* v : init) types.push_back(v->type);
  auto* header = llvm::BasicBlock::Create(ctx_, "while.cond", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "while.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.end", fn_);
  std::vector<llvm::PHINode*> phis;
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto slots = carried_slots(init, types, header, pre, phis);
  pre = b_.GetInsertBlock();
  for (auto* phi : phis)
    if (phi) phi->setIncomingBlock(0, pre);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  for (size_t i = 0; i < slots.size(); ++i) vals_[before.args[i].get()] = slots[i];
  emit_block(before);
  const ir::Op& cond = *before.terminator();
  // The values the condition forwards: to the body's arguments and to the results.
  std::vector<CVal> forwarded;
  for (size_t i = 1; i < cond.operands.size(); ++i) forwarded.push_back(val(cond.operands[i]));
  b_.CreateCondBr(val(cond.operands[0]).scalar, body_bb, exit);
  b_.SetInsertPoint(body_bb);
  for (size_t i = 0; i < forwarded.size(); ++i) vals_[after.args[i].get()] = forwarded[i];
  emit_block(after);
  auto scalars = carry(*after.terminator(), 0, slots);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  for (size_t i = 0; i < phis.size(); ++i)
    if (phis[i]) phis[i]->addIncoming(scalars[i], latch);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < forwarded.size(); ++i) vals_[op.results[i].get()] = forwarded[i];
}

}  // namespace tiledist::codegen::host
