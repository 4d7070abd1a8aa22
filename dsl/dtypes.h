/// @file
/// Host-side storage types for the IR's narrow floats, so that host code can fill and read
/// buffers that kernels see as bf16/f16/f8. Conversions round to nearest even.
/// The types, in namespace tiledist: bf16, f16, f8e4m3 (OCP's "fn" variant: no infinities,
/// saturating at ±448) and f8e5m2, each as TILEDIST_NARROW_FLOAT defines it.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ir/numeric.h"

namespace tiledist {

/// Defines the host storage type `Name` of a narrow float: its raw `bits` (of type `Bits`,
/// zero by default), made from a float (rounded by `to_bits`) or from raw bits (`from_raw`),
/// and converting implicitly to float (exactly, by `from_bits`).
#define TILEDIST_NARROW_FLOAT(Name, Bits, to_bits, from_bits) \
  struct Name {                                               \
    Bits bits = 0;                                            \
    Name() = default;                                         \
    explicit Name(float f) : bits(to_bits(f)) {}              \
    operator float() const { return from_bits(bits); }        \
    static Name from_raw(Bits b) {                            \
      Name n;                                                 \
      n.bits = b;                                             \
      return n;                                               \
    }                                                         \
  };
TILEDIST_NARROW_FLOAT(bf16, uint16_t, float_to_bf16_bits, bf16_bits_to_float)
TILEDIST_NARROW_FLOAT(f16, uint16_t, float_to_f16_bits, f16_bits_to_float)
TILEDIST_NARROW_FLOAT(f8e4m3, uint8_t, float_to_f8e4m3_bits, f8e4m3_bits_to_float)
TILEDIST_NARROW_FLOAT(f8e5m2, uint8_t, float_to_f8e5m2_bits, f8e5m2_bits_to_float)
#undef TILEDIST_NARROW_FLOAT

/// The IR dtype of a host element type: bool is i1, the 8- to 64-bit integers (signed or not)
/// are i8 to i64, float f32, double f64, and bf16, f16, f8e4m3 and f8e5m2 are themselves; any
/// other type fails to compile.
template <class T>
constexpr ir::DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, bool>)
    return ir::DType::i1;
  else if constexpr (std::is_same_v<U, int8_t> || std::is_same_v<U, uint8_t>)
    return ir::DType::i8;
  else if constexpr (std::is_same_v<U, int16_t> || std::is_same_v<U, uint16_t>)
    return ir::DType::i16;
  else if constexpr (std::is_same_v<U, int32_t> || std::is_same_v<U, uint32_t>)
    return ir::DType::i32;
  else if constexpr (std::is_same_v<U, int64_t> || std::is_same_v<U, uint64_t>)
    return ir::DType::i64;
  else if constexpr (std::is_same_v<U, float>)
    return ir::DType::f32;
  else if constexpr (std::is_same_v<U, double>)
    return ir::DType::f64;
  else if constexpr (std::is_same_v<U, bf16>)
    return ir::DType::bf16;
  else if constexpr (std::is_same_v<U, f16>)
    return ir::DType::f16;
  else if constexpr (std::is_same_v<U, f8e4m3>)
    return ir::DType::f8e4m3;
  else if constexpr (std::is_same_v<U, f8e5m2>)
    return ir::DType::f8e5m2;
  else
    static_assert(sizeof(T) == 0, "no tiledist dtype for this element type");
}

}  // namespace tiledist
