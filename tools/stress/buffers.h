// What the stress harness's subjects share: buffers of the job's target, and shapes.
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "tools/stress/cases.h"

namespace tiledist::stress {

/// A buffer of the job's target: device memory on a GPU, host memory on the host.
template <class T>
class Mem {
 public:
  Mem(bool gpu, const std::vector<T>& v) : size_(v.size()) {
    if (gpu)
      device_ = std::make_unique<cuda::Buffer<T>>(v);
    else
      host_ = v;
  }
  T* ptr() { return device_ ? device_->data() : host_.data(); }
  /// A copy on the host (the runs that write it must be done).
  std::vector<T> get() const { return device_ ? device_->download() : host_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  std::unique_ptr<cuda::Buffer<T>> device_;
  std::vector<T> host_;
};
template <class T>
inline std::shared_ptr<Mem<T>> mem(Job& job, const std::vector<T>& v) {
  return std::make_shared<Mem<T>>(job.gpu(), v);
}
/// What an output holds before its run: NaN, so that an element the run does not write fails.
template <class T>
std::vector<T> poison(size_t n) {
  return std::vector<T>(n, T(std::numeric_limits<float>::quiet_NaN()));
}

/// A size in [1, hi]: a few elements, or up to an eighth of `hi`, or up to `hi` (ragged: a
/// multiple of nothing in particular).
inline int64_t ragged(Job& job, int64_t hi) {
  switch (job.draw(0, 3)) {
    case 0:
      return job.draw(1, std::min<int64_t>(8, hi));
    case 1:
      return job.draw(1, std::max<int64_t>(1, hi / 8));
    default:
      return job.draw(1, hi);
  }
}

}  // namespace tiledist::stress
