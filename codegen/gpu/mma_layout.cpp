// The MMA accumulator layout (codegen/gpu/lowering.h): how mma.sync's, wgmma's and MFMA's tiles
// are shared by the warps, conversions between it and the cyclic layout, and an accumulator's
// epilogue arithmetic done in it (each thread on its own fragment elements).
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

GpuLowering::MmaTiles GpuLowering::mma_tiles(const ir::Type& t) const {
  int64_t M = t.shape[0], N = t.shape[1];
  if (int64_t side = target_->mfma_tile(M, N)) {
    int64_t tiles = (M / side) * (N / side), waves = threads_ / target_->warp_size();
    MmaTiles m{M, N, N / side, tiles, (tiles + waves - 1) / waves};
    m.tile = side, m.regs = static_cast<int>(side * side / 64);
    return m;
  }
  int64_t tiles = (M / 16) * (N / 8), warps = threads_ / 32;
  MmaTiles m{M, N, N / 8, tiles, (tiles + warps - 1) / warps};
  if (wgmma_shapes_.count({M, N})) {  // a warpgroup's wgmma.m64nN: warp w holds rows [16w, 16w + 16)
    m.warps_n = 1, m.wtm = 16, m.wtn = N, m.per_warp = N / 8;
    return m;
  }
  int64_t best = 0;
  for (int64_t wm = 1; wm <= warps; ++wm) {  // the squarest warp tile
    if (warps % wm || M % (16 * wm) || N % (16 * (warps / wm))) continue;
    int64_t wtm = M / wm, wtn = N / (warps / wm);
    if (best && wtm + wtn >= best) continue;
    best = wtm + wtn;
    m.warps_n = warps / wm, m.wtm = wtm, m.wtn = wtn, m.per_warp = (wtm / 16) * (wtn / 8);
  }
  return m;
}

bool GpuLowering::mma_eligible(const ir::Op& dot) const {
  const ir::Type& at = dot.operands[0]->type;
  const ir::Type& bt = dot.operands[1]->type;
  const ir::Type& rt = dot.results[0]->type;
  if (int64_t side = target_->mfma_tile(rt.shape[0], rt.shape[1]))  // K a multiple of the MFMA's
    return target_->mfma_takes(at.dtype, bt.dtype) && at.shape[1] % mfma_k(side, at.dtype) == 0;
  if (!target_->mma_sync() || rt.shape[0] % 16 != 0 || rt.shape[1] % 8 != 0) return false;
  if (at.dtype == DType::bf16 || at.dtype == DType::f16) return bt.dtype == at.dtype && at.shape[1] % 16 == 0;
  auto f8 = [](DType d) { return d == DType::f8e4m3 || d == DType::f8e5m2; };
  return f8(at.dtype) && f8(bt.dtype) && target_->hopper() && at.shape[1] % 32 == 0;
}

llvm::Value* GpuLowering::mma_index(const MmaTiles& m, llvm::Value* t, int r) {
  if (m.tile) return mfma_index(m, t, r);
  llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
  llvm::Value* row =
      b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(t, b_.getInt32(static_cast<int32_t>(m.tiles_n))), b_.getInt32(16)),
                   b_.CreateLShr(lane, 2));
  if (r >= 2) row = b_.CreateAdd(row, b_.getInt32(8));
  llvm::Value* col =
      b_.CreateAdd(b_.CreateMul(b_.CreateURem(t, b_.getInt32(static_cast<int32_t>(m.tiles_n))), b_.getInt32(8)),
                   b_.CreateAdd(b_.CreateMul(b_.CreateAnd(lane, b_.getInt32(3)), b_.getInt32(2)), b_.getInt32(r & 1)));
  return b_.CreateAdd(b_.CreateMul(row, b_.getInt32(static_cast<int32_t>(m.N))), col);
}

llvm::Value* GpuLowering::mfma_index(const MmaTiles& m, llvm::Value* t, int r) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  llvm::Value* lane = b_.CreateURem(tid_, c(64));
  llvm::Value* row =
      b_.CreateAdd(c(4 * (64 / m.tile) * (r / 4) + r % 4), b_.CreateMul(b_.CreateUDiv(lane, c(m.tile)), c(4)));
  row = b_.CreateAdd(row, b_.CreateMul(b_.CreateUDiv(t, c(m.tiles_n)), c(m.tile)));
  llvm::Value* col =
      b_.CreateAdd(b_.CreateURem(lane, c(m.tile)), b_.CreateMul(b_.CreateURem(t, c(m.tiles_n)), c(m.tile)));
  return b_.CreateAdd(b_.CreateMul(row, c(m.N)), col);
}

llvm::Value* GpuLowering::tile_of(const MmaTiles& m, int64_t i) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  if (m.warps_n) {
    int64_t per_row = m.wtn / 8;
    llvm::Value* row =
        b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(warp_id(), c(m.warps_n)), c(m.wtm / 16)), c(i / per_row));
    llvm::Value* col = b_.CreateAdd(b_.CreateMul(b_.CreateURem(warp_id(), c(m.warps_n)), c(per_row)), c(i % per_row));
    return b_.CreateAdd(b_.CreateMul(row, c(m.tiles_n)), col);
  }
  return b_.CreateAdd(warp_id(), c(i * (threads_ / target_->warp_size())));
}

