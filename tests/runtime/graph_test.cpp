// runtime/graph.h on any machine, through a runtime that logs its calls (tests/runtime/
// host_queues.h): a graph records what its code queues on a stream and launches it as one; a
// capture whose code throws is ended and discarded, the code's error the one seen; a graph
// refuses a stream of another runtime; a library run on a capturing stream is refused unless
// its object keeps its protocol's state in device memory, and a captured run marks no events.
#include "runtime/graph.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/symmetric.h"
#include "tests/jit/error_of.h"
#include "tests/runtime/host_queues.h"

namespace tiledist {
namespace {
using test_util::error_of;
using test_util::HostQueues;

TEST(Graph, RecordsWhatItsCodeQueuesAndLaunchesItAsOne) {
  HostQueues api;
  {
    runtime::Module m(api, "binary", "kern");
    runtime::Stream s(api), t(api);
    const int grid[3] = {2, 1, 1};
    bool seen_capturing = false;
    runtime::Graph g(s, [&] {
      seen_capturing = s.capturing() && !t.capturing();
      m.launch("entry", grid, 128, 0, nullptr, &s);
    });
    EXPECT_TRUE(seen_capturing);
    EXPECT_FALSE(s.capturing());
    g.launch(s);
    g.launch(t);
  }
  const std::vector<std::string> want = {"module_load binary kern", "stream_create 2",
                                         "stream_create 3",         "capture_begin 2",
                                         "module_function entry 1", "launch kern 2x1x1 128 0 on a stream",
                                         "capture_end 2",           "graph 4",
                                         "graph_launch 4 2",        "graph_launch 4 3",
                                         "graph_destroy 4",         "stream_destroy 3",
                                         "stream_destroy 2",        "module_unload 1"};
  EXPECT_EQ(api.log, want);
  EXPECT_EQ(api.live, 0);
}

TEST(Graph, ACaptureWhoseCodeThrowsIsEndedAndItsErrorSeen) {
  HostQueues api;
  runtime::Stream s(api);
  const std::string e = error_of([&] { runtime::Graph g(s, [] { throw Error("tiledist: the step's own error"); }); });
  EXPECT_NE(e.find("the step's own error"), std::string::npos) << e;
  EXPECT_FALSE(s.capturing());
  EXPECT_EQ(api.log, (std::vector<std::string>{"stream_create 1", "capture_begin 1", "capture_end 1", "graph 2",
                                               "graph_destroy 2"}));
  runtime::Graph again(s, [] {});  // (the stream captures again)
  EXPECT_EQ(api.live, 2);
}

TEST(Graph, AStreamOfAnotherRuntimeIsRefused) {
  HostQueues mine, theirs("OtherQueues");
  runtime::Stream s(mine), other(theirs);
  runtime::Graph g(s, [] {});
  const std::string e = error_of([&] { g.launch(other); });
  EXPECT_NE(e.find("a graph of HostQueues launched on a OtherQueues stream"), std::string::npos) << e;
}

TEST(Graph, ALibraryRunOnACapturingStreamIsRefusedUnlessItsStateIsOnTheDevice) {
  HostQueues api;
  runtime::Stream s(api);
  kernels::detail::RunStreams refusing, allowing;
  runtime::Graph g(s, [&] {
    const std::string e = error_of([&] { refusing.enter(&s, "ag_gemm"); });
    EXPECT_NE(e.find("ag_gemm: a run on a stream being captured into a graph"), std::string::npos) << e;
    const runtime::Stream& on = allowing.enter(&s, "gemm", true);
    EXPECT_EQ(&on, &s);
    allowing.leave(on, &s);  // (no event recorded: RunOrder is the graph launch's)
  });
  for (const auto& line : api.log) EXPECT_EQ(line.find("event"), std::string::npos) << line;
}

}  // namespace
}  // namespace tiledist
