// Constant folding and canonicalization: ops whose operands are constants (or splats of
// constants) become constants; identities such as x+0, x*1, select(true, a, b) disappear.
// Assumes: integers wrap at their width; floats fold only in f32/f64, where the host's
// arithmetic rounds as the targets do (f16/bf16/f8 are left to run time).
#include <cmath>

#include "ir/builder.h"
#include "ir/passes/passes.h"

namespace tiledist::ir {

namespace {

int64_t wrap(int64_t v, DType t) {
  int bits = t == DType::i1 ? 1 : dtype_bits(t);
  if (bits >= 64) return v;
  if (t == DType::i1) return v & 1;
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (u >> (bits - 1)) u |= ~mask;  // sign-extend
  return static_cast<int64_t>(u);
}

bool foldable_float(DType t) { return t == DType::f32 || t == DType::f64; }
double round_to(double v, DType t) { return t == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v; }

struct Scalar {
  bool is_float;
  int64_t i;
  double d;
};

std::optional<Scalar> constant_of(const Value* v) {
  const Op* c = constant_source(v);
  if (!c) return std::nullopt;
  const Attr& a = c->attrs.at("value");
  if (c->results[0]->type.is_float()) {
    if (!foldable_float(c->results[0]->type.dtype)) return std::nullopt;
    double d = std::holds_alternative<double>(a) ? std::get<double>(a) : static_cast<double>(std::get<int64_t>(a));
    return Scalar{true, 0, round_to(d, c->results[0]->type.dtype)};
  }
  return Scalar{false, std::get<int64_t>(a), 0};
}

bool is_const(const Value* v, double x) {
  auto c = constant_of(v);
  return c && (c->is_float ? c->d == x : static_cast<double>(c->i) == x);
}

/// Evaluates an op over scalar constants; nullopt when it cannot or should not.
std::optional<Attr> evaluate(const Op& op, const std::vector<Scalar>& in) {
  const Type& out = op.results[0]->type;
  DType dt = out.dtype;
  if (op.code == OpCode::Cast) {
    DType from = op.operands[0]->type.dtype;
    if (is_float(dt)) {
      if (!foldable_float(dt)) return std::nullopt;
      return round_to(in[0].is_float ? in[0].d : static_cast<double>(in[0].i), dt);
    }
    if (!is_float(from)) return dt == DType::i1 ? int64_t(in[0].i != 0) : wrap(in[0].i, dt);
    if (!std::isfinite(in[0].d) || std::fabs(in[0].d) > 9.0e18) return std::nullopt;
    if (dt == DType::i1) return static_cast<int64_t>(in[0].d != 0.0);
    return wrap(static_cast<int64_t>(in[0].d), dt);
  }
  if (op.code == OpCode::Cmp) {
    const std::string& p = op.str_attr("pred");
    double a = in[0].is_float ? in[0].d : static_cast<double>(in[0].i);
    double b = in[1].is_float ? in[1].d : static_cast<double>(in[1].i);
    if (!in[0].is_float) {  // compare integers exactly
      int64_t x = in[0].i, y = in[1].i;
      return static_cast<int64_t>(p == "eq"   ? x == y
                                  : p == "ne" ? x != y
                                  : p == "lt" ? x < y
                                  : p == "le" ? x <= y
                                  : p == "gt" ? x > y
                                              : x >= y);
    }
    return static_cast<int64_t>(p == "eq"   ? a == b
                                : p == "ne" ? a != b
                                : p == "lt" ? a < b
                                : p == "le" ? a <= b
                                : p == "gt" ? a > b
                                            : a >= b);
  }
  if (is_float(dt)) {
    if (!foldable_float(dt)) return std::nullopt;
    double a = in[0].d, b = in.size() > 1 ? in[1].d : 0;
    double r;
    switch (op.code) {
      case OpCode::Add:
        r = a + b;
        break;
      case OpCode::Sub:
        r = a - b;
        break;
      case OpCode::Mul:
        r = a * b;
        break;
      case OpCode::Div:
        r = a / b;
        break;
      case OpCode::Min:
        r = std::fmin(a, b);
        break;
      case OpCode::Max:
        r = std::fmax(a, b);
        break;
      case OpCode::Neg:
        r = -a;
        break;
      case OpCode::Abs:
        r = std::fabs(a);
        break;
      default:
        return std::nullopt;
    }
    return round_to(r, dt);
  }
  int64_t a = in[0].i, b = in.size() > 1 ? in[1].i : 0;
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  int bits = dt == DType::i1 ? 1 : dtype_bits(dt);
  int64_t r;
  switch (op.code) {
    case OpCode::Add:
      r = static_cast<int64_t>(ua + ub);
      break;
    case OpCode::Sub:
      r = static_cast<int64_t>(ua - ub);
      break;
    case OpCode::Mul:
      r = static_cast<int64_t>(ua * ub);
      break;
    case OpCode::Div:
      if (b == 0 || (b == -1 && a == INT64_MIN)) return std::nullopt;
      r = a / b;
      break;
    case OpCode::Rem:
      if (b == 0 || b == -1) return std::nullopt;
      r = a % b;
      break;
    case OpCode::Min:
      r = std::min(a, b);
      break;
    case OpCode::Max:
      r = std::max(a, b);
      break;
    case OpCode::And:
      r = a & b;
      break;
    case OpCode::Or:
      r = a | b;
      break;
    case OpCode::Xor:
      r = a ^ b;
      break;
    case OpCode::Shl:
      if (b < 0 || b >= bits) return std::nullopt;
      r = static_cast<int64_t>(ua << b);
      break;
    case OpCode::Shr:
      if (b < 0 || b >= bits) return std::nullopt;
      r = a >> b;
      break;
    case OpCode::Neg:
      r = static_cast<int64_t>(0 - ua);
      break;
    case OpCode::Not:
      r = dt == DType::i1 ? !a : ~a;
      break;
    case OpCode::Abs:
      r = a < 0 ? static_cast<int64_t>(0 - ua) : a;
      break;
    default:
      return std::nullopt;
  }
  return wrap(r, dt);
}

/// The value an op simplifies to without computing anything new, or null.
Value* simplify(const Op& op) {
  if (op.results.size() != 1) return nullptr;
  bool is_int = op.results[0]->type.is_int();
  Value* a = op.operands.empty() ? nullptr : op.operands[0];
  Value* b = op.operands.size() > 1 ? op.operands[1] : nullptr;
  switch (op.code) {
    case OpCode::Add:
      if (is_int && is_const(b, 0)) return a;
      if (is_int && is_const(a, 0)) return b;
      return nullptr;
    case OpCode::Sub:
      return is_int && is_const(b, 0) ? a : nullptr;
    case OpCode::Mul:
      if (is_const(b, 1)) return a;
      if (is_const(a, 1)) return b;
      if (is_int && is_const(b, 0)) return b;
      if (is_int && is_const(a, 0)) return a;
      return nullptr;
    case OpCode::Div:
      return is_const(b, 1) ? a : nullptr;
    case OpCode::Select: {
      if (op.operands[1] == op.operands[2]) return op.operands[1];
      auto c = constant_of(a);
      if (c) return c->i ? op.operands[1] : op.operands[2];
      return nullptr;
    }
    case OpCode::Cast:
      return a->type == op.results[0]->type ? a : nullptr;
    case OpCode::Hint:
      return nullptr;
    default:
      return nullptr;
  }
}

bool fold_block(Block& b, Function& f) {
  bool changed = false;
  for (auto it = b.ops.begin(); it != b.ops.end(); ++it) {
    Op& op = **it;
    for (auto& r : op.regions) changed |= fold_block(*r, f);
    if (!op.is_pure() || op.results.size() != 1 || op.code == OpCode::Constant || op.code == OpCode::Splat) continue;
    Value* replacement = simplify(op);
    if (!replacement) {
      std::vector<Scalar> in;
      for (Value* v : op.operands) {
        auto c = constant_of(v);
        if (!c) break;
        in.push_back(*c);
      }
      if (in.size() != op.operands.size() || in.empty()) continue;
      auto value = evaluate(op, in);
      if (!value) continue;
      Builder builder(&b);
      builder.set_insert_point(&b, it);
      builder.set_loc(op.loc);
      const Type& t = op.results[0]->type;
      Value* c = builder.create(OpCode::Constant, {}, {t.element()}, {{"value", *value}})->result();
      replacement = t.is_tensor() ? builder.splat(c, t.shape) : c;
    }
    replace_all_uses(f.body, op.results[0].get(), replacement);
    changed = true;
  }
  return changed;
}

}  // namespace

void fold(Function& f) {
  while (fold_block(f.body, f)) dce(f);
}

}  // namespace tiledist::ir
