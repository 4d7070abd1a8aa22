// The combines' last step (ep_combine_sum, ep_ll_sum): a token's k slots' rows, back from their
// experts, weighted by the slots' scores and summed.
#pragma once

#include "tiledist.h"

namespace tiledist::kernels::detail {

/// out[t, h] (bf16) for one token t and columns h ([BH]) = the sum over j < topk, in order, of
/// weights[t, j] * rows[t * topk + j, h] (f32; rows [., H] bf16), the slots whose place is
/// outside [0, limit) left out (dropped at the dispatch, or not sent). A program per token and
/// block of columns: the slots' places and scores are scalars, each row's block one vector.
inline void sum_slots(tl::Ptr<bf16> rows, tl::Ptr<int32_t> place, tl::Ptr<float> weights, tl::Ptr<bf16> out,
                      const tl::Tensor& t, const tl::Tensor& h, const tl::Tensor& H, const tl::Tensor& limit,
                      int topk) {
  auto sum = tl::zeros({h.shape()[0]}, tl::float32);
  for (int j = 0; j < topk; ++j) {
    auto slot = t * topk + j;
    auto at = tl::load(place + slot);
    auto sent = (at >= 0) & (at < limit);
    auto w = tl::where(sent, tl::load(weights + slot), 0.0f);
    auto row = tl::load(rows + slot.to(tl::int64) * H + h, sent & (h < H), 0.0f).to(tl::float32);
    sum = sum + row * w;
  }
  tl::store(out + t.to(tl::int64) * H + h, sum.to(tl::bfloat16), h < H);
}

}  // namespace tiledist::kernels::detail
