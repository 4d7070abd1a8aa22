#include "kernels/reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "dsl/dtypes.h"

namespace tiledist::reference {

namespace {
uint64_t g_seed = 0;
float abs_max(const float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(x[i]));
  return amax;
}
}  // namespace

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = double(got[i]) - double(want[i]);
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (!std::isnan(d)) num += d * d;
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

std::vector<float> random_floats(size_t n, float lo, float hi) {
  g_seed =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^ (n * 0x9E3779B97F4A7C15ull);
  std::mt19937_64 rng(g_seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
uint64_t last_seed() { return g_seed; }

void add(const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& out) {
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] + y[i];
}

void softmax(const std::vector<float>& in, std::vector<float>& out, int rows, int cols) {
  out.assign(in.size(), 0);
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, double(in[size_t(r) * cols + c]));
    for (int c = 0; c < cols; ++c) s += std::exp(double(in[size_t(r) * cols + c]) - m);
    for (int c = 0; c < cols; ++c)
      out[size_t(r) * cols + c] = float(std::exp(double(in[size_t(r) * cols + c]) - m) / s);
  }
}

void layernorm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
               std::vector<float>& y, int rows, int cols, float eps) {
  y.assign(x.size(), 0);
  for (int r = 0; r < rows; ++r) {
    const float* row = &x[size_t(r) * cols];
    double mean = 0, var = 0;
    for (int c = 0; c < cols; ++c) mean += row[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    var /= cols;
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int c = 0; c < cols; ++c) y[size_t(r) * cols + c] = float((row[c] - mean) * rstd * w[c] + b[c]);
  }
}

void gemm(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, int M, int N, int K) {
  c.assign(size_t(M) * N, 0);
  std::vector<double> acc(N);
  for (int m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      double av = a[size_t(m) * K + k];
      for (int n = 0; n < N; ++n) acc[n] += av * b[size_t(k) * N + n];
    }
    for (int n = 0; n < N; ++n) c[size_t(m) * N + n] = float(acc[n]);
  }
}

