// The dense decoder layer's check (model/prefill_layer.h), shared by the CPU world's
// model_dist_test and the GPU's cuda_collectives_test: two layers of a small Qwen3-shaped config
// with random weights, each rank's tokens of the residual stream after them against the same
// layers computed on the host in double from the whole weights (the same values: the seed's,
// rounded to bf16 as the ranks hold them), every element and in relative norm. `Memory` holds a
// vector where the target reads it (tests/kernels/collectives_check.h's HostMemory or the GPU
// test's DeviceMemory).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/reference.h"
#include "model/model.h"
#include "model/prefill_layer.h"
#include "model/reference.h"
#include "tiledist.h"

namespace tiledist::model::testing_model {

using Matrix = std::vector<double>;  // row-major
using reference::reference_layer;

/// A small Qwen3-shaped config for n ranks (GQA: 8 query / 2 KV heads, a KV head shared by 2
/// ranks at 4; 6 / 3 heads at 3 ranks).
inline ModelConfig small_config(int n) {
  ModelConfig c;
  c.name = "small";
  c.hidden = 96, c.heads = n == 3 ? 6 : 8, c.kv_heads = n == 3 ? 3 : 2, c.head_dim = 64;
  c.intermediate = int64_t{48} * n, c.layers = 2, c.rms_eps = 1e-6, c.rope_theta = 1e4;
  return c;
}
/// small_config with a MoE MLP: 8 experts of intermediate 64 a rank, top-2.
inline ModelConfig small_moe_config(int n) {
  ModelConfig c = small_config(n);
  c.name = "small-moe";
  c.experts = 8, c.topk = 2, c.expert_intermediate = int64_t{64} * n;
  return c;
}
/// The seed every rank uses: rank 0's fresh one, through the (host) world. Collective.
inline uint64_t shared_seed() {
  uint64_t* shared = symm_alloc<uint64_t>(1).data();
  if (rank() == 0) *shared = std::random_device{}();
  barrier_all();
  const uint64_t s = *symm_at(shared, 0);
  barrier_all();
  symm_free(shared);
  return s;
}

// Two layers of small_config, 2 sequences of 64 tokens a rank; the embeddings random.
template <template <class> class Memory>
void check_two_layers(const Target& target) {
  const int n = world_size(), me = rank();
  const ModelConfig c = small_config(n);
  const int batch = 2, seqlen = 64 * n;
  const int64_t T = int64_t(batch) * seqlen, per_rank = T / n, H = c.hidden;
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(str_cat("seed ", seed, ", ", n, " ranks"));
  std::vector<float> delta(size_t(per_rank * H));
  Matrix x(size_t(T * H));
  for (int64_t i = 0; i < T * H; ++i) {
    x[size_t(i)] = float(bf16(random_value(seed, "model.embed_tokens", i)));
    if (i / (per_rank * H) == me) delta[size_t(i - me * per_rank * H)] = float(x[size_t(i)]);
  }
  std::vector<int32_t> where(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) where[size_t(t)] = int32_t(t % seqlen);
  auto d = Memory<float>::make(delta);
  auto residual = Memory<bf16>::make(std::vector<bf16>(size_t(per_rank * H)));
  auto positions = Memory<int32_t>::make(where);
  PrefillLayer layer(target, c, batch, seqlen);
  for (int l = 0; l < int(c.layers); ++l) {
    const LayerWeights w = LayerWeights::random(target, c, l, seed, me, n);
    layer.run(d.ptr(), l == 0 ? nullptr : residual.ptr(), positions.ptr(), w, d.ptr(), residual.ptr());
    reference_layer(c, seed, l, batch, seqlen, x);
  }
  delta = d.get();
  const std::vector<bf16> res = residual.get();
  std::vector<float> got, want;
  size_t bad = 0;
  for (int64_t t = 0; t < per_rank; ++t) {
    const size_t row = size_t((me * per_rank + t) * H);
    double squares = 0;
    for (int64_t h = 0; h < H; ++h) squares += x[row + size_t(h)] * x[row + size_t(h)];
    const double rms = std::sqrt(squares / double(H));
    for (int64_t h = 0; h < H; ++h) {
      const float g = delta[size_t(t * H + h)] + float(res[size_t(t * H + h)]);
      const double wv = x[row + size_t(h)];
      // (bf16 activations between the kernels, two layers: within 2^-5 of the row's RMS; the
      // relative error in norm, below, is the tighter bound)
      if (!(std::abs(g - wv) <= std::ldexp(rms, -5)) && bad++ < 5)
        ADD_FAILURE() << "token " << me * per_rank + t << ", channel " << h << ": " << g << ", want " << wv
                      << " (row rms " << rms << ")";
      got.push_back(g), want.push_back(float(wv));
    }
  }
  EXPECT_EQ(bad, 0u);
  const double err = tiledist::reference::rel_error(got, want);
  EXPECT_LT(err, std::ldexp(1.0, -7));
  std::printf("[rank %d] relative error %.3g after %lld layers\n", me, err, (long long)c.layers);
}

/// `got` [rows, hidden] against the rows `want` of the reference's x, every element within 2^-5
/// of its row's RMS and 2^-7 in relative norm (bf16 activations between the kernels).
inline void expect_rows(const std::vector<float>& got, const Matrix& x, const std::vector<int64_t>& rows, int64_t H,
                        const std::string& what) {
  const reference::RowsDiff d = reference::compare_rows(got, x, rows, H);
  for (const std::string& e : d.first) ADD_FAILURE() << what << ": " << e;
  EXPECT_EQ(d.bad, 0u) << what;
  EXPECT_LT(d.error, std::ldexp(1.0, -7)) << what;
  std::printf("[rank %d] %s: relative error %.3g\n", rank(), what.c_str(), d.error);
}

// Decode steps after a prefill (Model: PrefillLayer fills the KV cache, DecodeLayer extends it
// a token a sequence, GEMM + AllReduce across the ranks): `layers` layers of `c`, `batch`
// sequences, a prompt of `prompt` tokens, 3 steps; after each step its tokens' hidden states
// against the reference's over the whole sequences (attention is causal: a token's state is
// the same however the tokens before it came), every rank's.
inline void check_decode(const Target& target, const ModelConfig& c, int layers, int batch, int prompt,
                         bool mega = false) {
  const int n = world_size(), me = rank();
  const int steps = 3;
  const int64_t H = c.hidden, seqlen = prompt + steps;
  ASSERT_TRUE(!c.moe() || layers == 1) << "a MoE model's check takes one layer (its near ties)";
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(str_cat("seed ", seed, ", ", n, " ranks"));
  Model model(target, c, layers, batch, prompt, seed, steps);
  model.set_decode_mega(mega);
  model.prefill();
  // The reference's sequences: each its prompt's embeddings, then its steps' tokens.
  Matrix x(size_t(batch * seqlen * H));
  for (int b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seqlen; ++t)
      for (int64_t h = 0; h < H; ++h)
        x[size_t((b * seqlen + t) * H + h)] =
            t < prompt
                ? float(bf16(random_value(seed, "model.embed_tokens", (b * prompt + t) * H + h)))
                : float(bf16(random_value(seed, "model.embed_tokens.decode", ((t - prompt) * batch + b) * H + h)));
  // (a MoE layer's tokens near a tie of their router's logits: not checked, as our f32 logits
  // from other roundings may pick another expert; one MoE layer only, so that no token after
  // them depends on them)
  std::vector<bool> ties;
  for (int l = 0; l < layers; ++l) reference_layer(c, seed, l, batch, int(seqlen), x, &ties);
  auto check_step = [&](int s, const std::string& what) {
    model.decode();
    std::vector<int64_t> rows;
    std::vector<float> got;
    const std::vector<float> all = model.decoded();
    for (int b = 0; b < batch; ++b) {
      const int64_t row = b * seqlen + prompt + s;
      if (size_t(row) < ties.size() && ties[size_t(row)]) continue;
      rows.push_back(row);
      got.insert(got.end(), all.begin() + b * H, all.begin() + (b + 1) * H);
    }
    expect_rows(got, x, rows, H, str_cat(what, "decode step ", s + 1, " on rank ", me));
  };
  for (int s = 0; s < steps; ++s) check_step(s, "");
  std::string past;
  try {
    model.decode();
  } catch (const Error& e) {
    past = e.what();
  }
  EXPECT_NE(past.find("decode step 4 of a model made for 3 decode steps"), std::string::npos) << past;
  // A prefill starts the steps again (on a GPU, a dense model's through the graph made above).
  model.prefill();
  for (int s = 0; s < 2; ++s) check_step(s, "after a second prefill, ");
}

}  // namespace tiledist::model::testing_model
