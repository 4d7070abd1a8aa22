#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "support/support.h"

namespace tiledist::runtime {

namespace {

constexpr const char* kTail = "\n]}\n";  // what ends the file after every launch

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      out += str_cat("\\u00", "0123456789abcdef"[(c >> 4) & 15], "0123456789abcdef"[c & 15]);
    else
      out += c;
  }
  return out + "\"";
}

/// Nanoseconds (of the steady clock: never negative) as the trace's microseconds, to the
/// nanosecond.
std::string micros(int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  return buf;
}

/// One program's marks of one warpgroup, in the order they were made.
struct Lane {
  uint32_t program;
  uint16_t unit;
  uint8_t warpgroup;
  std::vector<const ProfileRecord*> marks;
  uint64_t first = 0, last = 0;
};

/// What the profiler keeps of each trace file it writes in this process.
struct File {
  std::set<int64_t> named;  // tracks whose names are written
};

struct State {
  std::mutex mutex;
  std::map<std::string, File> files;  // by path
};
State& state() {
  static State* s = new State();  // (never destroyed: launches in static destructors may still profile)
  return *s;
}

std::string program_coords(const Grid& g, uint32_t p) {
  return str_cat("[", p % g.x, ",", p / g.x % g.y, ",", p / (uint64_t(g.x) * g.y), "]");
}

/// The launch's events, appended to `out` (each with a leading ",\n" but the file's first).
class LaunchEvents {
 public:
  LaunchEvents(const ProfiledLaunch& l, int rank, File& file, std::string& out)
      : l_(l), rank_(rank), file_(file), out_(out) {}

  TraceCounts run() {
    const ProfileBuffer& buf = *l_.buffer;
    TraceCounts counts;
    counts.dropped = buf.dropped;
    // Each program's (and warpgroup's) marks, in order of time (one program marks in order).
    std::map<std::pair<uint32_t, uint8_t>, Lane> lanes;
    for (uint32_t i = 0; i < buf.capacity; ++i) {
      const ProfileRecord& r = buf.records()[i];
      if (r.time == 0) continue;  // (not written)
      ++counts.records;
      Lane& lane = lanes[{r.program, r.warpgroup}];
      if (lane.marks.empty()) lane.program = r.program, lane.unit = r.unit, lane.warpgroup = r.warpgroup;
      lane.marks.push_back(&r);
    }
    for (auto& [key, lane] : lanes) {
      std::stable_sort(lane.marks.begin(), lane.marks.end(),
                       [](const ProfileRecord* a, const ProfileRecord* b) { return a->time < b->time; });
      lane.first = lane.marks.front()->time, lane.last = lane.marks.back()->time;
    }
    const std::map<const Lane*, int64_t> tracks = assign_tracks(lanes);
    event(str_cat(R"({"name":)", quoted("launch " + l_.kernel), R"(,"ph":"i","s":"p","pid":)", rank_,
                  R"(,"tid":0,"ts":)", micros(int64_t(l_.launched_at)), R"(,"args":{"grid":[)", l_.grid.x, ",",
                  l_.grid.y, ",", l_.grid.z, R"(],"records":)", counts.records, R"(,"dropped":)", counts.dropped,
                  R"(,"clock_error_ns":)", l_.clock_error_ns,
                  l_.kernel_ns >= 0 ? str_cat(R"(,"kernel_ns":)", l_.kernel_ns) : "", "}}"));
    for (auto& [key, lane] : lanes) spans(lane, tracks.at(&lane));
    return counts;
  }

 private:
  /// CPU: a track per program. GPU: per SM, the programs it ran at once each on a track of
  /// their own (the lowest free one), and each warpgroup of a program apart.
  std::map<const Lane*, int64_t> assign_tracks(const std::map<std::pair<uint32_t, uint8_t>, Lane>& lanes) {
    std::map<const Lane*, int64_t> tracks;
    if (!l_.gpu) {
      for (auto& [key, lane] : lanes) {
        const int64_t tid = int64_t(lane.program) * 4 + 1 + std::min<int>(lane.warpgroup, 3);
        tracks[&lane] = tid;
        name_track(tid, str_cat("program ", program_coords(l_.grid, lane.program)));
      }
      return tracks;
    }
    std::vector<const Lane*> order;
    order.reserve(lanes.size());
    for (auto& [key, lane] : lanes) order.push_back(&lane);
    std::stable_sort(order.begin(), order.end(), [](const Lane* a, const Lane* b) {
      return a->unit != b->unit ? a->unit < b->unit : a->first < b->first;
    });
    constexpr int kSlots = 16;                                                 // programs of one SM at once, at most
    std::map<std::pair<uint16_t, uint8_t>, std::vector<uint64_t>> busy_until;  // (SM, warpgroup) -> per slot
    for (const Lane* lane : order) {
      auto& slots = busy_until[{lane->unit, lane->warpgroup}];
      size_t slot = 0;
      while (slot < slots.size() && slots[slot] > lane->first) ++slot;
      if (slot == kSlots) slot = kSlots - 1;  // (more at once than slots: they share the last)
      if (slot == slots.size()) slots.push_back(0);
      slots[slot] = std::max(slots[slot], lane->last);
      const int wg = std::min<int>(lane->warpgroup, 3);
      const int64_t tid = 1 + (int64_t(lane->unit) * kSlots + int64_t(slot)) * 4 + wg;
      tracks[lane] = tid;
      name_track(tid, str_cat("SM ", lane->unit, slot ? str_cat(".", slot) : "",
                              lane->warpgroup ? str_cat(" warpgroup ", int(lane->warpgroup)) : ""));
    }
    return tracks;
  }

