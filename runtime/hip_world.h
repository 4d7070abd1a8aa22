// The SHMEM-like world on AMD GPUs: one process per GPU, each owning a symmetric heap of device
// memory (hipExtMallocWithFlags) whose IPC handle it publishes through the host world's heap; every rank
// opens every peer's handle (peer access over Infinity Fabric), so that a kernel reaches a
// peer's heap at that peer's base as mapped here plus the symmetric offset.
//
// The heap is fine-grained memory (coherent while kernels run: peers write signals into it). The
// bootstrap makes one collective allocation in the host world's heap, at the first distributed
// launch on an AMD GPU: every rank must reach that launch at the same point of its own host
// symmetric allocations (as for any collective). A bootstrap that fails tells the peers
// (report_failure) and is not tried again.
//
// Written against HIP's API and compiled here; it has not run on an AMD GPU.
#pragma once

#include "runtime/gpu_world.h"
#include "runtime/hip.h"

namespace tiledist::hip {

class World : public runtime::GpuWorld {
 public:
  /// The process's AMD GPU world, set up on first use (collective: every rank must call it).
  static World& get();

 private:
  World() = default;
  void bootstrap();
};

}  // namespace tiledist::hip
