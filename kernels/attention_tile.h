// The loop of FlashAttention's forward over blocks of keys, as Triton's fused-attention tutorial
// writes it, shared by the kernels that attend over keys of their own (kernels/attention.cpp)
// and over keys gathered from other ranks (kernels/sp_attention.cpp).
#pragma once

#include "kernels/gemm_tile.h"

namespace tiledist::kernels::detail {

/// A query block's pass over keys [lo, hi) (a multiple of block_n apart, but for a last block
/// that `masked` covers) of one sequence and key/value head: the state {m_i, l_i, acc} (running
/// row maximum, row sum, unnormalized output, f32) carried through two dots a block (q kᵀ, then
/// p v with p in the operands' dtype), the online softmax in base 2 (`qk_scale` holds log2(e)).
/// k_base and v_base point at the sequence's key 0 of the head, rows `stride_kv` apart. Masked
/// blocks keep keys below `len`, and where `causal` keys at or before the row: `rows` [BM, 1]
/// are the queries' positions in the keys' numbering. Every row must see a key in the first
/// block it visits, so that m_i is finite after it.
inline tl::Values attention_blocks(tl::Values state, const tl::Tensor& q_tile, const tl::Tensor& k_base,
                                   const tl::Tensor& v_base, const tl::Tensor& stride_kv, const tl::Tensor& rows,
                                   const tl::Tensor& len, const tl::Tensor& qk_scale, const tl::Operand& lo,
                                   const tl::Operand& hi, bool masked, bool causal, int block_n, tl::DType dtype) {
  using tl::Tensor;
  const int D = static_cast<int>(q_tile.shape()[1]);
  auto offs_n = tl::arange(0, block_n);
  auto offs_d = tl::expand_dims(tl::arange(0, D), 0);
  return tl::for_range(lo, hi, block_n, std::move(state), [&](Tensor start_n, tl::Values c) {
    Tensor m_i = c[0], l_i = c[1], acc = c[2];
    auto cols = start_n + offs_n;
    // K [block_n, D] as it lies in memory (rows of keys), transposed for the dot, as the
    // tutorial's `desc_k.load(...).T`.
    auto k_ptrs = k_base + tl::expand_dims(cols, 1) * stride_kv + offs_d;
    auto k_tile = masked ? tl::load(k_ptrs, tl::expand_dims(cols, 1) < len, 0.0f) : tl::load(k_ptrs);
    auto qk = tl::dot(q_tile, tl::trans(k_tile));  // [BM, block_n], f32
    Tensor m_ij;
    if (masked) {
      auto keep = tl::expand_dims(cols, 0) < len;
      if (causal) keep = keep & (rows >= tl::expand_dims(cols, 0));
      qk = tl::where(keep, qk * qk_scale, -INFINITY);
      m_ij = tl::maximum(m_i, tl::max(qk, 1));
      qk = qk - tl::expand_dims(m_ij, 1);
    } else {
      m_ij = tl::maximum(m_i, tl::max(qk, 1) * qk_scale);
      qk = qk * qk_scale - tl::expand_dims(m_ij, 1);
    }
    auto p = tl::exp2(qk);
    auto alpha = tl::exp2(m_i - m_ij);
    l_i = l_i * alpha + tl::sum(p, 1);
    acc = acc * tl::expand_dims(alpha, 1);
    auto v_ptrs = v_base + tl::expand_dims(cols, 1) * stride_kv + offs_d;
    auto v_tile = masked ? tl::load(v_ptrs, tl::expand_dims(cols, 1) < len, 0.0f) : tl::load(v_ptrs);
    acc = tl::dot(p.to(dtype), v_tile, acc);
    return tl::Values{m_ij, l_i, acc};
  });
}

}  // namespace tiledist::kernels::detail
