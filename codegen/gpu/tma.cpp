// TMA operands and copies onto mbarriers (sm_90a; codegen/gpu/lowering.h): which pipelined
// operands the tensor memory accelerator may copy (their address and mask proven to be a tile of
// a 2-D tensor), the recipes of their tensor maps, and the mbarriers the copies complete on.
#include "codegen/gpu/lowering.h"
#include "llvm/IR/MDBuilder.h"

namespace tiledist::codegen::gpu {

const ir::Value* GpuLowering::through(const ir::Value* v, std::initializer_list<OpCode> codes) {
  while (v->def && std::find(codes.begin(), codes.end(), v->def->code) != codes.end()) v = v->def->operands[0];
  return v;
}

std::optional<GpuLowering::TileIndex> GpuLowering::tile_index(const ir::Value* v) {
  v = through(v, {OpCode::Broadcast});
  if (!v->def || v->def->code != OpCode::ExpandDims || v->type.shape.size() != 2) return std::nullopt;
  TileIndex t;
  t.axis = std::get<int64_t>(v->def->attrs.at("axis")) == 1 ? 0 : 1;  // [n, 1] counts along rows
  const ir::Value* x = v->def->operands[0];
  auto arange = [&](const ir::Value* r) {
    if (!r->def || r->def->code != OpCode::Arange) return false;
    t.offset = std::get<int64_t>(r->def->attrs.at("start"));
    return true;
  };
  if (arange(x)) return t;
  if (!x->def || x->def->code != OpCode::Add) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const ir::Value* s = x->def->operands[k];
    if (s->def && s->def->code == OpCode::Splat && arange(x->def->operands[1 - k])) {
      t.start = s->def->operands[0];
      return t;
    }
  }
  return std::nullopt;
}

std::optional<runtime::TmaRecipe::Dim> GpuLowering::host_size(const ir::Value* v) const {
  for (;;) {
    if (v->def && v->def->code == OpCode::Hint)
      v = v->def->operands[0];
    else if (v->def && v->def->code == OpCode::Cast && !v->type.is_float() && !v->def->operands[0]->type.is_float() &&
             ir::dtype_bytes(v->def->operands[0]->type.dtype) <= ir::dtype_bytes(v->type.dtype) &&
             v->def->operands[0]->type.dtype != DType::i1)
      v = v->def->operands[0];
    else
      break;
  }
  if (!v->def && v->owner == &f_.body && !v->type.is_tensor() && !v->type.is_ptr && !v->type.is_float())
    return runtime::TmaRecipe::Dim::param(static_cast<int>(v->index));
  if (v->def && v->def->code == OpCode::Constant && std::holds_alternative<int64_t>(v->def->attrs.at("value")) &&
      std::get<int64_t>(v->def->attrs.at("value")) > 0)
    return runtime::TmaRecipe::Dim::of(std::get<int64_t>(v->def->attrs.at("value")));
  return std::nullopt;
}

std::optional<GpuLowering::TmaMatch> GpuLowering::tma_operand(const PipeOperand& o) {
  if (o.staged || o.transposed || o.rows > 256 || (o.cols * o.esize) % 128) return std::nullopt;
  const ir::Op& ld = *o.load;
  if (ld.operands.size() < 2) return std::nullopt;
  // The address: a splat base and offset terms, each an index times an optional stride.
  const ir::Value* base = nullptr;
  std::vector<std::pair<const ir::Value*, const ir::Value*>> terms;  // (index, stride or null)
  std::function<bool(const ir::Value*)> offsets = [&](const ir::Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (v->def && v->def->code == OpCode::Add) return offsets(v->def->operands[0]) && offsets(v->def->operands[1]);
    if (v->def && v->def->code == OpCode::Mul)
      for (int k = 0; k < 2; ++k) {
        const ir::Value* s = through(v->def->operands[k], {OpCode::Broadcast});
        if (s->def && s->def->code == OpCode::Splat) {
          terms.emplace_back(v->def->operands[1 - k], s->def->operands[0]);
          return true;
        }
      }
    terms.emplace_back(v, nullptr);
    return true;
  };
  std::function<bool(const ir::Value*)> address = [&](const ir::Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (v->def && v->def->code == OpCode::AddPtr) return address(v->def->operands[0]) && offsets(v->def->operands[1]);
    if (v->def && v->def->code == OpCode::Splat && !base) {
      base = v->def->operands[0];
      return true;
    }
    return false;
  };
  if (!address(ld.operands[0]) || !base || terms.size() != 2) return std::nullopt;
  std::optional<TileIndex> row, col;
  const ir::Value* stride = nullptr;
  for (auto& [index, by] : terms) {
    auto t = tile_index(index);
    if (!t) return std::nullopt;
    if (t->axis == 0 && by && !row)
      row = t, stride = by;
    else if (t->axis == 1 && !by && !col)
      col = t;
    else
      return std::nullopt;
  }
  if (!row || !col) return std::nullopt;
  for (const TileIndex* t : {&*row, &*col})
    if (t->offset < 0 || (t->start && !nonneg(t->start))) return std::nullopt;
  // The mask: one bound per axis, on the same indices.
  std::optional<runtime::TmaRecipe::Dim> rows, cols;
  std::function<bool(const ir::Value*)> bounds = [&](const ir::Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (!v->def) return false;
    if (v->def->code == OpCode::And) return bounds(v->def->operands[0]) && bounds(v->def->operands[1]);
    if (v->def->code != OpCode::Cmp || std::get<std::string>(v->def->attrs.at("pred")) != "lt") return false;
    auto t = tile_index(v->def->operands[0]);
    const ir::Value* bound = through(v->def->operands[1], {OpCode::Broadcast});
    if (!t || !bound->def || bound->def->code != OpCode::Splat) return false;
    auto size = host_size(bound->def->operands[0]);
    auto* slot = *t == *row ? &rows : *t == *col ? &cols : nullptr;
    if (!size || !slot || *slot) return false;
    *slot = size;
    return true;
  };
  if (!bounds(ld.operands[1]) || !rows || !cols) return std::nullopt;
  // The base: a pointer parameter, 16-byte aligned; the stride a multiple of 16 bytes.
  TmaMatch m{o, {}};
  const ir::Value* p = base;
  while (p->def && p->def->code == OpCode::ConsumeToken) p = p->def->operands[0];  // (see the prologue's fence)
  if (axis_.of(p).divisibility % 16) return std::nullopt;
  p = through(p, {OpCode::Hint});
  if (p->def || p->owner != &f_.body || !p->type.is_ptr) return std::nullopt;
  auto st = host_size(stride);
  if (!st || (st->params.empty() ? st->value * o.esize % 16 : axis_.of(stride).divisibility * o.esize % 16))
    return std::nullopt;
  m.recipe.pointer = static_cast<int>(p->index);
  m.recipe.dtype = o.load->results[0]->type.dtype;
  m.recipe.dims = {*cols, *rows}, m.recipe.strides = {*st};
  m.recipe.box = {128 / o.esize, o.rows};
  m.op.base = base;
  m.op.row_start = row->start, m.op.row_offset = row->offset;
  m.op.col_start = col->start, m.op.col_offset = col->offset;
  return m;
}

