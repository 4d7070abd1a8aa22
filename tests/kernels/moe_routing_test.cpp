// kernels::MoeRouting on the default target (the GPU where there is one, else the CPU): the
// top-k of fresh random logits against a top-k computed on the host in double (a sort of each
// token's scores), and the sorted layout against its definition, every element: each group's
// rows hold exactly its pairs (in any order) then the sentinel, dest is their inverse, the
// tile table and the groups' starts follow from the counts. Ragged token counts, skewed
// routing (experts with no tokens, one with most), top-k 1, 2 and 8, softmax and sigmoid,
// segments, dropped slots (-1), and bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/moe.h"
#include "kernels/reference.h"
#include "tests/jit/error_of.h"
#include "tests/kernels/moe_check.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using kernels::MoeRouting;
using test_util::error_of;

bool on_gpu() { return Target::default_target().kind == Target::Kind::nvptx; }

template <class T>
std::vector<T> read(const T* p, size_t n) {
  return testing_moe::read_back(Target::default_target(), p, n);
}

/// Each token's scores in double, as the options say.
std::vector<double> scores_of(const std::vector<float>& logits, int tokens, int E, MoeRouting::Scores how) {
  std::vector<double> s(size_t(tokens) * E);
  for (int t = 0; t < tokens; ++t) {
    const float* x = &logits[size_t(t) * E];
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, double(x[e]));
    for (int e = 0; e < E; ++e) sum += std::exp(double(x[e]) - mx);
    for (int e = 0; e < E; ++e)
      s[size_t(t) * E + e] =
          how == MoeRouting::Scores::sigmoid ? 1 / (1 + std::exp(-double(x[e]))) : std::exp(double(x[e]) - mx) / sum;
  }
  return s;
}

/// The top-k: the kernel's ids must be k distinct experts whose logits are, in order, the k
/// best, up to the key's resolution (the kernel compares logits with their lowest log2(BE)
/// mantissa bits replaced by the expert: a relative difference under 2^(log2(BE) - 23) may go
/// either way, where BE is the experts rounded up to a power of two; bf16 logits are exact),
/// and its weights the scores of those experts (renormalized over the k where asked) within
/// 1e-5 relative.
void check_topk(const std::vector<float>& logits, const std::vector<double>& scores, const std::vector<int32_t>& ids,
                const std::vector<float>& weights, int tokens, int E, int k, bool renormalize,
                const std::string& what) {
  int be_bits = 0;
  while ((1 << be_bits) < E) ++be_bits;
  const double resolution = std::ldexp(1.0, be_bits - 23);
  size_t bad = 0;
  for (int t = 0; t < tokens; ++t) {
    const float* l = &logits[size_t(t) * E];
    const double* s = &scores[size_t(t) * E];
    std::vector<float> best(l, l + E);
    std::sort(best.begin(), best.end(), std::greater<>());
    double total = 0;
    std::vector<bool> seen(E, false);
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(t) * k + j];
      if (e < 0 || e >= E || seen[e]) {
        if (bad++ < 5) ADD_FAILURE() << what << ": token " << t << " slot " << j << " has expert " << e;
        continue;
      }
      seen[e] = true;
      if (!(std::abs(double(l[e]) - best[j]) <= resolution * std::abs(best[j])) && bad++ < 5)
        ADD_FAILURE() << what << ": token " << t << " slot " << j << " picks expert " << e << " of logit " << l[e]
                      << ", the " << j << "-th best is " << best[j] << " seed " << ref::last_seed();
      total += s[e];
    }
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(t) * k + j];
      if (e < 0 || e >= E) continue;
      const double want = renormalize ? s[e] / total : s[e];
      const float got = weights[size_t(t) * k + j];
      if (!(std::abs(got - want) <= 1e-5 * want + 1e-30) && bad++ < 5)
        ADD_FAILURE() << what << ": token " << t << " weight " << j << " = " << got << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " top-k errors, seed " << ref::last_seed();
}

