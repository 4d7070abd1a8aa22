// Software pipelining (passes.h says what it does). For a loop `for i in [lo, hi) step s` and
// S stages, a pipelined load L(i) becomes:
//
//   buf = local_alloc                       S tiles
//   for k in 0 .. S-2:  async_copy buf[k] <- L's addresses at i = lo + k s, masked to i < hi
//                       async_commit
//   for i ..., carrying t (the tile of iteration i, from 0):
//     async_wait {pending = S - 2}          iteration i's group has landed (and the program's
//                                           threads are past the tile the next copy overwrites)
//     x = local_load buf[t]                 where L's operand layout was made
//     async_copy buf[(t + S - 1) % S] <- L's addresses at i + (S - 1) s, masked to that < hi
//     async_commit
//     ... the body ...
//     yield ..., (t + 1) % S
//   async_wait {pending = 0}
//
// The addresses of iteration i + (S - 1) s are the body's own address computation cloned with
// the induction variable replaced, and each value the loop carries and advances by a step from
// outside it (`a_ptrs += BK`, as Triton's tutorials write it) replaced by itself plus S - 1
// steps (in the prologue: its initial value plus k steps). Loads whose addresses depend on
// anything else the loop computes (another load, a value carried some other way) are left.
#include <algorithm>
#include <functional>
#include <map>

#include "codegen/axis_info.h"
#include "codegen/passes/loop_ahead.h"
#include "codegen/passes/passes.h"
#include "codegen/passes/tensor_map.h"
#include "ir/builder.h"
#include "ir/layout.h"
#include "ir/passes/passes.h"

namespace tiledist::codegen {

namespace {

using ir::Block;
using ir::Layout;
using ir::LayoutRef;
using ir::Op;
using ir::OpCode;
using ir::Value;

/// A load to pipeline: the load, the trans between it and its conversion (or null), and the
/// conversion to the layout its dot takes (null: a streaming loop's load, read back as loaded).
struct Candidate {
  Op* load = nullptr;
  Op* trans = nullptr;
  bool transposed = false;  // (a trans may also be the identity)
  Op* convert = nullptr;
  Value* buf = nullptr;
  std::optional<TensorMapView> tma;  // its box of a tensor, where the loop copies by TMA
};

class Pipeliner {
 public:
  Pipeliner(const ir::Function& f, Op& loop, const GpuPassContext& ctx)
      : f_(f),
        loop_(loop),
        body_(*loop.regions[0]),
        ahead_(loop),
        ctx_(ctx),
        streaming_(loop.has_attr("num_stages")),
        stages_(streaming_                        ? static_cast<int>(loop.int_attr("num_stages"))
                : loop.has_attr("compile_stages") ? static_cast<int>(loop.int_attr("compile_stages"))
                                                  : ctx.num_stages) {}

  bool run() {
    if (stages_ < 2 || !ahead_.constant_positive_step()) return false;
    // (a streaming loop's kernel says its loads read nothing its stores wrote: they may pass
    // the stores, not what orders memory)
    if (streaming_ ? LoopAhead::writes_or_orders_memory(body_, false) : LoopAhead::writes_or_orders_memory(body_))
      return false;
    uses_ = ir::count_uses(*loop_.parent);
    find_candidates();
    if (candidates_.empty()) return false;
    tma_ = want_tma() &&
           std::all_of(candidates_.begin(), candidates_.end(), [](const Candidate& c) { return c.tma.has_value(); });
    for (Candidate& c : candidates_)
      if (!tma_) c.tma.reset();
    allocate_and_prologue();
    rewrite_body();
    if (!tma_) {
      ir::Builder after = LoopAhead::builder_at(loop_, true);
      after.async_wait(0);  // nothing in flight once the loop is done
    }
    return true;
  }

 private:
  Value* iv() const { return ahead_.iv(); }
  /// TMA where the kernel asks for it, or the loop does (tl::for_range's warp_specialize hint,
  /// which warp specialization's producer needs).
  bool want_tma() const { return ctx_.tma || (ctx_.wgmma && loop_.has_attr("warp_specialize")); }

