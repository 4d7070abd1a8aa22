// Ahead-of-time warming, measured on the build machine: warmup throughput (specializations
// compiled per second, one worker and all cores) and what a job pays at start-up to get its
// kernels with a cold cache (compile) and a warm one (read from disk), through fresh contexts.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "jit/backend.h"
#include "kernels/kernels.h"

namespace {
using namespace tiledist;
namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Job {
  const KernelDef* def;
  Target target;
  ArgFacts facts;
};

/// Every registered kernel for sm_90a, sm_80 and the host, generic and (GPU) aligned variants.
std::vector<Job> registry_jobs() {
  std::vector<Job> jobs;
  for (const std::string& name : Registry::global().names()) {
    const KernelDef* def = Registry::global().find(name);
    for (Target t : {Target::cuda("sm_90a"), Target::cuda("sm_80"), Target::host()}) {
      jobs.push_back({def, t, {}});
      if (jit::Backend::for_target(t).specializes_at_launch()) jobs.push_back({def, t, def->aligned_facts()});
    }
  }
  return jobs;
}

double warm_all(const std::string& dir, const std::vector<Job>& jobs, int threads) {
  fs::remove_all(dir);
  std::atomic<size_t> next{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      jit::Context ctx(dir);
      for (size_t i; (i = next++) < jobs.size();)
        ctx.warm(*jobs[i].def, {}, jobs[i].target, CompileOptions{}, jobs[i].facts);
    });
  for (auto& t : pool) t.join();
  return seconds_since(t0);
}

/// A job's start-up: its kernels obtained through a fresh context (compiled, or read from disk).
double startup(const std::string& dir) {
  auto t0 = std::chrono::steady_clock::now();
  jit::Context ctx(dir);
  compile(kernels::add_kernel(), {{"BLOCK", 1024}}, Target::host(), {}, ctx);
  compile(kernels::softmax_kernel(), {{"BLOCK", 1024}}, Target::host(), {}, ctx);
  compile(kernels::layernorm_kernel(), {{"BLOCK", 256}}, Target::host(), {}, ctx);
  compile(kernels::gemm_kernel(ir::DType::bf16), {}, Target::host(), {}, ctx);
  CompileOptions eight_warps;
  eight_warps.num_warps = 8;
  ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {{"BM", 256}, {"BN", 128}, {"BK", 32}}, Target::cuda("sm_90a"),
           eight_warps, ArgFacts(6, ArgFact::aligned16));
  return seconds_since(t0);
}
}  // namespace

int main() {
  std::string dir = (fs::temp_directory_path() / "tiledist-warmup-bench").string();
  auto jobs = registry_jobs();
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double one = warm_all(dir, jobs, 1);
  double all = warm_all(dir, jobs, cores);
  std::printf("%-52s %10s %14s\n", "warmup", "seconds", "specs/second");
  std::printf("%-52s %10.2f %14.1f\n",
              ("registry x {sm_90a, sm_80, host}: " + std::to_string(jobs.size()) + ", 1 worker").c_str(), one,
              jobs.size() / one);
  std::printf("%-52s %10.2f %14.1f\n\n", ("same, " + std::to_string(cores) + " workers").c_str(), all,
              jobs.size() / all);
  fs::remove_all(dir);
  double cold = startup(dir);
  double warm = startup(dir);
  std::printf("%-52s %10s\n", "job start-up: 4 host kernels + 1 sm_90a GEMM", "seconds");
  std::printf("%-52s %10.3f\n", "cold cache (compiles)", cold);
  std::printf("%-52s %10.3f\n", "warm cache (reads from disk)", warm);
  std::printf("%-52s %9.0fx\n", "ratio", cold / warm);
  fs::remove_all(dir);
  return 0;
}
