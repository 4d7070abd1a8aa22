// The README's first kernel, out = x + y, in a program of its own: traced, compiled for the
// host's CPU (or the GPU, where `vector_add cuda` finds one), launched, and its every element
// checked against the sum computed here.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tiledist.h"

using namespace tiledist;

// readme:begin add
void add(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto mask = offs < n;
  tl::store(out + offs, tl::load(x + offs, mask) + tl::load(y + offs, mask), mask);
}
// readme:end

int main(int argc, char** argv) {
  static const KernelDef add_def("add", add, {"x", "y", "out", "n", "BLOCK"});
  const int n = 100003;  // (not a multiple of the block: the mask's last program)
  std::vector<float> x(n), y(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) x[i] = std::sin(float(i)), y[i] = std::cos(float(3 * i));
  try {
    const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
    if (gpu && !cuda::available()) {
      std::printf("vector_add: no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
      return 0;
    }
    auto k = compile(add_def, {{"BLOCK", 1024}}, gpu ? Target::cuda() : Target::host());
    if (gpu) {
      cuda::Buffer<float> xd(x), yd(y), od{static_cast<size_t>(n)};
      k.launch({tl::cdiv(n, 1024)}, xd.data(), yd.data(), od.data(), n);
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
