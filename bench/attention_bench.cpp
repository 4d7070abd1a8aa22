// FlashAttention forward on a CUDA GPU: kernels::Attention (bf16) against PyTorch's
// scaled_dot_product_attention on the same shapes, in one run: the PyTorch side is
// bench/attention_baseline.py, run as a child process where PyTorch's python is found
// ($TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python). Prints a table of TFLOP/s
// (4·B·H·S²·D per call, half of it causal) and their ratio; first checks ours against SDPA on
// one shape. Skips (exit 0) where there is no GPU.
//
//   attention_bench [reps]                 B=4 H=32 S=4096, D=128 and 64, causal and not
//   attention_bench one B H S D CAUSAL BM BN WARPS STAGES [reps]
//                                          one shape and configuration, ours alone (to sweep
//                                          blocks, or for a profiler); its output checked
//                                          against the library's tiles' on the same inputs
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/attention.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
using kernels::Attention;

struct Shape {
  int B, H, S, D;
  bool causal;
  double flop() const { return 4.0 * B * H * double(S) * S * D * (causal ? 0.5 : 1.0); }
  std::string args() const {
    return str_cat(" --b ", B, " --h ", H, " --s ", S, " --d ", D, causal ? " --causal" : "");
  }
  std::string str() const { return str_cat("B=", B, " H=", H, " S=", S, " D=", D, causal ? " causal" : ""); }
};

/// Ours against SDPA on one shape (and SDPA against a host reference on a few rows, so that a
/// disagreement names the wrong side); returns false where they disagree.
bool check_against_torch(const Target& target, const std::string& python, const std::string& script, const Shape& s) {
  const size_t n = size_t(s.B) * s.S * s.H * s.D;
  std::vector<float> qf = reference::random_floats(n), kf = reference::random_floats(n),
                     vf = reference::random_floats(n);
  std::vector<bf16> q(n), k(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    qf[i] = float(q[i] = bf16(qf[i]));
    kf[i] = float(k[i] = bf16(kf[i]));
    vf[i] = float(v[i] = bf16(vf[i]));
  }
  cuda::Buffer<bf16> dq(q), dk(k), dv(v), dout(n);
  Attention(target, s.H, s.H, s.D, ir::DType::bf16, s.causal)
      .run(dq.data(), dk.data(), dv.data(), dout.data(), s.B, s.S);
  std::vector<bf16> ours = dout.download();
  char dir_template[] = "/tmp/attention_bench.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  auto write = [&](const std::string& name, const std::vector<bf16>& x) {
    std::ofstream(dir + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(x.data()), std::streamsize(n * 2));
  };
  write("q", q), write("k", k), write("v", v);
  auto [out, good] = bench::run_command(python + " " + script + " check" + s.args() + " --q " + dir + "/q --k " + dir +
                                        "/k --v " + dir + "/v --out " + dir + "/o");
  std::vector<bf16> theirs(n);
  if (good)
    good = bool(std::ifstream(dir + "/o", std::ios::binary)
                    .read(reinterpret_cast<char*>(theirs.data()), std::streamsize(n * 2)));
  bench::run_command("rm -rf " + dir);
  if (!good) {
    std::printf("check against SDPA failed to run:\n%s\n", out.c_str());
    return false;
  }
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = float(ours[i]), b[i] = float(theirs[i]);
  // Both are bf16 roundings of the same exact result, each within about 0.5u (u = 2^-8) in
  // norm (tests/kernels/attention_test.cpp): 2u between them is a wide margin.
  const double err = reference::rel_error(a, b), tol = 2.0 / 256;
  // SDPA itself against double on the first rows of head 0 of sequence 0 (causal: the rows
  // see few keys; not causal: all of them).
  const int rows = std::min(s.S, 16);
  double worst = 0;
  for (int i = 0; i < rows; ++i) {
    const int keys = s.causal ? i + 1 : s.S;
    std::vector<double> w(keys), o(s.D, 0.0);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < keys; ++j) {
      double dot = 0;
      for (int d = 0; d < s.D; ++d) dot += double(qf[(size_t(i) * s.H) * s.D + d]) * kf[(size_t(j) * s.H) * s.D + d];
      m = std::max(m, w[j] = dot / std::sqrt(double(s.D)));
    }
    for (int j = 0; j < keys; ++j) {
      sum += w[j] = std::exp(w[j] - m);
      for (int d = 0; d < s.D; ++d) o[d] += w[j] * vf[(size_t(j) * s.H) * s.D + d];
    }
    for (int d = 0; d < s.D; ++d) worst = std::max(worst, std::abs(b[size_t(i) * s.H * s.D + d] - o[d] / sum));
  }
  std::printf(
      "check %s: ours against SDPA, relative error %.2e (tolerance %.1e); SDPA against double on %d rows, "
      "largest error %.2e\n\n",
      s.str().c_str(), err, tol, rows, worst);
  return err < tol;
}

