// Expert-parallel dispatch and combine (kernels/ep.h) checked on every rank against what the
// host works out from every rank's inputs (each rank makes all ranks' from their seeds): every
// received row, bit for bit, with its source; every rank's counts; the combine of the rows sent
// back as they came (each token's k copies weighted and summed) and of a grouped GEMM's rows
// between the two (dispatch -> GroupedGemm over recv() and offs() -> combine, no copy), against
// products the host computes in double. Skewed routing: an expert no token picks, one that most
// pick, the last rank's experts never picked (a rank that receives nothing), slots dropped
// (-1), token counts that differ by rank and are multiples of nothing. Shared by the CPU test
// (ep_dist_test) and the GPU test (cuda_collectives_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "kernels/ep.h"
#include "kernels/grouped_gemm.h"
#include "tests/kernels/moe_check.h"

namespace tiledist::testing_ep {

using testing_moe::read_back;

/// Rank r's tokens at call `call`: ragged, differing by rank (rank 1 of 2+ none on the second call).
inline int64_t tokens_of(int r, int64_t base, int call) {
  if (call == 2 && r == 1) return 0;
  return std::max<int64_t>(1, base - (r * 5 + call * 3) % 7);
}

/// Rank r's top-k ids: k distinct experts per token, never expert 0 and never the last rank's
/// experts where enough others are left, expert `hot` (E / 2) for about three tokens in four,
/// the last slot of one token in five dropped (-1), where k > 1, and the first slot of one
/// token in eleven an id past the experts (E to E + 2: sent nowhere, as -1). `repeats`: the
/// last slot of one token in seven its first slot's expert again, where k > 1 (the normal
/// mode takes them; the low-latency mode wants a token's experts distinct).
inline std::vector<int32_t> ep_ids(int r, int64_t tokens, int64_t E, int64_t El, int ranks, int k, int call,
                                   bool repeats = false) {
  std::mt19937 rng(uint32_t(r * 7919 + call * 104729 + 31));
  std::vector<int32_t> pool;
  const int64_t last = ranks > 1 && E - El - 1 >= k ? E - El : E;  // (past it: the last rank's)
  for (int64_t e = E - 1 >= k ? 1 : 0; e < last; ++e) pool.push_back(int32_t(e));
  const int32_t hot = int32_t(std::clamp<int64_t>(E / 2, pool.front(), pool.back()));
  std::vector<int32_t> ids(size_t(tokens) * k);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    if (rng() % 4 != 0) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), hot));
    std::copy(pool.begin(), pool.begin() + k, ids.begin() + t * k);
    if (k > 1 && t % 5 == 2) ids[size_t(t * k + k - 1)] = -1;
    if (repeats && k > 1 && t % 7 == 4) ids[size_t(t * k + k - 1)] = ids[size_t(t * k)];
    if (t % 11 == 6) ids[size_t(t * k)] = int32_t(E + t % 3);
  }
  return ids;
}

inline std::vector<bf16> random_bf16(uint32_t seed, size_t n, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = bf16(d(rng));
  return v;
}
inline std::vector<float> random_weights(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.05f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Every rank's inputs of call `call` (each rank draws all ranks' from their seeds): token
/// counts, rows ([T, H] bf16), top-k ids.
struct Inputs {
  std::vector<int64_t> T;
  std::vector<std::vector<bf16>> xs;
  std::vector<std::vector<int32_t>> ids;
};
inline Inputs every_rank(int n, int64_t base, int64_t max_tokens, int64_t H, int64_t E, int64_t El, int k, int call,
                         bool repeats = false) {
  Inputs in;
  for (int r = 0; r < n; ++r) {
    in.T.push_back(std::min(max_tokens, tokens_of(r, base, call)));
    in.xs.push_back(random_bf16(uint32_t(r * 131 + call), size_t(in.T.back() * H)));
    in.ids.push_back(ep_ids(r, in.T.back(), E, El, n, k, call, repeats));
  }
  return in;
}

