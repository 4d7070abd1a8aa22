/// @file
/// A model's decoder layers end to end (issue 32): L PrefillLayer steps over a batch, with
/// random weights and embeddings made from a seed, tensor parallel over the job's ranks. What
/// `tiledist-model` and `bench/model_bench` run, and what a PyTorch reference made from the same
/// seed (bench/model_baseline.py) computes again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jit/target.h"
#include "model/config.h"
#include "model/prefill_layer.h"
#include "model/safetensors.h"
#include "runtime/stream.h"

namespace tiledist::model {

/// L decoder layers of a config (dense or MoE) over `batch` sequences of `seqlen` tokens: every rank
/// makes its part of layers [0, L)'s weights (LayerWeights::random, or LayerWeights::load from a
/// checkpoint where one is given) and its tokens' rows of the
/// embeddings ("model.embed_tokens", random_value rounded to bf16: rank r holds the batch's
/// tokens [r T / n, (r + 1) T / n), row-major [T, hidden] over the sequences one after
/// another). With decode steps, a KV cache of seqlen + steps rows a sequence, which prefill()
/// fills and each decode() step extends: the step's tokens (one a sequence, the same on every
/// rank) are the embeddings "model.embed_tokens.decode" (random_value rounded to bf16, row s
/// batch + b of step s). Construction, prefill() and decode() are collective.
class Model {
 public:
  /// Throws Error where PrefillLayer does (the config, a batch that does not split), where
  /// `layers` < 1, or where LayerWeights::load does (a tensor missing or misshaped).
  Model(const Target& target, const ModelConfig& config, int layers, int batch, int seqlen, uint64_t seed,
        int decode_steps = 0, const SafeTensors* checkpoint = nullptr);
  ~Model();
  /// The L layers from the embeddings (each call from the embeddings again), queued on `stream`
  /// on a GPU, or done when it returns where none is given.
  void prefill(const runtime::Stream* stream = nullptr);
  /// This rank's tokens' hidden states after the last prefill(): [T / ranks, hidden] f32, the
  /// residual stream (the last layer's output added to its input); the embeddings before any.
  std::vector<float> hidden() const;
  /// The next decode step of the L layers, after a prefill() (which starts the steps again);
  /// queued on `stream` where given. Throws Error before a prefill or past the decode steps the
  /// model was made for (its cache's rows). A dense model's step on a GPU goes as one graph
  /// (runtime/graph.h): the first step runs as it comes, the second is captured, and from then
  /// on each step is one graph launch (the host's cost of ~10 launches a layer paid once). A MoE
  /// model's steps run as they come (its routing and MoE MLP count their runs on the host).
  void decode(const runtime::Stream* stream = nullptr);
  /// Whether decode steps go as a graph where they can (on by default; off: each step's kernels
  /// launched one by one, the graph dropped).
  void set_decode_graph(bool on);
  /// Whether a dense model's decode steps go as one persistent kernel (mega::MegaKernel: the
  /// step's kernels as tasks of one task graph, each tile waiting for the tiles it reads from),
  /// made at the next step (off by default; a MoE model's steps throw Error with it on). Takes
  /// the place of the graph while on.
  /// `num_warps`: the persistent kernel's warps a program (MegaKernel; 0: its default).
  void set_decode_mega(bool on, int num_warps = 0);
  /// The persistent kernel's summary and, with `per_task`, a line a task (MegaKernel::summary,
  /// describe), once a step has made it; else empty.
  std::string decode_mega_plan(bool per_task = false) const;
  /// The last decode step's hidden states [batch, hidden] f32 (every rank's the same).
  std::vector<float> decoded() const;
  int64_t tokens() const;             ///< T: the batch's, every rank's together
  const ModelConfig& config() const;  ///< the config it was made with

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tiledist::model
