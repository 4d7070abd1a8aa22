// The library's GEMMs on the GPU against cuBLAS (libcublasLt, loaded at run time) in one run,
// checked against it on random inputs first: tile configurations, the tensor-parallel shapes,
// the skinny and f8 GEMMs (tests/kernels/gemm_test.cpp checks them). Prints a table; skips
// (exit 0) where there is no GPU. (The bandwidth-bound kernels: elementwise_bench.)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <tuple>

#include "bench/cublas_lt.h"
#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
using bench::CublasLt;
using bench::fill_random;

/// Median of `reps` timed runs of `fn`, after `warmup` untimed ones, in milliseconds.
double time_ms(const std::function<void()>& fn, int reps = 10, int warmup = 2) {
  return bench::median_ms(fn, reps, warmup);
}

/// Throughput in steady state: `fn` launched back to back (synchronizing every 10 launches) for
/// `settle` seconds untimed, then for `span` seconds timed; returns launches per second. Under
/// load an H100 runs at its power limit (700 W), and the clock it holds there depends on how much
/// energy each kernel spends per FLOP: this is what a job running GEMMs back to back gets.
double steady_rate(const std::function<void()>& fn, double settle = 0.5, double span = 1.0) {
  using clock = std::chrono::steady_clock;
  auto run_for = [&](double seconds) {
    cuda::synchronize();
    auto t0 = clock::now();
    int launches = 0;
    double t = 0;
    while (t < seconds) {
      for (int i = 0; i < 10; ++i) fn();
      cuda::synchronize();
      launches += 10;
      t = std::chrono::duration<double>(clock::now() - t0).count();
    }
    return launches / t;
  };
  if (settle > 0) run_for(settle);
  return run_for(span);
}

/// Medians of `a` and `b` launched alone, in turn, three times each, after a second of idling:
/// a GPU that has not yet reached its power limit (the clock at its maximum).
std::pair<double, double> burst_pair(const std::function<void()>& a, const std::function<void()>& b) {
  cuda::synchronize();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> ta, tb;
  runtime::Timer timer;
  for (int r = 0; r < 3; ++r) {
    for (auto [fn, t] : {std::pair{&a, &ta}, {&b, &tb}}) {
      timer.start();
      (*fn)();
      t->push_back(timer.stop());
    }
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[1], tb[1]};
}

/// A probe of where a power-limited GEMM spends its energy (`gemm_bench energy`): the library
/// GEMM's loop, but reading its operand tiles from the first 8 k-tiles over and over, so the
/// instruction stream, the cp.async pipeline and the shared-memory traffic are the real one's,
/// and every load hits L2 (no DRAM traffic). Its result is not A @ B.
void gemm_probe(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
                tl::Const<int> BN, tl::Const<int> BK) {
  using tl::Tensor;
  auto [pid_m, pid_n] = kernels::detail::grouped_tile(8);
  auto row = tl::expand_dims(pid_m * int(BM) + tl::arange(0, BM), 1);
  auto col = tl::expand_dims(pid_n * int(BN) + tl::arange(0, BN), 0);
  auto rk = tl::arange(0, BK);
  auto acc = tl::for_range(0, K, int(BK), tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
    auto kk = k % (8 * int(BK));
    auto at = tl::load(a + row * K + tl::expand_dims(kk + rk, 0));
    auto bt = tl::load(b + tl::expand_dims(kk + rk, 1) * N + col);
    return tl::dot(at, bt, acc);
  });
  tl::store(c + row * N + col, acc);
}

}  // namespace

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Each of `runs` launched back to back for `span` seconds, in turn, twice: a line per phase
/// with its wall-clock span (to line up with nvidia-smi's samples) and its throughput.
void phases(const char* mode, int width, const std::vector<std::pair<const char*, std::function<void()>>>& runs,
            double span, double flop) {
  for (int round = 0; round < 2; ++round)
    for (const auto& [name, fn] : runs) {
      double t0 = seconds_now(), rate = steady_rate(fn, 0, span), t = seconds_now();
      std::printf("%s %-*s %.3f..%.3f  %.1f TFLOP/s\n", mode, width, name, t0, t, rate * flop / 1e12);
    }
}

