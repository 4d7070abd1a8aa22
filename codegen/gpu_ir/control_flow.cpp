// Control flow in the GPU IR lowering (codegen/gpu_ir/lowering.h): for, while and if. Scalars are
// uniform, so the whole program takes each branch; a loop carries each scalar and each register
// of its tensors in a phi (a tensor keeps its layout: the region's argument has the init's).
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

std::vector<llvm::PHINode*> LayoutLowering::phis_for(const std::vector<const ir::Value*>& vals,
                                                     const std::vector<LVal>& init, llvm::BasicBlock* from,
                                                     std::vector<LVal>& out) {
  std::vector<llvm::PHINode*> phis;
  out.clear();
  for (size_t i = 0; i < vals.size(); ++i) {
    LVal g;
    llvm::Type* t = reg_type(vals[i]->type.element());
    if (!vals[i]->type.is_tensor()) {  // (shared buffers are never carried: unsupported_op)
      auto* phi = b_.CreatePHI(t, 2);
      phi->addIncoming(init[i].scalar, from);
      phis.push_back(phi);
      g.scalar = phi;
    } else {
      for (llvm::Value* r : init[i].regs) {
        auto* phi = b_.CreatePHI(t, 2);
        phi->addIncoming(r, from);
        phis.push_back(phi);
        g.regs.push_back(phi);
      }
    }
    out.push_back(g);
  }
  return phis;
}

namespace {

/// The values of `g`, in the order phis_for made phis for them.
void flatten(const LVal& g, std::vector<llvm::Value*>& into) {
  if (g.scalar) into.push_back(g.scalar);
  into.insert(into.end(), g.regs.begin(), g.regs.end());
}

}  // namespace

llvm::BasicBlock* LayoutLowering::close_loop(const ir::Op& term, const std::vector<llvm::PHINode*>& phis,
                                             llvm::BasicBlock* header) {
  std::vector<llvm::Value*> next;
  for (const ir::Value* v : term.operands) flatten(v == kept_in_flight_ ? vals_.at(v) : val(v), next);
  TD_ASSERT(next.size() == phis.size(), "a loop yields other values than it carries");
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  b_.CreateBr(header);
  return latch;
}

void LayoutLowering::emit_for(const ir::Op& op) {
  const ir::Block& body = *op.regions[0];
  llvm::Value* lo = val(op.operands[0]).scalar;
  llvm::Value* hi = val(op.operands[1]).scalar;
  llvm::Value* step = val(op.operands[2]).scalar;
  std::vector<const ir::Value*> carried;
  std::vector<LVal> init;
  for (size_t i = 3; i < op.operands.size(); ++i)
    carried.push_back(body.args[i - 2].get()), init.push_back(val(op.operands[i]));
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.end", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lo->getType(), 2, "iv");
  iv->addIncoming(lo, pre);
  std::vector<LVal> now;
  std::vector<llvm::PHINode*> phis = phis_for(carried, init, pre, now);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), body_bb, exit);
  b_.SetInsertPoint(body_bb);
  vals_[body.args[0].get()] = LVal::of(iv);
  for (size_t i = 0; i < carried.size(); ++i) vals_[carried[i]] = now[i];
  // A carried accumulator kept in flight: from the second iteration on, the group before this
  // one's (the first's init is not in flight: waiting for it waits for nothing).
  const int kept = carried_in_flight(op);
  const ir::Value* yielded = kept < 0 ? nullptr : body.terminator()->operands[static_cast<size_t>(kept)];
  const std::string instr = yielded ? wgmma_instr(*yielded->def) : "";
  auto in_flight = [&](const ir::Value* v) {
    wgmma_instr_[v] = instr;
    wgmma_pending_[v] = wgmma_groups_++;
  };
  if (kept >= 0) in_flight(carried[static_cast<size_t>(kept)]);
  const ir::Block* outer = loop_body_;
  const ir::Value* outer_kept = kept_in_flight_;
  loop_body_ = &body;
  kept_in_flight_ = yielded;
  emit_block(body);
  llvm::Value* iv_next = b_.CreateAdd(iv, step);
  iv->addIncoming(iv_next, close_loop(*body.terminator(), phis, header));
  loop_body_ = outer;
  kept_in_flight_ = outer_kept;
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < op.results.size(); ++i) vals_[op.results[i].get()] = now[i];
  if (kept >= 0) {  // (at most the last iteration's group is in flight)
    wgmma_pending_.erase(yielded);
    in_flight(op.results[static_cast<size_t>(kept)].get());
  }
}

