// The argument checks that the sequence-parallel attentions' runs share (kernels/sp_attention.h).
#pragma once

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// Throws Error naming what is wrong with a run's batch, seqlen and pointers (`what`: the
/// object's name; `who`: its message prefix). True where the run has tokens to attend.
template <class T>
bool sp_run_ok(const char* who, const char* what, int rank, int64_t max_tokens, int batch, int seqlen, const T* q,
               const T* k, const T* v, const T* o) {
  if (batch < 0 || seqlen < 0)
    throw Error(str_cat(who, "batch = ", batch, ", seqlen = ", seqlen, " on rank ", rank, ": not negative"));
  if (int64_t(batch) * seqlen > max_tokens)
    throw Error(str_cat(who, "batch = ", batch, ", seqlen = ", seqlen, " on rank ", rank, ": ", int64_t(batch) * seqlen,
                        " tokens past the capacity of ", max_tokens, " this ", what, " was made for"));
  if (batch == 0 || seqlen == 0) return false;
  if (!q || !k || !v || !o)
    throw Error(str_cat(who, "a null pointer among q, k, v, o (q=", q == nullptr, ", k=", k == nullptr,
                        ", v=", v == nullptr, ", o=", o == nullptr, ")"));
  return true;
}

}  // namespace tiledist::kernels::detail
