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
#include <functional>
#include <map>

#include "codegen/axis_info.h"
#include "codegen/passes/loop_ahead.h"
#include "codegen/passes/passes.h"
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
/// conversion to the layout its dot takes.
struct Candidate {
  Op* load = nullptr;
  Op* trans = nullptr;
  bool transposed = false;  // (a trans may also be the identity)
  Op* convert = nullptr;
  Value* buf = nullptr;
};

class Pipeliner {
 public:
  Pipeliner(Op& loop, int stages) : loop_(loop), body_(*loop.regions[0]), ahead_(loop), stages_(stages) {}

  bool run() {
    if (!ahead_.constant_positive_step()) return false;
    if (LoopAhead::writes_or_orders_memory(body_)) return false;
    uses_ = ir::count_uses(*loop_.parent);
    find_candidates();
    if (candidates_.empty()) return false;
    allocate_and_prologue();
    rewrite_body();
    ir::Builder after = LoopAhead::builder_at(loop_, true);
    after.async_wait(0);  // nothing in flight once the loop is done
    return true;
  }

 private:
  Value* iv() const { return ahead_.iv(); }

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
      if (op->code != OpCode::Load || !op->results[0]->type.is_tensor() || op->results[0]->type.shape.size() != 2) continue;
      bool addresses_ahead = true;
      for (const Value* o : op->operands) addresses_ahead &= ahead_.ahead(o);
      if (!addresses_ahead) continue;
      Candidate c;
      c.load = op.get();
      Op* user = only_user(op->results[0].get());
      if (user && user->code == OpCode::Trans) {
        c.trans = user;
        c.transposed = user->ints_attr("perm") == std::vector<int64_t>{1, 0};
        user = only_user(user->results[0].get());
      }
      if (!user || user->code != OpCode::ConvertLayout || !operand_layout(user->results[0]->type.layout)) continue;
      c.convert = user;
      candidates_.push_back(c);
    }
  }

  /// Issues the copy of every candidate's tile of the iteration `iterations` on (whose
  /// induction variable is `at`) into tile `slot`, masked off where `at` is past the loop's end
  /// (compared in 64 bits: `at` may wrap where the loop ends near the top of its type), and
  /// closes the group.
  void issue(ir::Builder& b, Value* at, int64_t iterations, bool prologue, Value* slot) {
    LoopAhead::Made made;
    Value* live = ahead_.live(b, iterations, prologue);
    for (Candidate& c : candidates_) {
      const Op& ld = *c.load;
      Value* ptrs = ahead_.clone_at(b, ld.operands[0], at, iterations, prologue, made);
      const ir::Type& pt = ptrs->type;
      Value* valid = b.create(OpCode::Splat, {live}, {ir::Type::tensor(ir::DType::i1, pt.shape).with_layout(pt.layout)})->result();
      Value* mask = ld.operands.size() > 1 ? b.binary(OpCode::And, ahead_.clone_at(b, ld.operands[1], at, iterations, prologue, made), valid) : valid;
      Value* other = ld.operands.size() > 2 ? ahead_.clone_at(b, ld.operands[2], at, iterations, prologue, made) : nullptr;
      b.async_copy(c.buf, slot, ptrs, mask, other, "cp.async");
    }
    b.async_commit();
  }

  Value* constant(ir::Builder& b, int64_t v) { return b.constant_int(iv()->type.dtype, v); }

  void allocate_and_prologue() {
    ir::Builder b = LoopAhead::builder_at(loop_, false);
    for (Candidate& c : candidates_) {
      const ir::Type& t = c.load->results[0]->type;
      // A dot that reads its operand in shared memory (wgmma) names the layout; the ring holds
      // the tiles as loaded, so a transposed read sees that layout transposed.
      const ir::LayoutRef& want = c.convert->results[0]->type.layout;
      ir::LayoutRef tiles = want->kind == ir::Layout::Kind::shared ? (c.transposed ? want->transposed() : want)
                                                                   : swizzled_shared(t.dtype, t.shape, {1, 0});
      c.buf = b.local_alloc(t.dtype, stages_, t.shape, tiles);
    }
    Value* step = loop_.operands[2];
    for (int k = 0; k + 1 < stages_; ++k) {
      Value* at = b.binary(OpCode::Add, loop_.operands[0], b.binary(OpCode::Mul, constant(b, k), step));
      issue(b, at, k, true, b.constant_int(ir::DType::i32, k));
    }
  }

  void rewrite_body() {
    // The tile index, carried: 0 first.
    ir::Builder before = LoopAhead::builder_at(loop_, false);
    Value* zero = before.constant_int(ir::DType::i32, 0);
    loop_.operands.push_back(zero);
    Value* tile = body_.add_arg(ir::Type::scalar(ir::DType::i32));
    loop_.add_result(ir::Type::scalar(ir::DType::i32));

    ir::Builder b(&body_);
    b.set_insert_point(&body_, body_.ops.begin());
    b.set_loc(loop_.loc);
    b.async_wait(stages_ - 2);
    for (Candidate& c : candidates_) {
      Value* x = b.local_load(c.buf, tile, c.convert->results[0]->type.layout, c.transposed);
      ir::replace_all_uses(body_, c.convert->results[0].get(), x);
    }
    auto i32 = [&](int64_t v) { return b.constant_int(ir::DType::i32, v); };
    Value* ahead_by = b.binary(OpCode::Mul, constant(b, stages_ - 1), loop_.operands[2]);
    Value* slot = b.binary(OpCode::Rem, b.binary(OpCode::Add, tile, i32(stages_ - 1)), i32(stages_));
    issue(b, b.binary(OpCode::Add, iv(), ahead_by), stages_ - 1, false, slot);
    Value* next = b.binary(OpCode::Rem, b.binary(OpCode::Add, tile, i32(1)), i32(stages_));
    body_.terminator()->operands.push_back(next);
    for (Candidate& c : candidates_) {
      std::vector<const Op*> gone = {c.convert, c.trans, c.load};
      for (const Op* op : gone)
        if (op) body_.erase(op);
    }
  }

  Op& loop_;
  Block& body_;
  LoopAhead ahead_;
  int stages_;
  std::map<const Value*, int> uses_;
  std::vector<Candidate> candidates_;
};

void pipeline_block(Block& b, int stages) {
  std::vector<Op*> loops;
  for (auto& op : b.ops) {
    for (auto& r : op->regions) pipeline_block(*r, stages);
    if (op->code == OpCode::For) loops.push_back(op.get());
  }
  for (Op* loop : loops) Pipeliner(*loop, stages).run();
}

}  // namespace

void pipelining(ir::Function& f, const GpuPassContext& ctx) {
  if (!ctx.mma_sync) return;  // (cp.async: NVIDIA; AMD has no asynchronous copy to LDS to pipeline with yet)
  if (ctx.num_stages < 2) return;  // (one stage: no pipeline, as Triton's num_stages=1)
  pipeline_block(f.body, ctx.num_stages);
  ir::dce(f);
}

}  // namespace tiledist::codegen
