// Dot prefetch (passes.h says what it does). For a loop `for i in [lo, hi) step s` whose body
// computes S = dot(A(i), B(i), C) from the induction variable and values from outside alone,
// and uses S on the way to another dot:
//
//   s0 = dot(A(lo), B(lo), C)           loads masked to lo < hi
//   for i ..., carrying s (S of iteration i, from s0):
//     s_next = dot(A(i + s), B(i + s), C)   loads masked to i + s < hi; issued where S was
//     ... the body, reading s for S ...
//     yield ..., s_next
//
// On a matrix unit that runs asynchronously (wgmma), s_next's dot runs while the rest of the
// iteration (attention's online softmax) works on s: FlashAttention-3's overlap within a
// warpgroup. The arithmetic is the same, in the same order; the last iteration's s_next is
// computed from masked loads and not used.
#include <set>

#include "codegen/passes/loop_ahead.h"
#include "codegen/passes/passes.h"
#include "ir/layout.h"
#include "ir/passes/passes.h"

namespace tiledist::codegen {

namespace {

using ir::Block;
using ir::Op;
using ir::OpCode;
using ir::Value;

class Prefetcher {
 public:
  explicit Prefetcher(Op& loop) : loop_(loop), body_(*loop.regions[0]), ahead_(loop) {}

  bool run() {
    if (!ahead_.constant_positive_step() || LoopAhead::writes_or_orders_memory(body_)) return false;
    Op* dot = find();
    if (!dot) return false;
    Value* s = dot->results[0].get();
    const ir::Type type = s->type;
    // Before the loop: the first iteration's.
    ir::Builder pre = LoopAhead::builder_at(loop_, false);
    LoopAhead::Made first;
    Value* s0 = ahead_.clone_at(pre, s, loop_.operands[0], 0, true, first, ahead_.live(pre, 0, true));
    loop_.operands.push_back(s0);
    Value* carried = body_.add_arg(type);
    loop_.add_result(type);
    // In the body, where the dot was: the next iteration's.
    ir::Builder in = LoopAhead::builder_at(*dot, false);
    LoopAhead::Made next;
    Value* at = in.binary(OpCode::Add, ahead_.iv(), loop_.operands[2]);
    Value* s_next = ahead_.clone_at(in, s, at, 1, false, next, ahead_.live(in, 1, false));
    ir::replace_all_uses(body_, s, carried);
    body_.terminator()->operands.push_back(s_next);
    erase_dead_slice(*dot);
    return true;
  }

 private:
  /// The first dot of the body (on wgmma) whose operands can all be computed an iteration
  /// ahead, loads included, and whose result reaches another dot of the body.
  Op* find() {
    for (auto& op : body_.ops) {
      if (op->code != OpCode::Dot) continue;
      const ir::LayoutRef& l = op->results[0]->type.layout;
      if (!l || l->kind != ir::Layout::Kind::mma || l->mma != ir::MmaKind::wgmma) continue;
      bool ahead = true;
      for (const Value* o : op->operands) ahead &= ahead_.ahead(o, true);
      if (ahead && reaches_another_dot(op.get())) return op.get();
    }
    return nullptr;
  }

  bool reaches_another_dot(const Op* from) {
    std::set<const Value*> reached = {from->results[0].get()};
    bool found = false;
    for (auto& op : body_.ops) {
      if (!uses_any(*op, reached)) continue;
      if (op->code == OpCode::Dot) found = true;
      for (auto& r : op->results) reached.insert(r.get());
    }
    return found;
  }

  static bool uses_any(const Op& op, const std::set<const Value*>& values) {
    for (const Value* o : op.operands)
      if (values.count(o)) return true;
    for (const auto& r : op.regions)
      for (const auto& inner : r->ops)
        if (uses_any(*inner, values)) return true;
    return false;
  }

  /// Erases `dot` and what in the body only it used (loads included: dce keeps loads).
  void erase_dead_slice(Op& dot) {
    std::set<const Op*> slice;
    std::vector<const Op*> work = {&dot};
    while (!work.empty()) {
      const Op* o = work.back();
      work.pop_back();
      if (!slice.insert(o).second) continue;
      for (const Value* v : o->operands)
        if (v->def && v->def->parent == &body_) work.push_back(v->def);
    }
    for (bool erased = true; erased;) {
      erased = false;
      std::map<const Value*, int> uses = ir::count_uses(body_);
      for (auto it = body_.ops.rbegin(); it != body_.ops.rend(); ++it) {
        const Op* o = it->get();
        if (!slice.count(o)) continue;
        bool used = false;
        for (auto& r : o->results) used |= uses.count(r.get()) > 0;
        if (used) continue;
        slice.erase(o);
        body_.erase(o);
        erased = true;
        break;
      }
    }
  }

  Op& loop_;
  Block& body_;
  LoopAhead ahead_;
};

void prefetch_block(Block& b) {
  std::vector<Op*> loops;
  for (auto& op : b.ops) {
    for (auto& r : op->regions) prefetch_block(*r);
    if (op->code == OpCode::For) loops.push_back(op.get());
  }
  for (Op* loop : loops) Prefetcher(*loop).run();
}

}  // namespace

void dot_prefetch(ir::Function& f, const GpuPassContext& ctx) {
  if (!ctx.wgmma || !ctx.prefetch_dots) return;  // (mma.sync waits for its result: nothing would run beside it)
  prefetch_block(f.body);
}

}  // namespace tiledist::codegen
