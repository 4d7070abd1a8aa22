// The CPU backend's launcher: runs every program instance of a grid on the calling thread.
#pragma once

#include <cstdint>

#include "runtime/host_abi.h"

namespace tiledist::runtime {

struct Grid {
  int32_t x = 1, y = 1, z = 1;
  Grid() = default;
  Grid(int64_t gx, int64_t gy = 1, int64_t gz = 1);
  int64_t size() const { return int64_t(x) * y * z; }
};

/// Runs `fn` once per program id in `grid`. With `rt` (a bounds-checked build) the first
/// out-of-bounds access ends the launch with an Error naming kernel, program and offset.
void launch_host(HostKernelFn fn, const Grid& grid, void** args, int64_t scratch_bytes, HostRuntime* rt);

}  // namespace tiledist::runtime
