// The README's one-shot all-gather in a program of its own, on the CPU backend: each rank (a
// process, started by tiledist-run) puts its chunk into every rank's symmetric heap and waits
// for every chunk, then checks each element it got against the formula its peer filled it from.
#include "all_gather.h"

#include <cstdio>

using namespace tiledist;

float input(int r, int i) { return float((r * 31 + i * 17) % 101) - 50.0f; }

int main() {
  static const KernelDef def("all_gather_example", all_gather, {"buf", "flags", "chunk"});
  const int n = world_size(), me = rank(), chunk = 1000;
  int wrong = 0;
  try {
    auto buf = symm_alloc<float>(size_t(n) * chunk);
    auto flags = symm_alloc<int32_t>(n);
    for (int i = 0; i < chunk; ++i) buf[size_t(me) * chunk + i] = input(me, i);
    for (int r = 0; r < n; ++r) flags[r] = 0;
    barrier_all();  // (every rank's flags zeroed before anyone signals)
    compile(def, {}, Target::host()).launch({n}, buf.data(), flags.data(), chunk);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < chunk; ++i) wrong += buf[size_t(r) * chunk + i] != input(r, i);
    barrier_all();  // (no rank frees its heap while a peer may still put into it)
  } catch (const Error& e) {
    std::fprintf(stderr, "all_gather: rank %d: %s\n", me, e.what());
    return 1;
  }
  std::printf("all_gather: rank %d/%d: %d x %d floats, %d wrong\n", me, n, n, chunk, wrong);
  return wrong == 0 ? 0 : 1;
}
