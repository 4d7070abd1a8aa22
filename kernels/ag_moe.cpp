// AllGather + MoE grouped GEMM, overlapped (tensor-parallel experts: every rank holds a slice of
// every expert's weights, and the tokens of every rank go through them). Each rank's tokens and
// top-k ids are gathered into every rank's copy of the batch, the way AgGemm gathers rows (the
// copy engine; memcpy on the host), the ids first: once every rank's ids are here the routing
// sorts the batch's slots into BM-row tiles, and the GEMM starts, each tile's gather waiting for
// the tokens of the ranks its rows come from. The slots are sorted by (rank, expert) (MoeRouting,
// a segment per rank: a tile's rows all come from one rank; the programs take our own rank's
// tiles first) where each rank's rows of an expert fill its tiles well, else by expert alone
// (one segment: a tile's rows from any ranks, but each expert padded to BM once, not once a
// rank: with 32 rows of an expert a rank, as DeepSeek-V3's 256 experts at 4096 tokens over 4
// ranks, 128-row tiles a rank did 2.7 times the work; moe_segments says which).
//
// The GEMM is vLLM's fused_moe: a program's tile reads its expert and rows from the table and
// gathers its tokens' rows of A through sorted_ids (token = pair / TOPK), W [E, N, K] seen as
// one 2-D tensor of E * N rows (the expert's rows from expert * N), C in the sorted order.
//
// Calls alternate between two gathered buffers and the signal words only grow, as in AgGemm (its
// header says why a rank writes call k+1 into a peer's buffer only once the peer is done with
// call k-1's), and what the protocol needs to make progress is AgGemm's too: a copy to a peer
// that shares our GPU is queued before our GEMM, on its stream. The wait for the peers' ids is
// a stream wait (no SM held).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/gemm_tile.h"
#include "kernels/moe.h"
#include "kernels/moe_tile.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// Programs [0, slots): one tile's rows each, gathered from A into A_sorted (the routing's
/// order) once their rank's tokens are here (T = f8e4m3: quantized on the way, a scale per row
/// and 128 columns into a_scales), then marked ready; programs past them: the GEMM's tiles,
/// each once its rows are ready, reading A_sorted as a dense tile (TMA's copies, as the
/// grouped GEMM's). Both take the tiles from our rank's first (WAIT).
template <class T>
void moe_gemm(tl::Ptr<bf16> a, tl::Ptr<T> a_sorted, tl::Ptr<float> a_scales, tl::Ptr<int32_t> sorted_ids,
              tl::Ptr<int32_t> tiles, tl::Ptr<int32_t> starts, tl::Ptr<T> w, tl::Ptr<float> w_scales, tl::Ptr<bf16> c,
              tl::Ptr<int32_t> flags, tl::Ptr<int32_t> ready, tl::Int rows, tl::Int N, tl::Int K, tl::Int w_rows,
              tl::Int E, tl::Int seg_tokens, tl::Int segments, tl::Int slots, tl::Int call, tl::Const<int> BM,
              tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M, tl::Const<int> TOPK, tl::Const<int> WAIT,
              tl::Const<int> SPLIT) {
  constexpr bool kF8 = std::is_same_v<T, f8e4m3>;
  if (kF8 && BK != detail::kScaleBlock)
    throw Error(str_cat("tiledist: moe_gemm_fp8: BK = ", BK.value(), ", the scales' block is 128 (BK = 128)"));
  auto pid = tl::program_id(0);
  auto count = tl::load(tiles);
  auto num_m = tl::maximum(slots, 1), num_n = (tl::maximum(N, 0) + (BN - 1)) / BN;
  auto rotated = [&](const Tensor& slot) {  // our rank's tiles first (its tokens are here; one segment: as they are)
    if (WAIT == 0) return slot;
    return (slot + tl::load(starts + dist::rank() % tl::maximum(segments, 1) * E) / BM) % tl::maximum(count, 1);
  };
  auto entry_of = [&](const Tensor& t) {
    auto entry = tiles + 1 + t * 3;
    return std::tuple{tl::load(entry), tl::maximum(tl::load(entry + 1), 0), tl::load(entry + 2)};
  };
  const int split = std::max(1, SPLIT.value());
  auto gathers = slots * split;  // (the programs that gather: SPLIT a tile, each its part of K)
  tl::if_then((pid < gathers) & (pid / split < count), [&] {
    auto t = rotated(pid / split);
    auto part = pid % split;
    auto blocks =
        (tl::maximum(K, 0) + (BK - 1)) / BK;  // K's BK blocks: part p gathers [p n / split, (p + 1) n / split)
    auto [expert, first, end] = entry_of(t);
    (void)expert;
    auto row = tl::expand_dims(first + tl::arange(0, BM), 1);  // [BM, 1]
    auto in = row < end;
    Tensor src = a;
    if (WAIT) {  // the signals of the ranks whose tokens the tile's rows are (the lowest to the highest)
      auto at = first + tl::arange(0, BM);
      auto of = tl::load(sorted_ids + at, at < end, 0) / TOPK / tl::maximum(seg_tokens, 1);
      auto lo = tl::min(tl::where(at < end, of, INT32_MAX), 0), hi = tl::max(tl::where(at < end, of, -1), 0);
      Tensor arrived;
      tl::profile("wait",
                  [&] {
                    arrived = tl::for_range(lo, hi + 1, 1, tl::scalar(0, tl::int32), [&](Tensor r, Tensor) {
                      return shmem::signal_wait_until(flags + r, shmem::Cmp::ge, call);
                    });
                  },
                  {t});
      src = dist::consume_token(a, arrived);
    }
    auto from = tl::Ptr<bf16>(src.value()) + tl::load(sorted_ids + row, in, 0) / TOPK * K;  // [BM, 1]
    tl::for_range(part * blocks / split * BK, tl::minimum(K, (part + 1) * blocks / split * BK), BK, [&](Tensor k) {
      auto ka = tl::expand_dims(k + tl::arange(0, BK), 0);
      auto x = tl::load(from + ka, in & (ka < K), 0.0f);
      if constexpr (kF8) {
        auto [q, s] = detail::quantize_rows(x.to(tl::float32));
        tl::store(a_sorted + row * K + ka, q, in & (ka < K));
        tl::store(a_scales + row * ((K + (BK - 1)) / BK) + k / BK, s, in);
      } else {
        tl::store(a_sorted + row * K + ka, x, in & (ka < K));
      }
    });
    tl::atomic_xchg(ready + t * split + part, call, {}, {"release", "gpu"});  // (after every thread's stores)
  });
  tl::if_then(pid >= gathers, [&] {
    auto [slot, pid_n] = detail::grouped_tile(pid - gathers, num_m, num_n, GROUP_M);
    tl::if_then(slot < count, [&] {
      auto t = rotated(slot);
      Tensor rows_of_sorted = a_sorted, scales_of_sorted = a_scales;  // (ordered after each part's signal)
      tl::profile("wait",
                  [&] {
                    for (int part = 0; part < split; ++part) {
                      auto gathered = shmem::signal_wait_until(ready + t * split + part, shmem::Cmp::ge, call);
                      rows_of_sorted = dist::consume_token(rows_of_sorted, gathered);
                      if (kF8) scales_of_sorted = dist::consume_token(scales_of_sorted, gathered);
                    }
                  },
                  {t, pid_n});
      auto [expert, first, end] = entry_of(t);
      auto rows_of_a = tl::Ptr<T>(rows_of_sorted.value());
      auto scales_of_a = tl::Ptr<float>(scales_of_sorted.value());
      detail::expert_tile(rows_of_a, scales_of_a, w, w_scales, c, rows, N, K, w_rows, expert, first, end, pid_n, BM, BN,
                          BK);
    });
  });
}
}  // namespace

