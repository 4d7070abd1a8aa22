// kernels::DistFlashDecode on the CPU backend, one process a rank (tiledist-run -n N): runs of
// different shapes back to back (the parts' halves), then the arguments it refuses
// (tests/kernels/flash_decode_check.h checks each run).
#include "tests/jit/error_of.h"
#include "tests/kernels/collectives_check.h"
#include "tests/kernels/flash_decode_check.h"

namespace tiledist {
namespace {
using testing_collectives::HostMemory;
using testing_decode::check_dist_decode;

TEST(DistFlashDecode, SlicesOfEveryRank) {
  kernels::DistFlashDecode fd(Target::host(), 8, 2, 64, /*max_batch*/ 3, /*max_q_tokens*/ 2);
  check_dist_decode<HostMemory>(1, 3, 1, 8, 2, 64, 90, fd);
  check_dist_decode<HostMemory>(2, 2, 2, 8, 2, 64, 33, fd);   // (another shape: the other half)
  check_dist_decode<HostMemory>(3, 1, 1, 8, 2, 64, 400, fd);  // (one sequence: its slice over several programs)
}

// Causal across ranks: the step's tokens (2 of them, and 1) see the keys before their positions,
// which end on the last rank with keys; short slices (some empty, rank 1's first) put a token's
// limit inside an earlier rank's slice.
TEST(DistFlashDecode, CausalAcrossRanks) {
  kernels::DistFlashDecode fd(Target::host(), 8, 2, 64, /*max_batch*/ 3, /*max_q_tokens*/ 2);
  check_dist_decode<HostMemory>(1, 3, 2, 8, 2, 64, 90, fd, true);
  check_dist_decode<HostMemory>(2, 3, 2, 8, 2, 64, 3, fd, true);  // (slices shorter than the step)
  check_dist_decode<HostMemory>(3, 2, 1, 8, 2, 64, 300, fd, true);
  check_dist_decode<HostMemory>(4, 2, 2, 8, 2, 64, 40, fd);  // (and not, after)
}

TEST(DistFlashDecode, BadArguments) {
  kernels::DistFlashDecode fd(Target::host(), 8, 2, 64, 2);
  bf16 x{};
  int32_t len = 1;
  using test_util::error_of;
  EXPECT_NE(error_of([&] { fd.run(&x, &x, &x, &len, &x, 3, 1, 8); }).find("past the 16"), std::string::npos);
  EXPECT_NE(error_of([&] { fd.run(&x, &x, &x, &len, &x, 1, 5, 8); }).find("q_tokens = 5"), std::string::npos);
  EXPECT_NE(error_of([&] { fd.run(&x, &x, &x, &len, &len, nullptr, &x, 1, 1, 8); }).find("kv_totals null"),
            std::string::npos);
}

}  // namespace
}  // namespace tiledist
