// Expert-parallel dispatch and combine, low-latency mode (kernels/ep.h): no host
// synchronization, no count exchange; a rank's rows for an expert have a place of their own on
// the expert's rank (max_tokens rows per local expert and source), so a sender needs nobody's
// counts, and each (expert, source) count travels with its rows.
//
// Dispatch, per call (c, its half c % 2):
// 1. Where a token's row is split into chunks (few tokens: programs for every SM), moe_count
//    (the routing's) first: each slot's place among ours of its expert, so that the token's
//    programs agree. Else the send takes the places itself (one atomic of a tile a program).
// 2. ep_ll_send, programs [0, P) x chunks: up to KT tokens each (P >= tokens / KT), and a chunk
//    of their rows, read once (a streaming loop: the loads pipelined ahead of the stores) and
//    quantized (f8e4m3: a scale per 128 channels), stored into the place of each of its k slots
//    on the experts' ranks; then the program's (slot, chunk) pairs counted done for their
//    experts (one acq_rel atomic of a tile). Programs [P, P + E) of chunk 0: an expert each,
//    which counts our slots of it (reading every id), stores the count on the expert's rank
//    and adds kDone less its pairs to the expert's done count. Whichever add brings it to kDone
//    sets the signal word of (expert, us) on the expert's rank to c. No program waits for
//    another.
// 3. ep_ll_receive (one program; the hook): waits until every (local expert, source) word here
//    is c, reads the counts and builds the tile table over the runs.
// Combine: ep_ll_back, a program per (local expert, source) and chunk of the rows, stores each
// received row's result into the source's half of comb at the slot it came from; the group's
// last chunk (counted, acq_rel) sets the source's word for the expert to c; ep_ll_sum (the hook)
// waits for every expert's word and sums each token's slots.
//
// Why the halves suffice: a rank writes into a peer's half c % 2 during call c; the peer read
// that half last in call c - 2 (its rows by its GEMM and combine, its comb by its sum), and our
// call c began after our combine of c - 1 had every peer's rows back, which each peer sent after
// its own dispatch, GEMM and combine of c - 2 (queued before, on its stream).
#include <algorithm>
#include <bit>

#include "kernels/ep.h"
#include "kernels/ep_sum.h"
#include "kernels/moe.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

constexpr int kScan = 1024;  // ids an expert's program reads a step

