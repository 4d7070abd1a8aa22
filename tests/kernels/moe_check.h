// The kernel library's MoE objects checked on every rank against products the host computes in
// double from the same bf16 inputs, every element of every routed slot: skewed routing (an
// expert no token picks, one that most pick), top-k 1, 2 and 8, token counts that are not
// multiples of the tiles, a few calls in a row. Shared by the CPU test (moe_dist_test) and the
// GPU test (cuda_collectives_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/moe.h"
#include "kernels/reference.h"
#include "kernels/symmetric.h"
#include "tests/kernels/collectives_check.h"

namespace tiledist::testing_moe {

/// `n` elements at `p` (device memory on a GPU target), on the host.
template <class T>
std::vector<T> read_back(const Target& target, const T* p, size_t n) {
  std::vector<T> out(n);
  if (n == 0) return out;
  if (kernels::detail::on_gpu(target))
    cuda::copy_to_host(out.data(), p, n * sizeof(T));
  else
    std::memcpy(out.data(), p, n * sizeof(T));
  return out;
}

/// Rank r's top-k ids for `tokens` tokens at call `call`: k distinct experts per token, never
/// expert 0 (where k < E: an expert with no tokens), expert 1 for about three tokens in four
/// (skew), the rest uniform; the same on every rank.
inline std::vector<int32_t> routed_ids(int r, int64_t tokens, int64_t E, int k, int call) {
  std::mt19937 rng(uint32_t(r * 7919 + call * 104729 + 17));
  std::vector<int32_t> ids(size_t(tokens) * k);
  const int lowest = k < E ? 1 : 0;
  std::vector<int32_t> pool(size_t(E - lowest));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), lowest);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (E > 1 && rng() % 4 != 0) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), 1));
    std::copy(pool.begin(), pool.begin() + k, ids.begin() + t * k);
  }
  return ids;
}

