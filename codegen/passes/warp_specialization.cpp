// Warp specialization (passes.h says what it does). The pipelining pass leaves each TMA loop as
//
//   bufs, full, empty = local_alloc ...; init_barrier full; init_barrier empty
//   async_tma_copy ... (iterations 0 .. S-2, into slots 0 .. S-2)
//   for i ..., carrying j (from first = 0):
//     wait_barrier full[j % S], (j / S) & 1                 every thread
//     ... local_load ... the body ...
//     arrive_barrier empty[slot], j > first {pending = 1}   slot = (j + S - 1) % S: iteration j-1's
//     wait_barrier empty[slot], ..., j >= 1 {issuer}        the copies of iteration i + (S-1) step,
//     async_tma_copy ... into slot                          count j + S - 1
//     yield ..., j + 1
//   arrive_barrier empty[(end + S - 1) % S], end > first    the last iteration's slot
//
// and this pass makes the kernel
//
//   bufs, full, empty, init_barrier ...                     (every thread, hoisted to the top)
//   warp_specialize {
//     (producer) what the loops' bounds and copies need, cloned; for each loop in turn:
//     for i' in the loop's range, carrying c (from 0):
//       the body's issue, cloned, for i = i' - (S-1) step and j = c - (S-1): it waits for the
//       slot of count c to be emptied (from c >= S on) and copies iteration i' into it
//   } {
//     (consumers) the kernel as it was, without the prologue's copies and the body's issue
//   }
//
// The issue is cloned rather than written anew, so that the counts and slots are the pipelining
// pass's own: its copies of iteration i + (S-1) step at count j + S - 1 are, for j = c - (S-1),
// the copies of i' at count c.
#include <algorithm>
#include <functional>
#include <list>
#include <map>
#include <set>

#include "codegen/passes/passes.h"
#include "ir/attrs.h"
#include "ir/builder.h"
#include "ir/passes/passes.h"

namespace tiledist::codegen {

namespace {

using ir::Block;
using ir::Op;
using ir::OpCode;
using ir::Value;

/// A loop whose copies the pipelining pass made TMA copies onto a ring of mbarriers.
struct Ring {
  Op* loop = nullptr;
  int64_t stages = 0;
  std::set<const Op*> issue;  // in its body: the issuer's wait and the copies
  std::vector<Op*> prologue;  // before it: the first iterations' copies
  std::set<const Op*> setup;  // the local_allocs of its tiles and barriers, the init_barriers
  Value* full = nullptr;
  Value* empty = nullptr;
  std::vector<Value*> tiles;    // its copies' buffers, in the body's order
  const Ring* after = nullptr;  // the ring before it in its block whose buffers it shares
};

class WarpSpecializer {
 public:
  WarpSpecializer(ir::Function& f, const GpuPassContext& ctx) : f_(f), ctx_(ctx) {}

  /// After the consumers lost the copies (and dce what computed their coordinates): the waits
  /// whose token only copies read, which the producer runs, are dropped from the consumers
  /// where nothing of theirs reads the token (a token orders the loads through it: those are
  /// the producer's). Whether it dropped one.
  bool drop_consumer_copy_waits() {
    std::vector<Op*> dead;
    f_.walk([&](Op& op) {
      if (!copy_waits_.count(&op)) return;  // (the originals: the consumers'; the producer has clones)
      bool used = false;
      for (const auto& r : op.results) ir::for_each_use(*op.parent, r.get(), [&](const Op&, size_t) { used = true; });
      if (!used) dead.push_back(&op);
    });
    for (Op* op : dead) op->parent->erase(op);
    return !dead.empty();
  }

  bool run() {
    if (!find_rings()) return false;
    bool asked = ctx_.warp_specialize;
    for (const Ring& r : rings_) asked |= r.loop->has_attr("warp_specialize");
    if (!asked || !producer_computable() || !nothing_written_before()) return false;
    build();
    return true;
  }

 private:
  Block& body() { return f_.body; }