template <class T>
void ep_ll_send(tl::Ptr<bf16> x, tl::Ptr<int32_t> ids, tl::Ptr<int32_t> place, tl::Ptr<int32_t> counts,
                tl::Ptr<int32_t> done, tl::Ptr<T> recv, tl::Ptr<float> scales, tl::Ptr<int32_t> src,
                tl::Ptr<int32_t> counts_in, tl::Ptr<int32_t> words, tl::Int tokens, tl::Int H, tl::Int HC, tl::Int El,
                tl::Int E, tl::Int max_tokens, tl::Int P, tl::Int placed, tl::Int call, tl::Const<int> TOPK,
                tl::Const<int> BH, tl::Const<int> KT) {
  constexpr bool kF8 = std::is_same_v<T, f8e4m3>;
  if (kF8 && (BH < 128 || BH % 128 != 0))
    throw Error(str_cat("tiledist: ep_ll_send_fp8: BH = ", BH.value(), ", whole 128-column blocks of the scales"));
  auto n = dist::num_ranks(), me = dist::rank();
  auto pid = tl::program_id(0), chunk = tl::program_id(1), chunks = tl::num_programs(1);
  auto half = call % 2;
  auto rows = El * n * max_tokens;  // a half's
  auto kb = (H + 127) / 128;
  auto counts_now = counts + half * E;  // (our slots of each expert so far: their places)
  const int tp = static_cast<int>(std::bit_ceil(unsigned(TOPK.value())));
  constexpr int kDone = 1 << 30;  // (an expert's done count once all its (slot, chunk) pairs are)
  // Expert e's rank, and the word (and count) of (e, us) there, this call's half.
  auto el = tl::maximum(El, 1);
  auto owner = [&](const Tensor& e) { return e / el; };
  auto word_of = [&](const Tensor& e) { return (half * El + e % el) * n + me; };
  // Expert e's rows, scales, sources and count are all on its rank (the caller acquired them
  // all): the signal word of (e, us) there set to `call` (a release), and e's done count zeroed
  // for the next run (nobody adds to it now).
  auto signal = [&](const Tensor& e) {
    dist::notify(words + word_of(e), owner(e), call);
    tl::atomic_xchg(done + e, 0, {}, {"relaxed", "gpu"});
  };
  tl::if_then(pid < P, [&] {
    // The program's (token, slot) pairs, a [KT * TP] tile (token pid + i P, slot j at i TP + j),
    // their experts, and their places: moe_count's (placed: rows split into chunks, whose
    // programs must agree), or taken here by one atomic of the tile (-1: an id outside the
    // experts, which goes nowhere).
    auto q = tl::arange(0, KT * tp);
    auto tq = pid + q / tp * P, jq = q % tp;
    auto mine = (jq < TOPK) & (tq < tokens);
    auto e_all = tl::load(ids + tq * TOPK + jq, mine, -1);
    auto in = (e_all >= 0) & (e_all < E);
    auto at_all = tl::if_then_else(
        placed > 0, [&] { return tl::Values{tl::load(place + tq * TOPK + jq, mine, -1)}; },
        [&] {
          auto got = tl::atomic_add(counts_now + tl::where(in, e_all, 0), 1, in, {"relaxed", "gpu"});
          auto at = tl::where(in, got, -1);
          tl::store(place + tq * TOPK + jq, at, mine);  // (for the combine)
          return tl::Values{at};
        })[0];
    tl::for_range(pid, tokens, P, [&](Tensor t) {       // (tokens pid, pid + P, ...: KT at most)
      std::vector<Tensor> ok, to, row;                  // each slot's: sent, its expert's rank, its row there
      std::vector<Tensor> codes, scale_at;              // (where its row's values and scales go)
      auto first = (t - pid) / tl::maximum(P, 1) * tp;  // (the token's pairs in the tile)
      for (int j = 0; j < TOPK; ++j) {
        auto pick = [&](const Tensor& v) { return tl::max(tl::where(q == first + j, v, -1), 0); };
        auto e = pick(e_all), at = pick(at_all);
        ok.push_back((at >= 0) & (at < max_tokens));  // (place -1: an id outside the experts)
        auto expert = tl::maximum(e, 0);
        to.push_back(owner(expert));
        row.push_back((half * rows + ((expert % el) * n + me) * max_tokens + at).to(tl::int64));
        auto peer = tl::where(ok.back(), to.back(), me);  // (a slot not sent: any rank's address will do)
        codes.push_back(dist::symm_at(recv, peer) + row.back() * H);
        if constexpr (kF8) scale_at.push_back(dist::symm_at(scales, peer) + row.back() * kb);
      }
      // f8e4m3: BH / 128 blocks a step, each row of a [BH / 128, 128] tile one block with its scale
      // (bf16: the [1, BH] row as it is). A streaming loop: its loads go ahead of its stores
      // (pipelined through shared memory), which write elsewhere.
      const int blocks = kF8 ? BH / 128 : 1, width = kF8 ? 128 : BH;
      auto r = tl::expand_dims(tl::arange(0, blocks), 1), c = tl::expand_dims(tl::arange(0, width), 0);
      // (3 stages, two tiles ahead: the pack's count and send 41 us on an H200, 2026-11-27; 44
      // with 4 stages, 45 with 6, 48 with 2)
      tl::LoopHints streaming;
      streaming.num_stages = 3;
      tl::for_range(
          chunk * HC, tl::minimum((chunk + 1) * HC, H), BH,
          [&](Tensor h0) {
            auto h = h0 + r * width + c;  // [blocks, width]
            auto x_h = tl::load(x + t.to(tl::int64) * H + h, h < H, 0.0f).to(tl::float32);
            Tensor v = x_h.to(tl::bfloat16), s;
            auto block = h0 / 128 + tl::arange(0, blocks);  // (f8: the scales' blocks)
            if constexpr (kF8) {                            // (reference::quantize_f8_row's rule)
              auto amax = tl::maximum(tl::max(tl::abs(x_h), 1), 1e-10f);
              s = amax / 448.0f;
              v = (x_h * tl::expand_dims(448.0f / amax, 1)).to(tl::float8e4m3);
            }
            for (int j = 0; j < TOPK; ++j)
              tl::if_then(ok[size_t(j)], [&] {
                tl::store(codes[size_t(j)] + h, v, h < H);
                if constexpr (kF8) tl::store(scale_at[size_t(j)] + block, s, block < kb);
              });
          },
          streaming);
      tl::if_then(chunk == 0, [&] {  // (each slot's source, for the combine)
        for (int j = 0; j < TOPK; ++j)
          tl::if_then(ok[size_t(j)],
                      [&] { tl::store(dist::symm_at(src, to[size_t(j)]) + row[size_t(j)], t * TOPK + j); });
      });
    });
    // Each slot's chunk counted done for its expert, the program's (token, slot) pairs at once
    // (one atomic of a [KT * TP] tile: its release of our stores is one round a program, not
    // one a slot or a token). An expert's count is done at kDone: its program (below) adds
    // kDone less its (slot, chunk) pairs, each pair 1, so the last add (whichever) makes it, and
    // that program sends the signal, for every program's rows (they released theirs before
    // their adds; the last acquired them all).
    auto before = tl::atomic_add(done + tl::where(in, e_all, 0), 1, in, {"acq_rel", "sys"});
    auto last = tl::where(in & (before == kDone - 1), 1, 0);
    tl::if_then(tl::max(last, 0) > 0, [&] {  // (rare: a program that completes an expert)
      tl::for_range(0, KT * tp, 1, [&](Tensor k) {
        tl::if_then(tl::max(tl::where(q == k, last, 0), 0) > 0,
                    [&] { signal(tl::max(tl::where(q == k, e_all, 0), 0)); });
      });
    });
  });
  // Programs past the tokens: an expert each, which counts our slots of it (every id read),
  // stores that count on the expert's rank and adds kDone less its (slot, chunk) pairs to its
  // done count: where it is the last to add (none of our slots picked it, or all are done), it
  // sends the signal. Each zeroes its count of the other half, for the next run (nothing here
  // waits for another program: the grid's programs may start in any order).
  tl::if_then((pid >= P) & (chunk == 0), [&] {
    auto e = pid - P;
    auto pairs = tokens * TOPK;
    auto n_e = tl::for_range(0, pairs, kScan, tl::scalar(0, tl::int32), [&](Tensor p0, Tensor sum) {
      auto p = p0 + tl::arange(0, kScan);
      return sum + tl::sum(tl::where(tl::load(ids + p, p < pairs, -1) == e, 1, 0), 0);
    });
    tl::store(dist::symm_at(counts_in, owner(e)) + word_of(e), tl::minimum(n_e, max_tokens));
    auto need = n_e * chunks;
    auto before = tl::atomic_add(done + e, kDone - need, {}, {"acq_rel", "sys"});  // (after the count's store)
    tl::if_then(before == need, [&] { signal(e); });
    tl::store(counts + (1 - half) * E + e, 0);
  });
}

