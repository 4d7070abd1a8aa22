// The README's one-shot all-gather kernel, in a header of its own: the example's program
// (all_gather.cpp) and tiledist's `make demo` (tools/tiledist_dist_demo.cpp) both launch it.
#pragma once

#include "tiledist.h"

namespace tiledist {

// readme:begin all_gather
// One-shot all-gather: program p sends our chunk to rank p, then we wait for every chunk.
inline void all_gather(tl::Ptr<float> buf, tl::Ptr<int32_t> flags, tl::Int chunk) {
  auto me = dist::rank();
  auto mine = buf + (me * chunk).to(tl::int64);
  shmem::putmem_signal_nbi_block(mine, mine, chunk.to(tl::int64) * 4, flags + me, 1, shmem::SIGNAL_SET,
                                 tl::program_id(0));
  dist::wait(flags, dist::num_ranks());
}
// readme:end

}  // namespace tiledist
