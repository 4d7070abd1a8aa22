// Warp specialization (sm_90a, GpuOptions::warp_specialize; codegen/gpu/lowering.h): the plan
// of a producer warpgroup that issues a TMA loop's copies while the consumer warpgroups compute,
// the kernel's entry that splits them, and the producer's slice of the kernel.
#include "codegen/gpu/lowering.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tiledist::codegen::gpu {

llvm::Value* GpuLowering::next_of(llvm::Value* s, int stages) {
  llvm::Value* n = b_.CreateAdd(s, b_.getInt32(1));
  return b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(stages)), b_.getInt32(0), n);
}

llvm::Value* GpuLowering::next_phase(llvm::Value* next_stage, llvm::Value* phase) {
  return b_.CreateSelect(b_.CreateICmpEQ(next_stage, b_.getInt32(0)), b_.CreateXor(phase, b_.getInt32(1)), phase);
}

llvm::Value* GpuLowering::prev_of(llvm::Value* s, int stages) {
  return b_.CreateSelect(b_.CreateICmpEQ(s, b_.getInt32(0)), b_.getInt32(stages - 1), b_.CreateSub(s, b_.getInt32(1)));
}

llvm::Value* GpuLowering::empty_bar(llvm::Value* stage) {
  return b_.CreateGEP(b_.getInt8Ty(), smem_,
                      b_.CreateAdd(b_.getInt32(static_cast<int32_t>(ws_->empty)), b_.CreateMul(stage, b_.getInt32(8))));
}

void GpuLowering::empty_arrive(llvm::Value* stage, llvm::Value* cond) {
  ptx(b_.getVoidTy(), "{\n.reg .pred p;\nsetp.ne.u32 p, $1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}", "r,r",
      {shared_u32(empty_bar(stage)), b_.CreateZExt(cond, b_.getInt32Ty())});
}

bool GpuLowering::from_wait(const ir::Value* v, int depth) {
  if (depth > 64) return true;
  if (auto it = from_wait_.find(v); it != from_wait_.end()) return it->second;
  from_wait_[v] = false;  // (a loop's carried value reaching itself)
  bool r = false;
  if (!v->def) {
    const ir::Op* f = v->owner ? v->owner->parent : nullptr;
    if (f && f->code == OpCode::For)
      r = v->index == 0 ? from_wait(f->operands[0], depth + 1) || from_wait(f->operands[2], depth + 1)
                        : from_wait(f->operands[2 + v->index], depth + 1) ||
                              from_wait(f->regions[0]->terminator()->operands[v->index - 1], depth + 1);
    else
      r = f != nullptr;  // (other regions' arguments: not followed)
  } else if (v->def->code == OpCode::Wait) {
    r = true;
  } else if (v->def->code == OpCode::ConsumeToken) {
    r = from_wait(v->def->operands[0], depth + 1);
  } else if (v->def->code == OpCode::For) {
    const size_t i = v->index;
    r = from_wait(v->def->operands[3 + i], depth + 1) ||
        from_wait(v->def->regions[0]->terminator()->operands[i], depth + 1);
  } else {
    for (const ir::Value* o : v->def->operands) r = r || from_wait(o, depth + 1);
    r = r || !v->def->regions.empty();
  }
  return from_wait_[v] = r;
}

