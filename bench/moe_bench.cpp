// MoE kernels on one CUDA GPU, beside PyTorch doing the same work in the same run (the PyTorch
// side is bench/moe_baseline.py, run as a child process where PyTorch's python is found:
// $TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python). Skips (exit 0) where there is
// no GPU.
//
//   moe_bench [reps] [routing|mlp|gemm|reduce] [LAYER]   (LAYER: only the rows whose name contains it)
//   tiledist-run -n N moe_bench [reps] dist
//
// Routing: kernels::MoeRouting (top-k of f32 logits, then the slots sorted by expert into BM-row
// tiles) against softmax/sigmoid + torch.topk + the same sort in torch ops, at the shapes of
// real models (the acceptance: 16384 tokens over 128 experts in at most 50 us on one
// H200).
//
// MoE MLP (one rank: no communication, the gathers are copies within the GPU): kernels::MoeMlp
// (routing's sort, gate/up GEMM gathering the tokens, SwiGLU, down GEMM with the top-k combine)
// against the same layer in PyTorch (argsort + bincount, the tokens permuted, two
// torch._grouped_mm, silu * up, the scores, index_add_), bf16, top-k of random logits on both
// sides; TFLOP/s of 6 * tokens * k * hidden * intermediate. Then the same layer with f8e4m3
// weights and DeepSeek-V3's 128 x 128 block scales (MoeMlp's f8 form: the activations quantized
// per token and 128 columns in the kernels), against PyTorch's own f8 MoE path (the rows
// quantized per row, torch._scaled_grouped_mm with rowwise scales twice) and against its bf16
// layer above.
//
// reduce: the MoE down projection alone (MoeReduce on one rank: the grouped GEMM over the
// routing's sorted rows, the top-k combine) at Triton-distributed's test_moe_reduce_rs.py /
// test_moe_reduce_ar.py shapes (M tokens, N hidden, K the intermediate size, E, top-k; "/8": a
// rank's slice of K at the 8 ranks those tests run on), against
// torch._grouped_mm over the same sorted rows, the scores and index_add_; TFLOP/s of
// 2 * tokens * k * N * K.
//
// dist: the tensor-parallel MoE MLP over the ranks of the job (one process per GPU), each rank
// holding its tokens and its slice of every expert's intermediate size: kernels::MoeMlp (the
// gather under the gate/up GEMM, the reduce-scatter under the down GEMM) against PyTorch's
// tensor-parallel layer in the same job (moe_baseline.py mlp-dist, a process beside each rank
// in a torch.distributed group of its own: NCCL's all-gather, two torch._grouped_mm, NCCL's
// reduce-scatter), and against the same MoeMlp with its overlap off (set_overlap(false): the
// gather, the gate/up GEMM, SwiGLU, the down GEMM and the reduce-scatter one after the other;
// "one-by-one", its time, and its ratio to the overlapped layer's); rank 0 prints.
//
// The MoE up projection alone (AgMoe on one rank) at Triton-distributed's test_ag_moe.py layer
// shapes (M = 2048 tokens; its N is the whole layer's, here on one rank), against the slots
// sorted, the tokens permuted and torch._grouped_mm; TFLOP/s of 2 * tokens * k * N * K.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "bench/fill_random.h"
#include "bench/timing.h"
#include "kernels/moe.h"

