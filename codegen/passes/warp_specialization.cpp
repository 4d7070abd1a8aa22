// Warp specialization (passes.h says what it does). The pipelining pass leaves each TMA loop as
//
//   bufs, full, empty = local_alloc ...; init_barrier full; init_barrier empty
//   async_tma_copy ... (iterations 0 .. S-2, into slots 0 .. S-2)
//   for i ..., carrying j (from 0):
//     wait_barrier full[j % S], (j / S) & 1                 every thread
//     ... local_load ...
//     wait_barrier empty[slot], ..., j >= 1 {issuer}        the copies of iteration i + (S-1) step,
//     async_tma_copy ... into slot = (j + S - 1) % S        count j + S - 1
//     ... the body ...
//     arrive_barrier empty[j % S]
//     yield ..., j + 1
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

  /// Every TMA copy of the kernel belongs to a loop at the kernel's top level or inside ifs
  /// there (or to its prologue); each such loop is a ring as the pipelining pass writes it.
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
      if (r.issue.empty()) return;
      for (const Block* b = op.parent; b; b = b->parent ? b->parent->parent : nullptr) {
        if (b->parent && b->parent->code != OpCode::If) ok = false;  // (inside another loop: not yet)
        path_.insert(b);
      }
      rings_.push_back(std::move(r));
    });
    if (!ok) return false;
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
        for (Ring& r : rings_) mine |= r.setup.count(op.operands[0]->def) > 0;
        if (!mine || !path_.count(op.parent)) ok = false;
        for (Ring& r : rings_)
          if (r.setup.count(op.operands[0]->def)) r.setup.insert(&op);
      }
    });
    for (Ring& r : rings_)
      for (const Op* s : r.setup) ok &= path_.count(s->parent) && s->regions.empty();
    // The count the ring carries is the loop's last.
    for (Ring& r : rings_)
      ok &= r.loop->operands.size() > 3 && r.loop->operands.back()->type == ir::Type::scalar(ir::DType::i32);
    return ok;
  }

  /// The producer's slice: the loops' bounds, and what their issue reads from outside the
  /// body, computed from the kernel's parameters by scalar ops (loads of scalars included) at
  /// the top level; the issue itself scalar ops of the body over its induction variable and
  /// count. Tensors, regions and loops stay the consumers'.
  bool producer_computable() {
    std::vector<const Value*> conditions;
    for (const Block* b : path_)
      if (b->parent) conditions.push_back(b->parent->operands[0]);
    if (!outside(conditions)) return false;
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
    return true;
  }

  /// Adds what computes `work` outside the loops to outside_: scalar ops (and loads of
  /// scalars) of the blocks around the rings; false where something else is needed.
  bool outside(std::vector<const Value*> work) {
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (!v->def) {
        if (v->owner != &body()) return false;  // (a parameter only)
        continue;
      }
      const Op* d = v->def;
      if (!path_.count(d->parent)) return false;
      if (setup_op(d)) continue;
      if (!d->regions.empty() || d->results.size() != 1 || d->results[0]->type.is_tensor()) return false;
      if (!d->is_pure() && !(d->code == OpCode::Load && !d->results[0]->type.is_tensor())) return false;
      if (outside_.insert(d).second)
        for (const Value* o : d->operands) work.push_back(o);
    }
    return true;
  }

  /// An if whose regions hold a ring's loop (the producer takes the same branch).
  bool around_rings(const Op& op) const {
    return op.code == OpCode::If && (path_.count(op.regions[0].get()) || path_.count(op.regions[1].get()));
  }

  bool setup_op(const Op* op) const {
    for (const Ring& r : rings_)
      if (r.setup.count(op)) return true;
    return false;
  }

  /// The producer copies ahead of the consumers: nothing before a loop (in the kernel's order)
  /// may write or order global memory that a copy could read, nor may a load the producer
  /// makes follow such an op.
  bool nothing_written_before() {
    std::function<bool(const Op&)> writes = [&](const Op& op) {
      switch (op.code) {
        case OpCode::Load:
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
        default:
          if (op.info().flags & ir::MEM) return true;
      }
      for (const auto& r : op.regions)
        for (const auto& inner : r->ops)
          if (writes(*inner)) return true;
      return false;
    };
    // In program order (an if's regions before what follows it) up to the last ring's loop.
    const Op* last = rings_.back().loop;
    std::function<int(const Block&)> scan = [&](const Block& b) {  // 1: reached it, 0: clean, -1: a write
      for (auto& op : b.ops) {
        if (op.get() == last) return 1;
        if (around_rings(*op)) {
          for (auto& r : op->regions) {
            const int s = scan(*r);
            if (s) return s;
          }
          continue;
        }
        if (writes(*op)) return -1;
      }
      return 0;
    };
    return scan(body()) == 1;
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
      r.loop->operands.back() = before.loop->results.back().get();  // (the count goes on)
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

  void build() {
    share_rings();
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
    produce(body(), producer, ws->loc);

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
  void produce(const Block& from, Block& to, const Location& loc) {
    ir::Builder p(&to);
    p.set_loc(loc);
    for (auto& op : from.ops) {
      if (outside_.count(op.get())) clone(p, *op);
      for (Ring& r : rings_)
        if (op.get() == r.loop) producer_loop(p, r);
      if (around_rings(*op)) {
        Op* c = p.create(OpCode::If, {mapped(op->operands[0])}, {});
        c->loc = op->loc;
        for (size_t i = 0; i < 2; ++i) {
          if (path_.count(op->regions[i].get()))
            produce(*op->regions[i], *c->regions[i], op->loc);
          else
            ir::Builder(c->regions[i].get()).create(OpCode::Yield, {}, {});
        }
        p.finish(c);
      }
    }
    p.create(OpCode::Yield, {}, {});
  }

  Value* mapped(Value* v) {
    auto it = map_.find(v);
    return it == map_.end() ? v : it->second;
  }

  void clone(ir::Builder& b, const Op& op) {
    std::vector<Value*> operands;
    for (Value* o : op.operands) operands.push_back(mapped(o));
    std::vector<ir::Type> types;
    for (const auto& r : op.results) types.push_back(r->type);
    Op* c = b.create(op.code, operands, types, op.attrs);
    c->loc = op.loc;
    for (size_t i = 0; i < op.results.size(); ++i) map_[op.results[i].get()] = c->results[i].get();
  }

  /// for i' in [lo, hi) step, carrying c from 0: the issue for i = i' - (S-1) step, j = c - (S-1).
  void producer_loop(ir::Builder& p, const Ring& r) {
    const Op& loop = *r.loop;
    const Block& body = *loop.regions[0];
    // (a ring sharing the one before it goes on from that loop's count)
    Value* first = r.after ? count_.at(&r - 1) : p.constant_int(ir::DType::i32, 0);
    Op* f = p.create(OpCode::For, {mapped(loop.operands[0]), mapped(loop.operands[1]), mapped(loop.operands[2]), first},
                     {ir::Type::scalar(ir::DType::i32)});
    count_[&r] = f->results[0].get();
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
  std::vector<Ring> rings_;
  std::map<const Op*, std::set<const Op*>> slice_;  // a loop: its issue and what it computes from
  std::set<const Block*> path_;                     // the kernel's body and the if regions around rings
  std::set<const Op*> outside_;                     // ops around the loops the producer recomputes
  std::map<const Value*, Value*> map_;              // original value: its clone in the producer
  std::map<const Ring*, Value*> count_;             // a ring's producer loop: the count it ends at
};

}  // namespace

void warp_specialization(ir::Function& f, const GpuPassContext& ctx) {
  if (!ctx.wgmma) return;
  if (ctx.num_warps % 4 || (ctx.num_warps + 4) * ctx.warp_size > 1024) return;
  if (!f.body.terminator() || f.body.terminator()->code != OpCode::Return) return;
  if (WarpSpecializer(f, ctx).run()) ir::dce(f);
}

}  // namespace tiledist::codegen