std::vector<double> moe_mlp_token(const float* x, const std::vector<int32_t>& experts, const std::vector<float>& scores,
                                  const std::vector<std::vector<float>>& w13, const std::vector<std::vector<float>>& w2,
                                  int64_t H, int64_t I, MoeTokenBounds* bounds, bool f8_activations) {
  auto rb = [](double v) { return double(float(bf16(float(v)))); };
  // How far bf16(v') may be from bf16(v) for any v' within w of v (rounding is monotone: the
  // ends of the interval are the farthest).
  auto reach = [&](double v, double w) { return std::max(std::abs(rb(v + w) - rb(v)), std::abs(rb(v - w) - rb(v))); };
  const size_t n = static_cast<size_t>(H);
  std::vector<double> out(n, 0.0), uncertain(static_cast<size_t>(I)), step(static_cast<size_t>(I));
  std::vector<double> flip(static_cast<size_t>(I));  // bf16: how far act[i] may be from the host's
  std::vector<float> act(static_cast<size_t>(I)), xq(x, x + H);
  if (f8_activations) quantize_f8_blocks(xq.data(), H);
  x = xq.data();
  if (bounds)
    *bounds = {std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
               std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  for (size_t j = 0; j < experts.size(); ++j) {
    const int64_t e = experts[j];
    for (size_t r = 0; r < w13.size(); ++r) {
      for (int64_t i = 0; i < I; ++i) {
        const float* gate = &w13[r][size_t((e * 2 * I + i) * H)];
        const float* up = gate + I * H;
        double g = 0, u = 0, gmag = 0, umag = 0;
        for (int64_t q = 0; q < H; ++q) {
          g += double(x[q]) * gate[q], u += double(x[q]) * up[q];
          gmag += std::abs(double(x[q]) * gate[q]), umag += std::abs(double(x[q]) * up[q]);
        }
        // (the f32 sums' error: each addition's rounding within 2^-24 of a partial sum, at most
        // the terms' magnitude, the roundings independent: a random walk of H steps, sqrt(H / 3)
        // 2^-24 of the magnitude a standard deviation; 4 sqrt(H) 2^-24 is about 7 of them, and
        // covers a matrix unit's H / 16 steps truncated. The f8 path's `uncertain` keeps H 2^-22.)
        const double gerr = std::sqrt(double(H)) * std::ldexp(gmag, -22),
                     uerr = std::sqrt(double(H)) * std::ldexp(umag, -22);
        const double dg = reach(g, gerr), du = reach(u, uerr);  // how far the kernel's bf16 g and u may be
        g = rb(g), u = rb(u);
        const double silu = g / (1 + std::exp(-g)), a = silu * u;
        act[size_t(i)] = float(f8_activations ? a : rb(a));  // (f8: quantized from f32, below)
        uncertain[size_t(i)] = double(H) * std::ldexp(1.1 * std::abs(u) * gmag + (std::abs(g) + 1) * umag, -22);
        // bf16: the kernel's silu(g') u' is within 1.1 dg (|u| + du) + |silu(g)| du of the host's
        // (silu's slope is under 1.1), and 2^-20 of it (f32's silu); its bf16, within the reach of
        // that. Zero where no rounding can go the other way.
        const double f = 1.1 * dg * (std::abs(u) + du) + std::abs(silu) * du;
        flip[size_t(i)] = reach(a, f + std::ldexp(std::abs(a) + f, -20));
      }
      if (f8_activations) {
        for (int64_t b = 0; b < I; b += 128) {  // each value's e4m3 step at its block's scale
          const double s = f8_scale(abs_max(&act[size_t(b)], std::min(I, b + 128) - b));
          for (int64_t i = b; i < std::min(I, b + 128); ++i)
            step[size_t(i)] = s * std::max(std::ldexp(1.0, -9), std::ldexp(std::abs(act[size_t(i)]) / s, -3));
        }
        quantize_f8_blocks(act.data(), I);
      }
      for (int64_t h = 0; h < H; ++h) {
        const float* down = &w2[r][size_t((e * H + h) * I)];
        double y = 0;
        for (int64_t i = 0; i < I; ++i) {
          y += double(act[size_t(i)]) * down[i];
          if (!bounds) continue;
          const double term = std::abs(double(scores[j]) * act[size_t(i)] * down[i]);
          bounds->largest[size_t(h)] = std::max(bounds->largest[size_t(h)], term);
          bounds->terms[size_t(h)] += term;
          if (f8_activations && uncertain[size_t(i)] > std::ldexp(step[size_t(i)], -10))
            bounds->slack[size_t(h)] +=
                std::abs(double(scores[j]) * down[i]) * (uncertain[size_t(i)] + step[size_t(i)]);
          if (!f8_activations && flip[size_t(i)] > 0) {
            const double moved = std::abs(double(scores[j]) * down[i]) * flip[size_t(i)];
            bounds->flip_largest[size_t(h)] = std::max(bounds->flip_largest[size_t(h)], moved);
            bounds->flip_squares[size_t(h)] += moved * moved;
          }
        }
        out[size_t(h)] += scores[j] * rb(y);
        if (bounds) bounds->magnitude[size_t(h)] += std::abs(scores[j] * y);
      }
    }
  }
  return out;
}

void quantize_f8_blocks(float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b < n; b += block) {
    const int64_t end = std::min(n, b + block);
    const float amax = abs_max(x + b, end - b), s = f8_scale(amax), r = f8_inverse_scale(amax);
    for (int64_t i = b; i < end; ++i) x[i] = float(f8e4m3(x[i] * r)) * s;
  }
}

void quantize_f8_row(const float* x, int64_t n, f8e4m3* codes, float* scales) {
  for (int64_t b = 0; b < n; b += 128) {
    const int64_t end = std::min(n, b + 128);
    const float amax = abs_max(x + b, end - b), r = f8_inverse_scale(amax);
    scales[b / 128] = f8_scale(amax);
    for (int64_t i = b; i < end; ++i) codes[i] = f8e4m3(x[i] * r);
  }
}

