// The library's collectives (kernels::Collectives) against NCCL, one process per GPU:
//   tiledist-run -n 4 collectives_bench
// Both sides are timed the same way: each call is waited for before the next (ours returns when
// its result is there; NCCL's stream is synchronized), medians of the host's wall clock over
// many calls; small all-reduces also queued back to back on a stream (the "queued" rows). Our
// all-reduce is checked against NCCL's first. Rank 0 prints the table; exits 0 without printing
// one where there is no GPU. (The overlapped GEMMs: overlapped_gemm_bench.)
#include <cmath>
#include <cstdio>
#include <cstring>

#include "bench/nccl.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
using bench::Nccl, bench::time_us, bench::queued_us;
constexpr const char* NAME = "collectives_bench";

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

}  // namespace

int main() {
  if (!bench::have_gpu(NAME)) return 0;
  try {
    const int n = world_size(), me = rank();
    Nccl nccl;
    const bool have_nccl = nccl.start();
    kernels::Collectives ours(Target::cuda(), size_t(512) << 20);
    runtime::Stream stream;
    if (me == 0)
      std::printf("collectives on %d x %s (f32), microseconds per call; busbw in GB/s\n%-28s %10s %10s %8s %10s %10s\n",
                  n, cuda::device().name.c_str(), "", "ours", "NCCL", "NCCL/ours", "ours busbw", "NCCL busbw");
    {
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
    if (me == 0 && !have_nccl) std::printf("(NCCL not found: set TILEDIST_NCCL to libnccl.so.2's path)\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank(), e.what());
    return 1;
  }
  return 0;
}
