// dot on NVIDIA tensor cores (codegen/gpu/lowering.h): mma.sync with ldmatrix fragments,
// inside pipelined loops and outside them, and wgmma on a pipeline's shared-memory tiles
// through matrix descriptors (sm_90a).
#include "codegen/gpu/lowering.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tiledist::codegen::gpu {

const char* GpuLowering::ptx_type(DType d) {
  return d == DType::bf16 ? "bf16" : d == DType::f16 ? "f16" : d == DType::f8e4m3 ? "e4m3" : "e5m2";
}

llvm::Value* GpuLowering::mma_sync(DType da, DType db, llvm::Value* const a[4], llvm::Value* b0, llvm::Value* b1,
                                   llvm::Value* const acc[4]) {
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* f32 = b_.getFloatTy();
  auto* ty = llvm::FunctionType::get(llvm::StructType::get(ctx_, {f32, f32, f32, f32}),
                                     {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
  auto* asm_ = llvm::InlineAsm::get(
      ty,
      str_cat("mma.sync.aligned.m16n8k", ir::dtype_bytes(da) == 1 ? 32 : 16, ".row.col.f32.", ptx_type(da), ".",
              ptx_type(db), ".f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"),
      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", /*side effects: keeps its place around barriers*/ true);
  return b_.CreateCall(ty, asm_, {a[0], a[1], a[2], a[3], b0, b1, acc[0], acc[1], acc[2], acc[3]});
}

std::vector<llvm::Value*> GpuLowering::pipe_fragments(const Pipeline& p, const MmaTiles& m, llvm::Value* stage,
                                                      int64_t ks) {
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  llvm::Value* base = stage_base(p, stage);
  llvm::Value* lane = b_.CreateAnd(tid_, c(31));
  llvm::Value* lane16 = b_.CreateAnd(lane, c(15));
  llvm::Value* half = b_.CreateLShr(lane, 4);
  std::vector<llvm::Value*> out;
  auto x4 = [&](llvm::Intrinsic::ID id, const PipeOperand& o, llvm::Value* row, llvm::Value* chunk) {
    llvm::Value* at =
        b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(o.offset), swizzled(row, chunk, o.row_bytes())));
    llvm::Value* r = b_.CreateIntrinsic(id, {at->getType()}, {at});
    for (unsigned k = 0; k < 4; ++k) out.push_back(b_.CreateExtractValue(r, k));
  };
  llvm::Value* wm = b_.CreateUDiv(warp_id(), c(m.warps_n));
  llvm::Value* wn = b_.CreateURem(warp_id(), c(m.warps_n));
  for (int64_t im = 0; im < m.wtm / 16; ++im)
    x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, p.a,
       b_.CreateAdd(b_.CreateMul(wm, c(m.wtm)), b_.CreateAdd(c(im * 16), lane16)), b_.CreateAdd(c(ks * 2), half));
  for (int64_t jn = 0; jn < m.wtn / 16; ++jn) {
    if (p.b.transposed) {  // B^T rows n, K bytes: lanes 0-7 and 8-15 the two K chunks of n-tile 2jn, 16-31 of 2jn+1
      llvm::Value* n =
          b_.CreateAdd(b_.CreateMul(wn, c(m.wtn)),
                       b_.CreateAdd(c(jn * 16), b_.CreateAdd(b_.CreateAnd(lane, c(7)), b_.CreateMul(half, c(8)))));
      x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, p.b, n,
         b_.CreateAdd(c(ks * 2), b_.CreateAnd(b_.CreateLShr(lane, 3), c(1))));
      continue;
    }
    x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16, p.b, b_.CreateAdd(c(ks * 16), lane16),
       b_.CreateAdd(b_.CreateMul(wn, c(m.wtn / 8)), b_.CreateAdd(c(jn * 2), half)));
  }
  return out;
}

void GpuLowering::pipe_advance(Pipeline& p, const MmaTiles& m, llvm::Value* next_stage) {
  pipe_store_staged(p);  // (a buffer no thread reads before the barrier below)
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(p.stages - 2)});
  barrier();
  p.next_frags = pipe_fragments(p, m, next_stage, 0);
}

llvm::Value* GpuLowering::wgmma_desc(llvm::Value* at, int64_t lbo, int64_t sbo) {
  return wgmma_descriptor(b_, b_.CreatePtrToInt(at, b_.getInt32Ty()), lbo, sbo);
}

