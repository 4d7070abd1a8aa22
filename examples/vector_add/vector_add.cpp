// The README's first kernel (kernels.cpp), out = x + y, in a program of its own: traced,
// compiled for the host's CPU (or the GPU, where `vector_add cuda` finds one; from the cache
// where tiledist-warmup filled it), launched, and its every element checked against the sum
// computed here.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "add.h"

using namespace tiledist;

int main(int argc, char** argv) {
  const int n = 100003;  // (not a multiple of the block: the mask's last program)
  std::vector<float> x(n), y(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) x[i] = std::sin(float(i)), y[i] = std::cos(float(3 * i));
  try {
    const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
    if (gpu && !cuda::available()) {
      std::printf("vector_add: no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
      return 0;
    }
    auto k = compile(add_kernel(), {{"BLOCK", 1024}}, gpu ? Target::cuda() : Target::host());
    if (gpu) {
      cuda::Buffer<float> xd(x), yd(y), od{static_cast<size_t>(n)};
      k.launch({tl::cdiv(n, 1024)}, xd, yd, od, n);
      cuda::synchronize();
      out = od.download();
    } else {
      k.launch({tl::cdiv(n, 1024)}, x.data(), y.data(), out.data(), n);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "vector_add: %s\n", e.what());
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[i] != x[i] + y[i];
  std::printf("vector_add: %d elements, %d wrong\n", n, wrong);
  return wrong == 0 ? 0 : 1;
}
