// The verifier: one rule per op (check_op), used by the builder on every new op and by
// `verify` on whole functions (parsed text, the output of each pass).
#include <algorithm>
#include <set>
#include <stdexcept>

#include "ir/attrs.h"
#include "ir/builder.h"
#include "ir/layout.h"

namespace tiledist::ir {

namespace {

bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

bool one_of(const std::string& s, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (s == o) return true;
  return false;
}

/// Attribute `key` names one of `allowed` (an attrs.h vocabulary).
template <class E>
std::string expect_enum(const Op& op, const char* key, std::initializer_list<E> allowed) {
  auto it = op.attrs.find(key);
  if (it == op.attrs.end() || !std::holds_alternative<std::string>(it->second))
    return str_cat("missing string attribute '", key, "'");
  auto v = parse_enum<E>(std::get<std::string>(it->second));
  std::string names;
  bool ok = false;
  for (E e : allowed) {
    names += str_cat(names.empty() ? "" : ", ", name_of(e));
    ok |= v && *v == e;
  }
  if (!ok) return str_cat("attribute ", key, " = \"", std::get<std::string>(it->second), "\" is not one of ", names);
  return "";
}

std::string expect_attr_in(const Op& op, const std::string& key, std::initializer_list<const char*> options) {
  auto it = op.attrs.find(key);
  if (it == op.attrs.end() || !std::holds_alternative<std::string>(it->second))
    return str_cat("missing string attribute '", key, "'");
  if (!one_of(std::get<std::string>(it->second), options))
    return str_cat("attribute ", key, " = \"", std::get<std::string>(it->second),
                   "\" is not one of the allowed values");
  return "";
}

bool int_attr_ok(const Op& op, const char* key) {
  auto it = op.attrs.find(key);
  return it != op.attrs.end() && std::holds_alternative<int64_t>(it->second);
}
bool ints_attr_ok(const Op& op, const char* key) {
  auto it = op.attrs.find(key);
  return it != op.attrs.end() && std::holds_alternative<std::vector<int64_t>>(it->second);
}

std::string check_terminator(const Block& b, OpCode want, const std::vector<Type>& types, size_t skip = 0) {
  const Op* t = b.terminator();
  if (!t || t->code != want) return str_cat("region must end with '", op_name(want), "'");
  if (t->operands.size() != types.size() + skip)
    return str_cat("'", op_name(want), "' yields ", t->operands.size() - skip, " values, expected ", types.size());
  for (size_t i = 0; i < types.size(); ++i)
    if (t->operands[i + skip]->type != types[i])
      return str_cat("'", op_name(want), "' value ", i, " has type ", t->operands[i + skip]->type.str(), ", expected ",
                     types[i].str());
  return "";
}

std::string check_args(const Block& b, const std::vector<Type>& types) {
  if (b.args.size() != types.size())
    return str_cat("region takes ", b.args.size(), " arguments, expected ", types.size());
  for (size_t i = 0; i < types.size(); ++i)
    if (b.args[i]->type != types[i])
      return str_cat("region argument ", i, " has type ", b.args[i]->type.str(), ", expected ", types[i].str());
  return "";
}

std::vector<Type> result_types(const Op& op) {
  std::vector<Type> t;
  for (auto& r : op.results) t.push_back(r->type);
  return t;
}

/// A memdesc of mbarriers: i64 [n, 1, 1].
bool barriers(const Type& t) {
  return t.is_memdesc() && t.dtype == DType::i64 && t.shape.size() == 3 && t.shape[1] == 1 && t.shape[2] == 1;
}

std::string check_rule(const Op& op) {
  // Each rule checks types without their layouts (check_layouts checks those), except where a
  // region's values must match its op's (for, if, while and their terminators): there whole
  // types, layouts included, must agree.
  const auto& in = op.operands;
  auto operand = [&](size_t i) -> Type { return in[i]->type.unlaid(); };
  const Type out_type = op.results.empty() ? Type{} : op.results[0]->type.unlaid();
  const Type* out = op.results.empty() ? nullptr : &out_type;
  auto same_as_result = [&](size_t i) -> std::string {
    return operand(i) == *out ? "" : str_cat("operand ", i, " has type ", operand(i).str(), ", result ", out->str());
  };
  switch (op.code) {
    case OpCode::Constant: {
      if (out->is_tensor() || out->is_ptr) return "constants are scalars (use splat for tensors)";
      auto it = op.attrs.find("value");
      if (it == op.attrs.end()) return "missing 'value'";
      if (out->is_int() && !std::holds_alternative<int64_t>(it->second))
        return "integer constant needs an integer value";
      if (out->is_int() && out->dtype != DType::i64) {
        int bits = out->dtype == DType::i1 ? 1 : dtype_bits(out->dtype);
        int64_t v = std::get<int64_t>(it->second);
        int64_t lo = out->dtype == DType::i1 ? 0 : -(int64_t(1) << (bits - 1));
        int64_t hi = out->dtype == DType::i1 ? 1 : (int64_t(1) << (bits - 1)) - 1;
        if (v < lo || v > hi) return str_cat("value ", v, " does not fit in ", dtype_name(out->dtype));
      }
      if (out->is_float() && !std::holds_alternative<double>(it->second) &&
          !std::holds_alternative<int64_t>(it->second))
        return "float constant needs a number";
      return "";
    }
    case OpCode::ProgramId:
    case OpCode::NumPrograms: {
      int64_t axis = int_attr_ok(op, "axis") ? op.int_attr("axis") : -1;
      if (axis < 0 || axis > 2) return "axis must be 0, 1 or 2";
      return *out == Type::scalar(DType::i32) ? "" : "result must be i32";
    }
    case OpCode::Arange: {
      if (!int_attr_ok(op, "start") || !int_attr_ok(op, "end")) return "needs integer start and end";
      int64_t n = op.int_attr("end") - op.int_attr("start");
      if (!is_pow2(n))
        return str_cat("range [", op.int_attr("start"), ", ", op.int_attr("end"), ") must have a power-of-2 length");
      return *out == Type::tensor(DType::i32, {n}) ? "" : "result must be tensor<Nxi32>";
    }
    case OpCode::Splat:
      if (operand(0).is_tensor()) return "splat takes a scalar";
      if (!out->is_tensor() || out->element() != operand(0)) return "result must be a tensor of the operand's type";
      return "";
    case OpCode::Broadcast: {
      const auto& a = operand(0);
      if (!a.is_tensor() || out->element() != a.element() || out->shape.size() != a.shape.size())
        return str_cat("cannot broadcast ", a.str(), " to ", out->str());
      for (size_t i = 0; i < a.shape.size(); ++i)
        if (a.shape[i] != out->shape[i] && a.shape[i] != 1)
          return str_cat("cannot broadcast shape ", shape_str(a.shape), " to ", shape_str(out->shape));
      return "";
    }
    case OpCode::ExpandDims: {
      if (!operand(0).is_tensor()) return "needs a tensor (splat a scalar)";
      if (!int_attr_ok(op, "axis")) return "needs an integer axis";
      auto shape = operand(0).shape;
      int64_t axis = op.int_attr("axis");
      if (axis < 0 || axis > static_cast<int64_t>(shape.size())) return "axis out of range";
      shape.insert(shape.begin() + axis, 1);
      return *out == operand(0).with_shape(shape) ? "" : "result shape does not match";
    }
    case OpCode::Reshape:
      if (!operand(0).is_tensor()) return "needs a tensor (splat a scalar)";
      if (!out->is_tensor() || out->element() != operand(0).element() || out->numel() != operand(0).numel())
        return str_cat("cannot reshape ", operand(0).str(), " to ", out->str(), " (element count differs)");
      return "";
    case OpCode::LocalAlloc:
      if (!out->is_memdesc() || out->shape.size() < 3 || !op.results[0]->type.layout ||
          op.results[0]->type.layout->kind != Layout::Kind::shared)
        return "makes a memdesc of tiles in a #shared layout";
      return "";
    case OpCode::AsyncCopy: {
      if (in.size() < 3 || in.size() > 5) return "takes (buffer, index, ptrs[, mask[, other]])";
      const Type buf = operand(0);
      if (!buf.is_memdesc() || buf.shape.size() < 3) return str_cat("copies into a memdesc of tiles, got ", buf.str());
      if (operand(1) != Type::scalar(DType::i32)) return str_cat("the tile index must be i32, got ", operand(1).str());
      std::vector<int64_t> tile(buf.shape.end() - 2, buf.shape.end());
      if (!operand(2).is_ptr || operand(2).shape != tile || operand(2).dtype != buf.dtype)
        return str_cat("ptrs must be a ", shape_str(tile), " tensor of pointers to ", dtype_name(buf.dtype), ", got ",
                       operand(2).str());
      if (in.size() > 3 && operand(3) != Type::tensor(DType::i1, tile))
        return str_cat("mask must be i1 of the tile's shape, got ", operand(3).str());
      if (in.size() > 4 && operand(4) != Type::tensor(buf.dtype, tile))
        return str_cat("other must be ", Type::tensor(buf.dtype, tile).str(), ", got ", operand(4).str());
      return expect_attr_in(op, "via", {"cp.async", "tma"});
    }
    case OpCode::AsyncCommit:
      return "";
    case OpCode::AsyncWait:
      return int_attr_ok(op, "pending") && op.int_attr("pending") >= 0 ? "" : "needs an integer 'pending' >= 0";
    case OpCode::InitBarrier:
      if (!barriers(operand(0)))
        return str_cat("initializes a memdesc of i64 [n, 1, 1] (mbarriers), got ", operand(0).str());
      return int_attr_ok(op, "count") && op.int_attr("count") >= 1 ? "" : "needs an integer 'count' >= 1";
    case OpCode::AsyncTmaCopy: {
      if (in.size() < 6) return "takes (buffer, index, barriers, pred, coordinates...)";
      const Type buf = operand(0);
      if (!buf.is_memdesc() || buf.shape.size() != 3)
        return str_cat("copies into a memdesc of 2-D tiles, got ", buf.str());
      if (operand(1) != Type::scalar(DType::i32)) return str_cat("the tile index must be i32, got ", operand(1).str());
      if (!barriers(operand(2)))
        return str_cat("completes on a memdesc of i64 [n, 1, 1] (mbarriers), got ", operand(2).str());
      if (operand(3) != Type::scalar(DType::i1)) return str_cat("pred must be i1, got ", operand(3).str());
      for (size_t i = 4; i < in.size(); ++i)
        if (operand(i) != Type::scalar(DType::i32))
          return str_cat("coordinate ", i - 4, " must be i32, got ", operand(i).str());
      if (!op.has_attr("tensor") || !std::holds_alternative<std::string>(op.attrs.at("tensor")))
        return "needs a 'tensor' (the tensor map's recipe)";
      const std::string& t = op.str_attr("tensor");  // "pointer dtype d0,d1,... strides box"
      const size_t a = t.find(' '), b = a == std::string::npos ? a : t.find(' ', a + 1),
                   c = b == std::string::npos ? b : t.find(' ', b + 1);
      if (c == std::string::npos) return str_cat("a malformed tensor '", t, "'");
      const size_t dims =
          static_cast<size_t>(std::count(t.begin() + static_cast<long>(b), t.begin() + static_cast<long>(c), ',')) + 1;
      if (dims != in.size() - 4)
        return str_cat("takes one coordinate per dimension of its tensor (", dims, "), got ", in.size() - 4);
      return "";
    }
    case OpCode::WaitBarrier:
      if (in.size() < 3 || in.size() > 4) return "takes (barriers, index, phase[, pred])";
      if (!barriers(operand(0)))
        return str_cat("waits on a memdesc of i64 [n, 1, 1] (mbarriers), got ", operand(0).str());
      if (operand(1) != Type::scalar(DType::i32) || operand(2) != Type::scalar(DType::i32))
        return "the index and phase must be i32";
      if (in.size() > 3 && operand(3) != Type::scalar(DType::i1))
        return str_cat("pred must be i1, got ", operand(3).str());
      return "";
    case OpCode::WarpSpecialize:
      for (auto& r : op.regions) {
        auto e = check_args(*r, {});
        if (e.empty()) e = check_terminator(*r, OpCode::Yield, {});
        if (!e.empty()) return e;
      }
      for (const char* k : {"producer_regs", "consumer_regs"})
        if (op.has_attr(k) && !(int_attr_ok(op, k) && op.int_attr(k) >= 24 && op.int_attr(k) <= 256))
          return str_cat("'", k, "' must be an integer from 24 to 256");
      return "";
    case OpCode::ArriveBarrier:
      if (in.size() < 2 || in.size() > 3) return "takes (barriers, index[, pred])";
      if (!barriers(operand(0)))
        return str_cat("arrives on a memdesc of i64 [n, 1, 1] (mbarriers), got ", operand(0).str());
      if (operand(1) != Type::scalar(DType::i32)) return "the index must be i32";
      if (in.size() > 2 && operand(2) != Type::scalar(DType::i1))
        return str_cat("pred must be i1, got ", operand(2).str());
      if (op.has_attr("pending") && !(int_attr_ok(op, "pending") && op.int_attr("pending") >= 0))
        return "'pending' must be an integer >= 0";
      return "";
    case OpCode::LocalLoad: {
      const Type buf = operand(0);
      if (!buf.is_memdesc() || buf.shape.size() < 3) return str_cat("reads a memdesc of tiles, got ", buf.str());
      if (operand(1) != Type::scalar(DType::i32)) return str_cat("the tile index must be i32, got ", operand(1).str());
      std::vector<int64_t> tile(buf.shape.end() - 2, buf.shape.end());
      if (op.has_attr("perm")) {
        if (!ints_attr_ok(op, "perm") ||
            (op.ints_attr("perm") != std::vector<int64_t>{1, 0} && op.ints_attr("perm") != std::vector<int64_t>{0, 1}))
          return "perm is [0, 1] or [1, 0]";
        if (op.ints_attr("perm")[0] == 1) std::swap(tile[0], tile[1]);
      }
      if (out->is_memdesc() || *out != Type::tensor(buf.dtype, tile))
        return str_cat("result must be ", Type::tensor(buf.dtype, tile).str(), ", got ", out->str());
      return "";
    }
    case OpCode::ConvertLayout:
      if (!operand(0).is_tensor() || !in[0]->type.layout || !op.results[0]->type.layout)
        return "converts a tensor with a layout to another layout";
      return same_as_result(0);
    case OpCode::Trans: {
      if (!operand(0).is_tensor()) return "needs a tensor";
      if (!ints_attr_ok(op, "perm")) return "needs a permutation list 'perm'";
      const auto& perm = op.ints_attr("perm");
      const auto& shape = operand(0).shape;
      if (perm.size() != shape.size()) return "permutation rank differs from operand rank";
      std::set<int64_t> seen(perm.begin(), perm.end());
      if (seen.size() != perm.size() || *seen.begin() != 0 || *seen.rbegin() != static_cast<int64_t>(perm.size()) - 1)
        return str_cat(shape_str(perm), " is not a permutation");
      std::vector<int64_t> s;
      for (int64_t p : perm) s.push_back(shape[p]);
      return *out == operand(0).with_shape(s) ? "" : "result shape does not match";
    }
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Rem:
    case OpCode::Min:
    case OpCode::Max:
      if (operand(0) != operand(1))
        return str_cat("operand types differ: ", operand(0).str(), " and ", operand(1).str());
      if (operand(0).is_ptr || operand(0).is_bool()) return str_cat("needs numbers, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::And:
    case OpCode::Or:
    case OpCode::Xor:
      if (operand(0) != operand(1))
        return str_cat("operand types differ: ", operand(0).str(), " and ", operand(1).str());
      if (!operand(0).is_int()) return str_cat("needs integers or booleans, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Shl:
    case OpCode::Shr:
      if (operand(0) != operand(1))
        return str_cat("operand types differ: ", operand(0).str(), " and ", operand(1).str());
      if (!operand(0).is_int() || operand(0).is_bool()) return str_cat("needs integers, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Cmp:
      if (operand(0) != operand(1))
        return str_cat("operand types differ: ", operand(0).str(), " and ", operand(1).str());
      if (*out != Type::tensor(DType::i1, operand(0).shape)) return "result must be i1 of the operands' shape";
      return expect_enum(op, "pred", {CmpPred::eq, CmpPred::ne, CmpPred::lt, CmpPred::le, CmpPred::gt, CmpPred::ge});
    case OpCode::Neg:
      if (operand(0).is_ptr || operand(0).is_bool()) return str_cat("needs a number, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Not:
      if (!operand(0).is_int()) return str_cat("needs an integer or boolean, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Abs:
      if (operand(0).is_ptr || operand(0).is_bool()) return str_cat("needs a number, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Exp:
    case OpCode::Exp2:
    case OpCode::Log:
    case OpCode::Log2:
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Erf:
    case OpCode::Sin:
    case OpCode::Cos:
    case OpCode::Floor:
    case OpCode::Ceil:
      if (!operand(0).is_float()) return str_cat("needs a floating-point operand, got ", operand(0).str());
      return same_as_result(0);
    case OpCode::Cast:
      if (operand(0).is_ptr || out->is_ptr) return "cast converts numbers; use bitcast for pointers";
      return out->shape == operand(0).shape ? "" : "cast keeps the shape";
    case OpCode::Bitcast:
      if (out->shape != operand(0).shape) return "bitcast keeps the shape";
      if (operand(0).is_ptr && !out->is_ptr) return "bitcast cannot turn a pointer into a number";
      if (out->is_ptr && !operand(0).is_ptr && operand(0).dtype != DType::i64)
        return str_cat("an address made a pointer must be i64, got ", operand(0).str());
      if (!out->is_ptr && dtype_bits(out->dtype) != dtype_bits(operand(0).dtype)) return "bitcast keeps the bit width";
      return "";
    case OpCode::Select:
      if (operand(0) != Type::tensor(DType::i1, operand(1).shape))
        return str_cat("condition must be i1 of the values' shape, got ", operand(0).str());
      if (operand(1) != operand(2)) return str_cat("value types differ: ", operand(1).str(), " and ", operand(2).str());
      return same_as_result(1);
    case OpCode::Hint:
      return same_as_result(0);
    case OpCode::AddPtr:
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      if (!operand(1).is_int() || operand(1).is_bool() || operand(1).shape != operand(0).shape)
        return str_cat("offset must be an integer of the pointer's shape, got ", operand(1).str());
      return same_as_result(0);
    case OpCode::Load: {
      if (in.empty() || in.size() > 3) return "takes (ptr[, mask[, other]])";
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      if (*out != Type::tensor(operand(0).dtype, operand(0).shape)) return "result must be the pointee type";
      if (in.size() > 1 && operand(1) != Type::tensor(DType::i1, operand(0).shape))
        return str_cat("mask must be i1 of the pointer's shape, got ", operand(1).str());
      if (in.size() > 2 && operand(2) != *out)
        return str_cat("other must have type ", out->str(), ", got ", operand(2).str());
      return "";
    }
    case OpCode::Prefetch:
      if (in.empty() || in.size() > 2) return "takes (ptr[, mask])";
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      if (in.size() > 1 && operand(1) != Type::tensor(DType::i1, operand(0).shape))
        return str_cat("mask must be i1 of the pointer's shape, got ", operand(1).str());
      return "";
    case OpCode::Store: {
      if (in.size() < 2 || in.size() > 3) return "takes (ptr, value[, mask])";
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      if (operand(1) != Type::tensor(operand(0).dtype, operand(0).shape))
        return str_cat("value has type ", operand(1).str(), ", the pointer stores ",
                       Type::tensor(operand(0).dtype, operand(0).shape).str());
      if (in.size() > 2 && operand(2) != Type::tensor(DType::i1, operand(0).shape))
        return str_cat("mask must be i1 of the pointer's shape, got ", operand(2).str());
      return "";
    }
    case OpCode::AtomicRMW:
    case OpCode::AtomicCAS: {
      bool cas = op.code == OpCode::AtomicCAS;
      if (cas ? in.size() != 3 : (in.size() < 2 || in.size() > 3))
        return cas ? "takes (ptr, cmp, value)" : "takes (ptr, value[, mask])";
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      Type elem = Type::tensor(operand(0).dtype, operand(0).shape);
      if (operand(1) != elem) return str_cat("value has type ", operand(1).str(), ", expected ", elem.str());
      if (cas && operand(2) != elem) return str_cat("value has type ", operand(2).str(), ", expected ", elem.str());
      if (!cas && in.size() == 3 && operand(2) != Type::tensor(DType::i1, operand(0).shape))
        return "mask must be i1 of the pointer's shape";
      DType d = operand(0).dtype;
      bool ok = d == DType::i32 || d == DType::i64 || (!cas && (d == DType::f32 || d == DType::f64));
      if (!ok)
        return str_cat("atomics on ", dtype_name(d), " are not supported (i32, i64", cas ? "" : ", f32, f64", ")");
      if (*out != elem) return "result must be the pointee type";
      if (!cas) {
        auto e = expect_enum(
            op, "kind",
            {RmwKind::add, RmwKind::max, RmwKind::min, RmwKind::xchg, RmwKind::and_, RmwKind::or_, RmwKind::xor_});
        if (!e.empty()) return e;
        if (is_float(d) && expect_enum(op, "kind", {RmwKind::add, RmwKind::xchg, RmwKind::max, RmwKind::min}) != "")
          return "bitwise atomics need integers";
      }
      auto e = expect_enum(op, "order", {MemOrder::relaxed, MemOrder::acquire, MemOrder::release, MemOrder::acq_rel});
      if (!e.empty()) return e;
      return expect_enum(op, "scope", {MemScope::cta, MemScope::gpu, MemScope::sys});
    }
    case OpCode::Rank:
    case OpCode::NumRanks:
      return *out == Type::scalar(DType::i32) ? "" : "result must be i32";
    case OpCode::SymmAt:
      if (!operand(0).is_ptr) return str_cat("needs a pointer, got ", operand(0).str());
      if (!operand(1).is_int() || operand(1).is_tensor() || operand(1).is_bool())
        return str_cat("the rank must be an integer scalar, got ", operand(1).str());
      return same_as_result(0);
    case OpCode::Wait: {
      // (a block of pointers: the words from each, each compared with its own value)
      const Type& p = operand(0);
      if (!p.is_ptr || (p.dtype != DType::i32 && p.dtype != DType::i64))
        return str_cat("waits on pointers to i32 or i64 signal words, got ", p.str());
      if (operand(1) != Type::scalar(DType::i32)) return str_cat("the word count must be i32, got ", operand(1).str());
      const Type want = p.is_tensor() ? Type::tensor(p.dtype, p.shape) : Type::scalar(p.dtype);
      if (operand(2) != want) return str_cat("the expected value must be ", want.str(), ", got ", operand(2).str());
      if (*out != Type::scalar(p.dtype)) return "result must be the signal's type";
      auto e = expect_enum(op, "cmp", {CmpPred::eq, CmpPred::ne, CmpPred::lt, CmpPred::le, CmpPred::gt, CmpPred::ge});
      if (e.empty()) e = expect_enum(op, "scope", {MemScope::gpu, MemScope::sys});
      return e.empty() ? expect_enum(op, "order", {MemOrder::acquire, MemOrder::relaxed}) : e;
    }
    case OpCode::ConsumeToken:
      if (operand(1).is_tensor()) return "the token is a scalar";
      return same_as_result(0);
    case OpCode::Memcpy:
      if (!int_attr_ok(op, "nbi")) return "needs an integer 'nbi' (0 or 1)";
      if (!operand(0).is_ptr || operand(0).is_tensor() || !operand(1).is_ptr || operand(1).is_tensor())
        return "copies between two scalar pointers";
      if (!operand(2).is_int() || operand(2).is_tensor() || operand(2).is_bool())
        return "the byte count must be an integer scalar";
      return expect_attr_in(op, "granularity", {"block", "warp", "thread"});
    case OpCode::Fence: {
      auto e = expect_enum(op, "order", {MemOrder::acquire, MemOrder::release, MemOrder::acq_rel, MemOrder::seq_cst});
      return e.empty() ? expect_enum(op, "scope", {MemScope::cta, MemScope::gpu, MemScope::sys}) : e;
    }
    case OpCode::Barrier:
      return expect_attr_in(op, "kind", {"barrier_all", "sync_all"});
    case OpCode::Profile: {
      if (!op.has_attr("region") || op.str_attr("region").empty()) return "needs a non-empty 'region' name";
      if (op.operands.size() > 2) return str_cat("takes at most 2 arguments, got ", op.operands.size());
      for (size_t i = 0; i < op.operands.size(); ++i)
        if (operand(i) != Type::scalar(DType::i32)) return str_cat("argument ", i, " must be an i32 scalar");
      return expect_enum(op, "phase", {ProfilePhase::begin, ProfilePhase::end, ProfilePhase::instant});
    }
    case OpCode::Reduce: {
      auto e = expect_enum(op, "kind",
                           {ReduceKind::sum, ReduceKind::max, ReduceKind::min, ReduceKind::argmax, ReduceKind::argmin});
      if (!e.empty()) return e;
      if (!operand(0).is_tensor() || operand(0).is_ptr) return "reduce needs a tensor of numbers";
      if (!int_attr_ok(op, "axis")) return "needs an integer axis";
      int64_t axis = op.int_attr("axis");
      if (axis < 0 || axis >= static_cast<int64_t>(operand(0).shape.size())) return "axis out of range";
      bool arg = one_of(op.str_attr("kind"), {"argmax", "argmin"});
      Type want = reduced_type(operand(0), static_cast<int>(axis), arg ? DType::i32 : operand(0).dtype);
      return *out == want ? "" : str_cat("result must be ", want.str());
    }
    case OpCode::Dot: {
      const Type &a = operand(0), &b = operand(1), &c = operand(2);
      if (a.shape.size() != 2 || b.shape.size() != 2 || c.shape.size() != 2) return "dot takes 2-D tensors";
      if (a.shape[1] != b.shape[0] || c.shape[0] != a.shape[0] || c.shape[1] != b.shape[1])
        return str_cat("shapes do not chain: ", shape_str(a.shape), " x ", shape_str(b.shape), " + ",
                       shape_str(c.shape));
      if (a.dtype != b.dtype)
        return str_cat("operand dtypes differ: ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
      if (!a.is_float()) return str_cat("dot inputs must be f32, f16, bf16 or f8, got ", dtype_name(a.dtype));
      if (c.dtype != DType::f32) return str_cat("the accumulator must be f32, got ", dtype_name(c.dtype));
      return same_as_result(2);
    }
    case OpCode::For: {
      if (in.size() < 3) return "takes (lower, upper, step, inits...)";
      if (!operand(0).is_int() || operand(0).is_tensor() || operand(1) != operand(0) || operand(2) != operand(0))
        return "bounds and step must be integer scalars of one type";
      std::vector<Type> carried;
      for (size_t i = 3; i < in.size(); ++i) carried.push_back(in[i]->type);
      if (result_types(op) != carried) return "results must have the types of the initial values";
      std::vector<Type> args{operand(0)};
      args.insert(args.end(), carried.begin(), carried.end());
      auto e = check_args(*op.regions[0], args);
      return e.empty() ? check_terminator(*op.regions[0], OpCode::Yield, carried) : e;
    }
    case OpCode::If: {
      if (in.size() != 1 || operand(0) != Type::scalar(DType::i1)) return "takes one i1 condition";
      for (auto& r : op.regions) {
        auto e = check_args(*r, {});
        if (e.empty()) e = check_terminator(*r, OpCode::Yield, result_types(op));
        if (!e.empty()) return e;
      }
      return "";
    }
    case OpCode::While: {
      std::vector<Type> carried;
      for (auto* v : in) carried.push_back(v->type);
      if (result_types(op) != carried) return "results must have the types of the initial values";
      auto e = check_args(*op.regions[0], carried);
      if (e.empty()) e = check_terminator(*op.regions[0], OpCode::Condition, carried, 1);
      if (e.empty() && op.regions[0]->terminator()->operands[0]->type != Type::scalar(DType::i1))
        e = "condition must be an i1 scalar";
      if (e.empty()) e = check_args(*op.regions[1], carried);
      if (e.empty()) e = check_terminator(*op.regions[1], OpCode::Yield, carried);
      return e;
    }
    case OpCode::Yield:
    case OpCode::Condition:
      if (!op.parent || !op.parent->parent) return "must end a region of for, if or while";
      return "";
    case OpCode::Return:
      if (op.parent && op.parent->parent) return "must end the function body";
      return "";
  }
  return "unknown op";
}

/// Layouts, once assigned (ir/layout.h): every tensor an op takes or makes has one; an
/// elementwise or memory op's tensors share one; expand_dims and reduce move between a layout
/// and its slice; a dot's operands are its result's dot operands (or shared); each layout fits
/// its tensor's shape.
std::string check_layouts(const Op& op) {
  std::vector<const Value*> tensors;
  for (const Value* v : op.operands)
    if (v->type.is_tensor()) tensors.push_back(v);
  for (auto& r : op.results)
    if (r->type.is_tensor()) tensors.push_back(r.get());
  size_t laid = 0;
  for (const Value* v : tensors) laid += v->type.layout != nullptr;
  if (laid == 0) return "";
  if (laid != tensors.size()) return "some of its tensors have a layout and others none";
  for (const Value* v : tensors) try {
      const auto& shape = v->type.shape;  // (a memdesc's layout places its tiles: its last two dimensions)
      to_linear(*v->type.layout, v->type.is_memdesc() ? std::vector<int64_t>(shape.end() - 2, shape.end()) : shape);
    } catch (const std::invalid_argument& e) {
      return str_cat("layout of ", v->type.str(), ": ", e.what());
    }
  const LayoutRef& first = tensors[0]->type.layout;
  auto all_same = [&]() -> std::string {
    for (const Value* v : tensors)
      if (!same_layout(v->type.layout, first))
        return str_cat("its tensors' layouts differ: ", first->str(), " and ", v->type.layout->str());
    return "";
  };
  switch (op.code) {
    case OpCode::ExpandDims: {
      LayoutRef want = Layout::slice(static_cast<int>(op.int_attr("axis")), op.results[0]->type.layout);
      return same_layout(op.operands[0]->type.layout, want)
                 ? ""
                 : str_cat("the operand's layout must be ", want->str(), ", got ", op.operands[0]->type.layout->str());
    }
    case OpCode::Reduce: {
      if (!op.results[0]->type.is_tensor()) return "";
      LayoutRef want = Layout::slice(static_cast<int>(op.int_attr("axis")), op.operands[0]->type.layout);
      return same_layout(op.results[0]->type.layout, want)
                 ? ""
                 : str_cat("the result's layout must be ", want->str(), ", got ", op.results[0]->type.layout->str());
    }
    case OpCode::Dot: {
      const LayoutRef& acc = op.results[0]->type.layout;
      if (!same_layout(op.operands[2]->type.layout, acc)) return "the accumulator and the result differ in layout";
      if (acc->kind != Layout::Kind::mma) return "";  // a dot done by FMAs takes its operands as they come
      for (int i = 0; i < 2; ++i) {
        const Layout& l = *op.operands[i]->type.layout;
        bool ok = l.kind == Layout::Kind::shared ||
                  (l.kind == Layout::Kind::dot_operand && l.op_index == i && same_layout(l.parent, acc));
        if (!ok)
          return str_cat("operand ", i, " must be a dot operand of ", acc->str(), " or in shared memory, got ",
                         l.str());
      }
      return "";
    }
    case OpCode::AsyncCopy:
      for (size_t i = 3; i < op.operands.size(); ++i)
        if (!same_layout(op.operands[i]->type.layout, op.operands[2]->type.layout))
          return "its pointers, mask and other differ in layout";
      return "";
    case OpCode::LocalAlloc:
    case OpCode::AsyncCommit:
    case OpCode::AsyncWait:
    case OpCode::LocalLoad:
    case OpCode::InitBarrier:
    case OpCode::AsyncTmaCopy:
    case OpCode::WaitBarrier:
    case OpCode::ArriveBarrier:
    case OpCode::WarpSpecialize:
    case OpCode::Splat:
    case OpCode::Arange:
    case OpCode::ConvertLayout:
    case OpCode::Trans:
    case OpCode::Reshape:
    case OpCode::For:
    case OpCode::If:
    case OpCode::While:
    case OpCode::Yield:
    case OpCode::Condition:
      return "";
    default:
      return all_same();
  }
}

}  // namespace

std::string check_op(const Op& op) {
  const OpInfo& info = op.info();
  if (info.num_operands >= 0 && static_cast<int>(op.operands.size()) != info.num_operands)
    return str_cat("takes ", info.num_operands, " operands, got ", op.operands.size());
  if (info.num_results >= 0 && static_cast<int>(op.results.size()) != info.num_results)
    return str_cat("has ", info.num_results, " results, got ", op.results.size());
  if (static_cast<int>(op.regions.size()) != info.num_regions)
    return str_cat("has ", info.num_regions, " regions, got ", op.regions.size());
  // A memdesc is made by local_alloc and used by async_copy and local_load (its operand 0) only.
  const bool makes_memdesc = op.code == OpCode::LocalAlloc;
  const bool takes_memdesc = op.code == OpCode::AsyncCopy || op.code == OpCode::LocalLoad ||
                             op.code == OpCode::InitBarrier || op.code == OpCode::AsyncTmaCopy ||
                             op.code == OpCode::WaitBarrier || op.code == OpCode::ArriveBarrier;
  for (size_t i = 0; i < op.operands.size(); ++i)
    if (op.operands[i]->type.is_memdesc() &&
        !(takes_memdesc && (i == 0 || (op.code == OpCode::AsyncTmaCopy && i == 2))))
      return str_cat("operand ", i,
                     " is a memdesc: only the shared-memory and barrier ops take one (async_tma_copy two)");
  for (auto& r : op.results)
    if (r->type.is_memdesc() && !makes_memdesc) return "only local_alloc makes a memdesc";
  std::string e = check_rule(op);
  return e.empty() ? check_layouts(op) : e;
}

namespace {
void verify_block(const Block& b, std::set<const Value*>& visible, bool is_body) {
  std::vector<const Value*> added;
  for (auto& a : b.args) {
    visible.insert(a.get());
    added.push_back(a.get());
  }
  for (auto it = b.ops.begin(); it != b.ops.end(); ++it) {
    const Op& op = **it;
    for (size_t i = 0; i < op.operands.size(); ++i)
      if (!visible.count(op.operands[i]))
        throw Error::at(op.name(), op.loc,
                        str_cat("operand ", i, " is used before its definition or outside its region"));
    bool last = std::next(it) == b.ops.end();
    if ((op.info().flags & TERM) && !last) throw Error::at(op.name(), op.loc, "terminator in the middle of a region");
    if (last && !(op.info().flags & TERM))
      throw Error::at(op.name(), op.loc,
                      is_body ? "function body must end with 'return'" : "region must end with a terminator");
    std::string err = check_op(op);
    if (!err.empty()) throw Error::at(op.name(), op.loc, err);
    for (auto& r : op.regions) verify_block(*r, visible, false);
    for (auto& r : op.results) {
      visible.insert(r.get());
      added.push_back(r.get());
    }
  }
  if (b.ops.empty()) throw Error(is_body ? "tiledist: function body is empty" : "tiledist: empty region");
  for (auto* v : added) visible.erase(v);
}
}  // namespace

void verify(const Function& f) {
  std::set<const Value*> visible;
  verify_block(f.body, visible, true);
  if (f.body.terminator()->code != OpCode::Return)
    throw Error::at(f.body.terminator()->name(), f.body.terminator()->loc, "function body must end with 'return'");
}

}  // namespace tiledist::ir
