// A tensor-parallel MoE MLP as one host call (kernels/moe.h, MoeMlp): the tokens gathered and
// multiplied by the experts' gate and up projections (AgMoe), SwiGLU (moe_swiglu, below), then
// the down projection with the top-k combine and the reduce-scatter (MoeReduce), all queued on
// one stream. Routing, where the call is given logits, is the ranks' own (MoeRouting over this
// rank's tokens), its ids and weights then gathered with the tokens.
#include "kernels/moe.h"
#include "kernels/moe_tile.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// act[row, i] = silu(gu[row, i]) * gu[row, I + i] (f32, rounded to bf16 once; T = f8e4m3:
/// quantized per row and 128 columns, BI = 128, the scales into act_scales [rows, cdiv(I, 128)]),
/// for the rows the routing uses (starts[G] of them: the pad rows past the last group are left).
template <class T>
void moe_swiglu(tl::Ptr<bf16> gu, tl::Ptr<T> act, tl::Ptr<float> act_scales, tl::Ptr<int32_t> starts, tl::Int G,
                tl::Int I, tl::Const<int> BR, tl::Const<int> BI) {
  constexpr bool kF8 = std::is_same_v<T, f8e4m3>;
  if (kF8 && BI != detail::kScaleBlock)
    throw Error(str_cat("tiledist: moe_swiglu_fp8: BI = ", BI.value(), ", the scales' block is 128 (BI = 128)"));
  auto used = tl::load(starts + G);
  auto row = tl::expand_dims(tl::program_id(0) * BR + tl::arange(0, BR), 1);
  auto i = tl::expand_dims(tl::program_id(1) * BI + tl::arange(0, BI), 0);
  auto mask = (row < used) & (i < I);
  auto g = tl::load(gu + row * (2 * I) + i, mask, 0.0f).to(tl::float32);
  auto u = tl::load(gu + row * (2 * I) + I + i, mask, 0.0f).to(tl::float32);
  auto a = g / (1.0f + tl::exp(-g)) * u;
  if constexpr (kF8) {
    auto [q, s] = detail::quantize_rows(a);
    tl::store(act + row * I + i, q, mask);
    tl::store(act_scales + row * ((I + (BI - 1)) / BI) + tl::program_id(1), s, row < used);
  } else {
    tl::store(act + row * I + i, a.to(tl::bfloat16), mask);
  }
}
constexpr int kRowsPerProgram = 16, kColumnsPerProgram = 256;
}  // namespace

const KernelDef& moe_swiglu_kernel(ir::DType act) {
  static const std::vector<std::string> params = {"gu", "act", "act_scales", "starts", "G", "I", "BR", "BI"};
  static const KernelDef bf16_def("moe_swiglu", moe_swiglu<bf16>, params, {{"BR", 16}, {"BI", 256}});
  static const KernelDef f8_def("moe_swiglu_fp8", moe_swiglu<f8e4m3>, params,
                                {{"BR", 16}, {"BI", detail::kScaleBlock}});
  if (act != ir::DType::bf16 && act != ir::DType::f8e4m3)
    throw Error(str_cat("tiledist: moe_swiglu: activations of ", ir::dtype_name(act), " (bf16, or f8e4m3)"));
  return act == ir::DType::f8e4m3 ? f8_def : bf16_def;
}
TILEDIST_REGISTER(moe_swiglu_kernel(ir::DType::bf16));
TILEDIST_REGISTER(moe_swiglu_kernel(ir::DType::f8e4m3));

struct MoeMlp::State {
  Target target;
  int ranks = 1, topk = 1;
  int64_t tokens = 0, inter = 0, E = 0;  // inter: this rank's slice of the intermediate size
  ir::DType dtype = ir::DType::bf16;     // the weights'
  std::unique_ptr<AgMoe> up;
  std::unique_ptr<MoeReduce> down;
  std::unique_ptr<MoeRouting> local;  // for runs given logits
  MoeRouting::Options local_options;
  Kernel swiglu;
  detail::Scratch<bf16> gu, act;     // [rows, 2 * inter], [rows, inter] (bf16 weights)
  detail::Scratch<f8e4m3> act8;      // [rows, inter] (f8e4m3 weights)
  detail::Scratch<float> scales;     // [rows, cdiv(inter, 128)]: act8's
  int columns = kColumnsPerProgram;  // the SwiGLU's per program
};

