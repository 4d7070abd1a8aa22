// The overlapped GEMMs (kernels::AgGemm, GemmRs, GemmAr) against our GEMM alone, and against
// NCCL's collective before or after our GEMM or cuBLAS's, one process per GPU:
//   TILEDIST_GPU_HEAP_SIZE=3G tiledist-run -n 2 overlapped_gemm_bench
// Timed in turns, one call of each per round (the GPU's drift falls on all alike), medians of
// the host's wall clock; each result checked against the baseline's first. Rank 0 prints the
// table; exits 0 without printing one where there is no GPU.
#include <cmath>
#include <cstdio>

#include "bench/cublas_lt.h"
#include "bench/fill_random.h"
#include "bench/nccl.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
using bench::Nccl, bench::time_in_turns, bench::when;
constexpr const char* NAME = "overlapped_gemm_bench";
}  // namespace

int main() {
  if (!bench::have_gpu(NAME)) return 0;
  try {
    const int n = world_size(), me = rank();
    Nccl nccl;
    const bool have_nccl = nccl.start();
    runtime::Stream stream;
    if (me == 0) std::printf("on %d x %s\n", n, cuda::device().name.c_str());
    // ---- AllGather + GEMM: ours overlapped, against our GEMM alone and NCCL's all-gather then
    // our GEMM, or then cuBLAS. C[M, N] = all_gather(A)[M, K] @ B[K, N], M rows gathered from
    // all ranks.
    bench::CublasLt cublas;
    const bool have_cublas = cublas.load();
    for (int64_t size : {int64_t(4096), int64_t(8192)}) {
      const int64_t M = size, N = size, K = size, rows = M / n;
      cuda::Buffer<bf16> a(size_t(rows) * K), b(size_t(K) * N), gathered(size_t(M) * K);
      cuda::Buffer<float> c(size_t(M) * N), c_ref(size_t(M) * N);
      bench::fill_random(a);
      bench::fill_random(b);
      kernels::AgGemm ag(Target::cuda(), M, N, K);
      kernels::GemmRs rs(Target::cuda(), M, N, K);
      kernels::GemmRs rs_pushes(Target::cuda(), M, N, K, kernels::GemmRs::Scatter::sm_pushes);
      cuda::Buffer<float> rs_out(size_t(rows) * N), rs_ref(size_t(rows) * N);
      kernels::GemmConfig cfg = kernels::gemm_config(Target::cuda(), M, N, K);
      Kernel gemm = compile(kernels::gemm_kernel(ir::DType::bf16), cfg.constants, Target::cuda(), cfg.options);
      auto ours = [&] { ag.run(a.data(), b.data(), c.data()); };
      auto gemm_alone = [&] {
        gemm.launch(cfg.grid(M, N), gathered, b, c_ref, int(M), int(N), int(K));
        cuda::synchronize();
      };
      // NCCL's all-gather of the A shards (bf16, moved as f32 words) and reduce-scatter of C.
      auto nccl_gather = [&] {
        nccl.check(nccl.all_gather(a.data(), gathered.data(), size_t(rows) * K * 2 / 4, Nccl::kFloat32, nccl.comm,
                                   stream.handle()),
                   "ncclAllGather");
        stream.synchronize();
      };
      auto nccl_scatter = [&] {
        nccl.check(nccl.reduce_scatter(c_ref.data(), rs_ref.data(), size_t(rows) * N, Nccl::kFloat32, Nccl::kSum,
                                       nccl.comm, stream.handle()),
                   "ncclReduceScatter");
        stream.synchronize();
      };
      auto nccl_then_gemm = [&] {
        nccl_gather();
        gemm_alone();
      };
      bench::CublasLt::Plan plan{};
      if (have_cublas) plan = cublas.plan(int(M), int(N), int(K));
      auto cublas_alone = [&] {
        cublas.gemm(plan, gathered.data(), b.data(), c_ref.data());
        cuda::synchronize();
      };
      auto nccl_then_cublas = [&] {
        nccl_gather();
        cublas_alone();
      };
      auto cublas_then_nccl = [&] {
        cublas_alone();
        nccl_scatter();
      };
      if (have_nccl) {  // ours against NCCL's gather and our GEMM
        ours();
        nccl_then_gemm();
        if (double err = reference::rel_error(c.download(), c_ref.download()); err > 1e-5)
          throw Error(str_cat("overlapped_gemm_bench: ag_gemm differs from all-gather + GEMM (", err, ")"));
      }
      // GEMM + ReduceScatter: the same GEMM (B now each rank's own), then our rows of the sum.
      auto rs_ours = [&] { rs.run(gathered.data(), b.data(), rs_out.data()); };
      auto rs_by_pushes = [&] { rs_pushes.run(gathered.data(), b.data(), rs_out.data()); };
      auto gemm_then_nccl = [&] {
        gemm_alone();
        nccl_scatter();
      };
      if (have_nccl) {
        rs_ours();
        gemm_then_nccl();
        double rs_err = reference::rel_error(rs_out.download(), rs_ref.download());
        if (rs_err > 1e-5)
          throw Error(str_cat("overlapped_gemm_bench: gemm_rs differs from GEMM + reduce-scatter (", rs_err, ")"));
        rs_by_pushes();
        rs_err = reference::rel_error(rs_out.download(), rs_ref.download());
        if (rs_err > 1e-5)
          throw Error(
              str_cat("overlapped_gemm_bench: gemm_rs by pushes differs from GEMM + reduce-scatter (", rs_err, ")"));
      }
      const int reps = size >= 8192 ? 15 : 30;
      // The gather by SM puts instead, with a few counts of pushing programs.
      const int put_counts[] = {8, 16, 32};
      std::vector<std::unique_ptr<kernels::AgGemm>> by_puts;
      for (int puts : put_counts) {
        by_puts.push_back(
            std::make_unique<kernels::AgGemm>(Target::cuda(), M, N, K, kernels::AgGemm::Gather::sm_puts, puts));
        if (have_nccl) {
          by_puts.back()->run(a.data(), b.data(), c.data());
          if (double e = reference::rel_error(c.download(), c_ref.download()); e > 1e-5)
            throw Error(str_cat("overlapped_gemm_bench: ag_gemm by SM puts differs from all-gather + GEMM (", e, ")"));
        }
      }
      auto puts_run = [&](int i) { return [&, i] { by_puts[i]->run(a.data(), b.data(), c.data()); }; };
      // In place: our rows already where the run wants them (both buffers it alternates
      // between hold them), so it does not copy them there first.
      kernels::AgGemm in_place(Target::cuda(), M, N, K);
      for (int i = 0; i < 2; ++i) {
        cuda::copy_device_to_device(in_place.next_input(), a.data(), a.size() * sizeof(bf16));
        in_place.run(in_place.next_input(), b.data(), c.data());
      }
      if (have_nccl)
        if (double e = reference::rel_error(c.download(), c_ref.download()); e > 1e-5)
          throw Error(str_cat("overlapped_gemm_bench: ag_gemm in place differs from all-gather + GEMM (", e, ")"));
      auto in_place_run = [&] { in_place.run(in_place.next_input(), b.data(), c.data()); };
      const bool both = have_nccl && have_cublas;
      std::vector<double> t =
          time_in_turns({ours, gemm_alone, when(have_nccl, nccl_then_gemm), rs_ours, when(have_nccl, gemm_then_nccl),
                         rs_by_pushes, when(have_cublas, cublas_alone), when(both, nccl_then_cublas),
                         when(both, cublas_then_nccl), puts_run(0), puts_run(1), puts_run(2), in_place_run},
                        reps);
      double t_ours = t[0], t_gemm = t[1], t_seq = t[2], t_rs = t[3], t_rs_seq = t[4], t_rs_pushes = t[5],
             t_cublas = t[6], t_cseq = t[7], t_rs_cseq = t[8];
      std::vector<std::pair<int, double>> t_puts = {
          {put_counts[0], t[9]}, {put_counts[1], t[10]}, {put_counts[2], t[11]}};
      if (me == 0) {
        if (size == 4096)
          std::printf(
              "\nOverlapped GEMMs, bf16 (f32 out), microseconds: ours; our GEMM alone; our GEMM and NCCL one after "
              "the other; cuBLAS alone; cuBLAS and NCCL one after the other (speedup: its time / ours)\n");
        auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
        std::printf(
            "AllGather+GEMM     M=N=K=%-6lld ours %8.1f   GEMM alone %8.1f (ours/alone %.3f)   NCCL AG, GEMM %8.1f "
            "(speedup %.3f)   cuBLAS %8.1f   NCCL AG, cuBLAS %8.1f (speedup %.3f)\n",
            static_cast<long long>(size), t_ours, t_gemm, t_ours / t_gemm, t_seq, ratio(t_seq, t_ours), t_cublas,
            t_cseq, ratio(t_cseq, t_ours));
        // A variant of ours (`label` and its padding as the table prints it) against the two sequences.
        auto variant = [&](const char* label, double ours, const char* seq, double t_s, const char* cseq, double t_c) {
          std::printf("  %s ours %8.1f   (ours/alone %.3f)   speedup over %s %.3f; over %s %.3f\n", label, ours,
                      ours / t_gemm, seq, ratio(t_s, ours), cseq, ratio(t_c, ours));
        };
        variant("in place (no copy of our rows) ", t[12], "NCCL AG, GEMM", t_seq, "NCCL AG, cuBLAS", t_cseq);
        for (auto [puts, t] : t_puts) {
          char label[40];
          std::snprintf(label, sizeof label, "by SM puts, %2d programs pushing ", puts);
          variant(label, t, "NCCL AG, GEMM", t_seq, "NCCL AG, cuBLAS", t_cseq);
        }
        std::printf(
            "GEMM+ReduceScatter M=N=K=%-6lld ours %8.1f   GEMM alone %8.1f (ours/alone %.3f)   GEMM, NCCL RS %8.1f "
            "(speedup %.3f)   cuBLAS %8.1f   cuBLAS, NCCL RS %8.1f (speedup %.3f)\n",
            static_cast<long long>(size), t_rs, t_gemm, t_rs / t_gemm, t_rs_seq, ratio(t_rs_seq, t_rs), t_cublas,
            t_rs_cseq, ratio(t_rs_cseq, t_rs));
        variant("by SM pushes                 ", t_rs_pushes, "GEMM, NCCL RS", t_rs_seq, "cuBLAS, NCCL RS", t_rs_cseq);
      }
    }
    // ---- GEMM + AllReduce (row-parallel layers: each rank holds a K-slice, all want the sum),
    // at decoding and prefill-like M: ours against our GEMM or cuBLAS followed by NCCL.
    for (int64_t M : {int64_t(128), int64_t(1024)}) {
      if (!have_nccl) break;
      const int64_t N = 8192, K = 8192;
      cuda::Buffer<bf16> a(size_t(M) * K), b(size_t(K) * N);
      cuda::Buffer<float> out(size_t(M) * N), partial(size_t(M) * N), want(size_t(M) * N);
      bench::fill_random(a);
      bench::fill_random(b);
      kernels::GemmAr ar(Target::cuda(), M, N, K);
      kernels::GemmConfig cfg = kernels::gemm_config(Target::cuda(), M, N, K);
      Kernel gemm = compile(kernels::gemm_kernel(ir::DType::bf16), cfg.constants, Target::cuda(), cfg.options);
      auto ours = [&] { ar.run(a.data(), b.data(), out.data()); };
      auto then_nccl = [&] {
        nccl.check(nccl.all_reduce(partial.data(), want.data(), size_t(M) * N, Nccl::kFloat32, Nccl::kSum, nccl.comm,
                                   stream.handle()),
                   "ncclAllReduce");
        stream.synchronize();
      };
      auto gemm_then_nccl = [&] {
        gemm.launch(cfg.grid(M, N), a, b, partial, int(M), int(N), int(K));
        cuda::synchronize();
        then_nccl();
      };
      bench::CublasLt::Plan plan{};
      if (have_cublas) plan = cublas.plan(int(M), int(N), int(K));
      auto cublas_then_nccl = [&] {
        cublas.gemm(plan, a.data(), b.data(), partial.data());
        cuda::synchronize();
        then_nccl();
      };
      ours();
      gemm_then_nccl();
      double err = reference::rel_error(out.download(), want.download());
      if (err > 1e-5) throw Error(str_cat("overlapped_gemm_bench: gemm_ar differs from GEMM + all-reduce (", err, ")"));
      const int reps = 30;
      std::vector<double> t = time_in_turns({ours, gemm_then_nccl, when(have_cublas, cublas_then_nccl)}, reps);
      double t_ours = t[0], t_seq = t[1], t_cseq = t[2];
      if (me == 0)
        std::printf(
            "GEMM+AllReduce     M=%-4lld N=K=8192 ours %8.1f   GEMM, NCCL AR %8.1f (speedup %.3f)   cuBLAS, NCCL AR "
            "%8.1f "
            "(speedup %.3f)\n",
            static_cast<long long>(M), t_ours, t_seq, t_seq / t_ours, t_cseq, t_cseq / t_ours);
    }
    if (me == 0 && !have_nccl) std::printf("(NCCL not found: set TILEDIST_NCCL to libnccl.so.2's path)\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank(), e.what());
    return 1;
  }
  return 0;
}
