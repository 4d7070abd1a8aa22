// Host reference implementations (plain loops in double precision) and the error measure
// that tests, the demo and benchmarks check kernels against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dsl/dtypes.h"

namespace tiledist::reference {

/// ||got - want||_2 / max(||want||_2, tiny): the relative error in norm.
double rel_error(const std::vector<float>& got, const std::vector<float>& want);

/// Uniform random floats in [lo, hi) from a fresh seed (reported by `last_seed` for reruns).
std::vector<float> random_floats(size_t n, float lo = -1.0f, float hi = 1.0f);
uint64_t last_seed();
/// Uniform values in [-1, 1) from `seed`, as T (the same numbers wherever they are made: every
/// rank can compute any rank's inputs).
template <class T>
std::vector<T> random_values(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

void add(const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& out);
void softmax(const std::vector<float>& in, std::vector<float>& out, int rows, int cols);
void layernorm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
               std::vector<float>& y, int rows, int cols, float eps);
/// C = A @ B with A, B given as floats (already rounded to the input dtype).
void gemm(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, int M, int N, int K);

/// A KV cache's slice for decode_attention: k and v [batch, max_kv, kv_heads, D], the keys of
/// sequence b rows [0, lens[b]).
struct KvSlice {
  const float* k;
  const float* v;
  const int32_t* lens;
  int max_kv;
};
/// A decode step's attention in double: o [batch, q_tokens, heads, D] = softmax(q kᵀ · scale) v
/// per sequence, query token and head over the keys of `slices` one after another (query head h
/// reads KV head h / (heads / kv_heads)); causal: token t of q_tokens attends the first
/// total - q_tokens + t + 1 of the sequence's keys. A row with no key is 0.
std::vector<double> decode_attention(const std::vector<float>& q, const std::vector<KvSlice>& slices, int batch,
                                     int q_tokens, int heads, int kv_heads, int D, bool causal, double scale);

/// What moe_mlp_token gives a bound per output element (each [H]):
/// - magnitude: the sum of |scores[j] (act . W2_r[e_j][h, :])|;
/// - largest: the largest |scores[j] act[i] W2_r[e_j][h, i]| of the element's terms (an act
///   value that the kernel's f32 puts a unit away from the host's may round to the
///   neighbouring e4m3 code: it moves the sum by up to 2^-3 of that term); terms: their sum;
/// - slack (f8 activations): where the host's act value is uncertain to more than 2^-10 of its
///   e4m3 step (a gate or up projection that cancels to its rounding: H 2^-22 of its terms'
///   magnitudes), that term's |scores[j] W2[h, i]| times the uncertainty and a step (the
///   kernel's code may be any within it);
/// - flip_largest, flip_squares (bf16): a gate or up projection that the kernel's f32 sum (within
///   sqrt(H) 2^-22 of its terms' magnitude of the host's) rounds to another bf16, or an act that f32's
///   silu does, moves act by up to its reach (how far bf16 may go over that interval) and the
///   sum by |scores[j] W2[h, i]| times that: the largest such move, and the sum of their
///   squares. The layer's sums cancel, so one such term can be far above 2^-6 of the magnitude
///   (hidden 752, a GPU stress job); the moves are rounding either way, independent, so they
///   add as a random walk: the bound takes the largest and 4 times the root of the squares
///   (about 7 standard deviations).
struct MoeTokenBounds {
  std::vector<double> magnitude, largest, terms, slack, flip_largest, flip_squares;
  /// The bound on |got - want| of element h, want the token's out[h]: 2^-8 |want| + 2^-6
  /// magnitude (a rank's down projection rounded the other way); bf16: and the flips' (the
  /// largest and 4 times the root of their squares); f8: and 2^-3 of the largest term and the
  /// slack, and on a GPU 2^-6 of the terms (tests/kernels/moe_check.h's check_moe_mlp says why).
  double bound(size_t h, double want, bool f8, bool gpu) const {
    return std::ldexp(std::abs(want), -8) + std::ldexp(magnitude[h], -6) +
           (f8 ? std::ldexp(largest[h], -3) + slack[h] : flip_largest[h] + 4 * std::sqrt(flip_squares[h])) +
           (f8 && gpu ? std::ldexp(terms[h], -6) : 0.0) + 1e-30;
  }
};

/// One token's output of a tensor-parallel MoE MLP (kernels::MoeMlp) in double, with the
/// kernels' roundings to bf16 (the gate and up projections, silu(g) * u, each rank's down
/// projection): out[h] = the sum over the token's slots j of scores[j] times the sum over ranks
/// r of bf16(act . W2_r[e_j][h, :]), act[i] = bf16(silu(g) * u), g = bf16(x . W13_r[e_j][i, :]),
/// u = bf16(x . W13_r[e_j][I + i, :]); x [H], w13[r] [E, 2 I, H], w2[r] [E, H, I] (the values
/// the kernels read). `bounds`, where given, gets MoeTokenBounds'. `f8_activations`: x and act
/// quantized first per 128 columns (quantize_f8_blocks; act per rank's slice), as MoeMlp's
/// f8e4m3 form does (w13 and w2 then the dequantized weights).
std::vector<double> moe_mlp_token(const float* x, const std::vector<int32_t>& experts, const std::vector<float>& scores,
                                  const std::vector<std::vector<float>>& w13, const std::vector<std::vector<float>>& w2,
                                  int64_t H, int64_t I, MoeTokenBounds* bounds = nullptr, bool f8_activations = false);

/// `n` values quantized as the MoE kernels' f8e4m3 activations are, in blocks of `block`: each
/// block's scale s = max(|x|, 1e-10) / 448 (f32), its values f8e4m3(x * r), r = 448 / max(|x|,
/// 1e-10) (f32: DeepEP's rule, a reciprocal a block and a product a value); returns the values
/// the kernels then compute with, f8e4m3(x * r) * s, in place of x.
void quantize_f8_blocks(float* x, int64_t n, int64_t block = 128);
/// The scale of a block whose largest magnitude is `amax`: max(amax, 1e-10) / 448 (the MoE
/// kernels' rule, for activations and weights alike; the weights' codes are x / s, the
/// activations' x * f8_inverse_scale).
inline float f8_scale(float amax) { return std::max(amax, 1e-10f) / 448.0f; }
/// What a block's values are multiplied by before they are rounded to their codes: 448 /
/// max(amax, 1e-10) (f32).
inline float f8_inverse_scale(float amax) { return 448.0f / std::max(amax, 1e-10f); }
/// One row of `n` values quantized per 128 columns as quantize_f8_blocks does: its codes [n] and
/// its blocks' scales [cdiv(n, 128)] (what the MoE kernels write for a row of activations).
void quantize_f8_row(const float* x, int64_t n, f8e4m3* codes, float* scales);
/// A [rows, cols] weight quantized in blocks of 128 x 128 (DeepSeek-V3's): the e4m3 codes,
/// [rows, cols], and the scales [cdiv(rows, 128), cdiv(cols, 128)] (each block's max(|w|,
/// 1e-10) / 448); `w` becomes the values the kernels compute with (code * scale).
void quantize_f8_weight(std::vector<float>& w, int64_t rows, int64_t cols, std::vector<f8e4m3>& codes,
                        std::vector<float>& scales);
/// Test data for the f8 kernels: `v` ([E, rows, cols]) with each 128 x 128 block (e, i, j)
/// multiplied by 2^((e + i + 2 j) % 5 - 2), so that the blocks' scales differ by factors of 2
/// to 16 (random values alone put about the same largest magnitude in every block, and a kernel
/// that read another block's scale would pass); spread_rows: [rows, cols] with each row's
/// 128-column block j multiplied by 2^((row + 2 j) % 5 - 2) (the activations' scales).
std::vector<float> spread_blocks(std::vector<float> v, int64_t E, int64_t rows, int64_t cols);
std::vector<float> spread_rows(std::vector<float> v, int64_t rows, int64_t cols);
/// The same for E experts' weights [E, rows, cols] one after the other: codes [E, rows, cols],
/// scales [E, cdiv(rows, 128), cdiv(cols, 128)] (the MoE kernels' w_scales).
void quantize_f8_experts(std::vector<float>& w, int64_t E, int64_t rows, int64_t cols, std::vector<f8e4m3>& codes,
                         std::vector<float>& scales);

}  // namespace tiledist::reference