  /// Every TMA copy of the kernel belongs to a loop inside ifs and loops of the kernel (no if
  /// inside a loop around it), or to such a loop's prologue; each such loop is a ring as the
  /// pipelining pass writes it, none inside another.
  bool find_rings() {
    std::map<const Value*, Ring*> by_full;
    bool ok = true;
    f_.walk([&](Op& op) {
      if (op.code != OpCode::For) return;
      Ring r;
      r.loop = &op;
      for (auto& inner : op.regions[0]->ops) {
        if (inner->code == OpCode::AsyncTmaCopy) r.issue.insert(inner.get());
        if (inner->code == OpCode::WaitBarrier && inner->has_attr("issuer")) r.issue.insert(inner.get());
      }
      // (a loop with copies but no issuer's wait holds another's prologue)
      if (std::none_of(r.issue.begin(), r.issue.end(), [](const Op* i) { return i->code == OpCode::WaitBarrier; }))
        return;
      // Around it: ifs and loops, no if inside a loop around it (the loops carry its count).
      bool in_if = false;  // (walking outwards)
      for (const Block* b = op.parent; b->parent; b = b->parent->parent) {
        const OpCode c = b->parent->code;
        if (c == OpCode::If)
          in_if = true;
        else if (c != OpCode::For || in_if)
          ok = false;
      }
      for (const Block* b = op.parent; b; b = b->parent ? b->parent->parent : nullptr) path_.insert(b);
      rings_.push_back(std::move(r));
    });
    if (!ok) return false;
    for (Ring& r : rings_)  // (not one ring's loop inside another's)
      if (path_.count(r.loop->regions[0].get())) return false;
    for (Ring& r : rings_) {
      Value *full = nullptr, *empty = nullptr;
      for (const Op* i : r.issue) {
        if (i->code == OpCode::AsyncTmaCopy) {
          ok &= !full || full == i->operands[2];
          full = i->operands[2];
          r.setup.insert(i->operands[0]->def);
        } else {
          ok &= !empty;
          empty = i->operands[0];
        }
      }
      if (!ok || !full || !empty || !full->def || !empty->def) return false;
      r.full = full, r.empty = empty;
      for (auto& op : r.loop->regions[0]->ops)
        if (op->code == OpCode::AsyncTmaCopy) r.tiles.push_back(op->operands[0]);
      r.setup.insert(full->def);
      r.setup.insert(empty->def);
      r.stages = full->type.shape[0];
      by_full[full] = &r;
    }
    if (rings_.empty()) return false;
    // The setup ops at the top level, the copies before the loops found, none elsewhere.
    f_.walk([&](Op& op) {
      if (op.code == OpCode::AsyncTmaCopy) {
        auto r = by_full.find(op.operands[2]);
        if (r == by_full.end())
          ok = false;
        else if (op.parent == r->second->loop->parent)
          r->second->prologue.push_back(&op);
        else if (!r->second->issue.count(&op))
          ok = false;
      }
      if (op.code == OpCode::InitBarrier) {
        bool mine = false;
        for (Ring& r : rings_)
          if (r.setup.count(op.operands[0]->def)) r.setup.insert(&op), mine = true;
        if (!mine || !path_.count(op.parent)) ok = false;
      }
    });
    for (Ring& r : rings_)
      for (const Op* s : r.setup) ok &= path_.count(s->parent) && s->regions.empty();
    // The count the ring carries is the loop's last.
    for (Ring& r : rings_)
      ok &= r.loop->operands.size() > 3 && r.loop->operands.back()->type == ir::Type::scalar(ir::DType::i32);
    return ok;
  }

