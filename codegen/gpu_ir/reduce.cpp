// Reductions in the GPU IR lowering (codegen/gpu_ir/lowering.h), by ir::reduce_plan: each
// thread combines its registers along the axis, lanes combine by XOR shuffles, and warps that
// hold different parts of the axis combine through shared memory. The result lies in the slice
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
  llvm::Type* t = reg_type(in.element());
  if (ir::is_arg(kind)) unsupported(op, str_cat("reduce '", ir::name_of(kind), "'"));
  if (!t->isFloatTy() && !t->isIntegerTy(32)) unsupported(op, str_cat("reduce of ", in.str()));
  const bool fl = t->isFloatTy();
  auto combine = [&](llvm::Value* a, llvm::Value* x) -> llvm::Value* {
    if (kind == ir::ReduceKind::sum) return fl ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
    const bool up = ir::takes_larger(kind);
    if (fl) return b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, a, x);
    return b_.CreateBinaryIntrinsic(up ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, a, x);
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
  std::vector<llvm::Value*> acc(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    llvm::Value* a = x.regs[static_cast<size_t>(plan.groups[g][0])];
    for (size_t k = 1; k < plan.groups[g].size(); ++k) a = combine(a, x.regs[static_cast<size_t>(plan.groups[g][k])]);
    for (int64_t mask : plan.lane_xor) a = combine(a, target_->shuffle_xor(a, static_cast<int>(mask)));
    acc[g] = a;
  }
  if (!plan.warp_bits.empty()) {
    // Each warp's partials in shared memory, at (result element, the warp's bits along the axis).
    const int64_t parts = int64_t{1} << plan.warp_bits.size();
    const int64_t elems = scalar ? 1 : rt.numel();
    llvm::Value* base = scratch(elems * parts * 4);
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
    auto at = [&](llvm::Value* e, llvm::Value* p) {
      return smem_at(b_.CreateAdd(
          base,
          b_.CreateMul(b_.CreateAdd(b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(parts))), p), b_.getInt32(4))));
    };
    barrier();
    for (size_t g = 0; g < acc.size(); ++g) b_.CreateStore(acc[g], at(elem[g], part));
    barrier();
    for (size_t g = 0; g < acc.size(); ++g) {
      llvm::Value* a = b_.CreateLoad(t, at(elem[g], b_.getInt32(0)));
      for (int64_t p = 1; p < parts; ++p)
        a = combine(a, b_.CreateLoad(t, at(elem[g], b_.getInt32(static_cast<uint32_t>(p)))));
      acc[g] = a;
    }
  }
  if (scalar) return define(op, LVal::of(round(acc[0], rt.dtype)));
  LVal g;
  g.regs.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) g.regs[static_cast<size_t>(slot[i])] = round(acc[i], rt.dtype);
  define(op, g);
}

}  // namespace tiledist::codegen::gpu_ir
