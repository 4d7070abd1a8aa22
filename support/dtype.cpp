#include "support/dtype.h"

namespace tiledist::ir {

namespace {
struct DTypeInfo {
  const char* name;
  int bits;
  bool is_float;
};
constexpr DTypeInfo kDTypes[kNumDTypes] = {
    {"i1", 8, false},   {"i8", 8, false},    {"i16", 16, false},  {"i32", 32, false},
    {"i64", 64, false}, {"f16", 16, true},   {"bf16", 16, true},  {"f32", 32, true},
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

}  // namespace tiledist::ir