  /// The producer's slice: the bounds of the ring loops and of the ifs and loops around them,
  /// and what their issue reads from outside the body, computed from the kernel's parameters
  /// and those loops' induction variables by scalar ops (loads of scalars included) of the
  /// blocks around the rings; the issue itself scalar ops of the body over its induction
  /// variable and count. Tensors, regions and other loops stay the consumers'.
  bool producer_computable() {
    std::vector<const Value*> control;  // the ifs' conditions, the loops' bounds
    for (const Block* b : path_)
      if (b->parent)
        for (size_t i = 0; i < (b->parent->code == OpCode::For ? 3u : 1u); ++i)
          control.push_back(b->parent->operands[i]);
    if (!outside(control)) return false;
    for (Ring& r : rings_) {
      const Block& b = *r.loop->regions[0];
      std::vector<const Value*> work(r.loop->operands.begin(), r.loop->operands.begin() + 3);
      std::vector<const Op*> inner(r.issue.begin(), r.issue.end());
      std::set<const Op*> in_body(r.issue.begin(), r.issue.end());
      while (!inner.empty()) {
        const Op* op = inner.back();
        inner.pop_back();
        for (const Value* v : op->operands) {
          if (v->def && v->def->parent == &b) {
            const Op* d = v->def;
            if (!d->is_pure() || !d->regions.empty() || d->results.size() != 1 || d->results[0]->type.is_tensor())
              return false;
            if (in_body.insert(d).second) inner.push_back(d);
          } else if (!v->def && v->owner == &b) {
            if (v->index != 0 && v->index + 1 != static_cast<int>(b.args.size())) return false;  // (iv, count)
          } else {
            work.push_back(v);
          }
        }
      }
      slice_[r.loop] = std::move(in_body);
      if (!outside(work)) return false;
    }
    // The waits on the path whose token nothing reads: the producer waits too, where the
    // consumers do, before the copies after them (what they acquire may be what the copies
    // read, the kernel relying on program order). Those whose token a copy takes (a load's
    // consume_token, kept by pipelining) outside() gave it above; a wait whose token only the
    // consumers read orders their loads only (nothing_written_before).
    // (At the top, those before the last ring only.)
    const Op* last = last_ring_in(body());
    for (const Block* b : path_)
      for (auto& op : b->ops) {
        if (b == &body() && op.get() == last) break;
        std::vector<const Value*> reads, work;
        if (!wait_op(*op, reads) || token_read(*op)) continue;
        if (!producer_waits(op.get(), reads, work) || !outside(work)) return false;
      }
    return true;
  }

  /// A wait op the producer runs too (it joins outside_), what it reads added to `work`; false
  /// where its compare may not stay true once true (monotonic).
  bool producer_waits(const Op* op, const std::vector<const Value*>& reads, std::vector<const Value*>& work) {
    if (!monotonic(*op)) return false;
    if (outside_.insert(op).second) work.insert(work.end(), reads.begin(), reads.end());
    return true;
  }

  /// Whether `op` is a wait (of scalars), or a loop of waits and scalar arithmetic (a wait for
  /// each of a tile's signal words); `reads` gets the values it reads from around it.
  static bool wait_op(const Op& op, std::vector<const Value*>& reads) {
    if (op.code == OpCode::Wait) {
      reads.insert(reads.end(), op.operands.begin(), op.operands.end());
      return !op.operands[0]->type.is_tensor();  // (a block's: every thread polls its share)
    }
    if (op.code != OpCode::For) return false;
    const Block& b = *op.regions[0];
    bool any = false;
    for (auto& inner : b.ops) {
      any |= inner->code == OpCode::Wait;
      const bool scalar =
          std::none_of(inner->results.begin(), inner->results.end(), [](const auto& r) { return r->type.is_tensor(); });
      if (!scalar || !inner->regions.empty() ||
          !(inner->is_pure() || inner->code == OpCode::Wait || inner->code == OpCode::Yield))
        return false;
    }
    reads.insert(reads.end(), op.operands.begin(), op.operands.end());
    for (auto& inner : b.ops)
      for (const Value* v : inner->operands)
        if (!(v->def && v->def->parent == &b) && v->owner != &b) reads.push_back(v);
    return any;
  }

  /// Whether something reads a wait's token (its results), through the ifs and loops that
  /// yield it: loads through consume_token (a copy's coordinate, where the pipelining pass
  /// made the load a copy: outside() then gives the wait to the producer too).
  static bool token_read(const Op& op) {
    std::function<bool(const Value*, int)> read = [&](const Value* v, int depth) {
      bool used = false;
      ir::for_each_use(v->def ? *v->def->parent : *v->owner, v, [&](const Op& user, size_t i) {
        if (used || depth > 8) return void(used = true);
        const Op* around = user.parent->parent;
        if (user.code != OpCode::Yield || !around || (around->code != OpCode::If && around->code != OpCode::For))
          return void(used = true);
        used = read(around->results.at(i).get(), depth + 1) ||
               (around->code == OpCode::For && read(user.parent->args.at(i + 1).get(), depth + 1));
      });
      return used;
    };
    return std::any_of(op.results.begin(), op.results.end(), [&](const auto& r) { return read(r.get(), 0); });
  }