/// The sorted layout of `ids` ([tokens, k]; ids outside [0, E) dropped) against its definition.
void check_layout(const MoeRouting& r, const std::vector<int32_t>& ids, int tokens, const std::string& what) {
  const int k = r.topk(), E = int(r.experts()), S = r.segments(), BM = r.block_rows();
  const int pairs = tokens * k, G = E * S, seg_pairs = pairs / S;
  const auto sorted = read(r.sorted_ids(), size_t(r.rows()));
  const auto dest = read(r.dest(), size_t(pairs));
  const auto tiles = read(r.tiles(), size_t(1 + 3 * r.slots()));
  const auto starts = read(r.group_starts(), size_t(G) + 1);
  std::vector<std::vector<int>> members(G);
  for (int p = 0; p < pairs; ++p)
    if (ids[p] >= 0 && ids[p] < E) members[size_t(p / seg_pairs) * E + ids[p]].push_back(p);
  size_t bad = 0;
  auto fail = [&](const std::string& m) {
    if (bad++ < 8) ADD_FAILURE() << what << ": " << m;
  };
  // Starts, rows and the sentinel.
  int row = 0, tile = 0;
  std::vector<int> want_dest(size_t(pairs), -1);
  for (int g = 0; g < G; ++g) {
    if (starts[g] != row) fail(str_cat("starts[", g, "] = ", starts[g], ", want ", row));
    const int count = int(members[g].size()), end = row + (count + BM - 1) / BM * BM;
    std::vector<int> got(sorted.begin() + std::min<int64_t>(row, r.rows()),
                         sorted.begin() + std::min<int64_t>(row + count, r.rows()));
    for (int i = 0; i < int(got.size()); ++i)
      if (got[i] >= 0 && got[i] < pairs) want_dest[got[i]] = row + i;
    std::sort(got.begin(), got.end());
    if (got != members[g]) fail(str_cat("group ", g, " rows [", row, ", ", row + count, ") are not its pairs"));
    for (int i = row + count; i < end; ++i)
      if (sorted[i] != pairs) fail(str_cat("sorted_ids[", i, "] = ", sorted[i], ", a pad (want ", pairs, ")"));
    for (int t = row / BM; t < end / BM; ++t, ++tile) {
      const int want[3] = {g % E, t * BM, std::min((t + 1) * BM, row + count)};
      for (int f = 0; f < 3; ++f)
        if (tiles[1 + 3 * t + f] != want[f])
          fail(str_cat("tile ", t, " field ", f, " = ", tiles[1 + 3 * t + f], ", want ", want[f]));
    }
    row = end;
  }
  if (starts[G] != row) fail(str_cat("starts[G] = ", starts[G], ", want ", row));
  if (tiles[0] != tile) fail(str_cat("tiles[0] = ", tiles[0], ", want ", tile));
  for (int64_t t = tile; t < r.slots(); ++t)
    if (tiles[1 + 3 * t] || tiles[2 + 3 * t] || tiles[3 + 3 * t]) fail(str_cat("slot ", t, " past the count is set"));
  for (int64_t i = row; i < r.rows(); ++i)
    if (sorted[i] != pairs) fail(str_cat("sorted_ids[", i, "] = ", sorted[i], " past the rows in use"));
  for (int p = 0; p < pairs; ++p)
    if (dest[p] != want_dest[p]) fail(str_cat("dest[", p, "] = ", dest[p], ", want ", want_dest[p]));
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " layout errors";
}

struct Case {
  const char* what;
  int max_tokens, tokens, E, k;
  MoeRouting::Scores scores;
  bool renormalize;
  int block_rows;
  float skew;  // added to expert 1's logits (most tokens go there), and taken from expert 0's (none)
};
const std::vector<Case> kCases = {
    {"E=8 top-2 softmax renormalized (Mixtral)", 64, 37, 8, 2, MoeRouting::Scores::softmax, true, 16, 0},
    {"E=128 top-8 softmax renormalized (Qwen3)", 96, 96, 128, 8, MoeRouting::Scores::softmax, true, 64, 0},
    {"E=40 top-1 sigmoid", 50, 49, 40, 1, MoeRouting::Scores::sigmoid, false, 16, 0},
    {"E=256 top-8 sigmoid renormalized (DeepSeek-V3)", 40, 33, 256, 8, MoeRouting::Scores::sigmoid, true, 32, 0},
    {"skewed: one expert most, one none", 128, 120, 16, 2, MoeRouting::Scores::softmax, false, 16, 30},
    {"no tokens", 16, 0, 8, 2, MoeRouting::Scores::softmax, true, 16, 0},
    {"E = k", 20, 20, 4, 4, MoeRouting::Scores::softmax, true, 8, 0},
    {"E=64 top-6 softmax (DeepSeek-V2)", 30, 29, 64, 6, MoeRouting::Scores::softmax, false, 16, 0},
    {"E=3 top-3 sigmoid renormalized", 10, 10, 3, 3, MoeRouting::Scores::sigmoid, true, 4, 0},
    {"E=4 top-2, 2048 tokens (16 copies of the counters)", 2048, 2000, 4, 2, MoeRouting::Scores::softmax, true, 64, 2},
};

