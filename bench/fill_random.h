// Random inputs for the GPU benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "tiledist.h"

namespace tiledist::bench {

/// Random inputs in [-1, 1): the tensor cores draw more power on random bits than on a
/// constant, so timings on constant inputs flatter a power-limited kernel. Drawn by splitmix64
/// (two values a draw) and uploaded in chunks of 16 Mi elements: an MoE layer's weights (a few
/// G elements) in seconds rather than the minute a host vector of mt19937's floats took.
template <class T>
void fill_random(cuda::Buffer<T>& buf) {
  constexpr size_t kChunk = size_t(1) << 24;
  uint64_t state = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                   (buf.size() * 0x9E3779B97F4A7C15ull);
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  auto uniform = [](uint32_t bits) { return float(bits >> 8) * 0x1p-23f - 1.0f; };  // [-1, 1)
  std::vector<T> h(std::min(kChunk, buf.size()));
  for (size_t at = 0; at < buf.size(); at += kChunk) {
    const size_t n = std::min(kChunk, buf.size() - at);
    for (size_t i = 0; i < n; i += 2) {
      const uint64_t r = next();
      h[i] = T(uniform(uint32_t(r)));
      if (i + 1 < n) h[i + 1] = T(uniform(uint32_t(r >> 32)));
    }
    cuda::copy_to_device(buf.data() + at, h.data(), n * sizeof(T));
  }
}

}  // namespace tiledist::bench
