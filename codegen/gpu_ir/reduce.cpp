// Reductions in the GPU IR lowering (codegen/gpu_ir/lowering.h), by ir::reduce_plan: each
// thread combines its registers along the axis, lanes combine by XOR shuffles, and warps that
// hold different parts of the axis combine through shared memory (argmax and argmin carry each
// partial's index along the axis beside its value). The result lies in the slice
// layout, each element where the operand's rows were (an online softmax's row maximum stays in
// the threads of its row).
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

using ir::LinearLayout;

void LayoutLowering::emit_reduce(const ir::Op& op) {
  const ir::Type& in = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const int axis = static_cast<int>(op.int_attr("axis"));
  const ir::ReduceKind kind = ir::enum_attr<ir::ReduceKind>(op, "kind");
  // (8- and 16-bit integers combine as i32, sign-extended, and are truncated at the end: a sum
  // wraps as theirs would, a maximum is theirs)
  llvm::Type* narrow = reg_type(in.element());
  const bool widened = narrow->isIntegerTy(8) || narrow->isIntegerTy(16);
  llvm::Type* t = widened ? b_.getInt32Ty() : narrow;
  if (!t->isFloatTy() && !t->isDoubleTy() && !t->isIntegerTy(32) && !t->isIntegerTy(64))
    unsupported(op, str_cat("reduce of ", in.str()));
  const bool fl = t->isFloatingPointTy();
  const int64_t esize = t->getPrimitiveSizeInBits() / 8;
  // A lane's value from the lane `mask` away: a 64-bit one as its two 32-bit halves.
  auto shuffle = [&](llvm::Value* v, int64_t mask) -> llvm::Value* {
    if (esize == 4) return target_->shuffle_xor(v, static_cast<int>(mask));
    auto* two = llvm::FixedVectorType::get(b_.getInt32Ty(), 2);
    llvm::Value* halves = b_.CreateBitCast(v, two);
    llvm::Value* out = llvm::PoisonValue::get(two);
    for (uint64_t h = 0; h < 2; ++h)
      out = b_.CreateInsertElement(out,
                                   target_->shuffle_xor(b_.CreateExtractElement(halves, h), static_cast<int>(mask)), h);
    return b_.CreateBitCast(out, t);
  };
  const bool arg = ir::is_arg(kind);
  const bool up = ir::takes_larger(kind);
  // A partial: its value, and for argmax and argmin the index along the axis it came from.
  struct Part {
    llvm::Value* v;
    llvm::Value* i;
  };
  // argmax/argmin as the sequential scan from the far end of the type computes it: the first
  // index of the best value, NaN never better than anything (taken as that far end).
  llvm::Value* far = reduce_identity(kind, t);
  auto key = [&](llvm::Value* v) { return fl ? b_.CreateSelect(b_.CreateFCmpUNO(v, v), far, v) : v; };
  auto combine = [&](Part a, Part x) -> Part {
    if (kind == ir::ReduceKind::sum) return {fl ? b_.CreateFAdd(a.v, x.v) : b_.CreateAdd(a.v, x.v), nullptr};
    if (!arg) {
      if (fl)
        return {b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, a.v, x.v), nullptr};
      return {b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, a.v, x.v), nullptr};
    }
    llvm::Value* ka = key(a.v);
    llvm::Value* kx = key(x.v);
    llvm::Value* better = fl ? (up ? b_.CreateFCmpOGT(kx, ka) : b_.CreateFCmpOLT(kx, ka))
                             : (up ? b_.CreateICmpSGT(kx, ka) : b_.CreateICmpSLT(kx, ka));
    llvm::Value* tie = fl ? b_.CreateFCmpOEQ(kx, ka) : b_.CreateICmpEQ(kx, ka);
    llvm::Value* take = b_.CreateOr(better, b_.CreateAnd(tie, b_.CreateICmpSLT(x.i, a.i)));
    return {b_.CreateSelect(take, x.v, a.v), b_.CreateSelect(take, x.i, a.i)};
  };
  const LinearLayout& ll = linear(in);
  ir::ReducePlan plan = ir::reduce_plan(ll, axis);
  if (plan.mixed) unsupported(op, "a reduction whose layout mixes its axis with another dimension");
  auto erase = [axis](std::vector<int64_t> c) {
    c.erase(c.begin() + axis);
    return c;
  };
  // Which result register each group of the plan becomes.
  const bool scalar = !rt.is_tensor();
  std::vector<int64_t> slot(plan.groups.size(), 0);
  if (!scalar) {
    const LinearLayout& lr = linear(rt);
    for (int in_ : {LinearLayout::lane, LinearLayout::warp})
      for (size_t bit = 0; bit < lr.bases[in_].size(); ++bit)
        if (bit >= ll.bases[in_].size() || erase(ll.bases[in_][bit]) != lr.bases[in_][bit])
          unsupported(op, str_cat("a reduction into ", rt.str(), ", whose threads do not hold its operand's rows"));
    if (static_cast<int64_t>(plan.groups.size()) != lr.in_size(LinearLayout::reg))
      unsupported(op, str_cat("a reduction into ", rt.str(), " (registers differ)"));
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      slot[g] = register_at(lr, erase(ll.coords(plan.groups[g][0], 0, 0)));
      if (slot[g] < 0) unsupported(op, str_cat("a reduction into ", rt.str(), " (a row without a register)"));
    }
  } else if (plan.groups.size() != 1) {
    unsupported(op, "a reduction to a scalar of a tensor of rank > 1");
  }
  const LVal& x = val(op.operands[0]);
  const std::vector<llvm::Value*> mine = arg ? thread_coords(ll) : std::vector<llvm::Value*>{};
  auto part_of = [&](int64_t r) {
    llvm::Value* v = x.regs[static_cast<size_t>(r)];
    return Part{widened ? b_.CreateSExt(v, t) : v, arg ? at_register(mine, ll, r)[static_cast<size_t>(axis)] : nullptr};
  };
  auto shuffled = [&](Part a, int64_t mask) {
    return Part{shuffle(a.v, mask), a.i ? target_->shuffle_xor(a.i, static_cast<int>(mask)) : nullptr};
  };
  std::vector<Part> acc(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    Part a = part_of(plan.groups[g][0]);
    for (size_t k = 1; k < plan.groups[g].size(); ++k) a = combine(a, part_of(plan.groups[g][k]));
    for (int64_t mask : plan.lane_xor) a = combine(a, shuffled(a, mask));
    acc[g] = a;
  }
  if (!plan.warp_bits.empty()) {
    // Each warp's partials in shared memory, at (result element, the warp's bits along the axis);
    // argmax's and argmin's indices in a second array after the values.
    const int64_t parts = int64_t{1} << plan.warp_bits.size();
    const int64_t elems = scalar ? 1 : rt.numel();
    llvm::Value* base = scratch(elems * parts * (esize + (arg ? 4 : 0)));
    llvm::Value* index_base = b_.CreateAdd(base, b_.getInt32(static_cast<uint32_t>(elems * parts * esize)));
    llvm::Value* warp = b_.CreateUDiv(tid_, b_.getInt32(target_->warp_size()));
    llvm::Value* part = b_.getInt32(0);
    for (size_t i = 0; i < plan.warp_bits.size(); ++i) {
      llvm::Value* on =
          b_.CreateAnd(b_.CreateLShr(warp, b_.getInt32(static_cast<uint32_t>(plan.warp_bits[i]))), b_.getInt32(1));
      part = b_.CreateOr(part, b_.CreateShl(on, b_.getInt32(static_cast<uint32_t>(i))));
    }
    std::vector<llvm::Value*> elem(acc.size(), b_.getInt32(0));
    if (!scalar)
      for (size_t g = 0; g < acc.size(); ++g) elem[g] = flat_index(coords(linear(rt), slot[g]), rt.shape);
    auto at = [&](llvm::Value* from, llvm::Value* e, llvm::Value* p, int64_t size) {
      return smem_at(
          b_.CreateAdd(from, b_.CreateMul(b_.CreateAdd(b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(parts))), p),
                                          b_.getInt32(static_cast<uint32_t>(size)))));
    };
    barrier();
    for (size_t g = 0; g < acc.size(); ++g) {
      b_.CreateStore(acc[g].v, at(base, elem[g], part, esize));
      if (arg) b_.CreateStore(acc[g].i, at(index_base, elem[g], part, 4));
    }
    barrier();
    auto load_part = [&](size_t g, int64_t p) {
      llvm::Value* pv = b_.getInt32(static_cast<uint32_t>(p));
      return Part{b_.CreateLoad(t, at(base, elem[g], pv, esize)),
                  arg ? b_.CreateLoad(b_.getInt32Ty(), at(index_base, elem[g], pv, 4)) : nullptr};
    };
    for (size_t g = 0; g < acc.size(); ++g) {
      Part a = load_part(g, 0);
      for (int64_t p = 1; p < parts; ++p) a = combine(a, load_part(g, p));
      acc[g] = a;
    }
  }
  auto result = [&](const Part& a) { return arg ? a.i : widened ? b_.CreateTrunc(a.v, narrow) : round(a.v, rt.dtype); };
  if (scalar) return define(op, LVal::of(result(acc[0])));
  LVal g;
  g.regs.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) g.regs[static_cast<size_t>(slot[i])] = result(acc[i]);
  define(op, g);
}

}  // namespace tiledist::codegen::gpu_ir