void ep_ll_receive(tl::Ptr<int32_t> counts_in, tl::Ptr<int32_t> words, tl::Ptr<int32_t> recv_counts,
                   tl::Ptr<int32_t> tiles, tl::Int El, tl::Int max_tokens, tl::Int slots, tl::Int call,
                   tl::Const<int> BM, tl::Const<int> BG, tl::Const<int> BI, tl::Const<int> BS) {
  auto n = dist::num_ranks();
  auto groups = El * n, first = (call % 2) * El * n;
  auto arrived = dist::wait(words + first, groups, dist::Scope::sys, dist::Semantic::acquire, call);
  auto counts = tl::Ptr<int32_t>(dist::consume_token(counts_in, arrived).value()) + first;
  auto most = (max_tokens + (BM - 1)) / BM;  // (tiles of one group at most)
  // BG groups a step: their counts, their tiles' places (an exclusive sum over the step's
  // groups, as a [BG, BG] masked sum), and the entries, [BG, BI] at a time: a group to a row,
  // BI of its tiles to the columns.
  auto lower = tl::expand_dims(tl::arange(0, BG), 0) < tl::expand_dims(tl::arange(0, BG), 1);  // [i, j]: j < i
  auto total = tl::for_range(0, groups, BG, tl::scalar(0, tl::int32), [&](Tensor g0, Tensor before) {
    auto g = g0 + tl::arange(0, BG);
    auto in = g < groups;
    auto c = tl::load(counts + g, in, 0);
    tl::store(recv_counts + g, c, in);
    auto pieces = (c + (BM - 1)) / BM;
    auto at = before + tl::sum(tl::where(lower, tl::broadcast_to(tl::expand_dims(pieces, 0), {BG, BG}), 0), 1);
    auto row = [](Tensor v) { return tl::expand_dims(v, 1); };  // [BG] -> [BG, 1]
    auto base = row(g * max_tokens);
    tl::for_range(0, most, BI, [&](Tensor i0) {
      auto i = i0 + tl::expand_dims(tl::arange(0, BI), 0);  // [1, BI]
      auto m = row(in) & (i < row(pieces));
      auto entry = tiles + 1 + (row(at) + i) * 3;
      tl::store(entry, tl::broadcast_to(row(g / n), {BG, BI}), m);
      tl::store(entry + 1, base + i * BM, m);
      tl::store(entry + 2, base + tl::minimum((i + 1) * BM, row(c)), m);
    });
    return before + tl::sum(pieces, 0);
  });
  tl::store(tiles, total);
  tl::for_range(total * 3, slots * 3, BS, [&](Tensor k) {  // (slots past the count: empty tiles)
    auto q = k + tl::arange(0, BS);
    tl::store(tiles + 1 + q, tl::zeros({BS}, tl::int32), q < slots * 3);
  });
}

