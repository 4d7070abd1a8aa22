#include "jit/backends/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "ir/profile.h"

namespace tiledist::jit {

LaunchProfile::LaunchProfile(const Loaded& loaded, const runtime::Grid& grid) : loaded_(loaded), grid_(grid) {
  if (loaded.options.profile.empty() || !loaded.ir) return;
  regions_ = ir::profile_regions(*loaded.ir);
  if (regions_.empty()) return;
  const uint32_t capacity = runtime::profile_capacity(grid.size());
  storage_.assign((sizeof(runtime::ProfileBuffer) + size_t(capacity) * sizeof(runtime::ProfileRecord)) / 8, 0);
  buffer()->capacity = capacity;
  launched_at_ = now_ns();
}

GpuClock map_gpu_clock(const runtime::ProfileBuffer& buffer, uint64_t started_ns, uint64_t completed_ns) {
  static std::mutex mutex;
  static bool known = false;
  static int64_t lo = 0, hi = 0;  // the offset's bounds so far
  const uint32_t n = std::min(buffer.count, buffer.capacity);
  std::lock_guard<std::mutex> lock(mutex);
  if (n > 0) {
    uint64_t first = UINT64_MAX, last = 0;
    for (uint32_t i = 0; i < n; ++i)
      first = std::min(first, buffer.records()[i].time), last = std::max(last, buffer.records()[i].time);
    const int64_t l = int64_t(started_ns) - int64_t(first), h = int64_t(completed_ns) - int64_t(last);
    if (!known || std::max(lo, l) > std::min(hi, h))
      lo = l, hi = h, known = true;
    else
      lo = std::max(lo, l), hi = std::min(hi, h);
  }
  if (!known) return {};
  return {lo + (hi - lo) / 2, (std::abs(hi - lo) + 1) / 2};
}

uint64_t LaunchProfile::now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

runtime::TraceCounts LaunchProfile::write(bool gpu, int64_t clock_offset_ns, int64_t clock_error_ns,
                                          int64_t kernel_ns) const {
  if (!on()) return {};
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
