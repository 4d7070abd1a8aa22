// dot in the GPU IR lowering (codegen/gpu_ir/lowering.h): mma.sync over registers (m16n8k16 of
// 16-bit operands, m16n8k32 of f8 ones).
// The accumulator's layout is an MMA one and the operands' are its dot-operand layouts, so each
// thread already holds its fragments: for each 16x8 tile of the accumulator this thread's
// registers hold (its register bits' coordinates a multiple of 16 x 8), and each k step, the
// fragment registers are found by their coordinates. The lanes' and warps' parts of the three
// layouts must be mma.sync's (checked, not assumed).
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

using ir::LinearLayout;

namespace {

/// A matrix instruction's name for an operand type.
const char* operand_type(ir::DType t) {
  using ir::DType;
  return t == DType::bf16 ? "bf16" : t == DType::f16 ? "f16" : t == DType::f8e4m3 ? "e4m3" : "e5m2";
}

}  // namespace

llvm::Value* LayoutLowering::operand_word(const ir::Value* v, int64_t r) {
  const LVal& g = val(v);
  const DType d = v->type.dtype;
  const int64_t n = 4 / ir::dtype_bytes(d);
  if (g.lazy_word && r % n == 0) return (*g.lazy_word)(r / n);
  if (!g.words.empty() && r % n == 0) return g.words[static_cast<size_t>(r / n)];
  if (n == 2 && !g.wide.empty()) {  // one cvt.rn.{bf16,f16}x2.f32 (its first source the upper half)
    auto id = d == DType::f16 ? llvm::Intrinsic::nvvm_ff2f16x2_rn : llvm::Intrinsic::nvvm_ff2bf16x2_rn;
    llvm::Value* two = b_.CreateIntrinsic(id, {}, {g.wide[static_cast<size_t>(r + 1)], g.wide[static_cast<size_t>(r)]});
    return b_.CreateBitCast(two, b_.getInt32Ty());
  }
  auto bits = [&](int64_t i) {
    if (!g.bits.empty()) return b_.CreateZExt(g.bits[static_cast<size_t>(i)], b_.getInt32Ty());
    llvm::Value* m = to_mem(g.regs[static_cast<size_t>(i)], d);
    if (d == DType::f16) m = b_.CreateBitCast(m, b_.getInt16Ty());
    return b_.CreateZExt(m, b_.getInt32Ty());
  };
  llvm::Value* w = bits(r);
  for (int64_t i = 1; i < n; ++i) w = b_.CreateOr(w, b_.CreateShl(bits(r + i), static_cast<uint64_t>(32 / n * i)));
  return w;
}

bool LayoutLowering::fragments(const LinearLayout& la, const LinearLayout& lb, const LinearLayout& lc,
                               const Bases& a_lanes, const Bases& b_lanes, const Bases& c_lanes) {
  bool ok = la.bases[LinearLayout::lane] == a_lanes && lb.bases[LinearLayout::lane] == b_lanes &&
            lc.bases[LinearLayout::lane] == c_lanes;
  const auto& wc = lc.bases[LinearLayout::warp];
  ok = ok && la.bases[LinearLayout::warp].size() == wc.size() && lb.bases[LinearLayout::warp].size() == wc.size();
  for (size_t i = 0; ok && i < wc.size(); ++i)
    ok = la.bases[LinearLayout::warp][i] == std::vector<int64_t>{wc[i][0], 0} &&
         lb.bases[LinearLayout::warp][i] == std::vector<int64_t>{0, wc[i][1]};
  return ok;
}

int64_t LayoutLowering::fragment_register(const ir::Op& op, const LinearLayout& ll, int64_t r0, int64_t r1) {
  int64_t r = register_at(ll, {r0, r1});
  if (r < 0) unsupported(op, str_cat("a dot whose operand layout has no register at (", r0, ", ", r1, ")"));
  return r;
}