  static bool operand_layout(const LayoutRef& l) {
    return l && (l->kind == Layout::Kind::dot_operand || l->kind == Layout::Kind::shared);
  }
  Op* only_user(const Value* v) {
    if (uses_[v] != 1) return nullptr;
    for (auto& op : body_.ops)
      for (const Value* o : op->operands)
        if (o == v) return op.get();
    return nullptr;
  }

  void find_candidates() {
    for (auto& op : body_.ops) {
      if (op->code != OpCode::Load || !op->results[0]->type.is_tensor() || op->results[0]->type.shape.size() != 2)
        continue;
      bool addresses_ahead = true;
      for (const Value* o : op->operands) addresses_ahead &= ahead_.ahead(o);
      if (!addresses_ahead) continue;
      Candidate c;
      c.load = op.get();
      if (streaming_ && !feeds_dot(op->results[0].get())) {
        candidates_.push_back(c);  // (read back in the layout it was loaded in)
        continue;
      }
      Op* user = only_user(op->results[0].get());
      if (user && user->code == OpCode::Trans) {
        c.trans = user;
        c.transposed = user->ints_attr("perm") == std::vector<int64_t>{1, 0};
        user = only_user(user->results[0].get());
      }
      if (!user || user->code != OpCode::ConvertLayout || !operand_layout(user->results[0]->type.layout)) continue;
      c.convert = user;
      // (a token the base passes through is computed ahead as the address is: ahead() above)
      if (want_tma()) c.tma = tma_view(c);
      candidates_.push_back(c);
    }
  }

  /// Whether the load's value reaches a dot as an operand the way find_candidates takes one (its
  /// one use a conversion to an operand layout, directly or through a trans).
  bool feeds_dot(const Value* v) {
    Op* user = only_user(v);
    if (user && user->code == OpCode::Trans) user = only_user(user->results[0].get());
    return user && user->code == OpCode::ConvertLayout && operand_layout(user->results[0]->type.layout);
  }

  /// The view of the candidate's load as a box of a tensor (tensor_map.h), where its ring can
  /// take what TMA writes: rows of 128-byte column blocks, 16-byte chunks swizzled over 8 rows
  /// (what wgmma reads, and TMA's 128-byte swizzle writes).
  std::optional<TensorMapView> tma_view(const Candidate& c) {
    const ir::Type& t = c.load->results[0]->type;
    ir::LayoutRef tiles = ring_layout(c);
    const int64_t esize = ir::dtype_bytes(t.dtype);
    const int64_t width = tiles->block ? std::min(tiles->block, t.shape[1]) : t.shape[1];
    if (tiles->kind != Layout::Kind::shared || tiles->order[0] != 1 || tiles->vec * esize != 16 ||
        tiles->per_phase != 1 || tiles->max_phase != 8 || width * esize != 128)
      return std::nullopt;
    return tensor_map_view(f_, *c.load, axis_);
  }

  /// The ring's layout: a dot that reads its operand in shared memory (wgmma) names it; the
  /// ring holds the tiles as loaded, so a transposed read sees that layout transposed.
  ir::LayoutRef ring_layout(const Candidate& c) const {
    const ir::Type& t = c.load->results[0]->type;
    if (!c.convert) return swizzled_shared(t.dtype, t.shape, {1, 0});
    const ir::LayoutRef& want = c.convert->results[0]->type.layout;
    return want->kind == ir::Layout::Kind::shared ? (c.transposed ? want->transposed() : want)
                                                  : swizzled_shared(t.dtype, t.shape, {1, 0});
  }