template <class T>
void run_case(const Case& c) {
  auto logits = ref::random_floats(size_t(c.max_tokens) * c.E, -4, 4);
  for (int t = 0; t < c.tokens; ++t)
    if (c.skew != 0 && t % 8 != 0) logits[size_t(t) * c.E + 1] += c.skew, logits[size_t(t) * c.E] -= c.skew;
  std::vector<T> in(logits.size());
  for (size_t i = 0; i < in.size(); ++i) logits[i] = float(in[i] = T(logits[i]));
  MoeRouting r(Target::default_target(), c.max_tokens, c.E, c.k, {c.scores, c.renormalize, c.block_rows, 1});
  const std::string what = str_cat(c.what, std::is_same_v<T, bf16> ? " (bf16 logits)" : "");
  for (int run = 0; run < 2; ++run) {  // (the second run finds the counts zeroed by the first)
    if (on_gpu()) {
      cuda::Buffer<T> d(in);
      r.run(d.data(), c.tokens);
    } else {
      r.run(in.data(), c.tokens);
    }
    const auto ids = read(r.topk_ids(), size_t(c.tokens) * c.k);
    check_topk(logits, scores_of(logits, c.tokens, c.E, c.scores), ids, read(r.topk_weights(), size_t(c.tokens) * c.k),
               c.tokens, c.E, c.k, c.renormalize, what);
    check_layout(r, ids, c.tokens, what);
  }
}

TEST(MoeRouting, TopkAndLayout) {
  for (const Case& c : kCases) run_case<float>(c);
}
TEST(MoeRouting, Bf16Logits) {
  for (const Case& c : kCases) run_case<bf16>(c);
}

// On a GPU, the acceptance's shape: 16384 tokens over 128 experts, top-8.
TEST(MoeRouting, LargeOnTheGpu) {
  if (!on_gpu()) GTEST_SKIP() << "the CPU runs the small cases";
  run_case<float>({"16384 tokens, E=128 top-8", 16384, 16384, 128, 8, MoeRouting::Scores::softmax, true, 64, 0});
  run_case<bf16>(
      {"16384 tokens, E=256 top-8, skewed", 16384, 16000, 256, 8, MoeRouting::Scores::sigmoid, true, 128, 9});
}

// align() of ids given by the caller, in segments (a rank's tokens each), with slots dropped
// (-1, and ids past the experts) and skew: the layout as above.
TEST(MoeRouting, AlignSegmentsAndDroppedSlots) {
  struct Seg {
    int tokens, E, k, segments, block_rows;
  };
  for (const Seg& c : {Seg{64, 8, 2, 4, 16}, Seg{90, 16, 8, 3, 32}, Seg{12, 5, 1, 2, 8}, Seg{0, 8, 2, 2, 16},
                       Seg{1000, 4, 2, 2, 32}}) {
    MoeRouting r(Target::default_target(), c.tokens, c.E, c.k,
                 {MoeRouting::Scores::softmax, true, c.block_rows, c.segments});
    auto u = ref::random_floats(size_t(c.tokens) * c.k, 0, 1);
    std::vector<int32_t> ids(u.size());
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = u[i] < 0.1f ? -1 : u[i] < 0.15f ? c.E + 3 : u[i] < 0.6f ? 2 % c.E : int(u[i] * 1000) % c.E;
    for (int run = 0; run < 2; ++run) {
      if (on_gpu()) {
        cuda::Buffer<int32_t> d(ids);
        r.align(d.data(), c.tokens);
      } else {
        r.align(ids.data(), c.tokens);
      }
      check_layout(r, ids, c.tokens,
                   str_cat("align ", c.tokens, " tokens, E=", c.E, " top-", c.k, ", ", c.segments, " segments"));
    }
  }
}

TEST(MoeRouting, BadArguments) {
  const Target t = Target::default_target();
  auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  expect(error_of([&] { MoeRouting(t, 16, 4, 5); }), "top-5 of 4 experts");
  expect(error_of([&] { MoeRouting(t, 16, 0, 1); }), "top-1 of 0 experts");
  expect(error_of([&] { MoeRouting(t, 16, 8, 2, {MoeRouting::Scores::softmax, true, 48, 1}); }),
         "block_rows = 48 (a power of two)");
  expect(error_of([&] { MoeRouting(t, 15, 8, 2, {MoeRouting::Scores::softmax, true, 16, 2}); }),
         "15 tokens in 2 segments");
  MoeRouting r(t, 16, 8, 2, {MoeRouting::Scores::softmax, true, 16, 2});
  std::vector<float> logits(size_t(17) * 8);
  expect(error_of([&] { r.run(logits.data(), 17); }), "run of 17 tokens; this MoeRouting was made for at most 16");
  expect(error_of([&] { r.run(logits.data(), 7); }), "run of 7 tokens, not a multiple of its 2 segments");
  expect(error_of([&] { r.align(nullptr, 4); }), "no top-k ids");
  expect(error_of([&] { r.run(static_cast<const float*>(nullptr), 4); }), "no logits");
}

}  // namespace
}  // namespace tiledist
