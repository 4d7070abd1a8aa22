// kernels::Attention (FlashAttention forward) on the default target, and two attention kernels
// written here from the README alone, against softmax(Q Kᵀ · scale) V computed plainly in
// double on the host (causal mask and grouped-query heads applied there), on fresh random
// inputs (the seed is printed on failure). Small shapes on the CPU; larger ones on a GPU.
//
// Tolerance: the kernels round twice where the reference does not: P (the softmax weights, in
// [0, 1]) to the operands' dtype before the second dot, and O to it at the end; each rounding
// is within u = 2^-8 (bf16) or 2^-11 (f16) relatively. With |v| <= 1, an output element is
// then within u·Σ p_j |v_j| / Σ p_j + u |o| <= 2u of the exact value (f32 sums and exp2 add
// orders of magnitude less), which every element is checked against (kElementSlack × that).
// In norm the roundings are independent and partly cancel: measured here 0.45u to 0.6u on
// the CPU backend; checked against 1u.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include "kernels/reference.h"
#include "tests/jit/error_of.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using test_util::error_of;

bool on_gpu() { return Target::default_target().kind == Target::Kind::nvptx; }

template <class T>
constexpr double unit_roundoff() {
  return std::is_same_v<T, bf16> ? 1.0 / 256 : 1.0 / 2048;
}
constexpr double kElementSlack = 1.5;  // (of the 2u bound, for the f32 sums' own rounding)

/// Rows of tokens, [tokens, heads, dim], as the kernels take them: random values in [-1, 1)
/// rounded to T, and the same values as floats for the reference.
template <class T>
struct Input {
  std::vector<T> data;
  std::vector<float> values;
  explicit Input(size_t n) : values(ref::random_floats(n)) {
    data.resize(n);
    for (size_t i = 0; i < n; ++i) values[i] = float(data[i] = T(values[i]));
  }
};

/// softmax(q kᵀ · scale) v per sequence [cu[b], cu[b + 1]) and head, in double; query head h
/// reads key/value head h / (H / H_kv); causal: token i attends tokens 0..i of its sequence.
std::vector<float> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const std::vector<int32_t>& cu, int H, int H_kv,
                                       int D, bool causal, double scale) {
  std::vector<float> out(q.size(), 0.0f);
  const int batch = int(cu.size()) - 1;
  auto one = [&](int b, int h) {
    const int start = cu[b], len = cu[b + 1] - cu[b], kh = h / (H / H_kv);
    std::vector<double> w(len), acc(D);
    for (int i = 0; i < len; ++i) {
      const float* qi = &q[(size_t(start + i) * H + h) * D];
      const int keys = causal ? i + 1 : len;
      double m = -INFINITY;
      for (int j = 0; j < keys; ++j) {
        const float* kj = &k[(size_t(start + j) * H_kv + kh) * D];
        double s = 0;
        for (int d = 0; d < D; ++d) s += double(qi[d]) * kj[d];
        w[j] = s * scale;
        m = std::max(m, w[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < keys; ++j) {
        w[j] = std::exp(w[j] - m);
        sum += w[j];
        const float* vj = &v[(size_t(start + j) * H_kv + kh) * D];
        for (int d = 0; d < D; ++d) acc[d] += w[j] * vj[d];
      }
      for (int d = 0; d < D; ++d) out[(size_t(start + i) * H + h) * D + d] = float(acc[d] / sum);
    }
  };
  // (large GPU cases: the heads in parallel)
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = t; i < batch * H; i += threads) one(i / H, i % H);
    });
  for (auto& th : pool) th.join();
  return out;
}

/// Every element of `got` within kElementSlack · 2u of `want` (|v| <= 1), and the error in
/// norm under u.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<float>& want, int H, int D, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double u = unit_roundoff<T>();
  std::vector<float> g(got.size());
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    g[i] = float(got[i]);
    const double e = std::abs(double(g[i]) - want[i]);
    if (!(e <= kElementSlack * 2 * u) && bad++ == 0) first = i;
    worst = std::max(worst, e);
  }
  const double err = ref::rel_error(g, want);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " element(s) off by more than " << kElementSlack * 2 * u
                     << "; the first at token " << first / (size_t(H) * D) << ", head " << first / D % H << ", dim "
                     << first % D << ": " << g[first] << ", want " << want[first] << " (seed " << ref::last_seed()
                     << ")";
  EXPECT_LT(err, u) << what << " (seed " << ref::last_seed() << ")";
  std::printf("  %s: relative error %.2e (%.2f u), largest element error %.2f u\n", what.c_str(), err, err / u,
              worst / u);
}