/// AllGather + MoE grouped GEMM: every routed slot's row of `out` (found through the routing's
/// dest) against the host's product of its token and its expert's weights, within
///   |got - want| <= 2^-8 |want| + 1.01 acc * magnitude
/// (bf16's rounding of the f32 result, and the f32 sum's: acc = K 2^-24 on the CPU, K 2^-22 on a
/// GPU's tensor cores, 2^-9 of the magnitude for their f8 products), and in norm within 2^-8 + 1e-4.
/// `weights` f8e4m3: W quantized per 128 x 128 block of each expert (reference::
/// quantize_f8_experts), the host's product of the values its codes and scales stand for and of
/// each token quantized per 128 columns as the kernel does (reference::quantize_f8_blocks); the
/// tokens' and the weights' blocks spread apart first (spread_rows, spread_blocks).
template <template <class> class Memory>
void check_ag_moe(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t E, int k,
                  std::vector<const runtime::Stream*> streams = {nullptr}, ir::DType weights = ir::DType::bf16) {
  using testing_collectives::to_bf16;
  using testing_collectives::values;
  const bool f8 = weights == ir::DType::f8e4m3;
  SCOPED_TRACE(str_cat("tokens=", tokens, " N=", N, " K=", K, " E=", E, " top-", k, f8 ? " f8e4m3" : ""));
  kernels::AgMoe op(target, tokens, N, K, E, k, weights);
  const int n = world_size(), me = rank();
  const int64_t all = tokens * n, pairs = all * k;
  const bool gpu = kernels::detail::on_gpu(target);
  // (f8 on a GPU: wgmma sums the products of f8 operands in less than f32: seen 2^-11 of them)
  const double acc = f8 && gpu ? std::ldexp(1.0, -9) : K * std::ldexp(1.0, gpu ? -22 : -24);
  for (int call = 1; call <= 3; ++call) {
    // (f8: the tokens' and the weights' blocks spread apart, so that their scales differ)
    auto x_of = [&](int r) {
      std::vector<float> v = values(r * 13 + 7, size_t(tokens * K), call);
      return to_bf16(f8 ? reference::spread_rows(std::move(v), tokens, K) : v);
    };
    auto x = Memory<bf16>::make(x_of(me));
    auto ids = Memory<int32_t>::make(routed_ids(me, tokens, E, k, call));
    auto out = Memory<bf16>::make(std::vector<bf16>(size_t(op.rows() * N), bf16(0.0f)));
    const runtime::Stream* s = streams[call % streams.size()];
    std::vector<float> wh;  // the values the kernel multiplies by
    if (f8) {
      std::vector<f8e4m3> codes;
      std::vector<float> scales;
      wh = reference::spread_blocks(values(500 + me, size_t(E * N * K), call), E, N, K);
      reference::quantize_f8_experts(wh, E, N, K, codes, scales);
      auto w = Memory<f8e4m3>::make(codes);
      auto ws = Memory<float>::make(scales);
      op.run(x.ptr(), ids.ptr(), nullptr, w.ptr(), ws.ptr(), out.ptr(), s);
      if (s) s->synchronize();
    } else {
      const std::vector<bf16> w16 = to_bf16(values(500 + me, size_t(E * N * K), call));
      wh.assign(w16.begin(), w16.end());
      auto w = Memory<bf16>::make(w16);
      op.run(x.ptr(), ids.ptr(), w.ptr(), out.ptr(), s);
      if (s) s->synchronize();
    }
    const auto dest = read_back(target, op.routing().dest(), size_t(pairs));
    const std::vector<bf16> got = out.get();
    std::vector<std::vector<float>> xs;
    std::vector<std::vector<int32_t>> idss;
    for (int r = 0; r < n; ++r) {
      const std::vector<bf16> x16 = x_of(r);
      xs.emplace_back(x16.begin(), x16.end());
      if (f8)
        for (int64_t t = 0; t < tokens; ++t) reference::quantize_f8_blocks(&xs.back()[size_t(t * K)], K);
      idss.push_back(routed_ids(r, tokens, E, k, call));
    }
    std::vector<float> got_in, want_in;
    size_t bad = 0;
    std::vector<bool> taken(size_t(op.rows()), false);
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t token = p / k, r = token / tokens, t = token % tokens;
      const int e = idss[r][size_t(t * k + p % k)];
      const int row = dest[p];
      if (row < 0 || row >= op.rows() || taken[row]) {
        if (bad++ < 5) ADD_FAILURE() << "call " << call << ": slot " << p << " has row " << row;
        continue;
      }
      taken[row] = true;
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0, mag = 0;
        for (int64_t q = 0; q < K; ++q) {
          const double term = double(xs[r][size_t(t * K + q)]) * wh[size_t((e * N + j) * K + q)];
          sum += term, mag += std::abs(term);
        }
        const float g = float(got[size_t(row * N + j)]);
        if (!(std::abs(g - sum) <= std::ldexp(std::abs(sum), -8) + 1.01 * acc * mag + 1e-30) && bad++ < 5)
          ADD_FAILURE() << "call " << call << ": slot " << p << " (rank " << r << "'s token " << t << ", expert " << e
                        << ") column " << j << " = " << g << ", want " << sum;
        got_in.push_back(g), want_in.push_back(float(sum));
      }
    }
    EXPECT_EQ(bad, 0u) << "call " << call << ": " << bad << " elements out of bounds";
    EXPECT_LT(reference::rel_error(got_in, want_in), std::ldexp(1.0, -8) + 1e-4) << "call " << call;
  }
}

/// Rank r's top-k weights for its tokens at call `call` (positive, not normalized).
inline std::vector<float> routed_weights(int r, int64_t tokens, int k, int call) {
  std::vector<float> v = testing_collectives::values(r * 31 + 3, size_t(tokens * k), call);
  for (float& x : v) x = 0.1f + std::abs(x) / 5;
  return v;
}

