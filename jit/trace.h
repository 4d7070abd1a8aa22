// Reading the profiler's traces (runtime/profiler.h writes them: Chrome trace-event JSON, one
// file per rank) and what tiledist-trace makes of them: one file of every rank's, a summary per
// region, a timeline picture.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tiledist::trace {

/// A region a program entered and left.
struct Span {
  int rank = 0;
  int64_t track = 0;
  std::string name, kernel;
  int64_t start_ns = 0, dur_ns = 0;  // the host's steady clock
  std::vector<int64_t> program;      // (x, y, z)
  std::vector<int64_t> coords;       // the mark's arguments, where it gave any
  int64_t end_ns() const { return start_ns + dur_ns; }
};

/// A launch's marker: what its records were.
struct Launch {
  int rank = 0;
  std::string kernel;
  int64_t at_ns = 0;
  int64_t records = 0, dropped = 0, clock_error_ns = 0;
  int64_t kernel_ns = -1;  // GPU: the kernel's time by events around it on its stream; -1 elsewhere
};

struct Trace {
  std::vector<Span> spans;
  std::vector<Launch> launches;
  int64_t instants = 0;
  std::map<std::pair<int, int64_t>, std::string> track_names;  // (rank, track) -> "SM 3", "program [0,1,0]"
  /// The file's events as read (for merge).
  std::vector<std::string> raw_events;
};

/// Reads a trace file; throws Error naming the file and what is wrong (not JSON, no
/// traceEvents, an event without its fields).
Trace read(const std::string& path);
/// The traces of `paths` (each rank's) as one file at `out`: every event of each, in order.
void merge(const std::vector<std::string>& paths, const std::string& out);

/// `t` cut to the last launch of `kernel` on each rank: its spans (those of the kernel from that
/// launch on) and its marker; the tracks kept. Throws Error where no rank launched it.
Trace last_launch_of(const Trace& t, const std::string& kernel);

/// One region's spans, over every rank, and each rank's share.
struct RegionStats {
  std::string name;
  int64_t count = 0;
  int64_t total_ns = 0, mean_ns = 0, p50_ns = 0, p99_ns = 0, max_ns = 0;
  struct PerRank {
    int64_t count = 0, total_ns = 0;
    int64_t first_start_ns = 0;  // when the rank first entered it
  };
  std::map<int, PerRank> ranks;
  /// How far apart the ranks first entered it: the latest first entry less the earliest.
  int64_t skew_ns() const;
};
/// The regions of `t`, by name, in order of their total time (the largest first).
std::vector<RegionStats> summarize(const Trace& t);
/// summarize's table as text, with each launch's dropped records where any were.
std::string summary_text(const Trace& t);

/// A timeline picture: a row per (rank, track), time left to right, spans coloured by region
/// (waits in red), a legend of the regions.
std::string svg(const Trace& t);

}  // namespace tiledist::trace
