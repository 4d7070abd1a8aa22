// The queries' and keys' per-head RMSNorm and rotary embedding (kernels/transformer.h): a
// program per (token, head), the head's two halves as two [D / 2] tiles, so that each element
// meets its partner in the same thread.
#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class E>  // qkv's elements: bf16, or f32 (a GEMM's output)
void qk_norm_rope(tl::Ptr<E> qkv, tl::Ptr<int32_t> pos, tl::Ptr<bf16> q_norm, tl::Ptr<bf16> k_norm, tl::Ptr<bf16> q,
                  tl::Ptr<bf16> k, tl::Ptr<bf16> v, tl::Int T, tl::Int HQ, tl::Int HK, tl::Float eps,
                  tl::Float log2_theta, tl::Const<int> D, tl::Const<int> NORM) {
  if (D.value() < 2 || (D.value() & (D.value() - 1)))
    throw Error(str_cat("tiledist: qk_norm_rope: D = ", D.value(), " (an even power of two)"));
  const int half = D / 2;
  auto t = tl::program_id(0), h = tl::program_id(1);
  (void)T;
  auto heads = HQ + 2 * HK;
  auto src = qkv + (t.to(tl::int64) * heads + h) * D;
  auto i = tl::arange(0, half);
  // (f32: rounded to bf16 first, as the model's projection stores its output)
  auto lo = tl::load(src + i).to(tl::bfloat16).to(tl::float32),
       hi = tl::load(src + half + i).to(tl::bfloat16).to(tl::float32);
  tl::if_then(h >= HQ + HK, [&] {  // a value head: copied
    auto to = v + (t.to(tl::int64) * HK + (h - HQ - HK)) * D;
    tl::store(to + i, lo.to(tl::bfloat16));
    tl::store(to + half + i, hi.to(tl::bfloat16));
  });
  // A query or key head into `to`, RMSNorm'ed with `norm`'s weights first.
  auto rotate = [&](const Tensor& to, tl::Ptr<bf16> norm) {
    Tensor a = lo, b = hi;
    if (NORM) {
      auto rstd = tl::rsqrt((tl::sum(lo * lo, 0) + tl::sum(hi * hi, 0)) / float(D.value()) + eps);
      // (rounded to bf16 after the norm, as the model's RMSNorm stores its output)
      a = (lo * rstd * tl::load(norm + i).to(tl::float32)).to(tl::bfloat16).to(tl::float32);
      b = (hi * rstd * tl::load(norm + half + i).to(tl::float32)).to(tl::bfloat16).to(tl::float32);
    }
    auto inv_freq = tl::exp2(-(i.to(tl::float32) * (2.0f / float(D.value()))) * log2_theta);
    auto angle = tl::load(pos + t).to(tl::float32) * inv_freq;
    auto c = tl::cos(angle), s = tl::sin(angle);
    tl::store(to + i, (a * c - b * s).to(tl::bfloat16));
    tl::store(to + half + i, (b * c + a * s).to(tl::bfloat16));
  };
  tl::if_then(h < HQ, [&] { rotate(q + (t.to(tl::int64) * HQ + h) * D, q_norm); });
  tl::if_then((h >= HQ) & (h < HQ + HK), [&] { rotate(k + (t.to(tl::int64) * HK + (h - HQ)) * D, k_norm); });
}
}  // namespace

const KernelDef& qk_norm_rope_kernel(ir::DType qkv) {
  static const std::vector<std::string> params = {"qkv", "pos", "q_norm", "k_norm", "q",          "k", "v",
                                                  "T",   "HQ",  "HK",     "eps",    "log2_theta", "D", "NORM"};
  static const Constants defaults = {{"D", 128}, {"NORM", 1}};
  static const KernelDef b16("qk_norm_rope", qk_norm_rope<bf16>, params, defaults);
  static const KernelDef f32("qk_norm_rope_f32", qk_norm_rope<float>, params, defaults);
  if (qkv != ir::DType::bf16 && qkv != ir::DType::f32)
    throw Error(str_cat("tiledist: qk_norm_rope: a QKV output of ", ir::dtype_name(qkv), " (bf16 or f32)"));
  return qkv == ir::DType::bf16 ? b16 : f32;
}
TILEDIST_REGISTER(qk_norm_rope_kernel(ir::DType::bf16));
TILEDIST_REGISTER(qk_norm_rope_kernel(ir::DType::f32));

}  // namespace tiledist::kernels
