// Dot prefetch (passes.h says what it does), on a loop the pipelining pass has made: its body
// starts with `async_wait {pending = S - 2}` and reads ring tiles by the carried tile index t.
// For the first wgmma dot S = dot(X, Y, C) whose operands are values from outside the loop and
// tiles of the ring at t, and whose result reaches another dot:
//
//   async_wait {pending = S - 2}            (before the loop: the first iteration's tiles)
//   s0 = dot(X, local_load buf[0], C)
//   for i ..., carrying s (S of iteration i, from s0):
//     async_wait {pending = S - 3}          this iteration's tiles and the next one's
//     x1 = local_load buf[(t + 1) % S]
//     ... the copies of iteration i + S - 1 (into the tile of i - 1) ...
//     s_next = dot(X, x1, C)                issued where S was
//     ... the body, reading s for S ...
//     yield ..., s_next
//
// On a matrix unit that runs asynchronously (wgmma), s_next's dot runs while the rest of the
// iteration (attention's online softmax) works on s: FlashAttention-3's overlap within a
// warpgroup. The arithmetic is the same, in the same order; the last iteration's s_next reads
// a tile the pipeline filled past the loop's end (masked off: zeros) and is not used. Rings of
// fewer than 3 tiles are left alone (the next tile would be the one being copied into).
#include <set>

#include "codegen/passes/loop_ahead.h"
#include "codegen/passes/passes.h"
#include "ir/builder.h"
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
    if (body_.ops.empty() || body_.ops.front()->code != OpCode::AsyncWait) return false;
    Op& wait = *body_.ops.front();
    Op* dot = find();
    if (!dot) return false;
    const int64_t stages = ring_tiles_;
    if (stages < 3 || wait.int_attr("pending") != stages - 2) return false;
    Value* s = dot->results[0].get();
    const ir::Type type = s->type;
    // Before the loop: the first iteration's tiles (tile 0 of each ring), then its dot.
    ir::Builder pre(loop_.parent);
    pre.set_insert_point(loop_.parent, loop_.parent->position(&loop_));
    pre.set_loc(loop_.loc);
    pre.async_wait(stages - 2);
    Value* zero = pre.constant_int(ir::DType::i32, 0);
    Value* s0 = pre.create(OpCode::Dot, operands_at(pre, *dot, zero, true), {type}, dot->attrs)->result();
    loop_.operands.push_back(s0);
    Value* carried = body_.add_arg(type);
    loop_.add_result(type);
    // In the body: wait for the next iteration's tiles too, read them, and issue its dot
    // where this one's was.
    wait.attrs["pending"] = int64_t{stages - 3};
    ir::Builder top(&body_);
    top.set_insert_point(&body_, std::next(body_.position(&wait)));
    top.set_loc(loop_.loc);
    Value* next = top.binary(OpCode::Rem, top.binary(OpCode::Add, tile_, top.constant_int(ir::DType::i32, 1)),
                             top.constant_int(ir::DType::i32, stages));
    std::vector<Value*> ahead = operands_at(top, *dot, next, false);
    ir::Builder at_dot(&body_);
    at_dot.set_insert_point(&body_, body_.position(dot));
    at_dot.set_loc(dot->loc);
    Value* s_next = at_dot.create(OpCode::Dot, ahead, {type}, dot->attrs)->result();
    ir::replace_all_uses(body_, s, carried);
    body_.terminator()->operands.push_back(s_next);
    std::vector<const Op*> loads;
    for (const Value* o : dot->operands)
      if (o->def && o->def->parent == &body_) loads.push_back(o->def);
    body_.erase(dot);
    std::map<const Value*, int> uses = ir::count_uses(body_);
    for (const Op* l : loads)
      if (!uses.count(l->results[0].get())) body_.erase(l);
    return true;
  }

 private:
  /// A ring tile read at the carried tile index: local_load(buf, t) of a buffer allocated
  /// outside the loop.
  bool ring_tile(const Value* v) {
    const Op* d = v->def;
    if (!d || d->parent != &body_ || d->code != OpCode::LocalLoad) return false;
    const Value* buf = d->operands[0];
    const Value* index = d->operands[1];
    if (!buf->def || buf->def->parent == &body_ || index->owner != &body_ || (tile_ && index != tile_)) return false;
    const int64_t tiles = buf->type.shape[0];
    if (ring_tiles_ && tiles != ring_tiles_) return false;
    tile_ = const_cast<Value*>(index), ring_tiles_ = tiles;
    return true;
  }

  /// The first wgmma dot of the body whose operands are values from outside the loop or ring
  /// tiles at t, and whose result reaches another dot of the body.
  Op* find() {
    for (auto& op : body_.ops) {
      if (op->code != OpCode::Dot) continue;
      const ir::LayoutRef& l = op->results[0]->type.layout;
      if (!l || l->kind != ir::Layout::Kind::mma || l->mma != ir::MmaKind::wgmma) continue;
      Value* tile = tile_;
      int64_t tiles = ring_tiles_;
      bool ok = true, any_tile = false;
      for (const Value* o : op->operands) {
        const bool fixed = invariant(o);
        const bool ring = !fixed && ring_tile(o);
        ok &= fixed || ring;
        any_tile |= ring;
      }
      if (ok && any_tile && reaches_another_dot(op.get())) return op.get();
      tile_ = tile, ring_tiles_ = tiles;
    }
    return nullptr;
  }

  /// Whether `v` is the same in every iteration: from outside the loop, or pure ops of the body
  /// over such values (a zero accumulator splat in the body).
  bool invariant(const Value* v, int depth = 0) const {
    if (v->owner) return v->owner != &body_ && !ahead_.inside(v->owner->parent);
    const Op* d = v->def;
    if (d->parent != &body_) return !ahead_.inside(d);
    if (!d->is_pure() || !d->regions.empty() || depth > 8) return false;
    for (const Value* o : d->operands)
      if (!invariant(o, depth + 1)) return false;
    return true;
  }
  /// `v` (invariant) before the loop: the body's pure ops over outside values cloned at `b`.
  Value* hoisted(ir::Builder& b, Value* v) {
    if (v->owner || v->def->parent != &body_) return v;
    std::vector<Value*> operands;
    for (Value* o : v->def->operands) operands.push_back(hoisted(b, o));
    return b.create(v->def->code, operands, {v->type}, v->def->attrs)->result();
  }

  /// The dot's operands with each ring tile read at `index` instead (new local_loads at `b`);
  /// `before_loop`: the others as computed before the loop.
  std::vector<Value*> operands_at(ir::Builder& b, const Op& dot, Value* index, bool before_loop) {
    std::vector<Value*> out;
    for (Value* o : dot.operands) {
      if (o->def && o->def->parent == &body_ && o->def->code == OpCode::LocalLoad) {
        const Op& l = *o->def;
        out.push_back(b.create(OpCode::LocalLoad, {l.operands[0], index}, {o->type}, l.attrs)->result());
      } else {
        out.push_back(before_loop ? hoisted(b, o) : o);
      }
    }
    return out;
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

  Op& loop_;
  Block& body_;
  LoopAhead ahead_;         // (what lies inside the loop)
  Value* tile_ = nullptr;   // the carried tile index the ring tiles are read at
  int64_t ring_tiles_ = 0;  // S
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