/// out ([tokens, N] bf16) against the host's: each token's kept slots' scores times its row,
/// the rows as they came (x; f8: within e4m3's steps, 2^-4 of the value and 2^-9 of the block's
/// scale) or through each expert's weights (gemm: bf16(x @ W[e]^T), W from weights_of(rank)
/// [El, N, H]: the values the kernels compute with, as x's for a GEMM of f8 rows), within 2^-8
/// of the sum plus tol of the terms' magnitudes (the f32 sums'), plus, through a GEMM, each
/// term's accumulation error (a bound per unit of its products' magnitudes) and bf16 rounding,
/// and in norm. `xm`: our tokens' rows as floats.
template <class WeightsOf>
void expect_combined(const std::vector<bf16>& got, const float* xm, const std::vector<int32_t>& ids,
                     const std::vector<float>& weights, int64_t tokens, int64_t H, int64_t N, int k, int64_t El, int n,
                     bool gemm, bool f8, WeightsOf weights_of) {
  // f8 through a GEMM: its inputs are the quantized values themselves, and f8 tensor cores keep
  // partial sums in about 14 bits (2^-11 of the terms' magnitudes, as grouped_gemm_test's bound).
  const double sum_bound = f8 && gemm ? 0x1p-11 : double(H) * 0x1p-22;
  f8 = f8 && !gemm;
  std::vector<std::vector<float>> ws(static_cast<size_t>(n));  // (the weights of each rank our tokens went to)
  if (gemm)
    for (int32_t e : ids)
      if (e >= 0 && e < El * n && ws[size_t(e / El)].empty()) ws[size_t(e / El)] = weights_of(e / El);
  const double tol = f8 ? 0x1p-4 : gemm ? 0x1p-7 : 1e-5;
  double err2 = 0, ref2 = 0;
  int64_t off = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < N; ++c) {
      double want = 0, scale = 0, gemm_err = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t e = ids[size_t(t * k + j)];
        if (e < 0 || e >= El * n) continue;  // (sent nowhere)
        const double wj = weights[size_t(t * k + j)];
        double v = 0, mag = 0;
        if (gemm) {
          const float* wr = ws[size_t(e / El)].data() + ((e % El) * N + c) * H;
          for (int64_t h = 0; h < H; ++h) {
            v += double(float(xm[t * H + h])) * double(float(wr[h]));
            mag += std::fabs(double(float(xm[t * H + h])) * double(float(wr[h])));
          }
          gemm_err += wj * (mag * sum_bound + std::fabs(v) * 0x1p-8);  // (its sum's, its bf16 rounding)
          mag = 0;
        } else {
          v = double(float(xm[t * H + c]));
          if (f8) {  // (e4m3's subnormal steps: 2^-9 of the block's scale)
            float amax = 0;
            for (int64_t q = c / 128 * 128; q < std::min(H, c / 128 * 128 + 128); ++q)
              amax = std::max(amax, std::fabs(float(xm[t * H + q])));
            mag = 0x1p-5 * reference::f8_scale(amax);  // (2^-9 = 2^-4 * 2^-5)
          }
        }
        want += wj * v;
        scale += wj * (std::fabs(v) + mag);
      }
      const double g = double(float(got[size_t(t * N + c)]));
      err2 += (g - want) * (g - want), ref2 += want * want;
      const double bound = 0x1p-8 * std::fabs(want) + tol * scale + gemm_err + 1e-30;
      if (std::fabs(g - want) > bound && off++ < 3)
        ADD_FAILURE() << "out[" << t << ", " << c << "] = " << g << ", want " << want << " within " << bound;
    }
  EXPECT_EQ(off, 0) << "combined elements out of bounds";
  EXPECT_LE(std::sqrt(err2 / std::max(ref2, 1e-30)), f8 ? 0x1p-4 : gemm ? 0x1p-7 : 0x1p-8) << "combined, in norm";
}

