// model_bench: a model's decoder layers end to end (model/model.h, issue 32) against
// the same layers in PyTorch (bench/model_baseline.py: NCCL + cuBLAS + SDPA, run as a child
// process of every rank with the same config and seed, so both compute the same model), in the
// same run: the prefill's time and tokens/s for both, and how far apart their hidden states are.
//
//   tiledist-run -n N model_bench [reps] [--config qwen3-32b|FILE] [--layers L]
//                                 [--seqlens 1024,4096,16384] [--batch B]
//                                 [--decode-batches 1,16,128] [--prompt P] [--steps K]
//
// Prefill rows: B sequences of S tokens through L layers; decode rows: a step of one token a
// sequence after a prompt of P tokens (at most 32768 / batch: the prefill's GEMMs index 32-bit;
// the median of K steps as the model goes, a dense model's as one graph a step, after K steps
// with each kernel launched as it comes, whose median a line below says; then a dense model's
// steps as one persistent kernel (mega::MegaKernel) against the graph's and PyTorch's in a CUDA
// graph, with the rate its weights are read at), tensor parallel over the job's
// ranks (the ranks may share a GPU: correctness then, not speed). "error": the relative error in
// norm between the two sides' hidden states after the L layers (every rank's tokens; the
// largest of the ranks'), against the bound stated below. PyTorch's python:
// $TILEDIST_TORCH_PYTHON (default /opt/torch/.venv/bin/python), the script
// $TILEDIST_MODEL_BASELINE or bench/model_baseline.py; where either is missing, ours alone.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/timing.h"
#include "kernels/reference.h"
#include "kernels/symmetric.h"
#include "model/model.h"
#include "tiledist.h"

namespace {
using namespace tiledist;

// bf16 activations between the kernels on both sides, rounded at other places (ours keeps the
// residual stream as f32 + bf16, PyTorch's in bf16): the bound on their relative error after
// the layers.
constexpr double kBound = 0x1p-5;

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::atoi(item.c_str()));
  return v;
}

std::vector<float> read_f32(const std::string& path, size_t count) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v(count);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * sizeof(float)));
  if (!f || f.gcount() != std::streamsize(count * sizeof(float))) return {};
  return v;
}

