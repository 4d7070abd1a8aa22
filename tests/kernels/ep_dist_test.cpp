// Expert-parallel dispatch and combine (kernels/ep.h) on the CPU backend's world, run by
// `tiledist-run -n N ep_dist_test` (N = 1, 2, 3, 4, 8): every rank checks its own results
// (tests/kernels/ep_check.h, shared with the GPU test).
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/jit/error_of.h"
#include "tests/kernels/ep_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

using testing_collectives::HostMemory;

TEST(Ep, DispatchAndBack) {
  const int64_t n = world_size();
  testing_ep::check_ep<HostMemory>(Target::host(), 13, 40, 3 * n, 2);  // top-2, ragged
  testing_ep::check_ep<HostMemory>(Target::host(), 11, 24, 2 * n, 1);  // top-1
  testing_ep::check_ep<HostMemory>(Target::host(), 7, 16, 8 * n, 8);   // top-8
  // (hidden past a step of the row copies: 1100 of 1024-column steps)
  testing_ep::check_ep<HostMemory>(Target::host(), 5, 1100, 4 * n, 3, 0, 1);
}
// dispatch -> GroupedGemm over recv() and offs() -> combine, no copy between them.
TEST(Ep, DispatchGroupedGemmCombine) {
  const int64_t n = world_size();
  testing_ep::check_ep<HostMemory>(Target::host(), 9, 48, 2 * n, 2, 24);
  testing_ep::check_ep<HostMemory>(Target::host(), 6, 32, 4 * n, 4, 40);
}
// A receive capacity smaller than the most a run can send, but enough for these runs.
TEST(Ep, SmallerCapacity) {
  const int64_t n = world_size();
  testing_ep::check_ep<HostMemory>(Target::host(), 13, 40, 3 * n, 2, 0, 2, int64_t{26} * n);
}
// The low-latency mode: f8e4m3 rows with their scales and bf16 rows, three calls in a row (both
// halves, then the first again), a grouped GEMM over its tile table, the receive hook.
TEST(Ep, LowLatency) {
  const int64_t n = world_size();
  const auto f8 = ir::DType::f8e4m3, b16 = ir::DType::bf16;
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 13, 40, 3 * n, 2, b16);
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 9, 300, 2 * n, 2, b16);  // (rows in 3 chunks of 128)
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 11, 300, 2 * n, 1, f8);  // three scale blocks, the last short
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 7, 128, 8 * n, 8, f8, 0, 3, true);
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 70, 48, 2 * n, 2, b16, 24);  // runs past a 64-row tile
  // (several tokens a program, their rows in two chunks of 256 and 44 channels)
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 45, 300, 4 * n, 3, f8);
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 9, 32, 4 * n, 4, b16, 40, 2, true);
  // (e4m3 rows through the blockwise f8 GEMM over the table, with the rows' own scales)
  testing_ep::check_ep_ll<HostMemory>(Target::host(), 9, 160, 2 * n, 2, f8, 136, 2);
}
// Bad arguments: named, and thrown alike on every rank; a run past the receive capacity sends
// nothing, and the next run goes through.
TEST(Ep, BadArguments) {
  const Target host = Target::host();
  const int n = world_size(), me = rank();
  auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  expect(test_util::error_of([&] { kernels::EpDispatch(host, 8, 16, n, n + 1); }),
         str_cat("top-", n + 1, " of ", n, " experts"));
  if (n > 1)
    expect(test_util::error_of([&] { kernels::EpDispatch(host, 8, 16, n + 1, 1); }),
           str_cat(n + 1, " experts over ", n, " ranks"));
  kernels::EpDispatch dispatch(host, 8, 16, int64_t{2} * n, 1, {4});
  kernels::EpCombine combine(dispatch);
  std::vector<bf16> x(size_t{8 * 16}, bf16(1.0f)), out(size_t{8 * 16});
  std::vector<float> weights(8, 1.0f);
  expect(test_util::error_of([&] { combine.run(x.data(), weights.data(), out.data()); }),
         "run before any run of its EpDispatch");
  std::vector<int32_t> ids(8, 0);  // (every token to expert 0, on rank 0)
  expect(test_util::error_of([&] { dispatch.run(x.data(), ids.data(), 9); }),
         str_cat("9 tokens on rank ", me, ", past the capacity of 8 tokens"));
  expect(test_util::error_of([&] { dispatch.run(nullptr, ids.data(), 8); }), "a null pointer");
  expect(test_util::error_of([&] { dispatch.run(x.data(), ids.data(), 8); }),
         str_cat("rank 0 would receive ", 8 * n, " rows for its experts, past the receive capacity of 4 rows"));
  barrier_all();  // (every rank has thrown: had any sent, its rows would be here)
  EXPECT_TRUE(std::all_of(dispatch.recv(), dispatch.recv() + 4 * 16, [](bf16 v) { return float(v) == 0.0f; }))
      << "rows written by a run that threw";
  expect(test_util::error_of([&] { combine.run(x.data(), weights.data(), out.data()); }),
         "its EpDispatch's last run threw");
  ids.assign(8, 2 * me + 1);  // (then each rank's token to its own second expert: a row each)
  dispatch.run(x.data(), ids.data(), 1);
  EXPECT_EQ(dispatch.recv_rows(), 1);
  EXPECT_EQ(dispatch.recv_counts(), (std::vector<int64_t>{0, 1}));
  combine.run(dispatch.recv(), weights.data(), out.data());
  EXPECT_EQ(float(out[5]), 1.0f);
  expect(test_util::error_of([&] { combine.run(dispatch.recv(), weights.data(), out.data()); }),
         "a second run for one run of its EpDispatch");
  // The low-latency pair with the receive hook: the next dispatch waits for the combine's receive.
  kernels::EpLowLatencyDispatch ll(host, 8, 16, int64_t{2} * n, 1, {ir::DType::bf16, 64, true});
  kernels::EpLowLatencyCombine back(ll);
  ll.run(x.data(), ids.data(), 1);
  expect(test_util::error_of([&] { ll.run(x.data(), ids.data(), 1); }), "run before the last run's receive()");
  ll.receive();
  back.run(static_cast<const bf16*>(ll.recv()), weights.data(), out.data());
  expect(test_util::error_of([&] { ll.run(x.data(), ids.data(), 1); }), "run before its combine's receive()");
  back.receive();
  EXPECT_EQ(float(out[5]), 1.0f);
  expect(test_util::error_of([&] { kernels::EpLowLatencyDispatch(host, 8, 16, n, 1, {ir::DType::f32, 64, false}); }),
         "rows of f32");
}

}  // namespace
}  // namespace tiledist
