// A dense model's decoder layers (model/prefill_layer.h) on the CPU backend's world, run by
// `tiledist-run -n N model_dist_test` (N = 1 to 4): tests/model/model_check.h's two layers
// against the host's double reference, and the shapes refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <tuple>

#include "model/safetensors.h"
#include "tests/jit/error_of.h"
#include "tests/kernels/collectives_check.h"
#include "tests/model/model_check.h"
#include "tiledist.h"

namespace tiledist::model {
namespace {

// Two layers of a small config (GQA: 8 query / 2 KV heads, a KV head shared by 2 ranks at 4;
// 6 / 3 heads at 3 ranks), 2 sequences of 64 tokens a rank; the embeddings random.
TEST(PrefillLayer, TwoLayersAgreeWithTheHost) {
  testing_model::check_two_layers<testing_collectives::HostMemory>(Target::host());
}

/// A checkpoint of layer 0 of a config, in Hugging Face's names and shapes, holding the
/// values LayerWeights::random makes from `seed` (but `skip`, and `misshape` given a row too
/// many).
std::vector<TensorData> checkpoint(const ModelConfig& c, uint64_t seed, const std::string& skip = "",
                                   const std::string& misshape = "") {
  const int64_t H = c.hidden, D = c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"input_layernorm.weight", {H}},
                                                                      {"post_attention_layernorm.weight", {H}},
                                                                      {"self_attn.q_norm.weight", {D}},
                                                                      {"self_attn.k_norm.weight", {D}},
                                                                      {"self_attn.q_proj.weight", {c.heads * D, H}},
                                                                      {"self_attn.k_proj.weight", {c.kv_heads * D, H}},
                                                                      {"self_attn.v_proj.weight", {c.kv_heads * D, H}},
                                                                      {"self_attn.o_proj.weight", {H, c.heads * D}}};
  if (c.moe()) {  // (Qwen3-MoE's names: the router, then each expert's three)
    const int64_t ie = c.expert_intermediate;
    shapes.push_back({"mlp.gate.weight", {c.experts, H}});
    for (int64_t e = 0; e < c.experts; ++e) {
      const std::string x = str_cat("mlp.experts.", e, ".");
      shapes.push_back({x + "gate_proj.weight", {ie, H}});
      shapes.push_back({x + "up_proj.weight", {ie, H}});
      shapes.push_back({x + "down_proj.weight", {H, ie}});
    }
  } else {
    shapes.push_back({"mlp.gate_proj.weight", {c.intermediate, H}});
    shapes.push_back({"mlp.up_proj.weight", {c.intermediate, H}});
    shapes.push_back({"mlp.down_proj.weight", {H, c.intermediate}});
  }
  std::vector<TensorData> out;
  for (auto [name, shape] : shapes) {
    if (name == skip) continue;
    const std::string full = "model.layers.0." + name;
    if (name == misshape) ++shape[0];
    std::vector<bf16> v(size_t(shape.size() == 1 ? shape[0] : shape[0] * shape[1]));
    const float scale = shape.size() == 1 ? 0.0f : 1.0f / std::sqrt(float(shape[1]));
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = random_value(seed, full, int64_t(i));
      v[i] = shape.size() == 1 ? bf16(1.0f + r / 8) : bf16(r * scale);
    }
    std::vector<std::byte> bytes(v.size() * sizeof(bf16));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    out.push_back({full, ir::DType::bf16, shape, std::move(bytes)});
  }
  return out;
}

/// A folder of checkpoints that rank 0 writes (`files`: each file's name and its tensors, made
/// there alone) and every rank then reads: its path, removed when it goes (after a barrier).
class CheckpointDir {
 public:
  CheckpointDir(const std::string& name,
                const std::vector<std::pair<std::string, std::function<std::vector<TensorData>()>>>& files)
      : path(str_cat(testing::TempDir(), name, "/")) {
    if (rank() == 0) {
      std::filesystem::create_directories(path);
      for (const auto& [file, tensors] : files) write_safetensors(path + file, tensors());
    }
    barrier_all();
  }
  ~CheckpointDir() {
    barrier_all();
    if (rank() == 0) std::filesystem::remove_all(path);
  }
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  const std::string path;
};