/// Grouped GEMM + top-k combine + ReduceScatter (or AllReduce): each rank's activations of every
/// routed slot (rows of the routing's sorted order; the other rows NaN, never to be read), its
/// slice of the down weights; out's every element against the host's sum over ranks and slots
/// in double, within
///   |got - want| <= 2^-8 |want| + (2^-8 + 1.01 acc) * magnitude
/// (the output's rounding to bf16; each rank's product rounded to bf16 before the combine, and
/// its f32 sum: magnitude is the sum of the terms' magnitudes), and in norm within 2^-7.
template <template <class> class Memory>
void check_moe_reduce(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t E, int k,
                      kernels::MoeReduce::Mode mode, std::vector<const runtime::Stream*> streams = {nullptr},
                      ir::DType weights = ir::DType::bf16) {
  using testing_collectives::to_bf16;
  using testing_collectives::values;
  const bool all_reduce = mode == kernels::MoeReduce::Mode::all_reduce, f8 = weights == ir::DType::f8e4m3;
  SCOPED_TRACE(str_cat(all_reduce ? "AllReduce" : "ReduceScatter", " tokens=", tokens, " N=", N, " K=", K, " E=", E,
                       " top-", k, f8 ? " f8e4m3" : ""));
  kernels::MoeReduce op(target, tokens, N, K, E, k, mode, weights);
  const int n = world_size(), me = rank();
  const int64_t all = tokens * n, pairs = all * k;
  // (the gathered batch's routing as AgMoe makes it: a segment per rank, or one)
  const int segments = kernels::moe_segments(n, all * k, E, op.config().bm);
  kernels::MoeRouting routing(target, all, E, k,
                              {kernels::MoeRouting::Scores::softmax, true, op.config().bm, segments});
  const bool gpu = kernels::detail::on_gpu(target);
  const double acc = f8 && gpu ? std::ldexp(1.0, -9) : K * std::ldexp(1.0, gpu ? -22 : -24);
  for (int call = 1; call <= 3; ++call) {
    std::vector<int32_t> ids;
    std::vector<float> scores;
    for (int r = 0; r < n; ++r) {
      auto i = routed_ids(r, tokens, E, k, call);
      auto sc = routed_weights(r, tokens, k, call);
      ids.insert(ids.end(), i.begin(), i.end());
      scores.insert(scores.end(), sc.begin(), sc.end());
    }
    auto ids_in = Memory<int32_t>::make(ids);
    const runtime::Stream* s = streams[call % streams.size()];
    routing.align(ids_in.ptr(), all, s);
    if (s) s->synchronize();
    const auto dest = read_back(target, routing.dest(), size_t(pairs));
    // Slot p's activations on rank r: values(r * 17 + 1)'s row p (f8: quantized per 128 columns,
    // the values they stand for; weights likewise per 128 x 128 block).
    const int64_t kb = (K + 127) / 128;
    auto slot_act = [&](int r) {
      std::vector<float> raw = values(r * 17 + 1, size_t(pairs * K), call);
      const std::vector<bf16> a = to_bf16(f8 ? reference::spread_rows(std::move(raw), pairs, K) : raw);
      std::vector<float> v(a.begin(), a.end());
      if (f8)
        for (int64_t p = 0; p < pairs; ++p) reference::quantize_f8_blocks(&v[size_t(p * K)], K);
      return v;
    };
    std::vector<f8e4m3> w_codes;
    std::vector<float> w_scales;
    auto weights_of = [&](int r) {
      if (!f8) {
        const std::vector<bf16> w = to_bf16(values(700 + r, size_t(E * N * K), call));
        return std::vector<float>(w.begin(), w.end());
      }
      std::vector<float> w = reference::spread_blocks(values(700 + r, size_t(E * N * K), call), E, N, K);
      reference::quantize_f8_experts(w, E, N, K, w_codes, w_scales);
      return w;
    };
    const std::vector<float> mine = slot_act(me);
    auto scores_in = Memory<float>::make(scores);
    const int64_t out_rows = all_reduce ? all : tokens, first = all_reduce ? 0 : me * tokens;
    auto out = Memory<bf16>::make(std::vector<bf16>(size_t(out_rows * N), bf16(NAN)));
    if (f8) {  // (the codes and scales of the rows the kernel reads: quantizing the values again gives them)
      std::vector<f8e4m3> act(size_t(routing.rows() * K), f8e4m3(NAN));
      std::vector<float> act_scales(size_t(routing.rows() * kb), NAN);
      for (int64_t p = 0; p < pairs; ++p)
        reference::quantize_f8_row(&mine[size_t(p * K)], K, &act[size_t(dest[p] * K)],
                                   &act_scales[size_t(dest[p] * kb)]);
      weights_of(me);
      auto act_in = Memory<f8e4m3>::make(act);
      auto scales_in = Memory<float>::make(act_scales);
      auto w_in = Memory<f8e4m3>::make(w_codes);
      auto ws_in = Memory<float>::make(w_scales);
      op.run(act_in.ptr(), scales_in.ptr(), routing, scores_in.ptr(), w_in.ptr(), ws_in.ptr(), out.ptr(), s);
      if (s) s->synchronize();
    } else {
      std::vector<bf16> act(size_t(routing.rows() * K), bf16(NAN));
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t q = 0; q < K; ++q) act[size_t(dest[p] * K + q)] = bf16(mine[size_t(p * K + q)]);
      auto act_in = Memory<bf16>::make(act);
      const std::vector<float> w = weights_of(me);
      auto w_in = Memory<bf16>::make(std::vector<bf16>(w.begin(), w.end()));
      op.run(act_in.ptr(), routing, scores_in.ptr(), w_in.ptr(), out.ptr(), s);
      if (s) s->synchronize();
    }
    const std::vector<bf16> got = out.get();
    std::vector<std::vector<float>> acts, ws;
    for (int r = 0; r < n; ++r) acts.push_back(slot_act(r)), ws.push_back(weights_of(r));
    std::vector<float> got_in, want_in;
    size_t bad = 0;
    for (int64_t t = first; t < first + out_rows; ++t)
      for (int64_t h = 0; h < N; ++h) {
        double sum = 0, mag = 0;
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < k; ++j) {
            const int64_t p = t * k + j;
            const int e = ids[size_t(p)];
            double y = 0, ymag = 0;
            for (int64_t q = 0; q < K; ++q) {
              const double term = double(acts[r][size_t(p * K + q)]) * ws[r][size_t((e * N + h) * K + q)];
              y += term, ymag += std::abs(term);
            }
            sum += scores[size_t(p)] * y, mag += scores[size_t(p)] * ymag;
          }
        const float g = float(got[size_t((t - first) * N + h)]);
        if (!(std::abs(g - sum) <= std::ldexp(std::abs(sum), -8) + (std::ldexp(1.0, -8) + 1.01 * acc) * mag + 1e-30) &&
            bad++ < 5)
          ADD_FAILURE() << "call " << call << ": out[" << t - first << ", " << h << "] = " << g << ", want " << sum;
        got_in.push_back(g), want_in.push_back(float(sum));
      }
    EXPECT_EQ(bad, 0u) << "call " << call << ": " << bad << " elements out of bounds";
    EXPECT_LT(reference::rel_error(got_in, want_in), std::ldexp(1.0, -7)) << "call " << call;
  }
}

