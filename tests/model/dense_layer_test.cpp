// A dense model's decoder layers (model/dense_layer.h) on the CPU backend's world, run by
// `tiledist-run -n N model_dist_test` (N = 1 to 4): two layers of a small Qwen3-shaped config
// with random weights, each rank's tokens of the residual stream after them against the same
// layers computed on the host in double from the whole weights (the same values: the seed's,
// rounded to bf16 as the ranks hold them), every element and in relative norm.
#include "model/dense_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/reference.h"
#include "tiledist.h"

namespace tiledist::model {
namespace {

using Matrix = std::vector<double>;  // row-major

/// Hugging Face's weight `name` [out, in] of layer `layer`, as the ranks hold it (bf16).
Matrix weight(uint64_t seed, int layer, const std::string& name, int64_t out, int64_t in) {
  Matrix w(size_t(out * in));
  const float scale = 1.0f / std::sqrt(float(in));
  for (int64_t i = 0; i < out * in; ++i)
    w[size_t(i)] = float(bf16(random_value(seed, str_cat("model.layers.", layer, ".", name), i) * scale));
  return w;
}
std::vector<double> norm_weight(uint64_t seed, int layer, const std::string& name, int64_t n) {
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[size_t(i)] = float(bf16(1.0f + random_value(seed, str_cat("model.layers.", layer, ".", name), i) / 8));
  return w;
}
/// y [T, out] = x [T, in] @ w^T.
Matrix linear(const Matrix& x, const Matrix& w, int64_t T, int64_t out, int64_t in) {
  Matrix y(size_t(T * out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += x[size_t(t * in + i)] * w[size_t(o * in + i)];
      y[size_t(t * out + o)] = sum;
    }
  return y;
}
/// Each row of `n` elements (rows of x) RMSNorm'ed, times w.
Matrix rmsnorm(const Matrix& x, const std::vector<double>& w, int64_t n, double eps) {
  Matrix y(x.size());
  for (size_t r = 0; r < x.size() / size_t(n); ++r) {
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) squares += x[r * n + i] * x[r * n + i];
    const double rstd = 1.0 / std::sqrt(squares / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * rstd * w[size_t(i)];
  }
  return y;
}

/// The residual stream x [T, hidden] after layer `layer` (Qwen3's decoder layer in double).
void reference_layer(const ModelConfig& c, uint64_t seed, int layer, int batch, int seqlen, Matrix& x) {
  const int64_t T = int64_t(batch) * seqlen, H = c.hidden, D = c.head_dim, nq = c.heads * D, nk = c.kv_heads * D;
  const double eps = c.rms_eps;
  const Matrix n1 = rmsnorm(x, norm_weight(seed, layer, "input_layernorm.weight", H), H, eps);
  Matrix q = linear(n1, weight(seed, layer, "self_attn.q_proj.weight", nq, H), T, nq, H);
  Matrix k = linear(n1, weight(seed, layer, "self_attn.k_proj.weight", nk, H), T, nk, H);
  const Matrix v = linear(n1, weight(seed, layer, "self_attn.v_proj.weight", nk, H), T, nk, H);
  q = rmsnorm(q, norm_weight(seed, layer, "self_attn.q_norm.weight", D), D, eps);
  k = rmsnorm(k, norm_weight(seed, layer, "self_attn.k_norm.weight", D), D, eps);
  auto rope = [&](Matrix& m, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double angle = double(t % seqlen) * std::pow(c.rope_theta, -2.0 * double(i) / double(D));
          double& a = m[size_t((t * heads + h) * D + i)];
          double& b = m[size_t((t * heads + h) * D + i + D / 2)];
          const double lo = a, hi = b;
          a = lo * std::cos(angle) - hi * std::sin(angle);
          b = hi * std::cos(angle) + lo * std::sin(angle);
        }
  };
  rope(q, c.heads);
  rope(k, c.kv_heads);
  Matrix o(size_t(T * nq), 0.0);
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < seqlen; ++i) {
        const int64_t ti = b * seqlen + i;
        std::vector<double> s(size_t(i + 1));
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {  // (causal)
          const int64_t tj = b * seqlen + j;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[size_t((ti * c.heads + h) * D + d)] * k[size_t((tj * c.kv_heads + h / group) * D + d)];
          s[size_t(j)] = dot / std::sqrt(double(D));
          top = std::max(top, s[size_t(j)]);
        }
        for (double& e : s) sum += (e = std::exp(e - top));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < D; ++d)
            o[size_t((ti * c.heads + h) * D + d)] +=
                s[size_t(j)] / sum * v[size_t(((b * seqlen + j) * c.kv_heads + h / group) * D + d)];
      }
  const Matrix attn = linear(o, weight(seed, layer, "self_attn.o_proj.weight", H, nq), T, H, nq);
  for (size_t i = 0; i < x.size(); ++i) x[i] += attn[i];
  const Matrix n2 = rmsnorm(x, norm_weight(seed, layer, "post_attention_layernorm.weight", H), H, eps);
  const int64_t I = c.intermediate;
  const Matrix g = linear(n2, weight(seed, layer, "mlp.gate_proj.weight", I, H), T, I, H);
  Matrix a = linear(n2, weight(seed, layer, "mlp.up_proj.weight", I, H), T, I, H);
  for (size_t i = 0; i < a.size(); ++i) a[i] *= g[i] / (1.0 + std::exp(-g[i]));
  const Matrix down = linear(a, weight(seed, layer, "mlp.down_proj.weight", H, I), T, H, I);
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
}

