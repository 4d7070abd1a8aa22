// Loop-invariant code motion: a pure op in a for/while body whose operands are all defined
// outside the loop moves to just before the loop. Inner loops go first, so an invariant can
// climb several levels. Integer division stays put: hoisted, it could trap on a zero-trip loop.
#include <set>

#include "ir/passes/passes.h"

namespace tiledist::ir {

namespace {
void collect_defs(const Block& b, std::set<const Value*>& defs) {
  for (auto& a : b.args) defs.insert(a.get());
  for (auto& op : b.ops) {
    for (auto& r : op->results) defs.insert(r.get());
    for (auto& r : op->regions) collect_defs(*r, defs);
  }
}

bool hoistable(const Op& op) {
  if (!op.is_pure() || !op.regions.empty()) return false;
  if ((op.code == OpCode::Div || op.code == OpCode::Rem) && op.results[0]->type.is_int()) return false;
  return true;
}

void licm_block(Block& b) {
  for (auto it = b.ops.begin(); it != b.ops.end(); ++it) {
    Op& loop = **it;
    for (auto& r : loop.regions) licm_block(*r);
    if (loop.code != OpCode::For && loop.code != OpCode::While) continue;
    std::set<const Value*> inside;
    for (auto& r : loop.regions) collect_defs(*r, inside);
    for (auto& r : loop.regions) {
      for (auto op_it = r->ops.begin(); op_it != r->ops.end();) {
        Op& op = **op_it;
        bool invariant = hoistable(op);
        for (const Value* v : op.operands) invariant = invariant && !inside.count(v);
        if (!invariant) {
          ++op_it;
          continue;
        }
        for (auto& res : op.results) inside.erase(res.get());
        op.parent = &b;
        b.ops.insert(it, std::move(*op_it));  // lands just before the loop
        op_it = r->ops.erase(op_it);
      }
    }
  }
}
}  // namespace

void licm(Function& f) { licm_block(f.body); }

}  // namespace tiledist::ir