  /// Issues the copy of every candidate's tile of the iteration `iterations` on (whose
  /// induction variable is `at`) into tile `slot`, masked off where `at` is past the loop's end
  /// (compared in 64 bits: `at` may wrap where the loop ends near the top of its type), and
  /// closes the group (cp.async). By TMA: one thread's copies of the tiles' boxes, completing
  /// on the slot's `full` barrier.
  void issue(ir::Builder& b, Value* at, int64_t iterations, bool prologue, Value* slot) {
    LoopAhead::Made made;
    Value* live = ahead_.live(b, iterations, prologue);
    for (Candidate& c : candidates_) {
      const Op& ld = *c.load;
      if (c.tma) {
        std::vector<Value*> coords;
        for (const TensorMapView::Coord& x : c.tma->coords)
          coords.push_back(coordinate(b, x, at, iterations, prologue, made));
        // The load's consume_tokens, on a coordinate: the copy follows their waits as the load
        // did (the tensor map holds the base, not the pointer that carried them).
        for (Value* t : c.tma->tokens)
          coords[0] = b.create(OpCode::ConsumeToken, {coords[0], ahead_.clone_at(b, t, at, iterations, prologue, made)},
                               {coords[0]->type})
                          ->results[0]
                          .get();
        b.async_tma_copy(c.buf, slot, full_, live, coords, c.tma->recipe.str());
        continue;
      }
      Value* ptrs = ahead_.clone_at(b, ld.operands[0], at, iterations, prologue, made);
      const ir::Type& pt = ptrs->type;
      Value* valid =
          b.create(OpCode::Splat, {live}, {ir::Type::tensor(ir::DType::i1, pt.shape).with_layout(pt.layout)})->result();
      Value* mask =
          ld.operands.size() > 1
              ? b.binary(OpCode::And, ahead_.clone_at(b, ld.operands[1], at, iterations, prologue, made), valid)
              : valid;
      Value* other =
          ld.operands.size() > 2 ? ahead_.clone_at(b, ld.operands[2], at, iterations, prologue, made) : nullptr;
      b.async_copy(c.buf, slot, ptrs, mask, other, "cp.async");
    }
    if (!tma_) b.async_commit();
  }

  /// A TMA coordinate (an i32) for the iteration `iterations` on.
  Value* coordinate(ir::Builder& b, const TensorMapView::Coord& x, Value* at, int64_t iterations, bool prologue,
                    LoopAhead::Made& made) {
    auto i32 = [&](Value* v) { return v->type.dtype == ir::DType::i32 ? v : b.cast(v, ir::DType::i32); };
    Value* sum = nullptr;
    auto add = [&](Value* v) { sum = sum ? b.binary(OpCode::Add, sum, v) : v; };
    for (const TensorMapView::Term& t : x.terms) {
      Value* p = nullptr;
      for (Value* f : t.factors) {
        Value* v = i32(ahead_.clone_at(b, f, at, iterations, prologue, made));
        p = p ? b.binary(OpCode::Mul, p, v) : v;
      }
      if (t.scale != 1 || !p)
        p = p ? b.binary(OpCode::Mul, p, b.constant_int(ir::DType::i32, t.scale))
              : b.constant_int(ir::DType::i32, t.scale);
      add(p);
    }
    if (x.offset || !sum) add(b.constant_int(ir::DType::i32, x.offset));
    return sum;
  }

  Value* constant(ir::Builder& b, int64_t v) { return b.constant_int(iv()->type.dtype, v); }

  void allocate_and_prologue() {
    ir::Builder b = LoopAhead::builder_at(loop_, false);
    for (Candidate& c : candidates_) {
      const ir::Type& t = c.load->results[0]->type;
      c.buf = b.local_alloc(t.dtype, stages_, t.shape, ring_layout(c));
    }
    if (tma_) {
      // Slot s's `full` barrier completes a phase when its tiles have landed (each copy
      // arrives once, expecting its bytes); its `empty` one when every thread is done with
      // them (each arrives once), which the copy into it the next time round waits for.
      full_ = b.barriers(stages_, static_cast<int64_t>(candidates_.size()));
      empty_ = b.barriers(stages_, ctx_.num_warps * ctx_.warp_size);
    }
    Value* step = loop_.operands[2];
    for (int k = 0; k + 1 < stages_; ++k) {
      Value* at = b.binary(OpCode::Add, loop_.operands[0], b.binary(OpCode::Mul, constant(b, k), step));
      issue(b, at, k, true, b.constant_int(ir::DType::i32, k));
    }
  }

