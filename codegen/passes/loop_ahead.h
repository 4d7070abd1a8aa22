// A for loop's body computed for an iteration ahead of the one running (or, before the loop,
// for one of its first): what the pipelining pass's copies stages ahead are made of, kept apart
// from the ring it builds.
#pragma once

#include <map>

#include "ir/builder.h"
#include "ir/ir.h"

namespace tiledist::codegen {

class LoopAhead {
 public:
  explicit LoopAhead(ir::Op& loop) : loop_(loop), body_(*loop.regions[0]) {}

  ir::Value* iv() const { return body_.args[0].get(); }
  /// Whether the loop's step is a constant above zero (the passes take no other).
  bool constant_positive_step() const;
  /// Whether `v` (used in the body) can be computed for any iteration ahead of it: the
  /// induction variable, a value from outside the loop, a value the loop carries and advances
  /// by a step from outside it (`a_ptrs += BK`), or pure ops of the body over those. Division
  /// by anything but a nonzero constant, a float or max(x, c > 0) is refused (run for an
  /// iteration that may not exist, it could divide by zero).
  bool ahead(const ir::Value* v, int depth = 0);
  /// Whether `b` (or a region in it) does anything to memory but load: a store, an atomic, a
  /// copy, a fence, a barrier, a wait. Loads moved ahead of those could read stale data.
  /// `stores` false: stores (and taking a peer's address, symm_at) aside, what orders memory.
  static bool writes_or_orders_memory(const ir::Block& b, bool stores = true);
  /// Whether op `o` lies inside the loop (in its body or deeper).
  bool inside(const ir::Op* o) const;
  /// A builder inserting right before `op` (after: right after it).
  static ir::Builder builder_at(ir::Op& op, bool after);
  /// Whether the iteration `iterations` steps on (from the current one; `prologue`: from the
  /// first) is below the loop's end: an i1, compared in 64 bits (the induction variable may
  /// wrap where the loop ends near the top of its type).
  ir::Value* live(ir::Builder& b, int64_t iterations, bool prologue);

  using Made = std::map<const ir::Value*, ir::Value*>;
  /// `v` for the iteration `iterations` on, whose induction variable is `at`: the body's ops
  /// cloned, each carried value advanced by that many steps from where it is (`prologue`: from
  /// its initial value, before the loop).
  ir::Value* clone_at(ir::Builder& b, ir::Value* v, ir::Value* at, int64_t iterations, bool prologue, Made& made);

 private:
  ir::Op& loop_;
  ir::Block& body_;
};

}  // namespace tiledist::codegen
