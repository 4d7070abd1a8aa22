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

using HostKernelFn = void (*)(void** args, const int32_t* pid, const int32_t* num_programs, char* scratch,
                              void* rt);

/// A memory range that a bounds-checked kernel may touch: one pointer argument.
struct CheckedRange {
  const char* lo;
  const char* hi;
  std::string name;  // the parameter's name
  int elem_bytes;
};

/// State of a bounds-checked launch. The first violation is recorded; the access is skipped.
struct HostRuntime {
  std::string kernel;
  std::vector<CheckedRange> ranges;
  int32_t pid[3] = {0, 0, 0};
  bool violated = false;
  std::string message;
};

}  // namespace tiledist::runtime

extern "C" {
/// Called by bounds-checked kernels before each access; returns 1 when [addr, addr+bytes) lies
/// inside one argument's buffer, otherwise records the violation and returns 0.
int32_t tiledist_check_access(void* rt, const void* addr, int64_t bytes, int32_t is_store);
}
