// Conversions between f32 and the narrow float formats (bf16, f16, f8e4m3, f8e5m2), rounding to
// nearest even: used by the host reference code, constant folding and the host backend.
#pragma once

#include <cstdint>

#include "ir/types.h"

namespace tiledist {

uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t b);
uint8_t float_to_f8e4m3_bits(float f);  // saturates to ±448 (OCP "fn" variant: no inf)
float f8e4m3_bits_to_float(uint8_t b);
uint8_t float_to_f8e5m2_bits(float f);
float f8e5m2_bits_to_float(uint8_t b);

/// Rounds a float to the nearest value of dtype `t` and back (the host reference's rounding).
float round_to_dtype(float f, ir::DType t);

}  // namespace tiledist