  /// Whether each wait of a wait op compares so that, once true, it stays true (ge, gt: signal
  /// counts only grow), so the producer and the consumers may poll it at different times.
  static bool monotonic(const Op& op) {
    if (op.code == OpCode::Wait) {
      const ir::CmpPred p = ir::enum_attr<ir::CmpPred>(op, "cmp");
      return p == ir::CmpPred::ge || p == ir::CmpPred::gt;
    }
    return std::all_of(op.regions[0]->ops.begin(), op.regions[0]->ops.end(),
                       [](const auto& inner) { return inner->code != OpCode::Wait || monotonic(*inner); });
  }

  /// Adds what computes `work` outside the loops to outside_: scalar ops (and loads of
  /// scalars) of the blocks around the rings; false where something else is needed.
  bool outside(std::vector<const Value*> work) {
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (!v->def) {  // a parameter, or the induction variable of a loop around rings
        if (v->owner != &body() && !(path_.count(v->owner) && v->owner->parent->code == OpCode::For && v->index == 0))
          return false;
        continue;
      }
      const Op* d = v->def;
      if (!path_.count(d->parent)) return false;
      if (setup_op(d)) continue;
      std::vector<const Value*> reads;
      if (wait_op(*d, reads)) {  // (a copy's consume_token: the producer waits too)
        if (!producer_waits(d, reads, work)) return false;
        copy_waits_.insert(d);
        continue;
      }
      if (!d->regions.empty() || d->results.size() != 1 || d->results[0]->type.is_tensor()) return false;
      if (!d->is_pure() && !(d->code == OpCode::Load && !d->results[0]->type.is_tensor())) return false;
      if (outside_.insert(d).second)
        for (const Value* o : d->operands) work.push_back(o);
    }
    return true;
  }

  /// An if or loop whose regions hold a ring's loop (the producer takes the same branches and
  /// runs the same iterations).
  bool around_rings(const Op& op) const {
    if (op.code == OpCode::If) return path_.count(op.regions[0].get()) || path_.count(op.regions[1].get());
    return op.code == OpCode::For && path_.count(op.regions[0].get());
  }

  /// The block's last op that is or holds a ring's loop (null where none).
  const Op* last_ring_in(const Block& b) const {
    const Op* last = nullptr;
    for (auto& op : b.ops)
      if (around_rings(*op) ||
          std::any_of(rings_.begin(), rings_.end(), [&](const Ring& r) { return r.loop == op.get(); }))
        last = op.get();
    return last;
  }

  bool setup_op(const Op* op) const {
    for (const Ring& r : rings_)
      if (r.setup.count(op)) return true;
    return false;
  }