const KernelDef& moe_gemm_kernel(ir::DType dtype) {
  static const std::vector<std::string> params = {
      "a",     "a_sorted", "a_scales", "sorted_ids", "tiles", "starts",  "w",    "w_scales",   "c",
      "flags", "ready",    "rows",     "N",          "K",     "w_rows",  "E",    "seg_tokens", "segments",
      "slots", "call",     "BM",       "BN",         "BK",    "GROUP_M", "TOPK", "WAIT",       "SPLIT"};
  static const Constants defaults = {{"BM", 64},  {"BN", 64},  {"BK", 32},  {"GROUP_M", 8},
                                     {"TOPK", 2}, {"WAIT", 0}, {"SPLIT", 1}};
  static const KernelDef bf16_def = KernelDef("moe_gemm", moe_gemm<bf16>, params, defaults).do_not_specialize({"call"});
  static const KernelDef f8_def = KernelDef("moe_gemm_fp8", moe_gemm<f8e4m3>, params,
                                            [] {
                                              Constants c = defaults;
                                              c.insert_or_assign("BK", detail::kScaleBlock);
                                              return c;
                                            }())
                                      .do_not_specialize({"call"});
  if (dtype != ir::DType::bf16 && dtype != ir::DType::f8e4m3)
    throw Error(
        str_cat("tiledist: moe_gemm: weights of ", ir::dtype_name(dtype), " (bf16, or f8e4m3 with block scales)"));
  return dtype == ir::DType::f8e4m3 ? f8_def : bf16_def;
}
TILEDIST_REGISTER(moe_gemm_kernel(ir::DType::bf16));
TILEDIST_REGISTER(moe_gemm_kernel(ir::DType::f8e4m3));

