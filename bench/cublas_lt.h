// cuBLAS for the benchmarks' baselines, through libcublasLt loaded at run time.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "tiledist.h"

namespace tiledist::bench {

/// cuBLAS through libcublasLt (loaded at run time; $TILEDIST_CUBLASLT names it where it is not
/// on the library path): the heuristic's first algorithm, with a 32 MiB workspace.
struct CublasLt {
  using Status = int;
  struct HeuristicResult {
    uint64_t algo[8];
    size_t workspace_size;
    Status state;
    float waves;
    int reserved[4];
  };
  void* lib = nullptr;
  void* handle = nullptr;
  void* workspace = nullptr;
  static constexpr size_t kWorkspace = size_t(32) << 20;
  Status (*create)(void**) = nullptr;
  Status (*desc_create)(void**, int, int) = nullptr;
  Status (*desc_set)(void*, int, const void*, size_t) = nullptr;
  Status (*layout_create)(void**, int, uint64_t, uint64_t, int64_t) = nullptr;
  Status (*pref_create)(void**) = nullptr;
  Status (*pref_set)(void*, int, const void*, size_t) = nullptr;
  Status (*heuristic)(void*, void*, void*, void*, void*, void*, void*, int, HeuristicResult*, int*) = nullptr;
  Status (*matmul)(void*, void*, const void*, const void*, void*, const void*, void*, const void*, const void*, void*,
                   void*, void*, const void*, void*, size_t, void*) = nullptr;

  bool load() {
    const char* names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    if (const char* p = std::getenv("TILEDIST_CUBLASLT")) lib = dlopen(p, RTLD_NOW);
    for (const char* n : names)
      if (!lib) lib = dlopen(n, RTLD_NOW);
    if (!lib) return false;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    if (!sym(create, "cublasLtCreate") || !sym(desc_create, "cublasLtMatmulDescCreate") ||
        !sym(desc_set, "cublasLtMatmulDescSetAttribute") || !sym(layout_create, "cublasLtMatrixLayoutCreate") ||
        !sym(pref_create, "cublasLtMatmulPreferenceCreate") || !sym(pref_set, "cublasLtMatmulPreferenceSetAttribute") ||
        !sym(heuristic, "cublasLtMatmulAlgoGetHeuristic") || !sym(matmul, "cublasLtMatmul"))
      return false;
    workspace = cuda::malloc(kWorkspace);
    return create(&handle) == 0;
  }

  /// A planned row-major C[M,N] (f32) = A[M,K] @ B[K,N] (bf16), as the column-major
  /// C^T = B^T A^T.
  struct Plan {
    void *desc, *a, *b, *c;
    HeuristicResult algo;
  };
  static constexpr int kCompute32F = 68, kR32F = 0, kR16BF = 14, kR8F_E4M3 = 28;
  Plan plan(int M, int N, int K) {
    Plan p{};
    if (desc_create(&p.desc, kCompute32F, kR32F) || layout_create(&p.a, kR16BF, N, K, N) ||
        layout_create(&p.b, kR16BF, K, M, K) || layout_create(&p.c, kR32F, N, M, N) || !choose_algo(p))
      throw Error(str_cat("cublasLt has no algorithm for bf16 GEMM ", M, "x", N, "x", K));
    return p;
  }
  /// A planned scaled f8 GEMM, row-major C[M,N] (f32) = A[M,K] @ Bt[N,K]^T * scale_a * scale_b
  /// (e4m3; the scales f32 in device memory, each an allocation of its own: cuBLAS refused them
  /// 4 bytes apart), as the column-major C^T = Bt^T A ("TN", the layout cuBLAS's f8 GEMMs
  /// take). `fast_accum`: partial sums kept in the tensor cores' accumulator throughout
  /// (CUBLASLT_MATMUL_DESC_FAST_ACCUM), as ours are.
  Plan plan_fp8(int M, int N, int K, const float* scale_a, const float* scale_b, bool fast_accum) {
    constexpr int kTransA = 3, kAScale = 17, kBScale = 18, kFastAccum = 25;
    const int op_t = 1;
    const int8_t fast = fast_accum;
    Plan p{};
    // In cuBLAS's terms the first operand is Bt (K x N column-major, transposed), the second A.
    if (desc_create(&p.desc, kCompute32F, kR32F) || desc_set(p.desc, kTransA, &op_t, sizeof op_t) ||
        desc_set(p.desc, kAScale, &scale_b, sizeof scale_b) || desc_set(p.desc, kBScale, &scale_a, sizeof scale_a) ||
        desc_set(p.desc, kFastAccum, &fast, sizeof fast) || layout_create(&p.a, kR8F_E4M3, K, N, K) ||
        layout_create(&p.b, kR8F_E4M3, K, M, K) || layout_create(&p.c, kR32F, N, M, N) || !choose_algo(p))
      throw Error(str_cat("cublasLt has no algorithm for the e4m3 GEMM ", M, "x", N, "x", K));
    return p;
  }
  /// The heuristic's first algorithm for a plan's descriptors, within our workspace.
  bool choose_algo(Plan& p) {
    constexpr int kPrefMaxWorkspace = 1;
    void* pref = nullptr;
    int found = 0;
    return pref_create(&pref) == 0 && pref_set(pref, kPrefMaxWorkspace, &kWorkspace, sizeof kWorkspace) == 0 &&
           heuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &p.algo, &found) == 0 && found > 0;
  }
  /// Runs a plan: C = A @ B (plan), or C = A @ Bt^T (plan_fp8, with b = Bt).
  void gemm(const Plan& p, const void* a, const void* b, void* c) {
    const float one = 1, zero = 0;
    Status r = matmul(handle, p.desc, &one, b, p.a, a, p.b, &zero, c, p.c, c, p.c, p.algo.algo, workspace, kWorkspace,
                      nullptr);
    if (r != 0) throw Error(str_cat("cublasLtMatmul failed with status ", r));
  }
};

}  // namespace tiledist::bench