  /// The producer copies ahead of the consumers: nothing before a loop (in the kernel's order)
  /// may write or order global memory that a copy could read, nor may a load the producer
  /// makes follow such an op. In a loop around rings, what runs between two iterations' copies
  /// may store and use relaxed or releasing atomics (a persistent kernel's epilogue), as a
  /// kernel's loads may not read what other threads of its program stored without a barrier;
  /// after the body's last ring (the tile's epilogue: stream-K's count of a tile's runs) also
  /// acquiring atomics, unless the producer loads in the loops (what it loads for the next
  /// iteration could be what the acquire orders); no fences, barriers or copies to memory.
  /// Waits anywhere on the path whose token nothing reads are the producer's too; a wait whose
  /// token is read orders the loads through it (consume_token), the consumers'. Symm_at only
  /// makes an address. (An acquire at the end of an iteration orders that iteration's
  /// epilogue, not the next one's copies: a kernel that acquires another program's data for
  /// those must wait at the start of the iteration, which keeps it from warp specialization.)
  bool nothing_written_before() {
    enum Where { top, in_loop, after_rings };
    bool producer_loads = false;  // (in the loops around rings)
    for (const Op* o : outside_) producer_loads |= o->code == OpCode::Load && o->parent != &body();
    std::function<bool(const Op&, Where)> writes = [&](const Op& op, Where at) {
      if (outside_.count(&op)) return false;  // (a wait the producer runs too)
      std::vector<const Value*> reads;
      if (wait_op(op, reads) && token_read(op)) return false;  // (the consumers' loads wait for it)
      switch (op.code) {
        case OpCode::SymmAt:  // (an address, checked)
        case OpCode::Load:
        case OpCode::Prefetch:
        case OpCode::LocalAlloc:
        case OpCode::LocalLoad:
        case OpCode::InitBarrier:
        case OpCode::AsyncTmaCopy:
        case OpCode::WaitBarrier:
        case OpCode::ArriveBarrier:
        case OpCode::AsyncCopy:
        case OpCode::AsyncCommit:
        case OpCode::AsyncWait:
          break;
        case OpCode::Store:
          if (at == top) return true;
          break;
        case OpCode::AtomicRMW:
        case OpCode::AtomicCAS: {
          const ir::MemOrder order = ir::enum_attr<ir::MemOrder>(op, "order");
          const bool acquires = order != ir::MemOrder::relaxed && order != ir::MemOrder::release;
          if (at == top || (acquires && (at == in_loop || producer_loads))) return true;
          break;
        }
        default:
          if (op.info().flags & ir::MEM) return true;
      }
      for (const auto& r : op.regions)
        for (const auto& inner : r->ops)
          if (writes(*inner, at)) return true;
      return false;
    };
    // In program order (an if's regions before what follows it) up to the last ring's loop.
    // (An if's branch that never runs where the rings do, its condition the other branch's of
    // an if around every ring, is the consumers' alone: ag_gemm's programs that push rows.)
    const Op* last = rings_.back().loop;
    std::function<int(const Block&, Where)> scan = [&](const Block& b, Where at) {  // 1: reached it, -1: a write
      for (auto& op : b.ops) {
        if (op.get() == last) return 1;
        if (around_rings(*op)) {
          for (auto& r : op->regions) {
            // (an if holding every ring: its other branch never runs where they do)
            if (!path_.count(r.get()) && holds_every_ring(*op)) continue;
            const int s = scan(*r, op->code == OpCode::For ? in_loop : at);
            if (s) return s;
          }
          continue;
        }
        if (op->code == OpCode::If && apart_from_rings(*op)) {
          for (const auto& inner : op->regions[1]->ops)
            if (writes(*inner, at)) return -1;
          continue;
        }
        if (writes(*op, at)) return -1;
      }
      return 0;
    };
    if (scan(body(), top) != 1) return false;
    // The rest of each loop around rings, before its next iteration.
    for (const Block* b : path_) {
      if (!b->parent || b->parent->code != OpCode::For) continue;
      const Op* last_ring = last_ring_in(*b);
      Where at = in_loop;
      for (auto& op : b->ops) {
        if (!around_rings(*op) && writes(*op, at)) return false;
        if (op.get() == last_ring) at = after_rings;
      }
    }
    return true;
  }

  /// Whether the then-branch of `op` (an if around no ring) never runs where the rings do: an
  /// if around every ring holds them in a branch that runs only where `op`'s condition is false
  /// (its then-branch, the condition the same compare negated; its else-branch, the same value).
  bool apart_from_rings(const Op& op) const {
    const Value* c = op.operands[0];
    for (const Block* b : path_) {
      const Op* around = b->parent;
      if (!around || around->code != OpCode::If) continue;
      const bool then = around->regions[0].get() == b;
      const bool holds_all = std::all_of(rings_.begin(), rings_.end(), [&](const Ring& r) { return inside(r, *b); });
      if (holds_all && implies(c, around->operands[0], then)) return true;
    }
    return false;
  }

  /// Whether every ring's loop is inside `op`'s regions.
  bool holds_every_ring(const Op& op) const {
    return std::all_of(rings_.begin(), rings_.end(), [&](const Ring& r) {
      return std::any_of(op.regions.begin(), op.regions.end(), [&](const auto& b) { return inside(r, *b); });
    });
  }
  /// Whether the ring's loop is in `b` or in a region nested in it.
  static bool inside(const Ring& r, const Block& b) {
    for (const Block* in = r.loop->parent; in; in = in->parent ? in->parent->parent : nullptr)
      if (in == &b) return true;
    return false;
  }

  /// Whether `c` true makes `d` true (`negate`: false): `c` is `d` (negated), or a conjunction
  /// one of whose terms is.
  static bool implies(const Value* c, const Value* d, bool negate) {
    if (negate ? negated(c, d) : c == d) return true;
    return c->def && c->def->code == OpCode::And && !c->type.is_tensor() &&
           (implies(c->def->operands[0], d, negate) || implies(c->def->operands[1], d, negate));
  }

  /// Whether `a` is `b` negated: compares of the same integers by opposite predicates.
  static bool negated(const Value* a, const Value* b) {
    if (!a->def || !b->def || a->def->code != OpCode::Cmp || b->def->code != OpCode::Cmp) return false;
    if (a->def->operands != b->def->operands || a->def->operands[0]->type.is_float()) return false;
    return ir::negated(ir::enum_attr<ir::CmpPred>(*a->def, "pred")) == ir::enum_attr<ir::CmpPred>(*b->def, "pred");
  }

