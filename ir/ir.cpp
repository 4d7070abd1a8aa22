#include "ir/ir.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tiledist::ir {

namespace {
const OpInfo kOps[] = {
#define OP(E, N, NO, NR, NRG, F) {N, NO, NR, NRG, F},
#include "ir/ops.def"
#undef OP
};
}  // namespace

const OpInfo& op_info(OpCode code) { return kOps[static_cast<int>(code)]; }
const char* op_name(OpCode code) { return op_info(code).name; }

std::optional<OpCode> parse_opcode(const std::string& name) {
  static const std::map<std::string, OpCode> table = [] {
    std::map<std::string, OpCode> m;
    for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); ++i) m[kOps[i].name] = static_cast<OpCode>(i);
    return m;
  }();
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string attr_str(const Attr& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&a)) {
    if (std::isnan(*d)) return "nan";
    if (std::isinf(*d)) return *d > 0 ? "inf" : "-inf";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    std::string s = buf;
    // Keep a float recognisable as one when it prints without a fraction.
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
  if (auto* s = std::get_if<std::string>(&a)) return quote(*s);
  const auto& v = std::get<std::vector<int64_t>>(a);
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::list<std::unique_ptr<Op>>::iterator Block::position(const Op* op) {
  return std::find_if(ops.begin(), ops.end(), [&](const std::unique_ptr<Op>& p) { return p.get() == op; });
}

void Block::erase(const Op* op) {
  auto it = position(op);
  if (it != ops.end()) ops.erase(it);
}

Value* Block::add_arg(Type t, std::string name) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->owner = this;
  v->index = static_cast<int>(args.size());
  v->name = std::move(name);
  args.push_back(std::move(v));
  return args.back().get();
}

Value* Op::add_result(Type t) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->def = this;
  v->index = static_cast<int>(results.size());
  results.push_back(std::move(v));
  return results.back().get();
}

int64_t Op::int_attr(const std::string& k) const {
  auto it = attrs.find(k);
  TD_ASSERT(it != attrs.end() && std::holds_alternative<int64_t>(it->second), "missing int attr ", k, " on ", name());
  return std::get<int64_t>(it->second);
}
double Op::float_attr(const std::string& k) const {
  auto it = attrs.find(k);
  TD_ASSERT(it != attrs.end(), "missing attr ", k, " on ", name());
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return std::get<double>(it->second);
}
const std::string& Op::str_attr(const std::string& k) const {
  auto it = attrs.find(k);
  TD_ASSERT(it != attrs.end() && std::holds_alternative<std::string>(it->second), "missing string attr ", k, " on ",
            name());
  return std::get<std::string>(it->second);
}
const std::vector<int64_t>& Op::ints_attr(const std::string& k) const {
  auto it = attrs.find(k);
  TD_ASSERT(it != attrs.end() && std::holds_alternative<std::vector<int64_t>>(it->second), "missing list attr ", k,
            " on ", name());
  return std::get<std::vector<int64_t>>(it->second);
}

namespace {
template <class BlockT, class Fn>
void walk_block(BlockT& b, const Fn& fn) {
  for (auto& op : b.ops) {
    fn(*op);
    for (auto& r : op->regions) walk_block(*r, fn);
  }
}
}  // namespace

void Function::walk(const std::function<void(Op&)>& fn) { walk_block(body, fn); }
void Function::walk(const std::function<void(const Op&)>& fn) const {
  walk_block(body, [&](const Op& op) { fn(op); });
}

void replace_all_uses(Block& scope, Value* from, Value* to) {
  walk_block(scope, [&](Op& op) {
    for (auto& v : op.operands)
      if (v == from) v = to;
  });
}

std::map<const Value*, int> count_uses(const Block& scope) {
  std::map<const Value*, int> uses;
  walk_block(scope, [&](const Op& op) {
    for (auto* v : op.operands) uses[v]++;
  });
  return uses;
}

void for_each_use(const Block& scope, const Value* v, const std::function<void(const Op&, size_t)>& fn) {
  walk_block(scope, [&](const Op& op) {
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (op.operands[i] == v) fn(op, i);
  });
}

}  // namespace tiledist::ir
