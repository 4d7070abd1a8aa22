/// @file
/// A decoder layer computed on the host in double (issue 32's reference): what tiledist's
/// model (model/model.h) computes from the same seed-made weights, for the tests and the
/// stress harness to check it against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace tiledist::model::reference {

/// The residual stream x [batch * seqlen, hidden] (row-major, the sequences one after another,
/// positions from 0) after layer `layer` of the model LayerWeights::random makes from `seed`
/// (the same values, bf16 as the ranks hold them): Qwen3's decoder layer (RMSNorm, QKV, q/k
/// RMSNorm and rotary embedding, causal GQA attention, O, RMSNorm, SwiGLU MLP; or Qwen3-MoE's
/// MLP: the softmax's top k renormalized, each expert's SwiGLU, the tokens routed from their
/// norm rounded to bf16, as the kernels route them), in double. Slow: for small configs.
/// `near_ties`, where given (a MoE layer's): set for each token whose k-th and (k+1)-th router
/// logits lie within `tie` of each other, whose experts another computation's roundings may pick
/// otherwise (a check skips those tokens).
void reference_layer(const ModelConfig& config, uint64_t seed, int layer, int batch, int seqlen, std::vector<double>& x,
                     std::vector<bool>* near_ties = nullptr, double tie = 1e-2);

/// How far `got` [rows.size(), hidden] lies from the rows `rows` of reference_layer's x: the
/// elements further than 2^-5 of their row's RMS from it (`bad`; the first `keep` described, as
/// "token T, channel C: got, want W (row rms R)"), and the relative error in norm of them all
/// (the tests' and the stress harness's bounds: no such element, an error under 2^-7).
struct RowsDiff {
  size_t bad = 0;
  std::vector<std::string> first;
  double error = 0;
};
RowsDiff compare_rows(const std::vector<float>& got, const std::vector<double>& x, const std::vector<int64_t>& rows,
                      int64_t hidden, size_t keep = 5);

}  // namespace tiledist::model::reference
