// A tensor-parallel dense decoder layer (model/dense_layer.h): the library's AllGather + GEMM,
// GEMM + ReduceScatter and attention objects, and transformer.h's RMSNorm, q/k norm with
// rotary embedding and SwiGLU between them, queued on one stream; and its weights, a rank's
// part made from a seed.
#include "model/dense_layer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"
#include "kernels/transformer.h"

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

/// The first KV head of rank `rank`'s query heads, and how many it holds.
std::pair<int64_t, int64_t> kv_heads_of(const ModelConfig& c, int rank, int ranks) {
  if (c.kv_heads >= ranks) return {rank * (c.kv_heads / ranks), c.kv_heads / ranks};
  return {rank / (ranks / c.kv_heads), 1};  // (a KV head shared by ranks / kv_heads ranks)
}
/// Throws Error unless `c` is a dense model's that splits over `ranks`.
void check_dense(const ModelConfig& c, int ranks) {
  if (c.moe())
    throw Error(str_cat("tiledist: model '", c.name, "': ", c.experts,
                        " experts: a dense layer takes a dense model's config (the MoE layer is not built yet)"));
  c.check(ranks);
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

struct DenseWeights::State {
  Scratch<bf16> input_norm, wqkv, q_norm, k_norm, wo, post_norm, w13, w2;
};

DenseWeights::DenseWeights() : s_(std::make_unique<State>()) {}
DenseWeights::DenseWeights(DenseWeights&&) noexcept = default;
DenseWeights& DenseWeights::operator=(DenseWeights&&) noexcept = default;
DenseWeights::~DenseWeights() = default;

DenseWeights DenseWeights::random(const Target& target, const ModelConfig& c, int layer, uint64_t seed, int rank,
                                  int ranks) {
  check_dense(c, ranks);
  const std::string p = str_cat("model.layers.", layer, ".");
  const int64_t H = c.hidden, D = c.head_dim, hq = c.heads / ranks, I = c.intermediate / ranks;
  const auto [kv0, hk] = kv_heads_of(c, rank, ranks);
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<bf16> v(static_cast<size_t>(n));
    const uint64_t key = tensor_key(seed, p + name);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = bf16(1.0f + random_value(key, i) / 8);
    return v;
  };
  // B [K, N] of a Hugging Face weight [out, in]: B[k, j] = W[row(j), col(k)] / sqrt(in).
  auto linear = [&](const std::string& name, int64_t in, int64_t K, int64_t N, auto row, auto col) {
    std::vector<bf16> b(size_t(K * N));
    const float scale = 1.0f / std::sqrt(float(in));
    const uint64_t key = tensor_key(seed, p + name);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) b[size_t(k * N + j)] = bf16(random_value(key, row(j) * in + col(k)) * scale);
    return b;
  };
  auto same = [](int64_t k) { return k; };
  DenseWeights w;
  State& s = *w.s_;
  s.input_norm = Scratch<bf16>(target, norm("input_layernorm.weight", H));
  s.post_norm = Scratch<bf16>(target, norm("post_attention_layernorm.weight", H));
  s.q_norm = Scratch<bf16>(target, norm("self_attn.q_norm.weight", D));
  s.k_norm = Scratch<bf16>(target, norm("self_attn.k_norm.weight", D));
  // QKV: the rank's query heads' rows of q_proj, then its KV heads' rows of k_proj and v_proj.
  const int64_t nq = hq * D, nk = hk * D;
  std::vector<bf16> qkv(size_t(H * (nq + 2 * nk)));
  const std::vector<bf16> q =
      linear("self_attn.q_proj.weight", H, H, nq, [&](int64_t j) { return rank * nq + j; }, same);
  const std::vector<bf16> k = linear("self_attn.k_proj.weight", H, H, nk, [&](int64_t j) { return kv0 * D + j; }, same);
  const std::vector<bf16> v = linear("self_attn.v_proj.weight", H, H, nk, [&](int64_t j) { return kv0 * D + j; }, same);
  for (int64_t r = 0; r < H; ++r) {
    bf16* to = &qkv[size_t(r * (nq + 2 * nk))];
    std::copy_n(&q[size_t(r * nq)], nq, to);
    std::copy_n(&k[size_t(r * nk)], nk, to + nq);
    std::copy_n(&v[size_t(r * nk)], nk, to + nq + nk);
  }
  s.wqkv = Scratch<bf16>(target, qkv);
  // O: o_proj [hidden, heads D], its columns of the rank's heads.
  s.wo = Scratch<bf16>(
      target, linear("self_attn.o_proj.weight", c.heads * D, nq, H, same, [&](int64_t kk) { return rank * nq + kk; }));
  // Gate and up: the rank's rows of each, gate's columns first; down: down_proj's columns of them.
  const std::vector<bf16> gate = linear("mlp.gate_proj.weight", H, H, I, [&](int64_t j) { return rank * I + j; }, same);
  const std::vector<bf16> up = linear("mlp.up_proj.weight", H, H, I, [&](int64_t j) { return rank * I + j; }, same);
  std::vector<bf16> w13(size_t(H * 2 * I));
  for (int64_t r = 0; r < H; ++r) {
    std::copy_n(&gate[size_t(r * I)], I, &w13[size_t(r * 2 * I)]);
    std::copy_n(&up[size_t(r * I)], I, &w13[size_t(r * 2 * I + I)]);
  }
  s.w13 = Scratch<bf16>(target, w13);
  s.w2 = Scratch<bf16>(
      target, linear("mlp.down_proj.weight", c.intermediate, I, H, same, [&](int64_t kk) { return rank * I + kk; }));
  return w;
}

