// The SHMEM-like world on AMD GPUs: one process per GPU, each owning a symmetric heap of device
// memory (hipMalloc) whose IPC handle it publishes through the host world's heap; every rank
// opens every peer's handle (peer access over Infinity Fabric), so that a kernel reaches a
// peer's heap at that peer's base as mapped here plus the symmetric offset.
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
