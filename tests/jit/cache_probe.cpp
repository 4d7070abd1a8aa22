// A second process for the cache tests: compiles and runs `add` with the cache in argv[1],
// checks the result, and prints the context's counters.
#include <cstdio>

#include "kernels/kernels.h"
#include "kernels/reference.h"

int main(int argc, char** argv) {
  using namespace tiledist;
  if (argc != 2) {
    std::fprintf(stderr, "usage: cache_probe CACHE_DIR\n");
    return 2;
  }
  jit::Context ctx(argv[1]);
  int n = 3001;
  auto x = reference::random_floats(n), y = reference::random_floats(n);
  std::vector<float> out(n), want;
  compile(kernels::add_kernel(), {{"BLOCK", 256}}, Target::host(), CompileOptions{}, ctx)
      .launch({tl::cdiv(n, 256)}, x, y, out, n);
  reference::add(x, y, want);
  auto s = ctx.stats();
  std::printf("compiles=%lld disk_hits=%lld disk_rejects=%lld ok=%d\n", (long long)s.compiles, (long long)s.disk_hits,
              (long long)s.disk_rejects, reference::rel_error(out, want) == 0.0 ? 1 : 0);
  return 0;
}
