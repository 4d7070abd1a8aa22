// Control flow on the GPU (codegen/gpu/lowering.h): for, if and while. Scalars are uniform, so
// branches are taken by the whole CTA; loops carry scalars and every slot of their tensors as
// phis. A pipelined loop's prologue, stages and epilogue are set up around its body here (the
// machinery itself: pipeline.cpp, tma.cpp, warp_specialization.cpp).
#include "codegen/gpu/lowering.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tiledist::codegen::gpu {

std::vector<GVal> GpuLowering::carried_phis(const std::vector<ir::Type>& types, const std::vector<GVal>& init,
                                            llvm::BasicBlock* header, llvm::BasicBlock* pre) {
  llvm::IRBuilder<> hb(header, header->begin());
  std::vector<GVal> out;
  for (size_t i = 0; i < types.size(); ++i) {
    GVal g;
    llvm::Type* t = reg_type(types[i].element());
    if (!types[i].is_tensor()) {
      auto* phi = hb.CreatePHI(t, 2);
      phi->addIncoming(init[i].scalar, pre);
      g.scalar = phi;
    } else {
      g.mma = init[i].mma;
      for (size_t j = 0; j < init[i].slots.size(); ++j) {
        auto* phi = hb.CreatePHI(t, 2);
        phi->addIncoming(init[i].slots[j], pre);
        g.slots.push_back(phi);
      }
    }
    out.push_back(g);
  }
  return out;
}

void GpuLowering::close_phis(const std::vector<GVal>& phis, const std::vector<GVal>& next, llvm::BasicBlock* latch) {
  for (size_t i = 0; i < phis.size(); ++i) {
    if (phis[i].scalar) llvm::cast<llvm::PHINode>(phis[i].scalar)->addIncoming(next[i].scalar, latch);
    for (size_t j = 0; j < phis[i].slots.size(); ++j)
      llvm::cast<llvm::PHINode>(phis[i].slots[j])->addIncoming(next[i].slots[j], latch);
  }
}

std::vector<GVal> GpuLowering::values_of(const ir::Op& term, size_t skip) {
  std::vector<GVal> out;
  for (size_t i = skip; i < term.operands.size(); ++i) out.push_back(val(term.operands[i]));
  converted_.clear();  // conversions made here belong to this point of the region only
  return out;
}

GpuLowering::LoopBlocks GpuLowering::open_loop(const std::string& name, llvm::Value* lo,
                                               const std::vector<ir::Type>& types, const std::vector<GVal>& init) {
  LoopBlocks l{b_.GetInsertBlock(),
               llvm::BasicBlock::Create(ctx_, name + ".header", fn_),
               llvm::BasicBlock::Create(ctx_, name + ".body", fn_),
               llvm::BasicBlock::Create(ctx_, name + ".end", fn_),
               nullptr,
               {}};
  b_.CreateBr(l.header);
  l.carried = carried_phis(types, init, l.header, l.pre);
  b_.SetInsertPoint(l.header);
  l.iv = b_.CreatePHI(lo->getType(), 2, "iv");
  l.iv->addIncoming(lo, l.pre);
  return l;
}

void GpuLowering::enter_body(const LoopBlocks& l, llvm::Value* hi) {
  b_.CreateCondBr(b_.CreateICmpSLT(l.iv, hi), l.body, l.exit);
  b_.SetInsertPoint(l.body);
}

void GpuLowering::close_loop(const LoopBlocks& l, llvm::Value* step, const std::vector<GVal>& next,
                             const std::function<void(llvm::BasicBlock*)>& more) {
  llvm::Value* iv_next = b_.CreateAdd(l.iv, step);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  l.iv->addIncoming(iv_next, latch);
  if (more) more(latch);
  close_phis(l.carried, next, latch);
  b_.CreateBr(l.header);
  b_.SetInsertPoint(l.exit);
}

