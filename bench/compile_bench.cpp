// Compiler and launcher costs on the CPU backend: tracing, optimizing, code generation, a
// cold JIT compile, warm cache hits (memory and disk), and launch overhead, for a small
// kernel (add) and a GEMM.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "ir/passes/passes.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
namespace fs = std::filesystem;

const KernelDef& def_for(int which) {
  return which == 0 ? kernels::add_kernel() : kernels::gemm_kernel(ir::DType::bf16);
}
const char* label(int which) { return which == 0 ? "add" : "gemm_bf16_64x64x32"; }

fs::path fresh_dir() {
  static int n = 0;
  fs::path p = fs::temp_directory_path() / ("tiledist-bench-" + std::to_string(getpid()) + "-" + std::to_string(n++));
  fs::remove_all(p);
  return p;
}

void BM_Trace(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(def.trace({}));
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_Trace)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_Optimize(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    auto f = def.trace({});
    state.ResumeTiming();
    ir::optimize(*f);
  }
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_Optimize)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Trace + optimize + lowering to LLVM IR + LLVM -O3 + host assembly (no JIT load).
void BM_Codegen(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  jit::Context ctx(fresh_dir().string());
  for (auto _ : state) benchmark::DoNotOptimize(ctx.emit(def, {}, Target::host(), CompileOptions{}, jit::Stage::asm_));
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_Codegen)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The library GEMM for sm_90a as kernels::Gemm compiles it at 8192^3 (gemm_config's tiles: TMA,
// wgmma, persistent and warp specialized): trace, optimize, lowering, LLVM -O3, PTX. What a GPU
// job's first launch pays before the driver's own PTX compile.
void BM_CodegenSm90a(benchmark::State& state) {
  const Target target = Target::cuda("sm_90a");
  const kernels::GemmConfig config = kernels::gemm_config(target, 8192, 8192, 8192);
  jit::Context ctx(fresh_dir().string());
  for (auto _ : state)
    benchmark::DoNotOptimize(ctx.emit(kernels::gemm_kernel(ir::DType::bf16), config.constants, target, config.options,
                                      jit::Stage::binary, ArgFacts(6, ArgFact::aligned16)));
  state.SetLabel("gemm_bf16 sm_90a, gemm_config(8192^3)");
}
BENCHMARK(BM_CodegenSm90a)->Unit(benchmark::kMillisecond);

// Everything a first launch pays: trace, optimize, codegen to an object, write the cache
// entry, link it into the JIT.
void BM_ColdCompile(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    fs::path dir = fresh_dir();
    auto ctx = std::make_unique<jit::Context>(dir.string());
    state.ResumeTiming();
    benchmark::DoNotOptimize(compile(def, {}, Target::host(), CompileOptions{}, *ctx));
    state.PauseTiming();
    ctx.reset();
    fs::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_ColdCompile)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// A new process's first compile with a warm disk cache: trace, optimize, hash, read, link.
void BM_DiskCacheHit(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  fs::path dir = fresh_dir();
  {
    jit::Context warm(dir.string());
    compile(def, {}, Target::host(), CompileOptions{}, warm);
  }
  for (auto _ : state) {
    state.PauseTiming();
    auto ctx = std::make_unique<jit::Context>(dir.string());
    state.ResumeTiming();
    benchmark::DoNotOptimize(compile(def, {}, Target::host(), CompileOptions{}, *ctx));
    state.PauseTiming();
    ctx.reset();
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_DiskCacheHit)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// compile() of a specialization this context already holds.
void BM_MemoryCacheHit(benchmark::State& state) {
  const KernelDef& def = def_for(state.range(0));
  jit::Context ctx(fresh_dir().string());
  compile(def, {}, Target::host(), CompileOptions{}, ctx);
  for (auto _ : state) benchmark::DoNotOptimize(compile(def, {}, Target::host(), CompileOptions{}, ctx));
  state.SetLabel(label(state.range(0)));
}
BENCHMARK(BM_MemoryCacheHit)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Launch of one program of `add` on 16 elements: argument checks, marshalling, the call.
void BM_LaunchOverhead(benchmark::State& state) {
  jit::Context ctx(fresh_dir().string());
  auto k = compile(kernels::add_kernel(), {{"BLOCK", 16}}, Target::host(), CompileOptions{}, ctx);
  std::vector<float> x(16, 1), y(16, 2), out(16);
  for (auto _ : state) k.launch({1}, x, y, out, 16);
}
BENCHMARK(BM_LaunchOverhead)->Unit(benchmark::kMicrosecond);

// Throughput of the generated code: add over 4M elements, bf16 GEMM 256^3.
void BM_RunAdd(benchmark::State& state) {
  jit::Context ctx(fresh_dir().string());
  int n = 1 << 22;
  auto k = compile(kernels::add_kernel(), {{"BLOCK", 1024}}, Target::host(), CompileOptions{}, ctx);
  auto x = reference::random_floats(n), y = reference::random_floats(n);
  std::vector<float> out(n);
  for (auto _ : state) k.launch({n / 1024}, x, y, out, n);
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 12);
}
BENCHMARK(BM_RunAdd)->Unit(benchmark::kMillisecond);

void BM_RunGemm(benchmark::State& state) {
  jit::Context ctx(fresh_dir().string());
  int M = 256, N = 256, K = 256;
  auto k = compile(kernels::gemm_kernel(ir::DType::bf16), {}, Target::host(), CompileOptions{}, ctx);
  auto af = reference::random_floats(size_t(M) * K), bf = reference::random_floats(size_t(K) * N);
  std::vector<bf16> a(af.begin(), af.end()), b(bf.begin(), bf.end());
  std::vector<float> c(size_t(M) * N);
  for (auto _ : state) k.launch({M / 64, N / 64}, a, b, c, M, N, K);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RunGemm)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
