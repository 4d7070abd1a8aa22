// The decoder layer's RMSNorm, Qwen3's query/key norm with the rotary embedding, and SwiGLU
// (kernels/transformer.h) against host references in double, from bf16 and from f32 inputs, at ragged sizes, fresh
// random inputs each run (the seed is printed on failure): every element within a stated bound of bf16's rounding, and
// in relative norm.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/reference.h"
#include "kernels/transformer.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

std::vector<bf16> to_bf16(const std::vector<float>& v) { return std::vector<bf16>(v.begin(), v.end()); }

TEST(RmsNorm, RaggedRowsWithAndWithoutTheResidual) {
  const float eps = 1e-6f;
  for (auto [rows, H, block] : {std::tuple{1, 3, 16}, {9, 129, 64}, {17, 5120, 1024}})
    for (auto [residual, dtype] : {std::pair{0, ir::DType::bf16}, {1, ir::DType::bf16}, {1, ir::DType::f32}}) {
      SCOPED_TRACE(str_cat(rows, " x ", H, " block ", block, residual ? " with the residual" : "", " x ",
                           ir::dtype_name(dtype)));
      const std::vector<float> xf = ref::random_floats(size_t(rows) * H, -4, 4);
      const std::vector<bf16> x = to_bf16(xf);  // (what the kernel reads: f32 rows rounded to bf16 first)
      const uint64_t seed = ref::last_seed();
      const std::vector<bf16> r = to_bf16(ref::random_floats(x.size(), -4, 4));
      const std::vector<bf16> w = to_bf16(ref::random_floats(size_t(H), 0.5f, 1.5f));
      std::vector<bf16> y(x.size()), sum(x.size(), bf16(-7.0f));
      // (f32 rows as a GEMM's output holds them, not bf16 values: the sum's exact check sees
      // whether they were rounded to bf16 before the residual was added)
      const Kernel k = compile(kernels::rmsnorm_kernel(dtype), {{"RESIDUAL", residual}, {"BLOCK", block}});
      if (dtype == ir::DType::f32)
        k.launch({rows}, xf, r, w, y, sum, H, eps);
      else
        k.launch({rows}, x, r, w, y, sum, H, eps);
      std::vector<float> got, want;
      size_t bad = 0;
      for (int i = 0; i < rows; ++i) {
        std::vector<float> v(static_cast<size_t>(H));
        double squares = 0;
        for (int c = 0; c < H; ++c) {
          const size_t at = size_t(i) * H + c;
          v[size_t(c)] = residual ? float(bf16(float(x[at]) + float(r[at]))) : float(x[at]);
          squares += double(v[size_t(c)]) * v[size_t(c)];
          if (residual && !(float(sum[at]) == v[size_t(c)]) && bad++ < 5)
            ADD_FAILURE() << "sum[" << i << ", " << c << "] = " << float(sum[at]) << ", want " << v[size_t(c)];
        }
        const double rstd = 1.0 / std::sqrt(squares / H + eps);
        for (int c = 0; c < H; ++c) {
          const double want_c = v[size_t(c)] * rstd * float(w[size_t(c)]);
          const float g = float(y[size_t(i) * H + c]);
          if (!(std::abs(g - want_c) <= std::ldexp(std::abs(want_c), -7) + 1e-6) && bad++ < 5)
            ADD_FAILURE() << "y[" << i << ", " << c << "] = " << g << ", want " << want_c;
          got.push_back(g), want.push_back(float(want_c));
        }
      }
      EXPECT_EQ(bad, 0u) << "seed " << seed;
      EXPECT_LT(ref::rel_error(got, want), std::ldexp(1.0, -8)) << "seed " << seed;
      if (!residual) {  // (not written)
        for (const bf16& s : sum) ASSERT_EQ(float(s), -7.0f);
      }
    }
}