  /// A ring whose loop follows another ring's in the same block, with tiles of the same types,
  /// takes over that ring's buffers and barriers, its count going on from the other loop's:
  /// the producer fills the second loop's first tiles while the consumers finish the first
  /// (attention's masked last block after its whole ones), in the shared memory of one ring.
  void share_rings() {
    for (size_t i = 1; i < rings_.size(); ++i) {
      Ring &before = rings_[i - 1], &r = rings_[i];
      bool same = before.loop->parent == r.loop->parent && before.stages == r.stages &&
                  before.tiles.size() == r.tiles.size() && before.full->type == r.full->type;
      for (size_t t = 0; same && t < r.tiles.size(); ++t) same = before.tiles[t]->type == r.tiles[t]->type;
      if (!same) continue;
      const Ring& root = before.after ? *before.after : before;
      r.after = &root;
      std::vector<std::pair<Value*, Value*>> to = {{r.full, root.full}, {r.empty, root.empty}};
      for (size_t t = 0; t < r.tiles.size(); ++t) to.push_back({r.tiles[t], root.tiles[t]});
      for (auto [from, with] : to) ir::replace_all_uses(body(), from, with);
      start_count(r, before.loop->results.back().get());  // (the count goes on)
      for (Op* p : r.prologue) p->parent->erase(p);
      r.prologue.clear();
      std::vector<const Op*> gone(r.setup.begin(), r.setup.end());
      std::sort(gone.begin(), gone.end(), [](const Op* a, const Op* b) {  // (each init_barrier before its buffer)
        return (a->code == OpCode::InitBarrier) > (b->code == OpCode::InitBarrier);
      });
      for (const Op* g : gone) g->parent->erase(g);
      r.setup.clear();
      r.full = root.full, r.empty = root.empty, r.tiles = root.tiles;
    }
  }

  /// A ring whose loop sits in loops carries its count through them (from 0 before the
  /// outermost), so that the barriers' phases go on from one run of the loop to the next, the
  /// ring being made once at the kernel's start.
  void carry_counts() {
    for (Ring& r : rings_) {
      if (r.after) continue;
      std::vector<Op*> loops;  // around it, outermost first
      for (Block* b = r.loop->parent; b->parent && b->parent->code == OpCode::For; b = b->parent->parent)
        loops.insert(loops.begin(), b->parent);
      if (loops.empty()) continue;
      const Ring* last = &r;  // (of those sharing it, the last loop's count comes out)
      for (const Ring& s : rings_)
        if (s.after == &r) last = &s;
      ir::Builder b(loops[0]->parent);
      b.set_insert_point(loops[0]->parent, loops[0]->parent->position(loops[0]));
      b.set_loc(loops[0]->loc);
      Value* count = b.constant_int(ir::DType::i32, 0);
      for (Op* l : loops) {
        l->operands.push_back(count);
        l->add_result(ir::Type::scalar(ir::DType::i32));
        count = l->regions[0]->add_arg(ir::Type::scalar(ir::DType::i32));
      }
      start_count(r, count);
      Value* out = last->loop->results.back().get();
      for (auto l = loops.rbegin(); l != loops.rend(); ++l) {
        (*l)->regions[0]->terminator()->operands.push_back(out);
        out = (*l)->results.back().get();
      }
    }
  }

  /// The ring's loop counts from `first`: its init, and the compares with the count it had
  /// (pipelining's release of the slot before, from the second iteration on, and of the last
  /// one after the loop: `j > first`).
  static void start_count(Ring& r, Value* first) {
    Value* old = r.loop->operands.back();
    r.loop->operands.back() = first;
    auto repoint = [&](Block& b, const Value* count) {  // (compares of `count` with the old start)
      for (auto& op : b.ops)
        if (op->code == OpCode::Cmp && op->operands[0] == count && op->operands[1] == old) op->operands[1] = first;
    };
    repoint(*r.loop->regions[0], r.loop->regions[0]->args.back().get());
    repoint(*r.loop->parent, r.loop->results.back().get());
  }

