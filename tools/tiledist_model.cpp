// tiledist-model: a model's decoder layers, tensor parallel over the job's ranks (issue 32).
//
//   tiledist-run -n N tiledist-model [--config qwen3-32b|FILE] [--weights DIR|FILE] [--layers L]
//                                    [--batch B] [--seqlen S] [--reps R] [--seed X]
//                                    [--target host|cuda] [--decode STEPS] [--mega [--plan] [--warps W]]
//
// Prefill of L layers (dense, or Qwen3-MoE's experts) over B sequences of S tokens,
// the activations between layers split by tokens. The weights: a Hugging Face checkpoint's
// (--weights: a .safetensors file or a model's folder, whose config.json is the config where no
// --config is given), every rank reading its part, or random ones made from the seed; the
// embeddings are made from the seed. Each rep runs the L layers after a barrier; rank 0 prints the median milliseconds
// per step and tokens per second. With --decode, after the prefill, STEPS decode steps (one new
// token a sequence each; a dense model's as a CUDA graph on a GPU, or with --mega as one
// persistent kernel: mega::MegaKernel, whose plan --plan prints a line a task, --warps W its warps a program), and the
// median milliseconds a step (the first, which compiles, not counted). The default target: the GPU where there is one,
// else the CPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/symmetric.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "runtime/cuda.h"
#include "tiledist.h"

namespace {
using namespace tiledist;

int usage(const char* why) {
  std::fprintf(stderr,
               "tiledist-model: %s\nusage: tiledist-model [--config qwen3-32b|FILE] [--weights DIR|FILE] [--layers L] "
               "[--batch B] [--seqlen S] [--reps R] [--seed X] [--target host|cuda] [--decode STEPS] [--mega [--plan] "
               "[--warps W]]\n",
               why);
  return 2;
}

int run(int argc, char** argv) {
  std::string config_name, weights, target_name;
  int layers = 2, batch = 1, seqlen = 4096, reps = 5, decode = 0, warps = 0;
  bool mega = false, plan = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mega" || a == "--plan") {
      (a == "--mega" ? mega : plan) = true;
      continue;
    }
    if (i + 1 >= argc) return usage(str_cat("option '", a, "' needs a value (or is unknown)").c_str());
    const std::string v = argv[++i];
    if (a == "--config")
      config_name = v;
    else if (a == "--weights")
      weights = v;
    else if (a == "--layers")
      layers = std::atoi(v.c_str());
    else if (a == "--batch")
      batch = std::atoi(v.c_str());
    else if (a == "--seqlen")
      seqlen = std::atoi(v.c_str());
    else if (a == "--reps")
      reps = std::atoi(v.c_str());
    else if (a == "--seed")
      seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--target")
      target_name = v;
    else if (a == "--decode")
      decode = std::atoi(v.c_str());
    else if (a == "--warps")
      warps = std::atoi(v.c_str());
    else
      return usage(str_cat("unknown option '", a, "'").c_str());
  }
  if (layers < 1 || batch < 1 || seqlen < 1 || reps < 1 || decode < 0)
    return usage("--layers, --batch, --seqlen and --reps take positive counts (--decode: not negative)");
  if (mega && decode < 2) return usage("--mega times decode steps: give --decode 2 or more");
  if ((plan || warps) && !mega) return usage("--plan and --warps are --mega's persistent kernel's: give --mega");
  const Target target =
      target_name.empty() ? (cuda::available() ? Target::cuda() : Target::host()) : Target::parse(target_name);
  std::unique_ptr<model::SafeTensors> checkpoint;
  if (!weights.empty()) {
    checkpoint = std::make_unique<model::SafeTensors>(weights);
    const std::filesystem::path w(weights);
    const std::filesystem::path beside = (std::filesystem::is_directory(w) ? w : w.parent_path()) / "config.json";
    if (config_name.empty() && std::filesystem::exists(beside)) config_name = beside.string();
  }
  const model::ModelConfig config = model::ModelConfig::load(config_name.empty() ? "qwen3-32b" : config_name);
  const int n = kernels::detail::world_ranks(target), me = kernels::detail::world_rank(target);
  config.check(n);
  const int64_t T = int64_t(batch) * seqlen;
  model::Model model(target, config, layers, batch, seqlen, seed, decode, checkpoint.get());
  model.set_decode_mega(mega, warps);
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {  // (the first: compiles, warms)
    barrier_all();
    const auto start = std::chrono::steady_clock::now();
    model.prefill();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  if (me == 0)
    std::printf("tiledist-model: %s, %d layers, %d x %d tokens, %d rank%s on %s: prefill %.3f ms (%.0f tokens/s)\n",
                config.name.c_str(), layers, batch, seqlen, n, n == 1 ? "" : "s", target.name().c_str(), ms,
                double(T) / (ms * 1e-3));
  if (decode > 0) {
    std::vector<double> steps;
    for (int d = 0; d < decode; ++d) {  // (the first: compiles, warms)
      barrier_all();
      const auto start = std::chrono::steady_clock::now();
      model.decode();
      const double step_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (d > 0) steps.push_back(step_ms);
    }
    std::sort(steps.begin(), steps.end());
    if (me == 0 && !steps.empty())
      std::printf("tiledist-model: decode %.3f ms a step (batch %d, %s; median of %zu)\n", steps[steps.size() / 2],
                  batch,
                  mega                               ? "one persistent kernel"
                  : target.is_gpu() && !config.moe() ? "one CUDA graph"
                                                     : "kernel by kernel",
                  steps.size());
    if (me == 0 && mega) std::printf("%s", model.decode_mega_plan(plan).c_str());
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const tiledist::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
