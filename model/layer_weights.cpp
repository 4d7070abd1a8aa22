// A dense decoder layer's weights as a rank holds them (model/layer_weights.h): made from a seed
// or read from a checkpoint, then laid out as the kernels take them.
#include "model/layer_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/scratch.h"

namespace tiledist::model {

namespace {
using kernels::detail::Scratch;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

/// fn(i) for i in [0, n), over the host's cores (a real model's layer is ~10^9 values).
void parallel_rows(int64_t n, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(n / 64, 1));
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads));
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) fn(i);
    });
  for (std::thread& th : pool) th.join();
}

/// B [nc, nr] of a part [nr, nc]: the GEMMs' [K, N] of a weight's rows.
std::vector<bf16> transposed(const std::vector<bf16>& part, int64_t nr, int64_t nc) {
  std::vector<bf16> b(part.size());
  parallel_rows(nc, [&](int64_t k) {
    for (int64_t j = 0; j < nr; ++j) b[size_t(k * nr + j)] = part[size_t(j * nc + k)];
  });
  return b;
}
}  // namespace

uint64_t tensor_key(uint64_t seed, const std::string& name) { return splitmix64(seed ^ name_hash(name)); }
float random_value(uint64_t key, int64_t index) {
  const uint64_t z = splitmix64(key + uint64_t(index));
  return float(double(z >> 40) * 0x1p-23 - 1.0);
}
float random_value(uint64_t seed, const std::string& name, int64_t index) {
  return random_value(tensor_key(seed, name), index);
}

std::pair<int64_t, int64_t> kv_heads_of(const ModelConfig& c, int rank, int ranks) {
  if (c.kv_heads >= ranks) return {rank * (c.kv_heads / ranks), c.kv_heads / ranks};
  return {rank / (ranks / c.kv_heads), 1};  // (a KV head shared by ranks / kv_heads ranks)
}
void check_layers(const ModelConfig& c, int ranks) { c.check(ranks); }

struct LayerWeights::State {
  Scratch<bf16> input_norm, wqkv, q_norm, k_norm, wo, post_norm, w13, w2, router;
};

LayerWeights::LayerWeights() : s_(std::make_unique<State>()) {}
LayerWeights::LayerWeights(LayerWeights&&) noexcept = default;
LayerWeights& LayerWeights::operator=(LayerWeights&&) noexcept = default;
LayerWeights::~LayerWeights() = default;

LayerWeights LayerWeights::make(const Target& target, const ModelConfig& c, int layer, int rank, int ranks,
                                const Part& part, const Norm& norm) {
  check_layers(c, ranks);
  const std::string p = str_cat("model.layers.", layer, ".");
  const int64_t H = c.hidden, D = c.head_dim, hq = c.heads / ranks, I = c.intermediate / ranks;
  const auto [kv0, hk] = kv_heads_of(c, rank, ranks);
  const int64_t nq = hq * D, nk = hk * D;
  LayerWeights w;
  State& s = *w.s_;
  s.input_norm = Scratch<bf16>(target, norm(p + "input_layernorm.weight", H));
  s.post_norm = Scratch<bf16>(target, norm(p + "post_attention_layernorm.weight", H));
  s.q_norm = Scratch<bf16>(target, norm(p + "self_attn.q_norm.weight", D));
  s.k_norm = Scratch<bf16>(target, norm(p + "self_attn.k_norm.weight", D));
  // QKV: the rank's query heads' rows of q_proj, then its KV heads' rows of k_proj and v_proj,
  // one [H, nq + 2 nk] B.
  {
    std::vector<bf16> rows = part(p + "self_attn.q_proj.weight", c.heads * D, H, rank * nq, nq, 0, H);
    for (const char* name : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      const std::vector<bf16> kv = part(p + name, c.kv_heads * D, H, kv0 * D, nk, 0, H);
      rows.insert(rows.end(), kv.begin(), kv.end());
    }
    s.wqkv = Scratch<bf16>(target, transposed(rows, nq + 2 * nk, H));
  }
  // O: o_proj [hidden, heads D], its columns of the rank's heads.
  s.wo = Scratch<bf16>(target,
                       transposed(part(p + "self_attn.o_proj.weight", H, c.heads * D, 0, H, rank * nq, nq), H, nq));
  if (c.moe()) {  // the router (whole, [H, E]), and every expert's slice as MoeMlp takes them
    const int64_t E = c.experts, ie = c.expert_intermediate / ranks;
    s.router = Scratch<bf16>(target, transposed(part(p + "mlp.gate.weight", E, H, 0, E, 0, H), E, H));
    std::vector<bf16> w13, w2;
    w13.reserve(size_t(E * 2 * ie * H)), w2.reserve(size_t(E * H * ie));
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = str_cat(p, "mlp.experts.", e, ".");
      for (const char* name : {"gate_proj.weight", "up_proj.weight"}) {
        const std::vector<bf16> rows = part(x + name, c.expert_intermediate, H, rank * ie, ie, 0, H);
        w13.insert(w13.end(), rows.begin(), rows.end());
      }
      const std::vector<bf16> cols = part(x + "down_proj.weight", H, c.expert_intermediate, 0, H, rank * ie, ie);
      w2.insert(w2.end(), cols.begin(), cols.end());
    }
    s.w13 = Scratch<bf16>(target, w13);
    s.w2 = Scratch<bf16>(target, w2);
    return w;
  }
  // Gate and up: the rank's rows of each, gate's first; down: down_proj's columns of them.
  {
    std::vector<bf16> rows = part(p + "mlp.gate_proj.weight", c.intermediate, H, rank * I, I, 0, H);
    const std::vector<bf16> up = part(p + "mlp.up_proj.weight", c.intermediate, H, rank * I, I, 0, H);
    rows.insert(rows.end(), up.begin(), up.end());
    s.w13 = Scratch<bf16>(target, transposed(rows, 2 * I, H));
  }
  s.w2 =
      Scratch<bf16>(target, transposed(part(p + "mlp.down_proj.weight", H, c.intermediate, 0, H, rank * I, I), H, I));
  return w;
}

