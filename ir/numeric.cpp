#include "ir/numeric.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tiledist {

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Rounds a finite float to a format with `man` mantissa bits and exponent bias `bias`,
/// returning the encoded bits (sign, exponent, mantissa); `max_bits` saturates overflow.
uint32_t encode_small(float f, int exp_bits, int man, int bias, uint32_t max_code, bool has_inf) {
  uint32_t sign = std::signbit(f) ? 1u : 0u;
  uint32_t sign_shift = exp_bits + man;
  float a = std::fabs(f);
  if (std::isnan(f))
    return (sign << sign_shift) | (has_inf ? (((1u << exp_bits) - 1) << man) | (1u << (man - 1)) : max_code | 1u);
  int min_exp = 1 - bias;  // exponent of the smallest normal
  // Quantize to the spacing of the binade that holds `a` (subnormals share the smallest one).
  int e = a == 0 ? min_exp : std::max(min_exp, static_cast<int>(std::floor(std::log2(a))));
  float quantum = std::ldexp(1.0f, e - man);
  float q = std::nearbyint(a / quantum) * quantum;  // ties to even under the default rounding mode
  if (q == 0) return sign << sign_shift;
  int qe = std::max(min_exp, static_cast<int>(std::floor(std::log2(q))));
  uint32_t code;
  if (q < std::ldexp(1.0f, min_exp)) {
    code = static_cast<uint32_t>(q / std::ldexp(1.0f, min_exp - man));  // subnormal
  } else {
    uint32_t m = static_cast<uint32_t>(std::lround((q / std::ldexp(1.0f, qe) - 1.0f) * (1 << man)));
    code = (static_cast<uint32_t>(qe + bias) << man) | m;
  }
  if (code > max_code) code = has_inf && std::isinf(a) ? ((1u << exp_bits) - 1) << man : max_code;
  if (has_inf && std::isinf(a)) code = ((1u << exp_bits) - 1) << man;
  return (sign << sign_shift) | code;
}

float decode_small(uint32_t bits, int exp_bits, int man, int bias, bool has_inf, bool nan_all_ones) {
  uint32_t sign = (bits >> (exp_bits + man)) & 1;
  uint32_t e = (bits >> man) & ((1u << exp_bits) - 1);
  uint32_t m = bits & ((1u << man) - 1);
  float v;
  if (e == (1u << exp_bits) - 1 && has_inf) {
    v = m ? NAN : INFINITY;
  } else if (nan_all_ones && e == (1u << exp_bits) - 1 && m == (1u << man) - 1) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - bias - man);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(m) / (1 << man), static_cast<int>(e) - bias);
  }
  return sign ? -v : v;
}
}  // namespace

uint16_t float_to_bf16_bits(float f) {
  uint32_t u = bits_of(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_bits_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_f16_bits(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xFC00 : 0x7C00;
  uint32_t code = encode_small(f, 5, 10, 15, 0x7BFF, true);
  // Values past the largest finite half round to infinity, as IEEE conversion does.
  if (std::fabs(f) >= 65520.0f) code = (std::signbit(f) ? 0x8000u : 0u) | 0x7C00u;
  return static_cast<uint16_t>(code);
}
float f16_bits_to_float(uint16_t b) { return decode_small(b, 5, 10, 15, true, false); }

uint8_t float_to_f8e4m3_bits(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xFE : 0x7E;  // saturate
  return static_cast<uint8_t>(encode_small(f, 4, 3, 7, 0x7E, false));
}
float f8e4m3_bits_to_float(uint8_t b) { return decode_small(b, 4, 3, 7, false, true); }

uint8_t float_to_f8e5m2_bits(float f) { return static_cast<uint8_t>(encode_small(f, 5, 2, 15, 0x7B, true)); }
float f8e5m2_bits_to_float(uint8_t b) { return decode_small(b, 5, 2, 15, true, false); }

float round_to_dtype(float f, ir::DType t) {
  switch (t) {
    case ir::DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(f));
    case ir::DType::f16:
      return f16_bits_to_float(float_to_f16_bits(f));
    case ir::DType::f8e4m3:
      return f8e4m3_bits_to_float(float_to_f8e4m3_bits(f));
    case ir::DType::f8e5m2:
      return f8e5m2_bits_to_float(float_to_f8e5m2_bits(f));
    default:
      return f;
  }
}

}  // namespace tiledist
