// Working memory of a library object: device memory on a GPU target, host memory on the host.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/symmetric.h"

namespace tiledist::kernels::detail {

/// `count` elements of T, zeroed when made (on the GPU: done when the constructor returns).
template <class T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Target& target, size_t count) : count_(count), gpu_(on_gpu(target)) {
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    if (gpu_) {
      data_ = static_cast<T*>(cuda::malloc(bytes));
      cuda::memset(data_, 0, bytes);
    } else {
      host_.assign(std::max<size_t>(count, 1), T{});
      data_ = host_.data();
    }
  }
  /// `values`' elements, copied in (on the GPU: done when the constructor returns).
  Scratch(const Target& target, const std::vector<T>& values) : Scratch(target, values.size()) { assign(values); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&& o) noexcept { *this = std::move(o); }
  Scratch& operator=(Scratch&& o) noexcept {
    std::swap(data_, o.data_), std::swap(count_, o.count_), std::swap(gpu_, o.gpu_), std::swap(host_, o.host_);
    return *this;
  }
  ~Scratch() {
    if (gpu_ && data_) cuda::free(data_);
  }
  T* data() const { return data_; }
  size_t size() const { return count_; }
  /// Copies `values` (at most size() of them) over the first elements (on the GPU: done when it
  /// returns).
  void assign(const std::vector<T>& values) {
    const size_t bytes = std::min(values.size(), count_) * sizeof(T);
    if (bytes == 0) return;
    if (gpu_)
      cuda::copy_to_device(data_, values.data(), bytes);
    else
      std::memcpy(data_, values.data(), bytes);
  }
  /// The elements, copied out (on the GPU: after everything queued before on the legacy stream).
  std::vector<T> values() const {
    std::vector<T> v(count_);
    if (gpu_ && count_ > 0)
      cuda::copy_to_host(v.data(), data_, count_ * sizeof(T));
    else if (count_ > 0)
      std::memcpy(v.data(), data_, count_ * sizeof(T));
    return v;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
  bool gpu_ = false;
  std::vector<T> host_;
};

}  // namespace tiledist::kernels::detail