void LayoutLowering::emit_dot(const ir::Op& op) {
  if (op.results[0]->type.layout->kind != ir::Layout::Kind::mma) return emit_dot_fma(op);
  if (op.results[0]->type.layout->mma == ir::MmaKind::mfma) return emit_dot_mfma(op);
  if (op.results[0]->type.layout->mma == ir::MmaKind::wgmma && target_->hopper()) return emit_dot_wgmma(op);
  const ir::Value* A = op.operands[0];
  const ir::Value* B = op.operands[1];
  const ir::Type& ct = op.results[0]->type;
  const LinearLayout& la = linear(A->type);
  const LinearLayout& lb = linear(B->type);
  const LinearLayout& lc = linear(ct);
  // An instruction's K is 32 bytes of each operand (m16n8k16 of 16-bit operands, m16n8k32 of
  // f8); a lane's word holds n of its elements along K, its second word along K `half` on.
  const int64_t K = A->type.shape[1], n = 4 / ir::dtype_bytes(A->type.dtype), kstep = 8 * n, half = 4 * n;
  // lane % 4 along K (A: by words of n) or N (C), lane / 4 along M (A, C) or N (B)
  const Bases a_lanes = {{0, n}, {0, 2 * n}, {1, 0}, {2, 0}, {4, 0}};
  const Bases b_lanes = {{n, 0}, {2 * n, 0}, {0, 1}, {0, 2}, {0, 4}};
  const Bases c_lanes = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}};
  if (!fragments(la, lb, lc, a_lanes, b_lanes, c_lanes))
    unsupported(op, "a dot whose layouts do not hold mma.sync's fragments");
  const std::string text =
      str_cat("mma.sync.aligned.m16n8k", kstep, ".row.col.f32.", operand_type(A->type.dtype), ".",
              operand_type(B->type.dtype), ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};");
  llvm::Type* f32 = b_.getFloatTy();
  auto* ret = llvm::StructType::get(ctx_, {f32, f32, f32, f32});
  auto at = [&](const LinearLayout& ll, int64_t r0, int64_t r1) { return fragment_register(op, ll, r0, r1); };
  // Whether the n registers from (r0, r1) on along K (dimension `kd`) are one word's: r, r + 1, ...
  auto word_at = [&](const LinearLayout& ll, int64_t r0, int64_t r1, int kd) {
    const int64_t r = at(ll, r0, r1);
    bool ok = r % n == 0;
    for (int64_t i = 1; ok && i < n; ++i) ok = at(ll, r0 + (kd == 0 ? i : 0), r1 + (kd == 1 ? i : 0)) == r + i;
    return ok ? r : -1;
  };
  LVal out;
  out.regs = val(op.operands[2]).regs;
  // K steps outermost: an operand's fragments for one step are used by every tile, then dead.
  for (int64_t k = 0; k < K; k += kstep)
    for (int64_t r = 0; r < lc.in_size(LinearLayout::reg); ++r) {
      std::vector<int64_t> o = lc.coords(r, 0, 0);
      if (o[0] % 16 || o[1] % 8) continue;
      const int64_t c[4] = {r, at(lc, o[0], o[1] + 1), at(lc, o[0] + 8, o[1]), at(lc, o[0] + 8, o[1] + 1)};
      {
        std::vector<llvm::Value*> args;
        for (auto [dm, dk] : {std::pair<int64_t, int64_t>{0, 0}, {8, 0}, {0, half}, {8, half}}) {
          const int64_t ra = word_at(la, o[0] + dm, k + dk, 1);
          if (ra < 0) unsupported(op, "a dot whose A words are not consecutive registers");
          args.push_back(operand_word(A, ra));
        }
        for (int64_t dk : {int64_t{0}, half}) {
          const int64_t rb = word_at(lb, k + dk, o[1], 0);
          if (rb < 0) unsupported(op, "a dot whose B words are not consecutive registers");
          args.push_back(operand_word(B, rb));
        }
        for (int64_t i : c) args.push_back(out.regs[static_cast<size_t>(i)]);
        // No side effects (only its registers order it), but convergent: the whole warp runs it,
        // so it must not sink into a branch that only the threads using its result take.
        std::vector<llvm::Type*> types;
        for (llvm::Value* a : args) types.push_back(a->getType());
        auto* fty = llvm::FunctionType::get(ret, types, false);
        llvm::CallInst* res =
            b_.CreateCall(fty, llvm::InlineAsm::get(fty, text, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", false), args);
        res->addFnAttr(llvm::Attribute::Convergent);
        for (unsigned i = 0; i < 4; ++i) out.regs[static_cast<size_t>(c[i])] = b_.CreateExtractValue(res, {i});
      }
    }
  define(op, out);
}

void LayoutLowering::emit_dot_mfma(const ir::Op& op) {
  const ir::Value* A = op.operands[0];
  const ir::Value* B = op.operands[1];
  const ir::Type& ct = op.results[0]->type;
  const LinearLayout& la = linear(A->type);
  const LinearLayout& lb = linear(B->type);
  const LinearLayout& lc = linear(ct);
  const int64_t S = ct.layout->instr_shape[0], groups = 64 / S;  // (lanes / S: K groups of A and B, row groups of C)
  const int64_t kw = A->type.layout->k_width, kstep = kw * groups, K = A->type.shape[1];
  const DType da = A->type.dtype, db = B->type.dtype;
  if (ir::dtype_bytes(da) * kw != 8 || ir::dtype_bytes(db) * B->type.layout->k_width != 8)
    unsupported(op, "an MFMA dot whose lanes do not hold 8 bytes of A and B along K");
  // The lanes' and warps' parts must be MFMA's: lane % S along M (A, C) or N (B, C's columns),
  // lane / S a K group of kw (A, B) or 4 rows (C); warps as the accumulator's.
  Bases a_lanes, b_lanes, c_lanes;
  for (int64_t v = 1; v < S; v *= 2) a_lanes.push_back({v, 0}), b_lanes.push_back({0, v}), c_lanes.push_back({0, v});
  for (int64_t v = 1; v < groups; v *= 2)
    a_lanes.push_back({0, kw * v}), b_lanes.push_back({kw * v, 0}), c_lanes.push_back({4 * v, 0});
  if (!fragments(la, lb, lc, a_lanes, b_lanes, c_lanes) || K % kstep)
    unsupported(op, "a dot whose layouts do not hold MFMA's fragments");
  auto at = [&](const LinearLayout& ll, int64_t r0, int64_t r1) { return fragment_register(op, ll, r0, r1); };
  // A lane's 8 bytes along K: kw consecutive registers, element j at bits 16 j (8 j for f8).
  auto operand = [&](const ir::Value* v, const LinearLayout& ll, DType d, int64_t r0, int64_t r1, bool a) {
    const LVal& g = val(v);
    const unsigned bits = static_cast<unsigned>(8 * ir::dtype_bytes(d));
    llvm::Value* word = b_.getInt64(0);
    for (int64_t j = 0; j < kw; ++j) {
      const int64_t r = a ? at(ll, r0, r1 + j) : at(ll, r0 + j, r1);
      llvm::Value* x = g.bits.empty() ? to_mem(g.regs[static_cast<size_t>(r)], d) : g.bits[static_cast<size_t>(r)];
      x = target_->mfma_operand(b_.CreateBitCast(x, b_.getIntNTy(bits)), d);
      word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(x, b_.getInt64Ty()), static_cast<uint64_t>(bits * j)));
    }
    return word;
  };
  const double scale = target_->mfma_product_scale(da, db);  // (undone on the accumulator)
  auto scaled = [&](llvm::Value* x, double f) {
    return f == 1.0 ? x : b_.CreateFMul(x, llvm::ConstantFP::get(b_.getFloatTy(), f));
  };
  const int64_t n = S * S / 64;  // accumulator registers of one MFMA: row (i % 4) + 4 groups (i / 4)
  auto* acc_t = llvm::FixedVectorType::get(b_.getFloatTy(), static_cast<unsigned>(n));
  LVal out;
  out.regs = val(op.operands[2]).regs;
  for (int64_t r = 0; r < lc.in_size(LinearLayout::reg); ++r) {
    std::vector<int64_t> o = lc.coords(r, 0, 0);
    if (o[0] % S || o[1] % S) continue;
    std::vector<int64_t> c;
    for (int64_t i = 0; i < n; ++i) c.push_back(at(lc, o[0] + i % 4 + 4 * groups * (i / 4), o[1]));
    llvm::Value* acc = llvm::PoisonValue::get(acc_t);
    for (int64_t i = 0; i < n; ++i)
      acc = b_.CreateInsertElement(acc, scaled(out.regs[static_cast<size_t>(c[static_cast<size_t>(i)])], 1.0 / scale),
                                   uint64_t(i));
    for (int64_t k = 0; k < K; k += kstep)
      acc = target_->mfma(da, db, S, operand(A, la, da, o[0], k, true), operand(B, lb, db, k, o[1], false), acc);
    for (int64_t i = 0; i < n; ++i)
      out.regs[static_cast<size_t>(c[static_cast<size_t>(i)])] =
          scaled(b_.CreateExtractElement(acc, uint64_t(i)), scale);
  }
  define(op, out);
}

