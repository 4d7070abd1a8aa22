// A loop that waits for consecutive signal words one by one becomes one wait for all of them:
//
//   %t = for %lo, %hi, 1, 0 {            (carrying the last value seen, from 0)
//   ^(%w, %_):
//     %p = addptr %base, %w
//     %v = wait %p, 1, %want {...}
//     yield %v
//   }
// becomes
//   %p = addptr %base, %lo
//   %t = wait %p, max(%hi - %lo, 0), %want {...}
//
// which polls the same words in the same order and gives the same value (the last word's, or 0
// where there is none: hi <= lo, a wait of no words, which the host's runtime would refuse
// negative). ag_gemm waits so for the signal words of a tile's rows; one wait is one
// polling region for the lowering, where a loop of them is a region per iteration, which ptxas
// answered by serializing the wgmma of the K loop after it (C7518).
#include "ir/builder.h"
#include "ir/passes/passes.h"

namespace tiledist::ir {

namespace {

bool constant_int(const Value* v, int64_t want) {
  const Op* c = constant_source(v);
  return c && !v->type.is_tensor() && std::holds_alternative<int64_t>(c->attrs.at("value")) &&
         std::get<int64_t>(c->attrs.at("value")) == want;
}

/// The loop's wait, where `loop` has the form above; null otherwise.
const Op* folded_wait(const Op& loop) {
  if (loop.code != OpCode::For || loop.operands.size() != 4 || loop.results.size() != 1) return nullptr;
  const Block& body = *loop.regions[0];
  if (body.ops.size() != 3 || !constant_int(loop.operands[2], 1) || !constant_int(loop.operands[3], 0)) return nullptr;
  if (loop.operands[0]->type != Type::scalar(DType::i32)) return nullptr;  // (the wait's count is an i32)
  auto it = body.ops.begin();
  const Op& at = **it++;
  const Op& wait = **it++;
  const Op& yield = **it;
  auto outside = [&](const Value* v) { return v->def ? v->def->parent != &body : v->owner != &body; };
  return at.code == OpCode::AddPtr && !at.results[0]->type.is_tensor() && outside(at.operands[0]) &&
                 at.operands[1] == body.args[0].get() && wait.code == OpCode::Wait &&
                 wait.operands[0] == at.results[0].get() && constant_int(wait.operands[1], 1) &&
                 outside(wait.operands[2]) && wait.results[0]->type == loop.results[0]->type &&
                 yield.operands.size() == 1 && yield.operands[0] == wait.results[0].get()
             ? &wait
             : nullptr;
}

void fold_in(Block& b) {
  for (auto it = b.ops.begin(); it != b.ops.end();) {
    Op& op = **it;
    for (auto& r : op.regions) fold_in(*r);
    const Op* wait = folded_wait(op);
    if (!wait) {
      ++it;
      continue;
    }
    Builder bld(&b);
    bld.set_insert_point(&b, it);
    bld.set_loc(wait->loc);
    const Op& at = *op.regions[0]->ops.front();
    Value* first = bld.addptr(at.operands[0], op.operands[0]);
    Value* span = bld.binary(OpCode::Sub, op.operands[1], op.operands[0]);
    Value* n = bld.binary(OpCode::Max, span, bld.constant_int(DType::i32, 0));
    Op* all = bld.create(OpCode::Wait, {first, n, wait->operands[2]}, {wait->results[0]->type}, wait->attrs);
    replace_all_uses(b, op.results[0].get(), all->results[0].get());
    it = b.ops.erase(it);
  }
}

}  // namespace

void fold_wait_loops(Function& f) { fold_in(f.body); }

}  // namespace tiledist::ir