llvm::Value* GpuLowering::tile_ok(const MmaTiles& m, int64_t i) {
  if (m.warps_n || (i + 1) * (threads_ / target_->warp_size()) <= m.tiles) return b_.getTrue();
  return b_.CreateICmpSLT(tile_of(m, i), b_.getInt32(static_cast<int32_t>(m.tiles)));
}

GVal GpuLowering::cyclic_from_mma(const GVal& g, const ir::Type& t) {
  MmaTiles m = mma_tiles(t);
  llvm::Value* buf = scratch(0, m.M * m.N * 4);
  llvm::Type* f32 = b_.getFloatTy();
  barrier();
  for (int64_t i = 0; i < m.per_warp; ++i)
    when(tile_ok(m, i), [&] {
      for (int r = 0; r < m.regs; ++r)
        b_.CreateStore(g.slots[i * m.regs + r], b_.CreateGEP(f32, buf, mma_index(m, tile_of(m, i), r)));
    });
  barrier();
  GVal out;
  for (int64_t j = 0; j < slots_of(t); ++j)
    out.slots.push_back(when_value(valid(t, j), f32, llvm::UndefValue::get(f32),
                                   [&] { return b_.CreateLoad(f32, b_.CreateGEP(f32, buf, element_index(t, j))); }));
  barrier();
  return out;
}

GVal GpuLowering::mma_from(const ir::Value* v) {
  GVal& g = raw(v);
  if (g.mma) return g;
  MmaTiles m = mma_tiles(v->type);
  llvm::Type* f32 = b_.getFloatTy();
  if (v->def && v->def->code == OpCode::Splat) {  // the same value everywhere: no staging
    GVal out;
    out.mma = true;
    out.slots.assign(m.per_warp * m.regs, val(v->def->operands[0]).scalar);
    return out;
  }
  llvm::Value* arr = stage(v, 0);
  barrier();
  GVal out;
  out.mma = true;
  for (int64_t i = 0; i < m.per_warp; ++i)
    for (int r = 0; r < m.regs; ++r)
      out.slots.push_back(when_value(tile_ok(m, i), f32, llvm::UndefValue::get(f32), [&] {
        return b_.CreateLoad(f32, b_.CreateGEP(f32, arr, mma_index(m, tile_of(m, i), r)));
      }));
  barrier();
  return out;
}

bool GpuLowering::updates_in_mma(const ir::Op& def, const ir::Value* carried) {
  if (!target_->mma_sync() || !mma_arithmetic(def) || uses_[def.results[0].get()] != 1 ||
      std::find(def.operands.begin(), def.operands.end(), carried) == def.operands.end())
    return false;
  for (const ir::Value* v : def.operands) {
    if (v == carried || recomputable(v)) continue;
    if (!v->def || v->def->code != OpCode::Load || uses_[v] != 1 || !only_pure_between(*v->def, def)) return false;
    for (const ir::Value* o : v->def->operands)
      if (!recomputable(o)) return false;
  }
  return true;
}

bool GpuLowering::only_pure_between(const ir::Op& from, const ir::Op& to) {
  if (!from.parent || from.parent != to.parent) return false;
  auto it = from.parent->position(&from);
  for (++it; it != from.parent->ops.end() && it->get() != &to; ++it)
    if (!(*it)->is_pure() || !(*it)->regions.empty()) return false;
  return it != from.parent->ops.end();
}

bool GpuLowering::mma_arithmetic(const ir::Op& op) {
  if (op.results.size() != 1 || !op.results[0]->type.is_tensor() || !op.results[0]->type.is_float() ||
      op.results[0]->type.dtype == DType::f64)
    return false;
  switch (op.code) {
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Min:
    case OpCode::Max:
    case OpCode::Neg:
    case OpCode::Abs:
    case OpCode::Cast:
    case OpCode::Select:
    case OpCode::Exp:
    case OpCode::Exp2:
    case OpCode::Log:
    case OpCode::Log2:
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Sin:
    case OpCode::Cos:
    case OpCode::Floor:
    case OpCode::Ceil:
    case OpCode::Erf:
      return true;
    default:
      return false;
  }
}

bool GpuLowering::in_mma_layout(const ir::Op& op, const ir::Op* pending) {
  // (With one use: a user that needs the cyclic layout converts the result once, as this op
  // would have converted its operand; with more, each such user would convert it again.)
  if (!target_->mma_sync() || !mma_arithmetic(op) || uses_[op.results[0].get()] != 1) return false;
  bool any = false;
  for (const ir::Value* v : op.operands) {
    if (mma_made(v, pending))
      any = true;
    else if (!(v->def && (v->def == pending || mma_loads_.count(v->def))) && !recomputable(v))
      return false;
  }
  return any;
}

