// SwiGLU of a dense MLP's gate and up projections (kernels/transformer.h): a [BR, BI] tile of
// the rows a program, each element silu(gate) * up in f32, stored as bf16.
#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {

template <class T>  // gu's elements: f32 (a GEMM's output), or bf16
void swiglu(tl::Ptr<T> gu, tl::Ptr<bf16> act, tl::Int rows, tl::Int I, tl::Const<int> BR, tl::Const<int> BI) {
  auto row = tl::expand_dims(tl::program_id(0) * BR + tl::arange(0, BR), 1).to(tl::int64);
  auto i = tl::expand_dims(tl::program_id(1) * BI + tl::arange(0, BI), 0);
  auto mask = (row < rows) & (i < I);
  // (f32: rounded to bf16 first, as the model's projections store their outputs)
  auto g = tl::load(gu + row * (2 * I) + i, mask, 0.0f).to(tl::bfloat16).to(tl::float32);
  auto u = tl::load(gu + row * (2 * I) + I + i, mask, 0.0f).to(tl::bfloat16).to(tl::float32);
  tl::store(act + row * I + i, (g / (1.0f + tl::exp(-g)) * u).to(tl::bfloat16), mask);
}
}  // namespace

const KernelDef& swiglu_kernel(ir::DType gu) {
  static const std::vector<std::string> params = {"gu", "act", "rows", "I", "BR", "BI"};
  static const Constants defaults = {{"BR", 16}, {"BI", 256}};
  static const KernelDef f32("swiglu", swiglu<float>, params, defaults);
  static const KernelDef b16("swiglu_bf16", swiglu<bf16>, params, defaults);
  if (gu != ir::DType::bf16 && gu != ir::DType::f32)
    throw Error(str_cat("tiledist: swiglu: gate and up projections of ", ir::dtype_name(gu), " (f32 or bf16)"));
  return gu == ir::DType::f32 ? f32 : b16;
}
TILEDIST_REGISTER(swiglu_kernel(ir::DType::f32));
TILEDIST_REGISTER(swiglu_kernel(ir::DType::bf16));

}  // namespace tiledist::kernels