// Each query and key head: RMSNorm over its D elements (or not), then each pair (i, i + D / 2)
// rotated by pos * theta^(-2 i / D); value heads copied bit for bit. Bound per element: bf16's
// rounding of the normed pair, and of the output, and f32's angle (positions up to 32768:
// within 2^-7 of the pair's magnitude in all).
TEST(QkNormRope, QueriesAndKeysOfGroupedHeads) {
  const float eps = 1e-6f;
  const double theta = 1e6;
  for (auto [T, HQ, HK, D] : {std::tuple{5, 4, 2, 64}, {37, 8, 2, 128}, {3, 2, 2, 128}})
    for (auto [norm, dtype] : {std::pair{0, ir::DType::bf16}, {1, ir::DType::bf16}, {1, ir::DType::f32}}) {
      SCOPED_TRACE(
          str_cat(T, " tokens, ", HQ, " / ", HK, " heads of ", D, norm ? ", normed" : "", ", ", ir::dtype_name(dtype)));
      const int heads = HQ + 2 * HK;
      const std::vector<bf16> qkv = to_bf16(ref::random_floats(size_t(T) * heads * D, -3, 3));
      const uint64_t seed = ref::last_seed();
      const std::vector<bf16> qn = to_bf16(ref::random_floats(size_t(D), 0.5f, 1.5f));
      const std::vector<bf16> kn = to_bf16(ref::random_floats(size_t(D), 0.5f, 1.5f));
      std::mt19937 rng(static_cast<uint32_t>(seed));
      std::vector<int32_t> pos(static_cast<size_t>(T));
      for (int32_t& p : pos) p = int32_t(rng() % 32768);
      pos[0] = 0;
      std::vector<bf16> q(size_t(T) * HQ * D), k(size_t(T) * HK * D), v(size_t(T) * HK * D);
      const Kernel kernel = compile(kernels::qk_norm_rope_kernel(dtype), {{"D", D}, {"NORM", norm}});
      const float log2_theta = float(std::log2(theta));
      if (dtype == ir::DType::f32)
        kernel.launch({T, heads}, std::vector<float>(qkv.begin(), qkv.end()), pos, qn, kn, q, k, v, T, HQ, HK, eps,
                      log2_theta);
      else
        kernel.launch({T, heads}, qkv, pos, qn, kn, q, k, v, T, HQ, HK, eps, log2_theta);
      std::vector<float> got, want;
      size_t bad = 0;
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h) {
          const bf16* x = &qkv[(size_t(t) * heads + h) * D];
          if (h >= HQ + HK) {  // a value head
            const bf16* out = &v[(size_t(t) * HK + (h - HQ - HK)) * D];
            for (int i = 0; i < D; ++i)
              if (!(float(out[i]) == float(x[i])) && bad++ < 5)
                ADD_FAILURE() << "v[" << t << ", " << h << ", " << i << "]";
            continue;
          }
          const bool is_q = h < HQ;
          const bf16* w = is_q ? qn.data() : kn.data();
          const bf16* out = is_q ? &q[(size_t(t) * HQ + h) * D] : &k[(size_t(t) * HK + (h - HQ)) * D];
          std::vector<double> a(static_cast<size_t>(D));
          double squares = 0;
          for (int i = 0; i < D; ++i) squares += double(float(x[i])) * float(x[i]);
          const double rstd = norm ? 1.0 / std::sqrt(squares / D + eps) : 1.0;
          for (int i = 0; i < D; ++i) a[size_t(i)] = float(x[i]) * rstd * (norm ? float(w[i]) : 1.0f);
          for (int i = 0; i < D / 2; ++i) {
            const double angle = pos[size_t(t)] * std::pow(theta, -2.0 * i / D);
            const double lo = a[size_t(i)], hi = a[size_t(i) + size_t(D / 2)];
            const double want_lo = lo * std::cos(angle) - hi * std::sin(angle);
            const double want_hi = hi * std::cos(angle) + lo * std::sin(angle);
            const double bound = std::ldexp(std::abs(lo) + std::abs(hi), -7) + 1e-6;
            for (auto [g, wv] : {std::pair{float(out[i]), want_lo}, {float(out[i + D / 2]), want_hi}}) {
              if (!(std::abs(g - wv) <= bound) && bad++ < 5)
                ADD_FAILURE() << (is_q ? "q" : "k") << "[" << t << ", " << h << ", " << i << "] = " << g << ", want "
                              << wv << " (position " << pos[size_t(t)] << ")";
              got.push_back(g), want.push_back(float(wv));
            }
          }
        }
      EXPECT_EQ(bad, 0u) << "seed " << seed;
      EXPECT_LT(ref::rel_error(got, want), std::ldexp(1.0, -8)) << "seed " << seed;
    }
}