  void build() {
    share_rings();
    carry_counts();
    // The rings' buffers and barriers first, made and initialized by every thread.
    std::vector<Op*> order;  // (in program order: each init_barrier after its local_alloc)
    f_.walk([&](Op& op) {
      if (setup_op(&op)) order.push_back(&op);
    });
    std::list<std::unique_ptr<Op>> setup;
    for (Op* op : order) {
      Block* from = op->parent;
      setup.splice(setup.end(), from->ops, from->position(op));
      op->parent = &body();
    }
    const size_t hoisted = setup.size();
    body().ops.splice(body().ops.begin(), setup);
    auto top = std::next(body().ops.begin(), static_cast<long>(hoisted));
    for (Ring& r : rings_)
      for (Op* p : r.prologue) p->parent->erase(p);

    ir::Builder b(&body());
    b.set_insert_point(&body(), top);
    b.set_loc(rings_.front().loop->loc);
    ir::Attrs attrs;
    if (ctx_.num_warps == 8) attrs = {{"producer_regs", int64_t{40}}, {"consumer_regs", int64_t{232}}};
    Op* ws = b.create(OpCode::WarpSpecialize, {}, {}, attrs);
    Block& producer = *ws->regions[0];
    Block& consumer = *ws->regions[1];

    // The producer: the outside slice in the kernel's order, then each loop's copies.
    produce(body(), producer, ws->loc, nothing);

    // The consumers: the rest of the kernel, without the issue.
    for (Ring& r : rings_)
      for (const Op* i : r.issue) r.loop->regions[0]->erase(i);
    auto from = std::next(body().position(ws));
    auto to = std::prev(body().ops.end());  // (the return stays)
    for (auto it = from; it != to; ++it) (*it)->parent = &consumer;
    consumer.ops.splice(consumer.ops.end(), body().ops, from, to);
    ir::Builder c(&consumer);
    c.set_loc(ws->loc);
    c.create(OpCode::Yield, {}, {});
    b.finish(ws);
  }

  /// The producer's part of `from` (a block on the path to the rings) into `to`: the outside
  /// slice's ops, the ifs around rings (their conditions cloned), each ring's loop of copies.
  /// (then `yields`)
  void produce(const Block& from, Block& to, const Location& loc, const std::function<std::vector<Value*>()>& yields) {
    ir::Builder p(&to);
    p.set_loc(loc);
    for (auto& op : from.ops) {
      if (outside_.count(op.get())) clone(p, *op);
      for (Ring& r : rings_)
        if (op.get() == r.loop) producer_loop(p, r);
      if (op->code == OpCode::If && around_rings(*op)) {
        Op* c = p.create(OpCode::If, {mapped(op->operands[0])}, {});
        c->loc = op->loc;
        for (size_t i = 0; i < 2; ++i) {
          if (path_.count(op->regions[i].get()))
            produce(*op->regions[i], *c->regions[i], op->loc, nothing);
          else
            ir::Builder(c->regions[i].get()).create(OpCode::Yield, {}, {});
        }
        p.finish(c);
      }
      if (op->code == OpCode::For && around_rings(*op)) producer_for(p, *op);
    }
    p.create(OpCode::Yield, yields(), {});
  }
  static std::vector<Value*> nothing() { return {}; }

  /// A loop around rings, again: its range, carrying the producer's count of each ring in it.
  void producer_for(ir::Builder& p, const Op& loop) {
    std::vector<const Ring*> roots;
    for (const Ring& r : rings_) {
      bool inside = false;
      for (const Block* b = r.loop->parent; b->parent && !inside; b = b->parent->parent) inside = b->parent == &loop;
      if (inside && !r.after) roots.push_back(&r);
    }
    std::vector<Value*> operands = {mapped(loop.operands[0]), mapped(loop.operands[1]), mapped(loop.operands[2])};
    for (const Ring* r : roots) operands.push_back(count_.count(r) ? count_[r] : p.constant_int(ir::DType::i32, 0));
    Op* f = p.create(OpCode::For, operands, std::vector<ir::Type>(roots.size(), ir::Type::scalar(ir::DType::i32)));
    f->loc = loop.loc;
    Block& fb = *f->regions[0];
    map_[loop.regions[0]->args[0].get()] = fb.add_arg(loop.operands[0]->type);
    for (const Ring* r : roots) count_[r] = fb.add_arg(ir::Type::scalar(ir::DType::i32));
    produce(*loop.regions[0], fb, loop.loc, [&] {
      std::vector<Value*> counts;
      for (const Ring* r : roots) counts.push_back(count_.at(r));
      return counts;
    });
    p.finish(f);
    for (size_t i = 0; i < roots.size(); ++i) count_[roots[i]] = f->results[i].get();
  }

