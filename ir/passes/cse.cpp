// Common subexpression elimination: a pure op equal to one that dominates it (same opcode,
// operands, attributes and result types) is replaced by it. Scoped: an op in a region may
// reuse one from an enclosing region, never the other way round.
#include "ir/passes/passes.h"

namespace tiledist::ir {

namespace {
std::string key_of(const Op& op) {
  std::string k = op.name();
  for (const Value* v : op.operands) k += str_cat(" ", static_cast<const void*>(v));
  for (auto& [name, a] : op.attrs) k += " " + name + "=" + attr_str(a);
  for (auto& r : op.results) k += " :" + r->type.str();
  return k;
}

void cse_block(Block& b, std::vector<std::map<std::string, Op*>>& scopes, Function& f) {
  scopes.emplace_back();
  for (auto it = b.ops.begin(); it != b.ops.end();) {
    Op& op = **it;
    if (!op.is_pure() || !op.regions.empty()) {
      for (auto& r : op.regions) cse_block(*r, scopes, f);
      ++it;
      continue;
    }
    std::string k = key_of(op);
    Op* prior = nullptr;
    for (auto s = scopes.rbegin(); s != scopes.rend() && !prior; ++s) {
      auto found = s->find(k);
      if (found != s->end()) prior = found->second;
    }
    if (prior) {
      for (size_t i = 0; i < op.results.size(); ++i)
        replace_all_uses(f.body, op.results[i].get(), prior->results[i].get());
      it = b.ops.erase(it);
    } else {
      scopes.back()[k] = &op;
      ++it;
    }
  }
  scopes.pop_back();
}
}  // namespace

void cse(Function& f) {
  std::vector<std::map<std::string, Op*>> scopes;
  cse_block(f.body, scopes, f);
}

}  // namespace tiledist::ir
