// The SHMEM-like world on GPUs: one process per GPU (started by tiledist-run or mpirun, and
// bootstrapped by the host World), each owning a symmetric heap in its GPU's memory. The heaps
// are CUDA VMM allocations exported as file descriptors, passed to every peer over Unix
// sockets, and mapped by every process, so that a kernel reaches a peer's heap (over NVLink)
// at the peer's base as mapped here plus the symmetric offset. Kernels with distributed ops
// get a runtime::DeviceWorld describing this (runtime/device_world.h).
//
// $TILEDIST_GPU_HEAP_SIZE sets the heap size (default 1G); $TILEDIST_WAIT_TIMEOUT bounds a
// kernel's waits as it bounds the host's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/device_world.h"
#include "runtime/world.h"

namespace tiledist::cuda {

class World {
 public:
  /// The process's GPU world, set up on first use (collective: every rank must call it).
  static World& get();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t heap_size() const { return heap_size_; }

  /// Collective: every rank asks for the same size in the same order; returns this rank's
  /// device address (the offset is the same on every rank).
  void* alloc(size_t bytes);
  /// Collective, in the same order on every rank.
  void free(void* p);
  /// The device address, as mapped in this process, of symmetric `p` on `rank`.
  void* at(const void* p, int rank) const;
  bool contains(const void* p) const;
  /// The symmetric offset of `p`, a pointer into this rank's heap.
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const char*>(p) - (base_ + rank_ * heap_size_)); }

  /// The DeviceWorld in device memory (the trailing parameter of kernels with distributed ops).
  void* device_world() const { return device_world_; }
  /// What the failure record says: an empty string while no kernel has failed. A failure is
  /// reported by the first CUDA call after it (cuda::set_failure_explainer): the launch of a
  /// distributed kernel without a stream, or the synchronize of the stream it was launched on.
  std::string failure() const;
  /// Names the kernels that failure() can report (distributed kernels, before their launch).
  void note_kernel(const std::string& name);

 private:
  World();
  void bootstrap();

  int rank_ = 0, size_ = 1;
  size_t heap_size_ = 0;
  char* base_ = nullptr;  // rank r's heap is at base_ + r * heap_size_
  std::vector<uint64_t> handles_;
  runtime::HeapOffsets offsets_;
  void* device_world_ = nullptr;
  runtime::DeviceFailureRecord* failure_ = nullptr;  // host-mapped
  double timeout_s_ = 120;
  mutable std::mutex kernels_mutex_;
  std::unordered_map<uint32_t, std::string> kernels_;  // by runtime::kernel_tag
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
