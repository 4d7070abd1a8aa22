// A dense model's decode step (model/decode_layer.h): the KV cache, and a layer over one token a
// sequence from the library's GEMM, GEMM + AllReduce and flash decoding, with transformer.h's
// RMSNorm, q/k norm and rotary embedding, KV append and SwiGLU between them, on one stream.
#include "model/decode_layer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/flash_decode.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"
#include "kernels/transformer.h"
#include "mega/task_graph.h"
#include "model/moe_part.h"

namespace tiledist::model {

using kernels::detail::Scratch;

namespace {

// to[i] = from[i] for i < n, BLOCK a program: the step's positions, copied from the cache's
// lengths by a kernel (not the copy engine) so that a step recorded as tasks holds it.
void copy_i32(tl::Ptr<int32_t> from, tl::Ptr<int32_t> to, tl::Int n, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  tl::store(to + i, tl::load(from + i, i < n, 0), i < n);
}
const KernelDef kCopyI32("copy_i32", copy_i32, {"from", "to", "n", "BLOCK"}, {{"BLOCK", 128}});

}  // namespace

struct KvCache::State {
  int batch = 0, max_len = 0, hk = 0;
  std::vector<Scratch<bf16>> k, v;
  std::vector<Scratch<int32_t>> lens;
};

KvCache::KvCache(const Target& target, const ModelConfig& c, int layers, int batch, int max_len)
    : s_(std::make_unique<State>()) {
  const int ranks = kernels::detail::world_ranks(target), rank = kernels::detail::world_rank(target);
  check_layers(c, ranks);
  if (layers < 1 || batch < 1 || max_len < 1)
    throw Error(str_cat("tiledist: model '", c.name, "': a KV cache of ", layers, " layers, ", batch, " sequences of ",
                        max_len, " tokens (each at least 1)"));
  State& s = *s_;
  s.batch = batch, s.max_len = max_len, s.hk = int(kv_heads_of(c, rank, ranks).second);
  const size_t rows = size_t(batch) * size_t(max_len) * size_t(s.hk) * size_t(c.head_dim);
  for (int l = 0; l < layers; ++l) {
    s.k.emplace_back(target, rows);
    s.v.emplace_back(target, rows);
    s.lens.emplace_back(target, size_t(batch));
  }
}
KvCache::~KvCache() = default;
bf16* KvCache::k(int layer) const { return s_->k.at(size_t(layer)).data(); }
bf16* KvCache::v(int layer) const { return s_->v.at(size_t(layer)).data(); }
int32_t* KvCache::lens(int layer) const { return s_->lens.at(size_t(layer)).data(); }
int KvCache::layers() const { return int(s_->k.size()); }
int KvCache::batch() const { return s_->batch; }
int KvCache::max_len() const { return s_->max_len; }
int KvCache::kv_heads() const { return s_->hk; }

struct DecodeLayer::State {
  Target target;
  ModelConfig config;
  int batch = 0;
  int64_t hq = 0, hk = 0, I = 0;
  std::unique_ptr<kernels::Gemm> qkv_gemm, up_gemm;
  std::unique_ptr<kernels::GemmAr> o_gemm, down_gemm;
  std::unique_ptr<kernels::FlashDecode> attention;
  std::unique_ptr<detail::MoePart> moe;  // (a MoE model's MLP)
  int rank = 0;
  Kernel norm, rope, append, swiglu, copy;
  Scratch<bf16> zeros, normed, res, q, k, v, o, act;
  Scratch<float> qkv, attn, gu;
  Scratch<int32_t> pos;  // (the step's positions: the cache's lengths before it)
};

DecodeLayer::DecodeLayer(const Target& target, const ModelConfig& c, int batch) : s_(std::make_unique<State>()) {
  State& s = *s_;
  const int ranks = kernels::detail::world_ranks(target);
  check_layers(c, ranks);
  if (batch < 1) throw Error(str_cat("tiledist: model '", c.name, "': a decode step of ", batch, " sequences"));
  if (c.moe() && batch % ranks != 0)  // (before anything collective is allocated)
    throw Error(str_cat("tiledist: model '", c.name, "': a decode step of ", batch, " sequences over ", ranks,
                        " ranks (a MoE model's: a multiple of the ranks, each rank routing its share)"));
  s.target = target, s.config = c, s.batch = batch, s.rank = kernels::detail::world_rank(target);
  s.hq = c.heads / ranks, s.hk = kv_heads_of(c, 0, ranks).second, s.I = c.intermediate / ranks;
  const int64_t H = c.hidden, D = c.head_dim, B = batch, nqkv = (s.hq + 2 * s.hk) * D;
  s.qkv_gemm = std::make_unique<kernels::Gemm>(target, B, nqkv, H);
  s.o_gemm = std::make_unique<kernels::GemmAr>(target, B, H, s.hq * D);
  if (c.moe()) {  // (each rank routes its rows of the batch; every rank gets every row's output)
    s.moe = std::make_unique<detail::MoePart>(target, c, B / ranks, kernels::MoeReduce::Mode::all_reduce);
  } else {
    s.up_gemm = std::make_unique<kernels::Gemm>(target, B, 2 * s.I, H);
    s.down_gemm = std::make_unique<kernels::GemmAr>(target, B, H, s.I);
    s.gu = Scratch<float>(target, size_t(B * 2 * s.I));
    s.act = Scratch<bf16>(target, size_t(B * s.I));
  }
  s.attention = std::make_unique<kernels::FlashDecode>(target, int(s.hq), int(s.hk), int(D));
  // (a decode step's norm is a program a row on its critical path: the whole row in one walk
  // of each pass, not 1024 columns at a time, whose dependent loads took ~10 µs at H = 4096 on
  // an H100 in the mega kernel's profile, bench/RESULTS.md)
  const int block = int(std::min<uint64_t>(8192, std::bit_ceil(uint64_t(H))));
  CompileOptions norm_options = CompileOptions::from_env();
  if (block >= 4096) norm_options.num_warps = std::max(norm_options.num_warps, 8);
  s.norm = compile(kernels::rmsnorm_kernel(ir::DType::f32), {{"RESIDUAL", 1}, {"BLOCK", block}}, target, norm_options);
  s.rope = compile(kernels::qk_norm_rope_kernel(ir::DType::f32), {{"D", int(D)}, {"NORM", 1}}, target);
  s.append = compile(kernels::kv_append_kernel(), {{"D", int(D)}}, target);
  s.swiglu = compile(kernels::swiglu_kernel(ir::DType::f32), {{"BR", 16}, {"BI", 128}}, target);
  s.copy = compile(kCopyI32, {{"BLOCK", 128}}, target);
  s.pos = Scratch<int32_t>(target, size_t(B));
  s.zeros = Scratch<bf16>(target, size_t(B * H));
  s.normed = Scratch<bf16>(target, size_t(B * H));
  s.res = Scratch<bf16>(target, size_t(B * H));
  s.qkv = Scratch<float>(target, size_t(B * nqkv));
  s.q = Scratch<bf16>(target, size_t(B * s.hq * D));
  s.k = Scratch<bf16>(target, size_t(B * s.hk * D));
  s.v = Scratch<bf16>(target, size_t(B * s.hk * D));
  s.o = Scratch<bf16>(target, size_t(B * s.hq * D));
  s.attn = Scratch<float>(target, size_t(B * H));
}

DecodeLayer::~DecodeLayer() = default;

void DecodeLayer::run(const float* delta, const bf16* residual, const LayerWeights& w, KvCache& cache, int layer,
                      float* delta_out, bf16* residual_out, const runtime::Stream* stream) {
  State& s = *s_;
  const ModelConfig& c = s.config;
  if (cache.batch() != s.batch || cache.kv_heads() != s.hk || layer < 0 || layer >= cache.layers())
    throw Error(str_cat("tiledist: model '", c.name, "': a decode step of ", s.batch, " sequences and ", s.hk,
                        " KV heads given layer ", layer, " of a cache of ", cache.layers(), " layers, ", cache.batch(),
                        " sequences and ", cache.kv_heads(), " KV heads"));
  const int64_t H = c.hidden, B = s.batch;
  const bool gpu = kernels::detail::on_gpu(s.target);
  const runtime::Stream* on = gpu ? (stream ? stream : &runtime::Stream::legacy()) : nullptr;
  const float eps = float(c.rms_eps), log2_theta = float(std::log2(c.rope_theta));
  using kernels::detail::launch;
  // Attention: the norm, QKV of the rank's heads, q/k norm and rotary at each sequence's length,
  // the key and value appended there (the length advanced), flash decoding over the cache, the O
  // projection summed over the ranks.
  // (the step's positions: the lengths before it, copied first, as kv_append advances the
  // lengths while other warps of a program may still read the position)
  int32_t* lens = cache.lens(layer);
  launch(s.copy, on, Grid(int((B + 127) / 128)), static_cast<const int32_t*>(lens), s.pos.data(), int(B));
  launch(s.norm, on, Grid(int(B)), delta, residual ? residual : s.zeros.data(), w.input_norm(), s.normed.data(),
         s.res.data(), int(H), eps);
  s.qkv_gemm->run(static_cast<const bf16*>(s.normed.data()), w.wqkv(), s.qkv.data(), on);
  launch(s.rope, on, Grid(int(B), int(s.hq + 2 * s.hk)), static_cast<const float*>(s.qkv.data()),
         static_cast<const int32_t*>(s.pos.data()), w.q_norm(), w.k_norm(), s.q.data(), s.k.data(), s.v.data(), int(B),
         int(s.hq), int(s.hk), eps, log2_theta);
  launch(s.append, on, Grid(int(B)), static_cast<const bf16*>(s.k.data()), static_cast<const bf16*>(s.v.data()),
         static_cast<const int32_t*>(s.pos.data()), cache.k(layer), cache.v(layer), lens, int(B), 1, cache.max_len(),
         int(s.hk));
  s.attention->run(static_cast<const bf16*>(s.q.data()), static_cast<const bf16*>(cache.k(layer)),
                   static_cast<const bf16*>(cache.v(layer)), static_cast<const int32_t*>(lens), s.o.data(), int(B), 1,
                   cache.max_len(), on);
  s.o_gemm->run(s.o.data(), w.wo(), s.attn.data(), on);
  // MLP: the norm of the stream after attention (its sum the layer's residual out), gate and up,
  // SwiGLU, the down projection summed over the ranks.
  launch(s.norm, on, Grid(int(B)), static_cast<const float*>(s.attn.data()), static_cast<const bf16*>(s.res.data()),
         w.post_norm(), s.normed.data(), residual_out, int(H), eps);
  if (s.moe) {
    s.moe->run(s.normed.data() + size_t(s.rank) * size_t(B / kernels::detail::world_ranks(s.target) * H), w, delta_out,
               on);
  } else {
    s.up_gemm->run(static_cast<const bf16*>(s.normed.data()), w.w13(), s.gu.data(), on);
    launch(s.swiglu, on, Grid(int((B + 15) / 16), int((s.I + 127) / 128)), static_cast<const float*>(s.gu.data()),
           s.act.data(), int(B), int(s.I));
    s.down_gemm->run(s.act.data(), w.w2(), delta_out, on);
  }
  if (gpu && !stream) on->synchronize();  // (no stream given: done when the call returns)
}

void DecodeLayer::record(mega::TaskGraph& graph, const float* delta, const bf16* residual, const LayerWeights& w,
                         KvCache& cache, int layer, float* delta_out, bf16* residual_out) {
  State& s = *s_;
  const ModelConfig& c = s.config;
  const int64_t H = c.hidden, D = c.head_dim, B = s.batch, nqkv = (s.hq + 2 * s.hk) * D;
  if (s.moe)
    throw Error(str_cat("tiledist: model '", c.name, "': a MoE layer's decode step as tasks (its routing counts ",
                        "its runs on the host)"));
  graph.input(w.input_norm(), H), graph.input(w.post_norm(), H);
  graph.input(w.wqkv(), H * nqkv), graph.input(w.q_norm(), D), graph.input(w.k_norm(), D);
  graph.input(w.wo(), s.hq * D * H), graph.input(w.w13(), H * 2 * s.I), graph.input(w.w2(), s.I * H);
  const int64_t rows = B * int64_t(cache.max_len()) * s.hk * D;
  graph.input(cache.k(layer), rows), graph.input(cache.v(layer), rows), graph.input(cache.lens(layer), B);
  graph.input(s.zeros.data(), B * H);
  auto scratch = [&](const auto& buffer) {
    graph.buffer(buffer.data(), int64_t(buffer.size() * sizeof(*buffer.data())));
  };
  scratch(s.normed), scratch(s.res), scratch(s.qkv), scratch(s.q), scratch(s.k), scratch(s.v), scratch(s.o);
  scratch(s.attn), scratch(s.gu), scratch(s.act), scratch(s.pos);
  const bool gpu = kernels::detail::on_gpu(s.target);
  std::optional<runtime::Stream> recording;  // (a GPU run's stream: the objects' order on it, nothing launched)
  if (gpu) recording.emplace();
  graph.record(str_cat("layer", layer), [&] {
    run(delta, residual, w, cache, layer, delta_out, residual_out, recording ? &*recording : nullptr);
  });
}

}  // namespace tiledist::model