void ep_ll_back(tl::Ptr<bf16> y, tl::Ptr<int32_t> src, tl::Ptr<int32_t> recv_counts, tl::Ptr<bf16> comb,
                tl::Ptr<int32_t> done, tl::Ptr<int32_t> words, tl::Int El, tl::Int H, tl::Int HC, tl::Int max_tokens,
                tl::Int max_pairs, tl::Int call, tl::Const<int> BH) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto g = tl::program_id(0), chunk = tl::program_id(1);
  auto from = g % n, half = call % 2;
  auto base = g * max_tokens;
  tl::for_range(0, tl::load(recv_counts + g), 1, [&](Tensor r) {
    auto slot = tl::load(src + half * El * n * max_tokens + base + r);
    auto dst = dist::symm_at(comb, from) + (half * max_pairs + slot).to(tl::int64) * H;
    auto row = y + (base + r).to(tl::int64) * H;
    tl::for_range(chunk * HC, tl::minimum((chunk + 1) * HC, H), BH, [&](Tensor h0) {
      auto h = h0 + tl::arange(0, BH);
      tl::store(dst + h, tl::load(row + h, h < H, 0.0f), h < H);
    });
  });
  // The group's last chunk to be done (acq_rel: after every chunk's rows) sets the source's word.
  auto before = tl::atomic_add(done + g, 1, {}, {"acq_rel", "sys"});
  tl::if_then(before == tl::num_programs(1) - 1, [&] {
    dist::notify(words + half * El * n + me * El + g / n, from, call);  // (expert me * El + g / n's rows)
    tl::atomic_xchg(done + g, 0, {}, {"relaxed", "gpu"});               // (for the next run)
  });
}

void ep_ll_sum(tl::Ptr<bf16> comb, tl::Ptr<int32_t> words, tl::Ptr<int32_t> place, tl::Ptr<float> weights,
               tl::Ptr<bf16> out, tl::Int tokens, tl::Int H, tl::Int E, tl::Int max_tokens, tl::Int max_pairs,
               tl::Int call, tl::Const<int> TOPK, tl::Const<int> BH) {
  auto half = call % 2;
  auto arrived = dist::wait(words + half * E, E, dist::Scope::sys, dist::Semantic::acquire, call);
  auto rows = tl::Ptr<bf16>(dist::consume_token(comb, arrived).value()) + (half * max_pairs).to(tl::int64) * H;
  tl::if_then(tl::program_id(0) < tokens, [&] {  // (no tokens: one program, for the wait)
    auto h = tl::program_id(1) * BH + tl::arange(0, BH);
    detail::sum_slots(tl::Ptr<bf16>(rows.value()), place, weights, out, tl::program_id(0), h, H, max_tokens, TOPK);
  });
}
}  // namespace

