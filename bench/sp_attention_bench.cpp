// Sequence-parallel attention on CUDA GPUs, one process a GPU (tiledist-run -n N
// sp_attention_bench [reps]): kernels::AgAttention (each rank a slice of every sequence's tokens,
// the others' keys and values gathered by the copy engine under the kernel) and
// kernels::UlyssesAttention (the same by all-to-all, where the heads split over the ranks),
// each against the same work in PyTorch in one run: NCCL's all-gather of the keys and values
// then SDPA over the gathered sequence for the rank's queries (causal: the keys up to each
// query's position, SDPA's lower-right causal mask); for Ulysses NCCL's all-to-all of each head
// group's share, SDPA over the whole sequences, and the outputs back by all-to-all. The PyTorch
// side is bench/sp_attention_baseline.py, run as a child process beside each rank
// ($TILEDIST_SP_BASELINE, PyTorch's python at $TILEDIST_TORCH_PYTHON, default
// /opt/torch/.venv/bin/python). Times are the slowest rank's median of `reps` calls, each after
// a barrier. TFLOP/s (AgAttention's): the whole sequences' 4·B·H·S²·D (half of it causal) over
// the time, a GPU. Skips (exit 0) where there is no GPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/sp_attention.h"
#include "kernels/symmetric.h"

using namespace tiledist;

