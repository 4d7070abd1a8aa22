// The tile IR: a Function is a body Block of Ops in SSA form; loops and branches are ops with
// nested single-block regions. Values are owned by the op (results) or block (arguments) that
// defines them, so their addresses are stable.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/types.h"
#include "support/support.h"

namespace tiledist::ir {

enum class OpCode : uint16_t {
#define OP(E, N, NO, NR, NRG, F) E,
#include "ir/ops.def"
#undef OP
};

enum OpFlags : unsigned { NONE = 0, PURE = 1, MEM = 2, TERM = 4 };

struct OpInfo {
  const char* name;
  int num_operands;  // -1: variadic
  int num_results;   // -1: variadic
  int num_regions;
  unsigned flags;
};
const OpInfo& op_info(OpCode code);
const char* op_name(OpCode code);
std::optional<OpCode> parse_opcode(const std::string& name);

/// Attribute values: integers, floats, strings and integer lists.
using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
/// Sorted by name, so that printing is deterministic.
using Attrs = std::map<std::string, Attr>;
std::string attr_str(const Attr& a);
/// A string in double quotes with `"`, `\` and newlines escaped (what the parser reads back).
std::string quote(const std::string& s);

struct Op;
struct Block;

struct Value {
  Type type;
  Op* def = nullptr;       // the op whose result this is, or null for a block argument
  Block* owner = nullptr;  // the block whose argument this is, or null for a result
  int index = 0;           // position among the results or arguments
  std::string name;        // a hint for printing (function parameters), may be empty
};

struct Block {
  std::vector<std::unique_ptr<Value>> args;
  std::list<std::unique_ptr<Op>> ops;
  Op* parent = nullptr;  // the op that holds this region, or null for a function body

  Value* add_arg(Type t, std::string name = "");
  Op* terminator() const { return ops.empty() ? nullptr : ops.back().get(); }
  /// Where `op` (one of this block's) is in `ops`; ops.end() if it is not there.
  std::list<std::unique_ptr<Op>>::iterator position(const Op* op);
  /// Removes `op` (and everything it owns) from this block.
  void erase(const Op* op);
};

struct Op {
  OpCode code;
  std::vector<Value*> operands;
  std::vector<std::unique_ptr<Value>> results;
  Attrs attrs;
  std::vector<std::unique_ptr<Block>> regions;
  Location loc;
  Block* parent = nullptr;

  const OpInfo& info() const { return op_info(code); }
  const char* name() const { return op_name(code); }
  bool is_pure() const { return info().flags & PURE; }
  Value* result(int i = 0) const { return results.at(i).get(); }
  Value* add_result(Type t);

  bool has_attr(const std::string& k) const { return attrs.count(k) != 0; }
  int64_t int_attr(const std::string& k) const;
  double float_attr(const std::string& k) const;
  const std::string& str_attr(const std::string& k) const;
  const std::vector<int64_t>& ints_attr(const std::string& k) const;
};

struct Function {
  std::string name;
  Block body;  // its args are the kernel's runtime parameters

  /// Visits every op, outer before inner, in order.
  void walk(const std::function<void(Op&)>& fn);
  void walk(const std::function<void(const Op&)>& fn) const;
};

/// Replaces every use of `from` by `to` inside `scope` (and its nested regions).
void replace_all_uses(Block& scope, Value* from, Value* to);
/// Counts uses of each value in `scope`.
std::map<const Value*, int> count_uses(const Block& scope);
/// Calls fn(user, i) for each op in `scope` (nested regions included) whose operand i is `v`.
void for_each_use(const Block& scope, const Value* v, const std::function<void(const Op&, size_t)>& fn);

}  // namespace tiledist::ir
