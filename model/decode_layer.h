/// @file
/// A model's decode step (issue 32): one new token a sequence through a decoder layer,
/// its keys and values appended to the layer's KV cache. Tensor parallel over the job's ranks
/// with the activations replicated (every rank holds every sequence's token): QKV of the rank's
/// heads by a GEMM, attention by flash decoding over the cache of the rank's KV heads, the O and
/// down projections by GEMM + AllReduce.
#pragma once

#include <cstdint>
#include <memory>

#include "dsl/dtypes.h"
#include "jit/target.h"
#include "model/config.h"
#include "model/layer_weights.h"
#include "runtime/stream.h"

namespace tiledist::mega {
class TaskGraph;
}

namespace tiledist::model {

/// The KV cache of a model's layers on one rank: for each layer, keys and values [batch,
/// max_len, HK, head_dim] bf16 of the rank's KV heads (model/layer_weights.h's split), and each
/// sequence's length [batch] int32 (the rows held; zero at first), in device memory on a GPU
/// target (host memory on the host). Written by PrefillLayer's prefill and DecodeLayer's steps
/// (kernels::kv_append_kernel), read by flash decoding.
class KvCache {
 public:
  /// Throws Error where the config does not split over the ranks or a size is not positive.
  KvCache(const Target& target, const ModelConfig& config, int layers, int batch, int max_len);
  ~KvCache();
  bf16* k(int layer) const;        ///< layer's keys [batch, max_len, HK, head_dim]
  bf16* v(int layer) const;        ///< layer's values, the same
  int32_t* lens(int layer) const;  ///< layer's sequences' lengths [batch]
  int layers() const;              ///< the layers it holds
  int batch() const;               ///< its sequences
  int max_len() const;             ///< its rows a sequence
  int kv_heads() const;            ///< HK: the rank's

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// One decoder layer of a decode step over `batch` sequences, one token each. Construction and
/// every run are collective.
class DecodeLayer {
 public:
  /// Throws Error where the config does not split over the ranks, batch < 1, or (a MoE model's)
  /// the batch is not a multiple of the ranks (each rank routes its share of it).
  DecodeLayer(const Target& target, const ModelConfig& config, int batch);
  ~DecodeLayer();
  /// The layer on the step's tokens, whose residual stream is delta + residual ([batch, hidden]
  /// f32 and bf16, the same on every rank; residual null before the first layer: zero), each
  /// sequence's token at its length in `cache` (layer `layer`'s: its key and value stored
  /// there, the length advanced by one; the caller keeps the lengths under max_len). Leaves the
  /// output the same way in delta_out and residual_out (which may be the inputs). Pointers as
  /// PrefillLayer::run's; queued on `stream`, or done when it returns where none is given.
  void run(const float* delta, const bf16* residual, const LayerWeights& weights, KvCache& cache, int layer,
           float* delta_out, bf16* residual_out, const runtime::Stream* stream = nullptr);
  /// run()'s kernels for the same arguments added to `graph` as tasks (mega::TaskGraph::record),
  /// with what they read that is there before the step declared to it as inputs (the weights,
  /// the cache's layer, the layer's zeros) and its scratch as buffers: a step of layers as one
  /// persistent kernel (Model::set_decode_mega). Throws Error as run() does.
  void record(mega::TaskGraph& graph, const float* delta, const bf16* residual, const LayerWeights& weights,
              KvCache& cache, int layer, float* delta_out, bf16* residual_out);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tiledist::model
