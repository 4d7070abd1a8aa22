// The SHMEM-like world on GPUs: one process per GPU (started by tiledist-run or mpirun, and
// bootstrapped by the host World), each owning a symmetric heap in its GPU's memory. The heaps
// are CUDA VMM allocations exported as file descriptors, passed to every peer over Unix
// sockets, and mapped by every process, so that a kernel reaches a peer's heap (over NVLink)
// at the peer's base as mapped here plus the symmetric offset. Kernels with distributed ops
// get a runtime::DeviceWorld describing this (support/device_world.h).
//
// $TILEDIST_GPU_HEAP_SIZE sets the heap size (default 1G); $TILEDIST_WAIT_TIMEOUT bounds a
// kernel's waits as it bounds the host's. $TILEDIST_WORLD=nvshmem takes the heaps from NVSHMEM
// instead (issue 31: kernels compiled for it copy to peers by NVSHMEM's calls; their other
// distributed ops still address the peers' heaps as mapped here).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/gpu_world.h"

namespace tiledist::cuda {

class World : public runtime::GpuWorld {
 public:
  /// The process's GPU world, set up on first use (collective: every rank must call it). A
  /// failure is reported by the first CUDA call after it (cuda::set_failure_explainer): the
  /// launch of a distributed kernel without a stream, or the synchronize of the stream it was
  /// launched on.
  static World& get();

 private:
  World();
  void bootstrap();
  /// $TILEDIST_WORLD=nvshmem (runtime/cuda_world_nvshmem.cpp): the heaps are one nvshmem_align
  /// of NVSHMEM's symmetric heap, bootstrapped by a unique id passed through the host world;
  /// each peer's as mapped here by nvshmem_ptr (peers on this host).
  void bootstrap_nvshmem();

  char* base_ = nullptr;  // rank r's heap is at base_ + r * heap_size_
  std::vector<uint64_t> handles_;
};

/// A symmetric GPU buffer of `count` elements of T: allocated collectively in every rank's heap,
/// freed (collectively) with the object. Launch arguments take it as device memory.
template <class T>
class SymmBuffer : public DeviceArray<T> {
 public:
  explicit SymmBuffer(size_t count) : DeviceArray<T>(count, World::get().alloc(count * sizeof(T))) {}
  ~SymmBuffer() { World::get().free(this->ptr_); }
  /// This buffer on `rank`, as mapped here.
  T* at(int rank) const { return static_cast<T*>(World::get().at(this->ptr_, rank)); }
};

}  // namespace tiledist::cuda