namespace {
/// The rows to run: those whose name contains moe_bench's third argument (every row without one).
std::string g_layer;
bool wanted(const char* name) { return g_layer.empty() || std::string(name).find(g_layer) != std::string::npos; }

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

/// PyTorch's side of a row: its time for `args` (`unit` per ms, printed by `fmt`) and ours over
/// it as a ratio, both "-" where it did not run.
struct Versus {
  std::string theirs = "-", ratio = "-";
};
Versus versus_torch(const std::string& python, const std::string& script, const std::string& args, double ours_ms,
                    double unit = 1, const char* fmt = "%.3f") {
  Versus v;
  if (python.empty()) return v;
  auto [out, good] = bench::run_command(python + " " + script + " " + args);
  const size_t at = out.rfind("ms ");
  if (!good || at == std::string::npos) {
    std::printf("(torch failed: %s)\n", out.c_str());
    return v;
  }
  const double t = std::atof(out.c_str() + at + 3);
  char b[32];
  std::snprintf(b, sizeof b, fmt, t * unit), v.theirs = b;
  std::snprintf(b, sizeof b, "%.3f", t / ours_ms), v.ratio = b;
  return v;
}
void routing(const Target& target, const std::string& python, const std::string& script, int reps) {
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
      const Versus torch = versus_torch(python, script,
                                        str_cat("route --tokens ", tokens, " --experts ", m.E, " --topk ", m.topk,
                                                " --block-rows 64", m.sigmoid ? " --sigmoid" : "", " --reps ", reps),
                                        ms, 1e3, "%.1f");
      std::printf("%-16s %7d %5d %5d %10.1f %10s %8s\n", m.name, tokens, m.E, m.topk, ms * 1e3, torch.theirs.c_str(),
                  torch.ratio.c_str());
    }
}

/// Our MoE MLP (MoeMlp over the job's ranks, `tokens` a rank; bf16, or f8e4m3 weights with
/// block scales of 0.01) on random inputs, top-k of random logits: the median ms of `reps` runs,
/// every rank starting together. The weights are freed on return.
/// `sequential`, where given: the same layer's time with the overlap off (MoeMlp::set_overlap:
/// our kernels one after the other), on the same weights.
double time_mlp(const Target& target, int tokens, int hidden, int inter, int E, int topk, int reps,
                ir::DType weights = ir::DType::bf16, double* sequential = nullptr) {
  kernels::MoeMlp layer(target, tokens, hidden, inter, E, topk, kernels::MoeReduce::Mode::reduce_scatter, weights);
  const int64_t I = layer.intermediate_per_rank();
  MoeRouting route(target, tokens, E, topk);
  cuda::Buffer<float> logits(size_t(tokens) * E);
  cuda::Buffer<bf16> x(size_t(tokens) * hidden), out(size_t(tokens) * hidden);
  bench::fill_random(logits);
  bench::fill_random(x);
  route.run(logits.data(), tokens);
  auto time = [&](auto& w13, auto& w2, const float* s13, const float* s2) {
    bench::fill_random(w13);
    bench::fill_random(w2);
    barrier_all();
    auto run = [&] {
      if constexpr (std::is_same_v<std::decay_t<decltype(w13)>, cuda::Buffer<bf16>>)
        layer.run(x.data(), route.topk_ids(), route.topk_weights(), w13.data(), w2.data(), out.data(),
                  &runtime::Stream::legacy());
      else
        layer.run(x.data(), route.topk_ids(), route.topk_weights(), w13.data(), s13, w2.data(), s2, out.data(),
                  &runtime::Stream::legacy());
    };
    const double ms = bench::median_ms(run, reps, /*warmup*/ 2);
    if (sequential) {
      layer.set_overlap(false);  // (compiles the kernels' other form: every rank's, then the timing)
      barrier_all();
      *sequential = bench::median_ms(run, reps, /*warmup*/ 2);
      layer.set_overlap(true);
    }
    return ms;
  };
  const size_t n13 = size_t(E) * 2 * I * hidden, n2 = size_t(E) * hidden * I;
  if (weights == ir::DType::bf16) {
    cuda::Buffer<bf16> w13(n13), w2(n2);
    return time(w13, w2, nullptr, nullptr);
  }
  auto blocks = [](int64_t n) { return (n + 127) / 128; };
  cuda::Buffer<f8e4m3> w13(n13), w2(n2);
  cuda::Buffer<float> s13(std::vector<float>(size_t(E * blocks(2 * I) * blocks(hidden)), 0.01f));
  cuda::Buffer<float> s2(std::vector<float>(size_t(E * blocks(hidden) * blocks(I)), 0.01f));
  return time(w13, w2, s13.data(), s2.data());
}

