// The bandwidth-bound kernels of the library (add, softmax, layernorm) on the GPU, beside the
// driver's device-to-device copy of the same bytes in one run (tests/kernels/elementwise_test.cpp
// checks them). Prints a table; skips (exit 0) where there is no GPU.
#include <cstdio>
#include <cstdlib>

#include "bench/timing.h"
#include "kernels/kernels.h"

namespace {
using namespace tiledist;

/// Median of 10 timed runs of `fn`, after 2 untimed ones, in milliseconds.
double time_ms(const std::function<void()>& fn) { return bench::median_ms(fn, 10, 2); }
}  // namespace

int main() {
  if (!cuda::available()) {
    std::printf("elementwise_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const auto& dev = cuda::device();
    // (the arch of the device found, or $TILEDIST_TARGET's)
    const Target target = std::getenv("TILEDIST_TARGET") ? Target::default_target() : Target::cuda();
    std::printf("elementwise_bench on %s (%s), code for %s\n\n", dev.name.c_str(), dev.arch().c_str(),
                target.arch.c_str());
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
    cuda::memset(w.data(), 0, size_t(cols) * 4);
    cuda::memset(bias.data(), 0, size_t(cols) * 4);
    auto ln = compile(kernels::layernorm_kernel(), {{"BLOCK", 1024}}, target);
    double ln_ms = time_ms([&] { ln.launch({rows}, x, w, bias, out, cols, 1e-5f); });
    // DRAM traffic: x read once and y written once; the second and third passes over a 4 KiB row
    // hit L2, so they are not counted.
    double ln_gbs = 2.0 * rows * cols * 4 / ln_ms / 1e6;
    std::printf("%-40s %10.3f %10.0f %9.0f%%\n", "layernorm, 65536 x 1024 f32", ln_ms, ln_gbs, 100 * ln_gbs / copy_gbs);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