  Value* mapped(Value* v) {
    auto it = map_.find(v);
    return it == map_.end() ? v : it->second;
  }

  /// `op` again (its regions too), on the producer's values.
  void clone(ir::Builder& b, const Op& op) {
    std::vector<Value*> operands;
    for (Value* o : op.operands) operands.push_back(mapped(o));
    std::vector<ir::Type> types;
    for (const auto& r : op.results) types.push_back(r->type);
    Op* c = b.create(op.code, operands, types, op.attrs);
    c->loc = op.loc;
    for (size_t i = 0; i < op.results.size(); ++i) map_[op.results[i].get()] = c->results[i].get();
    if (op.regions.empty()) return;
    for (size_t i = 0; i < op.regions.size(); ++i) {
      Block& to = *c->regions[i];
      for (const auto& a : op.regions[i]->args) map_[a.get()] = to.add_arg(a->type);
      ir::Builder in(&to);
      for (const auto& inner : op.regions[i]->ops) clone(in, *inner);
    }
    b.finish(c);
  }

  /// for i' in [lo, hi) step, carrying c from 0: the issue for i = i' - (S-1) step, j = c - (S-1).
  void producer_loop(ir::Builder& p, const Ring& r) {
    const Op& loop = *r.loop;
    const Block& body = *loop.regions[0];
    // (a ring sharing the one before it goes on from that loop's count, a ring in loops from
    // the count they carry)
    const Ring* root = r.after ? r.after : &r;
    Value* first = count_.count(root) ? count_[root] : p.constant_int(ir::DType::i32, 0);
    Op* f = p.create(OpCode::For, {mapped(loop.operands[0]), mapped(loop.operands[1]), mapped(loop.operands[2]), first},
                     {ir::Type::scalar(ir::DType::i32)});
    count_[root] = f->results[0].get();
    f->loc = loop.loc;
    Block& fb = *f->regions[0];
    Value* iv = fb.add_arg(loop.operands[0]->type);
    Value* c = fb.add_arg(ir::Type::scalar(ir::DType::i32));
    ir::Builder in(&fb);
    in.set_loc(loop.loc);
    const ir::DType it = iv->type.dtype;
    Value* back = in.binary(OpCode::Mul, in.constant_int(it, r.stages - 1), mapped(loop.operands[2]));
    map_[body.args[0].get()] = in.binary(OpCode::Sub, iv, back);
    map_[body.args.back().get()] = in.binary(OpCode::Sub, c, in.constant_int(ir::DType::i32, r.stages - 1));
    const std::set<const Op*>& slice = slice_.at(r.loop);
    for (const auto& op : body.ops)
      if (slice.count(op.get())) clone(in, *op);
    in.create(OpCode::Yield, {in.binary(OpCode::Add, c, in.constant_int(ir::DType::i32, 1))}, {});
    p.finish(f);
  }

  ir::Function& f_;
  const GpuPassContext& ctx_;
  std::set<const Op*> copy_waits_;  // waits whose token a copy's coordinate reads
  std::vector<Ring> rings_;
  std::map<const Op*, std::set<const Op*>> slice_;  // a loop: its issue and what it computes from
  std::set<const Block*> path_;                     // the kernel's body and the if regions around rings
  std::set<const Op*> outside_;                     // ops around the loops the producer recomputes (waits too)
  std::map<const Value*, Value*> map_;              // original value: its clone in the producer
  std::map<const Ring*, Value*> count_;             // a ring (the first of those sharing it): the producer's count
};

}  // namespace

void warp_specialization(ir::Function& f, const GpuPassContext& ctx) {
  if (!ctx.wgmma) return;
  if (ctx.num_warps % 4 || (ctx.num_warps + 4) * ctx.warp_size > 1024) return;
  if (!f.body.terminator() || f.body.terminator()->code != OpCode::Return) return;
  WarpSpecializer ws(f, ctx);
  if (!ws.run()) return;
  ir::dce(f);
  if (ws.drop_consumer_copy_waits()) ir::dce(f);
}

}  // namespace tiledist::codegen
