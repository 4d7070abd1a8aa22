// A tile of the MoE GEMMs (ag_moe.cpp's moe_gemm, moe_reduce.cpp's moe_reduce): one expert's
// rows of a dense A (the routing's order) times its weights, in bf16 or in f8e4m3 with
// DeepSeek-V3's block scales; and the quantization that writes such an A.
#pragma once

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// The scales' block: 128 columns of A (a row's), 128 x 128 of each expert's W.
constexpr int kScaleBlock = 128;

/// C[row, col] (bf16) = A[row, :] @ W[expert][col, :]^T for rows [first, end) and columns
/// pid_n * BN + [0, BN): A [rows, K], W [E, N, K] seen as [w_rows = E * N, K], C [., N]. A is
/// masked by its rows, not by the tile's end: rows past it only make rows of C that are not
/// stored, and TMA can copy a tile masked so (as the grouped GEMM's A). T = f8e4m3: A's scales
/// [rows, KB] (one per row and 128 columns of K, KB = cdiv(K, 128)) and W's [E, cdiv(N, 128),
/// KB]; each K block's product (BK = 128) scaled into the accumulator (grouped_gemm_fp8's
/// blockwise form). T = bf16: the scales are not read.
template <class T>
void expert_tile(tl::Ptr<T> a, tl::Ptr<float> a_scales, tl::Ptr<T> w, tl::Ptr<float> w_scales, tl::Ptr<bf16> c,
                 tl::Int rows, tl::Int N, tl::Int K, tl::Int w_rows, const tl::Tensor& expert, const tl::Tensor& first,
                 const tl::Tensor& end, const tl::Tensor& pid_n, int BM, int BN, int BK) {
  using tl::Tensor;
  constexpr bool kF8 = std::is_same_v<T, f8e4m3>;
  auto row = tl::expand_dims(first + tl::arange(0, BM), 1);  // [BM, 1]
  auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
  auto w_row = tl::expand_dims(tl::maximum(expert * N + pid_n * BN, 0) + tl::arange(0, BN), 1);  // [BN, 1]
  auto kb = (K + (kScaleBlock - 1)) / kScaleBlock;
  auto col_scales = w_scales + (expert * ((N + (kScaleBlock - 1)) / kScaleBlock) + col / kScaleBlock) * kb;
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
    auto ka = tl::expand_dims(k + tl::arange(0, BK), 0);
    auto at = tl::load(a + row * K + ka, (row < rows) & (ka < K), 0.0f);
    auto wt = tl::load(w + w_row * K + ka, (w_row < w_rows) & (ka < K), 0.0f);
    if constexpr (!kF8) {
      return tl::dot(at, tl::trans(wt), acc);
    } else {
      auto block = k / kScaleBlock;
      auto sa = tl::load(a_scales + row * kb + block, row < rows, 0.0f);  // [BM, 1]
      auto sw = tl::load(col_scales + block, col < N, 0.0f);              // [1, BN]
      return acc + tl::dot(at, tl::trans(wt)) * sa * sw;
    }
  });
  tl::store(c + row * N + col, acc.to(tl::bfloat16), (row < end) & (col < N));
}

/// x ([BR, 128] f32, a row's block of 128 columns each) quantized as DeepSeek-V3's activations
/// are (DeepEP's rule): the block's scale s = max(|x|, 1e-10) / 448 (448: e4m3's largest finite
/// value), its values x * (448 / max(|x|, 1e-10)) rounded to e4m3 (a reciprocal a block, a
/// product a value: reference::quantize_f8_blocks). Returns {q, s [BR, 1]}.
inline std::pair<tl::Tensor, tl::Tensor> quantize_rows(const tl::Tensor& x) {
  auto amax = tl::expand_dims(tl::maximum(tl::max(tl::abs(x), 1), 1e-10f), 1);
  return {(x * (448.0f / amax)).to(tl::float8e4m3), amax / 448.0f};
}

}  // namespace tiledist::kernels::detail
