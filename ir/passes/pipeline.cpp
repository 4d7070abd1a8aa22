// The optimization pipeline: one list, run top to bottom, verified after every pass.
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "ir/builder.h"
#include "ir/passes/passes.h"
#include "ir/printer.h"

namespace tiledist::ir {

const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> passes = {
      {"fold", fold},                   // fold constants first, so that CSE sees canonical operands
      {"cse", cse},                     // merge equal pure ops
      {"wait_loops", fold_wait_loops},  // one wait for consecutive signal words (canonical operands)
      {"licm", licm},                   // hoist loop invariants (after CSE, so each is hoisted once)
      {"fold", fold},                   // hoisting can expose new constant operands
      {"dce", dce},                     // drop what the others left unused
  };
  return passes;
}

const Pass* find_pass(const std::string& name) {
  for (const Pass& p : pipeline())
    if (name == p.name) return &p;
  return nullptr;
}

namespace {
bool should_print(const char* env, const std::string& name) {
  if (!env) return false;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item == "all" || item == name) return true;
  return false;
}
}  // namespace

void print_if_asked(const Function& f, const std::string& pass) {
  if (should_print(std::getenv("TILEDIST_PRINT_AFTER"), pass))
    std::fprintf(stderr, "// -----// IR after %s //----- //\n%s", pass.c_str(), print(f).c_str());
}

void optimize(Function& f) {
  for (const Pass& p : pipeline()) {
    p.run(f);
    verify(f);
    print_if_asked(f, p.name);
  }
}

bool has_side_effects(const Op& op) {
  if (op.info().flags & MEM) return true;
  if (op.code == OpCode::While) return true;  // it may not terminate
  for (auto& r : op.regions)
    for (auto& inner : r->ops)
      if (has_side_effects(*inner)) return true;
  return false;
}

const Op* constant_source(const Value* v) {
  const Op* d = v->def;
  if (d && d->code == OpCode::Splat) d = d->operands[0]->def;
  return d && d->code == OpCode::Constant ? d : nullptr;
}

void erase_ops_if(Block& b, const std::function<bool(const Op&)>& pred) {
  for (auto it = b.ops.begin(); it != b.ops.end();) it = pred(**it) ? b.ops.erase(it) : std::next(it);
}

}  // namespace tiledist::ir