const KernelDef& ep_ll_send_kernel(ir::DType rows) {
  static const std::vector<std::string> params = {
      "x", "ids", "place", "counts", "done",       "recv", "scales", "src",  "counts_in", "words", "tokens",
      "H", "HC",  "El",    "E",      "max_tokens", "P",    "placed", "call", "TOPK",      "BH",    "KT"};
  static const KernelDef bf16_def =
      KernelDef("ep_ll_send", ep_ll_send<bf16>, params, {{"TOPK", 2}, {"BH", 1024}, {"KT", 4}})
          .do_not_specialize({"call"});
  static const KernelDef f8_def =
      KernelDef("ep_ll_send_fp8", ep_ll_send<f8e4m3>, params, {{"TOPK", 2}, {"BH", 1024}, {"KT", 4}})
          .do_not_specialize({"call"});
  if (rows != ir::DType::bf16 && rows != ir::DType::f8e4m3)
    throw Error(str_cat("tiledist: ep_ll_send: rows of ", ir::dtype_name(rows), " (bf16, or f8e4m3 with scales)"));
  return rows == ir::DType::f8e4m3 ? f8_def : bf16_def;
}
const KernelDef& ep_ll_receive_kernel() {
  static const KernelDef def = KernelDef("ep_ll_receive", ep_ll_receive,
                                         {"counts_in", "words", "recv_counts", "tiles", "El", "max_tokens", "slots",
                                          "call", "BM", "BG", "BI", "BS"},
                                         {{"BM", 64}, {"BG", 64}, {"BI", 16}, {"BS", 256}})
                                   .do_not_specialize({"call"});
  return def;
}
const KernelDef& ep_ll_back_kernel() {
  static const KernelDef def = KernelDef("ep_ll_back", ep_ll_back,
                                         {"y", "src", "recv_counts", "comb", "done", "words", "El", "H", "HC",
                                          "max_tokens", "max_pairs", "call", "BH"},
                                         {{"BH", 1024}})
                                   .do_not_specialize({"call"});
  return def;
}
const KernelDef& ep_ll_sum_kernel() {
  static const KernelDef def = KernelDef("ep_ll_sum", ep_ll_sum,
                                         {"comb", "words", "place", "weights", "out", "tokens", "H", "E", "max_tokens",
                                          "max_pairs", "call", "TOPK", "BH"},
                                         {{"TOPK", 2}, {"BH", 1024}})
                                   .do_not_specialize({"call"});
  return def;
}
namespace {
constexpr int kKT = 4;  // the send's tokens a program at most
/// A program per item (token, or received group) and chunk of its row of H: {channels a chunk
/// (a multiple of bh), chunks}. Few items (decoding) split their rows, so that the grid has at
/// least `programs` programs where the rows allow.
std::pair<int64_t, int64_t> chunked(int64_t programs, int64_t items, int64_t H, int64_t bh) {
  const int64_t steps = std::max<int64_t>((H + bh - 1) / bh, 1);
  const int64_t want = std::clamp<int64_t>((programs + items - 1) / std::max<int64_t>(items, 1), 1, steps);
  const int64_t hc = (steps + want - 1) / want * bh;
  return {hc, std::max<int64_t>((H + hc - 1) / hc, 1)};
}
}  // namespace

TILEDIST_REGISTER(ep_ll_send_kernel(ir::DType::bf16));
TILEDIST_REGISTER(ep_ll_send_kernel(ir::DType::f8e4m3));
TILEDIST_REGISTER(ep_ll_receive_kernel());
TILEDIST_REGISTER(ep_ll_back_kernel());
TILEDIST_REGISTER(ep_ll_sum_kernel());

struct EpLowLatencyDispatch::State {
  Target target;
  int rank = 0, ranks = 1, topk = 1, bm = 64;
  int64_t max_tokens = 0, H = 0, E = 0, El = 0, rows = 0, slots = 0, max_pairs = 0;
  int bh = 1024, programs = 64;  // the send's channels a step; the programs it wants at least
  int64_t resident = 16;         // the send's programs for the tokens where they are many
  ir::DType dtype = ir::DType::f8e4m3;
  bool hook = false;
  int32_t calls = 0;
  int64_t tokens = 0;
  bool sent = false, received = false;  // the last run's
  bool sum_pending = false;             // its combine's rows sent, not yet summed (recv_hook)
  void* recv = nullptr;                 // symmetric [2, rows, H] of dtype
  float* scales = nullptr;              // symmetric [2, rows, cdiv(H, 128)] (f8e4m3)
  int32_t* src = nullptr;               // symmetric [2, rows]: each row's slot at its source (token * topk + j)
  int32_t* counts_in = nullptr;         // symmetric [2, El, ranks]: the rows of (local expert, source)
  int32_t* words = nullptr;             // symmetric [2, El, ranks]: the last call whose rows are here
  detail::Scratch<int32_t> counts, place, done, recv_counts, tiles;
  Kernel count, send, receive;
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  size_t elem() const { return dtype == ir::DType::f8e4m3 ? 1 : 2; }
  ~State() {
    streams.finish();
    for (void* p : {static_cast<void*>(words), static_cast<void*>(counts_in), static_cast<void*>(src),
                    static_cast<void*>(scales), recv})
      if (p) detail::symm_release(target, p);
  }
};

