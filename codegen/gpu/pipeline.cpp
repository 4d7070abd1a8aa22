// Pipelined dot loops (codegen/gpu/lowering.h): matching a loop whose carried accumulator is
// dot(load(A), load(B), acc), choosing mma.sync or wgmma and the stages, and issuing its operand
// tiles' copies (cp.async, or through registers where staged) into swizzled shared-memory
// buffers, iterations ahead of the tensor cores.
#include <cmath>

#include "codegen/gpu/lowering.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tiledist::codegen::gpu {

bool GpuLowering::is_zero(const ir::Value* v) {
  const ir::Op* d = v->def;
  while (d && (d->code == OpCode::Splat || d->code == OpCode::Broadcast || d->code == OpCode::ExpandDims))
    d = d->operands[0]->def;
  if (!d || d->code != OpCode::Constant) return false;
  const ir::Attr& a = d->attrs.at("value");
  return std::holds_alternative<int64_t>(a) ? std::get<int64_t>(a) == 0
                                            : std::get<double>(a) == 0.0 && !std::signbit(std::get<double>(a));
}

bool GpuLowering::writes_memory(const ir::Block& block) {
  for (const auto& op : block.ops) {
    if ((op->info().flags & ir::MEM) && op->code != OpCode::Load) return true;
    for (const auto& r : op->regions)
      if (writes_memory(*r)) return true;
  }
  return false;
}

std::optional<GpuLowering::Pipeline> GpuLowering::match_pipeline(const ir::Op& loop) {
  if (!target_->mma_sync()) return std::nullopt;
  const ir::Block& body = *loop.regions[0];
  if (writes_memory(body)) return std::nullopt;
  const ir::Op& yield = *body.terminator();
  const ir::Op* step = loop.operands[2]->def;
  if (!step || step->code != OpCode::Constant || std::get<int64_t>(step->attrs.at("value")) <= 0) return std::nullopt;
  auto uses = ir::count_uses(body);
  for (size_t i = 0; i < yield.operands.size(); ++i) {
    const ir::Op* dot = yield.operands[i]->def;
    if (!dot || dot->code != OpCode::Dot || dot->parent != &body || !mma_eligible(*dot) ||
        dot->operands[2] != body.args[i + 1].get())
      continue;
    const int64_t esize = ir::dtype_bytes(dot->operands[0]->type.dtype);
    MmaTiles m = mma_tiles(dot->results[0]->type);
    if (!m.warps_n) continue;
    auto operand = [&](int k) -> std::optional<PipeOperand> {
      const ir::Value* v = dot->operands[k];
      const ir::Op* trans = nullptr;
      if (k == 1 && v->def && v->def->code == OpCode::Trans && v->def->parent == &body && uses[v] == 1) {
        trans = v->def;
        v = v->def->operands[0];
      }
      const ir::Op* ld = v->def;
      if (!ld || ld->code != OpCode::Load || ld->parent != &body || uses[v] != 1) return std::nullopt;
      if (ld->operands.size() > 2 && !is_zero(ld->operands[2])) return std::nullopt;
      const ir::Value* mask = ld->operands.size() > 1 ? ld->operands[1] : nullptr;
      if (!loop_recomputable(ld->operands[0], body) || (mask && !loop_recomputable(mask, body))) return std::nullopt;
      PipeOperand o{ld, v->type.shape[0], v->type.shape[1], 0};
      o.esize = esize;
      o.trans = trans;
      o.transposed = esize == 1 && k == 1 && !trans;
      o.vector_rows = o.transposed && axis_.vectorizable(ld->operands[0], mask, 16);
      if (o.transposed || !axis_.vectorizable(ld->operands[0], mask, o.per_chunk())) {
        o.staged = true;
        o.contiguous = axis_.of(ld->operands[0]).contiguity % o.per_chunk() == 0;
        o.chunk_mask = !mask || axis_.of(mask).constancy % o.per_chunk() == 0;
      }
      return o;
    };
    auto a = operand(0), b = operand(1);
    if (!a || !b) continue;
    Pipeline p{&loop, dot, *a, *b, 0, 0};
    // The accumulator of a wgmma is in flight until the next iteration's wait: nothing else in
    // the body may read it.
    p.wgmma = wgmma_eligible(p) && uses[dot->results[0].get()] == 1 && uses[body.args[i + 1].get()] == 1;
    if (p.wgmma) p.a.blocked = p.b.blocked = true;
    if (p.b.k_major() && !p.wgmma) continue;  // (other dots stage a transposed B themselves)
    const int min_stages = p.wgmma ? 3 : 2;
    const int64_t limit = p.wgmma ? kWgmmaSmemBytes : kPipelineSmemBytes;
    p.stages = std::max(min_stages, opts_.num_stages);
    p.b.offset = a->bytes();
    p.stage_bytes = p.b.offset + b->bytes();
    while (p.stages > min_stages && p.stages * p.stage_bytes > limit) --p.stages;
    if (p.stages * p.stage_bytes > limit) continue;
    return p;
  }
  return std::nullopt;
}

