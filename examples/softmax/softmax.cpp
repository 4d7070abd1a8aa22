// softmax(scale * x) of each row of a matrix whose rows are wider than one block: the kernel
// walks a row BLOCK columns at a time, twice (an online max and sum, then the results). Compiled
// for the host's CPU (or the GPU, where `softmax cuda` finds one), launched a program per row,
// and every element checked against a softmax computed here in double.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tiledist.h"

using namespace tiledist;

// readme:begin softmax
// softmax(scale * x) of each row, BLOCK columns at a time: the first loop keeps each lane's
// running max and its sum of exponentials (rescaled as the max grows), the second writes.
void softmax(tl::Ptr<float> x, tl::Ptr<float> out, tl::Int n_cols, tl::Float scale, tl::Const<int> BLOCK) {
  auto row = tl::program_id(0).to(tl::int64) * n_cols;
  auto cols = tl::arange(0, BLOCK);
  // (lanes start at -1e30, not -inf: a lane that never sees a column would compute -inf - -inf)
  tl::Values init{tl::full({BLOCK}, -1e30f, tl::float32), tl::zeros({BLOCK}, tl::float32)};
  auto lanes = tl::for_range(0, n_cols, BLOCK, init, [&](tl::Tensor c, tl::Values acc) {
    auto mask = c + cols < n_cols;
    auto v = tl::where(mask, tl::load(x + row + c + cols, mask) * scale, -INFINITY);
    auto m = tl::maximum(acc[0], v);
    return tl::Values{m, acc[1] * tl::exp(acc[0] - m) + tl::exp(v - m)};
  });
  auto m = tl::max(lanes[0], 0);
  auto sum = tl::sum(lanes[1] * tl::exp(lanes[0] - m), 0);
  tl::for_range(0, n_cols, BLOCK, [&](tl::Tensor c) {
    auto mask = c + cols < n_cols;
    auto v = tl::load(x + row + c + cols, mask) * scale;
    tl::store(out + row + c + cols, tl::exp(v - m) / sum, mask);
  });
}
// readme:end

int main(int argc, char** argv) {
  const int rows = 37, cols = 3001;  // (3001: the last block of each row is masked)
  const float scale = 0.125f;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 8.0f);
  std::vector<float> x(size_t(rows) * cols), out(x.size(), -1.0f);
  for (float& v : x) v = normal(rng);
  try {
    static const KernelDef def("example_softmax", softmax, {"x", "out", "n_cols", "scale", "BLOCK"});
    const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
    if (gpu && !cuda::available()) {
      std::printf("softmax: no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
      return 0;
    }
    auto k = compile(def, {{"BLOCK", 1024}}, gpu ? Target::cuda() : Target::host());
    if (gpu) {
      cuda::Buffer<float> xd(x), od{x.size()};
      k.launch({rows}, xd, od, cols, scale);
      cuda::synchronize();
      out = od.download();
    } else {
      k.launch({rows}, x.data(), out.data(), cols, scale);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "softmax: %s\n", e.what());
    return 1;
  }
  // The reference, in double; the error of every element, and in relative norm.
  double err2 = 0, ref2 = 0, worst = 0;
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[size_t(r) * cols];
    double m = -INFINITY, s = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, double(scale) * xr[c]);
    for (int c = 0; c < cols; ++c) s += std::exp(double(scale) * xr[c] - m);
    for (int c = 0; c < cols; ++c) {
      const double ref = std::exp(double(scale) * xr[c] - m) / s, got = out[size_t(r) * cols + c];
      err2 += (got - ref) * (got - ref), ref2 += ref * ref;
      worst = std::max(worst, std::abs(got - ref) / (ref + 1e-30));
    }
  }
  const double rel = std::sqrt(err2 / ref2), tolerance = 1e-5;
  std::printf("softmax: %d x %d, error %.2e in relative norm (tolerance %.0e), %.2e at worst\n", rows, cols, rel,
              tolerance, worst);
  return rel <= tolerance && worst <= 1e-4 ? 0 : 1;
}
