// The MoE MLP of a decoder layer, shared by its prefill and its decode step (model/, not
// installed): the router's logits by a GEMM of the rank's normed rows, kernels::MoeMlp (Qwen3's
// routing: the softmax over the experts, the top-k renormalized; the gate/up GEMM under the
// gather, the down GEMM and the combine under the reduce), its bf16 output widened into the
// layer's f32 output.
#pragma once

#include <memory>

#include "kernels/kernels.h"
#include "kernels/moe.h"
#include "kernels/scratch.h"
#include "model/config.h"
#include "model/layer_weights.h"

namespace tiledist::model::detail {

class MoePart {
 public:
  /// Collective: `rows` tokens a rank; `mode` as MoeMlp's (reduce_scatter: each rank's own rows
  /// out; all_reduce: every rank's, ranks x rows).
  MoePart(const Target& target, const ModelConfig& config, int64_t rows, kernels::MoeReduce::Mode mode);
  /// Collective: x [rows, hidden] bf16 of this rank, out f32 (as `mode` says).
  void run(const bf16* x, const LayerWeights& weights, float* out, const runtime::Stream* on);

 private:
  Target target_;
  int64_t rows_ = 0, out_rows_ = 0, hidden_ = 0, experts_ = 0;
  bool renormalize_ = true;
  std::unique_ptr<kernels::Gemm> router_;
  std::unique_ptr<kernels::MoeMlp> mlp_;
  Kernel widen_;
  kernels::detail::Scratch<float> logits_;
  kernels::detail::Scratch<bf16> out_;
};

}  // namespace tiledist::model::detail