void GpuLowering::ptx_on_acc(GVal& acc, const std::string& text, const std::string& more_cons,
                             const std::vector<llvm::Value*>& more) {
  const size_t n = acc.slots.size();
  std::string cons;
  for (size_t i = 0; i < n; ++i) cons += str_cat(i ? "," : "", "=f");
  for (size_t i = 0; i < n; ++i) cons += str_cat(",", i);
  std::vector<llvm::Value*> args = acc.slots;
  args.insert(args.end(), more.begin(), more.end());
  llvm::Value* r =
      ptx(llvm::StructType::get(ctx_, std::vector<llvm::Type*>(n, b_.getFloatTy())), text, cons + more_cons, args);
  for (size_t i = 0; i < n; ++i) acc.slots[i] = b_.CreateExtractValue(r, static_cast<unsigned>(i));
}

void GpuLowering::pipe_dot_wgmma(Pipeline& p, const ir::Op& op) {
  DType da = op.operands[0]->type.dtype;
  MmaTiles m = mma_tiles(op.results[0]->type);
  GVal acc = mma_from(op.operands[2]);
  auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  const int64_t N = m.N, n = acc.slots.size();
  llvm::Value* base = stage_base(p, p.read_stage);
  llvm::Value* group = b_.CreateLShr(tid_, 7);
  llvm::Value* a_tile =
      b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(p.a.offset), b_.CreateMul(group, c(64 * 128))));
  llvm::Value* b_tile = b_.CreateGEP(b_.getInt8Ty(), base, c(p.b.offset));
  std::string regs;
  for (int64_t i = 0; i < n; ++i) regs += str_cat(i ? ", " : "", "$", i);
  // 32 bytes of K per instruction: k16 of 16-bit types, k32 of f8 (whose operands are both
  // K-major: no transpose flags). B N-major is read transposed (the last flag).
  const bool f8 = p.a.esize == 1;
  const std::string wgmma =
      str_cat("wgmma.mma_async.sync.aligned.m64n", N, f8 ? "k32" : "k16", ".f32.", ptx_type(da), ".",
              ptx_type(op.operands[1]->type.dtype), " {", regs, "}, $", 2 * n, ", $", 2 * n + 1,
              f8              ? ", 1, 1, 1;"
              : p.b.k_major() ? ", 1, 1, 1, 0, 0;"
                              : ", 1, 1, 1, 0, 1;");
  ptx_void("wgmma.fence.sync.aligned;");
  for (int64_t ks = 0; ks < p.a.cols * p.a.esize / 32; ++ks) {
    // K-major (A, and B^T): 32 bytes per step within a 128-byte block, the next block rows * 128 on.
    auto k_major_at = [&](llvm::Value* tile, const PipeOperand& o) {
      return b_.CreateConstGEP1_64(b_.getInt8Ty(), tile, (ks / 4) * o.rows * 128 + (ks % 4) * 32);
    };
    llvm::Value* a_desc = wgmma_desc(k_major_at(a_tile, p.a), 16, 1024);
    // B N-major: 16 rows of 128 bytes per k16.
    llvm::Value* b_desc =
        p.b.k_major() ? wgmma_desc(k_major_at(b_tile, p.b), 16, 1024)
                      : wgmma_desc(b_.CreateConstGEP1_64(b_.getInt8Ty(), b_tile, ks * 16 * 128), p.b.rows * 128, 1024);
    ptx_on_acc(acc, wgmma, ",l,l", {a_desc, b_desc});
  }
  ptx_void("wgmma.commit_group.sync.aligned;");
  ptx_void("wgmma.wait_group.sync.aligned 1;");
  // Warp specialized: the previous iteration's group has completed, and its buffer is free.
  if (p.ws) empty_arrive(prev_of(p.read_stage, p.stages), b_.CreateICmpNE(p.iteration, b_.getInt32(0)));
  define(op, acc);
}

void GpuLowering::pipe_dot(Pipeline& p, const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  DType da = op.operands[0]->type.dtype, db = op.operands[1]->type.dtype;
  MmaTiles m = mma_tiles(rt);
  GVal acc = mma_from(op.operands[2]);
  int64_t tm = m.wtm / 16, tn = m.wtn / 8, steps = p.a.cols / (32 / p.a.esize);  // K per mma: 32 bytes
  std::vector<std::vector<llvm::Value*>> frags{p.frags};
  for (int64_t ks = 1; ks < steps; ++ks) frags.push_back(pipe_fragments(p, m, p.read_stage, ks));
  for (int64_t ks = 0; ks < steps; ++ks) {
    if (ks == steps - 1) pipe_advance(p, m, p.next_stage);
    const auto& f = frags[ks];
    for (int64_t im = 0; im < tm; ++im)
      for (int64_t in = 0; in < tn; ++in) {
        llvm::Value** slots = &acc.slots[(im * tn + in) * 4];
        const int64_t bi = tm * 4 + (in / 2) * 4 + (in % 2) * 2;
        llvm::Value* r = mma_sync(da, db, &f[im * 4], f[bi], f[bi + 1], slots);
        for (unsigned k = 0; k < 4; ++k) slots[k] = b_.CreateExtractValue(r, k);
      }
  }
  define(op, acc);
}