EpLowLatencyDispatch::EpLowLatencyDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts,
                                           int topk, Options options)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.rank = detail::world_rank(target);
  s.ranks = detail::world_ranks(target);
  const char* me = "tiledist: ep_low_latency_dispatch: ";
  if (max_tokens < 0 || hidden < 1 || experts < 1 || topk < 1)
    throw Error(str_cat(me, "max_tokens, hidden, experts, topk = ", max_tokens, ", ", hidden, ", ", experts, ", ", topk,
                        " (max_tokens >= 0, the others >= 1)"));
  if (topk > experts) throw Error(str_cat(me, "top-", topk, " of ", experts, " experts (top-k at most the experts)"));
  if (experts % s.ranks != 0)
    throw Error(str_cat(me, experts, " experts over ", s.ranks,
                        " ranks (each rank holds experts / ranks of them: a multiple of the ranks)"));
  if (options.dtype != ir::DType::bf16 && options.dtype != ir::DType::f8e4m3)
    throw Error(str_cat(me, "rows of ", ir::dtype_name(options.dtype), " (bf16, or f8e4m3 with scales)"));
  if (options.block_rows < 1) throw Error(str_cat(me, "block_rows = ", options.block_rows, " (>= 1)"));
  s.max_tokens = max_tokens, s.H = hidden, s.E = experts, s.El = experts / s.ranks, s.topk = topk;
  s.dtype = options.dtype, s.bm = options.block_rows, s.hook = options.recv_hook;
  s.rows = s.El * s.ranks * max_tokens;
  s.max_pairs = max_tokens * topk;
  s.slots = s.El * s.ranks * ((max_tokens + s.bm - 1) / s.bm);
  if (2 * s.rows > INT32_MAX || 3 * s.slots + 1 > INT32_MAX)
    throw Error(str_cat(me, s.El, " experts a rank of ", s.ranks, " ranks' ", max_tokens,
                        " tokens each: the receive rows (both halves) under 2^31"));
  const size_t rows = size_t(std::max<int64_t>(s.rows, 1)), kb = size_t((hidden + 127) / 128);
  const size_t groups = size_t(s.El * s.ranks);
  s.recv = detail::symm_zeroed(target, 2 * rows * size_t(hidden) * s.elem());
  s.scales = static_cast<float*>(detail::symm_zeroed(target, s.dtype == ir::DType::f8e4m3 ? 2 * rows * kb * 4 : 4));
  s.src = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * rows * 4));
  s.counts_in = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * groups * 4));
  s.words = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * groups * 4));
  const int64_t El = s.El, n = s.ranks, first = int64_t(s.rank) * s.El;
  detail::symm_label(target, s.words, 2 * groups * 4,
                     {"EpLowLatencyDispatch's signal words [2, local experts, ranks]", 4, [El, n, first](int64_t i) {
                        return str_cat("expert ", first + i / n % El, "'s rows from rank ", i % n, ", the ",
                                       i / (El * n) == 0 ? "even" : "odd", " calls' half");
                      }});
  barrier_all();  // no rank signals before every rank has zeroed its words
  s.counts = detail::Scratch<int32_t>(target, 2 * size_t(experts));  // (a half a call: ep_ll_send zeroes the other)
  s.place = detail::Scratch<int32_t>(target, size_t(std::max<int64_t>(s.max_pairs, 1)));
  s.done = detail::Scratch<int32_t>(target, size_t(experts));
  s.recv_counts = detail::Scratch<int32_t>(target, groups);
  s.tiles = detail::Scratch<int32_t>(target, size_t(1 + 3 * s.slots));
  s.count = compile(moe_count_kernel(), {{"BP", 1024}, {"C", 1}}, target);
  // (on the host 128 channels a step, so that the tests' rows split into chunks as a GPU's do)
  s.bh = s.gpu() ? 1024 : 128;
  s.programs = s.gpu() ? 4 * cuda::device().sms : 64;
  s.resident = s.gpu() ? 8 * cuda::device().sms : 16;
  s.send = compile(ep_ll_send_kernel(s.dtype), {{"TOPK", topk}, {"BH", s.bh}, {"KT", kKT}}, target);
  s.receive = compile(ep_ll_receive_kernel(), {{"BM", s.bm}}, target);
}

EpLowLatencyDispatch::~EpLowLatencyDispatch() = default;