llvm::Value* LayoutLowering::wgmma_desc(llvm::Value* at, int64_t lbo, int64_t sbo) {
  return wgmma_descriptor(b_, b_.CreatePtrToInt(smem_at(at), b_.getInt32Ty()), lbo, sbo);
}

void LayoutLowering::emit_dot_wgmma(const ir::Op& op) {
  const ir::Value* A = op.operands[0];
  const ir::Value* B = op.operands[1];
  const ir::Type& ct = op.results[0]->type;
  const int64_t M = ct.shape[0], N = ct.shape[1], K = A->type.shape[1];  // (why_not: N <= 256, N % 8, K of 32 bytes)
  const LinearLayout& lc = linear(ct);
  // An instruction's 64 rows a warpgroup (`rows` over them all), repeated over M: `reps`
  // instructions a k step, each on its own N / 2 registers (the layout's, in order).
  const int64_t rows = 16 * ct.layout->warps_per_cta[0], reps = M / rows, n = N / 2;
  if (M % rows || lc.in_size(LinearLayout::reg) != reps * n)
    unsupported(op, "a wgmma accumulator whose registers are not a warp's 16 rows of each instruction");
  // Tiles in shared memory are rows of 128 bytes (column blocks of them where longer), 8-row
  // atoms 1024 bytes apart: a K-major operand's k step is 32 bytes within a block (then the next
  // block, `rows` x 128 bytes on); an M- or N-major one's (16-bit types only) is 16 rows of 128
  // bytes, its blocks of 64 rows or columns K x 128 apart.
  const ir::LayoutRef& lb = B->type.layout;
  const bool b_k_major = lb->order[0] == 0;
  const int64_t b_rows = b_k_major ? N : K;
  const bool a_shared = A->type.layout->kind == ir::Layout::Kind::shared;
  const bool a_m_major = a_shared && A->type.layout->order[0] == 0;
  if (a_m_major && ir::dtype_bytes(A->type.dtype) != 2)
    unsupported(op, "a wgmma A operand in shared memory that is M-major but not of a 16-bit type");
  if (!a_shared && reps > 1) unsupported(op, "a wgmma A operand in registers over more rows than one instruction's");
  // (where an instruction's 64 rows of A start, in bytes: a warpgroup's, then each repetition's)
  auto a_rows_at = [&](int64_t m) { return a_m_major ? m / 64 * K * 128 : m * 128; };
  llvm::Value* group = b_.CreateUDiv(tid_, b_.getInt32(128));
  llvm::Value* a_tile =
      a_shared ? b_.CreateAdd(val(A).view, b_.CreateMul(group, b_.getInt32(static_cast<uint32_t>(a_rows_at(64)))))
               : nullptr;
  llvm::Value* b_tile = val(B).view;
  const std::string instr = wgmma_instr(op);
  const bool f8 = ir::is_f8(A->type.dtype);
  std::string regs;
  for (int64_t i = 0; i < n; ++i) regs += str_cat(i ? ", " : "", "$", i);
  const std::string text = str_cat(
      "wgmma.mma_async.sync.aligned.", instr, " {", regs, "}, ",
      // (operands: the n outputs, the n inputs tied to them, then A and B)
      a_shared ? str_cat("$", 2 * n) : str_cat("{$", 2 * n, ", $", 2 * n + 1, ", $", 2 * n + 2, ", $", 2 * n + 3, "}"),
      ", $", a_shared ? 2 * n + 1 : 2 * n + 4,
      // (scale-d, the scales of A and B, then their transposes: 16-bit types only, f8 K-major)
      f8 ? ", 1, 1, 1;"
         : str_cat(a_shared ? (a_m_major ? ", 1, 1, 1, 1, " : ", 1, 1, 1, 0, ") : ", 1, 1, 1, ",
                   b_k_major ? "0;" : "1;"));
  // An accumulator in flight from a wgmma of the same instruction, this dot its only user, is
  // taken as it is: wgmma orders the groups that accumulate into the same registers.
  const ir::Value* C = op.operands[2];
  const auto made = wgmma_instr_.find(C);
  const bool chained =
      wgmma_pending_.count(C) && made != wgmma_instr_.end() && made->second == instr && only_use(op, C);
  std::vector<llvm::Value*> acc = chained ? vals_.at(C).regs : val(C).regs;
  if (chained) wgmma_pending_.erase(C);
  auto on_acc = [&](const std::string& t, const std::string& more_cons, const std::vector<llvm::Value*>& more) {
    acc = through_asm(t, acc, more_cons, more);
  };
  const LinearLayout* la = a_shared ? nullptr : &linear(A->type);
  auto at = [&](const LinearLayout& ll, int64_t r0, int64_t r1) {
    int64_t r = register_at(ll, {r0, r1});
    if (r < 0 || r % 2 || register_at(ll, {r0, r1 + 1}) != r + 1)
      unsupported(op, str_cat("a wgmma A operand whose registers do not hold its fragment at (", r0, ", ", r1, ")"));
    return r;
  };
  // Every k step's operands first: A's registers must be written before the fence (PTX ISA,
  // wgmma.fence), which takes them as inputs so that nothing computes them after it.
  std::vector<std::vector<llvm::Value*>> steps;  // (a k step's operands for each repetition in turn)
  std::vector<llvm::Value*> a_words;
  std::string a_cons;
  // Each operand's descriptor once; a k step's is it plus the step's offset >> 4 (the address
  // field, bits 0-13, holds any shared address, under 256 KiB: no carry out of it).
  llvm::Value* a_desc = a_shared ? wgmma_desc(a_tile, a_m_major ? K * 128 : 16, 1024) : nullptr;
  llvm::Value* b_desc = wgmma_desc(b_tile, b_k_major ? 16 : b_rows * 128, 1024);
  auto moved = [&](llvm::Value* desc, int64_t bytes) {
    return bytes ? b_.CreateAdd(desc, b_.getInt64(static_cast<uint64_t>(bytes >> 4))) : desc;
  };
  const int64_t kstep = 32 / ir::dtype_bytes(A->type.dtype);  // (an instruction's K: 32 bytes of each operand)
  for (int64_t ks = 0; ks < K / kstep; ++ks)
    for (int64_t rep = 0; rep < reps; ++rep) {
      std::vector<llvm::Value*> more;
      if (a_shared) {
        more.push_back(
            moved(a_desc, (a_m_major ? ks * kstep * 128 : (ks / 4) * M * 128 + (ks % 4) * 32) + a_rows_at(rep * rows)));
      } else {
        for (auto [dm, dk] : {std::pair<int64_t, int64_t>{0, 0}, {8, 0}, {0, 8}, {8, 8}}) {
          more.push_back(operand_word(A, at(*la, dm, ks * 16 + dk)));
          a_words.push_back(more.back()), a_cons += ",r";
        }
      }
      more.push_back(moved(b_desc, b_k_major ? (ks / 4) * b_rows * 128 + (ks % 4) * 32 : ks * kstep * 128));
      steps.push_back(more);
    }
  on_acc("wgmma.fence.sync.aligned;", a_cons, a_words);
  for (size_t i = 0; i < steps.size(); ++i) {  // (each instruction on its repetition's registers)
    const auto first = acc.begin() + static_cast<long>(i % reps * n);
    std::vector<llvm::Value*> part(first, first + n);
    part = through_asm(text, part, a_shared ? ",l,l" : ",r,r,r,r,l", steps[i]);
    std::copy(part.begin(), part.end(), first);
  }
  // The carried values the rest of the block works on (not this dot's operands: the group
  // reads those; not those in flight) pass through the commit, so that work waits for the issue.
  std::vector<const ir::Value*> held;
  if (op.parent == loop_body_)
    for (size_t i = 1; i < loop_body_->args.size(); ++i) {
      const ir::Value* v = loop_body_->args[i].get();
      if (v->type.is_tensor() && v->type.dtype == DType::f32 && !wgmma_pending_.count(v) &&
          std::find(op.operands.begin(), op.operands.end(), v) == op.operands.end() && used_after(op, v))
        held.push_back(v);
    }
  std::vector<llvm::Value*> through;
  for (const ir::Value* v : held) through.insert(through.end(), vals_.at(v).regs.begin(), vals_.at(v).regs.end());
  through = through_asm("wgmma.commit_group.sync.aligned;", through);
  size_t k = 0;
  for (const ir::Value* v : held)
    for (llvm::Value*& x : vals_.at(v).regs) x = through[k++];
  LVal out;
  out.regs = acc;
  define(op, out);
  wgmma_pending_[op.results[0].get()] = wgmma_groups_++;  // (the registers are the group's until it completes)
  wgmma_instr_[op.results[0].get()] = instr;
}