void quantize_f8_weight(std::vector<float>& w, int64_t rows, int64_t cols, std::vector<f8e4m3>& codes,
                        std::vector<float>& scales) {
  const int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128;
  codes.assign(size_t(rows * cols), f8e4m3(0.0f));
  scales.assign(size_t(rb * cb), 0.0f);
  for (int64_t i = 0; i < rb; ++i)
    for (int64_t j = 0; j < cb; ++j) {
      float amax = 0;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          amax = std::max(amax, std::abs(w[size_t(r * cols + c)]));
      const float s = scales[size_t(i * cb + j)] = f8_scale(amax);
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c) {
          float& v = w[size_t(r * cols + c)];
          codes[size_t(r * cols + c)] = f8e4m3(v / s);
          v = float(codes[size_t(r * cols + c)]) * s;
        }
    }
}

void quantize_f8_experts(std::vector<float>& w, int64_t E, int64_t rows, int64_t cols, std::vector<f8e4m3>& codes,
                         std::vector<float>& scales) {
  codes.clear(), scales.clear();
  for (int64_t e = 0; e < E; ++e) {
    std::vector<float> one(w.begin() + e * rows * cols, w.begin() + (e + 1) * rows * cols);
    std::vector<f8e4m3> c;
    std::vector<float> s;
    quantize_f8_weight(one, rows, cols, c, s);
    std::copy(one.begin(), one.end(), w.begin() + e * rows * cols);
    codes.insert(codes.end(), c.begin(), c.end());
    scales.insert(scales.end(), s.begin(), s.end());
  }
}

std::vector<float> spread_blocks(std::vector<float> v, int64_t E, int64_t rows, int64_t cols) {
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        v[size_t((e * rows + r) * cols + c)] *= float(std::ldexp(1.0, int((e + r / 128 + 2 * (c / 128)) % 5) - 2));
  return v;
}

std::vector<float> spread_rows(std::vector<float> v, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[size_t(r * cols + c)] *= float(std::ldexp(1.0, int((r + 2 * (c / 128)) % 5) - 2));
  return v;
}

std::vector<double> decode_attention(const std::vector<float>& q, const std::vector<KvSlice>& slices, int batch,
                                     int q_tokens, int heads, int kv_heads, int D, bool causal, double scale) {
  const int group = heads / kv_heads;
  std::vector<double> out(q.size(), 0.0);
  std::vector<double> w;
  std::vector<const float*> vs;
  for (int b = 0; b < batch; ++b) {
    int total = 0;
    for (const KvSlice& s : slices) total += s.lens[b];
    for (int t = 0; t < q_tokens; ++t)
      for (int h = 0; h < heads; ++h) {
        const size_t at = ((size_t(b) * q_tokens + t) * heads + h) * D;
        const int limit = causal ? std::max(total - q_tokens + t + 1, 0) : total;
        w.clear(), vs.clear();
        double top = -INFINITY, sum = 0;
        for (const KvSlice& s : slices)
          for (int j = 0; j < s.lens[b] && int(w.size()) < limit; ++j) {
            const size_t kv = ((size_t(b) * s.max_kv + j) * kv_heads + h / group) * D;
            double dot = 0;
            for (int d = 0; d < D; ++d) dot += double(q[at + size_t(d)]) * s.k[kv + size_t(d)];
            w.push_back(dot * scale), vs.push_back(s.v + kv);
            top = std::max(top, w.back());
          }
        for (double& x : w) sum += x = std::exp(x - top);
        for (size_t j = 0; j < w.size(); ++j)
          for (int d = 0; d < D; ++d) out[at + size_t(d)] += w[j] / sum * vs[j][d];
      }
  }
  return out;
}

}  // namespace tiledist::reference
