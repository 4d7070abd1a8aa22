// kernels::FlashDecode (split-KV decoding over a KV cache) on the default target, against
// softmax(q kᵀ · scale) v computed plainly in double on the host, per sequence, query token and
// head (grouped-query heads, the causal limit of the step's tokens applied there), on fresh
// random inputs: ragged KV lengths not multiples of the block (0 and 1 among them), one to
// three query tokens, keys split over one to many programs.
//
// Tolerance (as attention_test's): the kernel rounds P to the operands' dtype before the second
// dot and O at the end, each within u = 2^-8 (bf16) relatively: an element is within 2u of the
// exact value (|v| <= 1), checked with a slack of 1.5 for the f32 sums and the splits' combine;
// in norm against 1u.
#include "kernels/flash_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/reference.h"
#include "tests/jit/error_of.h"
#include "tests/kernels/flash_decode_check.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using test_util::error_of;
using testing_decode::expect_decoded;

struct Case {
  int batch, q_tokens, heads, kv_heads, head_dim, max_kv;
  std::vector<int32_t> lens;
  bool causal;
};

/// Random values in [-1, 1) rounded to bf16, and the same as floats.
struct Values {
  std::vector<bf16> data;
  std::vector<float> f;
  explicit Values(size_t n) : f(ref::random_floats(n)) {
    data.resize(n);
    for (size_t i = 0; i < n; ++i) f[i] = float(data[i] = bf16(f[i]));
  }
};

/// The same run over a paged cache: each sequence's max_kv rows in pages of `page` rows (max_kv a
/// multiple), the pages shuffled through the cache and found by the block table; the result
/// must be the contiguous cache's reference.
void check(const Case& c, int page);

void check(const Case& c) { check(c, 0); }

void check(const Case& c, int page) {
  SCOPED_TRACE(str_cat("batch ", c.batch, ", q_tokens ", c.q_tokens, ", heads ", c.heads, "/", c.kv_heads, ", D ",
                       c.head_dim, ", max_kv ", c.max_kv, c.causal ? ", causal" : ""));
  const Target target = Target::default_target();
  kernels::FlashDecode fd(target, c.heads, c.kv_heads, c.head_dim, ir::DType::bf16, c.causal);
  const size_t nq = size_t(c.batch) * c.q_tokens * c.heads * c.head_dim;
  const size_t nkv = size_t(c.batch) * c.max_kv * c.kv_heads * c.head_dim;
  Values q(nq), k(nkv), v(nkv);
  std::vector<bf16> o(nq, bf16(7.0f));
  const bool gpu = target.is_gpu();
  std::vector<bf16> k_cache = k.data, v_cache = v.data;
  std::vector<int32_t> table;  // (paged: [batch, max_kv / page], a shuffle of the pages)
  const int max_pages = page ? c.max_kv / page : 0;
  if (page) {
    std::vector<int32_t> order(size_t(c.batch) * max_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(c.max_kv + page)));
    table = order;
    const size_t row = size_t(c.kv_heads) * c.head_dim, rows = size_t(page) * row;
    for (size_t i = 0; i < order.size(); ++i) {  // (page i of the contiguous cache goes to page order[i])
      std::copy_n(k.data.begin() + i * rows, rows, k_cache.begin() + size_t(order[i]) * rows);
      std::copy_n(v.data.begin() + i * rows, rows, v_cache.begin() + size_t(order[i]) * rows);
    }
  }
  auto run = [&](const bf16* dq, const bf16* dk, const bf16* dv, const int32_t* dt, const int32_t* dl, bf16* dout) {
    if (page)
      fd.run_paged(dq, dk, dv, dt, dl, dout, c.batch, c.q_tokens, page, max_pages);
    else
      fd.run(dq, dk, dv, dl, dout, c.batch, c.q_tokens, c.max_kv);
  };
  if (!gpu) {
    run(q.data.data(), k_cache.data(), v_cache.data(), table.data(), c.lens.data(), o.data());
  } else {
    cuda::Buffer<bf16> dq(q.data), dk(k_cache), dv(v_cache), dout(o);
    cuda::Buffer<int32_t> dl(c.lens), dt(page ? table : std::vector<int32_t>(1));
    run(dq.data(), dk.data(), dv.data(), dt.data(), dl.data(), dout.data());
    o = dout.download();
  }
  const std::vector<double> want =
      ref::decode_attention(q.f, {{k.f.data(), v.f.data(), c.lens.data(), c.max_kv}}, c.batch, c.q_tokens, c.heads,
                            c.kv_heads, c.head_dim, c.causal, 1.0 / std::sqrt(double(c.head_dim)));
  expect_decoded(o, want, str_cat(" (splits ", fd.splits(c.batch, c.max_kv), ")"));
}

TEST(FlashDecode, OneTokenGroupedHeads) {
  check({3, 1, 8, 2, 64, 300, {1, 300, 77}, true});
  check({1, 1, 4, 1, 128, 1000, {999}, true});  // (one sequence: its keys over many programs)
}
TEST(FlashDecode, SeveralTokensCausal) {
  check({2, 3, 8, 2, 64, 200, {3, 130}, true});
  check({2, 2, 4, 4, 64, 64, {64, 5}, true});
}
TEST(FlashDecode, LongSequence) { check({1, 2, 4, 1, 64, 100000, {99991}, true}); }  // (100k keys, over programs)
TEST(FlashDecode, NotCausalAndEmpty) { check({3, 2, 4, 2, 64, 100, {0, 100, 33}, false}); }