void EpLowLatencyDispatch::run(const bf16* x, const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream) {
  State& s = *s_;
  if (tokens < 0 || tokens > s.max_tokens)
    throw Error(str_cat("tiledist: ep_low_latency_dispatch: ", tokens, " tokens on rank ", s.rank,
                        ", past the capacity of ", s.max_tokens, " tokens this EpLowLatencyDispatch was made for"));
  if (tokens > 0 && (!x || !topk_ids))
    throw Error("tiledist: ep_low_latency_dispatch: a null pointer among x and the top-k ids");
  if (s.hook && s.sent && !s.received)
    throw Error("tiledist: ep_low_latency_dispatch: run before the last run's receive() (Options::recv_hook)");
  if (s.sum_pending)
    throw Error(
        "tiledist: ep_low_latency_dispatch: run before its combine's receive() of the last run "
        "(Options::recv_hook: the sum would read rows the next run's may replace)");
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ep_low_latency_dispatch") : nullptr;
  const int32_t call = ++s.calls;
  s.tokens = tokens;
  s.sent = s.received = false;
  const int pairs = static_cast<int>(tokens * s.topk);
  const auto [hc, chunks] = chunked(s.programs, tokens, s.H, s.bh);
  // Rows split into chunks (few tokens): the slots' places taken first, by moe_count, so that a
  // token's programs agree; else the send takes them.
  const bool placed = chunks > 1;
  if (placed)
    detail::launch(s.count, on, Grid(std::max(1, (pairs + 1023) / 1024)), topk_ids, s.counts.data() + (call % 2) * s.E,
                   s.place.data(), pairs, static_cast<int>(s.E), pairs, static_cast<int>(s.E));
  // (programs for the tokens: KT tokens each at most, as many as the GPU holds at once where
  // the tokens are more, so that a program's release of its rows is one round for several)
  const int64_t P = std::max((tokens + kKT - 1) / kKT, std::min<int64_t>(tokens, s.resident));
  auto send = [&](auto* recv) {
    detail::launch(s.send, on, Grid(P + s.E, chunks), x, topk_ids, s.place.data(), s.counts.data(), s.done.data(), recv,
                   s.scales, s.src, s.counts_in, s.words, static_cast<int>(tokens), static_cast<int>(s.H),
                   static_cast<int>(hc), static_cast<int>(s.El), static_cast<int>(s.E), static_cast<int>(s.max_tokens),
                   static_cast<int>(P), static_cast<int>(placed), call);
  };
  if (s.dtype == ir::DType::f8e4m3)
    send(static_cast<f8e4m3*>(s.recv));
  else
    send(static_cast<bf16*>(s.recv));
  s.sent = true;
  if (on) s.streams.leave(*on, stream);
  if (!s.hook) receive(stream);
}

void EpLowLatencyDispatch::receive(const runtime::Stream* stream) {
  State& s = *s_;
  if (!s.sent || s.received)
    throw Error(
        str_cat("tiledist: ep_low_latency_dispatch: receive() ", s.sent ? "twice for one run" : "before any run"));
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ep_low_latency_dispatch") : nullptr;
  detail::launch(s.receive, on, Grid(1), static_cast<const int32_t*>(s.counts_in), static_cast<const int32_t*>(s.words),
                 s.recv_counts.data(), s.tiles.data(), static_cast<int>(s.El), static_cast<int>(s.max_tokens),
                 static_cast<int>(s.slots), s.calls);
  s.received = true;
  if (on) s.streams.leave(*on, stream);
}

const void* EpLowLatencyDispatch::recv() const {
  return static_cast<const char*>(s_->recv) + size_t(s_->calls % 2) * s_->rows * s_->H * s_->elem();
}
const float* EpLowLatencyDispatch::recv_scales() const {
  return s_->dtype == ir::DType::f8e4m3 ? s_->scales + size_t(s_->calls % 2) * s_->rows * ((s_->H + 127) / 128)
                                        : nullptr;
}
const int32_t* EpLowLatencyDispatch::recv_src() const { return s_->src + size_t(s_->calls % 2) * s_->rows; }
const int32_t* EpLowLatencyDispatch::recv_counts() const { return s_->recv_counts.data(); }
const int32_t* EpLowLatencyDispatch::tiles() const { return s_->tiles.data(); }
int64_t EpLowLatencyDispatch::slots() const { return s_->slots; }
int64_t EpLowLatencyDispatch::rows() const { return s_->rows; }
int64_t EpLowLatencyDispatch::local_experts() const { return s_->El; }
int EpLowLatencyDispatch::block_rows() const { return s_->bm; }
int64_t EpLowLatencyDispatch::hidden() const { return s_->H; }
int64_t EpLowLatencyDispatch::max_tokens() const { return s_->max_tokens; }
int EpLowLatencyDispatch::topk() const { return s_->topk; }

struct EpLowLatencyCombine::State {
  std::shared_ptr<EpLowLatencyDispatch::State> d;
  int64_t H = 0, bh = 1024;
  bf16* comb = nullptr;      // symmetric [2, max_pairs, H]
  int32_t* words = nullptr;  // symmetric [2, E]: the last call whose rows from expert e are here
  Kernel back, sum;
  detail::Scratch<int32_t> done;   // [El * ranks]: the back's chunks done, per group
  const float* weights = nullptr;  // (the run's, for receive())
  bf16* out = nullptr;
  int32_t sent = 0, summed = 0;  // the calls sent back, and summed
  detail::RunStreams streams;
  ~State() {
    streams.finish();
    if (words) detail::symm_release(d->target, words);
    if (comb) detail::symm_release(d->target, comb);
  }
};