/// One run of `attn` on the default target (device buffers on a GPU); o starts as NaN, so that
/// an element not written fails the check.
template <class T>
std::vector<T> run(const kernels::Attention& attn, const Input<T>& q, const Input<T>& k, const Input<T>& v,
                   const std::vector<int32_t>& cu, int max_seqlen, bool varlen) {
  const int batch = int(cu.size()) - 1;
  const int dense_len = batch > 0 ? cu[1] : 0;
  if (on_gpu()) {
    cuda::Buffer<T> dq(q.data), dk(k.data), dv(v.data), dout(q.data.size());
    cuda::Buffer<int32_t> dcu(cu);
    cuda::memset(dout.data(), 0xFF, q.data.size() * sizeof(T));
    if (varlen)
      attn.run_varlen(dq.data(), dk.data(), dv.data(), dout.data(), dcu.data(), batch, max_seqlen);
    else
      attn.run(dq.data(), dk.data(), dv.data(), dout.data(), batch, dense_len);
    return dout.download();
  }
  std::vector<T> out(q.data.size(), T::from_raw(0xFFFF));
  if (varlen)
    attn.run_varlen(q.data.data(), k.data.data(), v.data.data(), out.data(), cu.data(), batch, max_seqlen);
  else
    attn.run(q.data.data(), k.data.data(), v.data.data(), out.data(), batch, dense_len);
  return out;
}

struct Case {
  std::vector<int> lengths;  // of the sequences, one after another
  int H, H_kv, D;
  bool causal;
  bool varlen = true;                                   // else dense: every length the same
  float scale = 0;                                      // 0: 1 / sqrt(D)
  std::optional<kernels::AttentionConfig> config = {};  // else the library's
};

template <class T>
void check(const Case& c) {
  std::vector<int32_t> cu{0};
  for (int len : c.lengths) cu.push_back(cu.back() + len);
  const int tokens = cu.back();
  const int max_seqlen = *std::max_element(c.lengths.begin(), c.lengths.end());
  Input<T> q(size_t(tokens) * c.H * c.D), k(size_t(tokens) * c.H_kv * c.D), v(size_t(tokens) * c.H_kv * c.D);
  const Target t = Target::default_target();
  kernels::Attention attn = c.config
                                ? kernels::Attention(t, c.H, c.H_kv, c.D, dtype_of<T>(), c.causal, c.scale, *c.config)
                                : kernels::Attention(t, c.H, c.H_kv, c.D, dtype_of<T>(), c.causal, c.scale);
  auto got = run(attn, q, k, v, cu, max_seqlen, c.varlen);
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.D));
  auto want = reference_attention(q.values, k.values, v.values, cu, c.H, c.H_kv, c.D, c.causal, scale);
  std::string lens;
  for (int len : c.lengths) lens += (lens.empty() ? "" : ",") + std::to_string(len);
  expect_close(got, want, c.H, c.D,
               str_cat(ir::dtype_name(dtype_of<T>()), c.varlen ? " varlen [" : " dense [", lens, "] H=", c.H,
                       " H_kv=", c.H_kv, " D=", c.D, c.causal ? " causal" : ""));
}