namespace {

struct Shape {
  int B, H, KV, D, S;  // S: the whole sequence's tokens (a rank: S / ranks)
  bool causal;
  double flop() const { return 4.0 * B * H * double(S) * S * D * (causal ? 0.5 : 1.0); }
};

/// The largest of every rank's `x` (every rank calls it).
double slowest(double x) {
  static double* slots = symm_alloc<double>(runtime::kMaxRanks).data();
  slots[0] = x;
  barrier_all();
  double m = x;
  for (int r = 0; r < world_size(); ++r) m = std::max(m, *symm_at(slots, r));
  barrier_all();  // (before the slots' next use)
  return m;
}

/// PyTorch's times (ms) for the shape on this rank, by all-gather and by all-to-all (Ulysses),
/// each -1 where it did not run.
std::pair<double, double> time_torch(const std::string& python, const std::string& script, const Shape& s, int reps,
                                     int port) {
  if (python.empty()) return {-1, -1};
  const std::string env =
      str_cat("RANK=", rank(), " WORLD_SIZE=", world_size(), " MASTER_ADDR=127.0.0.1 MASTER_PORT=", port, " ");
  barrier_all();  // (every rank's torch process starts with the others')
  auto [out, good] =
      bench::run_command(str_cat(env, python, " ", script, " --b ", s.B, " --s ", s.S / world_size(), " --h ", s.H,
                                 " --kv ", s.KV, " --d ", s.D, s.causal ? " --causal" : "", " --reps ", reps));
  const size_t at = out.rfind("ms ");
  double ag = -1, alone = -1, uly = -1;
  if (!good || at == std::string::npos || std::sscanf(out.c_str() + at + 3, "%lf %lf %lf", &ag, &alone, &uly) != 3) {
    if (rank() == 0) std::printf("(torch failed: %s)\n", out.c_str());
    return {-1, -1};
  }
  return {ag, uly};
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("sp_attention_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
    const int n = world_size();
    const Target target = Target::cuda();
    auto [python, script] = bench::find_torch(argv[0], "TILEDIST_SP_BASELINE", "sp_attention_baseline.py");
    if (rank() == 0)
      std::printf("sp_attention_bench on %s (%s, %d SMs), %d rank(s): bf16, slowest rank's median of %d calls\n%s\n",
                  cuda::device().name.c_str(), cuda::device().arch().c_str(), cuda::device().sms, n, reps,
                  python.empty() ? "(PyTorch baseline not run: no python or no bench/sp_attention_baseline.py)" : "");
    if (rank() == 0)
      std::printf("%-34s %9s %8s %9s %6s %10s %9s %7s\n", "shape (S: the whole sequence)", "AG ms", "TFLOP/s",
                  "torch AG", "ratio", "Ulysses ms", "torch Uly", "ratio");
    if (n > 1) {  // (the copy engine to the peers as AgAttention uses it: a slice to each in turn, one stream)
      const size_t bytes = size_t(32) << 20;
      void* to = kernels::detail::symm_zeroed(target, bytes * n);
      cuda::Buffer<char> from(bytes);
      std::vector<double> t;
      for (int i = 0; i < 5; ++i) {
        barrier_all();
        runtime::Timer timer;
        timer.start();
        for (int j = 1; j < n; ++j)
          runtime::copy_async(
              static_cast<char*>(kernels::detail::symm_on(target, to, (rank() + j) % n)) + rank() * bytes, from.data(),
              bytes, runtime::Stream::legacy());
        t.push_back(timer.stop());
      }
      std::sort(t.begin(), t.end());
      const double ms = slowest(t[2]);
      if (rank() == 0)
        std::printf("copy engine: 32 MiB to each of %d peers in turn: %.3f ms, %.1f GB/s\n", n - 1, ms,
                    double(bytes) * (n - 1) / (ms * 1e-3) / 1e9);
      barrier_all();
      kernels::detail::symm_release(target, to);
    }
    std::vector<Shape> shapes = {
        {1, 32, 8, 128, 16384, true}, {1, 32, 8, 128, 32768, true}, {1, 32, 8, 128, 32768, false}};
    if (n >= 4) shapes.push_back({1, 32, 8, 128, 131072, true});
    int port = 29600;
    for (const Shape& s : shapes) {
      const int S = s.S / n;  // (a rank's)
      kernels::AgAttention ag(target, s.H, s.KV, s.D, s.B, S, ir::DType::bf16, s.causal);
      std::optional<kernels::UlyssesAttention> uly;  // (where the heads split over the ranks)
      if (s.H % n == 0 && s.KV % n == 0) uly.emplace(target, s.H, s.KV, s.D, s.B, S, ir::DType::bf16, s.causal);
      cuda::Buffer<bf16> q(size_t(s.B) * S * s.H * s.D), k(size_t(s.B) * S * s.KV * s.D),
          v(size_t(s.B) * S * s.KV * s.D), o(size_t(s.B) * S * s.H * s.D);
      bench::fill_random(q), bench::fill_random(k), bench::fill_random(v);
      // The slowest rank's median of `reps` runs, each after a barrier (2 untimed first).
      double fastest = 0;  // (the last time()'s fastest rank)
      auto time = [&](const std::function<void()>& run) {
        runtime::Timer timer;
        std::vector<double> t;
        for (int i = 0; i < reps + 2; ++i) {
          barrier_all();
          timer.start();
          run();
          const double ms = timer.stop();
          if (i >= 2) t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        const double mine = t[t.size() / 2];
        fastest = -slowest(-mine);
        return slowest(mine);
      };
      const double ours = time([&] { ag.run(q.data(), k.data(), v.data(), o.data(), s.B, S); });
      const double ag_fastest = fastest;
      const double ulysses = uly ? time([&] { uly->run(q.data(), k.data(), v.data(), o.data(), s.B, S); }) : -1;
      const double uly_fastest = uly ? fastest : -1;
      // (the library's attention alone over what Ulysses gives a rank: whole sequences, heads / ranks)
      double alone = -1;
      if (uly) {
        kernels::Attention attn(target, s.H / n, s.KV / n, s.D, ir::DType::bf16, s.causal);
        cuda::Buffer<bf16> gq(size_t(s.B) * s.S * (s.H / n) * s.D), gk(size_t(s.B) * s.S * (s.KV / n) * s.D),
            gv(gk.size()), go(gq.size());
        bench::fill_random(gq), bench::fill_random(gk), bench::fill_random(gv);
        alone = time([&] { attn.run(gq.data(), gk.data(), gv.data(), go.data(), s.B, s.S); });
      }
      const auto [ag_here, uly_here] = time_torch(python, script, s, reps, port++);
      const double theirs = ag_here < 0 ? -1 : slowest(ag_here);
      const double theirs_uly = uly_here < 0 ? -1 : slowest(uly_here);
      if (rank() == 0) {
        auto ratio = [](double base, double ms) {
          return base > 0 && ms > 0 ? str_cat(base / ms).substr(0, 5) : std::string("-");
        };
        auto shown = [](double ms) { return ms > 0 ? str_cat(ms).substr(0, 8) : std::string("-"); };
        std::printf(
            "%-34s %9.3f %8.1f %9s %6s %10s %9s %7s\n",
            str_cat("B=", s.B, " H=", s.H, "/", s.KV, " D=", s.D, " S=", s.S, s.causal ? " causal" : "").c_str(), ours,
            s.flop() / n / (ours * 1e-3) / 1e12, shown(theirs).c_str(), ratio(theirs, ours).c_str(),
            shown(ulysses).c_str(), shown(theirs_uly).c_str(), ratio(theirs_uly, ulysses).c_str());
        std::printf("%-34s (the fastest rank: AG %.3f ms, Ulysses %s; Ulysses' attention alone %s)\n", "", ag_fastest,
                    shown(uly_fastest).c_str(), shown(alone).c_str());
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "sp_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
