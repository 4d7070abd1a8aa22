/// @file
/// The parts of a transformer's decoder layer that are neither GEMMs nor attention (issue 32),
/// written as a Triton user writes them: RMSNorm (with the residual added before it), the
/// queries' and keys' per-head RMSNorm and rotary embedding (Qwen3's), which also splits a QKV
/// projection's output into the q, k and v that kernels::Attention takes, SwiGLU, and the KV
/// cache's append.
#pragma once

#include "kernels/kernels.h"

namespace tiledist::kernels {

/// RMSNorm of rows of H elements: y = v * rsqrt(mean(v^2) + eps) * w, in f32 and stored as
/// bf16, where v = x (RESIDUAL = 0) or v = bf16(x + residual) (RESIDUAL = 1: the sum, rounded
/// to bf16 as a bf16 model adds its residual, also stored into `sum`, the next layer's
/// residual). x bf16, or f32 (a GEMM's output, rounded to bf16 as it is read); residual, w
/// ([H]), y and sum bf16; sum may not be residual (the second walk reads residual again). Parameters: x, residual, w,
/// y, sum, H, eps; constants RESIDUAL, BLOCK (the columns a step). Launch over one program per row. Registered as
/// rmsnorm and rmsnorm_f32.
const KernelDef& rmsnorm_kernel(ir::DType x = ir::DType::bf16);

/// The queries and keys of a QKV projection's output made ready for attention, Qwen3's way:
/// qkv [T, (HQ + 2 HK) * D] bf16 or f32 (rounded to bf16 as it is read; each token's HQ query heads, then HK key heads,
/// then HK value heads, D each) into q [T, HQ, D], k [T, HK, D] and v [T, HK, D] bf16. Each query and key head is
/// RMSNorm'ed over its D elements (NORM = 1: weights q_norm / k_norm [D] bf16, epsilon eps; NORM = 0: not), then
/// rotated as GPT-NeoX's rotary embedding rotates (element i < D / 2 paired with i + D / 2, by the angle pos[t] *
/// theta^(-2 i / D), theta = 2^log2_theta), in f32; value heads are copied. Parameters: qkv, pos ([T] int32), q_norm,
/// k_norm, q, k, v, T, HQ, HK, eps, log2_theta; constants D (even, a power of two), NORM. Launch over {T, HQ + 2 HK}.
/// Registered as qk_norm_rope and qk_norm_rope_f32.
const KernelDef& qk_norm_rope_kernel(ir::DType qkv = ir::DType::bf16);

/// SwiGLU of a dense MLP: act[row, i] = silu(gu[row, i]) * gu[row, I + i] for rows < `rows`
/// (gu [rows, 2 I]: the gate projection's I columns, then the up projection's; f32, a GEMM's
/// output, or bf16, rounded to bf16 as read), in f32, stored as bf16 (act [rows, I]).
/// Parameters: gu, act, rows, I; constants BR, BI (the tile). Launch over {cdiv(rows, BR),
/// cdiv(I, BI)}. Registered as swiglu (f32) and swiglu_bf16.
const KernelDef& swiglu_kernel(ir::DType gu = ir::DType::f32);

/// A decoder's keys and values of T tokens stored into its KV cache: k and v [T, HK, D] bf16
/// (qk_norm_rope's) into k_cache and v_cache [batch, max_len, HK, D] bf16, token t (of sequence
/// t / S: S tokens a sequence, one after another) at its sequence's row pos[t]; the last token
/// of each sequence (t % S == S - 1) then sets lens[t / S] = pos[t] + 1 (FlashDecode's kv_lens).
/// pos must not be lens (a program's warps read the position while one of them sets the
/// length: a decode step copies the lengths into its positions first). A position outside [0,
/// max_len) stores nothing and sets no length (the caller checks its capacity: this never
/// writes past the cache). Parameters: k, v, pos, k_cache, v_cache, lens, T, S, max_len, HK;
/// constant D. Launch over {T}. Registered as kv_append.
const KernelDef& kv_append_kernel();

/// y[i] = x[i] for i < n: bf16 widened to f32 (a MoE MLP's bf16 output as the next layer's f32
/// input). Parameters: x, y, n; constant BLOCK. Launch over {cdiv(n, BLOCK)}. Registered as
/// bf16_to_f32.
const KernelDef& bf16_to_f32_kernel();

}  // namespace tiledist::kernels