void GpuLowering::emit_for(const ir::Op& op) {
  const ir::Block& body = *op.regions[0];
  std::vector<ir::Type> types;
  std::vector<GVal> init;
  // A carried value that the body's last word makes with an MMA dot stays in the MMA layout,
  // as does one already in it that the body updates by arithmetic done in it (an epilogue's
  // sum of loaded tiles: s + load(...)).
  const ir::Op& yield = *body.terminator();
  std::vector<bool> as_mma;
  for (size_t i = 3; i < op.operands.size(); ++i) {
    const ir::Op* def = yield.operands[i - 3]->def;
    const ir::Value* init = op.operands[i];
    as_mma.push_back(def && ((def->code == OpCode::Dot && mma_eligible(*def)) ||
                             (vals_.count(init) && raw(init).mma && updates_in_mma(*def, body.args[i - 2].get()))));
  }
  for (size_t i = 3; i < op.operands.size(); ++i) {
    types.push_back(op.operands[i]->type);
    init.push_back(as_mma[i - 3] ? mma_from(op.operands[i]) : val(op.operands[i]));
  }
  converted_.clear();
  llvm::Value* lo = val(op.operands[0]).scalar;
  llvm::Value* hi = val(op.operands[1]).scalar;
  llvm::Value* step = val(op.operands[2]).scalar;
  std::optional<Pipeline> pipe = match_pipeline(op);
  TD_ASSERT(!ws_ || ws_->loop != &op || pipe, "the warp-specialized loop lost its pipeline");
  int64_t outer_floor = smem_floor_;
  if (pipe) {
    if (auto it = tma_loops_.find(&op); pipe->wgmma && it != tma_loops_.end()) {
      pipe->tma = true;
      pipe->a = it->second.first;
      pipe->b = it->second.second;
    }
    pipe->ws = ws_ && ws_->loop == &op;
  }
  if (pipe && pipe->ws) {  // buffers and mbarriers set up at the kernel's start; no prologue
    TD_ASSERT(pipe->tma && pipe->stages == ws_->stages && pipe->stage_bytes == ws_->stage_bytes,
              "the warp-specialized loop changed");
    pipe->base = ws_->base;
    pipe->bars = ws_->full;
  } else if (pipe) {
    // wgmma's swizzle atoms (and descriptors' base offset 0) need 1024-byte aligned stages.
    const int64_t align = pipe->wgmma ? 1024 : 128;
    pipe->base = (smem_floor_ + align - 1) / align * align;
    pipe->bars = pipe->base + pipe->stages * pipe->stage_bytes;
    const int64_t end = pipe->bars + (pipe->tma ? 8 * pipe->stages : 0);
    smem_bytes_ = std::max(smem_bytes_, end);
    smem_floor_ = (end + 127) / 128 * 128;
    // The buffers may have been written as scratch (generic proxy) by any thread, which TMA
    // (async proxy) now overwrites; and may still be read by an earlier op.
    if (pipe->tma) ptx_void("fence.proxy.async.shared::cta;");
    barrier();
    if (pipe->tma) {
      when(is_thread0(), [&] {
        for (int s = 0; s < pipe->stages; ++s) mbar_init(stage_bar(*pipe, b_.getInt32(s)), 1);
        ptx_void("fence.mbarrier_init.release.cluster;");
        // What the kernel wrote or a wait acquired before the loop (generic proxy, made
        // visible to this thread by the barrier) is ordered before the copies (async proxy).
        ptx_void("fence.proxy.async.global;");
      });
      barrier();
    }
    for (int s = 0; s < pipe->ahead(); ++s) {
      if (pipe->tma) {
        tma_issue(*pipe, lo, step, hi, b_.getInt32(s), b_.getInt32(s));
        continue;
      }
      pipe_issue(*pipe, lo, step, hi, b_.getInt32(s), b_.getInt32(s));
      pipe_store_staged(*pipe);
    }
    if (!pipe->wgmma) pipe_advance(*pipe, mma_tiles(pipe->dot->results[0]->type), b_.getInt32(0));
  }
  if (pipe) {
    pipe_dots_[pipe->dot] = &*pipe;
    deferred_loads_.insert(pipe->a.load);
    deferred_loads_.insert(pipe->b.load);
    if (pipe->b.trans) deferred_loads_.insert(pipe->b.trans);
  }
  // The buffer and parity of the first iteration: 0, or where warp specialized those after the
  // loop's last run (the producer and the consumers count the same iterations).
  llvm::Value* stage0 = b_.getInt32(0);
  llvm::Value* phase0 = b_.getInt32(0);
  if (pipe && pipe->ws) {
    stage0 = b_.CreateLoad(b_.getInt32Ty(), ws_->stage);
    phase0 = b_.CreateLoad(b_.getInt32Ty(), ws_->phase);
  }
  LoopBlocks l = open_loop("for", lo, types, init);
  llvm::BasicBlock* pre = l.pre;
  std::vector<GVal>& phis = l.carried;
  llvm::PHINode* iv = l.iv;
  llvm::PHINode* count = b_.CreatePHI(b_.getInt32Ty(), 2, "iteration");
  count->addIncoming(b_.getInt32(0), pre);
  llvm::PHINode* stage = nullptr;  // count % stages, carried (no division in the loop)
  llvm::PHINode* phase = nullptr;  // TMA: count / stages % 2, the parity of the stage's mbarrier
  if (pipe) {
    stage = b_.CreatePHI(b_.getInt32Ty(), 2, "stage");
    stage->addIncoming(stage0, pre);
  }
  if (pipe && pipe->tma) {
    phase = b_.CreatePHI(b_.getInt32Ty(), 2, "phase");
    phase->addIncoming(phase0, pre);
  }
  std::vector<llvm::PHINode*> frag_phis;
  if (pipe) {
    for (llvm::Value* f : pipe->next_frags) {
      frag_phis.push_back(b_.CreatePHI(f->getType(), 2, "fragment"));
      frag_phis.back()->addIncoming(f, pre);
    }
    pipe->frags.assign(frag_phis.begin(), frag_phis.end());
  }
  enter_body(l, hi);
  if (pipe && pipe->ws) {
    mbar_wait(stage_bar(*pipe, stage), phase);  // this iteration's tiles have landed
    pipe->read_stage = stage;
    pipe->next_stage = next_of(stage, pipe->stages);
    pipe->iteration = count;
  } else if (pipe) {
    if (pipe->wgmma) {
      // This iteration's tiles have landed (each thread's copies, made visible to the async
      // proxy, then everyone's; TMA copies are waited for below). Past the barrier, every
      // warpgroup has completed the wgmma group of two iterations back (wait_group 1 after
      // the last one), whose stage the prefetch below overwrites.
      if (!pipe->tma) {
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(pipe->ahead() - 1)});
        ptx_void("fence.proxy.async.shared::cta;");
      }
      barrier();
    }
    // Iteration count + ahead goes to stage (stage + ahead) % stages: for mma.sync the one the
    // previous iteration read (every thread is past that iteration's barrier, see pipe_dot),
    // for wgmma the one of two iterations back.
    auto plus = [&](int64_t k) {
      llvm::Value* sum = b_.CreateAdd(stage, b_.getInt32(static_cast<int32_t>(k)));
      return b_.CreateSelect(b_.CreateICmpSGE(sum, b_.getInt32(pipe->stages)),
                             b_.CreateSub(sum, b_.getInt32(pipe->stages)), sum);
    };
    if (pipe->tma) {
      tma_issue(*pipe, lo, step, hi, b_.CreateAdd(count, b_.getInt32(pipe->ahead())), plus(pipe->ahead()));
      mbar_wait(stage_bar(*pipe, stage), phase);
    } else {
      pipe_issue(*pipe, lo, step, hi, b_.CreateAdd(count, b_.getInt32(pipe->ahead())), plus(pipe->ahead()));
    }
    pipe->read_stage = stage;
    pipe->next_stage = plus(1);
  }
  vals_[body.args[0].get()] = GVal{iv, {}};
  for (size_t i = 0; i < phis.size(); ++i) vals_[body.args[i + 1].get()] = phis[i];
  emit_block(body);
  std::vector<GVal> next;
  for (size_t i = 0; i < yield.operands.size(); ++i)
    next.push_back(as_mma[i] ? mma_from(yield.operands[i]) : val(yield.operands[i]));
  converted_.clear();
  close_loop(l, step, next, [&](llvm::BasicBlock* latch) {
    count->addIncoming(b_.CreateAdd(count, b_.getInt32(1)), latch);
    if (stage) stage->addIncoming(pipe->next_stage, latch);
    if (phase) phase->addIncoming(next_phase(pipe->next_stage, phase), latch);
    for (size_t k = 0; k < frag_phis.size(); ++k) frag_phis[k]->addIncoming(pipe->next_frags[k], latch);
  });
  if (pipe && pipe->wgmma)  // the last wgmma group completes before its result is read
    for (size_t i = 0; i < phis.size(); ++i)
      if (yield.operands[i]->def == pipe->dot) wgmma_wait(phis[i], 0);
  if (pipe && pipe->ws) {
    // The last iteration's group has completed (above): its buffer is free.
    empty_arrive(prev_of(stage, pipe->stages), b_.CreateICmpNE(count, b_.getInt32(0)));
    b_.CreateStore(stage, ws_->stage);
    b_.CreateStore(phase, ws_->phase);
    pipe_dots_.erase(pipe->dot);
  } else if (pipe) {
    if (!pipe->tma) b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(0)});
    barrier();        // the buffers become scratch again
    if (pipe->tma) {  // (every copy issued has been waited for: none goes past the loop's end)
      when(is_thread0(), [&] {
        for (int s = 0; s < pipe->stages; ++s)
          ptx(b_.getVoidTy(), "mbarrier.inval.shared::cta.b64 [$0];", "r",
              {shared_u32(stage_bar(*pipe, b_.getInt32(s)))});
      });
      barrier();
    }
    pipe_dots_.erase(pipe->dot);
    smem_floor_ = outer_floor;
  }
  for (size_t i = 0; i < phis.size(); ++i) vals_[op.results[i].get()] = phis[i];
}

