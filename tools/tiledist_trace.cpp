// tiledist-trace: what to make of the profiler's traces (one file per rank, runtime/profiler.h).
//   merge OUT.json IN.json...   every rank's events in one file, for Perfetto or chrome://tracing
//   summary IN.json...          a table per region: count, times, each rank's share and skew
//   svg OUT.svg IN.json...      a timeline picture, a row per (rank, track)
// `--kernel NAME` (summary, svg): only the last launch of kernel NAME on each rank.
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "jit/trace.h"
#include "support/support.h"

namespace {
using namespace tiledist;

constexpr const char* kUsage =
    "usage: tiledist-trace merge OUT.json IN.json...   every rank's trace in one file\n"
    "       tiledist-trace summary IN.json...          a table per region, over every rank\n"
    "       tiledist-trace svg OUT.svg IN.json...      a timeline picture\n"
    "  --kernel NAME (summary, svg): only the last launch of kernel NAME on each rank\n";

int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "tiledist-trace: %s\n", msg);
  std::fputs(kUsage, stderr);
  return 2;
}

// The traces of `paths` as one: their spans, launches and tracks together.
trace::Trace read_all(const std::vector<std::string>& paths) {
  trace::Trace all;
  for (const std::string& path : paths) {
    trace::Trace t = trace::read(path);
    all.spans.insert(all.spans.end(), t.spans.begin(), t.spans.end());
    all.launches.insert(all.launches.end(), t.launches.begin(), t.launches.end());
    all.instants += t.instants;
    all.track_names.insert(t.track_names.begin(), t.track_names.end());
    all.raw_events.insert(all.raw_events.end(), t.raw_events.begin(), t.raw_events.end());
  }
  return all;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw Error(str_cat("tiledist-trace: cannot write ", path));
}

int run(std::vector<std::string> args) {
  std::string kernel;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--kernel") {
      kernel = args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      break;
    }
  auto read = [&](size_t first) {
    trace::Trace t = read_all({args.begin() + static_cast<std::ptrdiff_t>(first), args.end()});
    return kernel.empty() ? t : trace::last_launch_of(t, kernel);
  };
  const std::string& command = args[0];
  if (command == "merge") {
    if (args.size() < 3) return usage("merge takes OUT.json and at least one IN.json");
    trace::merge({args.begin() + 2, args.end()}, args[1]);
    return 0;
  }
  if (command == "summary") {
    if (args.size() < 2) return usage("summary takes at least one IN.json");
    std::fputs(trace::summary_text(read(1)).c_str(), stdout);
    return 0;
  }
  if (command == "svg") {
    if (args.size() < 3) return usage("svg takes OUT.svg and at least one IN.json");
    write_file(args[1], trace::svg(read(2)));
    return 0;
  }
  return usage(str_cat("unknown command '", command, "'").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage(nullptr);
  if (args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
