// MoE grouped GEMM on a CUDA GPU: kernels::GroupedGemm (bf16) against torch._grouped_mm on
// the same shapes and offsets, in one run: the PyTorch side is bench/grouped_gemm_baseline.py,
// run as a child process where PyTorch's python is found ($TILEDIST_TORCH_PYTHON, default
// /opt/torch/.venv/bin/python). Prints a table of TFLOP/s and their ratio; first checks ours
// against torch on one shape (and against a host reference on a few rows). Skips (exit 0)
// where there is no GPU.
//
//   grouped_gemm_bench [reps]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/grouped_gemm.h"
#include "kernels/reference.h"

namespace {
using namespace tiledist;
using kernels::GroupedGemm;

/// Uneven rows per expert (a fixed seed: the same offsets every run), summing to `rows`: sizes
/// drawn from [0.25, 1.75) of the mean, a few experts empty where there are many.
std::vector<int32_t> uneven_offsets(int rows, int E) {
  std::mt19937 rng(1234 + E);
  std::uniform_real_distribution<double> d(0.25, 1.75);
  std::vector<double> w(E);
  for (int e = 0; e < E; ++e) w[e] = (E >= 16 && e % 13 == 5) ? 0 : d(rng);
  double total = 0;
  for (double x : w) total += x;
  std::vector<int32_t> offs(E);
  double acc = 0;
  for (int e = 0; e < E; ++e) offs[e] = static_cast<int32_t>(std::lround((acc += w[e]) / total * rows));
  offs[E - 1] = rows;
  return offs;
}

std::string joined(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string shape_args(int rows, int N, int K, const std::vector<int32_t>& offs, const char* layout) {
  return str_cat(" --rows ", rows, " --n ", N, " --k ", K, " --offs ", joined(offs), " --layout ", layout);
}

template <class T>
void write_file(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

/// Ours against torch (and a host reference on a few rows) on one shape; returns false where
/// they disagree.
bool check_against_torch(const Target& target, const std::string& python, const std::string& script) {
  const int rows = 2048, N = 1024, K = 2048, E = 8;
  const auto offs = uneven_offsets(rows - 16, E);  // (16 rows past the last offset)
  bool ok = true;
  for (const char* layout : {"nk", "kn"}) {
    auto af = reference::random_floats(size_t(rows) * K), wf = reference::random_floats(size_t(E) * N * K);
    std::vector<bf16> a(af.size()), w(wf.size());
    for (size_t i = 0; i < a.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < w.size(); ++i) wf[i] = float(w[i] = bf16(wf[i]));
    cuda::Buffer<bf16> da(a), dw(w), dc(size_t(rows) * N);
    cuda::Buffer<int32_t> doffs(offs);
    cuda::memset(dc.data(), 0, dc.size() * 2);
    const bool nk = std::string(layout) == "nk";
    GroupedGemm g(target, rows, N, K, E, ir::DType::bf16, GroupedGemm::Scaling::none,
                  nk ? GroupedGemm::Layout::nk : GroupedGemm::Layout::kn);
    g.run(da.data(), dw.data(), dc.data(), doffs.data());
    std::vector<bf16> c = dc.download();
    std::vector<float> ours(c.begin(), c.end());
    // A host reference on rows spread over the experts (the first and last of each).
    std::vector<float> got, want;
    for (int e = 0, start = 0; e < E; start = offs[e], ++e)
      for (int r : {start, offs[e] - 1}) {
        if (r < start || r >= offs[e]) continue;
        for (int n = 0; n < N; ++n) {
          double s = 0;
          for (int k = 0; k < K; ++k)
            s += double(af[size_t(r) * K + k]) *
                 (nk ? wf[(size_t(e) * N + n) * K + k] : wf[(size_t(e) * K + k) * N + n]);
          got.push_back(ours[size_t(r) * N + n]), want.push_back(float(s));
        }
      }
    const double host_err = reference::rel_error(got, want);
    std::string torch_note = "(torch not run)";
    if (!python.empty()) {
      const std::string dir = "/tmp/grouped_gemm_bench." + std::to_string(getpid());
      std::system(("mkdir -p " + dir).c_str());
      write_file(dir + "/a", a);
      write_file(dir + "/w", w);
      auto [out, good] = bench::run_command(python + " " + script + " check" + shape_args(rows, N, K, offs, layout) +
                                            " --a " + dir + "/a --w " + dir + "/w --out " + dir + "/c");
      if (good) {
        std::vector<bf16> theirs(size_t(rows) * N);
        std::ifstream(dir + "/c", std::ios::binary)
            .read(reinterpret_cast<char*>(theirs.data()), std::streamsize(theirs.size() * 2));
        std::vector<float> tf(theirs.begin(), theirs.end());
        const double err = reference::rel_error(ours, tf);
        torch_note = str_cat("against torch._grouped_mm: ", err);
        // (both round to bf16 from f32 sums taken in other orders: an element may differ by
        // a unit of bf16, 2^-8 relative; in norm about 2^-9)
        if (err > 4e-3) ok = false;
      } else {
        torch_note = "torch failed: " + out;
      }
      std::system(("rm -rf " + dir).c_str());
    }
    std::printf("check %dx%dx%d E=%d W %s: relative error against the host on %zu rows: %.1e; %s\n", rows, N, K, E,
                layout, got.size() / N, host_err, torch_note.c_str());
    if (host_err > 4e-3) ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("grouped_gemm_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const auto& dev = cuda::device();
  std::printf("grouped_gemm_bench on %s (%s, %d SMs)\n", dev.name.c_str(), dev.arch().c_str(), dev.sms);
  const Target target = Target::cuda();
  auto [python, script] = bench::find_torch(argv[0], "TILEDIST_GROUPED_GEMM_BASELINE", "grouped_gemm_baseline.py");
  if (python.empty())
    std::printf(
        "(torch baseline not run: no PyTorch python at $TILEDIST_TORCH_PYTHON or /opt/torch/.venv/bin/python, "
        "or no bench/grouped_gemm_baseline.py: set $TILEDIST_GROUPED_GEMM_BASELINE)\n");
  // (`grouped_gemm_bench REPS f8`: the e4m3 rows alone)
  const bool only_f8 = argc > 2 && std::string(argv[2]) == "f8";
  try {
    if (only_f8) python.clear();
    if (!only_f8 && !check_against_torch(target, python, script)) {
      std::fprintf(stderr, "grouped_gemm_bench: ours disagrees with the reference\n");
      return 1;
    }
    std::printf("\nbf16 grouped GEMM (bf16 out), TFLOP/s of 2 * rows * N * K; median of %d launches\n", reps);
    std::printf("%-44s %-14s %9s %9s %9s %9s\n", "shape", "tiles", "ours ms", "TFLOP/s", "torch", "ratio");
    struct Shape {
      int E, rows, N, K;
    };
    for (Shape s : {Shape{8, 16384, 4096, 7168}, Shape{64, 2048, 4096, 7168}}) {
      if (only_f8) break;
      const auto offs = uneven_offsets(s.rows, s.E);
      cuda::Buffer<bf16> a(size_t(s.rows) * s.K), w(size_t(s.E) * s.N * s.K), c(size_t(s.rows) * s.N);
      cuda::Buffer<int32_t> doffs(offs);
      bench::fill_random(a);
      bench::fill_random(w);
      const double flop = 2.0 * s.rows * s.N * s.K;
      for (const char* layout : {"nk", "kn"}) {
        const bool nk = std::string(layout) == "nk";
        GroupedGemm g(target, s.rows, s.N, s.K, s.E, ir::DType::bf16, GroupedGemm::Scaling::none,
                      nk ? GroupedGemm::Layout::nk : GroupedGemm::Layout::kn);
        const double ms = bench::median_ms(
            [&] { g.run(a.data(), w.data(), c.data(), doffs.data(), &runtime::Stream::legacy()); }, reps, /*warmup*/ 3);
        std::string theirs = "-", ratio = "-";
        if (!python.empty()) {
          auto [out, good] =
              bench::run_command(python + " " + script + " time" + shape_args(s.rows, s.N, s.K, offs, layout) +
                                 " --reps " + std::to_string(reps));
          const size_t at = out.rfind("ms ");
          if (good && at != std::string::npos) {
            const double tms = std::atof(out.c_str() + at + 3);
            char b[32];
            std::snprintf(b, sizeof b, "%.1f", flop / tms / 1e9), theirs = b;
            std::snprintf(b, sizeof b, "%.3f", tms / ms), ratio = b;
          } else {
            std::printf("(torch failed: %s)\n", out.c_str());
          }
        }
        char label[64], tiles[32];
        std::snprintf(label, sizeof label, "E=%d rows=%d N=%d K=%d W %s", s.E, s.rows, s.N, s.K,
                      nk ? "[E,N,K]" : "[E,K,N]");
        std::snprintf(tiles, sizeof tiles, "%dx%d/%dw%s", g.config().bm, g.config().bn, g.config().options.num_warps,
                      g.config().programs > 0 ? " P" : "");
        std::printf("%-44s %-14s %9.3f %9.1f %9s %9s\n", label, tiles, ms, flop / ms / 1e9, theirs.c_str(),
                    ratio.c_str());
      }
    }
    // e4m3, W [E, N, K], both scalings: ours alone (no baseline yet). Scales of 1: the time does
    // not depend on them.
    std::printf("\ne4m3 grouped GEMM (bf16 out, f32 scales), TFLOP/s; ours alone, median of %d launches\n", reps);
    std::printf("%-44s %-14s %9s %9s\n", "shape", "tiles", "ours ms", "TFLOP/s");
    for (auto scaling : {GroupedGemm::Scaling::rowwise, GroupedGemm::Scaling::blockwise}) {
      const int E = 8, rows = 16384, N = 4096, K = 7168, KB = (K + 127) / 128;
      const auto offs = uneven_offsets(rows, E);
      cuda::Buffer<f8e4m3> a(size_t(rows) * K), w(size_t(E) * N * K);
      cuda::Buffer<bf16> c(size_t(rows) * N);
      cuda::Buffer<int32_t> doffs(offs);
      const bool block = scaling == GroupedGemm::Scaling::blockwise;
      std::vector<float> ones_a(block ? size_t(rows) * KB : size_t(rows), 1.0f),
          ones_w(block ? size_t(E) * (N / 128) * KB : size_t(E) * N, 1.0f);
      cuda::Buffer<float> sa(ones_a), sw(ones_w);
      bench::fill_random(a);
      bench::fill_random(w);
      GroupedGemm g(target, rows, N, K, E, ir::DType::f8e4m3, scaling, GroupedGemm::Layout::nk);
      const double ms = bench::median_ms(
          [&] { g.run(a.data(), w.data(), c.data(), sa.data(), sw.data(), doffs.data(), &runtime::Stream::legacy()); },
          reps, /*warmup*/ 3);
      char label[64], tiles[32];
      std::snprintf(label, sizeof label, "E=%d rows=%d N=%d K=%d %s", E, rows, N, K, block ? "blockwise" : "rowwise");
      std::snprintf(tiles, sizeof tiles, "%dx%d/%dw", g.config().bm, g.config().bn, g.config().options.num_warps);
      std::printf("%-44s %-14s %9.3f %9.1f\n", label, tiles, ms, 2.0 * rows * N * K / ms / 1e9);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
