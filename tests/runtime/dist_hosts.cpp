// A job on two hosts, as two tiledist-run launchers meeting at one address make it (here both
// on this machine, each with its own shared memory: two hosts to the world):
//   tiledist-run -n 2 --nodes 2 --node-rank I --master 127.0.0.1:PORT dist_hosts MODE
// for I = 0 and 1. ctest checks each launcher's exit status and the messages (tests/CMakeLists.txt).
// MODE: ok (the collectives across the hosts, and what cannot cross them refused with its
// reason), alloc_mismatch, rank_killed, failure, wait_timeout.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/world.h"
#include "tiledist.h"

namespace {

using namespace tiledist;

void notify_peer(tl::Ptr<int32_t> flag, tl::Int target) { dist::notify(flag, target, 1); }

/// Fails the job (exit 1) with `what` unless `ok`.
void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "dist_hosts: rank %d: %s\n", rank(), what.c_str());
  std::exit(1);
}

/// The message of the Error that `f` throws, or "" where it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int run(const std::string& mode) {
  runtime::World& w = runtime::World::get();
  const int me = rank(), n = world_size();
  if (mode == "ok") {
    expect(n == 4 && w.hosts() == 2, "a world of 4 ranks on 2 hosts");
    expect(w.local(me ^ 1) && !w.local(me ^ 2), "the rank beside it on its host, the others not");
    barrier_all();
    const std::vector<uint64_t> all = w.all_gather(uint64_t{100} + uint64_t(me), "the test's values");
    for (int r = 0; r < n; ++r)
      expect(all[size_t(r)] == uint64_t{100} + uint64_t(r), "every rank's value, in rank order");
    char word[16] = {};
    if (me == 0) std::snprintf(word, sizeof word, "from rank 0");
    w.broadcast(word, sizeof word, "the test's word");
    expect(std::string(word) == "from rank 0", "rank 0's word everywhere");
    // Symmetric allocations agree across the hosts; a peer of this host is reachable, one of the
    // other host is refused, naming it.
    auto flag = symm_alloc<int32_t>(4);
    flag[0] = 10 + me;
    barrier_all();
    expect(symm_at(flag.data(), me ^ 1)[0] == 10 + (me ^ 1), "the value of the rank beside it");
    const std::string far = error_of([&] { symm_at(flag.data(), me ^ 2); });
    expect(far.find(str_cat("rank ", me ^ 2, " is on another host")) != std::string::npos,
           "symm_at of the other host's rank refused: " + far);
    // The CPU backend's distributed kernels share one host's memory: refused, by name.
    const Kernel k = compile(KernelDef("notify_peer", notify_peer, {"flag", "target"}), {}, Target::host());
    const std::string launch = error_of([&] { k.launch({1}, flag.data(), me ^ 1); });
    expect(launch.find("kernel 'notify_peer' uses distributed ops on the CPU backend") != std::string::npos &&
               launch.find("on 2 hosts") != std::string::npos,
           "a distributed CPU kernel refused: " + launch);
    for (int i = 0; i < 20; ++i) barrier_all();
    symm_free(flag.data());
    std::printf("ok rank %d\n", me);
    return 0;
  }
  if (mode == "alloc_mismatch") {
    symm_alloc(me == 3 ? 2048 : 1024);
    return 0;
  }
  if (mode == "rank_killed") {
    barrier_all();
    if (me == 3) raise(SIGKILL);
    if (me == 2) sleep(60);  // (ended by its launcher once rank 3 dies)
    barrier_all();
    return 0;
  }
  if (mode == "failure") {
    barrier_all();
    if (me == 2) {
      w.report_failure("tiledist: the test's failure on rank 2");
      sleep(60);
    }
    barrier_all();
    return 0;
  }
  if (mode == "wait_timeout") {
    barrier_all();
    if (me == 3) sleep(5);  // alive, and late ($TILEDIST_WAIT_TIMEOUT=1)
    barrier_all();
    return 0;
  }
  std::fprintf(stderr, "dist_hosts: unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dist_hosts ok|alloc_mismatch|rank_killed|failure|wait_timeout\n");
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const tiledist::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