void GpuLowering::plan_warp_specialization(const ir::Op& loop, const PipeOperand& a, const PipeOperand& b) {
  if (threads_ + 128 > 1024 || !ws_allowed_) return;
  WarpSpec w;
  w.loop = &loop;
  bool ok = true;
  std::vector<const ir::Value*> work;
  std::vector<const ir::Value*> counted;  // what decides the iterations and the coordinates
  const ir::Block& body = *loop.regions[0];
  std::function<void(const ir::Value*)> outer = [&](const ir::Value* v) {  // what recompute_scalar reads
    if (!v->def && v->owner == &body) {
      if (v->index == 0) return;
      CarriedStep c = carried_step(v);
      if (!c.init)
        ok = false;
      else
        outer(c.init), outer(c.inc);
    } else if (v->def && v->def->parent == &body) {
      for (const ir::Value* o : v->def->operands) outer(o);
    } else {
      work.push_back(v);
      counted.push_back(v);
    }
  };
  for (const PipeOperand* o : {&a, &b}) {
    for (const ir::Value* s : {o->row_start, o->col_start})
      if (s) outer(s);
    work.push_back(o->base);
  }
  std::function<void(const ir::Block*)> enclose = [&](const ir::Block* blk) {  // the control flow around blk
    for (; blk && blk->parent; blk = blk->parent->parent) {
      const ir::Op* c = blk->parent;
      if (!w.ops.insert(c).second) return;  // (and its own)
      if (c->code == OpCode::For)
        work.insert(work.end(), {c->operands[0], c->operands[1], c->operands[2]});
      else if (c->code == OpCode::If)
        work.push_back(c->operands[0]);
      else
        ok = false;
      if (c->code == OpCode::For)
        counted.insert(counted.end(), {c->operands[0], c->operands[1], c->operands[2]});
      else if (c->code == OpCode::If)
        counted.push_back(c->operands[0]);
    }
  };
  auto carrying = [&](const ir::Op* f) {  // a loop whose carried values the producer needs
    if (f == &loop || f->code != OpCode::For) return void(ok = false);
    if (!w.loops.insert(f).second) return;
    w.ops.insert(f);
    for (const ir::Value* v : f->operands) work.push_back(v);
    for (const ir::Value* v : f->regions[0]->terminator()->operands) work.push_back(v);
    enclose(f->parent);
  };
  w.ops.insert(&loop);
  enclose(loop.parent);
  work.insert(work.end(), {loop.operands[0], loop.operands[1], loop.operands[2]});
  counted.insert(counted.end(), {loop.operands[0], loop.operands[1], loop.operands[2]});
  std::set<const ir::Value*> seen;
  while (ok && !work.empty()) {
    const ir::Value* v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    if (v->type.is_tensor())
      ok = false;
    else if (!v->def) {  // a parameter, or a loop's induction variable or carried value
      if (v->owner == &f_.body) continue;
      const ir::Op* f = v->owner->parent;
      if (v->index > 0)
        carrying(f);
      else if (f == &loop || f->code != OpCode::For)
        ok = false;
      else
        enclose(v->owner);
    } else if (v->def->code == OpCode::For) {
      carrying(v->def);
    } else if (!v->def->regions.empty() ||
               !(v->def->is_pure() || v->def->code == OpCode::Wait || v->def->code == OpCode::SymmAt)) {
      ok = false;
    } else if (w.ops.insert(v->def).second) {
      for (const ir::Value* o : v->def->operands) work.push_back(o);
      enclose(v->def->parent);
    }
  }
  for (const ir::Value* v : counted)
    if (ok && from_wait(v)) ok = false;
  // What runs before the loop, around it: no memory written or ordered but by the producer's waits.
  std::function<bool(const ir::Op&)> orders = [&](const ir::Op& op) {
    if ((op.info().flags & ir::MEM) && op.code != OpCode::Load && op.code != OpCode::SymmAt &&
        !(op.code == OpCode::Wait && w.ops.count(&op)))
      return true;
    for (const auto& r : op.regions)
      for (const auto& inner : r->ops)
        if (orders(*inner)) return true;
    return false;
  };
  for (const ir::Op* around = &loop; ok && around; around = around->parent->parent) {
    for (const auto& op : around->parent->ops) {
      if (op.get() == around) break;
      if (orders(*op)) ok = false;
    }
  }
  if (!ok) return;
  auto p = match_pipeline(loop);
  w.stages = p->stages;
  w.stage_bytes = p->stage_bytes;
  w.full = w.stages * w.stage_bytes;  // (base 0: 1024-byte aligned)
  w.empty = w.full + 8 * w.stages;
  w.end = w.empty + 8 * w.stages;
  smem_bytes_ = std::max(smem_bytes_, w.end);
  smem_floor_ = (w.end + 127) / 128 * 128;
  ws_ = std::move(w);
  find_producer_only_waits(a, b);
}

void GpuLowering::find_producer_only_waits(const PipeOperand& a, const PipeOperand& b) {
  std::map<const ir::Value*, std::vector<std::pair<const ir::Op*, size_t>>> users;
  std::function<void(const ir::Block&)> walk = [&](const ir::Block& blk) {
    for (const auto& op : blk.ops) {
      for (size_t i = 0; i < op->operands.size(); ++i) users[op->operands[i]].push_back({op.get(), i});
      for (const auto& r : op->regions) walk(*r);
    }
  };
  walk(f_.body);
  std::set<const ir::Value*> visiting;
  std::function<bool(const ir::Value*)> to_copies = [&](const ir::Value* v) {
    if (!visiting.insert(v).second) return true;  // (a loop's carried value reaching itself)
    for (auto [u, i] : users[v]) {
      if (u == a.load || u == b.load) {
        if (i != 0) return false;  // (a mask or other value: the consumers' too)
      } else if (u->code == OpCode::Yield && u->parent->parent && u->parent->parent->code == OpCode::For) {
        const ir::Op* f = u->parent->parent;
        if (!to_copies(f->results[i].get()) || !to_copies(u->parent->args[i + 1].get())) return false;
      } else if (u->code == OpCode::For && i >= 3) {
        if (!to_copies(u->results[i - 3].get()) || !to_copies(u->regions[0]->args[i - 2].get())) return false;
      } else if ((u->is_pure() || u->code == OpCode::ConsumeToken) && u->regions.empty() && u->results.size() == 1) {
        if (!to_copies(u->results[0].get())) return false;
      } else {
        return false;
      }
    }
    return true;
  };
  for (const ir::Op* op : ws_->ops)
    if (op->code == OpCode::Wait && to_copies(op->results[0].get())) producer_only_waits_.insert(op);
}

