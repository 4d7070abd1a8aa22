// The intra-kernel profiler's runtime side: sizing a launch's record buffer, and turning its
// records (support/profile_abi.h) into this rank's trace, in the Chrome trace-event JSON that
// Perfetto and chrome://tracing open: a process per rank, a track per program (CPU) or per SM
// (GPU: the programs an SM ran at once on tracks of their own, warp-specialized roles apart),
// a span per region entered and left, an instant per event, and a marker per launch saying how
// many records it had and dropped (a begin or end without its pair makes no span).
//
// Times are the host's steady clock (CLOCK_MONOTONIC), which every process of the world shares
// (it is one machine), in microseconds; a GPU's clock is mapped onto it by the launcher, which
// states how far off the mapping may be (ProfiledLaunch::clock_error_ns).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/host.h"
#include "support/profile_abi.h"

namespace tiledist::runtime {

/// A profiled launch, its records back in host memory.
struct ProfiledLaunch {
  std::string kernel;
  std::vector<std::string> regions;  // by a record's region index
  Grid grid;
  const ProfileBuffer* buffer = nullptr;
  uint64_t launched_at = 0;     // the host's steady clock at the launch (ns): its marker's time
  bool gpu = false;             // tracks per SM; else per program
  int64_t clock_offset_ns = 0;  // added to each record's time: the host's steady clock
  int64_t clock_error_ns = 0;   // how far that may be off
  int64_t kernel_ns = -1;       // the kernel's time by events around it on its stream (GPU), or -1
};

/// What add_to_trace made of a launch.
struct TraceCounts {
  int64_t records = 0;  // written by the kernel and read
  int64_t dropped = 0;  // marks past the buffer's capacity
};

/// The host's steady clock (CLOCK_MONOTONIC) in ns: the clock of the traces.
uint64_t steady_ns();

/// Records for a launch of `programs` programs: $TILEDIST_PROFILE_RECORDS where set, else 128 a
/// program (at least 4096, at most 4M).
uint32_t profile_capacity(int64_t programs);

/// This process's rank as the world will number it ($TILEDIST_RANK, $OMPI_COMM_WORLD_RANK, else
/// 0), read without bootstrapping the world.
int profile_rank();

/// The path of `rank`'s trace in `dir`: DIR/rank<R>.trace.json.
std::string trace_path(const std::string& dir, int rank);

/// Adds the launch to this rank's trace in `dir` (made where missing): the file is rewritten at
/// this process's first launch, then appended to, and is valid JSON after every launch. Dropped
/// records are also said on stderr. Throws Error naming the file where it cannot be written.
TraceCounts add_to_trace(const std::string& dir, const ProfiledLaunch& launch);

}  // namespace tiledist::runtime