LayerWeights LayerWeights::random(const Target& target, const ModelConfig& c, int layer, uint64_t seed, int rank,
                                  int ranks) {
  auto part = [&](const std::string& name, int64_t, int64_t in, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    std::vector<bf16> v(size_t(nr * nc));
    const float scale = 1.0f / std::sqrt(float(in));
    const uint64_t key = tensor_key(seed, name);
    parallel_rows(nr, [&](int64_t r) {
      for (int64_t j = 0; j < nc; ++j) v[size_t(r * nc + j)] = bf16(random_value(key, (r0 + r) * in + c0 + j) * scale);
    });
    return v;
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<bf16> v(static_cast<size_t>(n));
    const uint64_t key = tensor_key(seed, name);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = bf16(1.0f + random_value(key, i) / 8);
    return v;
  };
  return make(target, c, layer, rank, ranks, part, norm);
}

LayerWeights LayerWeights::load(const Target& target, const ModelConfig& c, int layer, const SafeTensors& checkpoint,
                                int rank, int ranks) {
  auto values = [](const std::vector<std::byte>& bytes) {
    std::vector<bf16> v(bytes.size() / sizeof(bf16));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(bf16));
    return v;
  };
  // (a part is whole rows or whole columns, one of equal parts along that dimension)
  auto part = [&](const std::string& name, int64_t out, int64_t in, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const bool rows = nc == in;
    const int64_t size = rows ? nr : nc, at = rows ? r0 : c0;
    return values(checkpoint.read_shard(name, ir::DType::bf16, {out, in}, rows ? 0 : 1, int(at / size),
                                        int((rows ? out : in) / size)));
  };
  auto norm = [&](const std::string& name, int64_t n) { return values(checkpoint.read(name, ir::DType::bf16, {n})); };
  return make(target, c, layer, rank, ranks, part, norm);
}

const bf16* LayerWeights::input_norm() const { return s_->input_norm.data(); }
const bf16* LayerWeights::wqkv() const { return s_->wqkv.data(); }
const bf16* LayerWeights::q_norm() const { return s_->q_norm.data(); }
const bf16* LayerWeights::k_norm() const { return s_->k_norm.data(); }
const bf16* LayerWeights::wo() const { return s_->wo.data(); }
const bf16* LayerWeights::post_norm() const { return s_->post_norm.data(); }
const bf16* LayerWeights::w13() const { return s_->w13.data(); }
const bf16* LayerWeights::w2() const { return s_->w2.data(); }
const bf16* LayerWeights::router() const { return s_->router.size() ? s_->router.data() : nullptr; }

}  // namespace tiledist::model
