/// @file
/// The parts of a transformer's decoder layer that are neither GEMMs nor attention (issue 32),
/// written as a Triton user writes them: RMSNorm (with the residual added before it), and the
/// queries' and keys' per-head RMSNorm and rotary embedding (Qwen3's), which also splits a QKV
/// projection's output into the q, k and v that kernels::Attention takes.
#pragma once

#include "kernels/kernels.h"

namespace tiledist::kernels {

/// RMSNorm of rows of H bf16 elements: y = v * rsqrt(mean(v^2) + eps) * w, in f32 and stored as
/// bf16, where v = x (RESIDUAL = 0) or v = bf16(x + residual) (RESIDUAL = 1: the sum, rounded
/// to bf16 as a bf16 model adds its residual, also stored into `sum`, the next layer's
/// residual). Parameters: x, residual, w ([H]), y, sum, H, eps; constants RESIDUAL, BLOCK (the
/// columns a step). Launch over one program per row. Registered as rmsnorm.
const KernelDef& rmsnorm_kernel();

/// The queries and keys of a QKV projection's output made ready for attention, Qwen3's way:
/// qkv [T, (HQ + 2 HK) * D] bf16 (each token's HQ query heads, then HK key heads, then HK value
/// heads, D each) into q [T, HQ, D], k [T, HK, D] and v [T, HK, D] bf16. Each query and key
/// head is RMSNorm'ed over its D elements (NORM = 1: weights q_norm / k_norm [D] bf16, epsilon
/// eps; NORM = 0: not), then rotated as GPT-NeoX's rotary embedding rotates (element i < D / 2
/// paired with i + D / 2, by the angle pos[t] * theta^(-2 i / D), theta = 2^log2_theta), in
/// f32; value heads are copied. Parameters: qkv, pos ([T] int32), q_norm, k_norm, q, k, v, T,
/// HQ, HK, eps, log2_theta; constants D (even, a power of two), NORM. Launch over {T, HQ + 2
/// HK}. Registered as qk_norm_rope.
const KernelDef& qk_norm_rope_kernel();

}  // namespace tiledist::kernels
