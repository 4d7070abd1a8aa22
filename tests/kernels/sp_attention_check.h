// Sequence-parallel attention's check (kernels::AgAttention, kernels::UlyssesAttention), for the CPU tests
// (sp_attention_dist_test.cpp, one process a rank) and the GPU's (cuda_collectives_test.cpp):
// each rank holds a slice of every sequence's tokens (rank r positions [r S, (r + 1) S)) and must
// get, for its queries, softmax(q kᵀ · scale [causal]) v over the whole sequences, computed
// plainly in double on the host (every rank draws every rank's keys and values from its seed;
// causal: rank r's queries see the slices of ranks 0..r, the last up to each query's position).
// Tolerance as attention_test's: 2u an element (u = 2^-8, bf16) with a slack of 1.5, u in norm
// (flash_decode_check.h's expect_decoded).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference.h"
#include "kernels/sp_attention.h"
#include "tests/kernels/flash_decode_check.h"

namespace tiledist::testing_sp {
namespace ref = tiledist::reference;

/// Random values in [-1, 1) rounded to bf16, and the same as floats.
struct Rows {
  std::vector<bf16> h;
  std::vector<float> f;
};
inline Rows rows_of(uint64_t seed, size_t n) {
  Rows r{std::vector<bf16>(n), ref::random_values<float>(seed, n)};
  for (size_t i = 0; i < n; ++i) r.f[i] = float(r.h[i] = bf16(r.f[i]));
  return r;
}

/// A run's inputs at call `call` (`batch` sequences of `seqlen` tokens a rank, heads / kv_heads
/// heads of D): this rank's queries, and every rank's keys and values (the same seeds on every
/// rank).
struct SpRun {
  int call, batch, seqlen;
  Rows q;
  std::vector<Rows> k, v;
};
inline SpRun sp_inputs(int call, int batch, int seqlen, int heads, int kv_heads, int D) {
  const int n = world_size(), me = rank();
  const size_t nkv = size_t(batch) * seqlen * kv_heads * D, nq = size_t(batch) * seqlen * heads * D;
  SpRun run{call, batch, seqlen, rows_of(uint64_t(5000 + me * 13 + call), nq), {}, {}};
  for (int r = 0; r < n; ++r) {
    run.k.push_back(rows_of(uint64_t(r * 7919 + call * 31), nkv));
    run.v.push_back(rows_of(uint64_t(r * 7919 + call * 31 + 1), nkv));
  }
  return run;
}

/// Checks o, this rank's outputs of `run`, against the host's attention in double.
inline void expect_sp(const SpRun& run, const std::vector<bf16>& o, int heads, int kv_heads, int D, bool causal) {
  // (the slices in rank order make each sequence; causal: ours last, so that decode_attention's
  // rule — query t of the last seqlen positions sees the keys up to its own — is the causal mask)
  const int n = world_size(), me = rank();
  const std::vector<int32_t> lens(size_t(run.batch), run.seqlen);
  std::vector<ref::KvSlice> kv;
  for (int r = 0; r < (causal ? me + 1 : n); ++r)
    kv.push_back({run.k[size_t(r)].f.data(), run.v[size_t(r)].f.data(), lens.data(), run.seqlen});
  const std::vector<double> want =
      ref::decode_attention(run.q.f, kv, run.batch, run.seqlen, heads, kv_heads, D, causal, 1.0 / std::sqrt(double(D)));
  testing_decode::expect_decoded(o, want);
}

/// One run of `attn` (an AgAttention or a UlyssesAttention made for heads / kv_heads heads of D,
/// causal or not) at call `call`: `batch` sequences of `seqlen` tokens a rank, checked on this
/// rank (`in_place`: the outputs written over q). Memory<T>::make(vector) -> ptr(), get(): where
/// the operands live (collectives_check.h's HostMemory, or device memory).
template <template <class> class Memory, class Attn>
void check_sp_attention(int call, int batch, int seqlen, int heads, int kv_heads, int D, bool causal, Attn& attn,
                        const runtime::Stream* stream = nullptr, bool in_place = false) {
  SCOPED_TRACE(str_cat("call ", call, ": batch ", batch, ", seqlen ", seqlen, " a rank, heads ", heads, "/", kv_heads,
                       causal ? ", causal" : "", in_place ? ", in place" : ""));
  const SpRun run = sp_inputs(call, batch, seqlen, heads, kv_heads, D);
  auto q_d = Memory<bf16>::make(run.q.h), k_d = Memory<bf16>::make(run.k[size_t(rank())].h),
       v_d = Memory<bf16>::make(run.v[size_t(rank())].h);
  auto out = Memory<bf16>::make(std::vector<bf16>(run.q.h.size(), bf16(7.0f)));
  attn.run(q_d.ptr(), k_d.ptr(), v_d.ptr(), in_place ? q_d.ptr() : out.ptr(), batch, seqlen, stream);
  if (stream) stream->synchronize();
  expect_sp(run, in_place ? q_d.get() : out.get(), heads, kv_heads, D, causal);
}

/// Runs of `attn` at the shapes given, calls first_call on, all queued on `stream` before it is
/// waited for once (each on buffers of its own), then each checked: runs back to back with
/// nothing between them on the host.
template <template <class> class Memory, class Attn>
void check_sp_attention_queued(int first_call, const std::vector<std::pair<int, int>>& shapes, int heads, int kv_heads,
                               int D, bool causal, Attn& attn, const runtime::Stream& stream) {
  SCOPED_TRACE(str_cat(shapes.size(), " runs queued from call ", first_call, ", heads ", heads, "/", kv_heads,
                       causal ? ", causal" : ""));
  std::vector<SpRun> runs;
  std::vector<Memory<bf16>> q, k, v, o;
  for (size_t i = 0; i < shapes.size(); ++i) {
    runs.push_back(sp_inputs(first_call + int(i), shapes[i].first, shapes[i].second, heads, kv_heads, D));
    q.push_back(Memory<bf16>::make(runs.back().q.h));
    k.push_back(Memory<bf16>::make(runs.back().k[size_t(rank())].h));
    v.push_back(Memory<bf16>::make(runs.back().v[size_t(rank())].h));
    o.push_back(Memory<bf16>::make(std::vector<bf16>(runs.back().q.h.size(), bf16(7.0f))));
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    attn.run(q[i].ptr(), k[i].ptr(), v[i].ptr(), o[i].ptr(), shapes[i].first, shapes[i].second, &stream);
  stream.synchronize();
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(str_cat("call ", runs[i].call));
    expect_sp(runs[i], o[i].get(), heads, kv_heads, D, causal);
  }
}

}  // namespace tiledist::testing_sp
