/// @file
/// A decoder layer's weights as one rank of a tensor-parallel job holds them (issue 32):
/// made from a seed (every rank its part, the same values everywhere), or read from a
/// .safetensors checkpoint in Hugging Face's names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsl/dtypes.h"
#include "jit/target.h"
#include "model/config.h"
#include "model/safetensors.h"

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

/// One rank's part of a decoder layer's weights, bf16, in device memory on a GPU target
/// (host memory on the host), laid out as the kernels take them (the GEMMs' B is [K, N]: a
/// Hugging Face weight [out, in] transposed). Rank r of n holds query heads [r HQ, (r + 1) HQ)
/// (HQ = heads / n), their KV heads (HK = kv_heads / n of them, or the one KV head they share
/// where n > kv_heads), and the MLP's intermediate columns [r I, (r + 1) I) (I = intermediate /
/// n; a MoE model's: every expert's [r ie, (r + 1) ie), ie = moe_intermediate_size / n, and the
/// whole router).
class LayerWeights {
 public:
  /// Layer `layer` of a model initialized from `seed` (random_value, scaled: a linear weight
  /// [out, in] by 1 / sqrt(in), a norm's weight 1 + value / 8). Throws Error where the config
  /// does not split over `ranks` (ModelConfig::check).
  static LayerWeights random(const Target& target, const ModelConfig& config, int layer, uint64_t seed, int rank,
                             int ranks);
  /// Layer `layer` of a checkpoint in Hugging Face's names ("model.layers.L.self_attn.q_proj.weight",
  /// ...: Qwen3's and Qwen3-MoE's, whose q_norm and k_norm it reads), bf16, each rank reading its part alone. Throws
  /// Error naming a tensor the checkpoint lacks, or one of another dtype or shape than the config's (and where the
  /// config does not split, as random()).
  static LayerWeights load(const Target& target, const ModelConfig& config, int layer, const SafeTensors& checkpoint,
                           int rank, int ranks);
  LayerWeights(LayerWeights&&) noexcept;             ///< Takes another's buffers.
  LayerWeights& operator=(LayerWeights&&) noexcept;  ///< Takes another's buffers.
  ~LayerWeights();

  const bf16* input_norm() const;  ///< [hidden]
  const bf16* wqkv() const;        ///< [hidden, (HQ + 2 HK) D]: the rank's q, then k, then v columns
  const bf16* q_norm() const;      ///< [D]
  const bf16* k_norm() const;      ///< [D]
  const bf16* wo() const;          ///< [HQ D, hidden]
  const bf16* post_norm() const;   ///< [hidden]
  /// Dense: [hidden, 2 I], the rank's gate columns, then its up columns. MoE: every expert's
  /// gate rows, then up rows, [E, 2 ie, hidden] (ie = moe_intermediate_size / n: MoeMlp's w13).
  const bf16* w13() const;
  /// Dense: [I, hidden]. MoE: every expert's down projection's columns, [E, hidden, ie] (MoeMlp's w2).
  const bf16* w2() const;
  /// MoE: the router's weight [hidden, E] (every rank's whole); dense: null.
  const bf16* router() const;

 private:
  /// A part of a Hugging Face weight (name, [out, in], rows [r0, r0 + nr), columns [c0, c0 +
  /// nc): the arguments in that order), row-major; a norm's weight (name, size).
  using Part =
      std::function<std::vector<bf16>(const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t)>;
  using Norm = std::function<std::vector<bf16>(const std::string&, int64_t)>;
  /// Rank `rank`'s weights of layer `layer` from `part` and `norm`, laid out for the kernels.
  static LayerWeights make(const Target& target, const ModelConfig& config, int layer, int rank, int ranks,
                           const Part& part, const Norm& norm);
  LayerWeights();
  struct State;
  std::unique_ptr<State> s_;
};

/// Rank `rank`'s first KV head and how many it holds: kv_heads / ranks of them, or the one it
/// shares with ranks / kv_heads ranks where the ranks are more.
std::pair<int64_t, int64_t> kv_heads_of(const ModelConfig& config, int rank, int ranks);
/// Throws Error unless `config`'s layers split over `ranks` (ModelConfig::check).
void check_layers(const ModelConfig& config, int ranks);

}  // namespace tiledist::model