  void rewrite_body() {
    // The iteration's count (TMA) or its tile (cp.async), carried: 0 first.
    ir::Builder before = LoopAhead::builder_at(loop_, false);
    Value* zero = before.constant_int(ir::DType::i32, 0);
    loop_.operands.push_back(zero);
    Value* carried = body_.add_arg(ir::Type::scalar(ir::DType::i32));
    loop_.add_result(ir::Type::scalar(ir::DType::i32));

    ir::Builder b(&body_);
    b.set_insert_point(&body_, body_.ops.begin());
    b.set_loc(loop_.loc);
    auto i32 = [&](int64_t v) { return b.constant_int(ir::DType::i32, v); };
    Value* tile = carried;
    if (tma_) {
      // Iteration j reads tile j % S, the (j / S)th phase of its full barrier.
      tile = ring_index(b, carried);
      b.wait_barrier(full_, tile, parity(b, carried));
    } else {
      // (a streaming loop's tiles alone, each element held by one thread: each thread reads
      // back what it copied, and overwrites only what it read, so no barrier)
      const bool own = std::all_of(candidates_.begin(), candidates_.end(), [](const Candidate& c) {
        if (c.convert) return false;
        const ir::Type& t = c.load->results[0]->type;
        const auto dup = ir::to_linear(*t.layout, t.shape).duplicate_bits();
        return dup[ir::LinearLayout::lane] == 0 && dup[ir::LinearLayout::warp] == 0;
      });
      b.async_wait(stages_ - 2, own);
    }
    for (Candidate& c : candidates_) {
      Value* was = c.convert ? c.convert->results[0].get() : c.load->results[0].get();
      Value* x = b.local_load(c.buf, tile, was->type.layout, c.transposed);
      if (!c.convert) x->def->attrs["own"] = int64_t{1};  // (read by each thread alone: no ldmatrix)
      ir::replace_all_uses(body_, was, x);
    }
    if (tma_) return rewrite_tma_end(carried, zero, tile);
    issue_ahead(b, slot_before(b, tile));
    body_.terminator()->operands.push_back(ring_index(b, b.binary(OpCode::Add, carried, i32(1))));
    erase_loads();
  }

  /// The end of a TMA loop's body, count j (from `first`), tile j % S: the slot of iteration
  /// j - 1 released once this iteration's dots are issued and all but the newest done
  /// (`pending` 1: the dot of j runs while what follows issues), from j > first on; every
  /// thread then waits for that slot's release by all (from j >= 1 on: the count's (j + S - 1)
  /// / S - 1th phase; every thread, so that the warps stay converged for the dots after), and
  /// one thread copies iteration i + (S-1) step into it. The last iteration's slot is released
  /// after the loop. (Released at the end of its own iteration, each slot would wait for its
  /// dot to finish before the next one issues.) The warp_specialization pass gives the wait and
  /// the copies to a producer, the compares with `first` to the count it carries.
  void rewrite_tma_end(Value* j, Value* first, Value* tile) {
    ir::Builder b(&body_);
    b.set_insert_point(&body_, std::prev(body_.ops.end()));  // (before the yield)
    b.set_loc(loop_.loc);
    auto i32 = [&](int64_t v) { return b.constant_int(ir::DType::i32, v); };
    const bool dots =
        std::any_of(body_.ops.begin(), body_.ops.end(), [](const auto& op) { return op->code == OpCode::Dot; });
    Value* slot = slot_before(b, tile);
    b.arrive_barrier(empty_, slot, b.cmp("gt", j, first), dots ? 1 : 0);
    Value* n = b.binary(OpCode::Add, j, i32(stages_ - 1));
    b.wait_barrier(empty_, slot, b.binary(OpCode::Xor, parity(b, n), i32(1)), b.cmp("ge", j, i32(1)), true);
    issue_ahead(b, slot);
    body_.terminator()->operands.push_back(b.binary(OpCode::Add, j, i32(1)));
    erase_loads();
    ir::Builder after = LoopAhead::builder_at(loop_, true);
    Value* end = loop_.results.back().get();
    Value* last = slot_before(after, end);
    after.arrive_barrier(empty_, last, after.cmp("gt", end, first));
  }

