#include "codegen/axis_info.h"

#include <algorithm>
#include <numeric>

#include "ir/attrs.h"

namespace tiledist::codegen {

namespace {

using ir::OpCode;

int64_t pow2_factor(int64_t v) {
  if (v == 0) return AxisInfo::kMax;
  int64_t f = v & -v;
  return std::min(f < 0 ? -f : f, AxisInfo::kMax);
}
/// The length of `v` along dimension `dim` (1 for scalars).
int64_t dim_size(const ir::Value* v, int dim) {
  return v->type.is_tensor() ? v->type.shape.at(static_cast<size_t>(dim)) : 1;
}
/// One step along a contiguous run: an element's size for pointers, 1 for integers.
int64_t step_of(const ir::Value* v) { return v->type.is_ptr ? ir::dtype_bytes(v->type.dtype) : 1; }
/// What the values at multiples of `c` along the dimension are divisible by.
int64_t div_at(const AxisInfo& a, int64_t c, int64_t step) {
  return c >= a.contiguity ? a.divisibility : std::gcd(a.divisibility, c * step);
}
int64_t capped(int64_t v) { return std::min(v, AxisInfo::kMax); }
/// The largest power of two at most v.
int64_t pow2_floor(int64_t v) {
  int64_t p = 1;
  while (p <= v / 2) p *= 2;
  return v < 1 ? 1 : p;
}
/// What a hint that names `v` promises in the powers of two every rule here reasons in: the
/// largest that divides it (values that are multiples of 24 are multiples of 8, not of 16; runs
/// of 12 from multiples of 12 hold runs of 4, not of 8).
int64_t hinted(int64_t v) { return v < 1 ? 1 : pow2_factor(v); }

/// Whether `sub` (a - b, scalars) is computed in a branch that runs only where a >= b: the
/// then-branch of an if on a >= b or a > b, or the else-branch of one on a < b or a <= b.
bool guarded_ge(const ir::Op& sub) {
  for (const ir::Block* b = sub.parent; b && b->parent; b = b->parent->parent) {
    const ir::Op& around = *b->parent;
    if (around.code != OpCode::If) continue;
    const ir::Op* c = around.operands[0]->def;
    if (!c || c->code != OpCode::Cmp || c->operands != sub.operands) continue;
    // (in the else-branch, the negated compare holds)
    ir::CmpPred pred = ir::enum_attr<ir::CmpPred>(*c, "pred");
    if (around.regions[1].get() == b) pred = ir::negated(pred);
    if (pred == ir::CmpPred::ge || pred == ir::CmpPred::gt) return true;
  }
  return false;
}

}  // namespace

/// Whether every element of `v` is >= 0 (for x % m, whose sign follows x in C).
bool nonneg(const ir::Value* v, int depth, bool sizes) {
  if (depth > 16 || v->type.is_float() || v->type.is_ptr) return false;
  if (!v->def) {
    const ir::Op* loop = v->owner ? v->owner->parent : nullptr;
    if (sizes && v->owner && !loop && !v->type.is_tensor()) return true;  // (a kernel parameter)
    if (!loop || loop->code != OpCode::For || v->index != 0) return false;
    const ir::Op* step = loop->operands[2]->def;  // iv >= lo when the step is positive (a program count is)
    return nonneg(loop->operands[0], depth + 1, sizes) && step &&
           ((step->code == OpCode::Constant && std::get<int64_t>(step->attrs.at("value")) > 0) ||
            step->code == OpCode::NumPrograms);
  }
  const ir::Op& d = *v->def;
  switch (d.code) {
    case OpCode::Constant:
      return std::holds_alternative<int64_t>(d.attrs.at("value")) && std::get<int64_t>(d.attrs.at("value")) >= 0;
    case OpCode::Arange:
      return d.int_attr("start") >= 0;
    case OpCode::ProgramId:
    case OpCode::NumPrograms:
    case OpCode::Rank:
    case OpCode::NumRanks:
      return true;
    case OpCode::Splat:
    case OpCode::ExpandDims:
    case OpCode::Broadcast:
    case OpCode::Reshape:
    case OpCode::Trans:
    case OpCode::Hint:
    case OpCode::Rem:
    case OpCode::ConsumeToken:
      return nonneg(d.operands[0], depth + 1, sizes);
    case OpCode::Add:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Min:
    case OpCode::And:
      return nonneg(d.operands[0], depth + 1, sizes) && nonneg(d.operands[1], depth + 1, sizes);
    case OpCode::Max:
      return nonneg(d.operands[0], depth + 1, sizes) || nonneg(d.operands[1], depth + 1, sizes);
    case OpCode::Sub:  // a - b where a branch taken only if a >= b holds it (b >= 0: no wrap)
      return !v->type.is_tensor() && guarded_ge(d) && nonneg(d.operands[1], depth + 1, sizes);
    case OpCode::Select:
      return nonneg(d.operands[1], depth + 1, sizes) && nonneg(d.operands[2], depth + 1, sizes);
    case OpCode::Cast:
      return !d.operands[0]->type.is_float() && v->type.dtype != ir::DType::i1 &&
             nonneg(d.operands[0], depth + 1, sizes);
    default:
      return false;
  }
}

namespace {

bool defined_outside(const ir::Value* v, const ir::Block& body) {
  return v->def ? v->def->parent != &body : v->owner != &body;
}

}  // namespace

CarriedStep carried_step(const ir::Value* v) {
  if (v->def || !v->owner || v->index == 0) return {};
  const ir::Op* loop = v->owner->parent;
  if (!loop || loop->code != OpCode::For) return {};
  const ir::Block& body = *v->owner;
  const ir::Op* yield = body.terminator();
  const ir::Value* next = yield->operands.at(v->index - 1);
  const ir::Op* d = next->def;
  if (!d || d->parent != &body || (d->code != OpCode::AddPtr && d->code != OpCode::Add)) return {};
  const ir::Value* inc = d->operands[0] == v                             ? d->operands[1]
                         : d->operands[1] == v && d->code == OpCode::Add ? d->operands[0]
                                                                         : nullptr;
  if (!inc || !defined_outside(inc, body)) return {};
  return {loop->operands.at(2 + v->index), inc};
}

const AxisInfo& AxisAnalysis::of(const ir::Value* v) {
  return of(v, v->type.is_tensor() ? static_cast<int>(v->type.shape.size()) - 1 : -1);
}

const AxisInfo& AxisAnalysis::of(const ir::Value* v, int dim) {
  if (!v->type.is_tensor()) dim = -1;  // (a scalar's is the same along any)
  auto it = memo_.find({v, dim});
  if (it != memo_.end()) return it->second;
  AxisInfo info = compute(v, dim);
  return memo_[{v, dim}] = info;
}

AxisInfo AxisAnalysis::compute(const ir::Value* v, int dim) {
  const int64_t L = dim_size(v, dim);
  const AxisInfo scalar{1, 1, AxisInfo::kMax};
  const AxisInfo unknown = v->type.is_tensor() ? AxisInfo{1, 1, 1} : scalar;
  if (!v->def) {
    const ir::Op* parent = v->owner ? v->owner->parent : nullptr;
    if (parent && parent->code == OpCode::For && v->index == 0) {  // the induction variable
      return {1, std::gcd(of(parent->operands[0]).divisibility, of(parent->operands[2]).divisibility), AxisInfo::kMax};
    }
    if (CarriedStep c = carried_step(v); c.init) {  // init + j * inc, for any iteration j
      const AxisInfo& a = of(c.init, dim);
      const AxisInfo& b = of(c.inc, dim);
      int64_t run = std::min(a.contiguity, b.constancy);
      int64_t inc_div = capped(div_at(b, 1, 1) * step_of(v));  // offsets count elements
      return {run, std::gcd(div_at(a, run, step_of(v)), inc_div), std::min(a.constancy, b.constancy)};
    }
    return unknown;
  }
  const ir::Op& d = *v->def;
  if (d.results.size() != 1) return unknown;
  auto in = [&](int i) -> const AxisInfo& { return of(d.operands[i], dim); };
  switch (d.code) {
    case OpCode::Constant: {
      const ir::Attr& a = d.attrs.at("value");
      int64_t div = std::holds_alternative<int64_t>(a) ? pow2_factor(std::get<int64_t>(a)) : 1;
      return {1, div, v->type.is_tensor() ? L : AxisInfo::kMax};
    }
    case OpCode::Arange:
      return {L, pow2_factor(d.int_attr("start")), 1};
    case OpCode::Splat:
      return {1, in(0).divisibility, L};
    // The same addresses ordered after a wait, or moved to a peer's heap (heaps are aligned far
    // beyond 16 bytes, so alignment and runs of adjacent addresses carry over).
    case OpCode::ConsumeToken:
    case OpCode::SymmAt:
    case OpCode::ConvertLayout:  // (the same values, held by other threads)
      return in(0);
    case OpCode::Hint: {  // (of the last dimension)
      AxisInfo a = in(0);
      if (v->type.is_tensor() && dim + 1 != static_cast<int>(v->type.shape.size())) return a;
      if (d.has_attr("multiple_of"))
        a.divisibility = capped(std::max(a.divisibility, hinted(d.int_attr("multiple_of"))));
      if (d.has_attr("max_contiguous"))
        a.contiguity = std::min(std::max(a.contiguity, hinted(d.int_attr("max_contiguous"))), pow2_floor(L));
      return a;
    }
    case OpCode::ExpandDims:
    case OpCode::Broadcast:
    case OpCode::Reshape:
    case OpCode::Trans: {
      // Dimension `dim` of the result as a dimension of the operand (-1: none, or not known).
      const ir::Value* x = d.operands[0];
      const int rank = static_cast<int>(v->type.shape.size());
      int from = -1;
      if (d.code == OpCode::ExpandDims) {
        const int axis = static_cast<int>(d.int_attr("axis"));
        if (dim != axis) from = dim - (axis < dim ? 1 : 0);
      } else if (d.code == OpCode::Trans) {
        from = static_cast<int>(d.ints_attr("perm").at(static_cast<size_t>(dim)));
      } else if (d.code == OpCode::Broadcast) {
        if (dim_size(x, dim) == L) from = dim;
      } else if (x->type.is_tensor() && dim == rank - 1 && x->type.shape.back() == L) {
        from = static_cast<int>(x->type.shape.size()) - 1;  // (a reshape that keeps the last dimension)
      }
      if (from >= 0 && x->type.is_tensor()) return of(x, from);
      // A new dimension: each element stands alone, or is repeated by a broadcast.
      int64_t each = div_at(of(x), 1, step_of(x));
      if (d.code == OpCode::Broadcast && dim_size(x, dim) == 1) return {1, each, L};
      return {1, each, 1};
    }
    case OpCode::Add:
    case OpCode::AddPtr:
    case OpCode::Sub: {
      const AxisInfo& a = in(0);
      const AxisInfo& b = in(1);
      int64_t c = std::min(a.contiguity, b.constancy);
      if (d.code != OpCode::Sub) c = std::max(c, std::min(b.contiguity, a.constancy));
      int64_t scale = d.code == OpCode::AddPtr ? step_of(v) : 1;  // offsets count elements
      int64_t div = std::gcd(div_at(a, c, step_of(d.operands[0])), capped(div_at(b, c, 1) * scale));
      return {c, div, std::min(a.constancy, b.constancy)};
    }
    case OpCode::Mul:
      return {1, capped(div_at(in(0), 1, 1) * div_at(in(1), 1, 1)), std::min(in(0).constancy, in(1).constancy)};
    case OpCode::Rem: {  // x % m stays contiguous over runs that cannot cross a multiple of m
      if (v->type.is_float()) return {1, 1, std::min(in(0).constancy, in(1).constancy)};
      const AxisInfo& a = in(0);
      const AxisInfo& b = in(1);
      int64_t m_div = div_at(b, 1, 1);  // every divisor's
      int64_t c = b.constancy >= a.contiguity && nonneg(d.operands[0])
                      ? std::gcd(a.contiguity, std::gcd(a.divisibility, m_div))
                      : 1;
      return {c, std::gcd(div_at(a, c, 1), m_div), std::min(a.constancy, b.constancy)};
    }
    case OpCode::Select:
    case OpCode::Min:
    case OpCode::Max: {  // one of two values: a multiple of what both are multiples of
      const bool select = d.code == OpCode::Select;
      const AxisInfo& a = in(select ? 1 : 0);
      const AxisInfo& b = in(select ? 2 : 1);
      int64_t k = std::min(a.constancy, b.constancy);
      if (select) k = std::min(k, in(0).constancy);
      if (v->type.is_tensor()) k = std::min(k, L);
      return {1, v->type.is_float() ? 1 : std::gcd(div_at(a, 1, 1), div_at(b, 1, 1)), k};
    }
    case OpCode::Cast:
      if (!v->type.is_float() && !d.operands[0]->type.is_float() && v->type.dtype != ir::DType::i1) return in(0);
      return {1, 1, in(0).constancy};
    case OpCode::Cmp: {
      const AxisInfo& a = in(0);
      const AxisInfo& b = in(1);
      int64_t k = std::min(a.constancy, b.constancy);
      // x < c and x >= c, with x contiguous from a multiple of g and c a multiple of g, change
      // value only at multiples of g.
      const ir::CmpPred p = ir::enum_attr<ir::CmpPred>(d, "pred");
      auto runs = [&](const AxisInfo& x, const AxisInfo& c) {
        if (x.contiguity <= 1 || c.constancy < x.contiguity) return int64_t{1};
        return std::gcd(x.contiguity, std::gcd(x.divisibility, c.divisibility));
      };
      if (!d.operands[0]->type.is_ptr) {  // (pointer divisibility is in bytes, contiguity in elements)
        if (p == ir::CmpPred::lt || p == ir::CmpPred::ge) k = std::max(k, runs(a, b));
        if (p == ir::CmpPred::gt || p == ir::CmpPred::le) k = std::max(k, runs(b, a));
      }
      return {1, 1, k};
    }
    default: {
      // Elementwise ops only: a reduction or a dot mixes elements across the last dimension.
      if (!d.is_pure() || d.code == OpCode::Reduce || d.code == OpCode::Dot) return unknown;
      int64_t k = AxisInfo::kMax;
      for (const ir::Value* o : d.operands) k = std::min(k, of(o).constancy);
      return {1, 1, v->type.is_tensor() ? std::min(k, L) : k};
    }
  }
}

bool AxisAnalysis::vectorizable(const ir::Value* ptr, const ir::Value* mask, int64_t vec, int dim) {
  if (vec <= 1) return true;
  if (dim < 0) dim = ptr->type.is_tensor() ? static_cast<int>(ptr->type.shape.size()) - 1 : -1;
  const AxisInfo& p = of(ptr, dim);
  int64_t bytes = vec * step_of(ptr);
  if (p.contiguity % vec != 0 || div_at(p, vec, step_of(ptr)) % bytes != 0) return false;
  return !mask || of(mask, dim).constancy % vec == 0 || of(mask, dim).constancy == AxisInfo::kMax;
}

}  // namespace tiledist::codegen
