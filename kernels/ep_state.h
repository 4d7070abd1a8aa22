// EpDispatch's state, shared with the EpCombine made from it (kernels/ep_dispatch.cpp says how
// a run goes).
#pragma once

#include <vector>

#include "kernels/ep.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace detail {
/// The last program of the kernel to get here (a counter of programs done, zeroed again by the
/// last) sets flags[rank] = call on every rank, then waits until every rank's has reached it.
inline void signal_and_wait_all(tl::Ptr<int32_t> sent, tl::Ptr<int32_t> flags, tl::Int call) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto done = tl::atomic_add(sent, 1, {}, {"acq_rel", "sys"});  // (after this program's stores, to peers too)
  tl::if_then(done == tl::num_programs(0) - 1, [&] {
    tl::atomic_xchg(sent, 0, {}, {"relaxed", "gpu"});
    tl::for_range(0, n, 1, [&](tl::Tensor i) { dist::notify(flags + me, (me + 1 + i) % n, call); });
    tl::for_range(0, n, 1, [&](tl::Tensor r) { shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call); });
  });
}

}  // namespace detail

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
