// Random inputs for the GPU benchmarks.
#pragma once

#include <vector>

#include "kernels/reference.h"
#include "tiledist.h"

namespace tiledist::bench {

/// Random inputs in [-1, 1): the tensor cores draw more power on random bits than on a
/// constant, so timings on constant inputs flatter a power-limited kernel.
template <class T>
void fill_random(cuda::Buffer<T>& buf) {
  std::vector<float> r = reference::random_floats(buf.size());
  std::vector<T> h(r.size());
  for (size_t i = 0; i < r.size(); ++i) h[i] = T(r[i]);
  buf.upload(h);
}

}  // namespace tiledist::bench
