// RMSNorm over rows of bf16, with the residual added first where asked (kernels/transformer.h):
// two walks over the row in BLOCK-wide steps, the sum of squares, then the scaled row.
#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

void rmsnorm(tl::Ptr<bf16> x, tl::Ptr<bf16> residual, tl::Ptr<bf16> w, tl::Ptr<bf16> y, tl::Ptr<bf16> sum, tl::Int H,
             tl::Float eps, tl::Const<int> RESIDUAL, tl::Const<int> BLOCK) {
  auto base = tl::program_id(0).to(tl::int64) * H;
  auto cols = tl::arange(0, BLOCK);
  // The row's values, as the model holds them: x, or x + residual rounded to bf16.
  auto row = [&](const Tensor& c, const Tensor& m) {
    auto v = tl::load(x + base + c, m, 0.0f).to(tl::float32);
    if (RESIDUAL) v = (v + tl::load(residual + base + c, m, 0.0f).to(tl::float32)).to(tl::bfloat16).to(tl::float32);
    return v;
  };
  auto squares = tl::for_range(0, H, BLOCK, tl::zeros({BLOCK}, tl::float32), [&](Tensor off, Tensor acc) {
    auto c = off + cols;
    auto m = c < H;
    auto v = row(c, m);
    if (RESIDUAL) tl::store(sum + base + c, v.to(tl::bfloat16), m);
    return acc + v * v;
  });
  auto rstd = tl::rsqrt(tl::sum(squares, 0) / H.to(tl::float32) + eps);
  tl::for_range(0, H, BLOCK, [&](Tensor off) {
    auto c = off + cols;
    auto m = c < H;
    auto v = row(c, m);  // (read again, not from `sum`: no thread reads another's store)
    tl::store(y + base + c, (v * rstd * tl::load(w + c, m, 0.0f).to(tl::float32)).to(tl::bfloat16), m);
  });
}
}  // namespace

const KernelDef& rmsnorm_kernel() {
  static const KernelDef def("rmsnorm", rmsnorm, {"x", "residual", "w", "y", "sum", "H", "eps", "RESIDUAL", "BLOCK"},
                             {{"RESIDUAL", 0}, {"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(rmsnorm_kernel());

}  // namespace tiledist::kernels
