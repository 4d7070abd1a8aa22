// runtime/stream.h on any machine: Stream, Event, Module and the copy-engine producers call their
// runtime (a GpuApi) and nothing else; each refuses a stream of another runtime, naming both; a
// kernel refuses a stream its backend's runtime cannot order; GpuApi::current() is CUDA's where
// a CUDA GPU is found, HIP's where an AMD GPU is, and otherwise says why neither is usable.
//
// The runtime here (tests/runtime/host_queues.h) keeps its streams in host memory and runs their
// work at once (the copies and signal words are real memory), and logs every call it is given.
#include "runtime/stream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "tests/jit/error_of.h"
#include "tests/jit/saved_env.h"
#include "tests/runtime/host_queues.h"
#include "tiledist.h"

namespace tiledist {
namespace {
using test_util::error_of;
using test_util::HostQueues;

TEST(Stream, StreamsAndEventsCallTheirRuntime) {
  HostQueues api;
  {
    runtime::Stream s(api);
    runtime::Event e(api, true);
    EXPECT_EQ(&s.api(), &api);
    e.record(&s);
    e.make_wait(s);
    e.record();  // the default stream
    e.synchronize();
    EXPECT_TRUE(e.done());
    EXPECT_TRUE(s.idle());
    s.synchronize();
    runtime::Event start(api, false);
    EXPECT_EQ(e.elapsed_since(start), 1.5f);
  }
  EXPECT_EQ(api.live, 0);
  const std::vector<std::string> want = {
      "stream_create 1",      "event_create timing 2", "event_record 2 1", "stream_wait_event 1 2", "event_record 2 0",
      "event_synchronize 2",  "event_done 2",          "stream_idle 1",    "stream_synchronize 1",  "event_create 3",
      "event_elapsed_ms 3 2", "event_destroy 3",       "event_destroy 2",  "stream_destroy 1"};
  EXPECT_EQ(api.log, want);
}

TEST(Stream, CopiesAndSignalWordsGoOnTheStreamsRuntime) {
  HostQueues api;
  runtime::Stream s(api);
  std::vector<float> src(100), dst(100, 0.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
  runtime::copy_async(dst.data(), src.data(), src.size() * sizeof(float), s);
  EXPECT_EQ(dst, src);
  runtime::copy_async(dst.data(), src.data(), 0, s);  // nothing to copy: the runtime is not called
  uint32_t word = 0;
  runtime::write_value(&word, 7, s);
  EXPECT_EQ(word, 7u);
  runtime::wait_value(&word, 7, s);
  EXPECT_NE(error_of([&] { runtime::wait_value(&word, 8, s); }).find("below the value"), std::string::npos);
  EXPECT_EQ(api.log, (std::vector<std::string>{"stream_create 1", "copy_async 1", "write_value 1", "wait_value 1",
                                               "wait_value 1"}));
}

TEST(Stream, AStreamOfAnotherRuntimeIsRefusedNamingBoth) {
  HostQueues mine, theirs("OtherQueues");
  runtime::Stream other(theirs);
  runtime::Event e(mine, false);
  const std::string err = error_of([&] { e.record(&other); });
  EXPECT_NE(err.find("an event of HostQueues was given a OtherQueues stream"), std::string::npos) << err;
  runtime::Module m(mine, "binary", "kern");
  const int grid[3] = {1, 1, 1};
  const std::string err2 = error_of([&] { m.launch("entry", grid, 128, 0, nullptr, &other); });
  EXPECT_NE(err2.find("kernel 'kern' of HostQueues was given a OtherQueues stream"), std::string::npos) << err2;
  for (const auto& line : mine.log) EXPECT_EQ(line.find("launch"), std::string::npos) << line;
}

TEST(Stream, AModuleLooksItsFunctionUpOnceAndOnlyGrowsItsSharedMemory) {
  HostQueues api;
  {
    runtime::Module m(api, "the binary", "kern");
    runtime::Stream s(api);
    const int grid[3] = {4, 2, 1};
    m.launch("entry", grid, 256, 1024, nullptr);
    m.launch("entry", grid, 256, 512, nullptr, &s);
    m.launch("entry", grid, 256, 2048, nullptr);
    m.launch("other", grid, 128, 2048, nullptr);  // another entry: looked up, allowed again
  }
  const std::vector<std::string> want = {"module_load the binary kern",
                                         "stream_create 2",
                                         "module_function entry 1",
                                         "allow_shared 1024",
                                         "launch kern 4x2x1 256 1024 on the default stream",
                                         "launch kern 4x2x1 256 512 on a stream",
                                         "allow_shared 2048",
                                         "launch kern 4x2x1 256 2048 on the default stream",
                                         "module_function other 1",
                                         "allow_shared 2048",
                                         "launch kern 4x2x1 128 2048 on the default stream",
                                         "stream_destroy 2",
                                         "module_unload 1"};
  EXPECT_EQ(api.log, want);
  EXPECT_EQ(api.live, 0);
}

TEST(Stream, AKernelRefusesAStreamItsRuntimeCannotOrder) {
  HostQueues api;
  runtime::Stream s(api);
  std::vector<float> x(256, 1.0f), y(256, 2.0f), out(256);
  Kernel host = compile(kernels::add_kernel(), {{"BLOCK", 256}}, Target::host());
  std::string e = error_of([&] { host.launch_on(s, {1}, x, y, out, 256); });
  EXPECT_NE(e.find("was compiled for the host: it has no HostQueues stream to run on"), std::string::npos) << e;
  Kernel nvidia = compile(kernels::add_kernel(), {{"BLOCK", 256}}, Target::cuda("sm_90a"));
  e = error_of([&] { nvidia.launch_on(s, {1}, x, y, out, 256); });
  EXPECT_NE(e.find("runs through CUDA: a HostQueues stream cannot order it"), std::string::npos) << e;
  Kernel amd = compile(kernels::add_kernel(), {{"BLOCK", 256}}, Target::amdgcn("gfx942"));
  e = error_of([&] { amd.launch_on(s, {1}, x, y, out, 256); });
  EXPECT_NE(e.find("runs through HIP: a HostQueues stream cannot order it"), std::string::npos) << e;
  EXPECT_EQ(api.log, std::vector<std::string>{"stream_create 1"});  // nothing was queued
}

TEST(Stream, TheCurrentRuntimeIsTheGpusOrSaysWhyNeither) {
  if (cuda::available()) {
    EXPECT_EQ(&runtime::GpuApi::current(), &cuda::api());
    runtime::Stream s;
    EXPECT_EQ(&s.api(), &cuda::api());
    return;
  }
  if (hip::available()) {
    EXPECT_EQ(&runtime::GpuApi::current(), &hip::api());
    return;
  }
  const std::string e = error_of([] { runtime::Stream s; });
  EXPECT_NE(e.find("no GPU runtime is usable here: CUDA: " + cuda::unavailable_reason() +
                   "; HIP: " + hip::unavailable_reason()),
            std::string::npos)
      << e;
  EXPECT_EQ(e, error_of([] { runtime::Event ev; }));
}

// Which GPU a process takes ($TILEDIST_DEVICE, else its local rank modulo the GPUs found): a
// value that is not a number, or no GPU at all, is an error naming it (atoi read 'one' as GPU 0,
// and no GPU divided by zero).
TEST(Devices, TheOrdinalComesFromTheEnvironmentOrSaysWhatIsWrong) {
  const test_util::SavedEnv restore({"TILEDIST_DEVICE", "TILEDIST_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
                                    false);  // (as they were, after the test)
  unsetenv("TILEDIST_DEVICE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  setenv("TILEDIST_LOCAL_RANK", "5", 1);
  EXPECT_EQ(runtime::device_ordinal(4, "GPU"), 1);
  EXPECT_EQ(error_of([] { runtime::device_ordinal(0, "CUDA device"); }), "tiledist: no CUDA device found");
  setenv("TILEDIST_LOCAL_RANK", "one", 1);
  EXPECT_EQ(error_of([] { runtime::device_ordinal(4, "GPU"); }),
            "tiledist: $TILEDIST_LOCAL_RANK = 'one' is not a device or rank number");
  setenv("TILEDIST_DEVICE", "3", 1);
  EXPECT_EQ(runtime::device_ordinal(4, "GPU"), 3);
  setenv("TILEDIST_DEVICE", "4", 1);
  EXPECT_EQ(error_of([] { runtime::device_ordinal(4, "GPU"); }), "tiledist: GPU 4 does not exist (4 found)");
  setenv("TILEDIST_DEVICE", "-1", 1);
  EXPECT_NE(error_of([] { runtime::device_ordinal(4, "GPU"); }).find("'-1' is not a device"), std::string::npos);
  unsetenv("TILEDIST_DEVICE");
  unsetenv("TILEDIST_LOCAL_RANK");
}

}  // namespace
}  // namespace tiledist
