// EpDispatch's state, shared with the EpCombine made from it (kernels/ep_dispatch.cpp says how
// a run goes).
#pragma once

#include <vector>

#include "kernels/device_sync.h"
#include "kernels/ep.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

struct EpDispatch::State {
  Target target;
  int rank = 0, ranks = 1, topk = 1;
  int64_t max_tokens = 0, H = 0, E = 0, El = 0, capacity = 0, max_pairs = 0;
  int64_t tokens = 0, rows = 0;  // the last run's: our tokens, the rows we received
  int32_t calls = 0;
  bool done = false;                // the last run went through (a run that threw leaves nothing to combine)
  bf16* recv = nullptr;             // symmetric [capacity, H]
  int32_t* recv_src = nullptr;      // symmetric [capacity]: rank * max_pairs + slot
  int32_t* matrix = nullptr;        // symmetric [2, ranks, E]: each rank's per-expert counts, a half a call
  int32_t* flags = nullptr;         // symmetric [2, ranks]: the last call whose counts / rows from rank r are here
  detail::Scratch<int32_t> counts;  // [E]: our slots per expert (moe_count's; ep_exchange zeroes it)
  detail::Scratch<int32_t> place;   // [max_pairs]: each slot's place among ours of its expert (-1: dropped)
  detail::Scratch<int32_t> bases;   // [E]: the row of our first slot of expert e on its rank
  detail::Scratch<int32_t> offs;    // [El]: our experts' cumulative end rows in recv
  detail::Scratch<int32_t> sent;    // [1]: ep_dispatch's programs done (zeroed by the last)
  std::vector<int32_t> host_matrix, host_bases, host_offs;
  std::vector<int64_t> recv_counts;
  Kernel count, exchange, dispatch;
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  ~State() {
    streams.finish();
    for (void* p : {static_cast<void*>(flags), static_cast<void*>(matrix), static_cast<void*>(recv_src),
                    static_cast<void*>(recv)})
      if (p) detail::symm_release(target, p);
  }
};

}  // namespace tiledist::kernels
