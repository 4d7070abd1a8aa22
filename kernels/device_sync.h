// Synchronization of a kernel's programs with the other ranks' from inside the kernel, for the
// library's communicating kernels (written in the DSL: included by their .cpp files).
#pragma once

#include <optional>

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// The last of the kernel's `programs` programs to get here (a counter of programs done, zeroed
/// again by the last) sets flags[rank] = call on every rank, then waits until every rank's has
/// reached it. Each program's stores before it (to peers too) are released by its count
/// (acq_rel), and the last acquires them all. `programs`: the grid's (default: its x extent).
inline void signal_and_wait_all(tl::Ptr<int32_t> sent, tl::Ptr<int32_t> flags, tl::Int call,
                                std::optional<tl::Tensor> programs = std::nullopt) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto done = tl::atomic_add(sent, 1, {}, {"acq_rel", "sys"});  // (after this program's stores, to peers too)
  tl::if_then(done == (programs ? *programs : tl::num_programs(0)) - 1, [&] {
    tl::atomic_xchg(sent, 0, {}, {"relaxed", "gpu"});
    tl::for_range(0, n, 1, [&](tl::Tensor i) { dist::notify(flags + me, (me + 1 + i) % n, call); });
    tl::for_range(0, n, 1, [&](tl::Tensor r) { shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call); });
  });
}

}  // namespace tiledist::kernels::detail
