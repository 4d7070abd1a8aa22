// The MoE MLP of a decoder layer (model/moe_part.h).
#include "model/moe_part.h"

#include "kernels/symmetric.h"
#include "kernels/transformer.h"

namespace tiledist::model::detail {

MoePart::MoePart(const Target& target, const ModelConfig& c, int64_t rows, kernels::MoeReduce::Mode mode)
    : target_(target), rows_(rows), hidden_(c.hidden), experts_(c.experts), renormalize_(c.renormalize) {
  const int ranks = kernels::detail::world_ranks(target);
  out_rows_ = mode == kernels::MoeReduce::Mode::all_reduce ? rows * ranks : rows;
  router_ = std::make_unique<kernels::Gemm>(target, rows, c.experts, c.hidden);
  mlp_ = std::make_unique<kernels::MoeMlp>(target, rows, c.hidden, c.expert_intermediate, c.experts, int(c.topk), mode);
  widen_ = compile(kernels::bf16_to_f32_kernel(), {{"BLOCK", 1024}}, target);
  logits_ = kernels::detail::Scratch<float>(target, size_t(rows * c.experts));
  out_ = kernels::detail::Scratch<bf16>(target, size_t(out_rows_ * c.hidden));
}

void MoePart::run(const bf16* x, const LayerWeights& w, float* out, const runtime::Stream* on) {
  router_->run(x, w.router(), logits_.data(), on);
  kernels::MoeRouting::Options routing;  // (the softmax's top k, renormalized as norm_topk_prob says)
  routing.renormalize = renormalize_;
  mlp_->run(x, static_cast<const float*>(logits_.data()), w.w13(), w.w2(), out_.data(), on, routing);
  const int64_t n = out_rows_ * hidden_;
  kernels::detail::launch(widen_, on, Grid(int((n + 1023) / 1024)), static_cast<const bf16*>(out_.data()), out, int(n));
}

}  // namespace tiledist::model::detail
