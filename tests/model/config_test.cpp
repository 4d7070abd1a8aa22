// Model shapes (model/config.h): Hugging Face config.json files read (dense, Qwen3-MoE's,
// Mixtral's and DeepSeek's names for the experts), the built-ins, and the checks that name the
// field and the rank count where a shape does not split over the ranks.
#include "model/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/jit/error_of.h"
#include "tests/jit/temp_dir.h"

namespace tiledist::model {
namespace {

using test_util::error_of;

void expect_has(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nwanted: " << part;
}

// (Qwen3-32B's config.json, as Hugging Face ships it, less fields that do not matter here)
constexpr const char* kQwen3Dense = R"({
  "architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
  "intermediate_size": 25600, "max_position_embeddings": 40960, "model_type": "qwen3",
  "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "torch_dtype": "bfloat16", "vocab_size": 151936})";
constexpr const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048,
  "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0})";

TEST(ModelConfig, HuggingFacesFilesAreRead) {
  const ModelConfig dense = ModelConfig::parse(kQwen3Dense, "qwen3-32b/config.json");
  const ModelConfig want = ModelConfig::qwen3_32b();
  EXPECT_EQ(dense.hidden, want.hidden);
  EXPECT_EQ(dense.heads, want.heads);
  EXPECT_EQ(dense.kv_heads, want.kv_heads);
  EXPECT_EQ(dense.head_dim, want.head_dim);
  EXPECT_EQ(dense.intermediate, want.intermediate);
  EXPECT_EQ(dense.layers, want.layers);
  EXPECT_DOUBLE_EQ(dense.rms_eps, want.rms_eps);
  EXPECT_DOUBLE_EQ(dense.rope_theta, want.rope_theta);
  EXPECT_FALSE(dense.moe());
  const ModelConfig moe = ModelConfig::parse(kQwen3Moe, "moe");
  const ModelConfig a3b = ModelConfig::qwen3_30b_a3b();
  EXPECT_TRUE(moe.moe());
  EXPECT_EQ(moe.experts, a3b.experts);
  EXPECT_EQ(moe.topk, a3b.topk);
  EXPECT_EQ(moe.expert_intermediate, a3b.expert_intermediate);
  EXPECT_EQ(moe.kv_heads, a3b.kv_heads);
  // Mixtral's and DeepSeek's names for the experts; head_dim and the KV heads by default.
  const ModelConfig mixtral = ModelConfig::parse(
      R"({"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336,
          "num_local_experts": 8, "num_experts_per_tok": 2})",
      "mixtral");
  EXPECT_EQ(mixtral.experts, 8);
  EXPECT_EQ(mixtral.expert_intermediate, 14336);
  EXPECT_EQ(mixtral.head_dim, 128);
  EXPECT_EQ(mixtral.kv_heads, 32);
  EXPECT_TRUE(mixtral.renormalize);  // (norm_topk_prob absent: renormalized, as Qwen3-MoE's)
  EXPECT_FALSE(ModelConfig::parse(R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                                      "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                      "norm_topk_prob": false})",
                                  "c.json")
                   .renormalize);
  EXPECT_EQ(ModelConfig::parse(R"({"hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 61,
                                   "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048})",
                               "deepseek")
                .experts,
            256);
  // A file, or the folder that holds it; the built-ins by name.
  test_util::TempDir dir;
  std::ofstream((dir.path / "config.json").string()) << kQwen3Moe;
  EXPECT_EQ(ModelConfig::load(dir.path.string()).experts, 128);
  EXPECT_EQ(ModelConfig::load((dir.path / "config.json").string()).topk, 8);
  EXPECT_EQ(ModelConfig::load("qwen3-32b").intermediate, 25600);
}

TEST(ModelConfig, ShapesSplitOverTheRanksOrTheFieldIsNamed) {
  for (int ranks : {1, 2, 4, 8}) {
    EXPECT_EQ(error_of([&] { ModelConfig::qwen3_32b().check(ranks); }), "") << ranks;
    EXPECT_EQ(error_of([&] { ModelConfig::qwen3_30b_a3b().check(ranks); }), "") << ranks;
  }
  EXPECT_EQ(error_of([] { ModelConfig::qwen3_32b().check(16); }), "");  // (a KV head for 2 ranks)
  expect_has(error_of([] { ModelConfig::qwen3_32b().check(3); }),
             "model 'qwen3-32b': num_attention_heads = 64 does not divide over 3 tensor-parallel ranks");
  ModelConfig c = ModelConfig::qwen3_32b();
  c.heads = 48, c.kv_heads = 12;
  expect_has(error_of([&] { c.check(8); }), "num_key_value_heads = 12 neither divides over nor divides 8");
  c = ModelConfig::qwen3_32b();
  c.intermediate = 25601;
  expect_has(error_of([&] { c.check(2); }), "intermediate_size = 25601 does not divide over 2 tensor-parallel ranks");
  c = ModelConfig::qwen3_30b_a3b();
  c.heads = 40, c.kv_heads = 5;
  expect_has(error_of([&] { c.check(5); }), "moe_intermediate_size = 768 does not divide over 5");
}

TEST(ModelConfig, BadFilesAreNamed) {
  expect_has(error_of([] { ModelConfig::parse("{", "c.json"); }), "model config c.json: not JSON");
  expect_has(error_of([] { ModelConfig::parse(R"({"num_attention_heads": 8, "num_hidden_layers": 2})", "c.json"); }),
             "model config c.json: no 'hidden_size'");
  expect_has(error_of([] {
               ModelConfig::parse(R"({"hidden_size": 64, "num_attention_heads": 6, "num_key_value_heads": 4,
                                      "num_hidden_layers": 2, "intermediate_size": 128})",
                                  "c.json");
             }),
             "num_attention_heads = 6 is not a multiple of num_key_value_heads = 4");
  expect_has(error_of([] {
               ModelConfig::parse(R"({"hidden_size": "64", "num_attention_heads": 4, "num_hidden_layers": 2})",
                                  "c.json");
             }),
             "'hidden_size' is not a count");
  expect_has(error_of([] {
               ModelConfig::parse(R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                                      "num_experts": 8, "intermediate_size": 128})",
                                  "c.json");
             }),
             "no 'num_experts_per_tok'");
  expect_has(error_of([] {
               ModelConfig::parse(R"({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                                      "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                      "norm_topk_prob": 1})",
                                  "c.json");
             }),
             "'norm_topk_prob' is not true or false");
  expect_has(error_of([] { ModelConfig::load("/nonexistent/model"); }),
             "'/nonexistent/model': neither a built-in (qwen3-32b, qwen3-30b-a3b) nor a readable config.json");
}

}  // namespace
}  // namespace tiledist::model
