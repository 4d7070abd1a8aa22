#include "runtime/host.h"

#include <cstdlib>
#include <limits>
#include <memory>

#include "runtime/fiber.h"
#include "runtime/profiler.h"
#include "runtime/world.h"
#include "support/profile_abi.h"
#include "support/support.h"

namespace tiledist::runtime {

Grid::Grid(int64_t gx, int64_t gy, int64_t gz) {
  for (int64_t v : {gx, gy, gz})
    if (v < 1 || v > std::numeric_limits<int32_t>::max())
      throw Error(str_cat("tiledist: grid dimension ", v, " is out of range (1 to 2^31-1)"));
  x = static_cast<int32_t>(gx);
  y = static_cast<int32_t>(gy);
  z = static_cast<int32_t>(gz);
}

void launch_host(HostKernelFn fn, const Grid& grid, void** args, int64_t scratch_bytes, HostRuntime& rt,
                 const HostLaunch& how) {
  rt.grid[0] = grid.x, rt.grid[1] = grid.y, rt.grid[2] = grid.z;
  if (how.distributed) {
    rt.world = &World::get();
    if (rt.world->hosts() > 1)
      throw Error(str_cat("tiledist: kernel '", rt.kernel,
                          "' uses distributed ops on the CPU backend, whose ranks "
                          "share one host's memory, and this job's ranks are on ",
                          rt.world->hosts(), " hosts"));
    rt.grid_size = grid.size();
    rt.barrier_base = rt.world->control().device_barrier[rt.world->rank()].load();
    FiberScheduler(fn, grid, args, scratch_bytes, &rt).run();
    if (rt.violated) throw Error(rt.message);
    return;
  }
  size_t bytes = static_cast<size_t>((scratch_bytes + 63) / 64 * 64 + 64);
  std::unique_ptr<char, decltype(&std::free)> scratch(static_cast<char*>(std::aligned_alloc(64, bytes)), &std::free);
  if (!scratch) throw Error(str_cat("tiledist: cannot allocate ", bytes, " bytes of scratch memory"));
  const int32_t nprog[3] = {grid.x, grid.y, grid.z};
  int32_t pid[3];
  for (pid[2] = 0; pid[2] < grid.z; ++pid[2])
    for (pid[1] = 0; pid[1] < grid.y; ++pid[1])
      for (pid[0] = 0; pid[0] < grid.x; ++pid[0]) {
        if (how.check_bounds || rt.profile) {
          for (int i = 0; i < 3; ++i) rt.pid[i] = pid[i];
        }
        fn(args, pid, nprog, scratch.get(), &rt);
        if (rt.violated) throw Error(rt.message);
      }
}

}  // namespace tiledist::runtime

extern "C" int32_t tiledist_check_access(void* rt_ptr, const void* addr, int64_t bytes, int32_t is_store) {
  using tiledist::runtime::HostRuntime;
  auto* rt = static_cast<HostRuntime*>(rt_ptr);
  const char* a = static_cast<const char*>(addr);
  for (auto& r : rt->ranges)
    if (a >= r.lo && a + bytes <= r.hi) return 1;
  if (rt->violated) return 0;
  // Name the argument the address is nearest to, and the element offset from its start.
  const tiledist::runtime::CheckedRange* near = nullptr;
  long long best = 0;
  for (auto& r : rt->ranges) {
    long long d = a >= r.lo ? (a - r.hi) : (r.lo - a);
    if (!near || d < best) {
      near = &r;
      best = d;
    }
  }
  rt->violated = true;
  std::string where = "no pointer argument";
  if (near) {
    long long off = (a - near->lo) / near->elem_bytes;
    where = tiledist::str_cat("element offset ", off, " of argument '", near->name, "' (",
                              (near->hi - near->lo) / near->elem_bytes, " elements)");
  }
  rt->message = tiledist::str_cat("tiledist: out-of-bounds ", is_store ? "store" : "load", " in kernel '", rt->kernel,
                                  "', program (", rt->pid[0], ", ", rt->pid[1], ", ", rt->pid[2], "): ", where);
  return 0;
}

extern "C" void tiledist_profile(void* rt_ptr, int32_t region, int32_t phase, int32_t nargs, int32_t a0, int32_t a1) {
  using namespace tiledist::runtime;
  auto* rt = static_cast<HostRuntime*>(rt_ptr);
  ProfileBuffer* buf = rt->profile;
  if (!buf) return;
  // (the programs of a host launch run on one thread, fibers included: no atomics needed)
  const int64_t programs = int64_t(rt->grid[0]) * rt->grid[1] * rt->grid[2];
  const int64_t program = rt->pid[0] + int64_t(rt->grid[0]) * (rt->pid[1] + int64_t(rt->grid[1]) * rt->pid[2]);
  const uint32_t share = profile_share(buf->capacity, programs, 1);
  if (rt->profile_marks.size() != static_cast<size_t>(programs)) rt->profile_marks.assign(programs, 0);
  const uint32_t i = rt->profile_marks[program]++;
  if (i >= share) {
    ++buf->dropped;
    return;
  }
  ProfileRecord& r = buf->records()[uint64_t(program) * share + i];
  r.time = steady_ns();
  r.program =
      static_cast<uint32_t>(rt->pid[0] + int64_t(rt->grid[0]) * (rt->pid[1] + int64_t(rt->grid[1]) * rt->pid[2]));
  r.unit = 0;
  r.region = static_cast<uint8_t>(region);
  r.phase = static_cast<uint8_t>(phase);
  r.nargs = static_cast<uint8_t>(nargs);
  r.args[0] = a0, r.args[1] = a1;
  r.warpgroup = 0;
}