bool GpuLowering::wgmma_eligible(const Pipeline& p) const {
  if (!target_->hopper() || p.a.staged || p.b.staged || threads_ % 128) return false;
  if (p.a.esize != 2 && !(p.a.esize == 1 && p.b.k_major())) return false;  // f8: both K-major
  const int64_t M = p.a.rows, K = p.a.cols, N = p.b.k_major() ? p.b.rows : p.b.cols;
  return M == 16 * (threads_ / 32) && N % 64 == 0 && N <= 256 && (K * p.a.esize) % 128 == 0;
}

void GpuLowering::find_wgmma_loops() {
  f_.walk([&](const ir::Op& op) {
    if (op.code != OpCode::For) return;
    if (auto p = match_pipeline(op); p && p->wgmma) {
      const ir::Type& t = p->dot->results[0]->type;
      wgmma_shapes_.insert({t.shape[0], t.shape[1]});
      if (!opts_.tma) return;
      auto a = tma_operand(p->a), b = tma_operand(p->b);
      if (!a || !b) return;
      for (auto* o : {&*a, &*b}) {
        o->op.map = static_cast<int>(tma_recipes_.size());
        tma_recipes_.push_back(o->recipe);
      }
      tma_loops_[&op] = {a->op, b->op};
    }
  });
  if (tma_loops_.size() == 1) {  // (asked for by the options, or by the loop: tl::LoopHints)
    const auto& [loop, ops] = *tma_loops_.begin();
    if (opts_.warp_specialize || loop->attrs.count("warp_specialize"))
      plan_warp_specialization(*loop, ops.first, ops.second);
  }
}

llvm::Value* GpuLowering::blocked_swizzled(llvm::Value* row, llvm::Value* chunk, int64_t rows) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(chunk, c(7)), b_.CreateAnd(row, c(7)));
  return b_.CreateAdd(b_.CreateAdd(b_.CreateMul(b_.CreateLShr(chunk, 3), c(rows * 128)), b_.CreateMul(row, c(128))),
                      b_.CreateMul(in_line, c(16)));
}

llvm::Value* GpuLowering::swizzled(llvm::Value* row, llvm::Value* chunk, int64_t row_bytes) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  if (row_bytes >= 128) {
    llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(chunk, c(7)), b_.CreateAnd(row, c(7)));
    return b_.CreateAdd(b_.CreateAdd(b_.CreateMul(row, c(row_bytes)), b_.CreateMul(b_.CreateLShr(chunk, 3), c(128))),
                        b_.CreateMul(in_line, c(16)));
  }
  llvm::Value* o = b_.CreateAdd(b_.CreateMul(row, c(row_bytes)), b_.CreateMul(chunk, c(16)));
  llvm::Value* line = b_.CreateLShr(o, 7);
  llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(b_.CreateLShr(o, 4), c(7)), b_.CreateAnd(line, c(7)));
  return b_.CreateAdd(b_.CreateMul(line, c(128)), b_.CreateMul(in_line, c(16)));
}

llvm::Value* GpuLowering::stage_base(const Pipeline& p, llvm::Value* stage) {
  return b_.CreateGEP(b_.getInt8Ty(), smem_,
                      b_.CreateAdd(b_.getInt32(static_cast<int32_t>(p.base)),
                                   b_.CreateMul(stage, b_.getInt32(static_cast<int32_t>(p.stage_bytes)))));
}