const bf16* DenseWeights::input_norm() const { return s_->input_norm.data(); }
const bf16* DenseWeights::wqkv() const { return s_->wqkv.data(); }
const bf16* DenseWeights::q_norm() const { return s_->q_norm.data(); }
const bf16* DenseWeights::k_norm() const { return s_->k_norm.data(); }
const bf16* DenseWeights::wo() const { return s_->wo.data(); }
const bf16* DenseWeights::post_norm() const { return s_->post_norm.data(); }
const bf16* DenseWeights::w13() const { return s_->w13.data(); }
const bf16* DenseWeights::w2() const { return s_->w2.data(); }

struct DenseLayer::State {
  Target target;
  ModelConfig config;
  int batch = 0, seqlen = 0, ranks = 1;
  int64_t T = 0, Ts = 0, hq = 0, hk = 0, I = 0;
  std::unique_ptr<kernels::AgGemm> qkv_gemm, up_gemm;
  std::unique_ptr<kernels::GemmRs> o_gemm, down_gemm;
  std::unique_ptr<kernels::Attention> attention;
  Kernel norm, rope, swiglu;
  Scratch<bf16> zeros, normed, res, q, k, v, o, act;
  Scratch<float> qkv, attn, gu;
};

DenseLayer::DenseLayer(const Target& target, const ModelConfig& c, int batch, int seqlen)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.target = target, s.config = c, s.batch = batch, s.seqlen = seqlen;
  s.ranks = kernels::detail::world_ranks(target);
  check_dense(c, s.ranks);
  s.T = int64_t(batch) * seqlen;
  if (batch < 1 || seqlen < 1 || s.T % s.ranks != 0)
    throw Error(str_cat("tiledist: model '", c.name, "': ", batch, " sequences of ", seqlen, " tokens over ", s.ranks,
                        " ranks (at least one token, a multiple of the ranks in all)"));
  s.Ts = s.T / s.ranks, s.hq = c.heads / s.ranks, s.hk = kv_heads_of(c, 0, s.ranks).second;
  s.I = c.intermediate / s.ranks;
  const int64_t H = c.hidden, D = c.head_dim, nqkv = (s.hq + 2 * s.hk) * D;
  s.qkv_gemm = std::make_unique<kernels::AgGemm>(target, s.T, nqkv, H);
  s.o_gemm = std::make_unique<kernels::GemmRs>(target, s.T, H, s.hq * D);
  s.up_gemm = std::make_unique<kernels::AgGemm>(target, s.T, 2 * s.I, H);
  s.down_gemm = std::make_unique<kernels::GemmRs>(target, s.T, H, s.I);
  s.attention = std::make_unique<kernels::Attention>(target, int(s.hq), int(s.hk), int(D), ir::DType::bf16, true);
  const int block = int(std::min<uint64_t>(1024, std::bit_ceil(uint64_t(H))));
  s.norm = compile(kernels::rmsnorm_kernel(ir::DType::f32), {{"RESIDUAL", 1}, {"BLOCK", block}}, target);
  s.rope = compile(kernels::qk_norm_rope_kernel(ir::DType::f32), {{"D", int(D)}, {"NORM", 1}}, target);
  s.swiglu = compile(kernels::swiglu_kernel(ir::DType::f32), {{"BR", 16}, {"BI", 128}}, target);
  s.zeros = Scratch<bf16>(target, size_t(s.Ts * H));
  s.normed = Scratch<bf16>(target, size_t(s.Ts * H));
  s.res = Scratch<bf16>(target, size_t(s.Ts * H));
  s.qkv = Scratch<float>(target, size_t(s.T * nqkv));
  s.q = Scratch<bf16>(target, size_t(s.T * s.hq * D));
  s.k = Scratch<bf16>(target, size_t(s.T * s.hk * D));
  s.v = Scratch<bf16>(target, size_t(s.T * s.hk * D));
  s.o = Scratch<bf16>(target, size_t(s.T * s.hq * D));
  s.attn = Scratch<float>(target, size_t(s.Ts * H));
  s.gu = Scratch<float>(target, size_t(s.T * 2 * s.I));
  s.act = Scratch<bf16>(target, size_t(s.T * s.I));
}