// Two layers of a small config (GQA: 8 query / 2 KV heads, a KV head shared by 2 ranks at 4;
// 6 / 3 heads at 3 ranks), 2 sequences of 64 tokens a rank; the embeddings random.
TEST(DenseLayer, TwoLayersAgreeWithTheHost) {
  const int n = world_size(), me = rank();
  ModelConfig c;
  c.name = "small";
  c.hidden = 96, c.heads = n == 3 ? 6 : 8, c.kv_heads = n == 3 ? 3 : 2, c.head_dim = 64;
  c.intermediate = int64_t{48} * n, c.layers = 2, c.rms_eps = 1e-6, c.rope_theta = 1e4;
  const int batch = 2, seqlen = 64 * n;
  const int64_t T = int64_t(batch) * seqlen, per_rank = T / n, H = c.hidden;
  // (the seed every rank uses: rank 0's fresh one, through the world)
  const uint64_t seed = [&] {
    auto* shared = static_cast<uint64_t*>(runtime::World::get().alloc(sizeof(uint64_t)));
    if (me == 0) *shared = std::random_device{}();
    barrier_all();
    const uint64_t s = *static_cast<const uint64_t*>(runtime::World::get().at(shared, 0));
    barrier_all();
    runtime::World::get().free(shared);
    return s;
  }();
  SCOPED_TRACE(str_cat("seed ", seed, ", ", n, " ranks"));
  const Target host = Target::host();
  std::vector<float> delta(size_t(per_rank * H));
  Matrix x(size_t(T * H));
  for (int64_t i = 0; i < T * H; ++i) {
    x[size_t(i)] = float(bf16(random_value(seed, "model.embed_tokens", i)));
    if (i / (per_rank * H) == me) delta[size_t(i - me * per_rank * H)] = float(x[size_t(i)]);
  }
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(t % seqlen);
  std::vector<bf16> residual(size_t(per_rank * H));
  DenseLayer layer(host, c, batch, seqlen);
  for (int l = 0; l < int(c.layers); ++l) {
    const DenseWeights w = DenseWeights::random(host, c, l, seed, me, n);
    layer.run(delta.data(), l == 0 ? nullptr : residual.data(), positions.data(), w, delta.data(), residual.data());
    reference_layer(c, seed, l, batch, seqlen, x);
  }
  std::vector<float> got, want;
  size_t bad = 0;
  for (int64_t t = 0; t < per_rank; ++t) {
    const size_t row = size_t((me * per_rank + t) * H);
    double squares = 0;
    for (int64_t h = 0; h < H; ++h) squares += x[row + size_t(h)] * x[row + size_t(h)];
    const double rms = std::sqrt(squares / double(H));
    for (int64_t h = 0; h < H; ++h) {
      const float g = delta[size_t(t * H + h)] + float(residual[size_t(t * H + h)]);
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
  const double err = reference::rel_error(got, want);
  EXPECT_LT(err, std::ldexp(1.0, -7));
  std::printf("[rank %d] relative error %.3g after %lld layers\n", me, err, (long long)c.layers);
}

// A MoE model's config, and a shape that does not split over the ranks, are named before
// anything runs.
TEST(DenseLayer, ShapesThatDoNotSplitAreNamed) {
  const int n = world_size();
  std::string moe;
  try {
    DenseLayer(Target::host(), ModelConfig::qwen3_30b_a3b(), 1, 64 * n);
  } catch (const Error& e) {
    moe = e.what();
  }
  EXPECT_NE(moe.find("model 'qwen3-30b-a3b': 128 experts: a dense layer takes a dense model's config"),
            std::string::npos)
      << moe;
  ModelConfig c = ModelConfig::qwen3_32b();
  c.heads = 48, c.kv_heads = 24, c.intermediate = 25601;
  if (n == 1) {  // (one rank takes any size)
    EXPECT_NO_THROW(c.check(1));
    return;
  }
  std::string message;
  try {
    DenseLayer(Target::host(), c, 1, 64 * n);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(str_cat("model 'qwen3-32b': intermediate_size = 25601 does not divide over ", n,
                                 " tensor-parallel ranks")),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace tiledist::model
