// The library's collectives against NCCL (libnccl.so.2, loaded at run time; $TILEDIST_NCCL names
// it where it is not on the library path), one process per GPU:
//   tiledist-run -n 4 collectives_bench [collectives|ag_gemm]
// It also times AllGather+GEMM (kernels::AgGemm) against our GEMM alone and against NCCL's
// all-gather followed by our GEMM.
// Both sides are timed the same way: each call is waited for before the next (ours returns when
// its result is there; NCCL's stream is synchronized), medians of the host's wall clock over
// many calls; small all-reduces also queued back to back on a stream (the "queued" rows). The
// overlapped GEMMs and their baselines are timed in turns, one call of each per round. Our all-reduce is checked
// against NCCL's first. Rank 0 prints the table; exits 0 without printing one where there is no GPU.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "bench/cublas_lt.h"
#include "bench/fill_random.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;

struct Nccl {
  struct UniqueId {
    char internal[128];
  };
  using Comm = void*;
  void* lib = nullptr;
  Comm comm = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*init_rank)(Comm*, int, UniqueId, int) = nullptr;
  int (*all_reduce)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  int (*all_gather)(const void*, void*, size_t, int, Comm, void*) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  static constexpr int kFloat32 = 7, kBfloat16 = 9, kSum = 0;

  bool load() {
    if (const char* p = std::getenv("TILEDIST_NCCL")) lib = dlopen(p, RTLD_NOW);
    if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW);
    if (!lib) return false;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    return sym(get_unique_id, "ncclGetUniqueId") && sym(init_rank, "ncclCommInitRank") &&
           sym(all_reduce, "ncclAllReduce") && sym(all_gather, "ncclAllGather") &&
           sym(reduce_scatter, "ncclReduceScatter");
  }
  /// Collective: rank 0's id reaches the others through the host world's symmetric heap.
  void init() {
    auto id = symm_alloc<UniqueId>(1);
    if (rank() == 0 && get_unique_id(id.data()) != 0) throw Error("ncclGetUniqueId failed");
    barrier_all();
    UniqueId mine = *symm_at(id.data(), 0);
    if (int r = init_rank(&comm, world_size(), mine, rank()); r != 0)
      throw Error(str_cat("ncclCommInitRank failed: ", r));
    barrier_all();
    symm_free(id.data());
  }
  void check(int r, const char* what) const {
    if (r != 0) throw Error(str_cat(what, " failed: ", r));
  }
};

/// Floors of a small collective's time: a distributed kernel that does nothing (the host's
/// launch and wait), and one that signals every peer and waits for every peer's signal (plus
/// one crossing of NVLink each way).
void floor_launch(tl::Ptr<int64_t> flags) {
  tl::if_then(dist::rank() < 0, [&] { tl::store(flags, tl::scalar(0, tl::int64)); });
}
void floor_signal(tl::Ptr<int64_t> flags, tl::Int64 call, tl::Const<int> SCOPE) {
  auto me = dist::rank(), n = dist::num_ranks();
  if (SCOPE == 0) {  // shmem's signals: release and acquire at system scope
    tl::for_range(1, n, 1, [&](tl::Tensor i) { shmem::signal_op(flags + me, call, shmem::SIGNAL_SET, (me + i) % n); });
    tl::for_range(1, n, 1, [&](tl::Tensor i) { shmem::signal_wait_until(flags + (me + i) % n, shmem::Cmp::ge, call); });
    return;
  }
  // 1: release/acquire at GPU scope; 2: relaxed at system scope (latency only, no ordering)
  tl::AtomicOpts o{SCOPE == 1 ? "release" : "relaxed", SCOPE == 1 ? "gpu" : "sys"};
  tl::for_range(1, n, 1, [&](tl::Tensor i) { tl::atomic_xchg(dist::symm_at(flags + me, (me + i) % n), call, {}, o); });
  tl::for_range(1, n, 1, [&](tl::Tensor i) {
    dist::wait(flags + (me + i) % n, 1, SCOPE == 1 ? dist::Scope::gpu : dist::Scope::sys,
               SCOPE == 1 ? dist::Semantic::acquire : dist::Semantic::relaxed, call);
  });
}

/// Median microseconds of each of `fns` (null: skipped, 0), timed in turns, one call of each
/// per round, so that the GPU's drift (clocks under the power cap, temperature) falls on all
/// of them alike; every rank runs the same.
std::vector<double> time_in_turns(const std::vector<std::function<void()>>& fns, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns)
      if (fn) fn();
  barrier_all();
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < reps; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      if (!fns[f]) continue;
      auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      t[f].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v.empty() ? 0.0 : v[v.size() / 2]);
  }
  return medians;
}

