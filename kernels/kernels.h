// The kernel library's definitions, for programs, tools and tests.
#pragma once

#include "tiledist.h"

namespace tiledist::kernels {

/// out[i] = x[i] + y[i] for i < n. Constants: BLOCK.
const KernelDef& add_kernel();
/// Row-wise softmax of an n_rows x n_cols matrix (row stride `stride`). Constants: BLOCK >= n_cols.
const KernelDef& softmax_kernel();
/// Row-wise layer normalization y = (x - mean) * rstd * w + b. Constants: BLOCK.
const KernelDef& layernorm_kernel();
/// C[M,N] (f32) = A[M,K] @ B[K,N], row-major, A and B in `dtype`. Constants: BM, BN, BK,
/// GROUP_M. Launch over {cdiv(M, BM), cdiv(N, BN)}.
const KernelDef& gemm_kernel(ir::DType dtype);

/// Tile sizes and options for a GEMM of this shape on `target` (what bench/RESULTS.md found best
/// on H100 for the GPU; the definition's defaults on the host).
struct GemmConfig {
  Constants constants;
  CompileOptions options;
  int bm = 64, bn = 64;
  Grid grid(int64_t M, int64_t N) const { return {static_cast<int>((M + bm - 1) / bm), static_cast<int>((N + bn - 1) / bn)}; }
};
GemmConfig gemm_config(const Target& target, int64_t M, int64_t N, int64_t K);

}  // namespace tiledist::kernels