MoeMlp::MoeMlp(const Target& target, int64_t tokens, int64_t hidden, int64_t intermediate, int64_t experts, int topk,
               MoeReduce::Mode mode, ir::DType weights)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.ranks = detail::world_ranks(target);
  if (intermediate < 1 || intermediate % s.ranks)
    throw Error(str_cat("tiledist: moe_mlp: an intermediate size of ", intermediate, " does not split over ", s.ranks,
                        " ranks"));
  s.tokens = tokens, s.inter = intermediate / s.ranks, s.E = experts, s.topk = topk, s.dtype = weights;
  if (weights != ir::DType::bf16 && weights != ir::DType::f8e4m3)
    throw Error(
        str_cat("tiledist: moe_mlp: weights of ", ir::dtype_name(weights), " (bf16, or f8e4m3 with block scales)"));
  const KernelDef& swiglu = moe_swiglu_kernel(weights);
  s.up = std::make_unique<AgMoe>(target, tokens, 2 * s.inter, hidden, experts, topk, weights);
  s.down = std::make_unique<MoeReduce>(target, tokens, hidden, s.inter, experts, topk, mode, weights);
  if (s.up->config().bm != s.down->config().bm)
    throw Error(str_cat("tiledist: moe_mlp: the gate/up GEMM's ", s.up->config().bm, "-row tiles and the down GEMM's ",
                        s.down->config().bm, " differ (one routing serves both)"));
  const int64_t rows = s.up->rows();
  s.gu = detail::Scratch<bf16>(target, size_t(rows * 2 * s.inter));
  if (weights == ir::DType::f8e4m3) {
    s.act8 = detail::Scratch<f8e4m3>(target, size_t(rows * s.inter));
    s.scales =
        detail::Scratch<float>(target, size_t(rows * ((s.inter + detail::kScaleBlock - 1) / detail::kScaleBlock)));
    s.columns = detail::kScaleBlock;
  } else {
    s.act = detail::Scratch<bf16>(target, size_t(rows * s.inter));
  }
  s.swiglu = compile(swiglu, {{"BR", kRowsPerProgram}, {"BI", s.columns}}, target);
}

MoeMlp::~MoeMlp() = default;

void MoeMlp::run(const bf16* x, const int32_t* topk_ids, const float* topk_weights, const bf16* w13, const bf16* w2,
                 bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  if (s.tokens > 0 && !topk_weights) throw Error("tiledist: moe_mlp: no top-k weights (a null pointer)");
  s.up->run(x, topk_ids, topk_weights, w13, s.gu.data(), stream);  // (checks the dtype)
  swiglu(stream);
  s.down->run(s.act.data(), s.up->routing(), s.up->gathered_weights(), w2, out, stream);
}

void MoeMlp::run(const bf16* x, const int32_t* topk_ids, const float* topk_weights, const f8e4m3* w13,
                 const float* w13_scales, const f8e4m3* w2, const float* w2_scales, bf16* out,
                 const runtime::Stream* stream) {
  State& s = *s_;
  if (s.tokens > 0 && !topk_weights) throw Error("tiledist: moe_mlp: no top-k weights (a null pointer)");
  s.up->run(x, topk_ids, topk_weights, w13, w13_scales, s.gu.data(), stream);  // (checks the dtype)
  swiglu(stream);
  s.down->run(s.act8.data(), s.scales.data(), s.up->routing(), s.up->gathered_weights(), w2, w2_scales, out, stream);
}

void MoeMlp::swiglu(const runtime::Stream* stream) {
  State& s = *s_;
  const MoeRouting& routing = s.up->routing();
  const runtime::Stream* on = detail::on_gpu(s.target) ? (stream ? stream : &runtime::Stream::legacy()) : nullptr;
  const Grid grid(static_cast<int>((s.up->rows() + kRowsPerProgram - 1) / kRowsPerProgram),
                  static_cast<int>((s.inter + s.columns - 1) / s.columns));
  auto launch = [&](auto* act) {
    detail::launch(s.swiglu, on, grid, static_cast<const bf16*>(s.gu.data()), act, s.scales.data(),
                   routing.group_starts(), static_cast<int>(routing.experts() * routing.segments()),
                   static_cast<int>(s.inter));
  };
  if (s.dtype == ir::DType::f8e4m3)
    launch(s.act8.data());
  else
    launch(s.act.data());
}

const MoeRouting& MoeMlp::route(const float* logits, const runtime::Stream* stream, MoeRouting::Options options) {
  State& s = *s_;
  options.segments = 1;
  if (!s.local || s.local_options.scores != options.scores || s.local_options.renormalize != options.renormalize) {
    s.local = std::make_unique<MoeRouting>(s.target, s.tokens, s.E, s.topk, options);
    s.local_options = options;
  }
  s.local->run(logits, s.tokens, stream);
  return *s.local;
}

void MoeMlp::run(const bf16* x, const float* logits, const bf16* w13, const bf16* w2, bf16* out,
                 const runtime::Stream* stream, MoeRouting::Options options) {
  const MoeRouting& r = route(logits, stream, options);
  run(x, r.topk_ids(), r.topk_weights(), w13, w2, out, stream);
}

void MoeMlp::run(const bf16* x, const float* logits, const f8e4m3* w13, const float* w13_scales, const f8e4m3* w2,
                 const float* w2_scales, bf16* out, const runtime::Stream* stream, MoeRouting::Options options) {
  const MoeRouting& r = route(logits, stream, options);
  run(x, r.topk_ids(), r.topk_weights(), w13, w13_scales, w2, w2_scales, out, stream);
}

int64_t MoeMlp::intermediate_per_rank() const { return s_->inter; }

void MoeMlp::set_overlap(bool on) {
  s_->up->set_overlap(on);
  s_->down->set_overlap(on);
}

}  // namespace tiledist::kernels