int moe_gather_split(const Target& target, int64_t slots, int64_t K, int bk) {
  if (const char* e = std::getenv("TILEDIST_MOE_GATHER_SPLIT"); e && *e) {  // (to bisect with: 1 to 8)
    const int v = std::atoi(e);
    if (v < 1 || v > 8)
      throw Error(str_cat("tiledist: $TILEDIST_MOE_GATHER_SPLIT = '", e, "': 1 to 8 gather programs a tile"));
    return v;
  }
  if (slots <= 0) return 1;
  // (the CPU backend: as if 8 SMs, so that its tests take the parts too)
  const int64_t sms = !target.is_gpu() ? 8 : cuda::available() ? cuda::device().sms : 132;
  const int64_t fill = (sms + slots - 1) / slots, most = std::max<int64_t>(1, K / (4 * int64_t{std::max(bk, 1)}));
  return static_cast<int>(std::clamp<int64_t>(std::min(fill, most), 1, 8));
}

int moe_segments(int ranks, int64_t pairs, int64_t E, int bm) {
  if (const char* e = std::getenv("TILEDIST_MOE_SEGMENTS"); e && *e) {  // (to compare the two)
    const std::string v = e;
    if (v != "1" && v != "ranks")
      throw Error(str_cat("tiledist: $TILEDIST_MOE_SEGMENTS = '", v,
                          "': 1 (the batch sorted by expert alone) or ranks (a segment per rank)"));
    return v == "1" ? 1 : ranks;
  }
  // The tiles of S segments: E * S groups of pairs / (E * S) rows on average, each ending in a
  // part-filled tile (about half a tile; a whole one where a group is under a tile).
  auto tiles = [&](int64_t S) {
    const double rows = double(pairs) / double(std::max<int64_t>(E * S, 1)) / bm;
    return double(E * S) * std::max(1.0, rows + 0.5);
  };
  return tiles(ranks) <= 1.1 * tiles(1) ? ranks : 1;
}

GemmConfig moe_gemm_config(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t E, ir::DType dtype) {
  GemmConfig g = grouped_gemm_config(target, rows, N, K, E, dtype, dtype == ir::DType::f8e4m3);
  if (target.is_gpu() && g.bn > 128) {
    g.bn = 128;
    g.constants.insert_or_assign("BN", 128);
  }
  return g;
}