TEST(FlashDecode, PagedCache) {
  check({3, 1, 8, 2, 64, 256, {1, 256, 77}, true}, 16);
  check({2, 2, 4, 1, 128, 1024, {1000, 3}, true}, 64);
}
// ---- A decode kernel written from the README alone, as a user would: a program per (sequence,
// query head), one query token, the keys in one loop without splits, scores by a broadcast
// product and a sum (no dot: one query row), natural exp; checked against the same reference.
void decode_one(tl::Ptr<bf16> Q, tl::Ptr<bf16> Kc, tl::Ptr<bf16> Vc, tl::Ptr<int32_t> lens, tl::Ptr<bf16> Out,
                tl::Int max_kv, tl::Int num_heads, tl::Int kv_heads, tl::Float scale, tl::Const<int> HEAD,
                tl::Const<int> BN) {
  using tl::Tensor;
  auto bh = tl::program_id(0);
  auto b = bh / num_heads, h = bh % num_heads, kh = h / (num_heads / kv_heads);
  auto d = tl::arange(0, HEAD);
  auto q = tl::load(Q + bh * HEAD + d).to(tl::float32);  // [HEAD] (q and Out: [B, H, HEAD])
  auto n = tl::load(lens + b);
  auto kv = (b * max_kv).to(tl::int64) * kv_heads * HEAD + kh * HEAD;
  tl::Values init = {tl::full({1}, -INFINITY, tl::float32), tl::zeros({1}, tl::float32),
                     tl::zeros({HEAD}, tl::float32)};
  auto out = tl::for_range(0, n, BN, init, [&](Tensor j0, tl::Values c) {
    auto j = j0 + tl::arange(0, BN);
    auto rows = tl::expand_dims(j, 1) * (kv_heads * HEAD) + tl::expand_dims(d, 0);
    auto ok = tl::expand_dims(j < n, 1);
    auto k = tl::load(Kc + kv + rows, ok, 0.0f).to(tl::float32);
    auto s = tl::where(j < n, tl::sum(k * tl::expand_dims(q, 0), 1) * scale, -INFINITY);  // [BN]
    auto m = tl::maximum(c[0], tl::max(s, 0));                                            // [1]
    auto p = tl::exp(s - m);
    auto fix = tl::exp(c[0] - m);
    auto v = tl::load(Vc + kv + rows, ok, 0.0f).to(tl::float32);
    return tl::Values{m, c[1] * fix + tl::sum(p, 0), c[2] * fix + tl::sum(tl::expand_dims(p, 1) * v, 0)};
  });
  tl::store(Out + bh * HEAD + d, (out[2] / tl::where(out[1] > 0.0f, out[1], 1.0f)).to(tl::bfloat16));
}

TEST(FlashDecode, AKernelWrittenFromTheReadme) {
  static const KernelDef def(
      "decode_one", decode_one,
      {"Q", "Kc", "Vc", "lens", "Out", "max_kv", "num_heads", "kv_heads", "scale", "HEAD", "BN"});
  const Case c{3, 1, 8, 2, 64, 200, {1, 200, 77}, false};
  const size_t nq = size_t(c.batch) * c.heads * c.head_dim, nkv = size_t(c.batch) * c.max_kv * c.kv_heads * c.head_dim;
  Values q(nq), k(nkv), v(nkv);
  std::vector<bf16> o(nq, bf16(7.0f));
  const Target target = Target::default_target();
  Kernel kernel = compile(def, {{"HEAD", c.head_dim}, {"BN", 32}}, target);
  const float scale = 1.0f / std::sqrt(float(c.head_dim));
  if (!target.is_gpu()) {
    kernel.launch({c.batch * c.heads}, q.data, k.data, v.data, c.lens, o, c.max_kv, c.heads, c.kv_heads, scale);
  } else {
    cuda::Buffer<bf16> dq(q.data), dk(k.data), dv(v.data), dout(o);
    cuda::Buffer<int32_t> dl(c.lens);
    kernel.launch({c.batch * c.heads}, dq, dk, dv, dl, dout, c.max_kv, c.heads, c.kv_heads, scale);
    o = dout.download();
  }
  const std::vector<double> want = ref::decode_attention(q.f, {{k.f.data(), v.f.data(), c.lens.data(), c.max_kv}},
                                                         c.batch, 1, c.heads, c.kv_heads, c.head_dim, false, scale);
  expect_decoded(o, want);
}

TEST(FlashDecode, BadArguments) {
  const Target target = Target::default_target();
  EXPECT_NE(error_of([&] { kernels::FlashDecode(target, 8, 3, 64); }).find("heads a multiple of kv_heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { kernels::FlashDecode(target, 8, 2, 96); }).find("head_dim = 96"), std::string::npos);
  kernels::FlashDecode fd(target, 8, 2, 64);
  bf16 x{};
  int32_t len = 1;
  EXPECT_NE(error_of([&] { fd.run(&x, &x, &x, &len, &x, 1, 5, 8); }).find("q_tokens = 5"), std::string::npos);
  EXPECT_NE(
      error_of([&] { fd.run(&x, static_cast<const bf16*>(nullptr), &x, &len, &x, 1, 1, 8); }).find("a null pointer"),
      std::string::npos);
  EXPECT_NE(error_of([&] { fd.run_paged(&x, &x, &x, &len, &len, &x, 1, 1, 24, 2); }).find("page_size = 24"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              fd.run_paged(&x, &x, &x, static_cast<const int32_t*>(nullptr), &len, &x, 1, 1, 16, 2);
            }).find("a null block_table"),
            std::string::npos);
}

}  // namespace
}  // namespace tiledist
