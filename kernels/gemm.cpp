// Tiled GEMM through tl::dot: C[M,N] = A[M,K] @ B[K,N], f32 accumulation, masked edges. The
// grid is (cdiv(M, BM), cdiv(N, BN)); programs take their tiles in groups of GROUP_M rows of
// tiles, column by column, so that the programs running at once share operand tiles in L2.
#include "kernels/kernels.h"
#include <thread>

#include "kernels/gemm_tile.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// PERSISTENT: a 1-D grid of programs (as many as the GPU has SMs) walks the tiles, program p
/// taking tiles p, p + programs, ... in the grouped order; with warp specialization the next
/// tile's loads then run under this one's epilogue.
template <class T>
void gemm(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
          tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M, tl::Const<int> PERSISTENT) {
  if (PERSISTENT == 0) {
    auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
    return detail::gemm_tile(a, b, c, M, N, K, pid_m, pid_n, BM, BN, BK);
  }
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  detail::for_each_tile(num_m, num_n, GROUP_M, [&](const Tensor& pid_m, const Tensor& pid_n) {
    detail::gemm_tile(a, b, c, M, N, K, pid_m, pid_n, BM, BN, BK);
  });
}

const std::vector<std::string> kParams = {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK", "GROUP_M", "PERSISTENT"};
const Constants kDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"PERSISTENT", 0}};

/// B comes transposed (Bt[N, K], K contiguous), as f8 tensor cores read both operands. The
/// scaling is done on the accumulator where it is (the MMA layout), straight into the stores.
template <class T>
void gemm_fp8(tl::Ptr<T> a, tl::Ptr<T> bt, tl::Ptr<float> c, tl::Ptr<float> scale_a, tl::Ptr<float> scale_b, tl::Int M,
              tl::Int N, tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M,
              tl::Const<int> PERSISTENT) {
  auto scale = tl::load(scale_a) * tl::load(scale_b);
  auto tile = [&](const Tensor& pid_m, const Tensor& pid_n) {
    auto row = tl::expand_dims(pid_m * BM + tl::arange(0, BM), 1);  // [BM, 1]
    auto n = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 1);    // [BN, 1]: rows of Bt
    auto rk = tl::arange(0, BK);
    auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
      auto ka = tl::expand_dims(k + rk, 0);  // [1, BK]
      auto at = tl::load(a + row * K + ka, (row < M) & (ka < K), 0.0f);
      auto bt_tile = tl::load(bt + n * K + ka, (n < N) & (ka < K), 0.0f);
      return tl::dot(at, tl::trans(bt_tile), acc);
    });
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);  // [1, BN]
    tl::store(c + row * N + col, acc * scale, (row < M) & (col < N));
  };
  if (PERSISTENT == 0) {
    auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
    return tile(pid_m, pid_n);
  }
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  detail::for_each_tile(num_m, num_n, GROUP_M, tile);
}
const std::vector<std::string> kFp8Params = {"a", "bt",  "c",  "scale_a", "scale_b", "M",         "N",
                                            "K", "BM", "BN", "BK",      "GROUP_M", "PERSISTENT"};
const Constants kFp8Defaults = {{"BM", 64}, {"BN", 64}, {"BK", 64}, {"GROUP_M", 8}, {"PERSISTENT", 0}};

/// The library's GEMMs are persistent (and warp specialized on sm_90a) unless $TILEDIST_WS=0.
/// (CompileOptions::from_env() reads the same variable the other way: "1" asks every compile
/// for warp specialization.)
bool library_persistent() {
  const char* ws = std::getenv("TILEDIST_WS");
  return !(ws && std::string(ws) == "0");
}
int sm_count() { return cuda::available() ? cuda::device().sms : 132; }
}  // namespace

const KernelDef& gemm_fp8_kernel(ir::DType dtype) {
  static const KernelDef e4m3_def("gemm_fp8", gemm_fp8<f8e4m3>, kFp8Params, kFp8Defaults);
  static const KernelDef e5m2_def("gemm_fp8_e5m2", gemm_fp8<f8e5m2>, kFp8Params, kFp8Defaults);
  if (dtype == ir::DType::f8e4m3) return e4m3_def;
  if (dtype == ir::DType::f8e5m2) return e5m2_def;
  throw Error(str_cat("tiledist: no scaled f8 gemm for ", ir::dtype_name(dtype), " (f8e4m3, f8e5m2)"));
}
GemmConfig gemm_fp8_config(const Target& target, int64_t M, int64_t N, int64_t K) {
  GemmConfig g;
  g.options = CompileOptions::from_env();
  g.constants = kFp8Defaults;
  // wgmma: two warpgroups of m64n256, K of 128 bytes, 4 stages of 48 KiB (K-aligned shapes;
  // others take the generic variant's smaller tiles).
  if (target.arch == "sm_90a" && M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && M > 64) {
    g.bm = 128, g.bn = 256, g.options.num_warps = 8, g.options.num_stages = 4;
    g.constants = {{"BM", 128}, {"BN", 256}, {"BK", 128}};
    if (library_persistent()) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.options.warp_specialize = true;
      g.programs = sm_count();
    }
  }
  return g;
}

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
  const bool persistent = library_persistent();
  if (target.kind == Target::Kind::host) {  // persistent: a few programs per core
    g.constants = kDefaults;
    if (persistent) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.programs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()) * 2);
    }
  } else if (N < 128) {
    g.constants = kDefaults;
  } else if (!aligned) {  // element loads staged through registers: smaller warp tiles, more warps
    g.bm = 128, g.bn = 128, g.options.num_warps = 8, g.options.num_stages = 3;
    g.constants = {{"BM", 128}, {"BN", 128}, {"BK", 32}};
  } else if (M <= 256) {  // skinny: more, smaller tiles to fill the SMs
    // (on sm_90a, 8 stages of 24 KiB: the tiles' loads are what it waits for; 4 stages gave
    // 0.82 of cuBLAS at M=128, N=K=8192: bench/RESULTS.md)
    g.bm = 64, g.bn = 128, g.options.num_warps = 4, g.options.num_stages = target.arch == "sm_90a" ? 8 : 4;
    g.constants = {{"BM", 64}, {"BN", 128}, {"BK", 64}};
  } else if (target.arch == "sm_90a") {  // wgmma: two warpgroups of m64n256, 4 stages of 48 KB
    g.bm = 128, g.bn = 256, g.options.num_warps = 8, g.options.num_stages = 4;
    // Where the last wave of 128x256 tiles would leave much of the GPU idle (N = 1152: 4.5
    // columns of tiles, 2.4 waves), 128x128 tiles, if they fill their waves 15% better (a
    // 128x128 tile does a little less math per byte it loads).
    auto fill = [&](int64_t bn) {  // of the waves of programs that the tiles take
      const int64_t tiles = (M + 127) / 128 * ((N + bn - 1) / bn), sms = sm_count();
      return double(M) * N / (double((tiles + sms - 1) / sms) * sms * 128 * bn);
    };
    if (fill(128) > 1.15 * fill(256)) g.bn = 128;
    g.constants = {{"BM", 128}, {"BN", g.bn}, {"BK", 64}};
    // Persistent and warp specialized (TMA's producer warpgroup), unless $TILEDIST_WS=0.
    if (persistent) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.options.warp_specialize = true;
      g.programs = sm_count();
    }
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
TILEDIST_REGISTER(gemm_fp8_kernel(ir::DType::f8e4m3));
TILEDIST_REGISTER(gemm_fp8_kernel(ir::DType::f8e5m2));

}  // namespace tiledist::kernels
