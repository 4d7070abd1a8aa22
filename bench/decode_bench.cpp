// Flash decoding on a CUDA GPU: kernels::FlashDecode (bf16, a contiguous KV cache) against
// PyTorch's scaled_dot_product_attention on the same decode step (q [B, H, 1, D] against the
// cache [B, H_KV, L, D], grouped-query heads), in one run: the PyTorch side is
// bench/attention_baseline.py's `decode` mode, run as a child process where PyTorch's python is
// found ($TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python). Prints each shape's time,
// the bandwidth of its KV reads (B·L·H_KV·D·2 bytes, K and V) against a device-to-device copy's
// in the same run (read + written), and SDPA's time and ratio. Skips (exit 0) where there is
// no GPU. The acceptance: B=32, H=32/8, D=128, L=32k at >= 80% of the HBM bandwidth
// its KV reads need, and faster than SDPA.
//
//   decode_bench [reps]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/flash_decode.h"

using namespace tiledist;

namespace {

struct Shape {
  int B, H, H_KV, D, L;
  std::string str() const { return str_cat("B=", B, " H=", H, "/", H_KV, " D=", D, " L=", L); }
  double kv_bytes() const { return 2.0 * B * double(L) * H_KV * D * 2; }
};

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("decode_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
    const auto& dev = cuda::device();
    const Target target = Target::cuda();
    auto [python, script] = bench::find_torch(argv[0], "TILEDIST_ATTENTION_BASELINE", "attention_baseline.py");
    // The copy's bandwidth (bytes read and written), on 1 GiB.
    const size_t copy_bytes = size_t(1) << 30;
    double copy_bw = 0;
    {
      cuda::Buffer<char> a(copy_bytes), b(copy_bytes);
      const double ms = bench::median_ms(
          [&] { runtime::copy_async(b.data(), a.data(), copy_bytes, runtime::Stream::legacy()); }, reps, 3);
      copy_bw = 2.0 * double(copy_bytes) / (ms * 1e-3) / 1e9;
    }
    std::printf(
        "decode_bench on %s (%s, %d SMs): bf16, one query token a sequence; median of %d calls; device copy "
        "%.0f GB/s (read + written)\n\n",
        dev.name.c_str(), dev.arch().c_str(), dev.sms, reps, copy_bw);
    if (python.empty()) std::printf("(SDPA baseline not run: no PyTorch python or bench/attention_baseline.py)\n\n");
    std::printf("%-34s %7s %9s %9s %7s %9s %7s  %s\n", "shape", "splits", "ours us", "GB/s", "of copy", "SDPA us",
                "ratio", "SDPA's kernel");
    for (const Shape& s : {Shape{32, 32, 8, 128, 32768}, Shape{128, 32, 8, 128, 4096}, Shape{8, 32, 8, 128, 131072},
                           Shape{1, 32, 8, 128, 131072}, Shape{32, 64, 8, 128, 8192}}) {
      kernels::FlashDecode fd(target, s.H, s.H_KV, s.D, ir::DType::bf16, /*causal*/ false);
      const size_t nq = size_t(s.B) * s.H * s.D, nkv = size_t(s.B) * s.L * s.H_KV * s.D;
      cuda::Buffer<bf16> q(nq), k(nkv), v(nkv), o(nq);
      bench::fill_random(q), bench::fill_random(k), bench::fill_random(v);
      cuda::Buffer<int32_t> lens(std::vector<int32_t>(size_t(s.B), s.L));
      const double ms = bench::median_ms(
          [&] { fd.run(q.data(), k.data(), v.data(), lens.data(), o.data(), s.B, 1, s.L, &runtime::Stream::legacy()); },
          reps, 3);  // (queued on the timer's stream: no host synchronization inside the timed region)
      const double bw = s.kv_bytes() / (ms * 1e-3) / 1e9;
      double theirs = 0;
      std::string kernel = "-";
      if (!python.empty()) {
        auto [out, good] = bench::run_command(str_cat(python, " ", script, " decode --b ", s.B, " --h ", s.H, " --hkv ",
                                                      s.H_KV, " --s ", s.L, " --d ", s.D, " --reps ", reps));
        const std::string t = bench::field(out, "ms");
        if (good && !t.empty())
          theirs = std::atof(t.c_str()), kernel = bench::field(out, "kernel");
        else
          std::printf("(SDPA failed on %s:\n%s)\n", s.str().c_str(), out.c_str());
      }
      std::printf("%-34s %7d %9.1f %9.0f %7.2f %9s %7s  %s\n", s.str().c_str(), fd.splits(s.B, s.L), ms * 1e3, bw,
                  bw / copy_bw, theirs > 0 ? str_cat(int(theirs * 1e3 + 0.5)).c_str() : "-",
                  theirs > 0 ? str_cat(int(theirs / ms * 100 + 0.5) / 100.0).c_str() : "-", kernel.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
