// A loop's body for an iteration ahead (loop_ahead.h).
#include "codegen/passes/loop_ahead.h"

#include "codegen/axis_info.h"
#include "ir/passes/passes.h"

namespace tiledist::codegen {

using ir::Block;
using ir::Op;
using ir::OpCode;
using ir::Value;

namespace {

bool nonzero_constant(const Value* v) {
  const Op* c = ir::constant_source(v);
  if (!c) return false;
  const ir::Attr& a = c->attrs.at("value");
  return std::holds_alternative<int64_t>(a) ? std::get<int64_t>(a) != 0 : std::get<double>(a) != 0.0;
}

/// Whether dividing by `v` is safe for an iteration that may not exist: a nonzero constant, a
/// float (no trap), or max(x, c) with c a constant above zero (as a kernel writes a count it
/// divides by: `i / tl::maximum(steps, 1)`), splat or broadcast.
bool safe_divisor(const Value* v, int depth = 0) {
  if (v->type.is_float() || nonzero_constant(v)) return true;
  const Op* d = v->def;
  if (!d || depth > 8) return false;
  if (d->code == OpCode::Splat || d->code == OpCode::Broadcast || d->code == OpCode::ExpandDims)
    return safe_divisor(d->operands[0], depth + 1);
  if (d->code != OpCode::Max) return false;
  for (const Value* o : d->operands) {
    const Op* c = ir::constant_source(o);
    if (c && std::holds_alternative<int64_t>(c->attrs.at("value")) && std::get<int64_t>(c->attrs.at("value")) > 0)
      return true;
  }
  return false;
}

}  // namespace

bool LoopAhead::constant_positive_step() const {
  const Op* step = loop_.operands[2]->def;
  return step && step->code == OpCode::Constant && std::get<int64_t>(step->attrs.at("value")) > 0;
}

bool LoopAhead::ahead(const Value* v, int depth) {
  if (v == iv()) return true;
  if (v->owner == &body_) return carried_step(v).inc != nullptr;
  if (v->owner) return !inside(v->owner->parent);
  const Op* d = v->def;
  if (d->parent != &body_) return !inside(d);
  if (!d->is_pure() || !d->regions.empty() || depth > 64) return false;
  if ((d->code == OpCode::Div || d->code == OpCode::Rem) && !safe_divisor(d->operands[1])) return false;
  for (const Value* o : d->operands)
    if (!ahead(o, depth + 1)) return false;
  return true;
}

bool LoopAhead::writes_or_orders_memory(const Block& b, bool stores) {
  for (const auto& op : b.ops) {
    const bool passes =
        op->code == OpCode::Load || op->code == OpCode::Prefetch ||
        (!stores && (op->code == OpCode::Store || op->code == OpCode::SymmAt));  // (symm_at: checked, not ordered)
    if ((op->info().flags & ir::MEM) && !passes) return true;
    for (const auto& r : op->regions)
      if (writes_or_orders_memory(*r, stores)) return true;
  }
  return false;
}

bool LoopAhead::inside(const Op* o) const {
  for (const Block* b = o ? o->parent : nullptr; b; b = b->parent ? b->parent->parent : nullptr)
    if (b == &body_) return true;
  return false;
}

ir::Builder LoopAhead::builder_at(Op& op, bool after) {
  ir::Builder b(op.parent);
  auto it = op.parent->position(&op);
  b.set_insert_point(op.parent, after ? std::next(it) : it);
  b.set_loc(op.loc);
  return b;
}

Value* LoopAhead::live(ir::Builder& b, int64_t iterations, bool prologue) {
  Value* from = prologue ? loop_.operands[0] : iv();
  if (iv()->type.dtype == ir::DType::i64)
    return b.cmp("lt",
                 b.binary(OpCode::Add, from,
                          b.binary(OpCode::Mul, b.constant_int(ir::DType::i64, iterations), loop_.operands[2])),
                 loop_.operands[1]);
  Value* at64 = b.binary(
      OpCode::Add, b.cast(from, ir::DType::i64),
      b.binary(OpCode::Mul, b.constant_int(ir::DType::i64, iterations), b.cast(loop_.operands[2], ir::DType::i64)));
  return b.cmp("lt", at64, b.cast(loop_.operands[1], ir::DType::i64));
}

Value* LoopAhead::clone_at(ir::Builder& b, Value* v, Value* at, int64_t iterations, bool prologue, Made& made) {
  if (v == iv()) return at;
  auto it = made.find(v);
  if (it != made.end()) return it->second;
  if (v->owner == &body_) {
    CarriedStep step = carried_step(v);
    Value* base = prologue ? const_cast<Value*>(step.init) : v;
    if (iterations == 0) return made[v] = base;
    Value* inc = const_cast<Value*>(step.inc);
    Value* times = b.constant_int(inc->type.dtype, iterations);
    if (inc->type.is_tensor()) times = b.create(OpCode::Splat, {times}, {inc->type})->result();
    Value* by = b.binary(OpCode::Mul, inc, times);
    return made[v] = v->type.is_ptr ? b.addptr(base, by) : b.binary(OpCode::Add, base, by);
  }
  if (v->owner || v->def->parent != &body_) return v;
  const Op& d = *v->def;
  std::vector<Value*> operands;
  for (Value* o : d.operands) operands.push_back(clone_at(b, o, at, iterations, prologue, made));
  return made[v] = b.create(d.code, operands, {v->type}, d.attrs)->result();
}

}  // namespace tiledist::codegen
