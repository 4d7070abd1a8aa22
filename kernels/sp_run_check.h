// The argument checks that the sequence-parallel attentions' runs share (kernels/sp_attention.h).
#pragma once

#include <algorithm>

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// Throws Error, led by `who`, where a sequence-parallel attention of `what` (its name) cannot be
/// made: negative capacities, a GPU target other than NVIDIA's, or capacities past the kernels'
/// 32-bit offsets (the rows over every rank's tokens; a sequence's elements on a rank).
inline void check_sp_capacity(const char* who, const char* what, const Target& target, int ranks, int heads,
                              int kv_heads, int head_dim, int64_t max_batch, int64_t max_seqlen) {
  if (max_batch < 0 || max_seqlen < 0)
    throw Error(str_cat(who, "max_batch = ", max_batch, ", max_seqlen = ", max_seqlen, ": not negative"));
  if (target.is_gpu() && !target.runs_on_cuda())
    throw Error(str_cat(who, what, " runs on the host and on NVIDIA GPUs, not yet on ", target.name()));
  if (double(ranks) * double(max_batch) * double(max_seqlen) >= INT32_MAX)  // (in double: no overflow)
    throw Error(str_cat(who, ranks, " ranks of ", max_batch, " x ", max_seqlen,
                        " tokens: the gathered rows must number under 2^31"));
  if (double(max_seqlen) * std::max(heads, kv_heads) * head_dim >= INT32_MAX)
    throw Error(str_cat(who, "max_seqlen = ", max_seqlen, " with ", std::max(heads, kv_heads), " heads of ", head_dim,
                        ": a slice's elements must number under 2^31"));
}

/// Throws Error naming what is wrong with a run's batch, seqlen and pointers (`what`: the
/// object's name; `who`: its message prefix; `row` a token's elements in its widest operand,
/// whose offsets within a sequence the kernels take in 32 bits). True where the run has tokens
/// to attend.
template <class T>
bool sp_run_ok(const char* who, const char* what, int rank, int64_t max_tokens, int64_t row, int batch, int seqlen,
               const T* q, const T* k, const T* v, const T* o) {
  if (batch < 0 || seqlen < 0)
    throw Error(str_cat(who, "batch = ", batch, ", seqlen = ", seqlen, " on rank ", rank, ": not negative"));
  if (int64_t(batch) * seqlen > max_tokens)
    throw Error(str_cat(who, "batch = ", batch, ", seqlen = ", seqlen, " on rank ", rank, ": ", int64_t(batch) * seqlen,
                        " tokens past the capacity of ", max_tokens, " this ", what, " was made for"));
  // (the capacity bounds batch * seqlen, not seqlen: a run of one long sequence may pass it)
  if (int64_t(seqlen) * row >= INT32_MAX)
    throw Error(str_cat(who, "seqlen = ", seqlen, " on rank ", rank, " of ", row,
                        " elements a token: a sequence's elements must number under 2^31"));
  if (batch == 0 || seqlen == 0) return false;
  if (!q || !k || !v || !o)
    throw Error(str_cat(who, "a null pointer among q, k, v, o (q=", q == nullptr, ", k=", k == nullptr,
                        ", v=", v == nullptr, ", o=", o == nullptr, ")"));
  return true;
}

}  // namespace tiledist::kernels::detail