/// The MoE MLP: every token of out against the host's
///   sum over its k slots of score * (sum over ranks of (silu(g) * u) @ W2_r[e]^T),
/// [g, u] = x @ W13_r[e]^T, with the kernels' roundings to bf16 (g and u; silu(g) * u; each
/// rank's product), in double: within 2^-8 |want| + 2^-6 magnitude per element (a rank's
/// product rounded the other way) and the moves of the terms whose g, u or act the kernel's f32
/// may round to another bf16 (reference::MoeTokenBounds' flips: the sums cancel, so such a term
/// can be far above 2^-6 of the magnitude), and 2^-7 in norm (at large hidden sizes, where most
/// g may round either way, the norm is the tighter check).
/// `weights` f8e4m3: W13 and W2 quantized per 128 x 128 block of each expert's slice
/// (reference::quantize_f8_experts; the blocks and x's spread apart first: spread_blocks), the host's product of the
/// values the codes and scales stand for, its x and act quantized as the kernels quantize them
/// (reference::moe_mlp_token's f8_activations): the same bounds, plus 2^-3 of the element's largest term (an act value
/// that the kernel's f32 puts a unit away from the host's may round to the neighbouring e4m3 code). On a GPU more act
/// values round the other way: wgmma sums f8 products in less than f32 (about 2^-13 of the terms), which moves g and u
/// across bf16's rounding boundaries often (seen: one act code in 20-50 the neighbour of the host's), so there 2^-6 of
/// the terms' magnitudes more per element; and in norm, rather than against the host's quantized layer (the GPU's codes
/// differ from it in a good part of the noise e4m3 makes: 0.014-0.054 seen), the layer against the exact one (the f8
/// weights' values, activations not quantized) within 1.5 times what e4m3 in exact arithmetic makes (seen: 1.0-1.1
/// times; a wrong scale or a lost slot is many times).
template <template <class> class Memory>
void check_moe_mlp(const Target& target, int64_t tokens, int64_t hidden, int64_t intermediate, int64_t E, int k,
                   kernels::MoeReduce::Mode mode = kernels::MoeReduce::Mode::reduce_scatter,
                   ir::DType weights = ir::DType::bf16, bool overlap = true) {
  using testing_collectives::to_bf16;
  using testing_collectives::values;
  const bool all_reduce = mode == kernels::MoeReduce::Mode::all_reduce;
  SCOPED_TRACE(str_cat("MoeMlp tokens=", tokens, " hidden=", hidden, " intermediate=", intermediate, " E=", E, " top-",
                       k, all_reduce ? " all-reduce" : "", weights == ir::DType::f8e4m3 ? " f8e4m3" : "",
                       overlap ? "" : " one after the other"));
  const bool f8 = weights == ir::DType::f8e4m3, gpu = kernels::detail::on_gpu(target);
  kernels::MoeMlp mlp(target, tokens, hidden, intermediate, E, k, mode, weights);
  if (!overlap) mlp.set_overlap(false);
  const int n = world_size(), me = rank();
  const int64_t I = mlp.intermediate_per_rank(), all = tokens * n;
  auto x_of = [&](int r, int call) {
    std::vector<float> v = values(r * 5 + 2, size_t(tokens * hidden), call);
    return to_bf16(f8 ? reference::spread_rows(std::move(v), tokens, hidden) : v);
  };
  auto w13_of = [&](int r, int call) { return to_bf16(values(300 + r, size_t(E * 2 * I * hidden), call)); };
  auto w2_of = [&](int r, int call) { return to_bf16(values(400 + r, size_t(E * hidden * I), call)); };
  // f8: each expert's [rows, cols] weight quantized: {codes, scales, the values they stand for}.
  struct Quantized {
    std::vector<f8e4m3> codes;
    std::vector<float> scales, values;
  };
  auto quantized = [&](std::vector<float> w, int64_t rows, int64_t cols) {
    Quantized q;
    q.values = reference::spread_blocks(std::move(w), E, rows, cols);
    reference::quantize_f8_experts(q.values, E, rows, cols, q.codes, q.scales);
    return q;
  };
  auto w13_f8 = [&](int r, int call) {
    return quantized(values(300 + r, size_t(E * 2 * I * hidden), call), 2 * I, hidden);
  };
  auto w2_f8 = [&](int r, int call) { return quantized(values(400 + r, size_t(E * hidden * I), call), hidden, I); };
  for (int call = 1; call <= 2; ++call) {
    auto x = Memory<bf16>::make(x_of(me, call));
    auto ids = Memory<int32_t>::make(routed_ids(me, tokens, E, k, call));
    auto scores = Memory<float>::make(routed_weights(me, tokens, k, call));
    const int64_t out_rows = all_reduce ? all : tokens, first = all_reduce ? 0 : me * tokens;
    auto out = Memory<bf16>::make(std::vector<bf16>(size_t(out_rows * hidden), bf16(NAN)));
    if (f8) {
      const Quantized q13 = w13_f8(me, call), q2 = w2_f8(me, call);
      auto w13 = Memory<f8e4m3>::make(q13.codes), w2 = Memory<f8e4m3>::make(q2.codes);
      auto s13 = Memory<float>::make(q13.scales), s2 = Memory<float>::make(q2.scales);
      mlp.run(x.ptr(), ids.ptr(), scores.ptr(), w13.ptr(), s13.ptr(), w2.ptr(), s2.ptr(), out.ptr());
    } else {
      auto w13 = Memory<bf16>::make(w13_of(me, call)), w2 = Memory<bf16>::make(w2_of(me, call));
      mlp.run(x.ptr(), ids.ptr(), scores.ptr(), w13.ptr(), w2.ptr(), out.ptr());
    }
    const std::vector<bf16> got = out.get();
    // Every rank's inputs, drawn again once (as the kernels read them: bf16 values as floats).
    auto floats = [](const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<std::vector<float>> xs, w13s, w2s, scores_of;
    std::vector<std::vector<int32_t>> ids_of;
    for (int r = 0; r < n; ++r) {
      xs.push_back(floats(x_of(r, call)));
      w13s.push_back(f8 ? w13_f8(r, call).values : floats(w13_of(r, call)));
      w2s.push_back(f8 ? w2_f8(r, call).values : floats(w2_of(r, call)));
      ids_of.push_back(routed_ids(r, tokens, E, k, call)), scores_of.push_back(routed_weights(r, tokens, k, call));
    }
    std::vector<float> got_in, want_in, exact;  // exact: f8 weights' values, activations not quantized
    size_t bad = 0;
    for (int64_t t = first; t < first + out_rows; ++t) {
      const int owner = int(t / tokens);
      const int64_t local = t % tokens;
      const std::vector<int32_t> experts(ids_of[owner].begin() + local * k, ids_of[owner].begin() + (local + 1) * k);
      const std::vector<float> slot_scores(scores_of[owner].begin() + local * k,
                                           scores_of[owner].begin() + (local + 1) * k);
      reference::MoeTokenBounds b;
      const std::vector<double> sum = reference::moe_mlp_token(&xs[owner][size_t(local * hidden)], experts, slot_scores,
                                                               w13s, w2s, hidden, I, &b, f8);
      if (f8 && gpu)
        for (double v :
             reference::moe_mlp_token(&xs[owner][size_t(local * hidden)], experts, slot_scores, w13s, w2s, hidden, I))
          exact.push_back(float(v));
      for (int64_t h = 0; h < hidden; ++h) {
        const float g = float(got[size_t((t - first) * hidden + h)]);
        const double want = sum[size_t(h)];
        if (!(std::abs(g - want) <= b.bound(size_t(h), want, f8, gpu)) && bad++ < 5)
          ADD_FAILURE() << "call " << call << ": out[" << t - first << ", " << h << "] = " << g << ", want " << want;
        got_in.push_back(g), want_in.push_back(float(want));
      }
    }
    EXPECT_EQ(bad, 0u) << "call " << call << ": " << bad << " elements out of bounds";
    if (f8 && gpu) {
      const double noise = reference::rel_error(want_in, exact);  // e4m3's own, in exact arithmetic
      EXPECT_LT(reference::rel_error(got_in, exact), 1.5 * noise + std::ldexp(1.0, -8))
          << "call " << call << ": the f8 layer against the exact one, where e4m3 in exact arithmetic gives " << noise;
    } else {
      EXPECT_LT(reference::rel_error(got_in, want_in), std::ldexp(1.0, -7)) << "call " << call;
    }
  }
}

}  // namespace tiledist::testing_moe