// Lengths around the host's blocks (64 query rows, 32 keys) and the GPU's (128, 64 or 128):
// one token, fewer than a block, an empty sequence, a whole block, several and a part.
TEST(Attention, RaggedBf16GroupedHeads) {
  for (bool causal : {false, true}) check<bf16>({{1, 17, 0, 100, 64}, 4, 2, 64, causal});
}
TEST(Attention, RaggedF16OneKvHeadDim128) {
  for (bool causal : {false, true}) check<f16>({{30, 1, 65}, 4, 1, 128, causal, true, 0.3f});
}
TEST(Attention, RaggedBf16Dim128AndF16Dim64) {
  check<bf16>({{3, 129}, 2, 1, 128, true});
  check<f16>({{70, 5}, 2, 2, 64, false, true, 0.25f});
}
// The dense form: batch sequences of one length, no table.
TEST(Attention, Dense) {
  check<f16>({{50, 50}, 2, 2, 64, false, false});
  check<bf16>({{33, 33, 33}, 4, 2, 128, true, false});
}
// Shapes of a real model, where the GPU runs them.
TEST(Attention, LargerShapesOnTheGpu) {
  if (!on_gpu()) GTEST_SKIP() << "the default target is not a CUDA GPU (the CPU runs the small cases)";
  for (bool causal : {false, true}) {
    check<bf16>({{1000, 1000}, 16, 16, 128, causal, false});
    check<bf16>({{1000, 777, 1, 129}, 16, 4, 128, causal});
    check<f16>({{1000, 1000}, 16, 2, 64, causal, false});
  }
  check<bf16>({{4096}, 8, 8, 64, true, false, 0.2f});
}

// Other tiles than the library's (attention_bench one sweeps them; some are faster on an H100),
// and the lowering with dot_prefetch: ragged and causal, both head dims.
TEST(Attention, OtherTilesOnTheGpu) {
  if (!on_gpu()) GTEST_SKIP() << "the default target is not a CUDA GPU";
  struct Tiles {
    int block_m, block_n, warps, stages;
    const char* lowering;
  };
  for (Tiles s : {Tiles{128, 32, 8, 3, ""}, Tiles{64, 64, 4, 3, ""}, Tiles{128, 128, 8, 2, ""}, Tiles{64, 32, 4, 3, ""},
                  Tiles{128, 64, 8, 3, "gpu_ir_prefetch"}, Tiles{64, 64, 4, 2, "gpu_ir_prefetch"}})
    for (bool causal : {false, true}) {
      kernels::AttentionConfig config = kernels::attention_config(Target::default_target(), 128, causal);
      config.block_m = s.block_m, config.block_n = s.block_n;
      config.options.num_warps = s.warps, config.options.num_stages = s.stages;
      if (*s.lowering) config.options.lowering = s.lowering;
      SCOPED_TRACE(str_cat(s.block_m, "x", s.block_n, "/", s.warps, "w/", s.stages, "s ", s.lowering));
      check<bf16>({{1000, 777, 1, 129}, 8, 4, 128, causal, true, 0, config});
      check<f16>({{500, 64, 3}, 4, 2, 64, causal, true, 0, config});
    }
}