int one(char** argv, int argc) {
  int x[9];
  for (int i = 0; i < 9; ++i) x[i] = std::atoi(argv[i]);
  const Shape s{x[0], x[1], x[2], x[3], x[4] != 0};
  kernels::AttentionConfig config;
  config.block_m = x[5], config.block_n = x[6];
  config.options = CompileOptions::from_env();
  config.options.num_warps = x[7], config.options.num_stages = x[8];
  const int reps = argc > 9 ? std::atoi(argv[9]) : 10;
  Attention attn(Target::cuda(), s.H, s.H, s.D, ir::DType::bf16, s.causal, 0, config);
  const size_t n = size_t(s.B) * s.S * s.H * s.D;
  cuda::Buffer<bf16> q(n), k(n), v(n), o(n);
  bench::fill_random(q), bench::fill_random(k), bench::fill_random(v);
  const double ms =
      bench::median_ms([&] { attn.run(q.data(), k.data(), v.data(), o.data(), s.B, s.S); }, reps, /*warmup*/ 3);
  // The library's tiles on the same inputs: both are bf16 roundings of the same result, each
  // within about 0.5u in norm (u = 2^-8), so 2u between them is a wide margin.
  cuda::Buffer<bf16> mine(n);
  Attention(Target::cuda(), s.H, s.H, s.D, ir::DType::bf16, s.causal)
      .run(q.data(), k.data(), v.data(), mine.data(), s.B, s.S);
  const std::vector<bf16> a16 = o.download(), b16 = mine.download();
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = float(a16[i]), b[i] = float(b16[i]);
  const double err = reference::rel_error(a, b);
  std::printf("attention %s blocks %dx%d/%dw/%ds: %.3f ms, %.1f TFLOP/s (against the library's tiles: %.1e%s)\n",
              s.str().c_str(), x[5], x[6], x[7], x[8], ms, s.flop() / ms / 1e9, err, err <= 2.0 / 256 ? "" : ", WRONG");
  return err <= 2.0 / 256 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("attention_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    if (argc >= 11 && std::string(argv[1]) == "one") return one(argv + 2, argc - 2);
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
    const auto& dev = cuda::device();
    const Target target = Target::cuda();
    std::printf("attention_bench on %s (%s, %d SMs): bf16, [B * S, H, D] rows of tokens; median of %d calls\n\n",
                dev.name.c_str(), dev.arch().c_str(), dev.sms, reps);
    auto [python, script] = bench::find_torch(argv[0], "TILEDIST_ATTENTION_BASELINE", "attention_baseline.py");
    bool checked = true;
    if (python.empty()) {
      std::printf(
          "(SDPA baseline not run: no PyTorch python at $TILEDIST_TORCH_PYTHON or /opt/torch/.venv/bin/python, "
          "or no bench/attention_baseline.py: set $TILEDIST_ATTENTION_BASELINE)\n\n");
    } else {
      checked = check_against_torch(target, python, script, {1, 4, 1000, 128, true}) &&
                check_against_torch(target, python, script, {2, 2, 333, 64, false});
    }
    std::printf("%-32s %10s %10s %10s %10s %8s  %s\n", "shape", "ours ms", "TFLOP/s", "SDPA ms", "TFLOP/s", "ratio",
                "SDPA's kernel");
    for (int D : {128, 64})
      for (bool causal : {false, true}) {
        const Shape s{4, 32, 4096, D, causal};
        const size_t n = size_t(s.B) * s.S * s.H * s.D;
        Attention attn(target, s.H, s.H, s.D, ir::DType::bf16, s.causal);
        cuda::Buffer<bf16> q(n), k(n), v(n), o(n);
        bench::fill_random(q), bench::fill_random(k), bench::fill_random(v);
        const double ours =
            bench::median_ms([&] { attn.run(q.data(), k.data(), v.data(), o.data(), s.B, s.S); }, reps, /*warmup*/ 3);
        double theirs = 0;
        std::string kernel = "-";
        if (!python.empty()) {
          auto [out, good] = bench::run_command(python + " " + script + " time" + s.args() + str_cat(" --reps ", reps));
          const std::string ms = bench::field(out, "ms");
          if (good && !ms.empty())
            theirs = std::atof(ms.c_str()), kernel = bench::field(out, "kernel");
          else
            std::printf("(SDPA failed on %s:\n%s)\n", s.str().c_str(), out.c_str());
        }
        const double tf = s.flop() / ours / 1e9, tf_theirs = theirs > 0 ? s.flop() / theirs / 1e9 : 0;
        if (theirs > 0)
          std::printf("%-32s %10.3f %10.1f %10.3f %10.1f %8.2f  %s\n", s.str().c_str(), ours, tf, theirs, tf_theirs,
                      tf / tf_theirs, kernel.c_str());
        else
          std::printf("%-32s %10.3f %10.1f %10s %10s %8s\n", s.str().c_str(), ours, tf, "-", "-", "-");
      }
    if (!checked) {
      std::printf("\nours and SDPA disagree (above): the timings compare different results\n");
      return 1;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
