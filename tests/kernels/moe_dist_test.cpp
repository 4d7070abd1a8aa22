// The kernel library's MoE objects on the CPU backend's world, run by `tiledist-run -n N
// moe_dist_test` (N = 1 to 4): every rank checks its own results (tests/kernels/moe_check.h,
// shared with the GPU test).
#include <gtest/gtest.h>

#include "tests/jit/error_of.h"
#include "tests/jit/saved_env.h"
#include "tests/kernels/moe_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

using testing_collectives::HostMemory;

TEST(Moe, AllGatherGroupedGemm) {
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 37, 40, 48, 6, 2);   // ragged tiles, top-2
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 20, 24, 32, 16, 8);  // top-8
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 9, 72, 40, 3, 1);    // top-1, N past a tile
  // (K of 9.4 BK blocks: each tile's rows gathered by two programs, moe_gather_split's parts)
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 9, 40, 600, 3, 1);
}
TEST(Moe, GroupedGemmReduceScatter) {
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 37, 40, 24, 6, 2, Mode::reduce_scatter);
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 20, 72, 16, 16, 8, Mode::reduce_scatter);
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 9, 300, 32, 3, 1,
                                            Mode::reduce_scatter);  // two column steps
}
TEST(Moe, GroupedGemmAllReduce) {
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 5, 64, 32, 8, 2, Mode::all_reduce);  // decoding
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 19, 40, 24, 4, 4, Mode::all_reduce);
}
TEST(Moe, Mlp) {
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 13, 48, int64_t(32) * world_size(), 8, 2);
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 6, 32, int64_t(16) * world_size(), 16, 8,
                                         kernels::MoeReduce::Mode::all_reduce);
}
// The same layer with the overlap off (MoeMlp::set_overlap(false)): the gather before the
// gate/up GEMM, the whole down GEMM before any push; what the overlap is measured against.
TEST(Moe, MlpOneAfterTheOther) {
  using Mode = kernels::MoeReduce::Mode;
  const int64_t n = world_size();
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 13, 48, 32 * n, 8, 2, Mode::reduce_scatter, ir::DType::bf16,
                                         false);
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 6, 32, 16 * n, 16, 8, Mode::all_reduce, ir::DType::bf16,
                                         false);
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 7, 136, 64 * n, 3, 1, Mode::reduce_scatter, ir::DType::f8e4m3,
                                         false);
}
TEST(Moe, AllGatherGroupedGemmF8) {
  // (N and K past one 128-column block: the weights' scales read per block of both)
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 37, 160, 160, 6, 2, {nullptr}, ir::DType::f8e4m3);
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 9, 136, 128, 3, 1, {nullptr}, ir::DType::f8e4m3);
  // (K of 8.6 scale blocks, gathered and quantized in two parts of 5 and 3.6 blocks)
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 9, 136, 1100, 3, 1, {nullptr}, ir::DType::f8e4m3);
}
TEST(Moe, GroupedGemmReduceF8) {
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 37, 160, 160, 6, 2, Mode::reduce_scatter, {nullptr},
                                            ir::DType::f8e4m3);
  testing_moe::check_moe_reduce<HostMemory>(Target::host(), 5, 136, 128, 8, 8, Mode::all_reduce, {nullptr},
                                            ir::DType::f8e4m3);
}
// f8e4m3 weights with block scales: several 128-column blocks of hidden and of the intermediate
// (the last ones partial), ragged tokens, top-1, 2 and 8.
TEST(Moe, MlpF8) {
  using Mode = kernels::MoeReduce::Mode;
  const int n = world_size();
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 11, 160, int64_t(136) * n, 6, 2, Mode::reduce_scatter,
                                         ir::DType::f8e4m3);
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 5, 128, int64_t(40) * n, 16, 8, Mode::all_reduce,
                                         ir::DType::f8e4m3);
  testing_moe::check_moe_mlp<HostMemory>(Target::host(), 7, 136, int64_t(64) * n, 3, 1, Mode::reduce_scatter,
                                         ir::DType::f8e4m3);
}
// Bad arguments: named, and thrown before anything is queued (the same on every rank).
TEST(Moe, BadArguments) {
  const Target host = Target::host();
  const int n = world_size();
  auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  expect(test_util::error_of([&] { kernels::AgMoe(host, 8, 16, 16, 4, 5); }), "top-5 of 4 experts");
  expect(test_util::error_of([&] { kernels::MoeReduce(host, 8, 16, 16, 4, 0); }), "1 <= topk <= experts");
  expect(test_util::error_of([&] { kernels::MoeMlp(host, 8, 16, 0, 4, 2); }),
         str_cat("an intermediate size of 0 does not split over ", n, " ranks"));
  if (n > 1)
    expect(test_util::error_of([&] { kernels::MoeMlp(host, 8, 16, 16 * n + 1, 4, 2); }),
           str_cat("an intermediate size of ", 16 * n + 1, " does not split over ", n, " ranks"));
  kernels::MoeReduce reduce(host, 8, 16, 16, 4, 2);
  kernels::MoeRouting other(host, int64_t(8) * n, 6, 2,
                            {kernels::MoeRouting::Scores::softmax, true, reduce.config().bm, n});
  std::vector<bf16> act(size_t(other.rows()) * 16), w(size_t(4) * 16 * 16), out(size_t(8) * 16);
  std::vector<float> scores(size_t(8 * n) * 2);
  expect(test_util::error_of([&] { reduce.run(act.data(), other, scores.data(), w.data(), out.data()); }),
         "a routing of " + std::to_string(8 * n) + " tokens, 6 experts");
  kernels::AgMoe ag(host, 8, 16, 16, 4, 2);
  expect(test_util::error_of([&] { ag.run(nullptr, nullptr, w.data(), out.data()); }), "a null pointer");
  // f8e4m3: the weights' dtype named where a run gives the other, scales required.
  std::vector<f8e4m3> w8(w.size());
  std::vector<float> w_scales(4, 1.0f);
  std::vector<int32_t> ids(16, 0);
  expect(test_util::error_of([&] { ag.run(act.data(), ids.data(), nullptr, w8.data(), w_scales.data(), out.data()); }),
         "run with f8e4m3 weights and scales on an AgMoe made for bf16");
  kernels::AgMoe ag8(host, 8, 16, 16, 4, 2, ir::DType::f8e4m3);
  expect(test_util::error_of([&] { ag8.run(act.data(), ids.data(), w.data(), out.data()); }),
         "run with bf16 weights on an AgMoe made for f8e4m3");
  expect(test_util::error_of([&] { ag8.run(act.data(), ids.data(), nullptr, w8.data(), nullptr, out.data()); }),
         "f8e4m3 weights without scales");
  expect(test_util::error_of([&] {
           kernels::MoeMlp(host, 8, 16, int64_t{16} * n, 4, 2, kernels::MoeReduce::Mode::reduce_scatter,
                           ir::DType::f16);
         }),
         "weights of f16 (bf16, or f8e4m3 with block scales)");
}
// The gathered batch sorted both ways: a segment per rank (a tile's rows from one rank; MoeReduce
// pushes a rank's tokens once its tiles are done) and one (by expert alone: a tile's rows from
// several ranks, each gather waiting for all of them; every push after the whole GEMM).
TEST(Moe, ASegmentPerRankOrOne) {
  using Mode = kernels::MoeReduce::Mode;
  const test_util::SavedEnv saved({"TILEDIST_MOE_SEGMENTS"}, false);
  const int64_t n = world_size();
  for (const char* segments : {"ranks", "1"}) {
    SCOPED_TRACE(str_cat("$TILEDIST_MOE_SEGMENTS=", segments));
    setenv("TILEDIST_MOE_SEGMENTS", segments, 1);
    EXPECT_EQ(kernels::AgMoe(Target::host(), 37, 40, 48, 6, 2).routing().segments(),
              std::string(segments) == "1" ? 1 : n);
    testing_moe::check_ag_moe<HostMemory>(Target::host(), 37, 40, 48, 6, 2);
    testing_moe::check_ag_moe<HostMemory>(Target::host(), 9, 40, 600, 3, 1);  // (the gather in two parts)
    testing_moe::check_moe_reduce<HostMemory>(Target::host(), 37, 40, 24, 6, 2, Mode::reduce_scatter);
    testing_moe::check_moe_reduce<HostMemory>(Target::host(), 19, 40, 24, 4, 4, Mode::all_reduce);
    testing_moe::check_moe_mlp<HostMemory>(Target::host(), 13, 48, 32 * n, 8, 2);
    testing_moe::check_moe_mlp<HostMemory>(Target::host(), 13, 48, 32 * n, 8, 2, Mode::reduce_scatter, ir::DType::bf16,
                                           false);
    testing_moe::check_moe_mlp<HostMemory>(Target::host(), 7, 136, 64 * n, 3, 1, Mode::all_reduce, ir::DType::f8e4m3);
  }
  setenv("TILEDIST_MOE_SEGMENTS", "2", 1);
  EXPECT_NE(test_util::error_of([] {
              kernels::AgMoe(Target::host(), 8, 16, 16, 4, 2);
            }).find("$TILEDIST_MOE_SEGMENTS = '2': 1 (the batch sorted by expert alone) or ranks"),
            std::string::npos);
}
// Which sort the shapes pick: one segment where a rank's rows of an expert are under a tile or
// so (DeepSeek-V3's 256 experts, 4096 tokens over 4 ranks: 32 rows of each a rank, against
// 128-row tiles), a segment per rank where each fills several tiles (Mixtral's 8 experts).
TEST(Moe, SegmentsFollowTheTilesTheyMake) {
  const test_util::SavedEnv saved({"TILEDIST_MOE_SEGMENTS"}, true);
  EXPECT_EQ(kernels::moe_segments(4, int64_t{4096} * 8, 256, 128), 1);
  EXPECT_EQ(kernels::moe_segments(4, int64_t{8192} * 2, 8, 128), 4);
  EXPECT_EQ(kernels::moe_segments(8, int64_t{65536} * 2, 8, 128), 8);
  EXPECT_EQ(kernels::moe_segments(1, 100, 256, 64), 1);
}
TEST(Moe, AllGatherGroupedGemmOfNoTokens) {
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 0, 16, 16, 4, 2);
  testing_moe::check_ag_moe<HostMemory>(Target::host(), 0, 16, 128, 4, 2, {nullptr}, ir::DType::f8e4m3);
}

}  // namespace
}  // namespace tiledist