void GpuLowering::emit_warp_specialized_entry() {
  ws_->stage = local(b_.getInt32Ty(), b_.getInt32(0));
  ws_->phase = local(b_.getInt32Ty(), b_.getInt32(0));
  when(is_thread0(), [&] {
    for (int s = 0; s < ws_->stages; ++s) {
      mbar_init(b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, ws_->full + 8 * s), 1);
      mbar_init(b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, ws_->empty + 8 * s), threads_);
    }
    ptx_void("fence.mbarrier_init.release.cluster;");
  });
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});  // (every thread: both sides)
  const bool realloc = threads_ == 256;
  auto* producer = llvm::BasicBlock::Create(ctx_, "producer", fn_);
  auto* consumer = llvm::BasicBlock::Create(ctx_, "consumer", fn_);
  b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(threads_)), producer, consumer);
  b_.SetInsertPoint(producer);
  if (realloc) ptx_void("setmaxnreg.dec.sync.aligned.u32 40;");
  when(b_.CreateICmpEQ(tid_, b_.getInt32(threads_)), [&] {
    auto outer_vals = vals_;
    producer_ = true;
    emit_producer_block(f_.body);
    producer_ = false;
    vals_ = std::move(outer_vals);  // (the consumers' code is not dominated by the producer's)
  });
  b_.CreateRetVoid();
  b_.SetInsertPoint(consumer);
  if (realloc) ptx_void("setmaxnreg.inc.sync.aligned.u32 232;");
}

void GpuLowering::emit_producer_block(const ir::Block& block) {
  for (auto& op : block.ops) {
    if (!ws_->ops.count(op.get())) continue;
    if (op.get() == ws_->loop)
      producer_loop(*op);
    else if (op->code == OpCode::For)
      producer_for(*op);
    else if (op->code == OpCode::If)
      producer_if(*op);
    else
      emit(*op);
  }
}

void GpuLowering::producer_for(const ir::Op& op) {
  const ir::Block& body = *op.regions[0];
  const bool carries = ws_->loops.count(&op) > 0;
  std::vector<ir::Type> types;
  std::vector<GVal> init;
  if (carries)
    for (size_t i = 3; i < op.operands.size(); ++i)
      types.push_back(op.operands[i]->type), init.push_back(val(op.operands[i]));
  LoopBlocks l = open_loop("producer", val(op.operands[0]).scalar, types, init);
  enter_body(l, val(op.operands[1]).scalar);
  vals_[body.args[0].get()] = GVal{l.iv, {}};
  for (size_t i = 0; i < l.carried.size(); ++i) vals_[body.args[i + 1].get()] = l.carried[i];
  emit_producer_block(body);
  close_loop(l, val(op.operands[2]).scalar, carries ? values_of(*body.terminator(), 0) : std::vector<GVal>{});
  for (size_t i = 0; i < l.carried.size(); ++i) vals_[op.results[i].get()] = l.carried[i];
}

void GpuLowering::producer_if(const ir::Op& op) {
  auto* then_bb = llvm::BasicBlock::Create(ctx_, "producer.then", fn_);
  auto* else_bb = llvm::BasicBlock::Create(ctx_, "producer.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "producer.join", fn_);
  b_.CreateCondBr(val(op.operands[0]).scalar, then_bb, else_bb);
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r == 0 ? then_bb : else_bb);
    emit_producer_block(*op.regions[r]);
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
}

void GpuLowering::producer_loop(const ir::Op& loop) {
  Pipeline p = *match_pipeline(loop);
  p.tma = p.ws = true;
  p.a = tma_loops_.at(&loop).first;
  p.b = tma_loops_.at(&loop).second;
  p.base = ws_->base;
  p.bars = ws_->full;
  llvm::Value* lo = val(loop.operands[0]).scalar;
  llvm::Value* hi = val(loop.operands[1]).scalar;
  llvm::Value* step = val(loop.operands[2]).scalar;
  // What the kernel wrote or a wait acquired before (generic proxy) is ordered before the copies.
  ptx_void("fence.proxy.async.global;");
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "producer.copies", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "producer.copy", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "producer.copied", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* j = b_.CreatePHI(b_.getInt32Ty(), 2, "iteration");
  j->addIncoming(b_.getInt32(0), pre);
  llvm::Value* iv = prefetch_iteration(p, lo, step, j);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), body_bb, exit);
  b_.SetInsertPoint(body_bb);
  llvm::Value* stage = b_.CreateLoad(b_.getInt32Ty(), ws_->stage);
  llvm::Value* phase = b_.CreateLoad(b_.getInt32Ty(), ws_->phase);
  // (a buffer's first use waits for the phase before its first: complete at once)
  mbar_wait(empty_bar(stage), b_.CreateXor(phase, b_.getInt32(1)));
  tma_copy(p, stage);
  llvm::Value* next = next_of(stage, p.stages);
  b_.CreateStore(next, ws_->stage);
  b_.CreateStore(next_phase(next, phase), ws_->phase);
  j->addIncoming(b_.CreateAdd(j, b_.getInt32(1)), b_.GetInsertBlock());
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  end_prefetch();
}

}  // namespace tiledist::codegen::gpu
