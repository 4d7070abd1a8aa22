// The intra-kernel profiler's cost (dsl/profile.h): the library's GEMM at one shape (8192^3 by
// default, `profile_bench M N K`), by CUDA events around each run, without profiling and with it
// (TILEDIST_PROFILE: every program marks the kernel, its main loop and its epilogue; the time is
// the launch's, by the events its launcher records around the kernel, in the trace). Prints both
// medians and their ratio, and checks that the profiled runs compute the same C. Skips (exit 0)
// where there is no GPU.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/timing.h"
#include "jit/trace.h"
#include "kernels/kernels.h"
#include "runtime/profiler.h"

int main(int argc, char** argv) {
  using namespace tiledist;
  if (!cuda::available()) {
    std::printf("profile_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const int M = argc > 3 ? std::atoi(argv[1]) : 8192, N = argc > 3 ? std::atoi(argv[2]) : 8192,
              K = argc > 3 ? std::atoi(argv[3]) : 8192;
    const int reps = 20, warmup = 3;
    const Target target = Target::default_target();
    std::printf("profile_bench on %s: the library's GEMM, bf16, M=%d N=%d K=%d, %d runs\n", cuda::device().name.c_str(),
                M, N, K, reps);
    std::vector<bf16> a(size_t(M) * K), b(size_t(K) * N);
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16(float(int(i * 7919 % 17) - 8) / 8.0f);
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf16(float(int(i * 104729 % 13) - 6) / 8.0f);
    cuda::Buffer<bf16> da(a), db(b);
    cuda::Buffer<float> c_off(size_t(M) * N), c_on(size_t(M) * N);

    kernels::Gemm plain(target, M, N, K);
    const double off_ms = bench::median_ms([&] { plain.run(da.data(), db.data(), c_off.data()); }, reps, warmup);

    const std::string dir =
        std::filesystem::temp_directory_path().string() + "/tiledist-profile-bench-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    setenv("TILEDIST_PROFILE", dir.c_str(), 1);  // (read by the Gemm's compile options)
    kernels::Gemm profiled(target, M, N, K);
    unsetenv("TILEDIST_PROFILE");
    for (int i = 0; i < reps + warmup; ++i) profiled.run(da.data(), db.data(), c_on.data());
    const trace::Trace t = trace::read(runtime::trace_path(dir, runtime::profile_rank()));
    std::vector<double> on;
    int64_t dropped = 0, error_ns = 0;
    for (size_t i = 0; i < t.launches.size(); ++i) {
      // (the first launch sizes the buffer: a persistent kernel marks once per tile, and the
      // next launches' buffers hold what it made)
      if (i < static_cast<size_t>(warmup) || t.launches[i].kernel_ns < 0) continue;
      dropped += t.launches[i].dropped;
      on.push_back(double(t.launches[i].kernel_ns) / 1e6);
      error_ns = t.launches[i].clock_error_ns;
    }
    if (on.empty()) throw Error("profile_bench: the trace has no timed launches");
    std::sort(on.begin(), on.end());
    const double on_ms = on[on.size() / 2];
    const bool same = c_on.download() == c_off.download();
    const double flops = 2.0 * M * N * K;
    std::printf("%-34s %10s %10s\n", "", "ms", "TFLOP/s");
    std::printf("%-34s %10.3f %10.1f\n", "profiling off", off_ms, flops / off_ms / 1e9);
    std::printf("%-34s %10.3f %10.1f\n", "profiling on (events in the trace)", on_ms, flops / on_ms / 1e9);
    std::printf(
        "overhead: %.2f%% (on / off %.4f); %zu spans, %lld records dropped (timed runs), clock error %.1f us; "
        "C %s\ntrace: %s\n",
        (on_ms / off_ms - 1) * 100, on_ms / off_ms, t.spans.size(), static_cast<long long>(dropped),
        double(error_ns) / 1e3, same ? "the same" : "DIFFERS",
        runtime::trace_path(dir, runtime::profile_rank()).c_str());
    return same && dropped == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "profile_bench: %s\n", e.what());
    return 1;
  }
}
