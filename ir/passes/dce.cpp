// Dead code elimination: removes ops whose results are unused and that have no side effects
// (loops and branches included when nothing inside them writes memory). Runs to a fixed point.
// Assumes: loads are treated as side effects (they may fault under a mask elsewhere).
#include "ir/passes/passes.h"

namespace tiledist::ir {

namespace {
bool remove_dead(Block& b, const std::map<const Value*, int>& uses) {
  bool changed = false;
  for (auto& op : b.ops)
    for (auto& r : op->regions) changed |= remove_dead(*r, uses);
  size_t before = b.ops.size();
  erase_ops_if(b, [&](const Op& op) {
    if (op.info().flags & TERM || has_side_effects(op)) return false;
    for (auto& r : op.results)
      if (uses.count(r.get())) return false;
    return true;
  });
  return changed || b.ops.size() != before;
}
}  // namespace

void dce(Function& f) {
  while (remove_dead(f.body, count_uses(f.body))) {
  }
}

}  // namespace tiledist::ir
