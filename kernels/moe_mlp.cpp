// A tensor-parallel MoE MLP as one host call (kernels/moe.h, MoeMlp): the tokens gathered and
// multiplied by the experts' gate and up projections (AgMoe), SwiGLU (moe_swiglu, below), then
// the down projection with the top-k combine and the reduce-scatter (MoeReduce), all queued on
// one stream. Routing, where the call is given logits, is the ranks' own (MoeRouting over this
// rank's tokens), its ids and weights then gathered with the tokens.
#include "kernels/moe.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// act[row, i] = silu(gu[row, i]) * gu[row, I + i] (f32, rounded to bf16 once), for the rows the
/// routing uses (starts[G] of them: the pad rows past the last group are left).
void moe_swiglu(tl::Ptr<bf16> gu, tl::Ptr<bf16> act, tl::Ptr<int32_t> starts, tl::Int G, tl::Int I, tl::Const<int> BR,
                tl::Const<int> BI) {
  auto used = tl::load(starts + G);
  auto row = tl::expand_dims(tl::program_id(0) * BR + tl::arange(0, BR), 1);
  auto i = tl::expand_dims(tl::program_id(1) * BI + tl::arange(0, BI), 0);
  auto mask = (row < used) & (i < I);
  auto g = tl::load(gu + row * (2 * I) + i, mask, 0.0f).to(tl::float32);
  auto u = tl::load(gu + row * (2 * I) + I + i, mask, 0.0f).to(tl::float32);
  tl::store(act + row * I + i, (g / (1.0f + tl::exp(-g)) * u).to(tl::bfloat16), mask);
}
constexpr int kRowsPerProgram = 16, kColumnsPerProgram = 256;
}  // namespace

const KernelDef& moe_swiglu_kernel() {
  static const KernelDef def("moe_swiglu", moe_swiglu, {"gu", "act", "starts", "G", "I", "BR", "BI"},
                             {{"BR", 16}, {"BI", 256}});
  return def;
}
TILEDIST_REGISTER(moe_swiglu_kernel());

struct MoeMlp::State {
  Target target;
  int ranks = 1, topk = 1;
  int64_t tokens = 0, inter = 0, E = 0;  // inter: this rank's slice of the intermediate size
  std::unique_ptr<AgMoe> up;
  std::unique_ptr<MoeReduce> down;
  std::unique_ptr<MoeRouting> local;  // for runs given logits
  MoeRouting::Options local_options;
  Kernel swiglu;
  detail::Scratch<bf16> gu, act;  // [rows, 2 * inter], [rows, inter]
};

MoeMlp::MoeMlp(const Target& target, int64_t tokens, int64_t hidden, int64_t intermediate, int64_t experts, int topk,
               MoeReduce::Mode mode)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.ranks = detail::world_ranks(target);
  if (intermediate < 1 || intermediate % s.ranks)
    throw Error(str_cat("tiledist: moe_mlp: an intermediate size of ", intermediate, " does not split over ", s.ranks,
                        " ranks"));
  s.tokens = tokens, s.inter = intermediate / s.ranks, s.E = experts, s.topk = topk;
  s.up = std::make_unique<AgMoe>(target, tokens, 2 * s.inter, hidden, experts, topk);
  s.down = std::make_unique<MoeReduce>(target, tokens, hidden, s.inter, experts, topk, mode);
  if (s.up->config().bm != s.down->config().bm)
    throw Error(str_cat("tiledist: moe_mlp: the gate/up GEMM's ", s.up->config().bm, "-row tiles and the down GEMM's ",
                        s.down->config().bm, " differ (one routing serves both)"));
  const int64_t rows = s.up->rows();
  s.gu = detail::Scratch<bf16>(target, size_t(rows * 2 * s.inter));
  s.act = detail::Scratch<bf16>(target, size_t(rows * s.inter));
  s.swiglu = compile(moe_swiglu_kernel(), {{"BR", kRowsPerProgram}, {"BI", kColumnsPerProgram}}, target);
}

MoeMlp::~MoeMlp() = default;

void MoeMlp::run(const bf16* x, const int32_t* topk_ids, const float* topk_weights, const bf16* w13, const bf16* w2,
                 bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  if (s.tokens > 0 && !topk_weights) throw Error("tiledist: moe_mlp: no top-k weights (a null pointer)");
  s.up->run(x, topk_ids, topk_weights, w13, s.gu.data(), stream);
  const MoeRouting& routing = s.up->routing();
  const runtime::Stream* on = detail::on_gpu(s.target) ? (stream ? stream : &runtime::Stream::legacy()) : nullptr;
  const Grid grid(static_cast<int>((s.up->rows() + kRowsPerProgram - 1) / kRowsPerProgram),
                  static_cast<int>((s.inter + kColumnsPerProgram - 1) / kColumnsPerProgram));
  detail::launch(s.swiglu, on, grid, static_cast<const bf16*>(s.gu.data()), s.act.data(), routing.group_starts(),
                 static_cast<int>(routing.experts() * routing.segments()), static_cast<int>(s.inter));
  s.down->run(s.act.data(), routing, s.up->gathered_weights(), w2, out, stream);
}

void MoeMlp::run(const bf16* x, const float* logits, const bf16* w13, const bf16* w2, bf16* out,
                 const runtime::Stream* stream, MoeRouting::Options options) {
  State& s = *s_;
  options.segments = 1;
  if (!s.local || s.local_options.scores != options.scores || s.local_options.renormalize != options.renormalize) {
    s.local = std::make_unique<MoeRouting>(s.target, s.tokens, s.E, s.topk, options);
    s.local_options = options;
  }
  s.local->run(logits, s.tokens, stream);
  run(x, s.local->topk_ids(), s.local->topk_weights(), w13, w2, out, stream);
}

int64_t MoeMlp::intermediate_per_rank() const { return s_->inter; }

}  // namespace tiledist::kernels
