// Element types: what the IR computes with and what the kernel ABI (tensor maps, launch
// arguments) describes. In the IR's namespace, where every layer above names them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tiledist::ir {

/// Element types. The order is the table of `dtype_name`.
enum class DType : uint8_t { i1, i8, i16, i32, i64, f16, bf16, f32, f64, f8e4m3, f8e5m2 };
inline constexpr int kNumDTypes = 11;

const char* dtype_name(DType t);
std::optional<DType> parse_dtype(const std::string& s);
bool is_int(DType t);
bool is_float(DType t);
/// The 8-bit floats (e4m3, e5m2).
inline bool is_f8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
/// Bits of one element in memory (i1 is stored as a byte).
int dtype_bits(DType t);
int dtype_bytes(DType t);

}  // namespace tiledist::ir
