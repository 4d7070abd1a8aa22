/// @file
/// One tensor-parallel decoder layer's prefill (issue 32; Qwen3's: RMSNorm, attention with
/// per-head q/k RMSNorm and rotary embeddings, a SwiGLU MLP or Qwen3-MoE's experts), built from
/// the kernel library (its weights: model/layer_weights.h).
#pragma once

#include <cstdint>
#include <memory>

#include "dsl/dtypes.h"
#include "jit/target.h"
#include "model/config.h"
#include "model/decode_layer.h"
#include "model/layer_weights.h"
#include "runtime/stream.h"

namespace tiledist::model {

/// A decoder layer over `batch` sequences of `seqlen` tokens (T = batch * seqlen, a
/// multiple of the ranks), tensor-parallel over the job's ranks with the activations between
/// layers split by tokens (each rank T / ranks of them): RMSNorm of the residual stream, QKV by
/// AllGather + GEMM, qk_norm_rope, causal attention over the rank's heads, the O projection by
/// GEMM + ReduceScatter, RMSNorm, gate and up by AllGather + GEMM, SwiGLU, the down projection by
/// GEMM + ReduceScatter; a MoE model's MLP: the router's GEMM and kernels::MoeMlp over the
/// ranks' tokens (the gather under gate/up, the reduce-scatter under down and the combine).
/// Construction and every run are collective.
class PrefillLayer {
 public:
  /// Throws Error where the config does not split over the ranks, T is not a multiple of them
  /// (into rows the GEMMs tile), or the kernels refuse the shapes.
  PrefillLayer(const Target& target, const ModelConfig& config, int batch, int seqlen);
  ~PrefillLayer();
  /// One layer on this rank's tokens (rows [rank T / ranks, (rank + 1) T / ranks) of the batch):
  /// the residual stream's value is delta + residual (delta [T / ranks, hidden] f32, the last
  /// layer's output, or the embeddings; residual bf16, or null before the first layer: zero).
  /// Leaves the layer's output the same way: `delta_out` (f32) and `residual_out` (bf16), which
  /// may be the inputs. positions [T] int32: each token's place in its sequence. Every pointer
  /// is device memory on a GPU target (host memory on the host). On a GPU the work is queued
  /// on `stream`, or, where none is given, done when the call returns (as the library's
  /// objects do).
  void run(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& weights,
           float* delta_out, bf16* residual_out, const runtime::Stream* stream = nullptr);
  /// run(), which also stores every token's key and value (the rank's KV heads) into layer
  /// `layer` of `cache` at its position, and sets each sequence's length there to its last
  /// token's position + 1 (a prompt's prefill before decode steps: positions from 0). Throws
  /// Error where the cache is not this batch's, or its rows are fewer than seqlen.
  void run(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& weights,
           float* delta_out, bf16* residual_out, KvCache& cache, int layer, const runtime::Stream* stream = nullptr);

 private:
  void run_on(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& weights,
              float* delta_out, bf16* residual_out, KvCache* cache, int layer, const runtime::Stream* stream);
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tiledist::model
