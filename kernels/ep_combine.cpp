// Expert-parallel combine, normal mode (kernels/ep.h): the rows computed for the rows an
// EpDispatch received go back to their sources, and each source sums its tokens' rows.
// 1. ep_combine: a program per received row stores it into its source's comb at the slot it
//    came from (recv_src); the last program to finish sets our flag on every rank and waits
//    for every rank's here.
// 2. ep_combine_sum: each token's k slots of comb, weighted by their top-k scores, summed in
//    f32 in the order of the slots (the same bits whichever rank computed them), one rounding.
// A peer writes into our comb only after its dispatch of the same call, which waited for our
// counts of it: sent once our stream had done the combine of the call before.
#include <algorithm>

#include "kernels/ep_state.h"
#include "kernels/ep_sum.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

void ep_combine(tl::Ptr<bf16> y, tl::Ptr<int32_t> recv_src, tl::Ptr<bf16> comb, tl::Ptr<int32_t> sent,
                tl::Ptr<int32_t> flags, tl::Int rows, tl::Int H, tl::Int max_pairs, tl::Int call, tl::Const<int> BH) {
  auto r = tl::program_id(0);
  tl::if_then(r < rows, [&] {
    auto from = tl::load(recv_src + r);
    auto to = from / tl::maximum(max_pairs, 1), slot = from % tl::maximum(max_pairs, 1);
    auto dst = dist::symm_at(comb, to) + slot.to(tl::int64) * H;
    auto src = y + r.to(tl::int64) * H;
    tl::for_range(0, H, BH, [&](Tensor h0) {
      auto h = h0 + tl::arange(0, BH);
      tl::store(dst + h, tl::load(src + h, h < H, 0.0f), h < H);
    });
  });
  detail::signal_and_wait_all(sent, flags, call);
}

void ep_combine_sum(tl::Ptr<bf16> comb, tl::Ptr<int32_t> place, tl::Ptr<float> weights, tl::Ptr<bf16> out, tl::Int H,
                    tl::Const<int> TOPK, tl::Const<int> BH) {
  auto h = tl::program_id(1) * BH + tl::arange(0, BH);
  detail::sum_slots(comb, place, weights, out, tl::program_id(0), h, H, tl::scalar(INT32_MAX, tl::int32), TOPK);
}
}  // namespace

const KernelDef& ep_combine_kernel() {
  static const KernelDef def =
      KernelDef("ep_combine", ep_combine,
                {"y", "recv_src", "comb", "sent", "flags", "rows", "H", "max_pairs", "call", "BH"}, {{"BH", 1024}})
          .do_not_specialize({"call"});
  return def;
}
const KernelDef& ep_combine_sum_kernel() {
  static const KernelDef def("ep_combine_sum", ep_combine_sum, {"comb", "place", "weights", "out", "H", "TOPK", "BH"},
                             {{"TOPK", 2}, {"BH", 1024}});
  return def;
}
TILEDIST_REGISTER(ep_combine_kernel());
TILEDIST_REGISTER(ep_combine_sum_kernel());

struct EpCombine::State {
  std::shared_ptr<EpDispatch::State> d;  // the dispatch's (its layout, its last run's slots)
  int64_t H = 0;
  bf16* comb = nullptr;      // symmetric [max_pairs, H]: our slots' rows, back from their experts
  int32_t* flags = nullptr;  // symmetric [ranks]: the last call whose rows from rank r are here
  detail::Scratch<int32_t> sent;
  Kernel combine, sum;
  int64_t bh = 1024;
  int32_t combined = 0;  // the dispatch's last call combined
  detail::RunStreams streams;
  ~State() {
    streams.finish();
    if (flags) detail::symm_release(d->target, flags);
    if (comb) detail::symm_release(d->target, comb);
  }
};

EpCombine::EpCombine(const EpDispatch& dispatch, int64_t hidden) : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.d = dispatch.s_;
  const EpDispatch::State& d = *s.d;
  s.H = hidden > 0 ? hidden : d.H;
  if (hidden < 0) throw Error(str_cat("tiledist: ep_combine: hidden = ", hidden, " (0: the dispatch's)"));
  s.comb = static_cast<bf16*>(detail::symm_zeroed(d.target, size_t(std::max<int64_t>(d.max_pairs, 1)) * s.H * 2));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(d.target, size_t(d.ranks) * 4));
  detail::symm_label(d.target, s.flags, size_t(d.ranks) * 4, {"EpCombine's signal words [ranks]", 4, [](int64_t i) {
                                                                return str_cat("the rows back from rank ", i);
                                                              }});
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.sent = detail::Scratch<int32_t>(d.target, 1);
  s.combine = compile(ep_combine_kernel(), {}, d.target);
  s.sum = compile(ep_combine_sum_kernel(), {{"TOPK", d.topk}, {"BH", s.bh}}, d.target);
}

EpCombine::~EpCombine() = default;

void EpCombine::run(const bf16* y, const float* topk_weights, bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  const EpDispatch::State& d = *s.d;
  if (!d.done)
    throw Error(d.calls == 0 ? "tiledist: ep_combine: run before any run of its EpDispatch"
                             : "tiledist: ep_combine: its EpDispatch's last run threw: nothing to send back");
  if (s.combined == d.calls)
    throw Error("tiledist: ep_combine: a second run for one run of its EpDispatch (its rows went back already)");
  if ((d.rows > 0 && !y) || (d.tokens > 0 && (!topk_weights || !out)))
    throw Error("tiledist: ep_combine: a null pointer among y, the top-k weights and out");
  const runtime::Stream* on = d.gpu() ? &s.streams.enter(stream, "ep_combine") : nullptr;
  const int rows = static_cast<int>(d.rows), tokens = static_cast<int>(d.tokens);
  detail::launch(s.combine, on, Grid(std::max(1, rows)), y, d.recv_src, s.comb, s.sent.data(), s.flags, rows,
                 static_cast<int>(s.H), static_cast<int>(d.max_pairs), d.calls);
  if (tokens > 0)
    detail::launch(s.sum, on, Grid{tokens, static_cast<int>((s.H + s.bh - 1) / s.bh)}, static_cast<const bf16*>(s.comb),
                   static_cast<const int32_t*>(d.place.data()), topk_weights, out, static_cast<int>(s.H));
  s.combined = d.calls;
  if (on) s.streams.leave(*on, stream);
}

int64_t EpCombine::hidden() const { return s_->H; }

}  // namespace tiledist::kernels