int LayoutLowering::carried_in_flight(const ir::Op& loop) const {
  if (!target_->hopper()) return -1;
  const ir::Op& yield = *loop.regions[0]->terminator();
  int found = -1;
  for (size_t i = 0; i < yield.operands.size(); ++i) {
    const ir::Op* d = yield.operands[i]->def;
    if (!d || d->parent != loop.regions[0].get() || d->code != OpCode::Dot ||
        d->results[0]->type.layout->mma != ir::MmaKind::wgmma)
      continue;
    if (found >= 0) return -1;
    found = static_cast<int>(i);
  }
  return found;
}

void LayoutLowering::emit_while(const ir::Op& op) {
  const ir::Block& before = *op.regions[0];
  const ir::Block& after = *op.regions[1];
  std::vector<const ir::Value*> carried;
  std::vector<LVal> init;
  for (size_t i = 0; i < op.operands.size(); ++i)
    carried.push_back(before.args[i].get()), init.push_back(val(op.operands[i]));
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "while.cond", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "while.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.end", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  std::vector<LVal> now;
  std::vector<llvm::PHINode*> phis = phis_for(carried, init, pre, now);
  for (size_t i = 0; i < carried.size(); ++i) vals_[carried[i]] = now[i];
  emit_block(before);
  const ir::Op& cond = *before.terminator();
  std::vector<LVal> forwarded;
  for (size_t i = 1; i < cond.operands.size(); ++i) forwarded.push_back(val(cond.operands[i]));
  b_.CreateCondBr(val(cond.operands[0]).scalar, body_bb, exit);
  b_.SetInsertPoint(body_bb);
  for (size_t i = 0; i < forwarded.size(); ++i) vals_[after.args[i].get()] = forwarded[i];
  emit_block(after);
  close_loop(*after.terminator(), phis, header);
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < op.results.size(); ++i) vals_[op.results[i].get()] = forwarded[i];
}

void LayoutLowering::emit_if(const ir::Op& op) {
  llvm::Value* cond = val(op.operands[0]).scalar;
  auto* then_bb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* else_bb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  b_.CreateCondBr(cond, then_bb, else_bb);
  std::vector<std::vector<llvm::Value*>> arms;
  std::vector<llvm::BasicBlock*> ends;
  std::vector<LVal> shape;  // (the then arm's values, for the results' form)
  for (int arm = 0; arm < 2; ++arm) {
    b_.SetInsertPoint(arm == 0 ? then_bb : else_bb);
    std::vector<llvm::Value*> flat;
    if (op.regions.size() > static_cast<size_t>(arm)) {
      const ir::Block& block = *op.regions[static_cast<size_t>(arm)];
      emit_block(block);
      if (const ir::Op* term = block.terminator(); term && term->code == OpCode::Yield)
        for (size_t i = 0; i < term->operands.size(); ++i) {
          if (arm == 0) shape.push_back(val(term->operands[i]));
          flatten(val(term->operands[i]), flat);
        }
    }
    arms.push_back(flat);
    ends.push_back(b_.GetInsertBlock());
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
  if (op.results.empty()) return;
  TD_ASSERT(arms[0].size() == arms[1].size(), "the arms of an if yield different values");
  size_t k = 0;
  for (size_t i = 0; i < op.results.size(); ++i) {
    LVal g;
    auto phi = [&]() -> llvm::Value* {
      auto* p = b_.CreatePHI(arms[0][k]->getType(), 2);
      p->addIncoming(arms[0][k], ends[0]);
      p->addIncoming(arms[1][k], ends[1]);
      ++k;
      return p;
    };
    if (shape[i].scalar) g.scalar = phi();
    for (size_t j = 0; j < shape[i].regs.size(); ++j) g.regs.push_back(phi());
    vals_[op.results[i].get()] = g;
  }
}

}  // namespace tiledist::codegen::gpu_ir
