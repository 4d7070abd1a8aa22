// MoE kernels on one CUDA GPU, beside PyTorch doing the same work in the same run (the PyTorch
// side is bench/moe_baseline.py, run as a child process where PyTorch's python is found:
// $TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python). Skips (exit 0) where there is
// no GPU.
//
//   moe_bench [reps]
//
// Routing: kernels::MoeRouting (top-k of f32 logits, then the slots sorted by expert into BM-row
// tiles) against softmax/sigmoid + torch.topk + the same sort in torch ops, at the shapes of
// real models (the acceptance: 16384 tokens over 128 experts in at most 50 us on one
// H200).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/moe.h"

namespace {
using namespace tiledist;
using kernels::MoeRouting;

struct Model {
  const char* name;
  int E, topk;
  bool sigmoid;
};
// Qwen3-30B-A3B (hidden 2048, intermediate 768), DeepSeek-V3 (7168, 2048: sigmoid scores),
// Mixtral 8x7B (4096, 14336).
const Model kModels[] = {
    {"Qwen3-30B-A3B", 128, 8, false}, {"DeepSeek-V3", 256, 8, true}, {"Mixtral-8x7B", 8, 2, false}};

std::string torch_ms(const std::string& python, const std::string& script, const std::string& args) {
  if (python.empty()) return "-";
  auto [out, good] = bench::run_command(python + " " + script + " " + args);
  const size_t at = out.rfind("ms ");
  if (!good || at == std::string::npos) {
    std::printf("(torch failed: %s)\n", out.c_str());
    return "-";
  }
  return out.substr(at + 3, out.find('\n', at) - at - 3);
}
}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("moe_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const auto& dev = cuda::device();
  std::printf("moe_bench on %s (%s, %d SMs)\n", dev.name.c_str(), dev.arch().c_str(), dev.sms);
  const Target target = Target::cuda();
  auto [python, script] = bench::find_torch(argv[0], "TILEDIST_MOE_BASELINE", "moe_baseline.py");
  if (python.empty()) std::printf("(torch baseline not run: no PyTorch python, or no bench/moe_baseline.py)\n");
  try {
    std::printf("\nrouting: top-k of f32 logits + sort by expert into 64-row tiles; median of %d runs, us\n", reps);
    std::printf("%-16s %7s %5s %5s %10s %10s %8s\n", "model", "tokens", "E", "top", "ours us", "torch us", "ratio");
    for (const Model& m : kModels)
      for (int tokens : {128, 4096, 16384}) {
        MoeRouting r(target, tokens, m.E, m.topk,
                     {m.sigmoid ? MoeRouting::Scores::sigmoid : MoeRouting::Scores::softmax, true, 64, 1});
        cuda::Buffer<float> logits(size_t(tokens) * m.E);
        bench::fill_random(logits);
        const double ms =
            bench::median_ms([&] { r.run(logits.data(), tokens, &runtime::Stream::legacy()); }, reps, /*warmup*/ 5);
        const std::string theirs =
            torch_ms(python, script,
                     str_cat("route --tokens ", tokens, " --experts ", m.E, " --topk ", m.topk, " --block-rows 64",
                             m.sigmoid ? " --sigmoid" : "", " --reps ", reps));
        std::string ratio = "-";
        char ours[32], tus[32] = "-";
        std::snprintf(ours, sizeof ours, "%.1f", ms * 1e3);
        if (theirs != "-") {
          const double t = std::atof(theirs.c_str());
          std::snprintf(tus, sizeof tus, "%.1f", t * 1e3);
          ratio = str_cat(t / ms);
        }
        std::printf("%-16s %7d %5d %5d %10s %10s %8.8s\n", m.name, tokens, m.E, m.topk, ours, tus, ratio.c_str());
      }
  } catch (const Error& e) {
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