/// Runs `calls` dispatches (and combines) of `base`-ish tokens per rank, hidden H, E experts,
/// top-k; `gemm_n` > 0: a grouped GEMM of N = gemm_n columns between dispatch and combine, else
/// the received rows sent back as they are. `stream`: every run queued on it (synchronized before
/// the results are read).
template <template <class> class Memory>
void check_ep(const Target& target, int64_t base, int64_t H, int64_t E, int k, int64_t gemm_n = 0, int calls = 2,
              int64_t recv_capacity = 0, const runtime::Stream* stream = nullptr) {
  const int n = world_size(), me = rank();
  const int64_t El = E / n, max_tokens = base;
  SCOPED_TRACE(str_cat("ep: ", n, " ranks, ~", base, " tokens, hidden ", H, ", ", E, " experts, top-", k,
                       gemm_n ? str_cat(", grouped GEMM to ", gemm_n) : std::string(", rows sent back")));
  kernels::EpDispatch dispatch(target, max_tokens, H, E, k, {recv_capacity});
  const int64_t N = gemm_n > 0 ? gemm_n : H;
  kernels::EpCombine combine(dispatch, N);
  const int64_t max_pairs = max_tokens * k;
  // Each rank's experts' weights ([El, N, H]), for the GEMM.
  auto weights_of = [&](int64_t d) {
    return random_bf16(uint32_t(900 + d), size_t(El * N * H), 1.0f / std::sqrt(float(H)));
  };
  auto w = Memory<bf16>::make(gemm_n > 0 ? weights_of(me) : std::vector<bf16>(1));
  std::unique_ptr<kernels::GroupedGemm> gemm;
  if (gemm_n > 0) gemm = std::make_unique<kernels::GroupedGemm>(target, dispatch.recv_capacity(), N, H, El);
  auto y = Memory<bf16>::make(std::vector<bf16>(size_t(std::max<int64_t>(dispatch.recv_capacity(), 1) * N)));
  for (int call = 1; call <= calls; ++call) {
    SCOPED_TRACE(str_cat("call ", call));
    const auto [T, xs, ids] = every_rank(n, base, max_tokens, H, E, El, k, call, true);
    const int64_t tokens = T[size_t(me)];
    auto x = Memory<bf16>::make(xs[size_t(me)]);
    auto id = Memory<int32_t>::make(ids[size_t(me)]);
    dispatch.run(x.ptr(), id.ptr(), tokens, stream);
    if (stream) stream->synchronize();
    // What we receive: each local expert's count, and every row with its source.
    std::vector<int64_t> want_counts(size_t(El), 0);
    for (int r = 0; r < n; ++r)
      for (int32_t e : ids[size_t(r)])
        if (e >= 0 && e / El == me) ++want_counts[size_t(e % El)];
    ASSERT_EQ(dispatch.recv_counts(), want_counts);
    const int64_t rows = dispatch.recv_rows();
    ASSERT_EQ(rows, std::accumulate(want_counts.begin(), want_counts.end(), int64_t{0}));
    auto recv = read_back(target, dispatch.recv(), size_t(rows * H));
    auto src = read_back(target, dispatch.recv_src(), size_t(rows));
    auto offs = read_back(target, dispatch.offs(), size_t(El));
    std::set<int64_t> seen;
    int64_t row = 0, bad = 0;
    for (int64_t le = 0; le < El; ++le) {
      ASSERT_EQ(offs[size_t(le)], row + want_counts[size_t(le)]) << "offs of local expert " << le;
      int64_t last_rank = 0;
      for (; row < offs[size_t(le)]; ++row) {
        const int64_t from = src[size_t(row)] / max_pairs, slot = src[size_t(row)] % max_pairs;
        ASSERT_TRUE(src[size_t(row)] >= 0 && from < n && slot < T[size_t(from)] * k)
            << "row " << row << ": source " << src[size_t(row)];
        ASSERT_EQ(ids[size_t(from)][size_t(slot)], me * El + le)
            << "row " << row << " from rank " << from << " slot " << slot;
        ASSERT_TRUE(seen.insert(src[size_t(row)]).second) << "row " << row << ": slot received twice";
        ASSERT_GE(from, last_rank) << "row " << row << ": the expert's rows not in rank order";
        last_rank = from;
        const bf16* want = xs[size_t(from)].data() + slot / k * H;
        for (int64_t h = 0; h < H; ++h) bad += std::memcmp(&recv[size_t(row * H + h)], &want[h], sizeof(bf16)) != 0;
      }
    }
    EXPECT_EQ(bad, 0) << "received elements that differ from their token's";
    // Back: the rows as they came, or through each expert's weights.
    const bf16* rows_back = dispatch.recv();
    if (gemm) {
      gemm->run(dispatch.recv(), w.ptr(), y.ptr(), kernels::GroupedGemm::Offsets(dispatch.offs()), stream);
      rows_back = y.ptr();
    }
    std::vector<float> weights = random_weights(uint32_t(77 + me * 3 + call), size_t(tokens * k));
    auto wt = Memory<float>::make(weights);
    auto out = Memory<bf16>::make(std::vector<bf16>(size_t(std::max<int64_t>(tokens, 1) * N), bf16(7.0f)));
    combine.run(rows_back, wt.ptr(), out.ptr(), stream);
    if (stream) stream->synchronize();
    auto got = out.get();
    // The host's: sum over the token's kept slots of weight * (its row, or bf16(x @ W[e]^T)).
    const std::vector<float> mine(xs[size_t(me)].begin(), xs[size_t(me)].end());
    expect_combined(got, mine.data(), ids[size_t(me)], weights, tokens, H, N, k, El, n, gemm != nullptr, false,
                    [&](int64_t d) {
                      const std::vector<bf16> w16 = weights_of(d);
                      return std::vector<float>(w16.begin(), w16.end());
                    });
  }
}

