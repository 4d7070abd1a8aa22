// A decoder's keys and values stored into its KV cache (kernels/transformer.h): a program per
// token, its heads' rows copied to the token's row of its sequence, and the sequence's length
// set after its last token.
#include "kernels/transformer.h"

namespace tiledist::kernels {

namespace {

void kv_append(tl::Ptr<bf16> k, tl::Ptr<bf16> v, tl::Ptr<int32_t> pos, tl::Ptr<bf16> k_cache, tl::Ptr<bf16> v_cache,
               tl::Ptr<int32_t> lens, tl::Int T, tl::Int S, tl::Int max_len, tl::Int HK, tl::Const<int> D) {
  auto t = tl::program_id(0);
  auto b = t / S;
  auto p = tl::load(pos + t);
  auto d = tl::arange(0, D);
  auto inside = (t < T) & (p >= 0) & (p < max_len);
  tl::if_then(inside, [&] {
    tl::for_range(0, HK, 1, [&](tl::Tensor h) {
      auto from = (t * HK + h).to(tl::int64) * D + d;
      auto to = ((b * max_len + p).to(tl::int64) * HK + h) * D + d;
      tl::store(k_cache + to, tl::load(k + from));
      tl::store(v_cache + to, tl::load(v + from));
    });
    tl::if_then(t % S == S - 1, [&] { tl::store(lens + b, p + 1); });
  });
}
}  // namespace

const KernelDef& kv_append_kernel() {
  static const KernelDef def("kv_append", kv_append,
                             {"k", "v", "pos", "k_cache", "v_cache", "lens", "T", "S", "max_len", "HK", "D"},
                             {{"D", 128}});
  return def;
}
TILEDIST_REGISTER(kv_append_kernel());

}  // namespace tiledist::kernels
