// bf16 widened to f32 (kernels/transformer.h): a block of elements a program.
#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {
void bf16_to_f32(tl::Ptr<bf16> x, tl::Ptr<float> y, tl::Int n, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0).to(tl::int64) * BLOCK + tl::arange(0, BLOCK);
  tl::store(y + i, tl::load(x + i, i < n, 0.0f).to(tl::float32), i < n);
}
}  // namespace

const KernelDef& bf16_to_f32_kernel() {
  static const KernelDef def("bf16_to_f32", bf16_to_f32, {"x", "y", "n", "BLOCK"}, {{"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(bf16_to_f32_kernel());

}  // namespace tiledist::kernels
