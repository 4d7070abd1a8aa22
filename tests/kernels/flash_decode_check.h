// Distributed flash decoding's check (kernels::DistFlashDecode), for the CPU tests
// (flash_decode_dist_test.cpp, one process a rank) and the GPU's (cuda_collectives_test.cpp):
// each rank holds a slice of every sequence's keys (ragged, some empty), the same queries, and
// must get softmax(q kᵀ · scale) v over all the ranks' slices, computed plainly in double on the
// host (every rank draws every rank's slice from its seed). Tolerance as flash_decode_test's:
// 2u an element (u = 2^-8, bf16) with a slack of 1.5, u in norm.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/flash_decode.h"
#include "kernels/reference.h"

namespace tiledist::testing_decode {
namespace ref = tiledist::reference;

/// o (bf16) against the reference `want`: every element within 2u (u = 2^-8) with a slack of
/// 1.5, and u in norm; `what` goes with each failure.
inline void expect_decoded(const std::vector<bf16>& o, const std::vector<double>& want, const std::string& what = "") {
  const double u = 1.0 / 256;
  size_t bad = 0;
  std::vector<float> got_f(o.size()), want_f(o.size());
  for (size_t i = 0; i < o.size(); ++i) {
    got_f[i] = float(o[i]), want_f[i] = float(want[i]);
    if (!(std::fabs(double(got_f[i]) - want[i]) <= 1.5 * 2 * u) && bad++ < 5)
      ADD_FAILURE() << "o[" << i << "] = " << got_f[i] << ", want " << want[i] << what;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_LE(ref::rel_error(got_f, want_f), u) << "in norm" << what;
}

struct Slice {
  std::vector<bf16> k, v;
  std::vector<float> kf, vf;
  std::vector<int32_t> lens;
};
/// Rank r's slice at call `call`: [batch, max_kv, kv_heads, D], random lengths in [0, max_kv]
/// (rank 1's first sequence empty).
inline Slice slice_of(int r, int call, int batch, int max_kv, int kv_heads, int D) {
  Slice s;
  const size_t n = size_t(batch) * max_kv * kv_heads * D;
  s.kf = ref::random_values<float>(uint64_t(r * 7919 + call * 31), n);
  s.vf = ref::random_values<float>(uint64_t(r * 7919 + call * 31 + 1), n);
  s.k.resize(n), s.v.resize(n);
  for (size_t i = 0; i < n; ++i) s.kf[i] = float(s.k[i] = bf16(s.kf[i])), s.vf[i] = float(s.v[i] = bf16(s.vf[i]));
  for (int b = 0; b < batch; ++b) s.lens.push_back((r * 37 + b * 53 + call * 11) % (max_kv + 1));
  if (r == 1) s.lens[0] = 0;
  return s;
}

/// One run of `fd` (made for heads / kv_heads heads of D) at call `call` (every rank's slices
/// and queries drawn from the call's seeds), checked on this rank. Memory<T>::make(vector) ->
/// ptr(), get(): where the kernels' operands live (collectives_check.h's HostMemory, or device).
/// `causal`: across ranks, the slices in rank order making each sequence (rank r's keys after
/// those of the ranks before it), the step's tokens its last positions.
template <template <class> class Memory>
void check_dist_decode(int call, int batch, int q_tokens, int heads, int kv_heads, int D, int max_kv,
                       kernels::DistFlashDecode& fd, bool causal = false) {
  SCOPED_TRACE(str_cat("call ", call, ": batch ", batch, ", q_tokens ", q_tokens, ", heads ", heads, "/", kv_heads,
                       ", max_kv ", max_kv, causal ? ", causal" : ""));
  const int n = world_size(), me = rank();
  // (every rank's slices and the queries from the same seeds)
  std::vector<Slice> slices;
  for (int r = 0; r < n; ++r) slices.push_back(slice_of(r, call, batch, max_kv, kv_heads, D));
  const size_t nq = size_t(batch) * q_tokens * heads * D;
  std::vector<float> qf = ref::random_values<float>(uint64_t(1000 + call), nq);
  std::vector<bf16> q16(nq);
  for (size_t i = 0; i < nq; ++i) qf[i] = float(q16[i] = bf16(qf[i]));
  const Slice& mine = slices[size_t(me)];
  auto q = Memory<bf16>::make(q16), k = Memory<bf16>::make(mine.k), v = Memory<bf16>::make(mine.v);
  auto lens = Memory<int32_t>::make(mine.lens);
  auto out = Memory<bf16>::make(std::vector<bf16>(nq, bf16(7.0f)));
  // (causal: our slice's first position in each sequence, and the sequence's length)
  std::vector<int32_t> starts(size_t(batch), 0), totals(size_t(batch), 0);
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < n; ++r) {
      if (r < me) starts[size_t(b)] += slices[size_t(r)].lens[size_t(b)];
      totals[size_t(b)] += slices[size_t(r)].lens[size_t(b)];
    }
  auto kv_starts = Memory<int32_t>::make(starts), kv_totals = Memory<int32_t>::make(totals);
  if (causal)
    fd.run(q.ptr(), k.ptr(), v.ptr(), lens.ptr(), kv_starts.ptr(), kv_totals.ptr(), out.ptr(), batch, q_tokens, max_kv);
  else
    fd.run(q.ptr(), k.ptr(), v.ptr(), lens.ptr(), out.ptr(), batch, q_tokens, max_kv);
  const std::vector<bf16> o = out.get();
  std::vector<ref::KvSlice> kv;
  for (const Slice& s : slices) kv.push_back({s.kf.data(), s.vf.data(), s.lens.data(), max_kv});
  const std::vector<double> want =
      ref::decode_attention(qf, kv, batch, q_tokens, heads, kv_heads, D, causal, 1.0 / std::sqrt(double(D)));
  expect_decoded(o, want);
}

}  // namespace tiledist::testing_decode
