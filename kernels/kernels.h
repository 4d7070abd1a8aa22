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
/// C[M,N] (f32) = A[M,K] @ B[K,N], row-major, A and B in `dtype`. Constants: BM, BN, BK.
const KernelDef& gemm_kernel(ir::DType dtype);

}  // namespace tiledist::kernels