// Each rank's part read from a checkpoint is the part random() makes of the same values (every
// weight, byte for byte: the shards of q/k/v, o, gate/up and down, a KV head shared at 4 ranks);
// a checkpoint that lacks a tensor, or holds one of another shape, is refused naming it.
TEST(LayerWeights, ReadFromACheckpointAsRandomMakesThem) {
  const int n = world_size(), me = rank();
  const ModelConfig c = testing_model::small_config(n);
  const uint64_t seed = testing_model::shared_seed();
  SCOPED_TRACE(str_cat("seed ", seed, ", ", n, " ranks"));
  const CheckpointDir folder(
      str_cat("layer_weights_", seed),
      {{"whole.safetensors", [&] { return checkpoint(c, seed); }},
       {"lacks.safetensors", [&] { return checkpoint(c, seed, "mlp.down_proj.weight"); }},
       {"misshaped.safetensors", [&] { return checkpoint(c, seed, "", "self_attn.k_proj.weight"); }}});
  const std::string& dir = folder.path;
  const Target host = Target::host();
  const LayerWeights got = LayerWeights::load(host, c, 0, SafeTensors(dir + "whole.safetensors"), me, n);
  const LayerWeights want = LayerWeights::random(host, c, 0, seed, me, n);
  const int64_t H = c.hidden, D = c.head_dim, nq = c.heads / n * D, nk = kv_heads_of(c, me, n).second * D;
  const int64_t I = c.intermediate / n;
  const std::vector<std::tuple<const char*, const bf16*, const bf16*, int64_t>> parts = {
      {"input_norm", got.input_norm(), want.input_norm(), H},
      {"post_norm", got.post_norm(), want.post_norm(), H},
      {"q_norm", got.q_norm(), want.q_norm(), D},
      {"k_norm", got.k_norm(), want.k_norm(), D},
      {"wqkv", got.wqkv(), want.wqkv(), H * (nq + 2 * nk)},
      {"wo", got.wo(), want.wo(), nq * H},
      {"w13", got.w13(), want.w13(), H * 2 * I},
      {"w2", got.w2(), want.w2(), I * H}};
  for (const auto& [what, a, b, count] : parts)
    EXPECT_EQ(std::memcmp(a, b, size_t(count) * sizeof(bf16)), 0) << what << " differs on rank " << me;
  auto refusal = [&](const std::string& file) {
    return test_util::error_of([&] { LayerWeights::load(host, c, 0, SafeTensors(dir + file), me, n); });
  };
  const std::string lacks = refusal("lacks.safetensors"), misshaped = refusal("misshaped.safetensors");
  EXPECT_NE(lacks.find("has no tensor 'model.layers.0.mlp.down_proj.weight'"), std::string::npos) << lacks;
  EXPECT_NE(
      misshaped.find(str_cat("'model.layers.0.self_attn.k_proj.weight' in ", dir, "misshaped.safetensors is BF16 [",
                             c.kv_heads * D + 1, ", ", H, "]; expected BF16 [", c.kv_heads * D, ", ", H, "]")),
      std::string::npos)
      << misshaped;
}

// A Qwen3-MoE checkpoint: the router (whole, transposed for its GEMM) and every expert's slice of
// gate, up (its rows) and down (its columns), as random() makes them, byte for byte.
TEST(LayerWeights, AMixtureOfExpertsCheckpointAsRandomMakesIt) {
  const int n = world_size(), me = rank();
  const ModelConfig c = testing_model::small_moe_config(n);
  const uint64_t seed = testing_model::shared_seed();
  SCOPED_TRACE(str_cat("seed ", seed, ", ", n, " ranks"));
  const CheckpointDir folder(str_cat("layer_weights_moe_", seed),
                             {{"whole.safetensors", [&] { return checkpoint(c, seed); }}});
  const Target host = Target::host();
  const LayerWeights got = LayerWeights::load(host, c, 0, SafeTensors(folder.path + "whole.safetensors"), me, n);
  const LayerWeights want = LayerWeights::random(host, c, 0, seed, me, n);
  const int64_t H = c.hidden, E = c.experts, ie = c.expert_intermediate / n;
  ASSERT_NE(got.router(), nullptr);
  EXPECT_EQ(std::memcmp(got.router(), want.router(), size_t(H * E) * sizeof(bf16)), 0) << "router, rank " << me;
  EXPECT_EQ(std::memcmp(got.w13(), want.w13(), size_t(E * 2 * ie * H) * sizeof(bf16)), 0) << "w13, rank " << me;
  EXPECT_EQ(std::memcmp(got.w2(), want.w2(), size_t(E * H * ie) * sizeof(bf16)), 0) << "w2, rank " << me;
  // (and the layout MoeMlp takes: expert e's gate row j of this rank is HF's row rank ie + j)
  const float scale = 1.0f / std::sqrt(float(H));
  for (int64_t e : {int64_t(0), E - 1})
    for (int64_t j : {int64_t(0), ie - 1}) {
      const float v = float(
          bf16(random_value(seed, str_cat("model.layers.0.mlp.experts.", e, ".up_proj.weight"), (me * ie + j) * H + 3) *
               scale));
      EXPECT_EQ(float(got.w13()[size_t((e * 2 * ie + ie + j) * H + 3)]), v) << "expert " << e << "'s up row " << j;
    }
}

