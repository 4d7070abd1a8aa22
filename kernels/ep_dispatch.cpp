// Expert-parallel dispatch, normal mode (kernels/ep.h): a run is three kernels on the stream
// and one look at the counts on the host.
// 1. moe_count (the routing's): each slot's place among our slots of its expert, and our count
//    of slots per expert.
// 2. ep_exchange: our counts stored into row `rank` of every rank's count matrix (a half per
//    call's parity), a flag set on each; then it waits for every rank's counts here.
// 3. The host reads the matrix (a synchronization): every rank's receive count, checked
//    against the capacity (every rank sees the same matrix: all throw alike, before any row is
//    sent), the row of our first slot of each expert on its rank (bases: the rows of that
//    expert from the ranks before us, after the rows of the experts before it), and our
//    experts' offsets.
// 4. ep_dispatch: a program per slot stores its token's row into the expert's rank's recv at
//    bases[e] + place, and the slot there into recv_src; the last program to finish sets our
//    flag on every rank and waits for every rank's here.
//
// Why no buffer is overwritten while a peer still reads it: a rank writes into a peer's recv
// only after the peer's counts of the same call have arrived, and the peer sends them only when
// its stream reaches the run, after the work queued before it (the grouped GEMM and the combine
// of the last call). The count matrix has a half per parity: a rank two calls ahead would have
// needed our counts of the call between, sent after we read the half it writes.
#include <algorithm>
#include <cstring>

#include "kernels/ep_state.h"
#include "kernels/moe.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

void ep_exchange(tl::Ptr<int32_t> counts, tl::Ptr<int32_t> matrix, tl::Ptr<int32_t> flags, tl::Int E, tl::Int call,
                 tl::Const<int> BE) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto row = ((call % 2) * n + me).to(tl::int64) * E;  // our row of this call's half
  tl::for_range(0, n, 1, [&](Tensor i) {
    auto to = (me + 1 + i) % n;
    auto there = dist::symm_at(matrix, to) + row;
    tl::for_range(0, E, BE, [&](Tensor e0) {
      auto e = e0 + tl::arange(0, BE);
      tl::store(there + e, tl::load(counts + e, e < E, 0), e < E);
    });
    dist::notify(flags + me, to, call);  // (release: the counts before it)
  });
  tl::for_range(0, E, BE, [&](Tensor e0) {  // (zero for the next run's moe_count)
    auto e = e0 + tl::arange(0, BE);
    tl::store(counts + e, tl::zeros({BE}, tl::int32), e < E);
  });
  tl::for_range(0, n, 1, [&](Tensor r) { shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call); });
}

void ep_dispatch(tl::Ptr<bf16> x, tl::Ptr<int32_t> ids, tl::Ptr<int32_t> place, tl::Ptr<int32_t> bases,
                 tl::Ptr<bf16> recv, tl::Ptr<int32_t> recv_src, tl::Ptr<int32_t> sent, tl::Ptr<int32_t> flags,
                 tl::Int pairs, tl::Int H, tl::Int El, tl::Int max_pairs, tl::Int call, tl::Const<int> TOPK,
                 tl::Const<int> BH) {
  auto me = dist::rank();
  auto p = tl::program_id(0);
  tl::if_then(p < pairs, [&] {
    auto e = tl::load(ids + p), at = tl::load(place + p);
    tl::if_then((e >= 0) & (at >= 0), [&] {  // (place -1: an id outside the experts)
      auto to = e / tl::maximum(El, 1);
      auto row = (tl::load(bases + e) + at).to(tl::int64);
      auto dst = dist::symm_at(recv, to) + row * H;
      auto src = x + (p / TOPK).to(tl::int64) * H;
      tl::for_range(0, H, BH, [&](Tensor h0) {
        auto h = h0 + tl::arange(0, BH);
        tl::store(dst + h, tl::load(src + h, h < H, 0.0f), h < H);
      });
      tl::store(dist::symm_at(recv_src, to) + row, me * max_pairs + p);
    });
  });
  detail::signal_and_wait_all(sent, flags, call);
}
}  // namespace

