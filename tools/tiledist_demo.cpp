// The showcase that `make demo` runs: kernels written in the eDSL, compiled through LLVM and
// run on the default target (the GPU where there is one, else the CPU), each result checked
// against a reference computed another way.
#include <chrono>
#include <cstdio>

#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
namespace ref = tiledist::reference;

int failures = 0;

void report(const char* what, double err, double tol, double ms) {
  bool ok = err <= tol;
  failures += !ok;
  std::printf("  %-44s rel. error %.2e (tolerance %.0e)  %8.2f ms  %s\n", what, err, tol, ms, ok ? "OK" : "FAILED");
}

/// The second run of `f`: the first one may compile a launch-time specialization.
template <class F>
double time_ms(F&& f) {
  f();
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main() {
  Target target = Target::host();
  try {
    target = Target::default_target();
    if (!target.is_gpu())
      std::printf("%s — showcase on the CPU backend (target host: %s)\n\n", jit::compiler_version(),
                  target.arch.c_str());
    else
      std::printf("%s — showcase on %s (target %s; times include copying the host vectors to the GPU and back)\n\n",
                  jit::compiler_version(), (target.runs_on_cuda() ? cuda::device().name : hip::device().name).c_str(),
                  target.arch.c_str());
    {
      int n = 1000003;
      auto x = ref::random_floats(n), y = ref::random_floats(n);
      std::vector<float> out(n), want;
      auto k = compile(kernels::add_kernel(), {{"BLOCK", 1024}});
      double ms = time_ms([&] { k.launch({tl::cdiv(n, 1024)}, x, y, out, n); });
      ref::add(x, y, want);
      report("vector add, n = 1000003 (ragged)", ref::rel_error(out, want), 1e-7, ms);
    }
    {
      int rows = 1823, cols = 781;
      auto x = ref::random_floats(size_t(rows) * cols, -5, 5);
      std::vector<float> out(x.size()), want;
      auto k = compile(kernels::softmax_kernel(), {{"BLOCK", 1024}});
      double ms = time_ms([&] { k.launch({rows}, x, out, cols, cols); });
      ref::softmax(x, want, rows, cols);
      report("fused softmax, 1823 x 781", ref::rel_error(out, want), 1e-5, ms);
    }
    {
      int rows = 512, cols = 1000;
      auto x = ref::random_floats(size_t(rows) * cols, -3, 3), w = ref::random_floats(cols),
           b = ref::random_floats(cols);
      std::vector<float> y(x.size()), want;
      auto k = compile(kernels::layernorm_kernel(), {{"BLOCK", 256}});
      double ms = time_ms([&] { k.launch({rows}, x, w, b, y, cols, 1e-5f); });
      ref::layernorm(x, w, b, want, rows, cols, 1e-5f);
      report("layernorm, 512 x 1000", ref::rel_error(y, want), 1e-5, ms);
    }
    {
      int M = 300, N = 260, K = 200;
      auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
      std::vector<bf16> a(af.size()), b(bf.size());
      for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
      for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
      std::vector<float> c(size_t(M) * N), want;
      auto cfg = kernels::gemm_config(target, M, N, K);
      auto k = compile(kernels::gemm_kernel(ir::DType::bf16), cfg.constants, target, cfg.options);
      double ms = time_ms([&] { k.launch(cfg.grid(M, N), a, b, c, M, N, K); });
      ref::gemm(af, bf, want, M, N, K);
      double gflops = 2.0 * M * N * K / (ms * 1e6);
      char what[64];
      std::snprintf(what, sizeof what, "bf16 GEMM tl::dot, 300x260x200 (%.1f GFLOP/s)", gflops);
      report(what, ref::rel_error(c, want), 1e-5, ms);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  auto s = jit::Context::global().stats();
  std::printf("\ncache: %lld compiled, %lld from disk (%s)\n", (long long)s.compiles, (long long)s.disk_hits,
              jit::Context::global().cache_dir().c_str());
  std::printf("%s\n", failures ? "SOME RESULTS ARE WRONG" : "all results match their references");
  return failures ? 1 : 0;
}
