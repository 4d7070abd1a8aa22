// Layer normalization over rows, walking each row in BLOCK-wide chunks (Triton's tutorial).
#include "kernels/kernels.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

void layernorm(tl::Ptr<float> x, tl::Ptr<float> w, tl::Ptr<float> b, tl::Ptr<float> y, tl::Int n_cols, tl::Float eps,
               tl::Const<int> BLOCK) {
  auto base = tl::program_id(0) * n_cols;
  auto cols = tl::arange(0, BLOCK);
  Tensor total = tl::for_range(0, n_cols, BLOCK, tl::zeros({BLOCK}, tl::float32), [&](Tensor off, Tensor acc) {
    auto c = off + cols;
    return acc + tl::load(x + base + c, c < n_cols, 0.0f);
  });
  auto mean = tl::sum(total, 0) / n_cols;
  Tensor sq = tl::for_range(0, n_cols, BLOCK, tl::zeros({BLOCK}, tl::float32), [&](Tensor off, Tensor acc) {
    auto c = off + cols;
    auto m = c < n_cols;
    auto d = tl::where(m, tl::load(x + base + c, m, 0.0f) - mean, 0.0f);
    return acc + d * d;
  });
  auto rstd = tl::rsqrt(tl::sum(sq, 0) / n_cols + eps);
  tl::for_range(0, n_cols, BLOCK, [&](Tensor off) {
    auto c = off + cols;
    auto m = c < n_cols;
    auto v = tl::load(x + base + c, m, 0.0f);
    tl::store(y + base + c, (v - mean) * rstd * tl::load(w + c, m) + tl::load(b + c, m), m);
  });
}
}  // namespace

const KernelDef& layernorm_kernel() {
  static const KernelDef def("layernorm", layernorm, {"x", "w", "b", "y", "n_cols", "eps", "BLOCK"}, {{"BLOCK", 256}});
  return def;
}
TILEDIST_REGISTER(layernorm_kernel());

}  // namespace tiledist::kernels
