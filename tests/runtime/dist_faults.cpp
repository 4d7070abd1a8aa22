// Faults that must end a distributed job loudly and in bounded time. Run as
// `tiledist-run -n 2 dist_faults MODE`; ctest checks the exit status and the message.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "kernels/ep.h"
#include "tiledist.h"

namespace {

// The SHMEM runtime these tests exercise is the CPU one: compile for the host even where a GPU
// would be the default target.
tiledist::Kernel host_compile(const tiledist::KernelDef& def, const tiledist::Constants& constants = {}) {
  return tiledist::compile(def, constants, tiledist::Target::host());
}
using namespace tiledist;

void never_signaled(tl::Ptr<int32_t> flag) { dist::wait(flag, 1); }

void bad_rank(tl::Ptr<int32_t> flag, tl::Int target) { dist::notify(flag, target, 1); }

int run(const std::string& mode) {
  if (mode == "wait_timeout") {
    // Nobody ever signals: the wait ends with the kernel, program, address and expected value.
    auto flag = symm_alloc<int32_t>(1);
    flag[0] = 0;
    barrier_all();
    if (rank() == 0)
      host_compile(KernelDef("never_signaled", never_signaled, {"flag"})).launch({1}, flag.data());
    else
      sleep(3);  // alive, but never signals
    return 0;
  }
  if (mode == "rank_killed") {
    // Rank 1 dies while rank 0 waits for its signal.
    auto flag = symm_alloc<int32_t>(1);
    flag[0] = 0;
    barrier_all();
    if (rank() == 1) {
      usleep(200000);
      raise(SIGKILL);
    }
    host_compile(KernelDef("never_signaled", never_signaled, {"flag"})).launch({1}, flag.data());
    return 0;
  }
  if (mode == "bad_rank") {
    auto flag = symm_alloc<int32_t>(1);
    host_compile(KernelDef("bad_rank", bad_rank, {"flag", "target"})).launch({1}, flag.data(), world_size() + 3);
    return 0;
  }
  if (mode == "not_symmetric") {
    std::vector<int32_t> local(1);
    host_compile(KernelDef("bad_rank", bad_rank, {"flag", "target"})).launch({1}, local.data(), 0);
    return 0;
  }
  if (mode == "alloc_mismatch") {
    symm_alloc(rank() == 0 ? 1024 : 2048);
    return 0;
  }
  if (mode == "ep_peer_missing") {
    // Rank 1 makes the dispatch object but never runs it: rank 0's receive gives up on rank 1's
    // word (word g = local expert * ranks + source of its signal words: word 1, from rank 1).
    kernels::EpLowLatencyDispatch dispatch(Target::host(), 4, 16, 2, 1, {ir::DType::bf16, 64, false});
    std::vector<bf16> x(size_t{64}, bf16(1.0f));  // (4 tokens of 16)
    std::vector<int32_t> ids = {0, 1, 0, 1};
    if (rank() == 0)
      dispatch.run(x.data(), ids.data(), 4);
    else
      sleep(3);  // alive, but never sends
    return 0;
  }
  std::fprintf(stderr, "dist_faults: unknown mode %s\n", mode.c_str());
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    return run(argv[1]);
  } catch (const tiledist::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