struct AgMoe::State {
  Target target;
  int rank = 0, ranks = 1, topk = 1;
  int64_t tokens = 0, N = 0, K = 0, E = 0;  // tokens: per rank
  ir::DType dtype = ir::DType::bf16;        // the weights'
  bf16* gathered = nullptr;                 // two buffers of [ranks * tokens, K]
  int32_t* ids = nullptr;                   // two buffers of [ranks * tokens, topk]
  float* scores = nullptr;                  // two buffers of [ranks * tokens, topk]: the top-k weights
  int32_t* flags = nullptr;                 // [2, ranks]: the last call whose ids / tokens of rank r are here
  int32_t calls = 0;
  std::unique_ptr<MoeRouting> routing;
  detail::Scratch<bf16> sorted;     // [routing rows, K]: the tokens' rows in the routing's order (bf16)
  detail::Scratch<f8e4m3> sorted8;  // the same quantized (f8e4m3 weights)
  detail::Scratch<float> scales;    // [routing rows, cdiv(K, 128)]: sorted8's scales
  detail::Scratch<int32_t> ready;   // [slots * split]: the last call whose tile's part of K is in `sorted` (`sorted8`)
  GemmConfig config;
  Grid grid{1};
  Kernel gemm;
  bool overlap = true;  // false: every rank's tokens gathered before the GEMM starts
  std::unique_ptr<detail::SideStream> copies;
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  void* at(const void* p, int r) const { return detail::symm_on(target, p, r); }
  ~State() {
    streams.finish();
    if (copies) copies->finish();
    if (flags) detail::symm_release(target, flags);
    if (scores) detail::symm_release(target, scores);
    if (ids) detail::symm_release(target, ids);
    if (gathered) detail::symm_release(target, gathered);
  }
};

AgMoe::AgMoe(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t experts, int topk, ir::DType weights)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.rank = detail::world_rank(target);
  s.ranks = detail::world_ranks(target);
  if (tokens < 0 || N < 1 || K < 1 || experts < 1)
    throw Error(str_cat("tiledist: ag_moe: tokens, N, K, experts = ", tokens, ", ", N, ", ", K, ", ", experts,
                        " (tokens >= 0, the others >= 1)"));
  const int64_t all = tokens * s.ranks;
  if (all * K > INT32_MAX || experts * N * K > INT32_MAX)
    throw Error(str_cat("tiledist: ag_moe: ", all, " tokens of ", K, " and ", experts, " experts of ", N, " x ", K,
                        ": the gathered tokens and W under 2^31 elements each"));
  s.tokens = tokens, s.N = N, s.K = K, s.E = experts, s.topk = topk, s.dtype = weights;
  const KernelDef& def = moe_gemm_kernel(weights);  // (checks the dtype)
  s.config = moe_gemm_config(target, all * topk, N, K, experts, weights);
  MoeRouting::Options options;
  options.block_rows = s.config.bm;
  options.segments = moe_segments(s.ranks, all * topk, experts, s.config.bm);
  s.routing = std::make_unique<MoeRouting>(target, all, experts, topk, options);  // (checks topk)
  if (s.routing->rows() * std::max(N, K) > INT32_MAX)
    throw Error(str_cat("tiledist: ag_moe: ", s.routing->rows(), " rows of ", N, " and ", K,
                        " columns: C and the sorted tokens under 2^31 elements each"));
  s.gathered = static_cast<bf16*>(detail::symm_zeroed(target, 2 * size_t(all) * K * sizeof(bf16)));
  s.ids = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(all) * topk * sizeof(int32_t)));
  s.scores = static_cast<float*>(detail::symm_zeroed(target, 2 * size_t(all) * topk * sizeof(float)));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * sizeof(int32_t)));
  if (s.gpu()) s.copies = std::make_unique<detail::SideStream>();
  barrier_all();  // no rank signals before every rank has zeroed its flags
  Constants constants = s.config.constants;
  for (const char* name : {"TRANS_W", "PERSISTENT"}) constants.erase(name);
  constants.insert_or_assign("TOPK", topk);
  constants.insert_or_assign("WAIT", 1);
  const int64_t slots = s.routing->slots();
  const int split = moe_gather_split(target, slots, K, static_cast<int>(std::get<int64_t>(constants.at("BK").v)));
  constants.insert_or_assign("SPLIT", split);
  s.gemm = compile(def, constants, target, s.config.options);
  s.grid = Grid(static_cast<int>(slots * split + slots * ((N + s.config.bn - 1) / s.config.bn)));
  const size_t rows = size_t(s.routing->rows());
  if (weights == ir::DType::f8e4m3) {
    s.sorted8 = detail::Scratch<f8e4m3>(target, rows * K);
    s.scales = detail::Scratch<float>(target, rows * ((K + detail::kScaleBlock - 1) / detail::kScaleBlock));
  } else {
    s.sorted = detail::Scratch<bf16>(target, rows * K);
  }
  s.ready = detail::Scratch<int32_t>(target, size_t(slots * split));
}

