// Values recomputed rather than moved (codegen/gpu/lowering.h): index arithmetic (aranges,
// splats, elementwise ops) evaluated at any element, or at a later iteration of a pipelined loop;
// and broadcast and transpose, which recompute where they can and go through shared memory
// otherwise.
#include "codegen/gpu/lowering.h"

namespace tiledist::codegen::gpu {

std::vector<int64_t> GpuLowering::permute_strides(const ir::Op& op) {
  const ir::Type& in = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  auto in_strides = strides_of(in.shape);
  std::vector<int64_t> s(rt.shape.size());
  for (size_t d = 0; d < s.size(); ++d) {
    if (op.code == OpCode::Trans)
      s[d] = in_strides[op.ints_attr("perm")[d]];
    else
      s[d] = in.shape[d] == 1 && rt.shape[d] != 1 ? 0 : in_strides[d];
  }
  return s;
}

bool GpuLowering::recomputable(const ir::Value* v, int budget) {
  if (!v->type.is_tensor()) return true;
  const ir::Op* d = v->def;
  if (!d || budget <= 0) return false;
  switch (d->code) {
    case OpCode::Arange:
    case OpCode::Splat:
      return true;
    case OpCode::Load:
    case OpCode::AtomicRMW:
    case OpCode::AtomicCAS:
    case OpCode::Reduce:
    case OpCode::Dot:
    case OpCode::SymmAt:
    case OpCode::For:
    case OpCode::If:
    case OpCode::While:
      return false;
    default:
      if (!d->is_pure() || d->results.size() != 1) return false;
      for (const ir::Value* o : d->operands)
        if (!recomputable(o, budget - 1)) return false;
      return true;
  }
}

llvm::Value* GpuLowering::recompute(const ir::Value* v, llvm::Value* e) {
  if (!v->type.is_tensor()) return recompute_scalar(v);
  if (!v->def) return advanced(v, recompute(carried_step(v).init, e), recompute(carried_step(v).inc, e));
  const ir::Op& d = *v->def;
  switch (d.code) {
    case OpCode::Arange:
      return b_.CreateAdd(e, b_.getInt32(static_cast<int32_t>(d.int_attr("start"))));
    case OpCode::Splat:
      return recompute_scalar(d.operands[0]);
    case OpCode::ExpandDims:
    case OpCode::Reshape:
    case OpCode::Hint:
    case OpCode::ConsumeToken:
      return recompute(d.operands[0], e);
    case OpCode::Broadcast:
    case OpCode::Trans:
      return recompute(d.operands[0], linear(multi_index(e, v->type.shape), permute_strides(d)));
    default: {
      std::vector<llvm::Value*> in;
      for (const ir::Value* o : d.operands) in.push_back(recompute(o, e));
      return elementwise(d, in);
    }
  }
}

llvm::Value* GpuLowering::advanced(const ir::Value* v, llvm::Value* init, llvm::Value* inc) {
  TD_ASSERT(subst_iteration_, "a carried value recomputed outside a prefetch");
  llvm::Value* n =
      b_.CreateMul(b_.CreateSExt(subst_iteration_, b_.getInt64Ty()), b_.CreateSExtOrTrunc(inc, b_.getInt64Ty()));
  if (v->type.is_ptr) return b_.CreateGEP(mem_type(v->type.dtype), init, n);
  return b_.CreateAdd(init, b_.CreateTrunc(n, init->getType()));
}

llvm::Value* GpuLowering::recompute_scalar(const ir::Value* v) {
  if (auto it = subst_.find(v); it != subst_.end()) return it->second;
  if (subst_body_ && !v->def && v->owner == subst_body_)
    return advanced(v, recompute_scalar(carried_step(v).init), recompute_scalar(carried_step(v).inc));
  if (!subst_body_ || !v->def || v->def->parent != subst_body_) return val(v).scalar;
  const ir::Op& d = *v->def;
  if (d.code == OpCode::Constant) return constant_of(d);
  if (d.code == OpCode::Hint || d.code == OpCode::ConsumeToken) return recompute_scalar(d.operands[0]);
  std::vector<llvm::Value*> in;
  for (const ir::Value* o : d.operands) in.push_back(recompute_scalar(o));
  return elementwise(d, in);
}

bool GpuLowering::loop_recomputable(const ir::Value* v, const ir::Block& body, int budget) {
  if (budget <= 0) return false;
  if (!v->def) {
    if (v->owner != &body) return !v->type.is_tensor();
    if (v->index == 0) return true;   // the induction variable
    CarriedStep c = carried_step(v);  // or a value that advances by a fixed step
    return c.init && loop_recomputable(c.init, body, budget - 1) && loop_recomputable(c.inc, body, budget - 1);
  }
  const ir::Op& d = *v->def;
  if (!v->type.is_tensor() && d.parent != &body) return true;
  switch (d.code) {
    case OpCode::Constant:
      return !v->type.is_tensor();
    case OpCode::Arange:
      return true;
    case OpCode::ProgramId:
    case OpCode::NumPrograms:
    case OpCode::Rank:
    case OpCode::NumRanks:
    case OpCode::Reduce:
    case OpCode::Dot:
      return false;  // not elementwise (or, in the body, not hoisted: not worth handling)
    default:
      if (!d.is_pure() || d.results.size() != 1 || !d.regions.empty()) return false;
      for (const ir::Value* o : d.operands)
        if (!loop_recomputable(o, body, budget - 1)) return false;
      return true;
  }
}

void GpuLowering::emit_permute(const ir::Op& op) {
  const ir::Type& in = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  auto s = permute_strides(op);
  if (recomputable(op.operands[0])) {
    GVal g;
    for (int64_t j = 0; j < slots_of(rt); ++j)
      g.slots.push_back(recompute(op.operands[0], linear(multi_index(element_index(rt, j), rt.shape), s)));
    return define(op, g);
  }
  llvm::Value* arr = stage(op.operands[0], 0);
  barrier();
  GVal g;
  for (int64_t j = 0; j < slots_of(rt); ++j) {
    llvm::Value* src = linear(multi_index(element_index(rt, j), rt.shape), s);
    g.slots.push_back(when_value(valid(rt, j), reg_type(rt.element()), llvm::UndefValue::get(reg_type(rt.element())),
                                 [&] { return staged_load(arr, in, src); }));
  }
  barrier();
  define(op, g);
}

}  // namespace tiledist::codegen::gpu
