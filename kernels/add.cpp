// Vector add: the "hello world" of tile kernels.
#include "kernels/kernels.h"

namespace tiledist::kernels {

namespace {
void add(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto mask = offs < n;
  tl::store(out + offs, tl::load(x + offs, mask) + tl::load(y + offs, mask), mask);
}
}  // namespace

const KernelDef& add_kernel() {
  static const KernelDef def("add", add, {"x", "y", "out", "n", "BLOCK"}, {{"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(add_kernel());

}  // namespace tiledist::kernels
