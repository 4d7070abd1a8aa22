// GPU benchmark, side by side with the baselines in one run: our bandwidth-bound kernels
// against the driver's device-to-device copy, and our GEMM against cuBLAS (libcublas, loaded
// at run time). Prints a table; skips (exit 0) where there is no GPU.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "kernels/kernels.h"

namespace {
using namespace tiledist;

/// Median of `reps` timed runs of `fn`, after `warmup` untimed ones, in milliseconds.
double time_ms(const std::function<void()>& fn, int reps = 10, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  cuda::Timer timer;
  for (int i = 0; i < reps; ++i) {
    timer.start();
    fn();
    t.push_back(timer.stop());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Cublas {
  void* lib = nullptr;
  void* handle = nullptr;
  int (*create)(void**) = nullptr;
  int (*gemm_ex)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int, const void*,
                 void*, int, int, int, int) = nullptr;
  bool load() {
    const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    if (const char* p = std::getenv("TILEDIST_CUBLAS")) lib = dlopen(p, RTLD_NOW);
    for (const char* n : names)
      if (!lib) lib = dlopen(n, RTLD_NOW);
    if (!lib) return false;
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "cublasCreate_v2"));
    gemm_ex = reinterpret_cast<decltype(gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    return create && gemm_ex && create(&handle) == 0;
  }
  /// Row-major C[M,N] (f32) = A[M,K] @ B[K,N] (bf16), as the column-major C^T = B^T A^T.
  void gemm(const void* a, const void* b, void* c, int M, int N, int K) {
    const float one = 1, zero = 0;
    constexpr int kOpN = 0, kBF16 = 14, kF32 = 0, kCompute32F = 68, kDefault = -1;
    int r = gemm_ex(handle, kOpN, kOpN, N, M, K, &one, b, kBF16, N, a, kBF16, K, &zero, c, kF32, N, kCompute32F, kDefault);
    if (r != 0) throw Error(str_cat("cublasGemmEx failed with status ", r));
  }
};

}  // namespace

int main() {
  if (!cuda::available()) {
    std::printf("gpu_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const auto& dev = cuda::device();
  std::printf("gpu_bench on %s (%s, %d SMs)\n\n", dev.name.c_str(), dev.arch().c_str(), dev.sms);
  Target target = Target::cuda();  // the arch of the device found
  try {
    // ---- bandwidth-bound kernels against the copy engine's device-to-device copy
    size_t n = size_t(64) << 20;  // 64 Mi floats = 256 MiB per buffer
    cuda::Buffer<float> x(n), y(n), out(n);
    cuda::memset(x.data(), 0, n * 4);
    cuda::memset(y.data(), 0, n * 4);
    double copy_ms = time_ms([&] { cuda::copy_device_to_device(out.data(), x.data(), n * 4); });
    double copy_gbs = 2.0 * n * 4 / copy_ms / 1e6;
    std::printf("%-40s %10s %10s %10s\n", "bandwidth-bound", "ms", "GB/s", "of copy");
    std::printf("%-40s %10.3f %10.0f %9.0f%%\n", "cuMemcpyDtoD 256 MiB (baseline)", copy_ms, copy_gbs, 100.0);
    auto add = compile(kernels::add_kernel(), {{"BLOCK", 1024}}, target);
    double add_ms = time_ms([&] { add.launch({tl::cdiv(int64_t(n), 1024)}, x, y, out, int(n)); });
    double add_gbs = 3.0 * n * 4 / add_ms / 1e6;
    std::printf("%-40s %10.3f %10.0f %9.0f%%\n", "add, 64 Mi f32", add_ms, add_gbs, 100 * add_gbs / copy_gbs);
    int rows = 65536, cols = 1024;
    auto sm = compile(kernels::softmax_kernel(), {{"BLOCK", 1024}}, target);
    double sm_ms = time_ms([&] { sm.launch({rows}, x, out, cols, cols); });
    double sm_gbs = 2.0 * rows * cols * 4 / sm_ms / 1e6;
    std::printf("%-40s %10.3f %10.0f %9.0f%%\n", "softmax, 65536 x 1024 f32", sm_ms, sm_gbs, 100 * sm_gbs / copy_gbs);
    cuda::Buffer<float> w(cols), bias(cols);
    cuda::memset(w.data(), 0, cols * 4);
    cuda::memset(bias.data(), 0, cols * 4);
    auto ln = compile(kernels::layernorm_kernel(), {{"BLOCK", 1024}}, target);
    double ln_ms = time_ms([&] { ln.launch({rows}, x, w, bias, out, cols, 1e-5f); });
    // DRAM traffic: x read once and y written once; the second and third passes over a 4 KiB row
    // hit L2, so they are not counted.
    double ln_gbs = 2.0 * rows * cols * 4 / ln_ms / 1e6;
    std::printf("%-40s %10.3f %10.0f %9.0f%%\n\n", "layernorm, 65536 x 1024 f32", ln_ms, ln_gbs, 100 * ln_gbs / copy_gbs);

    // ---- GEMM against cuBLAS
    Cublas cublas;
    bool have_cublas = cublas.load();
    std::printf("%-40s %12s %12s %10s\n", "bf16 GEMM (f32 out)", "ours TFLOP/s", "cuBLAS", "ratio");
    struct Config {
      int bm, bn, bk, warps, stages;
    };
    const Config configs[] = {{128, 128, 32, 4, 3}, {128, 128, 32, 4, 4}, {128, 256, 32, 8, 3}, {128, 128, 64, 4, 3},
                              {128, 128, 32, 8, 3}, {64, 128, 64, 4, 4}};
    for (auto [M, N, K] : {std::tuple{4096, 4096, 4096}, {8192, 8192, 8192}, {128, 8192, 8192}}) {
      cuda::Buffer<bf16> a(size_t(M) * K), b(size_t(K) * N);
      cuda::Buffer<float> c(size_t(M) * N);
      cuda::memset(a.data(), 0, size_t(M) * K * 2);
      cuda::memset(b.data(), 0, size_t(K) * N * 2);
      double flop = 2.0 * M * N * K;
      double theirs = have_cublas ? time_ms([&] { cublas.gemm(a.data(), b.data(), c.data(), M, N, K); }) : 0;
      for (Config cfg : configs) {
        if (M < cfg.bm) continue;
        CompileOptions opts;
        opts.num_warps = cfg.warps;
        opts.num_stages = cfg.stages;
        auto g = compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", cfg.bm}, {"BN", cfg.bn}, {"BK", cfg.bk}}, target, opts);
        double ours = time_ms([&] { g.launch({tl::cdiv(M, cfg.bm), tl::cdiv(N, cfg.bn)}, a, b, c, M, N, K); }, 3, 1);
        char shape[96];
        std::snprintf(shape, sizeof shape, "M=%d N=%d K=%d %dx%dx%d/%dw/%ds", M, N, K, cfg.bm, cfg.bn, cfg.bk, cfg.warps,
                      cfg.stages);
        std::printf("%-40s %12.1f %12.1f %9.3f\n", shape, flop / ours / 1e9, have_cublas ? flop / theirs / 1e9 : 0.0,
                    have_cublas ? theirs / ours : 0.0);
      }
    }
    if (!have_cublas) std::printf("(cuBLAS not found: set TILEDIST_CUBLAS to libcublas.so's path)\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
