// A tile of the MoE GEMMs (ag_moe.cpp's moe_gemm, moe_reduce.cpp's moe_reduce): one expert's
// rows of a dense A (the routing's order) times its weights.
#pragma once

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// C[row, col] (bf16) = A[row, :] @ W[expert][col, :]^T for rows [first, end) and columns
/// pid_n * BN + [0, BN): A [rows, K], W [E, N, K] seen as [w_rows = E * N, K], C [., N]. A is
/// masked by its rows, not by the tile's end: rows past it only make rows of C that are not
/// stored, and TMA can copy a tile masked so (as the grouped GEMM's A).
inline void expert_tile(tl::Ptr<bf16> a, tl::Ptr<bf16> w, tl::Ptr<bf16> c, tl::Int rows, tl::Int N, tl::Int K,
                        tl::Int w_rows, const tl::Tensor& expert, const tl::Tensor& first, const tl::Tensor& end,
                        const tl::Tensor& pid_n, int BM, int BN, int BK) {
  using tl::Tensor;
  auto row = tl::expand_dims(first + tl::arange(0, BM), 1);  // [BM, 1]
  auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
  auto w_row = tl::expand_dims(tl::maximum(expert * N + pid_n * BN, 0) + tl::arange(0, BN), 1);  // [BN, 1]
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
    auto ka = tl::expand_dims(k + tl::arange(0, BK), 0);
    auto at = tl::load(a + row * K + ka, (row < rows) & (ka < K), 0.0f);
    auto wt = tl::load(w + w_row * K + ka, (w_row < w_rows) & (ka < K), 0.0f);
    return tl::dot(at, tl::trans(wt), acc);
  });
  tl::store(c + row * N + col, acc.to(tl::bfloat16), (row < end) & (col < N));
}

}  // namespace tiledist::kernels::detail
