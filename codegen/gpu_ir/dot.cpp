// dot in the GPU IR lowering (codegen/gpu_ir/lowering.h): mma.sync.m16n8k16 over registers.
// The accumulator's layout is an MMA one and the operands' are its dot-operand layouts, so each
// thread already holds its fragments: for each 16x8 tile of the accumulator this thread's
// registers hold (its register bits' coordinates a multiple of 16 x 8), and each 16 of K, the
// fragment registers are found by their coordinates. The lanes' and warps' parts of the three
// layouts must be mma.sync's (checked, not assumed).
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

using ir::LinearLayout;

llvm::Value* LayoutLowering::pair_word(const ir::Value* v, int64_t r) {
  const LVal& g = val(v);
  if (!g.pairs.empty() && r % 2 == 0) return g.pairs[static_cast<size_t>(r / 2)];
  const DType d = v->type.dtype;
  auto bits = [&](int64_t i) {
    llvm::Value* m = to_mem(g.regs[static_cast<size_t>(i)], d);
    if (d == DType::f16) m = b_.CreateBitCast(m, b_.getInt16Ty());
    return b_.CreateZExt(m, b_.getInt32Ty());
  };
  return b_.CreateOr(bits(r), b_.CreateShl(bits(r + 1), 16));
}

void LayoutLowering::emit_dot(const ir::Op& op) {
  const ir::Value* A = op.operands[0];
  const ir::Value* B = op.operands[1];
  const ir::Type& ct = op.results[0]->type;
  const LinearLayout& la = linear(A->type);
  const LinearLayout& lb = linear(B->type);
  const LinearLayout& lc = linear(ct);
  using Bases = std::vector<std::vector<int64_t>>;
  const Bases rows_lanes = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}};  // A and C: lane % 4 along K (N), lane / 4 along M
  const Bases b_lanes = {{2, 0}, {4, 0}, {0, 1}, {0, 2}, {0, 4}};
  bool ok = la.bases[LinearLayout::lane] == rows_lanes && lc.bases[LinearLayout::lane] == rows_lanes &&
            lb.bases[LinearLayout::lane] == b_lanes;
  const auto& wc = lc.bases[LinearLayout::warp];
  ok = ok && la.bases[LinearLayout::warp].size() == wc.size() && lb.bases[LinearLayout::warp].size() == wc.size();
  for (size_t i = 0; ok && i < wc.size(); ++i)
    ok = la.bases[LinearLayout::warp][i] == std::vector<int64_t>{wc[i][0], 0} &&
         lb.bases[LinearLayout::warp][i] == std::vector<int64_t>{0, wc[i][1]};
  if (!ok) unsupported(op, "a dot whose layouts do not hold mma.sync's fragments");
  const int64_t K = A->type.shape[1];
  const char* ab = A->type.dtype == DType::bf16 ? "bf16" : "f16";
  const std::string text = str_cat("mma.sync.aligned.m16n8k16.row.col.f32.", ab, ".", ab,
                                   ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};");
  llvm::Type* f32 = b_.getFloatTy();
  auto* ret = llvm::StructType::get(ctx_, {f32, f32, f32, f32});
  auto at = [&](const LinearLayout& ll, int64_t r0, int64_t r1) {
    int64_t r = register_at(ll, {r0, r1});
    if (r < 0) unsupported(op, str_cat("a dot whose operand layout has no register at (", r0, ", ", r1, ")"));
    return r;
  };
  LVal out;
  out.regs = val(op.operands[2]).regs;
  for (int64_t r = 0; r < lc.in_size(LinearLayout::reg); ++r) {
    std::vector<int64_t> o = lc.coords(r, 0, 0);
    if (o[0] % 16 || o[1] % 8) continue;
    const int64_t c[4] = {r, at(lc, o[0], o[1] + 1), at(lc, o[0] + 8, o[1]), at(lc, o[0] + 8, o[1] + 1)};
    for (int64_t k = 0; k < K; k += 16) {
      std::vector<llvm::Value*> args;
      for (auto [dm, dk] : {std::pair<int64_t, int64_t>{0, 0}, {8, 0}, {0, 8}, {8, 8}}) {
        int64_t ra = at(la, o[0] + dm, k + dk);
        if (at(la, o[0] + dm, k + dk + 1) != ra + 1 || ra % 2) unsupported(op, "a dot whose A pairs are not adjacent registers");
        args.push_back(pair_word(A, ra));
      }
      for (int64_t dk : {0, 8}) {
        int64_t rb = at(lb, k + dk, o[1]);
        if (at(lb, k + dk + 1, o[1]) != rb + 1 || rb % 2) unsupported(op, "a dot whose B pairs are not adjacent registers");
        args.push_back(pair_word(B, rb));
      }
      for (int64_t i : c) args.push_back(out.regs[static_cast<size_t>(i)]);
      // (no side effects: only its registers order it, so the scheduler may move it)
      std::vector<llvm::Type*> types;
      for (llvm::Value* a : args) types.push_back(a->getType());
      auto* fty = llvm::FunctionType::get(ret, types, false);
      llvm::Value* res =
          b_.CreateCall(fty, llvm::InlineAsm::get(fty, text, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", false), args);
      for (unsigned i = 0; i < 4; ++i) out.regs[static_cast<size_t>(c[i])] = b_.CreateExtractValue(res, {i});
    }
  }
  define(op, out);
}

}  // namespace tiledist::codegen::gpu_ir