void mlp(const Target& target, const std::string& python, const std::string& script, int reps) {
  struct Shape {
    const char* name;
    int tokens, hidden, inter, E, topk;
  };
  std::printf("\nMoE MLP, one rank (bf16, top-k of random logits); median of %d runs\n", reps);
  std::printf("%-16s %7s %6s %6s %5s %4s %10s %9s %10s %8s %10s %9s %10s %8s %8s\n", "model", "tokens", "hidden",
              "inter", "E", "top", "ours ms", "TFLOP/s", "torch ms", "ratio", "f8 ms", "TFLOP/s", "torch f8", "ratio",
              "vs bf16");
  // (DeepSeek-V3 /8 and /4: a rank's slice of the intermediate size at 8- and 4-way tensor
  // parallelism, 2048 / 8 and 2048 / 4 (the work of a rank of `dist` on 4 GPUs): the whole layer's
  // weights are past the kernels' 2^31 elements; Mixtral-8x7B /4 likewise, at dist's 8192 tokens)
  for (Shape m : {Shape{"Qwen3-30B-A3B", 4096, 2048, 768, 128, 8}, Shape{"Qwen3-30B-A3B", 16384, 2048, 768, 128, 8},
                  Shape{"DeepSeek-V3 /8", 4096, 7168, 256, 256, 8}, Shape{"DeepSeek-V3 /4", 4096, 7168, 512, 256, 8},
                  Shape{"Mixtral-8x7B", 4096, 4096, 14336, 8, 2}, Shape{"Mixtral-8x7B /4", 8192, 4096, 3584, 8, 2}}) {
    if (!wanted(m.name)) continue;
    const double ms = time_mlp(target, m.tokens, m.hidden, m.inter, m.E, m.topk, reps);
    const double flop = 6.0 * m.tokens * m.topk * double(m.hidden) * m.inter;
    const Versus torch = versus_torch(python, script,
                                      str_cat("mlp --tokens ", m.tokens, " --experts ", m.E, " --topk ", m.topk,
                                              " --hidden ", m.hidden, " --inter ", m.inter, " --reps ", reps),
                                      ms);
    const double ms8 = time_mlp(target, m.tokens, m.hidden, m.inter, m.E, m.topk, reps, ir::DType::f8e4m3);
    const Versus torch8 = versus_torch(python, script,
                                       str_cat("mlp --fp8 --tokens ", m.tokens, " --experts ", m.E, " --topk ", m.topk,
                                               " --hidden ", m.hidden, " --inter ", m.inter, " --reps ", reps),
                                       ms8);
    char vs_bf16[32] = "-";
    if (torch.theirs != "-") std::snprintf(vs_bf16, sizeof vs_bf16, "%.3f", std::atof(torch.theirs.c_str()) / ms8);
    std::printf("%-16s %7d %6d %6d %5d %4d %10.3f %9.1f %10s %8s %10.3f %9.1f %10s %8s %8s\n", m.name, m.tokens,
                m.hidden, m.inter, m.E, m.topk, ms, flop / ms / 1e9, torch.theirs.c_str(), torch.ratio.c_str(), ms8,
                flop / ms8 / 1e9, torch8.theirs.c_str(), torch8.ratio.c_str(), vs_bf16);
  }
}
void up_projection(const Target& target, const std::string& python, const std::string& script, int reps) {
  struct Shape {
    const char* name;
    int N, K, E, topk;
  };
  const int tokens = 2048;
  std::printf("\nMoE up projection (AgMoe, one rank), test_ag_moe.py's layers, %d tokens; median of %d runs\n", tokens,
              reps);
  std::printf("%-20s %6s %6s %4s %4s %10s %9s %10s %8s\n", "layer", "N", "K", "E", "top", "ours ms", "TFLOP/s",
              "torch ms", "ratio");
  for (Shape m : {Shape{"Dummy Model", 8192, 8192, 32, 3}, Shape{"Qwen1.5-MoE-A2.7B", 1408, 2048, 60, 4},
                  Shape{"Mixtral-8x7B", 4096, 14336, 8, 2}, Shape{"Mixtral-8x22B", 6144, 16384, 8, 2},
                  Shape{"DeepSeek-MoE", 2048, 1408, 64, 6}}) {
    if (!wanted(m.name)) continue;
    try {
      kernels::AgMoe op(target, tokens, m.N, m.K, m.E, m.topk);
      MoeRouting route(target, tokens, m.E, m.topk);
      cuda::Buffer<float> logits(size_t(tokens) * m.E);
      cuda::Buffer<bf16> x(size_t(tokens) * m.K), w(size_t(m.E) * m.N * m.K), out(size_t(op.rows()) * m.N);
      bench::fill_random(logits);
      bench::fill_random(x);
      bench::fill_random(w);
      route.run(logits.data(), tokens);
      const double ms = bench::median_ms(
          [&] { op.run(x.data(), route.topk_ids(), w.data(), out.data(), &runtime::Stream::legacy()); }, reps, 2);
      const double flop = 2.0 * tokens * m.topk * double(m.N) * m.K;
      const Versus torch = versus_torch(python, script,
                                        str_cat("gemm --tokens ", tokens, " --experts ", m.E, " --topk ", m.topk,
                                                " --n ", m.N, " --k ", m.K, " --reps ", reps),
                                        ms);
      std::printf("%-20s %6d %6d %4d %4d %10.3f %9.1f %10s %8s\n", m.name, m.N, m.K, m.E, m.topk, ms, flop / ms / 1e9,
                  torch.theirs.c_str(), torch.ratio.c_str());
    } catch (const Error& e) {
      std::printf("%-20s %s\n", m.name, e.what());
    }
  }
}
/// The down projection alone (see the header).
void down_projection(const Target& target, const std::string& python, const std::string& script, int reps) {
  struct Shape {
    const char* name;
    int tokens, N, K, E, topk;
  };
  std::printf(
      "\nMoE down projection + top-k combine (MoeReduce, one rank), test_moe_reduce_rs.py's shapes; median of "
      "%d runs\n",
      reps);
  std::printf("%-22s %6s %6s %6s %4s %4s %10s %9s %10s %8s\n", "case", "tokens", "N", "K", "E", "top", "ours ms",
              "TFLOP/s", "torch ms", "ratio");
  for (Shape m : {Shape{"moe_reduce_rs 1 /8", 8192, 2048, 1536 / 8, 32, 2},
                  Shape{"moe_reduce_rs 2 /8", 8192, 14336, 4096 / 8, 64, 4}}) {
    if (!wanted(m.name)) continue;
    try {
      kernels::MoeReduce op(target, m.tokens, m.N, m.K, m.E, m.topk);
      MoeRouting route(target, m.tokens, m.E, m.topk, {MoeRouting::Scores::softmax, true, op.config().bm, 1});
      cuda::Buffer<float> logits(size_t(m.tokens) * m.E);
      cuda::Buffer<bf16> act(size_t(route.rows()) * m.K), w(size_t(m.E) * m.N * m.K), out(size_t(m.tokens) * m.N);
      bench::fill_random(logits);
      bench::fill_random(act);
      bench::fill_random(w);
      route.run(logits.data(), m.tokens);
      const double ms = bench::median_ms(
          [&] { op.run(act.data(), route, route.topk_weights(), w.data(), out.data(), &runtime::Stream::legacy()); },
          reps, 2);
      const double flop = 2.0 * m.tokens * m.topk * double(m.N) * m.K;
      const Versus torch = versus_torch(python, script,
                                        str_cat("reduce --tokens ", m.tokens, " --experts ", m.E, " --topk ", m.topk,
                                                " --n ", m.N, " --k ", m.K, " --reps ", reps),
                                        ms);
      std::printf("%-22s %6d %6d %6d %4d %4d %10.3f %9.1f %10s %8s\n", m.name, m.tokens, m.N, m.K, m.E, m.topk, ms,
                  flop / ms / 1e9, torch.theirs.c_str(), torch.ratio.c_str());
    } catch (const Error& e) {
      std::printf("%-22s %s\n", m.name, e.what());
    }
  }
}

