// What a kernel does with its pointer parameters (mega/kernel_access.h): each memory op's
// address followed back to the parameters it may come from, through the ops that make pointers
// from pointers and through the values loops and branches carry.
#include "mega/kernel_access.h"

#include <set>

namespace tiledist::mega {

namespace {

// The function's arguments `v` may come from: through every pointer operand of the op that
// makes it, and for a region's argument through every pointer operand of the op that holds the
// region and every pointer its regions yield.
void roots(const ir::Value* v, const ir::Function& f, std::set<const ir::Value*>& seen, std::set<int>& out) {
  if (!v || !seen.insert(v).second) return;
  if (v->owner == &f.body) {
    out.insert(v->index);
    return;
  }
  auto pointers_of = [&](const ir::Op& op) {
    for (const ir::Value* o : op.operands)
      if (o->type.is_ptr) roots(o, f, seen, out);
  };
  if (v->def) {
    pointers_of(*v->def);
    // (a loop's or branch's result: what its regions yield)
    for (const auto& region : v->def->regions)
      if (const ir::Op* t = region->terminator()) pointers_of(*t);
    return;
  }
  if (v->owner && v->owner->parent) {
    const ir::Op& holder = *v->owner->parent;
    pointers_of(holder);
    for (const auto& region : holder.regions)
      if (const ir::Op* t = region->terminator()) pointers_of(*t);
  }
}

}  // namespace

std::vector<PointerUse> pointer_uses(const KernelDef& def, const Constants& constants) {
  const std::unique_ptr<ir::Function> f = def.trace(constants);
  std::vector<PointerUse> uses(f->body.args.size());
  auto mark = [&](const ir::Value* address, bool reads, bool writes) {
    std::set<const ir::Value*> seen;
    std::set<int> params;
    roots(address, *f, seen, params);
    for (int p : params) {
      PointerUse& u = uses[size_t(p)];
      u.reads = u.reads || reads, u.writes = u.writes || writes;
      if (params.size() == 1) u.surely_reads = u.surely_reads || reads, u.surely_writes = u.surely_writes || writes;
    }
  };
  const ir::Function& traced = *f;
  traced.walk([&](const ir::Op& op) {
    switch (op.code) {
      case ir::OpCode::Load:
      case ir::OpCode::Wait:
        mark(op.operands.at(0), true, false);
        break;
      case ir::OpCode::Store:
        mark(op.operands.at(0), false, true);
        break;
      case ir::OpCode::AtomicRMW:
      case ir::OpCode::AtomicCAS:
        mark(op.operands.at(0), true, true);
        break;
      case ir::OpCode::Memcpy:
        mark(op.operands.at(0), false, true);
        mark(op.operands.at(1), true, false);
        break;
      default:
        break;
    }
  });
  return uses;
}

}  // namespace tiledist::mega
