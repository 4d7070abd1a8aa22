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

/// How a host kernel is launched.
struct HostLaunch {
  bool check_bounds = false;  // rt holds the argument ranges; the first violation fails the launch
  bool distributed = false;   // the kernel uses distributed ops: programs run as fibers in the World
};

/// Runs `fn` once per program id in `grid`. A bounds violation or a failed distributed op ends
/// the launch with an Error naming the kernel, the program and what went wrong.
void launch_host(HostKernelFn fn, const Grid& grid, void** args, int64_t scratch_bytes, HostRuntime& rt,
                 const HostLaunch& how);

}  // namespace tiledist::runtime
