// What the GPU worlds of every vendor share (cuda::World, hip::World): one process per GPU,
// each owning a symmetric heap in its GPU's memory that every peer has mapped; symmetric
// allocation by offsets agreed by all ranks; the DeviceWorld that kernels with distributed ops
// read (support/device_world.h); and the failure record a kernel that gives up fills, told
// back as a message naming the kernel, rank and signal. A backend's bootstrap makes and maps
// the heaps (bases_), then calls finish_bootstrap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/world.h"
#include "support/device_world.h"
#include "support/support.h"

namespace tiledist::runtime {

class GpuWorld {
 public:
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
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const char*>(p) - bases_[rank_]); }

  /// Whether `rank` uses the same GPU as this rank (several ranks may share one: processes
  /// whose contexts take turns on it). Protocols that need a copy to run while a kernel of
  /// theirs waits for it ask this (kernels/symmetric.h: peers_share_gpu): a copy within one GPU
  /// runs on its SMs, not on a copy engine.
  bool shares_gpu(int rank) const { return gpus_[rank] == gpus_[rank_]; }
  /// Whether any two ranks of the world share a GPU.
  bool gpus_shared() const { return shared_; }

  /// The DeviceWorld in device memory (the trailing parameter of kernels with distributed ops).
  void* device_world() const { return device_world_; }
  /// What the failure record says: an empty string while no kernel has failed.
  std::string failure() const;
  /// Names the kernels that failure() can report (distributed kernels, before their launch).
  void note_kernel(const std::string& name);

 protected:
  /// The device memory functions of a backend.
  struct Device {
    void* (*malloc)(size_t);
    void (*copy_to_device)(void*, const void*, size_t);
    void (*memset)(void*, int, size_t);
    void (*synchronize)();
    void* (*host_mapped_alloc)(size_t, void**);
    uint64_t gpu;  // this rank's GPU: the same number on every process that uses it
  };

  GpuWorld() = default;
  ~GpuWorld() = default;
  /// The process's world, made by `make()` on the first call. A bootstrap that throws tells the
  /// peers (their waits end, naming it) and is not tried again (its collectives would no longer
  /// match the peers'): every later call throws its error.
  template <class W, class Make>
  static W& once(Make make) {
    static std::string error;
    static W* world = [&]() -> W* {
      try {
        return make();
      } catch (const Error& e) {
        error = e.what();
        runtime::World::get().report_failure(error);
        return nullptr;
      }
    }();
    if (!world) throw Error(error);
    return *world;
  }
  /// rank_, size_, the wait timeout from the host world, and the heap size (a multiple of
  /// `granularity`) from $TILEDIST_GPU_HEAP_SIZE; throws Error past kMaxDeviceRanks.
  void start_bootstrap(const runtime::World& host, size_t granularity);
  /// With every heap mapped (bases_): the runtime's reserved words zeroed, every rank past that,
  /// the failure record and the DeviceWorld made.
  void finish_bootstrap(runtime::World& host, const Device& device);

  int rank_ = 0, size_ = 1;
  size_t heap_size_ = 0;
  std::vector<char*> bases_;    // each rank's heap, as mapped here
  std::vector<uint64_t> gpus_;  // each rank's Device::gpu
  bool shared_ = false;

 private:
  runtime::HeapOffsets offsets_;
  void* device_world_ = nullptr;
  runtime::DeviceFailureRecord* failure_ = nullptr;  // host-mapped
  double timeout_s_ = 120;
  mutable std::mutex kernels_mutex_;
  std::unordered_map<uint32_t, std::string> kernels_;  // by runtime::kernel_tag
};

}  // namespace tiledist::runtime
