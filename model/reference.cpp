// A decoder layer on the host in double (model/reference.h).
#include "model/reference.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/reference.h"
#include "model/layer_weights.h"
#include "support/support.h"

namespace tiledist::model::reference {

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

}  // namespace

void reference_layer(const ModelConfig& c, uint64_t seed, int layer, int batch, int seqlen, Matrix& x,
                     std::vector<bool>* near_ties, double tie) {
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
  Matrix n2 = rmsnorm(x, norm_weight(seed, layer, "post_attention_layernorm.weight", H), H, eps);
  if (c.moe()) {                                     // Qwen3-MoE's: softmax over the experts, the top k renormalized
    for (double& v : n2) v = float(bf16(float(v)));  // (routed from bf16 tokens, as both sides do)
    const int64_t E = c.experts, ie = c.expert_intermediate;
    const Matrix logits = linear(n2, weight(seed, layer, "mlp.gate.weight", E, H), T, E, H);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int64_t> order(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) order[size_t(e)] = e;
      const double* l = &logits[size_t(t * E)];
      std::partial_sort(order.begin(), order.begin() + std::min(c.topk + 1, E), order.end(),
                        [&](int64_t a, int64_t b) { return l[a] > l[b]; });
      if (near_ties && c.topk < E && l[order[size_t(c.topk - 1)]] - l[order[size_t(c.topk)]] < tie) {
        near_ties->resize(size_t(T));
        (*near_ties)[size_t(t)] = true;
      }
      double sum = 0;  // (renormalized: the softmax's denominator cancels; else the softmax's)
      for (int64_t j = 0; j < (c.renormalize ? c.topk : E); ++j) sum += std::exp(l[order[size_t(j)]] - l[order[0]]);
      const Matrix row(n2.begin() + t * H, n2.begin() + (t + 1) * H);
      for (int64_t j = 0; j < c.topk; ++j) {
        const int64_t e = order[size_t(j)];
        const double score = std::exp(l[e] - l[order[0]]) / sum;
        const std::string p = str_cat("mlp.experts.", e, ".");
        const Matrix g = linear(row, weight(seed, layer, p + "gate_proj.weight", ie, H), 1, ie, H);
        Matrix a = linear(row, weight(seed, layer, p + "up_proj.weight", ie, H), 1, ie, H);
        for (size_t i = 0; i < a.size(); ++i) a[i] *= g[i] / (1.0 + std::exp(-g[i]));
        const Matrix y = linear(a, weight(seed, layer, p + "down_proj.weight", H, ie), 1, H, ie);
        for (int64_t h = 0; h < H; ++h) x[size_t(t * H + h)] += score * y[size_t(h)];
      }
    }
    return;
  }
  const int64_t I = c.intermediate;
  const Matrix g = linear(n2, weight(seed, layer, "mlp.gate_proj.weight", I, H), T, I, H);
  Matrix a = linear(n2, weight(seed, layer, "mlp.up_proj.weight", I, H), T, I, H);
  for (size_t i = 0; i < a.size(); ++i) a[i] *= g[i] / (1.0 + std::exp(-g[i]));
  const Matrix down = linear(a, weight(seed, layer, "mlp.down_proj.weight", H, I), T, H, I);
  for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
}

RowsDiff compare_rows(const std::vector<float>& got, const std::vector<double>& x, const std::vector<int64_t>& rows,
                      int64_t hidden, size_t keep) {
  RowsDiff d;
  std::vector<float> g, w;
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t row = size_t(rows[r] * hidden);
    double squares = 0;
    for (int64_t h = 0; h < hidden; ++h) squares += x[row + size_t(h)] * x[row + size_t(h)];
    const double rms = std::sqrt(squares / double(hidden));
    for (int64_t h = 0; h < hidden; ++h) {
      const float a = got[r * size_t(hidden) + size_t(h)];
      const double b = x[row + size_t(h)];
      if (!(std::abs(a - b) <= std::ldexp(rms, -5)) && d.bad++ < keep)
        d.first.push_back(str_cat("token ", rows[r], ", channel ", h, ": ", a, ", want ", b, " (row rms ", rms, ")"));
      g.push_back(a), w.push_back(float(b));
    }
  }
  d.error = tiledist::reference::rel_error(g, w);
  return d;
}

}  // namespace tiledist::model::reference