void GpuLowering::pipe_store_staged(Pipeline& p) {
  auto* v4 = llvm::FixedVectorType::get(b_.getInt32Ty(), 4);
  for (const StagedChunk& sc : p.in_registers)
    when(sc.ok, [&] {
      if (!sc.stores.empty()) {
        for (auto& [at, word] : sc.stores) b_.CreateStore(word, at);
        return;
      }
      llvm::Value* v = llvm::PoisonValue::get(v4);
      for (unsigned w = 0; w < 4; ++w) v = b_.CreateInsertElement(v, sc.words[w], uint64_t{w});
      b_.CreateAlignedStore(v, sc.dst, llvm::Align(16));
    });
  p.in_registers.clear();
}

void GpuLowering::issue_transposed(Pipeline& p, const PipeOperand& o, llvm::Value* base, llvm::Value* live) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  const ir::Value* ptr = o.load->operands[0];
  const ir::Value* mask = o.load->operands.size() > 1 ? o.load->operands[1] : nullptr;
  llvm::Type* i8 = b_.getInt8Ty();
  auto* v16 = llvm::FixedVectorType::get(i8, 16);
  const int64_t per_row = o.cols / 16, blocks = (o.rows / 4) * per_row;
  for (int64_t t = 0; t * threads_ < blocks; ++t) {
    llvm::Value* q = b_.CreateAdd(tid_, c(t * threads_));
    llvm::Value* ok = (t + 1) * threads_ <= blocks ? b_.getTrue() : b_.CreateICmpSLT(q, c(blocks));
    llvm::Value* qs = b_.CreateSelect(ok, q, c(0));
    llvm::Value* k0 = b_.CreateMul(b_.CreateUDiv(qs, c(per_row)), c(4));
    llvm::Value* n0 = b_.CreateMul(b_.CreateURem(qs, c(per_row)), c(16));
    llvm::Value* bytes[4][16];
    for (int r = 0; r < 4; ++r) {
      llvm::Value* e = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(k0, c(r)), c(o.cols)), n0);
      llvm::Value* on = b_.CreateAnd(ok, live);
      if (o.vector_rows) {
        if (mask) on = b_.CreateAnd(on, recompute(mask, e));
        llvm::Value* row = when_value(on, v16, llvm::Constant::getNullValue(v16),
                                      [&] { return b_.CreateAlignedLoad(v16, recompute(ptr, e), llvm::Align(16)); });
        for (int n = 0; n < 16; ++n) bytes[r][n] = b_.CreateExtractElement(row, uint64_t(n));
        continue;
      }
      for (int n = 0; n < 16; ++n) {
        llvm::Value* en = b_.CreateAdd(e, c(n));
        llvm::Value* on_n = mask ? b_.CreateAnd(on, recompute(mask, en)) : on;
        llvm::Value* src = recompute(ptr, en);
        bytes[r][n] = when_value(on_n, i8, b_.getInt8(0), [&] { return b_.CreateLoad(i8, src); });
      }
    }
    StagedChunk sc{ok, nullptr, {}, {}};
    llvm::Value* in_chunk = b_.CreateAnd(k0, c(15));
    for (int n = 0; n < 16; ++n) {
      llvm::Value* word = b_.getInt32(0);
      for (int r = 0; r < 4; ++r)
        word =
            b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(bytes[r][n], b_.getInt32Ty()), static_cast<uint64_t>(8 * r)));
      llvm::Value* at = b_.CreateAdd(
          c(o.offset), b_.CreateAdd(swizzled(b_.CreateAdd(n0, c(n)), b_.CreateLShr(k0, 4), o.row_bytes()), in_chunk));
      sc.stores.emplace_back(b_.CreateGEP(i8, base, at), word);
    }
    p.in_registers.push_back(sc);
  }
}

