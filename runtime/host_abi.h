// The calling convention between kernels compiled for the host CPU and the host launcher.
//
//   void kernel(void** args, const int32_t* pid, const int32_t* num_programs,
//               char* scratch, HostRuntime* rt);
//
// args[i] points at the value of runtime parameter i (a pointer or a scalar); pid and
// num_programs hold three axes; scratch is private memory for the program instance's block
// tensors; rt is only used by bounds-checked builds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tiledist::runtime {

using HostKernelFn = void (*)(void** args, const int32_t* pid, const int32_t* num_programs, char* scratch, void* rt);

/// A memory range that a bounds-checked kernel may touch: one pointer argument.
struct CheckedRange {
  const char* lo;
  const char* hi;
  std::string name;  // the parameter's name
  int elem_bytes;
};

class World;
class FiberScheduler;
struct ProfileBuffer;

/// What a launch's helpers need: bounds-check ranges (the first violation is recorded and the
/// access skipped), and for kernels with distributed ops the world and the fiber scheduler.
struct HostRuntime {
  std::string kernel;
  std::vector<CheckedRange> ranges;
  int32_t pid[3] = {0, 0, 0};  // the program instance running now
  bool violated = false;
  std::string message;
  World* world = nullptr;
  FiberScheduler* fibers = nullptr;
  // Device barriers of this launch: barrier k completes when every program of the grid on
  // every rank has arrived at its k-th barrier.
  int64_t grid_size = 1;
  int64_t barrier_base = 0;               // this rank's barrier count before the launch
  std::vector<int64_t> barrier_arrivals;  // local programs arrived at barrier k
  // A profiled kernel's records (support/profile_abi.h), and the grid that numbers its programs.
  ProfileBuffer* profile = nullptr;
  int32_t grid[3] = {1, 1, 1};
  std::vector<uint32_t> profile_marks;  // each program's marks so far (its share's next record)
};

}  // namespace tiledist::runtime

extern "C" {
/// Called by bounds-checked kernels before each access; returns 1 when [addr, addr+bytes) lies
/// inside one argument's buffer, otherwise records the violation and returns 0.
int32_t tiledist_check_access(void* rt, const void* addr, int64_t bytes, int32_t is_store);

// Distributed ops of host kernels (runtime/device.cpp). A helper that fails ends the program
// instance that called it, and the launch reports the error.
int32_t tiledist_rank(void* rt);
int32_t tiledist_num_ranks(void* rt);
void* tiledist_symm_at(void* rt, void* ptr, int64_t rank);
/// Waits until each of `n` words (elem_bytes each) from `ptr` compares to `value` as `cmp` says
/// (0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge); returns the last word's value.
int64_t tiledist_wait(void* rt, void* ptr, int32_t elem_bytes, int32_t n, int32_t cmp, int64_t value, int32_t acquire);
void tiledist_barrier(void* rt);
void tiledist_memcpy(void* rt, void* dst, const void* src, int64_t bytes);

/// A profiler mark of the running program (runtime/host.cpp): region index, ir::ProfilePhase,
/// and `nargs` of the arguments a0, a1, at the host's steady clock.
void tiledist_profile(void* rt, int32_t region, int32_t phase, int32_t nargs, int32_t a0, int32_t a1);
}
