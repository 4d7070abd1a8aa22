// The profiler's side of a launch (dsl/profile.h, runtime/profiler.h): a kernel compiled with
// profiling gets a record buffer sized for its grid, and after the launch its records go to the
// rank's trace in CompileOptions::profile's directory. Kernels compiled without it: nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/context.h"
#include "runtime/profiler.h"

namespace tiledist::jit {

/// How a GPU's clock maps onto the host's: host = gpu + offset_ns, give or take error_ns.
struct GpuClock {
  int64_t offset_ns = 0, error_ns = 0;
};
/// The mapping this process knows after a launch that started after `started_ns` and was seen
/// complete at `completed_ns` (host clock) made the records of `buffer`: every record lies
/// between the two, which bounds the offset; the bounds of every launch so far are intersected
/// (a tighter one each launch; started afresh where they no longer meet: the clocks drifted).
GpuClock map_gpu_clock(const runtime::ProfileBuffer& buffer, uint64_t started_ns, uint64_t completed_ns);

/// A launch's record buffer in host memory, zeroed: sized by runtime::profile_capacity, or twice
/// the last where the kernel's last launch over a grid of this size dropped records.
class LaunchProfile {
 public:
  LaunchProfile(const Loaded& loaded, const runtime::Grid& grid);
  bool on() const { return !storage_.empty(); }
  /// The buffer in host memory (a GPU launch copies it in and back), or null when off.
  runtime::ProfileBuffer* buffer() {
    return on() ? reinterpret_cast<runtime::ProfileBuffer*>(storage_.data()) : nullptr;
  }
  size_t bytes() const { return storage_.size() * sizeof(uint64_t); }
  /// Adds the records to the rank's trace: a GPU's times moved onto the host's clock by
  /// `clock_offset_ns`, which may be off by `clock_error_ns`.
  /// `kernel_ns`: the kernel's time by events (GPU), or -1.
  runtime::TraceCounts write(bool gpu, int64_t clock_offset_ns = 0, int64_t clock_error_ns = 0,
                             int64_t kernel_ns = -1) const;

 private:
  /// What the last launch of the kernel over a grid of this size needed (0: none yet).
  static uint32_t needed(const Loaded& loaded, const runtime::Grid& grid);

  const Loaded& loaded_;
  runtime::Grid grid_;
  std::vector<std::string> regions_;
  std::vector<uint64_t> storage_;  // (8-byte aligned: the header, then the records)
  uint64_t launched_at_ = 0;
};

}  // namespace tiledist::jit
