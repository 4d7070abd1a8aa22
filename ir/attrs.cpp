#include "ir/attrs.h"

#include <array>

#include "ir/ir.h"

namespace tiledist::ir {

namespace {

template <class E>
struct Names;
template <>
struct Names<MemOrder> {
  static constexpr std::array<const char*, 5> table = {"relaxed", "acquire", "release", "acq_rel", "seq_cst"};
};
template <>
struct Names<MemScope> {
  static constexpr std::array<const char*, 3> table = {"cta", "gpu", "sys"};
};
template <>
struct Names<RmwKind> {
  static constexpr std::array<const char*, 7> table = {"add", "max", "min", "xchg", "and", "or", "xor"};
};
template <>
struct Names<CmpPred> {
  static constexpr std::array<const char*, 6> table = {"eq", "ne", "lt", "le", "gt", "ge"};
};
template <>
struct Names<ReduceKind> {
  static constexpr std::array<const char*, 5> table = {"sum", "max", "min", "argmax", "argmin"};
};

template <>
struct Names<ProfilePhase> {
  static constexpr std::array<const char*, 3> table = {"begin", "end", "instant"};
};

template <class E>
const char* name(E v) {
  return Names<E>::table[static_cast<size_t>(v)];
}

}  // namespace

CmpPred negated(CmpPred p) {
  switch (p) {
    case CmpPred::eq:
      return CmpPred::ne;
    case CmpPred::ne:
      return CmpPred::eq;
    case CmpPred::lt:
      return CmpPred::ge;
    case CmpPred::ge:
      return CmpPred::lt;
    case CmpPred::le:
      return CmpPred::gt;
    case CmpPred::gt:
      return CmpPred::le;
  }
  return p;
}

const char* name_of(MemOrder v) { return name(v); }
const char* name_of(MemScope v) { return name(v); }
const char* name_of(RmwKind v) { return name(v); }
const char* name_of(CmpPred v) { return name(v); }
const char* name_of(ReduceKind v) { return name(v); }
const char* name_of(ProfilePhase v) { return name(v); }

template <class E>
std::optional<E> parse_enum(std::string_view s) {
  for (size_t i = 0; i < Names<E>::table.size(); ++i)
    if (s == Names<E>::table[i]) return static_cast<E>(i);
  return std::nullopt;
}

template <class E>
E enum_attr(const Op& op, const char* key) {
  auto v = op.has_attr(key) ? parse_enum<E>(op.str_attr(key)) : std::nullopt;
  TD_ASSERT(v, "op '", op.name(), "' without a valid '", key, "' (not verified?)");
  return *v;
}

#define TD_ENUM(E)                                           \
  template std::optional<E> parse_enum<E>(std::string_view); \
  template E enum_attr<E>(const Op&, const char*);
TD_ENUM(MemOrder)
TD_ENUM(MemScope)
TD_ENUM(RmwKind)
TD_ENUM(CmpPred)
TD_ENUM(ReduceKind)
TD_ENUM(ProfilePhase)
#undef TD_ENUM

}  // namespace tiledist::ir
