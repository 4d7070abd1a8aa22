// Fused row-wise softmax: one program per row, the row held in one block.
#include <cmath>

#include "kernels/kernels.h"

namespace tiledist::kernels {

namespace {
void softmax(tl::Ptr<float> in, tl::Ptr<float> out, tl::Int n_cols, tl::Int stride, tl::Const<int> BLOCK) {
  auto row = tl::program_id(0);
  auto cols = tl::arange(0, BLOCK);
  auto mask = cols < n_cols;
  auto x = tl::load(in + row * stride + cols, mask, -INFINITY);
  auto num = tl::exp(x - tl::max(x, 0));
  tl::store(out + row * stride + cols, num / tl::sum(num, 0), mask);
}
}  // namespace

const KernelDef& softmax_kernel() {
  static const KernelDef def("softmax", softmax, {"in", "out", "n_cols", "stride", "BLOCK"}, {{"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(softmax_kernel());

}  // namespace tiledist::kernels