llvm::Value* GpuLowering::stage_bar(const Pipeline& p, llvm::Value* stage) {
  return b_.CreateGEP(b_.getInt8Ty(), smem_,
                      b_.CreateAdd(b_.getInt32(static_cast<int32_t>(p.bars)), b_.CreateMul(stage, b_.getInt32(8))));
}

void GpuLowering::mbar_init(llvm::Value* bar, int count) {
  ptx(b_.getVoidTy(), "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", {shared_u32(bar), b_.getInt32(count)});
}

void GpuLowering::mbar_expect(llvm::Value* bar, int64_t bytes) {
  ptx(b_.getVoidTy(), "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
      {shared_u32(bar), b_.getInt32(static_cast<int32_t>(bytes))});
}

void GpuLowering::mbar_wait(llvm::Value* bar, llvm::Value* parity) {
  auto ready = [&] {
    llvm::Value* ok =
        ptx(b_.getInt32Ty(),
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\nselp.u32 $0, 1, 0, p;\n}",
            "=r,r,r", {shared_u32(bar), parity});
    return b_.CreateICmpNE(ok, b_.getInt32(0));
  };
  auto* slow = llvm::BasicBlock::Create(ctx_, "mbar.slow", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "mbar.done", fn_);
  b_.CreateCondBr(ready(), done, slow, llvm::MDBuilder(ctx_).createBranchWeights(1 << 10, 1));
  b_.SetInsertPoint(slow);
  constexpr int64_t kPipelineTimeoutNs = int64_t(100) * 1000 * 1000 * 1000;
  llvm::Value* timeout = world_
                             ? b_.CreateShl(world_field(offsetof(runtime::DeviceWorld, timeout_ns), b_.getInt64Ty()), 1)
                             : b_.getInt64(kPipelineTimeoutNs);
  spin_until(
      ready, runtime::DeviceFailure::pipeline_timeout,
      [&] { return std::array<llvm::Value*, 3>{bar, parity, b_.getInt32(0)}; }, timeout);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

void GpuLowering::tma_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j,
                            llvm::Value* stage) {
  llvm::Value* iv = prefetch_iteration(p, iv0, step, j);
  when(b_.CreateAnd(is_thread0(), b_.CreateICmpSLT(iv, hi)), [&] { tma_copy(p, stage); });
  end_prefetch();
}

void GpuLowering::tma_copy(Pipeline& p, llvm::Value* stage) {
  auto coord = [&](const ir::Value* start, int64_t offset) {
    llvm::Value* o = b_.getInt32(static_cast<int32_t>(offset));
    return start ? b_.CreateAdd(b_.CreateSExtOrTrunc(recompute_scalar(start), b_.getInt32Ty()), o) : o;
  };
  llvm::Value* bar = shared_u32(stage_bar(p, stage));
  mbar_expect(stage_bar(p, stage), p.stage_bytes);
  llvm::Value* base = stage_base(p, stage);
  for (const PipeOperand* o : {&p.a, &p.b}) {
    llvm::Value* row0 = coord(o->row_start, o->row_offset);
    llvm::Value* col0 = coord(o->col_start, o->col_offset);
    const int64_t box_cols = 128 / o->esize;
    for (int64_t k = 0; k < o->cols / box_cols; ++k) {
      llvm::Value* dst = b_.CreateConstGEP1_64(b_.getInt8Ty(), base, o->offset + k * o->rows * 128);
      ptx(b_.getVoidTy(),
          "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], "
          "[$4];",
          "r,l,r,r,r",
          {shared_u32(dst), fn_->getArg(first_map_ + static_cast<unsigned>(o->map)),
           b_.CreateAdd(col0, b_.getInt32(static_cast<int32_t>(k * box_cols))), row0, bar});
    }
  }
}

}  // namespace tiledist::codegen::gpu