  /// (x + S - 1) % S: the slot before x's, where the copies S - 1 iterations ahead of x go.
  Value* slot_before(ir::Builder& b, Value* x) {
    return ring_index(b, b.binary(OpCode::Add, x, b.constant_int(ir::DType::i32, stages_ - 1)));
  }
  /// n % S for a count n >= 0: by a mask where S is a power of two (a signed remainder's sign
  /// fix-up is not needed: the counts start at 0 and grow).
  Value* ring_index(ir::Builder& b, Value* n) {
    if ((stages_ & (stages_ - 1)) == 0) return b.binary(OpCode::And, n, b.constant_int(ir::DType::i32, stages_ - 1));
    return b.binary(OpCode::Rem, n, b.constant_int(ir::DType::i32, stages_));
  }
  /// (n / S) & 1: the parity of count n's phase of its slot's barriers.
  Value* parity(ir::Builder& b, Value* n) {
    return b.binary(OpCode::And, b.binary(OpCode::Div, n, b.constant_int(ir::DType::i32, stages_)),
                    b.constant_int(ir::DType::i32, 1));
  }
  /// The copies of iteration i + (S-1) step into `slot`.
  void issue_ahead(ir::Builder& b, Value* slot) {
    Value* ahead_by = b.binary(OpCode::Mul, constant(b, stages_ - 1), loop_.operands[2]);
    issue(b, b.binary(OpCode::Add, iv(), ahead_by), stages_ - 1, false, slot);
  }

  void erase_loads() {
    for (Candidate& c : candidates_) {
      std::vector<const Op*> gone = {c.convert, c.trans, c.load};
      for (const Op* op : gone)
        if (op) body_.erase(op);
    }
  }

  const ir::Function& f_;
  Op& loop_;
  Block& body_;
  LoopAhead ahead_;
  const GpuPassContext& ctx_;
  AxisAnalysis axis_;  // (of this loop's IR before it changes)
  bool streaming_;     // the kernel's hint (tl::LoopHints::num_stages): every load, its stages
  // (else the loop's compile_stages where it has one: a kernel inlined into another, mega/, keeps
  // the stages it would be compiled with alone; else the compile's)
  int stages_;
  bool tma_ = false;  // the loop's copies are by TMA (else cp.async)
  Value* full_ = nullptr;
  Value* empty_ = nullptr;
  std::map<const Value*, int> uses_;
  std::vector<Candidate> candidates_;
};

void pipeline_block(const ir::Function& f, Block& b, const GpuPassContext& ctx) {
  std::vector<Op*> loops;
  for (auto& op : b.ops) {
    for (auto& r : op->regions) pipeline_block(f, *r, ctx);
    if (op->code == OpCode::For) loops.push_back(op.get());
  }
  for (Op* loop : loops) Pipeliner(f, *loop, ctx).run();
}

}  // namespace

void pipelining(ir::Function& f, const GpuPassContext& ctx) {
  if (!ctx.mma_sync) return;  // (cp.async: NVIDIA; AMD has no asynchronous copy to LDS to pipeline with yet)
  // (one stage: no pipeline, as Triton's num_stages=1; a loop's hint says its own)
  pipeline_block(f, f.body, ctx);
  ir::dce(f);
}

}  // namespace tiledist::codegen