  void name_track(int64_t tid, const std::string& name) {
    if (!file_.named.insert(tid).second) return;
    event(str_cat(R"({"name":"thread_name","ph":"M","pid":)", rank_, R"(,"tid":)", tid, R"(,"args":{"name":)",
                  quoted(name), "}}"));
    event(str_cat(R"({"name":"thread_sort_index","ph":"M","pid":)", rank_, R"(,"tid":)", tid,
                  R"(,"args":{"sort_index":)", tid, "}}"));
  }

  std::string args_of(const Lane& lane, const ProfileRecord& r) const {
    std::string a =
        str_cat(R"({"kernel":)", quoted(l_.kernel), R"(,"program":)", program_coords(l_.grid, lane.program));
    if (l_.gpu) a += str_cat(R"(,"sm":)", lane.unit);
    if (r.nargs > 0) a += str_cat(R"(,"coords":[)", r.args[0], r.nargs > 1 ? str_cat(",", r.args[1]) : "", "]");
    return a + "}";
  }

  /// The lane's regions as spans (begin to end) and its instants.
  void spans(const Lane& lane, int64_t tid) {
    std::vector<const ProfileRecord*> open;
    for (const ProfileRecord* r : lane.marks) {
      const std::string name = r->region < l_.regions.size() ? l_.regions[r->region] : str_cat("region ", r->region);
      const int64_t ts = int64_t(r->time) + l_.clock_offset_ns;
      if (r->phase == 2) {
        event(str_cat(R"({"name":)", quoted(name), R"(,"ph":"i","s":"t","pid":)", rank_, R"(,"tid":)", tid, R"(,"ts":)",
                      micros(ts), R"(,"args":)", args_of(lane, *r), "}"));
        continue;
      }
      if (r->phase == 0) {
        open.push_back(r);
        continue;
      }
      // An end closes the innermost open region of its name (regions nest: any inside it that
      // never ended make no span).
      auto it =
          std::find_if(open.rbegin(), open.rend(), [&](const ProfileRecord* b) { return b->region == r->region; });
      if (it == open.rend()) continue;
      const ProfileRecord* b = *it;
      open.erase(std::next(it).base(), open.end());
      event(str_cat(R"({"name":)", quoted(name), R"(,"ph":"X","pid":)", rank_, R"(,"tid":)", tid, R"(,"ts":)",
                    micros(int64_t(b->time) + l_.clock_offset_ns), R"(,"dur":)", micros(int64_t(r->time - b->time)),
                    R"(,"args":)", args_of(lane, *b), "}"));
    }
  }

  void event(const std::string& e) {
    if (!out_.empty()) out_ += ",\n";
    out_ += e;
  }

  const ProfiledLaunch& l_;
  int rank_;
  File& file_;
  std::string& out_;
};

}  // namespace

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

uint32_t profile_capacity(int64_t programs) {
  if (const char* e = std::getenv("TILEDIST_PROFILE_RECORDS"); e && *e) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(e, &end, 10);
    if (*end || n < 1 || n > (1ull << 30))
      throw Error(str_cat("tiledist: $TILEDIST_PROFILE_RECORDS = '", e, "': records per launch, 1 to 2^30"));
    return static_cast<uint32_t>(n);
  }
  return static_cast<uint32_t>(std::clamp<int64_t>(programs * 128, 4096, int64_t{1} << 22));
}

int profile_rank() {
  for (const char* name : {"TILEDIST_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

std::string trace_path(const std::string& dir, int rank) { return str_cat(dir, "/rank", rank, ".trace.json"); }

TraceCounts add_to_trace(const std::string& dir, const ProfiledLaunch& launch) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int rank = profile_rank();
  const std::string path = trace_path(dir, rank);
  auto [it, first] = s.files.try_emplace(path);
  std::string events;
  LaunchEvents make(launch, rank, it->second, events);
  if (first) {
    events = str_cat(R"({"name":"process_name","ph":"M","pid":)", rank, R"(,"tid":0,"args":{"name":"rank )", rank,
                     R"("}},)", "\n", R"({"name":"process_sort_index","ph":"M","pid":)", rank,
                     R"(,"tid":0,"args":{"sort_index":)", rank, "}}");
    it->second.named.insert(0);
  }
  const TraceCounts counts = make.run();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FILE* f = std::fopen(path.c_str(), first ? "wb" : "r+b");
  bool ok = f != nullptr;
  if (ok && first) ok = std::fputs("{\"traceEvents\":[\n", f) >= 0;
  if (ok && !first) ok = std::fseek(f, -static_cast<long>(std::char_traits<char>::length(kTail)), SEEK_END) == 0;
  if (ok && !first) ok = std::fputs(",\n", f) >= 0;
  if (ok) ok = std::fputs(events.c_str(), f) >= 0 && std::fputs(kTail, f) >= 0;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    s.files.erase(path);  // (written from the start again by the next launch)
    throw Error(str_cat("tiledist: cannot write the profiler's trace ", path, " (TILEDIST_PROFILE names ", dir, ")"));
  }
  if (counts.dropped > 0)
    std::fprintf(stderr,
                 "tiledist: profile of kernel '%s': %lld records dropped (a buffer of %u shared by its programs: "
                 "the next launch's is larger, or raise TILEDIST_PROFILE_RECORDS)\n",
                 launch.kernel.c_str(), static_cast<long long>(counts.dropped), launch.buffer->capacity);
  return counts;
}

}  // namespace tiledist::runtime