DenseLayer::~DenseLayer() = default;

void DenseLayer::run(const float* delta, const bf16* residual, const int32_t* positions, const DenseWeights& w,
                     float* delta_out, bf16* residual_out, const runtime::Stream* stream) {
  State& s = *s_;
  const ModelConfig& c = s.config;
  const int64_t H = c.hidden;
  const bool gpu = kernels::detail::on_gpu(s.target);
  const runtime::Stream* on = gpu ? (stream ? stream : &runtime::Stream::legacy()) : nullptr;
  const float eps = float(c.rms_eps), log2_theta = float(std::log2(c.rope_theta));
  using kernels::detail::launch;
  // Attention: the residual stream's norm, QKV of every token, q/k norm and rotary, causal
  // attention over the rank's heads, O projection summed over the ranks into our tokens.
  launch(s.norm, on, Grid(int(s.Ts)), delta, residual ? residual : s.zeros.data(), w.input_norm(), s.normed.data(),
         s.res.data(), int(H), eps);
  s.qkv_gemm->run(s.normed.data(), w.wqkv(), s.qkv.data(), on);
  launch(s.rope, on, Grid(int(s.T), int(s.hq + 2 * s.hk)), static_cast<const float*>(s.qkv.data()), positions,
         w.q_norm(), w.k_norm(), s.q.data(), s.k.data(), s.v.data(), int(s.T), int(s.hq), int(s.hk), eps, log2_theta);
  s.attention->run(static_cast<const bf16*>(s.q.data()), s.k.data(), s.v.data(), s.o.data(), s.batch, s.seqlen, on);
  s.o_gemm->run(s.o.data(), w.wo(), s.attn.data(), on);
  // MLP: the norm of the stream after attention (its sum the layer's residual out), gate and up
  // of every token, SwiGLU, the down projection summed over the ranks into our tokens.
  launch(s.norm, on, Grid(int(s.Ts)), static_cast<const float*>(s.attn.data()), static_cast<const bf16*>(s.res.data()),
         w.post_norm(), s.normed.data(), residual_out, int(H), eps);
  s.up_gemm->run(s.normed.data(), w.w13(), s.gu.data(), on);
  launch(s.swiglu, on, Grid(int((s.T + 15) / 16), int((s.I + 127) / 128)), static_cast<const float*>(s.gu.data()),
         s.act.data(), int(s.T), int(s.I));
  s.down_gemm->run(s.act.data(), w.w2(), delta_out, on);
  if (gpu && !stream) on->synchronize();  // (no stream given: done when the call returns)
}

}  // namespace tiledist::model
