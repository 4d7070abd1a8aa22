// The kernel library's communicating objects on the CPU backend's world (kernels/collectives.cpp,
// ag_gemm.cpp, gemm_rs.cpp), run by `tiledist-run -n N collectives_test` (N = 1, 2, 3, 4, 8):
// every rank runs every test and checks its own results against sums and products the host
// computes in the same order (tests/kernels/collectives_check.h, shared with the GPU test).
// The runtime's own distributed tests are tests/runtime/dist_test.cpp.
#include <gtest/gtest.h>

#include <optional>

#include "tests/jit/error_of.h"
#include "tests/kernels/collectives_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

using testing_collectives::HostMemory;
TEST(Library, AllGatherReduceScatterAllReduce) {
  testing_collectives::check<HostMemory>(Target::host(), 64 << 10);  // 100003 floats go in pieces
}
TEST(Library, CollectivesOfBf16) {
  testing_collectives::check<HostMemory, bf16>(Target::host(), 64 << 10);
  testing_collectives::check<HostMemory, bf16>(Target::host(), 32 << 20, {600011});  // pipelined chunks
}
// Calls of different sizes use different numbers of programs; each signal word must still have
// one sender over all calls (a word shared by two senders let a rank already in the next call
// release a wait of this one: stale data, then a hang). Many calls, alternating.
TEST(Library, CollectivesOfAlternatingSizes) {
  kernels::Collectives c(Target::host(), 64 << 20);
  const int n = c.ranks(), me = rank();
  auto val = [](int r, size_t i, int call) { return float((r * 7919 + int64_t(i) * 104729 + call * 31) % 100003); };
  for (int call = 0; call < 1500; ++call) {
    const size_t count = call % 2 ? 8 : 8192;  // two programs per destination, then one
    std::vector<float> in(count), out(n * count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = val(me, i, call);
    c.all_gather(in.data(), out.data(), count);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[r * count + i], val(r, i, call)) << "call " << call << ": rank " << r << "'s element " << i;
  }
}
// The library's objects are handles: copies share one state, released once, with the last
// (a copy's destruction used to release the symmetric memory a second time).
TEST(Library, CopiesShareOneState) {
  std::optional<kernels::Collectives> c(std::in_place, Target::host(), 1 << 20);
  kernels::Collectives copy = *c;
  c.reset();
  const int n = copy.ranks();
  std::vector<float> in(100, float(rank() + 1)), out(100, -1.0f);
  copy.all_reduce(in.data(), out.data(), in.size());
  for (float x : out) ASSERT_EQ(x, float(n * (n + 1) / 2));
  std::optional<kernels::AgGemm> ag(std::in_place, Target::host(), 8 * n, 8, 8);
  kernels::AgGemm ag_copy = *ag;
  ag.reset();
  std::optional<kernels::GemmRs> rs(std::in_place, Target::host(), 64 * n, 8, 8);
  kernels::GemmRs rs_copy = *rs;
  rs.reset();
  barrier_all();
}
TEST(Library, CollectivesInPipelinedChunks) {
  // One piece, slices of 150004 floats: three chunks of 65536 each program pipelines.
  testing_collectives::check<HostMemory>(Target::host(), 32 << 20, {300007});
}
TEST(Library, AllGatherGemm) {
  // Rows per rank that are not a multiple of the tile: tiles that wait for two ranks.
  testing_collectives::check_ag_gemm<HostMemory>(Target::host(), 40 * world_size(), 72, 48);
  // By SM puts: 3 programs push slices of 14, 14 and 12 rows.
  testing_collectives::check_ag_gemm<HostMemory>(Target::host(), 40 * world_size(), 72, 48, {nullptr},
                                                 kernels::AgGemm::Gather::sm_puts, 3);
  // In place: each rank's rows written where the run wants them.
  testing_collectives::check_ag_gemm<HostMemory>(Target::host(), 40 * world_size(), 72, 48, {nullptr},
                                                 kernels::AgGemm::Gather::copy_engine, 0, true);
}
TEST(Library, GemmReduceScatter) {
  testing_collectives::check_gemm_rs<HostMemory>(Target::host(), 64 * world_size(), 72, 48);  // 64-row tiles
}
TEST(Library, GemmAllReduce) {
  testing_collectives::check_gemm_rs<HostMemory, kernels::GemmAr>(Target::host(), 70, 72, 48);  // ragged tiles
}
// A decode step's GEMM + AllReduce with each tile's K cut into runs (GemmConfig::split_k): 3 runs
// of 40 K steps' 13, 13 and 14; more runs than K steps take one a step.
TEST(Library, GemmAllReduceSplitOverK) {
  testing_collectives::check_gemm_rs<HostMemory, kernels::GemmAr>(Target::host(), 1, 72, 40 * 32, {nullptr}, 3);
  testing_collectives::check_gemm_rs<HostMemory, kernels::GemmAr>(Target::host(), 5, 72, 48, {nullptr}, 8);
}
// The overlapped GEMMs' kernels index with 32-bit element numbers: a C of 2^31 elements or more
// (a model's prefill of 65536 tokens through an MLP of 51200 columns) is refused before
// anything is allocated, naming the shape.
TEST(Library, OverlappedGemmsPast32BitOffsetsAreRefused) {
  const int64_t M = 65536 * int64_t(world_size()), N = 51200, K = 5120;
  const std::string shape = str_cat("M, N, K = ", M, ", ", N, ", ", K, ": not negative, and ");
  EXPECT_NE(test_util::error_of([&] { kernels::AgGemm(Target::host(), M, N, K); }).find("ag_gemm: " + shape),
            std::string::npos);
  EXPECT_NE(test_util::error_of([&] { kernels::GemmRs(Target::host(), M, N, K); }).find("gemm_rs: " + shape),
            std::string::npos);
  EXPECT_NE(test_util::error_of([&] { kernels::GemmAr(Target::host(), M, N, K); }).find("gemm_ar: " + shape),
            std::string::npos);
}

}  // namespace
}  // namespace tiledist