void GpuLowering::emit_if(const ir::Op& op) {
  auto* then_bb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* else_bb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  b_.CreateCondBr(val(op.operands[0]).scalar, then_bb, else_bb);
  std::vector<std::pair<std::vector<GVal>, llvm::BasicBlock*>> incoming;
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r == 0 ? then_bb : else_bb);
    emit_block(*op.regions[r]);
    incoming.emplace_back(values_of(*op.regions[r]->terminator(), 0), b_.GetInsertBlock());
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
  for (size_t i = 0; i < op.results.size(); ++i) {
    const ir::Type& t = op.results[i]->type;
    GVal g;
    auto merge = [&](std::function<llvm::Value*(const GVal&)> pick) {
      llvm::PHINode* phi = b_.CreatePHI(reg_type(t.element()), 2);
      for (auto& [vals, bb] : incoming) phi->addIncoming(pick(vals[i]), bb);
      return phi;
    };
    if (!t.is_tensor())
      g.scalar = merge([](const GVal& v) { return v.scalar; });
    else
      for (int64_t j = 0; j < slots_of(t); ++j) g.slots.push_back(merge([j](const GVal& v) { return v.slots[j]; }));
    vals_[op.results[i].get()] = g;
  }
}

void GpuLowering::emit_while(const ir::Op& op) {
  const ir::Block& before = *op.regions[0];
  const ir::Block& after = *op.regions[1];
  std::vector<ir::Type> types;
  std::vector<GVal> init;
  for (auto* v : op.operands) {
    types.push_back(v->type);
    init.push_back(val(v));
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "while.cond", fn_);
  auto* body_bb = llvm::BasicBlock::Create(ctx_, "while.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.end", fn_);
  b_.CreateBr(header);
  auto phis = carried_phis(types, init, header, pre);
  b_.SetInsertPoint(header);
  for (size_t i = 0; i < phis.size(); ++i) vals_[before.args[i].get()] = phis[i];
  emit_block(before);
  const ir::Op& cond = *before.terminator();
  auto forwarded = values_of(cond, 1);
  b_.CreateCondBr(val(cond.operands[0]).scalar, body_bb, exit);
  b_.SetInsertPoint(body_bb);
  for (size_t i = 0; i < forwarded.size(); ++i) vals_[after.args[i].get()] = forwarded[i];
  emit_block(after);
  auto next = values_of(*after.terminator(), 0);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  close_phis(phis, next, latch);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < forwarded.size(); ++i) vals_[op.results[i].get()] = forwarded[i];
}

}  // namespace tiledist::codegen::gpu