AgMoe::~AgMoe() = default;

void AgMoe::run(const bf16* tokens, const int32_t* topk_ids, const bf16* w, bf16* out, const runtime::Stream* stream) {
  run(tokens, topk_ids, nullptr, w, out, stream);
}

void AgMoe::run(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const bf16* w, bf16* out,
                const runtime::Stream* stream) {
  if (s_->dtype != ir::DType::bf16)
    throw Error(str_cat("tiledist: ag_moe: run with bf16 weights on an AgMoe made for ", ir::dtype_name(s_->dtype),
                        " (which takes their scales)"));
  launch(tokens, topk_ids, topk_weights, w, nullptr, out, stream);
}

void AgMoe::run(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const f8e4m3* w,
                const float* w_scales, bf16* out, const runtime::Stream* stream) {
  if (s_->dtype != ir::DType::f8e4m3)
    throw Error(str_cat("tiledist: ag_moe: run with f8e4m3 weights and scales on an AgMoe made for ",
                        ir::dtype_name(s_->dtype)));
  if (s_->tokens > 0 && !w_scales) throw Error("tiledist: ag_moe: f8e4m3 weights without scales (a null pointer)");
  launch(tokens, topk_ids, topk_weights, w, w_scales, out, stream);
}

void AgMoe::launch(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const void* w,
                   const float* w_scales, bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  if (s.tokens > 0 && (!tokens || !topk_ids || !w || !out))
    throw Error("tiledist: ag_moe: a null pointer among the tokens, top-k ids, weights and output");
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ag_moe") : nullptr;
  const int32_t call = ++s.calls;
  const int64_t all = s.tokens * s.ranks;
  bf16* gathered = s.gathered + (call % 2) * all * s.K;
  int32_t* ids = s.ids + (call % 2) * all * s.topk;
  bf16* my_tokens = gathered + s.rank * s.tokens * s.K;
  int32_t* my_ids = ids + s.rank * s.tokens * s.topk;
  float* my_scores = s.scores + (call % 2) * all * s.topk + s.rank * s.tokens * s.topk;
  const size_t token_bytes = size_t(s.tokens) * s.K * sizeof(bf16), id_bytes = size_t(s.tokens) * s.topk * 4;
  int32_t* id_flags = s.flags;
  int32_t* token_flags = s.flags + s.ranks;
  if (on) {
    // As AgGemm's copies: the peers' once our last run's GEMM is done, those to peers on our GPU
    // before our GEMM, on its stream; the ids first.
    s.copies->fork(*on);
    auto copy = [](void* to, const void* from, size_t bytes, const runtime::Stream& by) {
      if (bytes) runtime::copy_async(to, from, bytes, by);  // (no tokens: the pointers may be null)
    };
    copy(my_ids, topk_ids, id_bytes, *on);
    if (topk_weights) copy(my_scores, topk_weights, id_bytes, *on);
    runtime::write_value(id_flags + s.rank, static_cast<uint32_t>(call), *on);
    if (tokens != my_tokens) copy(my_tokens, tokens, token_bytes, *on);
    runtime::write_value(token_flags + s.rank, static_cast<uint32_t>(call), *on);
    for (int k = 1; k < s.ranks; ++k) {
      const int r = (s.rank + k) % s.ranks;
      const runtime::Stream& by = detail::shares_gpu(s.target, r) ? *on : s.copies->stream();
      copy(s.at(my_ids, r), topk_ids, id_bytes, by);
      if (topk_weights) copy(s.at(my_scores, r), topk_weights, id_bytes, by);
      runtime::write_value(s.at(id_flags + s.rank, r), static_cast<uint32_t>(call), by);
      copy(s.at(my_tokens, r), tokens, token_bytes, by);
      runtime::write_value(s.at(token_flags + s.rank, r), static_cast<uint32_t>(call), by);
    }
    for (int k = 1; k < s.ranks; ++k)  // every rank's ids, for the sort
      runtime::wait_value(id_flags + (s.rank + k) % s.ranks, static_cast<uint32_t>(call), *on);
    if (!s.overlap)  // (the gather done before the GEMM starts: its programs' waits then pass at once)
      for (int k = 1; k < s.ranks; ++k)
        runtime::wait_value(token_flags + (s.rank + k) % s.ranks, static_cast<uint32_t>(call), *on);
  } else {
    for (int k = 1; k <= s.ranks; ++k) {  // the next rank first, ourselves last
      const int r = (s.rank + k) % s.ranks;
      if (s.tokens > 0) {  // (none: the pointers may be null)
        std::memcpy(s.at(my_ids, r), topk_ids, id_bytes);
        if (topk_weights) std::memcpy(s.at(my_scores, r), topk_weights, id_bytes);
        if (s.at(my_tokens, r) != tokens) std::memcpy(s.at(my_tokens, r), tokens, token_bytes);
      }
      std::atomic_ref<int32_t>(*static_cast<int32_t*>(s.at(token_flags + s.rank, r)))
          .store(call, std::memory_order_release);
    }
    barrier_all();  // (every rank's ids are here)
  }
  s.routing->align(ids, all, on);
  auto gemm = [&](auto* sorted, auto* weights) {
    detail::launch(s.gemm, on, s.grid, static_cast<const bf16*>(gathered), sorted, s.scales.data(),
                   s.routing->sorted_ids(), s.routing->tiles(), s.routing->group_starts(), weights, w_scales, out,
                   token_flags, s.ready.data(), static_cast<int>(s.routing->rows()), static_cast<int>(s.N),
                   static_cast<int>(s.K), static_cast<int>(s.E * s.N), static_cast<int>(s.E),
                   static_cast<int>(s.tokens), s.routing->segments(), static_cast<int>(s.routing->slots()), call);
  };
  if (s.dtype == ir::DType::f8e4m3)
    gemm(s.sorted8.data(), static_cast<const f8e4m3*>(w));
  else
    gemm(s.sorted.data(), static_cast<const bf16*>(w));
  if (on) {
    s.copies->join(*on);
    s.streams.leave(*on, stream);
  }
}

void AgMoe::set_overlap(bool on) { s_->overlap = on; }

const MoeRouting& AgMoe::routing() const { return *s_->routing; }
const float* AgMoe::gathered_weights() const {
  return s_->scores + (s_->calls % 2) * s_->tokens * s_->ranks * s_->topk;
}
const bf16* AgMoe::gathered() const { return s_->gathered + (s_->calls % 2) * s_->tokens * s_->ranks * s_->K; }
int64_t AgMoe::rows() const { return s_->routing->rows(); }
const GemmConfig& AgMoe::config() const { return s_->config; }

}  // namespace tiledist::kernels