bool GpuLowering::emit_dot_mma(const ir::Op& op) {
  const ir::Type& at = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  int64_t M = at.shape[0], K = at.shape[1];
  if (!target_->mma_sync() || !mma_eligible(op)) return false;
  const int64_t eb = ir::dtype_bytes(at.dtype);         // 2, or 1 for f8
  const int64_t per_reg = 4 / eb, kstep = 8 * per_reg;  // elements per 32-bit register; K per mma
  int64_t a_bytes = (M * padded_row(K) * eb + 15) / 16 * 16;
  // The accumulator enters in the MMA layout (carried by a loop) or is converted once.
  GVal acc_in = mma_from(op.operands[2]);
  llvm::Value* a = stage_narrow(op.operands[0], 0, false);        // A[m][k], rows padded
  llvm::Value* bb = stage_narrow(op.operands[1], a_bytes, true);  // B^T[n][k], rows padded
  barrier();
  llvm::Type* i16 = b_.getIntNTy(static_cast<unsigned>(8 * eb));  // an element in memory
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* f32 = b_.getFloatTy();
  llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
  llvm::Value* group = b_.CreateLShr(lane, 2);
  llvm::Value* tig = b_.CreateAnd(lane, b_.getInt32(3));
  auto i = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
  // Adjacent elements of a row of A (2 of 16 bits, or 4 of 8), as one 32-bit register.
  auto a_pair = [&](llvm::Value* row, llvm::Value* col) {
    return b_.CreateAlignedLoad(i32, b_.CreateGEP(i16, a, b_.CreateAdd(b_.CreateMul(row, i(padded_row(K))), col)),
                                llvm::Align(4));
  };
  // B[k][n], B[k+1][n], ...: adjacent in the transposed copy, one 32-bit load (low first).
  auto b_pair = [&](llvm::Value* k, llvm::Value* n) {
    return b_.CreateAlignedLoad(i32, b_.CreateGEP(i16, bb, b_.CreateAdd(b_.CreateMul(n, i(padded_row(K))), k)),
                                llvm::Align(4));
  };
  MmaTiles m = mma_tiles(rt);
  GVal out;
  out.mma = true;
  for (int64_t ti = 0; ti < m.per_warp; ++ti) {
    llvm::Value* slots[4];
    for (int r = 0; r < 4; ++r) slots[r] = local(f32, acc_in.slots[ti * 4 + r]);
    when(tile_ok(m, ti), [&] {
      llvm::Value* tile = tile_of(m, ti);
      llvm::Value* row0 = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(tile, i(m.tiles_n)), i(16)), group);
      llvm::Value* row1 = b_.CreateAdd(row0, i(8));
      llvm::Value* n_b = b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, i(m.tiles_n)), i(8)), group);
      counted_loop(i(0), i(K), static_cast<int>(kstep), [&](llvm::Value* k0) {
        llvm::Value* ka = b_.CreateAdd(k0, b_.CreateMul(tig, i(per_reg)));
        llvm::Value* kb = b_.CreateAdd(ka, i(kstep / 2));
        llvm::Value* a_regs[4] = {a_pair(row0, ka), a_pair(row1, ka), a_pair(row0, kb), a_pair(row1, kb)};
        llvm::Value* acc[4];
        for (int r = 0; r < 4; ++r) acc[r] = b_.CreateLoad(f32, slots[r]);
        llvm::Value* d = mma_sync(at.dtype, op.operands[1]->type.dtype, a_regs, b_pair(ka, n_b), b_pair(kb, n_b), acc);
        for (int r = 0; r < 4; ++r) b_.CreateStore(b_.CreateExtractValue(d, r), slots[r]);
      });
    });
    for (int r = 0; r < 4; ++r) out.slots.push_back(b_.CreateLoad(f32, slots[r]));
  }
  barrier();  // A and B may be restaged by the next op
  define(op, out);
  return true;
}

}  // namespace tiledist::codegen::gpu