/// The tensor-parallel MoE MLP over the job's ranks (see the header).
void mlp_dist(const Target& target, const std::string& python, const std::string& script, int reps) {
  struct Shape {
    const char* name;
    int tokens, hidden, inter, E, topk;  // tokens: the whole batch's
  };
  const int n = world_size(), me = rank();
  if (me == 0) {
    std::printf("\nMoE MLP, tensor-parallel over %d ranks (bf16, top-k of random logits); median of %d runs\n", n,
                reps);
    std::printf("%-16s %7s %6s %6s %5s %4s %10s %9s %10s %8s %12s %8s\n", "model", "tokens", "hidden", "inter", "E",
                "top", "ours ms", "TFLOP/s", "torch ms", "ratio", "one-by-one", "ratio");
  }
  int port = 29611;
  for (Shape m : {Shape{"Qwen3-30B-A3B", 8192, 2048, 768, 128, 8}, Shape{"DeepSeek-V3", 4096, 7168, 2048, 256, 8},
                  Shape{"Mixtral-8x7B", 8192, 4096, 14336, 8, 2}}) {
    if (!wanted(m.name)) continue;
    ++port;
    const int T = m.tokens / n;
    try {
      double sequential = 0;
      const double ms = time_mlp(target, T, m.hidden, m.inter, m.E, m.topk, reps, ir::DType::bf16, &sequential);
      barrier_all();  // (every rank's torch process starts with the others')
      const std::string env = str_cat("RANK=", me, " WORLD_SIZE=", n, " MASTER_ADDR=127.0.0.1 MASTER_PORT=", port, " ");
      const Versus torch = versus_torch(python.empty() ? python : env + python, script,
                                        str_cat("mlp-dist --tokens ", T, " --experts ", m.E, " --topk ", m.topk,
                                                " --hidden ", m.hidden, " --inter ", m.inter, " --reps ", reps),
                                        ms);
      const double flop = 6.0 * m.tokens * m.topk * double(m.hidden) * m.inter / n;  // a rank's
      if (me == 0)
        std::printf("%-16s %7d %6d %6d %5d %4d %10.3f %9.1f %10s %8s %12.3f %8.3f\n", m.name, m.tokens, m.hidden,
                    m.inter, m.E, m.topk, ms, flop / ms / 1e9, torch.theirs.c_str(), torch.ratio.c_str(), sequential,
                    sequential / ms);
    } catch (const Error& e) {  // (the same on every rank: shapes past the kernels' limits)
      if (me == 0) std::printf("%-16s %s\n", m.name, e.what());
    }
  }
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
  const std::string only = argc > 2 ? argv[2] : "";
  if (argc > 3) g_layer = argv[3];
  try {
    if (only == "dist") {
      mlp_dist(target, python, script, std::max(5, reps / 5));
      return 0;
    }
    if (only != "mlp") routing(target, python, script, reps);
    if (only.empty() || only == "mlp") mlp(target, python, script, std::max(5, reps / 5));
    if (only.empty() || only == "gemm") up_projection(target, python, script, std::max(5, reps / 5));
    if (only.empty() || only == "reduce") down_projection(target, python, script, std::max(5, reps / 5));
  } catch (const Error& e) {
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