// Two dense layers of small_config, 2 sequences, a prompt of 32 tokens a rank.
TEST(Model, DecodeStepsAfterAPrefillAgreeWithTheHost) {
  const int n = world_size();
  testing_model::check_decode(Target::host(), testing_model::small_config(n), 2, 2, 32 * n);
}
// The same steps as one persistent kernel (Model::set_decode_mega: the layers' kernels as tasks
// of a task graph, the second layer's sharing the first's bodies, the O and down projections'
// all-reduce among them), at 1 and 2 ranks.
TEST(Model, DecodeStepsAsOneKernelAgreeWithTheHost) {
  const int n = world_size();
  if (n > 2) GTEST_SKIP() << "run at 1 and 2 ranks";
  testing_model::check_decode(Target::host(), testing_model::small_config(n), 2, 2, 32 * n, true);
}

// A MoE layer (small_moe_config: the router, MoeMlp over the ranks' tokens; decode: each rank
// routes its share of the batch): one layer (a second's routing would follow the first's bf16
// roundings, where a near tie may pick another expert than the reference's), 4 sequences (3 at
// 3 ranks: a multiple of the ranks), 64 tokens of the prompt a rank.
TEST(Model, AMixtureOfExpertsLayerAgreesWithTheHost) {
  const int n = world_size(), batch = n == 3 ? 3 : 4;
  testing_model::check_decode(Target::host(), testing_model::small_moe_config(n), 1, batch, 64 * n / batch);
}

// Shapes that do not split over the ranks are named before anything runs: a dense and a MoE
// intermediate size, and a MoE decode batch that the ranks cannot share.
TEST(PrefillLayer, ShapesThatDoNotSplitAreNamed) {
  const int n = world_size();
  ModelConfig c = ModelConfig::qwen3_32b();
  c.heads = 48, c.kv_heads = 24, c.intermediate = 25601;
  ModelConfig moe = ModelConfig::qwen3_30b_a3b();
  moe.expert_intermediate = 769, moe.heads = int64_t{8} * n, moe.kv_heads = n;
  if (n == 1) {  // (one rank takes any size)
    EXPECT_NO_THROW(c.check(1));
    EXPECT_NO_THROW(moe.check(1));
    return;
  }
  const std::string dense = test_util::error_of([&] { PrefillLayer(Target::host(), c, 1, 64 * n); });
  EXPECT_NE(dense.find(str_cat("model 'qwen3-32b': intermediate_size = 25601 does not divide over ", n,
                               " tensor-parallel ranks")),
            std::string::npos)
      << dense;
  const std::string experts = test_util::error_of([&] { PrefillLayer(Target::host(), moe, 1, 64 * n); });
  EXPECT_NE(experts.find(str_cat("model 'qwen3-30b-a3b': moe_intermediate_size = 769 does not divide over ", n,
                                 " tensor-parallel ranks")),
            std::string::npos)
      << experts;
  const std::string batch =
      test_util::error_of([&] { DecodeLayer(Target::host(), testing_model::small_moe_config(n), n + 1); });
  EXPECT_NE(batch.find(str_cat("model 'small-moe': a decode step of ", n + 1, " sequences over ", n,
                               " ranks (a MoE model's: a multiple of the ranks")),
            std::string::npos)
      << batch;
}

}  // namespace
}  // namespace tiledist::model