// act = silu(gate) * up over ragged rows and columns (past `rows` nothing written), from a
// GEMM's f32 output (rounded to bf16 as read) or bf16.
TEST(SwiGlu, RaggedRowsAndColumns) {
  for (auto [rows, I] : {std::pair{1, 1}, {19, 300}, {64, 768}})
    for (ir::DType dtype : {ir::DType::f32, ir::DType::bf16}) {
      SCOPED_TRACE(str_cat(rows, " x ", I, " ", ir::dtype_name(dtype)));
      const std::vector<bf16> gu = to_bf16(ref::random_floats(size_t(rows) * 2 * I, -6, 6));
      const uint64_t seed = ref::last_seed();
      std::vector<bf16> act(size_t(rows + 1) * I, bf16(-9.0f));  // (a row past the rows)
      const Kernel k = compile(kernels::swiglu_kernel(dtype), {{"BR", 16}, {"BI", 128}});
      const Grid grid((rows + 15) / 16, (I + 127) / 128);
      if (dtype == ir::DType::f32)
        k.launch(grid, std::vector<float>(gu.begin(), gu.end()), act, rows, I);
      else
        k.launch(grid, gu, act, rows, I);
      std::vector<float> got, want;
      size_t bad = 0;
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < I; ++i) {
          const double g = float(gu[size_t(r) * 2 * I + i]), u = float(gu[size_t(r) * 2 * I + I + i]);
          const double w = g / (1.0 + std::exp(-g)) * u;
          const float a = float(act[size_t(r) * I + i]);
          if (!(std::abs(a - w) <= std::ldexp(std::abs(w), -8) + 1e-6) && bad++ < 5)
            ADD_FAILURE() << "act[" << r << ", " << i << "] = " << a << ", want " << w;
          got.push_back(a), want.push_back(float(w));
        }
      EXPECT_EQ(bad, 0u) << "seed " << seed;
      EXPECT_LT(ref::rel_error(got, want), std::ldexp(1.0, -8)) << "seed " << seed;
      for (int i = 0; i < I; ++i) ASSERT_EQ(float(act[size_t(rows) * I + i]), -9.0f) << "wrote past the rows";
    }
}

// kv_append: a prefill's tokens (S a sequence, from a position past zero) and a decode step's
// (one a sequence, at each sequence's length, one of them past the cache) into the cache: every
// row where it belongs, every other row untouched, the lengths set; nothing stored past max_len.
TEST(KvAppend, PrefillRowsAndADecodeStep) {
  const int batch = 3, HK = 2, D = 64, max_len = 9;
  const Kernel k = compile(kernels::kv_append_kernel(), {{"D", D}});
  const size_t row = size_t(HK) * D, cache = size_t(batch) * max_len * row;
  std::vector<bf16> kc(cache, bf16(-7.0f)), vc(cache, bf16(-7.0f));
  std::vector<int32_t> lens(batch, -1);
  // Prefill: 3 sequences of S = 4 tokens from position 2 (rows 2..5 of each).
  const int S = 4, T = batch * S, first = 2;
  const std::vector<bf16> kk = to_bf16(ref::random_floats(size_t(T) * row, -4, 4));
  const std::vector<bf16> vv = to_bf16(ref::random_floats(size_t(T) * row, -4, 4));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[size_t(t)] = first + t % S;
  k.launch(Grid(T), kk, vv, pos, kc, vc, lens, T, S, max_len, HK);
  auto at = [&](int b, int p) { return (size_t(b) * max_len + size_t(p)) * row; };
  for (int b = 0; b < batch; ++b) {
    EXPECT_EQ(lens[size_t(b)], first + S) << "sequence " << b;
    for (int p = 0; p < max_len; ++p)
      for (size_t i = 0; i < row; ++i) {
        const bool written = p >= first && p < first + S;
        const size_t from = (size_t(b) * S + size_t(p - first)) * row + i;
        ASSERT_EQ(float(kc[at(b, p) + i]), written ? float(kk[from]) : -7.0f) << "k, sequence " << b << " row " << p;
        ASSERT_EQ(float(vc[at(b, p) + i]), written ? float(vv[from]) : -7.0f) << "v, sequence " << b << " row " << p;
      }
  }
  // A decode step: one token a sequence at its length (6, 8, and 9: past the cache), S = 1.
  const std::vector<int32_t> step = {6, 8, 9};
  std::vector<int32_t> lens2 = step;
  const std::vector<bf16> k1 = to_bf16(ref::random_floats(size_t(batch) * row, -4, 4));
  const std::vector<bf16> v1 = to_bf16(ref::random_floats(size_t(batch) * row, -4, 4));
  const std::vector<bf16> k_before = kc;
  k.launch(Grid(batch), k1, v1, step, kc, vc, lens2, batch, 1, max_len, HK);
  EXPECT_EQ(lens2, (std::vector<int32_t>{7, 9, 9}));
  for (int b = 0; b < batch; ++b)
    for (int p = 0; p < max_len; ++p)
      for (size_t i = 0; i < row; ++i) {
        const bool written = b < 2 && p == step[size_t(b)];
        ASSERT_EQ(float(kc[at(b, p) + i]), written ? float(k1[size_t(b) * row + i]) : float(k_before[at(b, p) + i]))
            << "k after the step, sequence " << b << " row " << p;
        if (written) ASSERT_EQ(float(vc[at(b, p) + i]), float(v1[size_t(b) * row + i]));
      }
}

}  // namespace
}  // namespace tiledist