const KernelDef& ep_exchange_kernel() {
  static const KernelDef def =
      KernelDef("ep_exchange", ep_exchange, {"counts", "matrix", "flags", "E", "call", "BE"}, {{"BE", 256}})
          .do_not_specialize({"call"});
  return def;
}
const KernelDef& ep_dispatch_kernel() {
  static const KernelDef def = KernelDef("ep_dispatch", ep_dispatch,
                                         {"x", "ids", "place", "bases", "recv", "recv_src", "sent", "flags", "pairs",
                                          "H", "El", "max_pairs", "call", "TOPK", "BH"},
                                         {{"TOPK", 2}, {"BH", 1024}})
                                   .do_not_specialize({"call"});
  return def;
}
TILEDIST_REGISTER(ep_exchange_kernel());
TILEDIST_REGISTER(ep_dispatch_kernel());

EpDispatch::EpDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts, int topk,
                       Options options)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.rank = detail::world_rank(target);
  s.ranks = detail::world_ranks(target);
  if (max_tokens < 0 || hidden < 1 || experts < 1 || topk < 1)
    throw Error(str_cat("tiledist: ep_dispatch: max_tokens, hidden, experts, topk = ", max_tokens, ", ", hidden, ", ",
                        experts, ", ", topk, " (max_tokens >= 0, the others >= 1)"));
  if (topk > experts)
    throw Error(str_cat("tiledist: ep_dispatch: top-", topk, " of ", experts, " experts (top-k at most the experts)"));
  if (experts % s.ranks != 0)
    throw Error(str_cat("tiledist: ep_dispatch: ", experts, " experts over ", s.ranks,
                        " ranks (each rank holds experts / ranks of them: a multiple of the ranks)"));
  s.max_tokens = max_tokens, s.H = hidden, s.E = experts, s.El = experts / s.ranks, s.topk = topk;
  s.max_pairs = max_tokens * topk;
  const int64_t most = s.ranks * max_tokens * std::min<int64_t>(topk, s.El);
  s.capacity = options.recv_capacity > 0 ? options.recv_capacity : most;
  if (options.recv_capacity < 0)
    throw Error(str_cat("tiledist: ep_dispatch: recv_capacity = ", options.recv_capacity,
                        " (rows; 0: the most a run "
                        "can send)"));
  if (s.ranks * s.max_pairs > INT32_MAX || s.capacity > INT32_MAX)
    throw Error(str_cat("tiledist: ep_dispatch: ", s.ranks, " ranks of ", max_tokens, " tokens, top-", topk,
                        ", receive capacity ", s.capacity, ": the slots of all ranks and the rows under 2^31"));
  s.recv = static_cast<bf16*>(detail::symm_zeroed(target, size_t(std::max<int64_t>(s.capacity, 1)) * hidden * 2));
  s.recv_src = static_cast<int32_t*>(detail::symm_zeroed(target, size_t(std::max<int64_t>(s.capacity, 1)) * 4));
  s.matrix = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * experts * 4));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * 4));
  const int64_t n = s.ranks;
  detail::symm_label(target, s.flags, 2 * size_t(s.ranks) * 4,
                     {"EpDispatch's signal words [2, ranks]", 4,
                      [n](int64_t i) { return str_cat(i < n ? "the counts" : "the rows", " from rank ", i % n); }});
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.counts = detail::Scratch<int32_t>(target, size_t(experts));
  s.place = detail::Scratch<int32_t>(target, size_t(std::max<int64_t>(s.max_pairs, 1)));
  s.bases = detail::Scratch<int32_t>(target, size_t(experts));
  s.offs = detail::Scratch<int32_t>(target, size_t(s.El));
  s.sent = detail::Scratch<int32_t>(target, 1);
  s.host_matrix.assign(size_t(s.ranks) * experts, 0);
  s.host_bases.assign(size_t(experts), 0);
  s.host_offs.assign(size_t(s.El), 0);
  s.recv_counts.assign(size_t(s.El), 0);
  s.count = compile(moe_count_kernel(), {{"BP", 1024}, {"C", 1}}, target);
  s.exchange = compile(ep_exchange_kernel(), {}, target);
  s.dispatch = compile(ep_dispatch_kernel(), {{"TOPK", topk}}, target);
}

EpDispatch::~EpDispatch() = default;