bool GpuLowering::mma_made(const ir::Value* v, const ir::Op* pending) {
  if (vals_.count(v)) return raw(v).mma;
  return v->def && in_mma_layout(*v->def, pending);
}

bool GpuLowering::loads_into_mma(const ir::Op& op) {
  const ir::Value* r = op.results[0].get();
  if (!r->type.is_tensor() || uses_[r] != 1 || !op.parent) return false;
  for (const ir::Value* o : op.operands)
    if (!recomputable(o)) return false;
  for (const auto& p : op.parent->ops)  // (its user: the op after it that takes it)
    if (std::find(p->operands.begin(), p->operands.end(), r) != p->operands.end())
      return only_pure_between(op, *p) && in_mma_layout(*p, &op);
  return false;
}

std::array<llvm::Value*, 2> GpuLowering::load_pair(const ir::Op& load, llvm::Value* e, llvm::Value* ok) {
  const ir::Value* ptr = load.operands[0];
  const ir::Value* mask = load.operands.size() > 1 ? load.operands[1] : nullptr;
  DType d = load.results[0]->type.dtype;
  llvm::Type* t = reg_type(load.results[0]->type.element());
  std::array<llvm::Value*, 2> at = {e, b_.CreateAdd(e, b_.getInt32(1))}, on, other;
  for (int k = 0; k < 2; ++k) {
    on[k] = mask ? recompute(mask, at[k]) : b_.getTrue();
    if (ok != b_.getTrue()) on[k] = b_.CreateAnd(ok, on[k]);
    other[k] = load.operands.size() > 2 ? recompute(load.operands[2], at[k]) : llvm::Constant::getNullValue(t);
  }
  if (ir::dtype_bytes(d) == 4 && axis_.vectorizable(ptr, mask, 2)) {
    // The pair is contiguous, aligned and masked as a whole: one predicated load, no branch
    // (branches around the loads would split the epilogue into blocks, each of whose loads
    // stays in flight, its register held, up to the block where its sum is made).
    llvm::Type* i32 = b_.getInt32Ty();
    auto bits = [&](llvm::Value* v) { return b_.CreateBitCast(to_mem(v, d), i32); };
    llvm::Value* x =
        ptx(llvm::StructType::get(ctx_, {i32, i32}),
            "{\nmov.b32 $0, $4;\nmov.b32 $1, $5;\n"
            "@$2 ld.global.v2.b32 {$0, $1}, [$3];\n}",
            "=r,=r,b,l,r,r",
            {on[0], b_.CreateAddrSpaceCast(recompute(ptr, e), b_.getPtrTy(1)), bits(other[0]), bits(other[1])});
    for (int k = 0; k < 2; ++k)
      at[k] = from_mem(b_.CreateBitCast(b_.CreateExtractValue(x, unsigned(k)), mem_type(d)), d);
    return at;
  }
  if (axis_.vectorizable(ptr, mask, 2)) {
    auto* vt = llvm::FixedVectorType::get(mem_type(d), 2);
    llvm::Value* x = when_value(on[0], vt, llvm::Constant::getNullValue(vt), [&] {
      return b_.CreateAlignedLoad(vt, recompute(ptr, e), llvm::Align(2 * ir::dtype_bytes(d)));
    });
    for (int k = 0; k < 2; ++k)
      at[k] = b_.CreateSelect(on[0], from_mem(b_.CreateExtractElement(x, uint64_t(k)), d), other[k]);
    return at;
  }
  for (int k = 0; k < 2; ++k)
    at[k] =
        when_value(on[k], t, other[k], [&] { return from_mem(b_.CreateLoad(mem_type(d), recompute(ptr, at[k])), d); });
  return at;
}

void GpuLowering::emit_in_mma_layout(const ir::Op& op) {
  MmaTiles m = mma_tiles(op.results[0]->type);
  GVal out;
  out.mma = true;
  for (int64_t i = 0; i < m.per_warp; ++i) {
    llvm::Value* ok = tile_ok(m, i);
    llvm::Value* tile = tile_of(m, i);
    for (int r = 0; r < m.regs; r += 2) {  // registers r and r + 1: elements e and e + 1 (mma.sync)
      llvm::Value* e = mma_index(m, tile, r);
      std::array<std::vector<llvm::Value*>, 2> in;
      for (const ir::Value* v : op.operands) {
        std::array<llvm::Value*, 2> x;
        if (vals_.count(v) && raw(v).mma)
          x = {raw(v).slots[i * m.regs + r], raw(v).slots[i * m.regs + r + 1]};
        else if (v->def && mma_loads_.count(v->def))
          x = load_pair(*v->def, e, ok);
        else
          x = {recompute(v, e), recompute(v, b_.CreateAdd(e, b_.getInt32(1)))};
        in[0].push_back(x[0]), in[1].push_back(x[1]);
      }
      out.slots.push_back(elementwise(op, in[0]));
      out.slots.push_back(elementwise(op, in[1]));
    }
  }
  define(op, std::move(out));
}

}  // namespace tiledist::codegen::gpu