std::string LayoutLowering::wgmma_instr(const ir::Op& dot) {
  const DType a = dot.operands[0]->type.dtype, b = dot.operands[1]->type.dtype;
  return str_cat("m64n", dot.results[0]->type.shape[1], "k", 32 / ir::dtype_bytes(a), ".f32.", operand_type(a), ".",
                 operand_type(b));
}

bool LayoutLowering::only_use(const ir::Op& op, const ir::Value* v) {
  const ir::Block& scope = v->def ? *v->def->parent : *v->owner;
  int uses = 0;
  ir::for_each_use(scope, v, [&](const ir::Op& user, size_t) { uses += &user == &op ? 1 : 2; });
  return uses == 1;
}

bool LayoutLowering::used_after(const ir::Op& op, const ir::Value* v) {
  std::function<bool(const ir::Op&)> uses = [&](const ir::Op& o) {
    if (std::find(o.operands.begin(), o.operands.end(), v) != o.operands.end()) return true;
    for (const auto& r : o.regions)
      for (const auto& inner : r->ops)
        if (uses(*inner)) return true;
    return false;
  };
  for (auto it = std::next(const_cast<ir::Block*>(op.parent)->position(&op)); it != op.parent->ops.end(); ++it)
    if (uses(**it)) return true;
  return false;
}

