// A tensor-parallel dense decoder layer (model/prefill_layer.h): the library's AllGather + GEMM,
// GEMM + ReduceScatter and attention objects, and transformer.h's RMSNorm, q/k norm with
// rotary embedding and SwiGLU between them, queued on one stream.
#include "model/prefill_layer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"
#include "kernels/transformer.h"
#include "model/moe_part.h"

namespace tiledist::model {

using kernels::detail::Scratch;

struct PrefillLayer::State {
  Target target;
  ModelConfig config;
  int batch = 0, seqlen = 0, ranks = 1;
  int64_t T = 0, Ts = 0, hq = 0, hk = 0, I = 0;
  std::unique_ptr<kernels::AgGemm> qkv_gemm, up_gemm;
  std::unique_ptr<kernels::GemmRs> o_gemm, down_gemm;
  std::unique_ptr<kernels::Attention> attention;
  std::unique_ptr<detail::MoePart> moe;  // (a MoE model's MLP)
  Kernel norm, rope, swiglu, append;
  Scratch<bf16> zeros, normed, res, q, k, v, o, act;
  Scratch<float> qkv, attn, gu;
};

PrefillLayer::PrefillLayer(const Target& target, const ModelConfig& c, int batch, int seqlen)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.target = target, s.config = c, s.batch = batch, s.seqlen = seqlen;
  s.ranks = kernels::detail::world_ranks(target);
  check_layers(c, s.ranks);
  s.T = int64_t(batch) * seqlen;
  if (batch < 1 || seqlen < 1 || s.T % s.ranks != 0)
    throw Error(str_cat("tiledist: model '", c.name, "': ", batch, " sequences of ", seqlen, " tokens over ", s.ranks,
                        " ranks (at least one token, a multiple of the ranks in all)"));
  s.Ts = s.T / s.ranks, s.hq = c.heads / s.ranks, s.hk = kv_heads_of(c, 0, s.ranks).second;
  s.I = c.intermediate / s.ranks;
  const int64_t H = c.hidden, D = c.head_dim, nqkv = (s.hq + 2 * s.hk) * D;
  s.qkv_gemm = std::make_unique<kernels::AgGemm>(target, s.T, nqkv, H);
  s.o_gemm = std::make_unique<kernels::GemmRs>(target, s.T, H, s.hq * D);
  if (c.moe()) {
    s.moe = std::make_unique<detail::MoePart>(target, c, s.Ts, kernels::MoeReduce::Mode::reduce_scatter);
  } else {
    s.up_gemm = std::make_unique<kernels::AgGemm>(target, s.T, 2 * s.I, H);
    s.down_gemm = std::make_unique<kernels::GemmRs>(target, s.T, H, s.I);
    s.gu = Scratch<float>(target, size_t(s.T * 2 * s.I));
    s.act = Scratch<bf16>(target, size_t(s.T * s.I));
  }
  s.attention = std::make_unique<kernels::Attention>(target, int(s.hq), int(s.hk), int(D), ir::DType::bf16, true);
  const int block = int(std::min<uint64_t>(1024, std::bit_ceil(uint64_t(H))));
  s.norm = compile(kernels::rmsnorm_kernel(ir::DType::f32), {{"RESIDUAL", 1}, {"BLOCK", block}}, target);
  s.rope = compile(kernels::qk_norm_rope_kernel(ir::DType::f32), {{"D", int(D)}, {"NORM", 1}}, target);
  s.swiglu = compile(kernels::swiglu_kernel(ir::DType::f32), {{"BR", 16}, {"BI", 128}}, target);
  s.append = compile(kernels::kv_append_kernel(), {{"D", int(D)}}, target);
  s.zeros = Scratch<bf16>(target, size_t(s.Ts * H));
  s.normed = Scratch<bf16>(target, size_t(s.Ts * H));
  s.res = Scratch<bf16>(target, size_t(s.Ts * H));
  s.qkv = Scratch<float>(target, size_t(s.T * nqkv));
  s.q = Scratch<bf16>(target, size_t(s.T * s.hq * D));
  s.k = Scratch<bf16>(target, size_t(s.T * s.hk * D));
  s.v = Scratch<bf16>(target, size_t(s.T * s.hk * D));
  s.o = Scratch<bf16>(target, size_t(s.T * s.hq * D));
  s.attn = Scratch<float>(target, size_t(s.Ts * H));
}

PrefillLayer::~PrefillLayer() = default;

void PrefillLayer::run(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& w,
                       float* delta_out, bf16* residual_out, const runtime::Stream* stream) {
  run_on(delta, residual, positions, w, delta_out, residual_out, nullptr, 0, stream);
}
void PrefillLayer::run(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& w,
                       float* delta_out, bf16* residual_out, KvCache& cache, int layer, const runtime::Stream* stream) {
  const State& s = *s_;
  if (cache.batch() != s.batch || cache.kv_heads() != s.hk || cache.max_len() < s.seqlen || layer < 0 ||
      layer >= cache.layers())
    throw Error(str_cat("tiledist: model '", s.config.name, "': a prefill of ", s.batch, " sequences of ", s.seqlen,
                        " tokens and ", s.hk, " KV heads given layer ", layer, " of a cache of ", cache.layers(),
                        " layers, ", cache.batch(), " sequences of ", cache.max_len(), " rows and ", cache.kv_heads(),
                        " KV heads"));
  run_on(delta, residual, positions, w, delta_out, residual_out, &cache, layer, stream);
}

void PrefillLayer::run_on(const float* delta, const bf16* residual, const int32_t* positions, const LayerWeights& w,
                          float* delta_out, bf16* residual_out, KvCache* cache, int layer,
                          const runtime::Stream* stream) {
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
  if (cache)  // (every token's key and value at its position, each sequence's length after its last)
    launch(s.append, on, Grid(int(s.T)), static_cast<const bf16*>(s.k.data()), static_cast<const bf16*>(s.v.data()),
           positions, cache->k(layer), cache->v(layer), cache->lens(layer), int(s.T), s.seqlen, cache->max_len(),
           int(s.hk));
  s.attention->run(static_cast<const bf16*>(s.q.data()), s.k.data(), s.v.data(), s.o.data(), s.batch, s.seqlen, on);
  s.o_gemm->run(s.o.data(), w.wo(), s.attn.data(), on);
  // MLP: the norm of the stream after attention (its sum the layer's residual out), gate and up
  // of every token, SwiGLU, the down projection summed over the ranks into our tokens.
  launch(s.norm, on, Grid(int(s.Ts)), static_cast<const float*>(s.attn.data()), static_cast<const bf16*>(s.res.data()),
         w.post_norm(), s.normed.data(), residual_out, int(H), eps);
  if (s.moe) {
    s.moe->run(s.normed.data(), w, delta_out, on);
  } else {
    s.up_gemm->run(s.normed.data(), w.w13(), s.gu.data(), on);
    launch(s.swiglu, on, Grid(int((s.T + 15) / 16), int((s.I + 127) / 128)), static_cast<const float*>(s.gu.data()),
           s.act.data(), int(s.T), int(s.I));
    s.down_gemm->run(s.act.data(), w.w2(), delta_out, on);
  }
  if (gpu && !stream) on->synchronize();  // (no stream given: done when the call returns)
}

}  // namespace tiledist::model
