// The kernel tests run on the default target: the GPU where there is one, else the CPU
// (TILEDIST_TARGET overrides). With TILEDIST_TEST_GPU=1 they run on a CUDA GPU, or report
// themselves skipped where there is none (ctest's gpu.kernels).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/cuda.h"

int main(int argc, char** argv) {
  const char* gpu = std::getenv("TILEDIST_TEST_GPU");
  if (gpu && *gpu && *gpu != '0') {
    if (!tiledist::cuda::available()) {
      std::printf("SKIPPED: no CUDA GPU here (%s)\n", tiledist::cuda::unavailable_reason().c_str());
      return 77;
    }
    setenv("TILEDIST_TARGET", "cuda", 1);
    std::printf("running on %s (%s)\n", tiledist::cuda::device().name.c_str(), tiledist::cuda::device().arch().c_str());
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