TEST(Attention, BadArguments) {
  const Target t = Target::default_target();
  using kernels::Attention;
  EXPECT_NE(error_of([&] {
              Attention(t, 4, 3, 64);
            }).find("heads = 4, kv_heads = 3: both positive, and heads a multiple of kv_heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Attention(t, 0, 1, 64); }).find("heads = 0"), std::string::npos);
  EXPECT_NE(error_of([&] { Attention(t, 4, 4, 96); }).find("head_dim = 96: only 64 and 128 are supported"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { Attention(t, 4, 4, 64, ir::DType::f32); }).find("operands of f32: only bf16, f16 are supported"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { Attention(t, 4, 4, 64, ir::DType::bf16, false, -1.0f); }).find("scale = -1: a positive number"),
      std::string::npos);
  kernels::AttentionConfig bad_blocks;
  bad_blocks.block_m = 32, bad_blocks.block_n = 64;
  EXPECT_NE(error_of([&] {
              Attention(t, 4, 4, 64, ir::DType::bf16, true, 0, bad_blocks);
            }).find("blocks of 32 x 64 rows: powers of 2, block_m a multiple of block_n"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              kernels::attention_kernel(ir::DType::f8e4m3);
            }).find("attention: no kernel for f8e4m3 operands (bf16, f16)"),
            std::string::npos);

  // Runs: checked before anything is launched (no buffer is touched: null pointers where the
  // check comes first).
  Attention attn(t, 8, 2, 128, ir::DType::bf16);
  bf16* none = nullptr;
  const f16* none16 = nullptr;
  EXPECT_NE(error_of([&] {
              attn.run(none16, none16, none16, const_cast<f16*>(none16), 1, 16);
            }).find("attention: run with f16 operands on an Attention made for bf16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { attn.run(none, none, none, none, 2, -5); }).find("batch = 2, seqlen = -5: not negative"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { attn.run_varlen(none, none, none, none, nullptr, -1, 16); }).find("batch = -1, max_seqlen = 16"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              attn.run(none, none, none, none, 1, 1 << 21);
            }).find("seqlen = 2097152 with 8 heads of 128: a sequence's elements must number under 2^31"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              attn.run(none, none, none, none, 10000, 16);
            }).find("batch * heads = 80000: at most 65535 (the launch grid's second dimension)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { attn.run(none, none, none, none, 1, 16); }).find("a null pointer among q, k, v, o (q=1"),
            std::string::npos);
  std::vector<bf16> x(8 * 128);
  EXPECT_NE(error_of([&] {
              attn.run_varlen(x.data(), x.data(), x.data(), x.data(), nullptr, 1, 1);
            }).find("a null pointer among q, k, v, o, cu_seqlens"),
            std::string::npos);
  // Nothing to do is no error.
  EXPECT_EQ(error_of([&] { attn.run(none, none, none, none, 0, 16); }), "");
}

// ---- Attention kernels written from the README alone, as a user would: other names, loop
// shapes, layouts and blocks; checked against the same reference.

/// [B, H, S, D] layout, one loop over every key block with masks throughout, the causal range
/// cut by the loop's bound, kᵀ read straight from memory as [D, BN], natural exp with the
/// scale applied to the scores, P cast to bf16. Grid: {cdiv(S, BM), B * H}.
void mha_forward(tl::Ptr<bf16> Q, tl::Ptr<bf16> K, tl::Ptr<bf16> V, tl::Ptr<bf16> Out, tl::Int S, tl::Int num_heads,
                 tl::Float softmax_scale, tl::Const<int> HEAD, tl::Const<int> BM, tl::Const<int> BN,
                 tl::Const<int> IS_CAUSAL) {
  using tl::Tensor;
  auto block = tl::program_id(0), head = tl::program_id(1);  // head = b * H + h
  auto base = (head * S * HEAD).to(tl::int64);
  auto m_rows = block * BM + tl::arange(0, BM);
  auto d = tl::arange(0, HEAD);
  auto row_ok = tl::expand_dims(m_rows, 1) < S;
  auto q = tl::load(Q + base + tl::expand_dims(m_rows, 1) * HEAD + tl::expand_dims(d, 0), row_ok, 0.0f);
  auto stop = S;
  Tensor end = IS_CAUSAL ? tl::minimum((block + 1) * BM, S) : Tensor(S);
  auto res = tl::for_range(
      0, end, BN,
      {tl::full({BM}, -1.0e30f, tl::float32), tl::zeros({BM}, tl::float32), tl::zeros({BM, HEAD}, tl::float32)},
      [&](Tensor n0, tl::Values st) {
        auto n = n0 + tl::arange(0, BN);
        auto n_ok = tl::expand_dims(n, 0) < stop;                                                         // [1, BN]
        auto kt = tl::load(K + base + tl::expand_dims(d, 1) + tl::expand_dims(n, 0) * HEAD, n_ok, 0.0f);  // [HEAD, BN]
        auto s = tl::dot(q, kt) * softmax_scale;
        auto ok = n_ok;
        if (IS_CAUSAL) ok = ok & (tl::expand_dims(m_rows, 1) >= tl::expand_dims(n, 0));
        s = tl::where(ok, s, -1.0e30f);
        auto new_max = tl::maximum(st[0], tl::max(s, 1));
        auto w = tl::exp(s - tl::expand_dims(new_max, 1));
        auto fix = tl::exp(st[0] - new_max);
        auto vv = tl::load(V + base + tl::expand_dims(n, 1) * HEAD + tl::expand_dims(d, 0),
                           tl::expand_dims(n, 1) < stop, 0.0f);  // [BN, HEAD]
        auto o = tl::dot(w.to(tl::bfloat16), vv, st[2] * tl::expand_dims(fix, 1));
        return tl::Values{new_max, st[1] * fix + tl::sum(w, 1), o};
      });
  tl::store(Out + base + tl::expand_dims(m_rows, 1) * HEAD + tl::expand_dims(d, 0), res[2] / tl::expand_dims(res[1], 1),
            row_ok);
  (void)num_heads;
}
const KernelDef kMhaForward("mha_forward", mha_forward,
                            {"Q", "K", "V", "Out", "S", "num_heads", "softmax_scale", "HEAD", "BM", "BN", "IS_CAUSAL"});

/// The same layout, K read as rows [BN, D] and transposed for the dot, V read transposed
/// ([D, BN]) and transposed back, exp2 with log2(e) in the scale, f16, grouped-query heads
/// (kv head = h / group), and the causal diagonal found by a comparison inside one loop.
void gqa_forward(tl::Ptr<f16> q_ptr, tl::Ptr<f16> k_ptr, tl::Ptr<f16> v_ptr, tl::Ptr<f16> o_ptr, tl::Int seq,
                 tl::Int heads, tl::Int group, tl::Float scale, tl::Const<int> DIM, tl::Const<int> TILE_Q,
                 tl::Const<int> TILE_K, tl::Const<int> CAUSAL) {
  using tl::Tensor;
  auto bh = tl::program_id(1);
  auto kv_bh = bh / heads * (heads / group) + bh % heads / group;  // b * H_kv + h / group
  auto q_off = (bh * seq * DIM).to(tl::int64), kv_off = (kv_bh * seq * DIM).to(tl::int64);
  auto rows = tl::expand_dims(tl::program_id(0) * TILE_Q + tl::arange(0, TILE_Q), 1);  // [TILE_Q, 1]
  auto dims = tl::expand_dims(tl::arange(0, DIM), 0);                                  // [1, DIM]
  auto qt = tl::load(q_ptr + q_off + rows * DIM + dims, rows < seq, 0.0f);
  auto c = scale * 1.4426950408889634f;
  tl::Values init = {tl::full({TILE_Q}, -INFINITY, tl::float32), tl::zeros({TILE_Q}, tl::float32),
                     tl::zeros({TILE_Q, DIM}, tl::float32)};
  auto out = tl::for_range(0, seq, TILE_K, init, [&](Tensor j, tl::Values carry) {
    auto keys = tl::expand_dims(j + tl::arange(0, TILE_K), 1);                    // [TILE_K, 1]
    auto kt = tl::load(k_ptr + kv_off + keys * DIM + dims, keys < seq, 0.0f);     // [TILE_K, DIM]
    auto vt = tl::load(v_ptr + kv_off + tl::trans(keys) * DIM + tl::trans(dims),  // [DIM, TILE_K]
                       tl::trans(keys) < seq, 0.0f);
    auto logits = tl::dot(qt, tl::trans(kt)) * c;
    auto valid = tl::trans(keys) < seq;
    if (CAUSAL) valid = valid & (tl::trans(keys) <= rows);
    logits = tl::where(valid, logits, -INFINITY);
    auto mx = tl::maximum(carry[0], tl::max(logits, 1));
    // (a row with no valid key yet keeps -inf: its weights are 0, not NaN)
    auto safe = tl::where(mx == -INFINITY, 0.0f, mx);
    auto p = tl::exp2(logits - tl::expand_dims(safe, 1));
    auto corr = tl::exp2(carry[0] - safe);
    auto acc = tl::dot(p.to(tl::float16), tl::trans(vt), carry[2] * tl::expand_dims(corr, 1));
    return tl::Values{mx, carry[1] * corr + tl::sum(p, 1), acc};
  });
  tl::store(o_ptr + q_off + rows * DIM + dims, out[2] / tl::expand_dims(out[1], 1), rows < seq);
}
const KernelDef kGqaForward("gqa_forward", gqa_forward,
                            {"q_ptr", "k_ptr", "v_ptr", "o_ptr", "seq", "heads", "group", "scale", "DIM", "TILE_Q",
                             "TILE_K", "CAUSAL"});

/// [B, H, S, D] <-> rows of tokens [B * S, H, D].
template <class V>
V to_tokens(const V& bhsd, int B, int H, int S, int D) {
  V out(bhsd.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        std::memcpy(&out[((size_t(b) * S + s) * H + h) * D], &bhsd[((size_t(b) * H + h) * S + s) * D],
                    D * sizeof(out[0]));
  return out;
}

TEST(Attention, VariantFromTheReadmeBhsdLayout) {
  const bool gpu = on_gpu();
  const int B = 2, H = 3, D = 64, S = gpu ? 700 : 45, bm = gpu ? 64 : 32, bn = gpu ? 64 : 16;
  const float scale = 0.2f;
  for (int causal : {0, 1}) {
    Input<bf16> q(size_t(B) * H * S * D), k(q.data.size()), v(q.data.size());
    std::vector<bf16> out(q.data.size(), bf16::from_raw(0xFFFF));
    compile(kMhaForward, {{"HEAD", D}, {"BM", bm}, {"BN", bn}, {"IS_CAUSAL", causal}})
        .launch({tl::cdiv(S, bm), B * H}, q.data, k.data, v.data, out, S, H, scale);
    std::vector<int32_t> cu{0, S, 2 * S};
    auto want = reference_attention(to_tokens(q.values, B, H, S, D), to_tokens(k.values, B, H, S, D),
                                    to_tokens(v.values, B, H, S, D), cu, H, H, D, causal, scale);
    expect_close(to_tokens(out, B, H, S, D), want, H, D, str_cat("mha_forward S=", S, causal ? " causal" : ""));
  }
}

TEST(Attention, VariantFromTheReadmeTransposedOperandsF16) {
  const bool gpu = on_gpu();
  const int B = 1, H = 4, H_kv = 2, D = 128, S = gpu ? 1000 : 37, tq = gpu ? 128 : 16, tk = gpu ? 32 : 16;
  const float scale = 0.1f;
  CompileOptions opts = CompileOptions::from_env();
  if (gpu) opts.num_warps = 8;
  for (int causal : {0, 1}) {
    Input<f16> q(size_t(B) * H * S * D), k(size_t(B) * H_kv * S * D), v(k.data.size());
    std::vector<f16> out(q.data.size(), f16::from_raw(0xFFFF));
    compile(kGqaForward, {{"DIM", D}, {"TILE_Q", tq}, {"TILE_K", tk}, {"CAUSAL", causal}}, Target::default_target(),
            opts)
        .launch({tl::cdiv(S, tq), B * H}, q.data, k.data, v.data, out, S, H, H / H_kv, scale);
    std::vector<int32_t> cu{0, S};
    auto want = reference_attention(to_tokens(q.values, B, H, S, D), to_tokens(k.values, B, H_kv, S, D),
                                    to_tokens(v.values, B, H_kv, S, D), cu, H, H_kv, D, causal, scale);
    expect_close(to_tokens(out, B, H, S, D), want, H, D, str_cat("gqa_forward S=", S, causal ? " causal" : ""));
  }
}

// The variants compile for a GPU as they are (PTX for sm_90a, checked here without one): both
// dots on the tensor cores.
TEST(Attention, VariantsCompileForSm90a) {
  CompileOptions opts;
  opts.num_warps = 8;
  auto ptx = [&](const KernelDef& def, const Constants& c) {
    return jit::Context::global().emit(def, c, Target::cuda("sm_90a"), opts, jit::Stage::asm_,
                                       ArgFacts(def.runtime_params().size(), ArgFact::aligned16));
  };
  auto mma_count = [](const std::string& s) {
    size_t n = 0;
    for (const char* op : {"mma.sync", "wgmma.mma_async"})
      for (size_t at = s.find(op); at != std::string::npos; at = s.find(op, at + 1)) ++n;
    return n;
  };
  EXPECT_GT(mma_count(ptx(kMhaForward, {{"HEAD", 64}, {"BM", 128}, {"BN", 64}, {"IS_CAUSAL", 1}})), 0u);
  EXPECT_GT(mma_count(ptx(kGqaForward, {{"DIM", 128}, {"TILE_Q", 128}, {"TILE_K", 32}, {"CAUSAL", 0}})), 0u);
}

}  // namespace
}  // namespace tiledist
