/// @file
/// One tensor-parallel decoder layer of a dense model (issue 32; Qwen3's: RMSNorm, attention with
/// per-head q/k RMSNorm and rotary embeddings, SwiGLU MLP), built from the kernel library, and
/// its weights as one rank holds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dsl/dtypes.h"
#include "jit/target.h"
#include "model/config.h"
#include "runtime/stream.h"

namespace tiledist::model {

/// A value of a model initialized at random from `seed`: element `index` (row-major) of the
/// tensor `name` (Hugging Face's name, e.g. "model.layers.0.self_attn.q_proj.weight"), uniform
/// in [-1, 1). The same on every rank for any part of any tensor (a hash of the seed, the name
/// and the index), so ranks need not agree on anything but the seed.
float random_value(uint64_t seed, const std::string& name, int64_t index);
/// random_value in two steps, for many elements of one tensor: the key of `name` under `seed`,
/// then random_value(key, index) == random_value(seed, name, index).
uint64_t tensor_key(uint64_t seed, const std::string& name);
/// Element `index` of the tensor whose tensor_key is `key` (random_value's value).
float random_value(uint64_t key, int64_t index);

/// One rank's part of a dense decoder layer's weights, bf16, in device memory on a GPU target
/// (host memory on the host), laid out as the kernels take them (the GEMMs' B is [K, N]: a
/// Hugging Face weight [out, in] transposed). Rank r of n holds query heads [r HQ, (r + 1) HQ)
/// (HQ = heads / n), their KV heads (HK = kv_heads / n of them, or the one KV head they share
/// where n > kv_heads), and the MLP's intermediate columns [r I, (r + 1) I) (I = intermediate /
/// n).
class DenseWeights {
 public:
  /// Layer `layer` of a model initialized from `seed` (random_value, scaled: a linear weight
  /// [out, in] by 1 / sqrt(in), a norm's weight 1 + value / 8). Throws Error where the config
  /// does not split over `ranks` (ModelConfig::check) or has experts (a MoE model's layer is
  /// not this one).
  static DenseWeights random(const Target& target, const ModelConfig& config, int layer, uint64_t seed, int rank,
                             int ranks);
  DenseWeights(DenseWeights&&) noexcept;             ///< Takes another's buffers.
  DenseWeights& operator=(DenseWeights&&) noexcept;  ///< Takes another's buffers.
  ~DenseWeights();

  const bf16* input_norm() const;  ///< [hidden]
  const bf16* wqkv() const;        ///< [hidden, (HQ + 2 HK) D]: the rank's q, then k, then v columns
  const bf16* q_norm() const;      ///< [D]
  const bf16* k_norm() const;      ///< [D]
  const bf16* wo() const;          ///< [HQ D, hidden]
  const bf16* post_norm() const;   ///< [hidden]
  const bf16* w13() const;         ///< [hidden, 2 I]: the rank's gate columns, then its up columns
  const bf16* w2() const;          ///< [I, hidden]

 private:
  DenseWeights();
  struct State;
  std::unique_ptr<State> s_;
};

/// A dense decoder layer over `batch` sequences of `seqlen` tokens (T = batch * seqlen, a
/// multiple of the ranks), tensor-parallel over the job's ranks with the activations between
/// layers split by tokens (each rank T / ranks of them): RMSNorm of the residual stream, QKV by
/// AllGather + GEMM, qk_norm_rope, causal attention over the rank's heads, the O projection by
/// GEMM + ReduceScatter, RMSNorm, gate and up by AllGather + GEMM, SwiGLU, the down projection by
/// GEMM + ReduceScatter. Construction and every run are collective.
class DenseLayer {
 public:
  /// Throws Error where the config does not split over the ranks, has experts, T is not a
  /// multiple of them (into rows the GEMMs tile), or the kernels refuse the shapes.
  DenseLayer(const Target& target, const ModelConfig& config, int batch, int seqlen);
  ~DenseLayer();
  /// One layer on this rank's tokens (rows [rank T / ranks, (rank + 1) T / ranks) of the batch):
  /// the residual stream's value is delta + residual (delta [T / ranks, hidden] f32, the last
  /// layer's output, or the embeddings; residual bf16, or null before the first layer: zero).
  /// Leaves the layer's output the same way: `delta_out` (f32) and `residual_out` (bf16), which
  /// may be the inputs. positions [T] int32: each token's place in its sequence. Every pointer
  /// is device memory on a GPU target (host memory on the host). On a GPU the work is queued
  /// on `stream`, or, where none is given, done when the call returns (as the library's
  /// objects do).
  void run(const float* delta, const bf16* residual, const int32_t* positions, const DenseWeights& weights,
           float* delta_out, bf16* residual_out, const runtime::Stream* stream = nullptr);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tiledist::model
