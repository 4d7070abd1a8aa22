/// @file
/// A decoder-only transformer's shape (issue 32): the fields of Hugging Face's `config.json` that
/// a tensor-parallel run of its layers needs, for a dense model (Qwen3-32B's) or one whose MLP is
/// a mixture of experts (Qwen3-30B-A3B's), and the check that they split over the ranks.
#pragma once

#include <cstdint>
#include <string>

namespace tiledist::model {

/// The shape of a model's decoder layers. Read from a `config.json` (Hugging Face's names:
/// hidden_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
/// num_hidden_layers, rms_norm_eps, rope_theta; for experts num_experts (or num_local_experts,
/// n_routed_experts), num_experts_per_tok, moe_intermediate_size), or one of the built-in ones.
struct ModelConfig {
  std::string name;                 ///< where it came from (a file, or a built-in's name)
  int64_t hidden = 0;               ///< hidden_size
  int64_t heads = 0;                ///< num_attention_heads (query heads)
  int64_t kv_heads = 0;             ///< num_key_value_heads (num_attention_heads where absent)
  int64_t head_dim = 0;             ///< head_dim (hidden_size / num_attention_heads where absent)
  int64_t intermediate = 0;         ///< intermediate_size: the dense MLP's
  int64_t layers = 0;               ///< num_hidden_layers
  double rms_eps = 1e-6;            ///< rms_norm_eps
  double rope_theta = 1e6;          ///< rope_theta
  int64_t experts = 0;              ///< routed experts (0: a dense MLP)
  int64_t topk = 0;                 ///< num_experts_per_tok
  int64_t expert_intermediate = 0;  ///< moe_intermediate_size: each expert's
  bool renormalize = true;          ///< norm_topk_prob: a token's k scores divided by their sum

  /// Whether the MLP is a mixture of experts.
  bool moe() const { return experts > 0; }

  /// Qwen3-32B: hidden 5120, 64 query / 8 KV heads of 128, intermediate 25600, 64 layers.
  static ModelConfig qwen3_32b();
  /// Qwen3-30B-A3B: hidden 2048, 32 query / 4 KV heads of 128, 128 experts of intermediate 768,
  /// top-8, 48 layers.
  static ModelConfig qwen3_30b_a3b();
  /// A built-in by name ("qwen3-32b", "qwen3-30b-a3b"), or a `config.json` file (or the folder
  /// that holds one). Throws Error naming the file and a field that is missing or wrong.
  static ModelConfig load(const std::string& name_or_path);
  /// A `config.json`'s text; `where` names it in errors.
  static ModelConfig parse(const std::string& json, const std::string& where);

  /// Throws Error unless the layers split over `ranks` tensor-parallel ranks, naming the field
  /// (Hugging Face's name), its value and the rank count: the query heads and the (dense or
  /// each expert's) intermediate size divided by the ranks, the KV heads divided by them or
  /// dividing them (then each KV head serves the ranks of its query heads), and top-k within
  /// the experts.
  void check(int ranks) const;
};

}  // namespace tiledist::model
