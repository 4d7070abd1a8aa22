// Tiled GEMM through tl::dot: C[M,N] = A[M,K] @ B[K,N], f32 accumulation, masked edges. The
// grid is (cdiv(M, BM), cdiv(N, BN)); programs take their tiles in groups of GROUP_M rows of
// tiles, column by column, so that the programs running at once share operand tiles in L2.
#include "kernels/kernels.h"
#include "kernels/gemm_tile.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class T>
void gemm(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
          tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M) {
  auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
  detail::gemm_tile(a, b, c, M, N, K, pid_m, pid_n, BM, BN, BK);
}

const std::vector<std::string> kParams = {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK", "GROUP_M"};
const Constants kDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}};
}  // namespace

const KernelDef& gemm_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("gemm", gemm<bf16>, kParams, kDefaults);
  static const KernelDef f16_def("gemm_f16", gemm<f16>, kParams, kDefaults);
  static const KernelDef f32_def("gemm_f32", gemm<float>, kParams, kDefaults);
  static const KernelDef e4m3_def("gemm_f8e4m3", gemm<f8e4m3>, kParams, kDefaults);
  switch (dtype) {
    case ir::DType::bf16: return bf16_def;
    case ir::DType::f16: return f16_def;
    case ir::DType::f32: return f32_def;
    case ir::DType::f8e4m3: return e4m3_def;
    default: throw Error(str_cat("tiledist: no gemm kernel for ", ir::dtype_name(dtype), " (bf16, f16, f32, f8e4m3)"));
  }
}
GemmConfig gemm_config(const Target& target, int64_t M, int64_t N, int64_t K) {
  GemmConfig g;
  g.options = CompileOptions::from_env();
  bool aligned = M % 16 == 0 && N % 16 == 0 && K % 16 == 0;  // else the launch gets the generic variant
  if (target.kind == Target::Kind::host || N < 128) {
    g.constants = kDefaults;
  } else if (!aligned) {  // element loads staged through registers: smaller warp tiles, more warps
    g.bm = 128, g.bn = 128, g.options.num_warps = 8, g.options.num_stages = 3;
    g.constants = {{"BM", 128}, {"BN", 128}, {"BK", 32}};
  } else if (M <= 256) {  // skinny: more, smaller tiles to fill the SMs
    g.bm = 64, g.bn = 128, g.options.num_warps = 4, g.options.num_stages = 4;
    g.constants = {{"BM", 64}, {"BN", 128}, {"BK", 64}};
  } else if (target.arch == "sm_90a") {  // wgmma: two warpgroups of m64n256, 4 stages of 48 KB
    g.bm = 128, g.bn = 256, g.options.num_warps = 8, g.options.num_stages = 4;
    g.constants = {{"BM", 128}, {"BN", 256}, {"BK", 64}};
  } else {
    g.bm = 256, g.bn = 128, g.options.num_warps = 8, g.options.num_stages = 3;
    g.constants = {{"BM", 256}, {"BN", 128}, {"BK", 32}};
  }
  return g;
}

TILEDIST_REGISTER(gemm_kernel(ir::DType::bf16));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f16));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f32));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f8e4m3));

}  // namespace tiledist::kernels