/// The low-latency mode (EpLowLatencyDispatch / EpLowLatencyCombine): each (local expert, source)
/// run of rows against the host's (every row with its slot, bf16 bit for bit, f8e4m3 within its
/// quantization: |code * scale - x| <= 2^-4 |x| + 2^-9 scale, the scales within 2^-22 of the
/// host's rule), the tile table over the runs; then the way back: the rows as they came (bf16),
/// their values dequantized on the host (f8e4m3: the round trip), or a grouped GEMM over the
/// table (gemm_n > 0, bf16). `hook`: run() only sends, receive() after other work is queued.
template <template <class> class Memory>
void check_ep_ll(const Target& target, int64_t base, int64_t H, int64_t E, int k, ir::DType dtype, int64_t gemm_n = 0,
                 int calls = 3, bool hook = false, const runtime::Stream* stream = nullptr) {
  const int n = world_size(), me = rank();
  const int64_t El = E / n, max_tokens = base, kb = (H + 127) / 128;
  const bool f8 = dtype == ir::DType::f8e4m3;
  SCOPED_TRACE(str_cat("ep low latency: ", n, " ranks, up to ", base, " tokens, hidden ", H, ", ", E, " experts, top-",
                       k, ", ", ir::dtype_name(dtype), gemm_n ? str_cat(", grouped GEMM to ", gemm_n) : "",
                       hook ? ", receive hook" : ""));
  kernels::EpLowLatencyDispatch dispatch(target, max_tokens, H, E, k, {dtype, 64, hook});
  const int64_t N = gemm_n > 0 ? gemm_n : H, rows = dispatch.rows();
  kernels::EpLowLatencyCombine combine(dispatch, N);
  // Each rank's experts' weights ([El, N, H]): bf16, or (f8 rows) e4m3 with a scale per 128 x
  // 128 block, as the values they stand for, and their codes and scales.
  auto weights_of = [&](int64_t d, std::vector<f8e4m3>* codes = nullptr, std::vector<float>* scales = nullptr) {
    std::vector<bf16> w16 = random_bf16(uint32_t(900 + d), size_t(El * N * H), 1.0f / std::sqrt(float(H)));
    std::vector<float> w(w16.begin(), w16.end());
    if (f8) {
      std::vector<f8e4m3> c;
      std::vector<float> sc;
      w = reference::spread_blocks(std::move(w), El, N, H);
      reference::quantize_f8_experts(w, El, N, H, codes ? *codes : c, scales ? *scales : sc);
    }
    return w;
  };
  std::vector<f8e4m3> w_codes;
  std::vector<float> w_scales;
  const std::vector<float> w_mine = gemm_n > 0 ? weights_of(me, &w_codes, &w_scales) : std::vector<float>(1);
  auto w = Memory<bf16>::make(std::vector<bf16>(w_mine.begin(), w_mine.end()));
  auto w8 = Memory<f8e4m3>::make(f8 && gemm_n > 0 ? w_codes : std::vector<f8e4m3>(1));
  auto w8_scales = Memory<float>::make(f8 && gemm_n > 0 ? w_scales : std::vector<float>(1));
  std::unique_ptr<kernels::GroupedGemm> gemm;
  if (gemm_n > 0)
    gemm = f8 ? std::make_unique<kernels::GroupedGemm>(target, rows, N, H, El, ir::DType::f8e4m3,
                                                       kernels::GroupedGemm::Scaling::blockwise)
              : std::make_unique<kernels::GroupedGemm>(target, rows, N, H, El);
  auto y = Memory<bf16>::make(std::vector<bf16>(size_t(std::max<int64_t>(rows, 1) * N)));
  for (int call = 1; call <= calls; ++call) {
    SCOPED_TRACE(str_cat("call ", call));
    const auto [T, xs, ids] = every_rank(n, base, max_tokens, H, E, El, k, call);
    const int64_t tokens = T[size_t(me)];
    auto x = Memory<bf16>::make(xs[size_t(me)]);
    auto id = Memory<int32_t>::make(ids[size_t(me)]);
    dispatch.run(x.ptr(), id.ptr(), tokens, stream);
    if (hook) dispatch.receive(stream);
    if (stream) stream->synchronize();
    // Each (local expert, source) run: its count, and each row with its slot.
    const int64_t groups = El * n;
    auto counts = read_back(target, dispatch.recv_counts(), size_t(groups));
    auto src = read_back(target, dispatch.recv_src(), size_t(rows));
    auto tiles = read_back(target, dispatch.tiles(), size_t(1 + 3 * dispatch.slots()));
    std::vector<bf16> recv16;
    std::vector<f8e4m3> recv8;
    std::vector<float> scales;
    if (f8) {
      recv8 = read_back(target, static_cast<const f8e4m3*>(dispatch.recv()), size_t(rows * H));
      scales = read_back(target, dispatch.recv_scales(), size_t(rows * kb));
    } else {
      recv16 = read_back(target, static_cast<const bf16*>(dispatch.recv()), size_t(rows * H));
    }
    std::vector<bf16> back(size_t(std::max<int64_t>(rows, 1) * H));  // (f8: the rows dequantized)
    int64_t bad = 0, tile = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t le = g / n, from = g % n;
      int64_t want = 0;
      for (int32_t e : ids[size_t(from)]) want += e == me * El + le;
      ASSERT_EQ(counts[size_t(g)], want) << "rows of local expert " << le << " from rank " << from;
      std::set<int32_t> seen;
      for (int64_t r = 0; r < want; ++r) {
        const int64_t row = g * max_tokens + r;
        const int32_t slot = src[size_t(row)];
        ASSERT_TRUE(slot >= 0 && slot < T[size_t(from)] * k && ids[size_t(from)][size_t(slot)] == me * El + le)
            << "row " << row << " (expert " << le << " from rank " << from << "): slot " << slot;
        ASSERT_TRUE(seen.insert(slot).second) << "row " << row << ": slot " << slot << " twice";
        const bf16* x_row = xs[size_t(from)].data() + slot / k * H;
        for (int64_t h = 0; h < H; ++h) {
          if (!f8) {
            bad += std::memcmp(&recv16[size_t(row * H + h)], &x_row[h], sizeof(bf16)) != 0;
            back[size_t(row * H + h)] = recv16[size_t(row * H + h)];
            continue;
          }
          float amax = 0;
          for (int64_t q = h / 128 * 128; q < std::min(H, h / 128 * 128 + 128); ++q)
            amax = std::max(amax, std::fabs(float(x_row[q])));
          const float want_s = reference::f8_scale(amax), s = scales[size_t(row * kb + h / 128)];
          const double v = double(float(recv8[size_t(row * H + h)])) * s, xv = float(x_row[h]);
          bad += !(std::fabs(s - want_s) <= 0x1p-22 * want_s) ||
                 !(std::fabs(v - xv) <= 0x1p-4 * std::fabs(xv) + 0x1p-9 * s);
          back[size_t(row * H + h)] = bf16(float(v));
        }
      }
      for (int64_t i = 0; i < (want + 63) / 64; ++i, ++tile) {  // (the table: this run's 64-row pieces)
        const int32_t* entry = &tiles[size_t(1 + 3 * tile)];
        EXPECT_TRUE(entry[0] == le && entry[1] == g * max_tokens + i * 64 &&
                    entry[2] == g * max_tokens + std::min<int64_t>((i + 1) * 64, want))
            << "tile " << tile << ": " << entry[0] << ", " << entry[1] << ", " << entry[2];
      }
    }
    EXPECT_EQ(tiles[0], tile) << "tiles in the table";
    EXPECT_EQ(bad, 0) << "received elements off their token's";
    // Back.
    const bf16* rows_back = nullptr;
    auto y_in = Memory<bf16>::make(back);
    const kernels::GroupedGemm::Table table{dispatch.tiles(), dispatch.slots(), dispatch.block_rows()};
    if (gemm && f8) {  // (the blockwise f8 GEMM over the rows' codes and scales as they came)
      gemm->run(static_cast<const f8e4m3*>(dispatch.recv()), w8.ptr(), y.ptr(), dispatch.recv_scales(), w8_scales.ptr(),
                table, stream);
      rows_back = y.ptr();
    } else if (gemm) {
      gemm->run(static_cast<const bf16*>(dispatch.recv()), w.ptr(), y.ptr(), table, stream);
      rows_back = y.ptr();
    } else {
      rows_back = f8 ? y_in.ptr() : static_cast<const bf16*>(dispatch.recv());
    }
    std::vector<float> weights = random_weights(uint32_t(77 + me * 3 + call), size_t(tokens * k));
    auto wt = Memory<float>::make(weights);
    auto out = Memory<bf16>::make(std::vector<bf16>(size_t(std::max<int64_t>(tokens, 1) * N), bf16(7.0f)));
    combine.run(rows_back, wt.ptr(), out.ptr(), stream);
    if (hook) combine.receive(stream);
    if (stream) stream->synchronize();
    const std::vector<bf16> got = out.get();
    std::vector<float> mine(xs[size_t(me)].begin(), xs[size_t(me)].end());
    if (gemm && f8)  // (the values the f8 GEMM multiplies: each token quantized per 128 channels)
      for (int64_t t = 0; t < tokens; ++t) reference::quantize_f8_blocks(&mine[size_t(t * H)], H);
    expect_combined(got, mine.data(), ids[size_t(me)], weights, tokens, H, N, k, El, n, gemm != nullptr, f8,
                    [&](int64_t d) { return weights_of(d); });
  }
}

}  // namespace tiledist::testing_ep