int run(int argc, char** argv) {
  int reps = 5, layers = 2, batch = 1, prompt = 512, steps = 8;
  std::string config_name = "qwen3-32b", seqlens = "1024,4096,16384", decode_batches = "1,16,128";
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') reps = std::max(1, std::atoi(argv[i++]));
  for (; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--config")
      config_name = v;
    else if (a == "--layers")
      layers = std::atoi(v.c_str());
    else if (a == "--seqlens")
      seqlens = v;
    else if (a == "--batch")
      batch = std::atoi(v.c_str());
    else if (a == "--decode-batches")
      decode_batches = v;
    else if (a == "--prompt")
      prompt = std::atoi(v.c_str());
    else if (a == "--steps")
      steps = std::max(1, std::atoi(v.c_str()));
    else
      throw Error(str_cat("model_bench: unknown option '", a, "'"));
  }
  if (i < argc) throw Error(str_cat("model_bench: option '", argv[i], "' needs a value"));
  const Target target = Target::cuda();
  const model::ModelConfig c = model::ModelConfig::load(config_name);
  const int n = world_size(), me = rank();
  auto [python, script] = bench::find_torch(argv[0], "TILEDIST_MODEL_BASELINE", "model_baseline.py");
  if (me == 0) {
    const auto& dev = cuda::device();
    std::printf("model_bench on %s (%s, %d SMs), %d rank%s\n", dev.name.c_str(), dev.arch().c_str(), dev.sms, n,
                n == 1 ? "" : "s");
    if (python.empty()) std::printf("(torch baseline not run: no PyTorch python, or no bench/model_baseline.py)\n");
    const std::string mlp = c.moe() ? str_cat(c.experts, " experts of ", c.expert_intermediate, ", top-", c.topk)
                                    : str_cat("intermediate ", c.intermediate);
    std::printf(
        "\n%s (hidden %lld, %lld/%lld heads of %lld, %s), %d layers, prefill of %d sequence%s, bf16; "
        "median of %d; error: relative, in norm, bound %.3g\n",
        c.name.c_str(), (long long)c.hidden, (long long)c.heads, (long long)c.kv_heads, (long long)c.head_dim,
        mlp.c_str(), layers, batch, batch == 1 ? "" : "s", reps, kBound);
    std::printf("%15s %10s %12s %10s %12s %8s %10s\n", "prefill", "ours ms", "per s", "torch ms", "per s", "ratio",
                "error");
  }
  auto* errors = symm_alloc<double>(1).data();
  const uint64_t seed = 20261207;
  int port = 29711;
  bool all_agree = true;
  // Ranks that share a GPU: PyTorch's side runs as one process (NCCL takes no two ranks on one
  // GPU) on rank 0, and every rank compares its rows with that whole model's; its time is then
  // one GPU's alone, no ratio.
  const bool shared = kernels::detail::gpus_shared(target);
  auto* pid0 = symm_alloc<int64_t>(1).data();
  if (me == 0) *pid0 = getpid();
  barrier_all();
  const int64_t torch_pid = *symm_at(pid0, 0);
  // PyTorch's side of a row (`args`: its mode and shape): its milliseconds (0 where it did not
  // run), and the relative error of `ours` against its hidden states (rows from `first` of the
  // whole model's where one process ran it) in *errors (-1: none).
  double torch_graph_ms = 0;      // (the last decode row's PyTorch in a CUDA graph, where it ran)
  double torch_graph_error = -1;  // (its last step's hidden states against the eager steps', relative)
  auto torch_side = [&](const std::string& args, const std::vector<float>& ours, int64_t first, int64_t all_rows) {
    *errors = -1;
    torch_graph_ms = 0, torch_graph_error = -1;
    ++port;
    if (python.empty()) return 0.0;
    barrier_all();  // (every rank's torch process starts with the others')
    const std::string out = str_cat("/tmp/model_bench.", shared ? torch_pid : int64_t(getpid()), ".f32");
    std::string text = "ms 0";
    bool good = true;
    if (!shared || me == 0) {
      const std::string cmd =
          str_cat("RANK=", shared ? 0 : me, " WORLD_SIZE=", shared ? 1 : n, " MASTER_ADDR=127.0.0.1 MASTER_PORT=", port,
                  " ", python, " ", script, " ", args, " --hidden ", c.hidden, " --heads ", c.heads, " --kv-heads ",
                  c.kv_heads, " --head-dim ", c.head_dim, " --inter ", c.intermediate, " --experts ", c.experts,
                  " --topk ", c.topk, " --expert-inter ", c.expert_intermediate, " --eps ", c.rms_eps, " --theta ",
                  c.rope_theta, " --layers ", layers, " --seed ", seed, " --check --out ", out);
      std::tie(text, good) = bench::run_command(cmd);
    }
    if (shared) barrier_all();  // (rank 0's file written)
    const int64_t H = c.hidden;
    std::vector<float> want = read_f32(out, shared ? size_t(all_rows * H) : ours.size());
    if (shared && !want.empty())
      want = std::vector<float>(want.begin() + first * H, want.begin() + first * H + int64_t(ours.size()));
    if (shared) barrier_all();  // (every rank has read it)
    if (!shared || me == 0) std::remove(out.c_str());
    const std::string ms = bench::field(text, "ms");
    torch_graph_ms = std::atof(bench::field(text, "graph_ms").c_str());
    const std::string graph_error = bench::field(text, "graph_error");
    torch_graph_error = graph_error.empty() ? -1 : std::atof(graph_error.c_str());
    if (!good || ms.empty() || want.empty()) {
      std::printf("[rank %d] (torch failed: %s)\n", me, text.c_str());
      return 0.0;
    }
    *errors = reference::rel_error(ours, want);
    return std::atof(ms.c_str());
  };
  // A row's line on rank 0: what it counts (tokens, or the batch), ours and theirs in ms and
  // tokens per second, their ratio, the largest of the ranks' errors (and whether it held).
  auto row = [&](const char* what, int64_t count, int64_t tokens, double ours, double theirs) {
    barrier_all();
    if (me == 0) {
      double worst = 0;
      bool compared = true;
      for (int r = 0; r < n; ++r) {
        const double e = *symm_at(errors, r);
        compared = compared && e >= 0;
        worst = std::max(worst, e);
      }
      all_agree = all_agree && (!compared || worst <= kBound);
      char t[32] = "-", tt[32] = "-", ratio[32] = "-", err[48] = "-";
      if (theirs > 0) {
        std::snprintf(t, sizeof t, "%.3f", theirs);
        std::snprintf(tt, sizeof tt, "%.0f", double(tokens) / (theirs * 1e-3));
        if (!shared) std::snprintf(ratio, sizeof ratio, "%.3f", theirs / ours);
      }
      if (compared && theirs > 0) std::snprintf(err, sizeof err, "%.4f%s", worst, worst <= kBound ? "" : " (past)");
      std::printf("%8lld %-6s %10.3f %12.0f %10s %12s %8s %10s\n", (long long)count, what, ours,
                  double(tokens) / (ours * 1e-3), t, tt, ratio, err);
    }
    barrier_all();
  };
  for (int S : parse_list(seqlens)) {
    const int64_t T = int64_t(batch) * S;
    auto m = std::make_unique<model::Model>(target, c, layers, batch, S, seed);
    const runtime::Stream stream;
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {  // (the first compiles and warms)
      barrier_all();
      const auto start = std::chrono::steady_clock::now();
      m->prefill(&stream);
      stream.synchronize();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (r > 0) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double ours = times[times.size() / 2];
    const std::vector<float> out = m->hidden();
    m.reset();  // (its memory back before PyTorch's process takes the GPU's)
    const double theirs =
        torch_side(str_cat("prefill --batch ", batch, " --seqlen ", S, " --reps ", reps), out, me * (T / n), T);
    row("tokens", T, T, ours, theirs);
  }
  if (me == 0 && !decode_batches.empty())
    std::printf("\n%15s  (a step of one token a sequence after a prompt of %d tokens, the median of %d steps)\n",
                "decode", prompt, steps);
  for (int B : parse_list(decode_batches)) {
    if (c.moe() && B % n != 0) {  // (a MoE model's decode batch: a multiple of the ranks)
      if (me == 0)
        std::printf("%8d %-6s (not a multiple of the %d ranks: a MoE decode step shares its batch)\n", B, "batch", n);
      continue;
    }
    // (the prompt's prefill at most 32768 tokens in all: the MLP's GEMM output under 2^31 elements)
    const int P = std::max(1, std::min(prompt, 32768 / B));
    // K steps with each kernel launched as it comes, then K as the model goes by default (a
    // dense model's: one graph a step, the first of them captured), then a dense model's K as
    // one persistent kernel a step (mega::MegaKernel, made at the first: K steps, then K timed)
    const int total = c.moe() ? 2 * steps : 4 * steps;
    auto m = std::make_unique<model::Model>(target, c, layers, B, P, seed, total);
    const runtime::Stream stream;
    m->prefill(&stream);
    auto median_step = [&] {
      std::vector<double> times;
      for (int k = 0; k < steps; ++k) {
        stream.synchronize();
        barrier_all();
        const auto start = std::chrono::steady_clock::now();
        m->decode(&stream);
        stream.synchronize();
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    m->set_decode_graph(false);
    const double eager = median_step();
    m->set_decode_graph(true);
    const double ours = median_step();
    double mega = 0;
    if (!c.moe()) {
      m->set_decode_mega(true);
      median_step();  // (the first step makes the kernel)
      mega = median_step();
    }
    const std::vector<float> out = m->decoded();
    m.reset();
    // (PyTorch's steps as many, eagerly, then again each a CUDA graph's replay: the same last step)
    const double theirs = torch_side(
        str_cat("decode --batch ", B, " --seqlen ", P, " --steps ", total, c.moe() ? "" : " --graph"), out, 0, B);
    row(P == prompt ? "batch" : str_cat("batch (", P, " tokens)").c_str(), B, B, ours, theirs);
    if (me == 0 && !c.moe()) {
      std::printf("%15s  (each kernel launched as it comes: %.3f ms)\n", "", eager);
      // The weights a step reads (every layer's, this rank's share) at the persistent kernel's pace.
      const double bytes = double(layers) * 2 *
                           double(c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim + c.heads * c.head_dim * c.hidden +
                                  3 * c.hidden * c.intermediate) /
                           n;
      // (and the share of the memory's peak that is: issue 33's measure at batch 1)
      const double rate = bytes / (mega * 1e-3), peak = cuda::device().memory_bytes_per_s;
      const std::string share =
          peak > 0 ? str_cat(", ", int(100 * rate / peak + 0.5), "% of the HBM's ", int(peak / 1e9 + 0.5), " GB/s")
                   : std::string();
      std::printf(
          "%15s  (one persistent kernel: %.3f ms, %.3fx the graph's, %.3fx PyTorch's graph's; weights read "
          "at %.0f GB/s%s; the graph's %.0f GB/s)\n",
          "", mega, ours / mega, torch_graph_ms > 0 ? torch_graph_ms / mega : 0.0, rate / 1e9, share.c_str(),
          bytes / (ours * 1e-3) / 1e9);
      if (torch_graph_ms > 0)
        // (its attention is another kernel than the eager steps' (masked, over the whole cache):
        // held to the bound ours are)
        std::printf("%15s  (PyTorch in a CUDA graph: %.3f ms, its last step %.4f from the eager steps'%s)\n", "",
                    torch_graph_ms, torch_graph_error, torch_graph_error <= kBound ? "" : " (past the bound)");
    }
  }
  symm_free(pid0);
  symm_free(errors);
  return all_agree ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (!tiledist::cuda::available()) {
    std::printf("model_bench: skipped, no CUDA GPU (%s)\n", tiledist::cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    return run(argc, argv);
  } catch (const tiledist::Error& e) {
    std::fprintf(stderr, "model_bench: %s\n", e.what());
    return 1;
  }
}