void GpuLowering::pipe_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j,
                             llvm::Value* stage) {
  llvm::Value* iv = prefetch_iteration(p, iv0, step, j);
  llvm::Value* live = b_.CreateICmpSLT(iv, hi);
  llvm::Value* base = stage_base(p, stage);
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  for (const PipeOperand* o : {&p.a, &p.b}) {
    if (o->transposed) {
      issue_transposed(p, *o, base, live);
      continue;
    }
    const int64_t per = o->per_chunk();
    int64_t chunks = o->rows * o->cols / per;
    for (int64_t t = 0; t * threads_ < chunks; ++t) {
      llvm::Value* q = b_.CreateAdd(tid_, c(t * threads_));
      llvm::Value* ok = (t + 1) * threads_ <= chunks ? b_.getTrue() : b_.CreateICmpSLT(q, c(chunks));
      // The chunk's first element and its place in the buffer (chunk 0 where this thread has none).
      llvm::Value* e = b_.CreateMul(b_.CreateSelect(ok, q, c(0)), c(per));
      llvm::Value* row = b_.CreateUDiv(e, c(o->cols));
      llvm::Value* chunk = b_.CreateUDiv(b_.CreateURem(e, c(o->cols)), c(per));
      llvm::Value* at = o->blocked ? blocked_swizzled(row, chunk, o->rows) : swizzled(row, chunk, o->row_bytes());
      llvm::Value* dst = b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(o->offset), at));
      if (!o->staged) {
        when(ok, [&] {
          llvm::Value* src = recompute(o->load->operands[0], e);
          llvm::Value* on = live;
          if (o->load->operands.size() > 1) on = b_.CreateAnd(on, recompute(o->load->operands[1], e));
          cp_async_16(dst, b_.CreateAddrSpaceCast(src, b_.getPtrTy(1)), b_.CreateSelect(on, c(16), c(0)));
        });
        continue;
      }
      // Element loads into registers (zero where masked off), packed into words; the store to
      // shared memory waits for pipe_store_staged, late in the iteration.
      StagedChunk sc{ok, dst, {}, {}};
      llvm::Type* et = b_.getIntNTy(static_cast<unsigned>(8 * o->esize));
      llvm::Value* first = o->contiguous ? recompute(o->load->operands[0], e) : nullptr;
      llvm::Value* chunk_on =
          o->chunk_mask && o->load->operands.size() > 1 ? recompute(o->load->operands[1], e) : nullptr;
      std::vector<llvm::Value*> elems;
      for (int64_t k = 0; k < per; ++k) {
        llvm::Value* ek = b_.CreateAdd(e, c(k));
        llvm::Value* on = b_.CreateAnd(ok, live);
        if (o->load->operands.size() > 1)
          on = b_.CreateAnd(on, chunk_on ? chunk_on : recompute(o->load->operands[1], ek));
        llvm::Value* src = first ? b_.CreateConstGEP1_64(et, first, k) : recompute(o->load->operands[0], ek);
        elems.push_back(when_value(on, et, llvm::ConstantInt::get(et, 0), [&] { return b_.CreateLoad(et, src); }));
      }
      const int64_t per_word = 4 / o->esize;
      for (int64_t w = 0; w < 4; ++w) {
        llvm::Value* word = b_.getInt32(0);
        for (int64_t i = 0; i < per_word; ++i)
          word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(elems[w * per_word + i], b_.getInt32Ty()),
                                                static_cast<uint64_t>(8 * o->esize * i)));
        sc.words[w] = word;
      }
      p.in_registers.push_back(sc);
    }
  }
  end_prefetch();
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {});
}

llvm::Value* GpuLowering::prefetch_iteration(const Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* j) {
  const ir::Block& body = *p.loop->regions[0];
  llvm::Value* iv = b_.CreateAdd(iv0, b_.CreateMul(b_.CreateZExtOrTrunc(j, iv0->getType()), step));
  subst_[body.args[0].get()] = iv;
  subst_body_ = &body;
  subst_iteration_ = j;
  return iv;
}

void GpuLowering::end_prefetch() {
  subst_.clear();
  subst_body_ = nullptr;
  subst_iteration_ = nullptr;
}

void GpuLowering::cp_async_16(llvm::Value* dst, llvm::Value* src, llvm::Value* size) {
  ptx(b_.getVoidTy(), "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r",
      {b_.CreatePtrToInt(dst, b_.getInt32Ty()), src, size});
}

}  // namespace tiledist::codegen::gpu
