// The README's first kernel, registered so that `tiledist-warmup kernels.cpp --target ...` can
// compile it into the cache ahead of a run (the program, vector_add.cpp, then finds it there).
#include "add.h"

using namespace tiledist;

// readme:begin add
void add(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto mask = offs < n;
  tl::store(out + offs, tl::load(x + offs, mask) + tl::load(y + offs, mask), mask);
}
// readme:end

const KernelDef& add_kernel() {
  static const KernelDef def("example_add", add, {"x", "y", "out", "n", "BLOCK"}, {{"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(add_kernel());