/// Median microseconds of `reps` calls of `fn`, after `warmup` calls; every rank runs the same.
double time_us(const std::function<void()>& fn, int reps, int warmup = 5) {
  return time_in_turns({fn}, reps, warmup)[0];
}
/// `fn` where `ok`, else nothing to time (a baseline that is not there).
std::function<void()> when(bool ok, std::function<void()> fn) { return ok ? fn : std::function<void()>(); }

/// Microseconds per call of `reps` calls queued back to back on `stream`, waited for after the
/// last (as nccl-tests time): the median of 5 rounds; every rank runs the same.
double queued_us(const std::function<void()>& enqueue, const cuda::Stream& stream, int reps) {
  for (int i = 0; i < 10; ++i) enqueue();
  stream.synchronize();
  std::vector<double> t;
  for (int round = 0; round < 5; ++round) {
    barrier_all();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) enqueue();
    stream.synchronize();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";  // "collectives" or "ag_gemm": that part alone
  if (!cuda::available()) {
    std::printf("collectives_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const int n = world_size(), me = rank();
    Nccl nccl;
    const bool have_nccl = nccl.load();
    cuda::device();  // this rank's GPU, current: NCCL's runtime adopts it
    if (have_nccl) nccl.init();
    kernels::Collectives ours(Target::cuda(),
                              size_t(512) << 20);  // (with the overlapped ops at 8192: $TILEDIST_GPU_HEAP_SIZE=3G)
    cuda::Stream stream;
    if (me == 0)
      std::printf("collectives on %d x %s (f32), microseconds per call; busbw in GB/s\n%-28s %10s %10s %8s %10s %10s\n",
                  n, cuda::device().name.c_str(), "", "ours", "NCCL", "NCCL/ours", "ours busbw", "NCCL busbw");
    if (only != "ag_gemm") {
      static const KernelDef launch_def("floor_launch", floor_launch, {"flags"});
      static const KernelDef signal_def =
          KernelDef("floor_signal", floor_signal, {"flags", "call", "SCOPE"}).do_not_specialize({"call"});
      Kernel k_launch = compile(launch_def, {}, Target::cuda());
      auto* flags = static_cast<int64_t*>(cuda::World::get().alloc(size_t(n) * 8));
      cuda::memset(flags, 0, size_t(n) * 8);
      cuda::synchronize();
      barrier_all();
      int64_t call = 0;
      double t_launch = time_us([&] { k_launch.launch({1}, cuda::DevicePtr<int64_t>{flags, 0}); }, 200);
      if (me == 0) std::printf("%-28s %10.1f\n", "floor: launch + wait", t_launch);
      t_launch = queued_us([&] { k_launch.launch_on(stream, {1}, cuda::DevicePtr<int64_t>{flags, 0}); }, stream, 1000);
      if (me == 0) std::printf("%-28s %10.1f\n", "floor: launch, queued", t_launch);
      for (int scope : {0, 1, 2}) {
        Kernel k_signal = compile(signal_def, {{"SCOPE", scope}}, Target::cuda());
        double t = time_us([&] { k_signal.launch({1}, cuda::DevicePtr<int64_t>{flags, 0}, ++call); }, 200);
        const char* names[] = {"floor: signal, sys acq/rel", "floor: signal, gpu acq/rel",
                               "floor: signal, sys relaxed"};
        if (me == 0) std::printf("%-28s %10.1f\n", names[scope], t);
      }
      barrier_all();
      cuda::World::get().free(flags);
    }
    // Small all-reduces queued on a stream, back to back (how frameworks issue them, and how
    // nccl-tests time them): per call, the host's launch and the GPU's work overlap.
    for (size_t bytes : {size_t(8) << 10, size_t(64) << 10, size_t(256) << 10, size_t(1) << 20, size_t(4) << 20}) {
      if (only == "ag_gemm") break;
      const size_t count = bytes / 4, count_b = bytes / 2;
      cuda::Buffer<float> in(reference::random_floats(count)), out(count), theirs(count);
      cuda::Buffer<bf16> in_b(count_b), out_b(count_b), theirs_b(count_b);
      cuda::memset(in_b.data(), 0x3f, count_b * 2);
      cuda::synchronize();
      const int reps = 1000;
      double t_ours = queued_us([&] { ours.all_reduce(in.data(), out.data(), count, &stream); }, stream, reps);
      double t_ours_b = queued_us([&] { ours.all_reduce(in_b.data(), out_b.data(), count_b, &stream); }, stream, reps);
      double t_nccl = 0, t_nccl_b = 0;
      if (have_nccl) {
        t_nccl = queued_us(
            [&] {
              nccl.check(nccl.all_reduce(in.data(), theirs.data(), count, Nccl::kFloat32, Nccl::kSum, nccl.comm,
                                         stream.handle()),
                         "ncclAllReduce");
            },
            stream, reps);
        t_nccl_b = queued_us(
            [&] {
              nccl.check(nccl.all_reduce(in_b.data(), theirs_b.data(), count_b, Nccl::kBfloat16, Nccl::kSum, nccl.comm,
                                         stream.handle()),
                         "ncclAllReduce");
            },
            stream, reps);
        if (double err = reference::rel_error(out.download(), theirs.download()); err > 1e-5)
          throw Error(
              str_cat("collectives_bench: our queued all_reduce of ", bytes, " bytes differs from NCCL's (", err, ")"));
      }
      if (me == 0) {
        auto row = [&](const char* name, double us, double them) {
          char label[64];
          std::snprintf(label, sizeof label, "%s %zu KiB, queued", name, bytes >> 10);
          auto busbw = [&](double t) { return t > 0 ? bytes * 2.0 * (n - 1) / n / t / 1e3 : 0.0; };
          std::printf("%-28s %10.1f %10.1f %8.2f %10.1f %10.1f\n", label, us, them, us > 0 ? them / us : 0, busbw(us),
                      busbw(them));
        };
        row("all_reduce", t_ours, t_nccl);
        row("all_reduce bf16", t_ours_b, t_nccl_b);
      }
    }
    for (size_t bytes : {size_t(8) << 10, size_t(256) << 10, size_t(4) << 20, size_t(64) << 20, size_t(512) << 20}) {
      if (only == "ag_gemm") break;
      const size_t count = bytes / 4;
      cuda::Buffer<float> in(count * n), out(count * n), theirs(count * n);
      std::vector<float> r = reference::random_floats(count * n);
      in.upload(r);
      const size_t count_b = bytes / 2;  // the same bytes in bf16
      cuda::Buffer<bf16> in_b(count_b), out_b(count_b), theirs_b(count_b);
      {
        std::vector<bf16> h(count_b);
        for (size_t i = 0; i < count_b; ++i) h[i] = bf16(r[i % r.size()]);
        in_b.upload(h);
      }
      const int reps = bytes <= (size_t(4) << 20) ? 200 : bytes <= (size_t(64) << 20) ? 40 : 10;
      struct Op {
        const char* name;
        std::function<void()> ours, nccl;
        double bus;                               // bus bandwidth factor (NCCL's convention)
        std::function<double()> error = nullptr;  // ours against NCCL's, after one call of each
        double tolerance = 0;
      };
      // (Only the first `count` elements: the buffers hold n * count for the gathers.)
      auto f32_error = [&] {
        std::vector<float> a = out.download(), b = theirs.download();
        a.resize(count);
        b.resize(count);
        return reference::rel_error(a, b);
      };
      auto bf16_error = [&] {
        auto widen = [](const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); };
        return reference::rel_error(widen(out_b.download()), widen(theirs_b.download()));
      };
      using Algo = kernels::Collectives::AllReduce;
      std::vector<Op> ops = {
          {"all_reduce", [&] { ours.all_reduce(in.data(), out.data(), count); },
           [&] {
             nccl.check(nccl.all_reduce(in.data(), theirs.data(), count, Nccl::kFloat32, Nccl::kSum, nccl.comm,
                                        stream.handle()),
                        "ncclAllReduce");
             stream.synchronize();
           },
           2.0 * (n - 1) / n, f32_error, 1e-5},
          {"  one-shot", [&] { ours.all_reduce(in.data(), out.data(), count, Algo::one_shot); }, nullptr,
           2.0 * (n - 1) / n},
          {"  two-shot", [&] { ours.all_reduce(in.data(), out.data(), count, Algo::two_shot); }, nullptr,
           2.0 * (n - 1) / n},
          {"all_reduce bf16", [&] { ours.all_reduce(in_b.data(), out_b.data(), count_b); },
           [&] {
             nccl.check(nccl.all_reduce(in_b.data(), theirs_b.data(), count_b, Nccl::kBfloat16, Nccl::kSum, nccl.comm,
                                        stream.handle()),
                        "ncclAllReduce");
             stream.synchronize();
           },
           2.0 * (n - 1) / n, bf16_error, 1e-2},  // within bf16 rounding
          {"all_gather", [&] { ours.all_gather(in.data(), out.data(), count / n); },
           [&] {
             nccl.check(
                 nccl.all_gather(in.data(), theirs.data(), count / n, Nccl::kFloat32, nccl.comm, stream.handle()),
                 "ncclAllGather");
             stream.synchronize();
           },
           double(n - 1) / n},
          {"reduce_scatter", [&] { ours.reduce_scatter(in.data(), out.data(), count / n); },
           [&] {
             nccl.check(nccl.reduce_scatter(in.data(), theirs.data(), count / n, Nccl::kFloat32, Nccl::kSum, nccl.comm,
                                            stream.handle()),
                        "ncclReduceScatter");
             stream.synchronize();
           },
           double(n - 1) / n},
      };
      for (const Op& op : ops) {
        if (have_nccl && op.error) {
          op.ours();
          op.nccl();
          if (double err = op.error(); err > op.tolerance)
            throw Error(
                str_cat("collectives_bench: our ", op.name, " of ", bytes, " bytes differs from NCCL's (", err, ")"));
        }
        double us = time_us(op.ours, reps), them = have_nccl && op.nccl ? time_us(op.nccl, reps) : 0;
        if (me == 0) {
          char label[64];
          std::snprintf(label, sizeof label, "%s %zu KiB", op.name, bytes >> 10);
          auto busbw = [&](double t) { return t > 0 ? bytes * op.bus / t / 1e3 : 0.0; };
          std::printf("%-28s %10.1f %10.1f %8.2f %10.1f %10.1f\n", label, us, them, us > 0 ? them / us : 0, busbw(us),
                      busbw(them));
        }
      }
    }
    // ---- AllGather + GEMM: ours overlapped, against our GEMM alone and NCCL's all-gather then
    // our GEMM, or then cuBLAS. C[M, N] = all_gather(A)[M, K] @ B[K, N], M rows gathered from
    // all ranks.
    bench::CublasLt cublas;
    const bool have_cublas = only != "collectives" && cublas.load();
    for (int64_t size : {int64_t(4096), int64_t(8192)}) {
      if (only == "collectives") break;
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
          throw Error(str_cat("collectives_bench: ag_gemm differs from all-gather + GEMM (", err, ")"));
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
          throw Error(str_cat("collectives_bench: gemm_rs differs from GEMM + reduce-scatter (", rs_err, ")"));
        rs_by_pushes();
        rs_err = reference::rel_error(rs_out.download(), rs_ref.download());
        if (rs_err > 1e-5)
          throw Error(
              str_cat("collectives_bench: gemm_rs by pushes differs from GEMM + reduce-scatter (", rs_err, ")"));
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
            throw Error(str_cat("collectives_bench: ag_gemm by SM puts differs from all-gather + GEMM (", e, ")"));
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
          throw Error(str_cat("collectives_bench: ag_gemm in place differs from all-gather + GEMM (", e, ")"));
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
        std::printf(
            "  in place (no copy of our rows)  ours %8.1f   (ours/alone %.3f)   speedup over NCCL AG, GEMM %.3f; over "
            "NCCL AG, cuBLAS %.3f\n",
            t[12], t[12] / t_gemm, ratio(t_seq, t[12]), ratio(t_cseq, t[12]));
        for (auto [puts, t] : t_puts)
          std::printf(
              "  by SM puts, %2d programs pushing  ours %8.1f   (ours/alone %.3f)   speedup over NCCL AG, GEMM %.3f; "
              "over NCCL AG, cuBLAS %.3f\n",
              puts, t, t / t_gemm, ratio(t_seq, t), ratio(t_cseq, t));
        std::printf(
            "GEMM+ReduceScatter M=N=K=%-6lld ours %8.1f   GEMM alone %8.1f (ours/alone %.3f)   GEMM, NCCL RS %8.1f "
            "(speedup %.3f)   cuBLAS %8.1f   cuBLAS, NCCL RS %8.1f (speedup %.3f)\n",
            static_cast<long long>(size), t_rs, t_gemm, t_rs / t_gemm, t_rs_seq, ratio(t_rs_seq, t_rs), t_cublas,
            t_rs_cseq, ratio(t_rs_cseq, t_rs));
        std::printf(
            "  by SM pushes                  ours %8.1f   (ours/alone %.3f)   speedup over GEMM, NCCL RS %.3f; over "
            "cuBLAS, NCCL RS %.3f\n",
            t_rs_pushes, t_rs_pushes / t_gemm, ratio(t_rs_seq, t_rs_pushes), ratio(t_rs_cseq, t_rs_pushes));
      }
    }
    // ---- GEMM + AllReduce (row-parallel layers: each rank holds a K-slice, all want the sum),
    // at decoding and prefill-like M: ours against our GEMM or cuBLAS followed by NCCL.
    for (int64_t M : {int64_t(128), int64_t(1024)}) {
      if (only == "collectives" || !have_nccl) break;
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
      if (err > 1e-5) throw Error(str_cat("collectives_bench: gemm_ar differs from GEMM + all-reduce (", err, ")"));
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
