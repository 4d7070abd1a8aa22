// Symmetric memory for the library's communicating kernels, on the world of their target: the
// GPU world's heap for GPU targets, the host world's for the host.
#pragma once

#include <cstring>

#include "tiledist.h"

namespace tiledist::kernels::detail {

inline bool on_gpu(const Target& target) { return target.kind == Target::Kind::nvptx; }
inline int world_rank(const Target& target) { return on_gpu(target) ? cuda::World::get().rank() : rank(); }
inline int world_ranks(const Target& target) { return on_gpu(target) ? cuda::World::get().size() : world_size(); }

/// Collective: `bytes` zeroed in every rank's heap. (The caller's barrier_all() should follow
/// before any rank signals into it.)
inline void* symm_zeroed(const Target& target, size_t bytes) {
  if (!on_gpu(target)) {
    void* p = symm_alloc(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  void* p = cuda::World::get().alloc(bytes);
  cuda::memset(p, 0, bytes);
  cuda::synchronize();
  return p;
}
/// In the same order on every rank, once every call that used it has completed everywhere.
inline void symm_release(const Target& target, void* p) {
  if (on_gpu(target)) cuda::World::get().free(p);
  else symm_free(p);
}
/// Symmetric `p` on `rank`, as mapped here.
inline void* symm_on(const Target& target, const void* p, int rank) {
  return on_gpu(target) ? cuda::World::get().at(p, rank) : symm_at(p, rank);
}

}  // namespace tiledist::kernels::detail
