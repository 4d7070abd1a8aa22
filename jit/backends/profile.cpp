#include "jit/backends/profile.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "ir/profile.h"

namespace tiledist::jit {

namespace {
/// The records the next launch of each kernel (its key) over each grid size gets, where a launch
/// dropped some: twice the last one's (a persistent kernel's programs mark once per tile, more
/// than a grid's default allows).
std::mutex needed_mutex;
std::map<std::pair<std::string, int64_t>, uint32_t> needed_records;
}  // namespace

uint32_t LaunchProfile::needed(const Loaded& loaded, const runtime::Grid& grid) {
  if (std::getenv("TILEDIST_PROFILE_RECORDS")) return 0;  // (the user's size, as it is)
  std::lock_guard<std::mutex> lock(needed_mutex);
  auto it = needed_records.find({loaded.artifact.key, grid.size()});
  return it == needed_records.end() ? 0 : it->second;
}

LaunchProfile::LaunchProfile(const Loaded& loaded, const runtime::Grid& grid) : loaded_(loaded), grid_(grid) {
  if (loaded.options.profile.empty() || !loaded.ir) return;
  regions_ = ir::profile_regions(*loaded.ir);
  if (regions_.empty()) return;
  const uint32_t capacity = std::max(runtime::profile_capacity(grid.size()), needed(loaded, grid));
  storage_.assign((sizeof(runtime::ProfileBuffer) + size_t(capacity) * sizeof(runtime::ProfileRecord)) / 8, 0);
  buffer()->capacity = capacity;
  launched_at_ = runtime::steady_ns();
}

GpuClock map_gpu_clock(const runtime::ProfileBuffer& buffer, uint64_t started_ns, uint64_t completed_ns) {
  static std::mutex mutex;
  static bool known = false;
  static int64_t lo = 0, hi = 0;  // the offset's bounds so far
  uint64_t first = UINT64_MAX, last = 0;
  for (uint32_t i = 0; i < buffer.capacity; ++i)
    if (const uint64_t t = buffer.records()[i].time) first = std::min(first, t), last = std::max(last, t);
  std::lock_guard<std::mutex> lock(mutex);
  if (last > 0) {
    const int64_t l = int64_t(started_ns) - int64_t(first), h = int64_t(completed_ns) - int64_t(last);
    if (!known || std::max(lo, l) > std::min(hi, h))
      lo = l, hi = h, known = true;
    else
      lo = std::max(lo, l), hi = std::min(hi, h);
  }
  if (!known) return {};
  return {lo + (hi - lo) / 2, (std::abs(hi - lo) + 1) / 2};
}

runtime::TraceCounts LaunchProfile::write(bool gpu, int64_t clock_offset_ns, int64_t clock_error_ns,
                                          int64_t kernel_ns) const {
  if (!on()) return {};
  const auto* buf = reinterpret_cast<const runtime::ProfileBuffer*>(storage_.data());
  if (buf->dropped > 0) {  // (a share was too small: twice the buffer next time)
    std::lock_guard<std::mutex> lock(needed_mutex);
    uint32_t& n = needed_records[{loaded_.artifact.key, grid_.size()}];
    n = std::max(n, static_cast<uint32_t>(std::min<uint64_t>(uint64_t(buf->capacity) * 2, 1u << 26)));
  }
  runtime::ProfiledLaunch l;
  l.kernel = loaded_.artifact.kernel;
  l.regions = regions_;
  l.grid = grid_;
  l.buffer = reinterpret_cast<const runtime::ProfileBuffer*>(storage_.data());
  l.launched_at = launched_at_;
  l.gpu = gpu;
  l.clock_offset_ns = clock_offset_ns;
  l.clock_error_ns = clock_error_ns;
  l.kernel_ns = kernel_ns;
  return runtime::add_to_trace(loaded_.options.profile, l);
}

}  // namespace tiledist::jit