/// `gemm_bench gemm M N K BM BN BK WARPS STAGES [bf16|f8e4m3]`: one GEMM configuration on random
/// inputs, launched three times (for a profiler: `ncu --launch-skip 2 --launch-count 1 gemm_bench
/// gemm ...`).
/// ($TILEDIST_TRANSPOSED=1: bf16 tiles computed transposed, gemm's TRANSPOSED constant.)
/// `gemm_bench sustain M N K BM BN BK WARPS STAGES SECONDS`: bf16, ours and cuBLAS each run for
/// SECONDS at a time, twice in turn, printing the throughput of each phase and its wall-clock
/// span (to line up with `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw ... -lms 50`).
int one_gemm(const std::string& mode, char** argv, const std::string& last) {
  int v[8];
  for (int i = 0; i < 8; ++i) v[i] = std::atoi(argv[i]);
  auto [M, N, K, bm, bn, bk, warps, stages] = std::tuple{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  const std::string dtype = mode == "gemm" ? last : "bf16";
  CompileOptions opts = CompileOptions::from_env();  // ($TILEDIST_TMA=0: cp.async)
  opts.num_warps = warps;
  opts.num_stages = stages;
  cuda::Buffer<float> c(size_t(M) * N);
  const double flop = 2.0 * M * N * K;
  double ms = 0;
  if (dtype == "f8e4m3") {
    auto g =
        compile(kernels::gemm_kernel(ir::DType::f8e4m3), {{"BM", bm}, {"BN", bn}, {"BK", bk}}, Target::cuda(), opts);
    cuda::Buffer<f8e4m3> a(size_t(M) * K), b(size_t(K) * N);
    fill_random(a);
    fill_random(b);
    ms = time_ms([&] { g.launch({tl::cdiv(M, bm), tl::cdiv(N, bn)}, a, b, c, M, N, K); }, 1, 2);
  } else {
    const char* tr = std::getenv("TILEDIST_TRANSPOSED");  // 1: the tiles computed transposed (as C^T's)
    auto g = compile(kernels::gemm_kernel(ir::DType::bf16),
                     {{"BM", bm}, {"BN", bn}, {"BK", bk}, {"TRANSPOSED", tr && std::string(tr) == "1"}}, Target::cuda(),
                     opts);
    cuda::Buffer<bf16> a(size_t(M) * K), b(size_t(K) * N);
    fill_random(a);
    fill_random(b);
    auto ours = [&] { g.launch({tl::cdiv(M, bm), tl::cdiv(N, bn)}, a, b, c, M, N, K); };
    if (mode == "sustain") {
      CublasLt cublas;
      if (!cublas.load()) throw Error("gemm_bench sustain: cuBLAS not found (set TILEDIST_CUBLASLT)");
      CublasLt::Plan plan = cublas.plan(M, N, K);
      auto theirs = [&] { cublas.gemm(plan, a.data(), b.data(), c.data()); };
      phases("sustain", 6, {{"ours", ours}, {"cuBLAS", theirs}}, std::atof(last.c_str()), flop);
      return 0;
    }
    ms = time_ms(ours, 1, 2);
  }
  std::printf("gemm %s %dx%dx%d tiles %dx%dx%d/%dw/%ds: %.3f ms, %.1f TFLOP/s\n", dtype.c_str(), M, N, K, bm, bn, bk,
              warps, stages, ms, flop / ms / 1e9);
  return 0;
}

/// `gemm_bench energy M N K SECONDS`: the library GEMM (256x128x32, 8 warps, 3 stages), the
/// probe above and cuBLAS, each launched back to back for SECONDS in turn, twice; throughput
/// counted as 2*M*N*K per launch. Run beside `nvidia-smi
/// --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100` to read the energy per FLOP.
int energy(char** argv) {
  const int M = std::atoi(argv[0]), N = std::atoi(argv[1]), K = std::atoi(argv[2]);
  const double span = std::atof(argv[3]), flop = 2.0 * M * N * K;
  static const KernelDef probe_def("gemm_probe", gemm_probe, {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK"});
  CompileOptions opts;
  opts.num_warps = 8;
  opts.num_stages = 3;
  const int bm = 256, bn = 128, bk = 32;
  cuda::Buffer<bf16> a(size_t(M) * K), b(size_t(K) * N);
  cuda::Buffer<float> c(size_t(M) * N);
  fill_random(a);
  fill_random(b);
  auto real =
      compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", bm}, {"BN", bn}, {"BK", bk}}, Target::cuda(), opts);
  auto l2 = compile(probe_def, {{"BM", bm}, {"BN", bn}, {"BK", bk}}, Target::cuda(), opts);
  const Grid grid{tl::cdiv(M, bm), tl::cdiv(N, bn)};
  CublasLt cublas;
  if (!cublas.load()) throw Error("gemm_bench energy: cuBLAS not found (set TILEDIST_CUBLASLT)");
  CublasLt::Plan plan = cublas.plan(M, N, K);
  phases("energy", 13,
         {{"gemm", [&] { real.launch(grid, a, b, c, M, N, K); }},
          {"probe-l2", [&] { l2.launch(grid, a, b, c, M, N, K); }},
          {"cuBLAS", [&] { cublas.gemm(plan, a.data(), b.data(), c.data()); }}},
         span, flop);
  return 0;
}

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("gemm_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if ((argc == 10 || argc == 11) && mode == "gemm") return one_gemm(mode, argv + 2, argc == 11 ? argv[10] : "bf16");
    if (argc == 11 && mode == "sustain") return one_gemm(mode, argv + 2, argv[10]);
    if (argc == 6 && mode == "energy") return energy(argv + 2);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const auto& dev = cuda::device();
  // The arch of the device found, or $TILEDIST_TARGET's (sm_80's code on a Hopper GPU: the
  // mma.sync and cp.async forms, timed where no Ampere GPU is lent)
  const Target target = std::getenv("TILEDIST_TARGET") ? Target::default_target() : Target::cuda();
  std::printf("gemm_bench on %s (%s, %d SMs), code for %s\n\n", dev.name.c_str(), dev.arch().c_str(), dev.sms,
              target.arch.c_str());
  const bool only_fp8 = mode == "fp8";                   // `gemm_bench fp8`: the f8 GEMM rows alone
  const bool only_tp = mode == "tp";                     // `gemm_bench tp`: the library's GEMM at the TP shapes alone
  const bool only_shape = mode == "shape" && argc == 5;  // `gemm_bench shape M N K`: its rows at one shape
  const bool only_skinny = mode == "skinny";             // `gemm_bench skinny`: the skinny row alone, three times
  try {
    // ---- GEMM against cuBLAS
    CublasLt cublas;
    bool have_cublas = cublas.load();
    if (!have_cublas) {
      std::printf("(cuBLAS not found: set TILEDIST_CUBLASLT to libcublasLt.so's path; GEMM skipped)\n");
      return 0;
    }
    std::printf(
        "bf16 GEMM (f32 out), TFLOP/s: steady = each launched back to back for 1.5 s, in turn (at the\n"
        "power limit); burst = single launches after a second idle (clock at its maximum)\n");
    std::printf("%-50s %8s %8s %7s   %8s %8s %7s %9s\n", "", "steady", "cuBLAS", "ratio", "burst", "cuBLAS", "ratio",
                "rel.err");
    struct Config {
      int bm, bn, bk, warps, stages, group;
      bool tma = true;          // sm_90a's wgmma loops: tiles by TMA, else cp.async
      bool persistent = false;  // a program per SM walking the tiles
      bool ws = false;          // warp specialized: a producer warpgroup issues the TMA copies
    };
    // A shape's inputs and cuBLAS's result, which ours is checked against (shared by its rows).
    struct Problem {
      int M, N, K;
      cuda::Buffer<bf16> a, b;
      cuda::Buffer<float> c, wrk;
      CublasLt::Plan plan;
      std::vector<float> want;
      Problem(CublasLt& cublas, int m, int n, int k)
          : M(m),
            N(n),
            K(k),
            a(size_t(m) * k),
            b(size_t(k) * n),
            c(size_t(m) * n),
            wrk(size_t(m) * n),
            plan(cublas.plan(m, n, k)) {
        fill_random(a);
        fill_random(b);
        cublas.gemm(plan, a.data(), b.data(), c.data());
        want = c.download();
      }
    };
    // One row of the table: our GEMM (`constants` and `opts`, over `grid`) beside cuBLAS's.
    // `ours` runs our GEMM of p into p.c.
    auto row_of = [&](Problem& p, const std::string& label, const std::function<void()>& ours) {
      auto& [M, N, K, a, b, c, wrk, plan, want] = p;
      const double flop = 2.0 * M * N * K;
      auto theirs = [&] { cublas.gemm(plan, a.data(), b.data(), wrk.data()); };
      cuda::memset(c.data(), 0xFF, c.size() * 4);  // NaN: a result not written is caught
      ours();
      double err = reference::rel_error(c.download(), want);
      auto [burst_ours, burst_theirs] = burst_pair(ours, theirs);
      double steady_ours = steady_rate(ours) * flop / 1e12, steady_theirs = steady_rate(theirs) * flop / 1e12;
      std::printf("%-50s %8.1f %8.1f %7.3f   %8.1f %8.1f %7.3f %9.1e\n", label.c_str(), steady_ours, steady_theirs,
                  steady_ours / steady_theirs, flop / burst_ours / 1e9, flop / burst_theirs / 1e9,
                  burst_theirs / burst_ours, err);
      if (err > 1e-4)
        throw Error(str_cat("gemm_bench: our GEMM ", label, " disagrees with cuBLAS (relative error ", err, ")"));
    };
    auto row = [&](Problem& p, const std::string& label, const Constants& constants, const CompileOptions& opts,
                   const Grid& grid) {
      auto g = compile(kernels::gemm_kernel(ir::DType::bf16), constants, target, opts);
      row_of(p, label, [&] { g.launch(grid, p.a, p.b, p.c, p.M, p.N, p.K); });
    };
    // The library's GEMM object (kernels::Gemm: the last wave split over K where its tiles
    // would leave half the SMs idle), queued on the default stream as the launches above are.
    auto gemm_row = [&](Problem& p, const std::string& label, const kernels::GemmConfig& cfg) {
      kernels::Gemm g(target, p.M, p.N, p.K, ir::DType::bf16, cfg);
      const auto tr = cfg.constants.find("TRANSPOSED");
      const bool transposed = tr != cfg.constants.end() && tr->second == ConstValue(1);
      row_of(p, str_cat(label, transposed ? " T" : "", g.stream_k() ? " SK" : " (no SK)"),
             [&] { g.run(p.a.data(), p.b.data(), p.c.data(), &runtime::Stream::legacy()); });
    };
    // 256x128 tiles over four consumer warpgroups of m64n128 (sm_90a, warp specialized: 640
    // threads, no register reallocation), against the library's 128x256 over two of m64n256
    auto tall = [](kernels::GemmConfig cfg) {
      cfg.bm = 256, cfg.bn = 128, cfg.options.num_warps = 16;
      cfg.constants.insert_or_assign("BM", 256);
      cfg.constants.insert_or_assign("BN", 128);
      return cfg;
    };
    const Config configs[] = {{256, 128, 32, 8, 3, 8},
                              {128, 256, 64, 8, 4, 8},
                              {128, 256, 64, 8, 4, 8, false},
                              {128, 256, 64, 8, 4, 8, true, true, false},
                              {128, 256, 64, 8, 4, 8, true, false, true},
                              {128, 256, 64, 8, 4, 8, true, true, true},
                              {64, 128, 64, 4, 4, 8},
                              {64, 128, 64, 4, 4, 8, true, true, true}};
    for (auto [M, N, K] : {std::tuple{4096, 4096, 4096}, {8192, 8192, 8192}, {128, 8192, 8192}}) {
      if (only_fp8 || only_tp || only_skinny || only_shape) break;
      Problem problem(cublas, M, N, K);
      for (Config cfg : configs) {
        if (M < cfg.bm) continue;
        CompileOptions opts;
        opts.num_warps = cfg.warps;
        opts.num_stages = cfg.stages;
        opts.tma = cfg.tma;
        opts.warp_specialize = cfg.ws;
        const int tiles = tl::cdiv(M, cfg.bm) * tl::cdiv(N, cfg.bn);
        const Grid grid =
            cfg.persistent ? Grid(std::min(tiles, dev.sms)) : Grid(tl::cdiv(M, cfg.bm), tl::cdiv(N, cfg.bn));
        char shape[96];
        std::snprintf(shape, sizeof shape, "M=%d N=%d K=%d %dx%dx%d/%dw/%ds/g%d%s%s%s", M, N, K, cfg.bm, cfg.bn, cfg.bk,
                      cfg.warps, cfg.stages, cfg.group, cfg.tma ? "" : " cp.async", cfg.persistent ? " P" : "",
                      cfg.ws ? " WS" : "");
        row(problem, shape,
            {{"BM", cfg.bm}, {"BN", cfg.bn}, {"BK", cfg.bk}, {"GROUP_M", cfg.group}, {"PERSISTENT", cfg.persistent}},
            opts, grid);
      }
    }
    // The tensor-parallel layers of Triton-distributed's AllGather+GEMM and GEMM+ReduceScatter
    // benchmarks (m, n, k), as each of 4 ranks computes them: AllGather+GEMM multiplies the
    // gathered A by its n / 4 columns of B; GEMM+ReduceScatter its k / 4 slice of A by B's rows.
    // The library's GEMM as gemm_config picks it (what AgGemm and GemmRs run).
    if (!only_fp8 && !only_skinny && !only_shape)
      std::printf("\nTP shapes (per rank of 4), the library's configuration\n");
    // One shape's rows: the library's configuration by its kernel alone, then by kernels::Gemm (stream-K where it
    // splits the last wave); where N is short, the choices gemm_config did not take (C's 256x128 tiles computed
    // transposed at other stream-K splits, against 128x128 ones, as ag_gemm and gemm_rs take them, and 128x256).
    auto shape_rows = [&](const std::string& label, int M, int N, int K) {
      kernels::GemmConfig cfg = kernels::gemm_config(target, M, N, K);
      Problem problem(cublas, M, N, K);
      row(problem, label, cfg.constants, cfg.options, cfg.grid(M, N));
      gemm_row(problem, label, cfg);
      if (cfg.bn != 128 || !target.has(Cap::wgmma)) return;
      if (only_shape && cfg.bm == 256)
        for (int parts : {4, 6, 8}) {
          kernels::GemmConfig other = cfg;
          other.max_parts = parts;
          gemm_row(problem, str_cat(label, " max ", parts, " parts"), other);
        }
      const kernels::GemmConfig plain = kernels::gemm_config(target, M, N, K, false);
      if (plain.constants != cfg.constants) gemm_row(problem, str_cat(label, " 128x128"), plain);
      kernels::GemmConfig wide = plain;
      wide.bn = 256;
      wide.constants.insert_or_assign("BN", 256);
      gemm_row(problem, str_cat(label, " 128x256"), wide);
    };
    if (only_shape) {
      const int M = std::atoi(argv[2]), N = std::atoi(argv[3]), K = std::atoi(argv[4]);
      shape_rows(str_cat("M=", M, " N=", N, " K=", K), M, N, K);
      return 0;
    }
    for (auto [m, n, k] : {std::tuple{8192, 4096, 12288},
                           {8192, 4096, 14336},
                           {8192, 3584, 14336},
                           {8192, 4608, 36864},
                           {8192, 8192, 28672},
                           {8192, 8192, 30720}}) {
      if (only_fp8 || only_skinny) break;
      for (bool ag : {true, false}) {
        const int M = m, N = ag ? n / 4 : n, K = ag ? k : k / 4;
        char label[96];
        std::snprintf(label, sizeof label, "%s %dx%dx%d: M=%d N=%d K=%d", ag ? "AG" : "RS", m, n, k, M, N, K);
        shape_rows(label, M, N, K);
      }
    }
    if (only_tp)  // the square shapes, shared out over K
      for (int S : {4096, 8192}) {
        kernels::GemmConfig cfg = kernels::gemm_config(target, S, S, S);
        Problem problem(cublas, S, S, S);
        const std::string label = str_cat("M=N=K=", S);
        row(problem, label, cfg.constants, cfg.options, cfg.grid(S, S));
        gemm_row(problem, label, cfg);
        if (target.has(Cap::wgmma)) gemm_row(problem, str_cat(label, " 256x128/16w"), tall(cfg));
      }
    if (!only_fp8) {  // and a decode step's skinny GEMM
      const int M = 128, N = 8192, K = 8192;
      kernels::GemmConfig cfg = kernels::gemm_config(target, M, N, K);
      Problem problem(cublas, M, N, K);
      for (int i = 0; i < (only_skinny ? 3 : 1); ++i)
        row(problem, "skinny: M=128 N=8192 K=8192", cfg.constants, cfg.options, cfg.grid(M, N));
      if (only_skinny) {  // the host's time to queue a launch (ours, cuBLAS's), which a short kernel can wait on
        auto g = compile(kernels::gemm_kernel(ir::DType::bf16), cfg.constants, target, cfg.options);
        auto host_us = [](const std::function<void()>& fn) {
          fn();
          cuda::synchronize();
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 200; ++i) fn();
          double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 200;
          cuda::synchronize();
          return us;
        };
        const Grid grid = cfg.grid(M, N);
        std::printf("host time per launch: ours %.2f us, cuBLAS %.2f us\n",
                    host_us([&] { g.launch(grid, problem.a, problem.b, problem.c, M, N, K); }), host_us([&] {
                      cublas.gemm(problem.plan, problem.a.data(), problem.b.data(), problem.wrk.data());
                    }));
      }
    }
    if (only_skinny) return 0;

    // ---- scaled e4m3 GEMM ("TN": B transposed) against cuBLAS's, with and without its fast
    // accumulation (ours keeps every partial sum in the tensor cores' accumulator, as fast
    // accumulation does). Checked against cuBLAS's default (promoted) result.
    std::printf("\ne4m3 GEMM, B transposed, scaled (f32 out), TFLOP/s\n");
    std::printf("%-50s %8s %8s %7s   %8s %8s %7s %9s\n", "", "steady", "cuBLAS", "ratio", "burst", "cuBLAS", "ratio",
                "rel.err");
    for (int S : {4096, 8192}) {
      const int M = S, N = S, K = S;
      cuda::Buffer<f8e4m3> a(size_t(M) * K), bt(size_t(N) * K);
      cuda::Buffer<float> c(size_t(M) * N), wrk(size_t(M) * N), scale_a_buf(1), scale_b_buf(1);
      fill_random(a);
      fill_random(bt);
      scale_a_buf.upload({0.5f});
      scale_b_buf.upload({1.5f});
      const float* scale_a = scale_a_buf.data();
      const float* scale_b = scale_b_buf.data();
      const double flop = 2.0 * M * N * K;
      auto cfg = kernels::gemm_fp8_config(target, M, N, K);
      auto g = compile(kernels::gemm_fp8_kernel(ir::DType::f8e4m3), cfg.constants, target, cfg.options);
      auto ours = [&] {
        g.launch(cfg.grid(M, N), a, bt, c, cuda::DevicePtr<float>{const_cast<float*>(scale_a), 1},
                 cuda::DevicePtr<float>{const_cast<float*>(scale_b), 1}, M, N, K);
      };
      for (bool fast : {false, true}) {
        CublasLt::Plan plan = cublas.plan_fp8(M, N, K, scale_a, scale_b, fast);
        cublas.gemm(plan, a.data(), bt.data(), wrk.data());
        const std::vector<float> want = wrk.download();
        auto theirs = [&] { cublas.gemm(plan, a.data(), bt.data(), wrk.data()); };
        cuda::memset(c.data(), 0xFF, c.size() * 4);
        ours();
        double err = reference::rel_error(c.download(), want);
        auto [burst_ours, burst_theirs] = burst_pair(ours, theirs);
        double steady_ours = steady_rate(ours) * flop / 1e12, steady_theirs = steady_rate(theirs) * flop / 1e12;
        char shape[96];
        std::snprintf(shape, sizeof shape, "M=N=K=%d %dx%d/%dw/%ds, cuBLAS %s", S, cfg.bm, cfg.bn,
                      cfg.options.num_warps, cfg.options.num_stages, fast ? "fast accum" : "default");
        std::printf("%-50s %8.1f %8.1f %7.3f   %8.1f %8.1f %7.3f %9.1e\n", shape, steady_ours, steady_theirs,
                    steady_ours / steady_theirs, flop / burst_ours / 1e9, flop / burst_theirs / 1e9,
                    burst_theirs / burst_ours, err);
        if (err > 1e-2)
          throw Error(
              str_cat("gemm_bench: our e4m3 GEMM ", shape, " disagrees with cuBLAS (relative error ", err, ")"));
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