void EpDispatch::run(const bf16* x, const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream) {
  State& s = *s_;
  if (tokens < 0 || tokens > s.max_tokens)
    throw Error(str_cat("tiledist: ep_dispatch: ", tokens, " tokens on rank ", s.rank, ", past the capacity of ",
                        s.max_tokens, " tokens this EpDispatch was made for"));
  if (tokens > 0 && (!x || !topk_ids)) throw Error("tiledist: ep_dispatch: a null pointer among x and the top-k ids");
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ep_dispatch") : nullptr;
  const int32_t call = ++s.calls;
  s.done = false;
  const int pairs = static_cast<int>(tokens * s.topk);
  int32_t* flags = s.flags;                 // [0, ranks): the counts'
  int32_t* data_flags = s.flags + s.ranks;  // [ranks, 2 ranks): the rows'
  detail::launch(s.count, on, Grid(std::max(1, (pairs + 1023) / 1024)), topk_ids, s.counts.data(), s.place.data(),
                 pairs, static_cast<int>(s.E), pairs, static_cast<int>(s.E));
  detail::launch(s.exchange, on, Grid(1), s.counts.data(), s.matrix, flags, static_cast<int>(s.E), call);
  // Every rank's counts, read here.
  const int32_t* half = s.matrix + size_t(call % 2) * s.ranks * s.E;
  if (on) {
    on->synchronize();  // (a peer's counts that never came: the wait's timeout, reported here)
    cuda::copy_to_host(s.host_matrix.data(), half, s.host_matrix.size() * 4);
  } else {
    std::memcpy(s.host_matrix.data(), half, s.host_matrix.size() * 4);
  }
  auto count = [&](int64_t from, int64_t e) { return int64_t{s.host_matrix[size_t(from * s.E + e)]}; };
  for (int d = 0; d < s.ranks; ++d) {  // (every rank checks every rank's: all throw alike)
    int64_t rows = 0;
    for (int64_t r = 0; r < s.ranks; ++r)
      for (int64_t e = d * s.El; e < (d + 1) * s.El; ++e) rows += count(r, e);
    if (rows > s.capacity) {
      if (on) s.streams.leave(*on, stream);
      throw Error(str_cat("tiledist: ep_dispatch: rank ", d, " would receive ", rows,
                          " rows for its experts, past the receive capacity of ", s.capacity,
                          " rows this EpDispatch was made with (Options::recv_capacity); nothing was sent"));
    }
  }
  for (int d = 0; d < s.ranks; ++d) {
    int64_t start = 0;  // the first row of expert e on rank d
    for (int64_t e = d * s.El; e < (d + 1) * s.El; ++e) {
      int64_t before = 0;  // (the ranks before us)
      for (int64_t r = 0; r < s.rank; ++r) before += count(r, e);
      s.host_bases[size_t(e)] = static_cast<int32_t>(start + before);
      int64_t all = 0;
      for (int64_t r = 0; r < s.ranks; ++r) all += count(r, e);
      if (d == s.rank) {
        s.recv_counts[size_t(e - d * s.El)] = all;
        s.host_offs[size_t(e - d * s.El)] = static_cast<int32_t>(start + all);
      }
      start += all;
    }
    if (d == s.rank) s.rows = start;
  }
  s.tokens = tokens;
  if (on) {
    cuda::copy_to_device(s.bases.data(), s.host_bases.data(), s.host_bases.size() * 4);
    cuda::copy_to_device(s.offs.data(), s.host_offs.data(), s.host_offs.size() * 4);
  } else {
    std::memcpy(s.bases.data(), s.host_bases.data(), s.host_bases.size() * 4);
    std::memcpy(s.offs.data(), s.host_offs.data(), s.host_offs.size() * 4);
  }
  detail::launch(s.dispatch, on, Grid(std::max(1, pairs)), x, topk_ids, s.place.data(), s.bases.data(), s.recv,
                 s.recv_src, s.sent.data(), data_flags, pairs, static_cast<int>(s.H), static_cast<int>(s.El),
                 static_cast<int>(s.max_pairs), call);
  if (on) s.streams.leave(*on, stream);
  s.done = true;
}

const bf16* EpDispatch::recv() const { return s_->recv; }
const int32_t* EpDispatch::recv_src() const { return s_->recv_src; }
const int32_t* EpDispatch::offs() const { return s_->offs.data(); }
const std::vector<int64_t>& EpDispatch::recv_counts() const { return s_->recv_counts; }
int64_t EpDispatch::recv_rows() const { return s_->rows; }
int64_t EpDispatch::recv_capacity() const { return s_->capacity; }
int64_t EpDispatch::local_experts() const { return s_->El; }
int64_t EpDispatch::experts() const { return s_->E; }
int64_t EpDispatch::hidden() const { return s_->H; }
int64_t EpDispatch::max_tokens() const { return s_->max_tokens; }
int EpDispatch::topk() const { return s_->topk; }
int64_t EpDispatch::tokens() const { return s_->tokens; }

}  // namespace tiledist::kernels
