// RMSNorm over rows of bf16, with the residual added first where asked (kernels/transformer.h):
// two walks over the row in BLOCK-wide steps, the sum of squares, then the scaled row.
#include <type_traits>

#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class T>  // x's elements: bf16, or f32 (a GEMM's output)
void rmsnorm(tl::Ptr<T> x, tl::Ptr<bf16> residual, tl::Ptr<bf16> w, tl::Ptr<bf16> y, tl::Ptr<bf16> sum, tl::Int H,
             tl::Float eps, tl::Const<int> RESIDUAL, tl::Const<int> BLOCK) {
  auto base = tl::program_id(0).to(tl::int64) * H;
  auto cols = tl::arange(0, BLOCK);
  // The row's values, as the model holds them: x, or x + residual rounded to bf16.
  auto row = [&](const Tensor& c, const Tensor& m) {
    auto v = tl::load(x + base + c, m, 0.0f).to(tl::float32);
    if (std::is_same_v<T, float>) v = v.to(tl::bfloat16).to(tl::float32);  // (the model's activations are bf16)
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

const KernelDef& rmsnorm_kernel(ir::DType x) {
  static const std::vector<std::string> params = {"x", "residual", "w", "y", "sum", "H", "eps", "RESIDUAL", "BLOCK"};
  static const Constants defaults = {{"RESIDUAL", 0}, {"BLOCK", 1024}};
  static const KernelDef b16("rmsnorm", rmsnorm<bf16>, params, defaults);
  static const KernelDef f32("rmsnorm_f32", rmsnorm<float>, params, defaults);
  if (x != ir::DType::bf16 && x != ir::DType::f32)
    throw Error(str_cat("tiledist: rmsnorm: rows of ", ir::dtype_name(x), " (bf16 or f32)"));
  return x == ir::DType::bf16 ? b16 : f32;
}
TILEDIST_REGISTER(rmsnorm_kernel(ir::DType::bf16));
TILEDIST_REGISTER(rmsnorm_kernel(ir::DType::f32));

}  // namespace tiledist::kernels