EpLowLatencyCombine::EpLowLatencyCombine(const EpLowLatencyDispatch& dispatch, int64_t hidden)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.d = dispatch.s_;
  const EpLowLatencyDispatch::State& d = *s.d;
  if (hidden < 0) throw Error(str_cat("tiledist: ep_low_latency_combine: hidden = ", hidden, " (0: the dispatch's)"));
  s.H = hidden > 0 ? hidden : d.H;
  s.comb = static_cast<bf16*>(detail::symm_zeroed(d.target, 2 * size_t(std::max<int64_t>(d.max_pairs, 1)) * s.H * 2));
  s.words = static_cast<int32_t*>(detail::symm_zeroed(d.target, 2 * size_t(d.E) * 4));
  const int64_t E = d.E, El = d.El;
  detail::symm_label(d.target, s.words, 2 * size_t(d.E) * 4,
                     {"EpLowLatencyCombine's signal words [2, experts]", 4, [E, El](int64_t i) {
                        return str_cat("expert ", i % E, "'s rows back from rank ", i % E / std::max<int64_t>(El, 1),
                                       ", the ", i / E == 0 ? "even" : "odd", " calls' half");
                      }});
  barrier_all();  // no rank signals before every rank has zeroed its words
  s.back = compile(ep_ll_back_kernel(), {{"BH", d.bh}}, d.target);
  s.done = detail::Scratch<int32_t>(d.target, size_t(d.El * d.ranks));
  s.sum = compile(ep_ll_sum_kernel(), {{"TOPK", d.topk}, {"BH", s.bh}}, d.target);
}

EpLowLatencyCombine::~EpLowLatencyCombine() = default;

void EpLowLatencyCombine::run(const bf16* y, const float* topk_weights, bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  const EpLowLatencyDispatch::State& d = *s.d;
  if (!d.received)
    throw Error(d.calls == 0 ? "tiledist: ep_low_latency_combine: run before any run of its dispatch"
                             : "tiledist: ep_low_latency_combine: run before its dispatch's receive()");
  if (s.sent == d.calls) throw Error("tiledist: ep_low_latency_combine: a second run for one dispatch");
  if (!y || (d.tokens > 0 && (!topk_weights || !out)))
    throw Error("tiledist: ep_low_latency_combine: a null pointer among y, the top-k weights and out");
  const runtime::Stream* on = d.gpu() ? &s.streams.enter(stream, "ep_low_latency_combine") : nullptr;
  const auto [hc, chunks] = chunked(d.programs, d.El * d.ranks, s.H, d.bh);
  detail::launch(s.back, on, Grid(d.El * d.ranks, chunks), y, static_cast<const int32_t*>(d.src),
                 static_cast<const int32_t*>(d.recv_counts.data()), s.comb, s.done.data(), s.words,
                 static_cast<int>(d.El), static_cast<int>(s.H), static_cast<int>(hc), static_cast<int>(d.max_tokens),
                 static_cast<int>(d.max_pairs), d.calls);
  s.sent = d.calls, s.weights = topk_weights, s.out = out;
  s.d->sum_pending = true;
  if (on) s.streams.leave(*on, stream);
  if (!d.hook) receive(stream);
}

void EpLowLatencyCombine::receive(const runtime::Stream* stream) {
  State& s = *s_;
  const EpLowLatencyDispatch::State& d = *s.d;
  if (s.sent != d.calls || s.summed == s.sent)
    throw Error(str_cat("tiledist: ep_low_latency_combine: receive() ",
                        s.sent != d.calls ? "before the run" : "twice for one run"));
  const runtime::Stream* on = d.gpu() ? &s.streams.enter(stream, "ep_low_latency_combine") : nullptr;
  const int tokens = static_cast<int>(d.tokens);
  detail::launch(s.sum, on, Grid(std::max(1, tokens), (s.H + s.bh - 1) / s.bh), static_cast<const bf16*>(s.comb),
                 static_cast<const int32_t*>(s.words), static_cast<const int32_t*>(d.place.data()), s.weights, s.out,
                 tokens, static_cast<int>(s.H), static_cast<int>(d.E), static_cast<int>(d.max_tokens),
                 static_cast<int>(d.max_pairs), d.calls);
  s.summed = s.sent;
  s.d->sum_pending = false;
  if (on) s.streams.leave(*on, stream);
}

int64_t EpLowLatencyCombine::hidden() const { return s_->H; }

}  // namespace tiledist::kernels