void LayoutLowering::emit_dot_fma(const ir::Op& op) {
  const ir::Type& at = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const int64_t M = at.shape[0], K = at.shape[1], N = rt.shape[1];
  llvm::Value* a = scratch(M * K * 4 + K * N * 4);
  llvm::Value* bt = b_.CreateAdd(a, b_.getInt32(static_cast<uint32_t>(M * K * 4)));
  barrier();
  stage(op.operands[0], a);
  stage(op.operands[1], bt);
  barrier();
  llvm::Type* f32 = b_.getFloatTy();
  auto at_elem = [&](llvm::Value* base, llvm::Value* e) {
    return b_.CreateLoad(f32, smem_at(b_.CreateAdd(base, b_.CreateMul(e, b_.getInt32(4)))));
  };
  const ir::LinearLayout& lr = linear(rt);
  const LVal& acc0 = val(op.operands[2]);
  LVal g;
  for (int64_t r = 0; r < lr.in_size(ir::LinearLayout::reg); ++r) {
    std::vector<llvm::Value*> c = coords(lr, r);
    // acc = fma(A[m][k], B[k][n], acc) for k from 0 on, in a loop of the program's own
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, "fma", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "fma.end", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* k = b_.CreatePHI(b_.getInt32Ty(), 2);
    llvm::PHINode* acc = b_.CreatePHI(f32, 2);
    k->addIncoming(b_.getInt32(0), pre);
    acc->addIncoming(acc0.regs[static_cast<size_t>(r)], pre);
    llvm::Value* x = at_elem(a, b_.CreateAdd(b_.CreateMul(c[0], b_.getInt32(static_cast<uint32_t>(K))), k));
    llvm::Value* y = at_elem(bt, b_.CreateAdd(b_.CreateMul(k, b_.getInt32(static_cast<uint32_t>(N))), c[1]));
    llvm::Value* next = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32}, {x, y, acc});
    llvm::Value* k1 = b_.CreateAdd(k, b_.getInt32(1));
    k->addIncoming(k1, b_.GetInsertBlock());
    acc->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(k1, b_.getInt32(static_cast<uint32_t>(K))), loop, done);
    b_.SetInsertPoint(done);
    g.regs.push_back(round(next, rt.dtype));
  }
  define(op, g);
}

}  // namespace tiledist::codegen::gpu_ir
