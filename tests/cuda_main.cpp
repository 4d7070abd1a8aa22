// The main of the GPU tests run by tiledist-run (cuda_dist_test, cuda_collectives_test): skipped,
// exit 77 (ctest's SKIP_RETURN_CODE), where there is no CUDA GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "tiledist.h"

int main(int argc, char** argv) {
  if (!tiledist::cuda::available()) {
    std::printf("SKIPPED: no CUDA GPU here (%s)\n", tiledist::cuda::unavailable_reason().c_str());
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
