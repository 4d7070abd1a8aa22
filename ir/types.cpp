#include "ir/types.h"

#include "ir/layout.h"
#include "ir/support.h"

namespace tiledist::ir {

namespace {
struct DTypeInfo {
  const char* name;
  int bits;
  bool is_float;
};
constexpr DTypeInfo kDTypes[kNumDTypes] = {
    {"i1", 8, false},   {"i8", 8, false},    {"i16", 16, false}, {"i32", 32, false},
    {"i64", 64, false}, {"f16", 16, true},   {"bf16", 16, true}, {"f32", 32, true},
    {"f64", 64, true},  {"f8e4m3", 8, true}, {"f8e5m2", 8, true},
};
}  // namespace

const char* dtype_name(DType t) { return kDTypes[static_cast<int>(t)].name; }
bool is_float(DType t) { return kDTypes[static_cast<int>(t)].is_float; }
bool is_int(DType t) { return !is_float(t); }
int dtype_bits(DType t) { return kDTypes[static_cast<int>(t)].bits; }
int dtype_bytes(DType t) { return dtype_bits(t) / 8; }

std::optional<DType> parse_dtype(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == kDTypes[i].name) return static_cast<DType>(i);
  return std::nullopt;
}

const char* addrspace_name(AddrSpace s) {
  switch (s) {
    case AddrSpace::global: return "global";
    case AddrSpace::shared: return "shared";
    case AddrSpace::symmetric: return "symmetric";
  }
  return "?";
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Type::str() const {
  std::string elem = is_ptr ? str_cat("ptr<", dtype_name(dtype),
                                      space == AddrSpace::global ? "" : str_cat(", ", addrspace_name(space)), ">")
                            : std::string(dtype_name(dtype));
  if (!is_tensor()) return elem;
  std::string s = is_memdesc() ? "memdesc<" : "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + elem + (layout ? ", " + layout->str() : "") + ">";
}

bool Type::operator==(const Type& o) const {
  return dtype == o.dtype && is_ptr == o.is_ptr && space == o.space && shape == o.shape && same_layout(layout, o.layout);
}

}  // namespace tiledist::ir
