// MoE grouped GEMM + top-k combine + ReduceScatter (Triton-distributed's moe_reduce_rs), or +
// AllReduce (moe_reduce_ar, for decoding): the down projection of tensor-parallel experts, each
// rank holding K columns of every expert's intermediate (its slice of the gathered batch's
// activations, in the routing's sorted order) and the matching slice of the down weights. One
// kernel, a 1-D grid of two parts:
// - GEMM programs, first: Y[row, :] = act[row, :] @ W[e]^T per tile of the routing's table (the
//   partial sums over our K slice), the next rank's tokens first and our own last; each tile,
//   once stored, counted in done[segment of its tokens];
// - combine programs, after them: a token each, in the same rank order; each waits until every
//   tile of its segment is counted, then sums the token's k rows of Y weighted by its top-k
//   scores and stores the sum (f32) straight into the owner's staging area (every rank's, for
//   the AllReduce), then adds 1 to its block of tokens' flag there.
// The routing's segments are a rank's tokens each (a tile's rows from one rank: a rank's tokens
// are pushed once its tiles are done), or one (the batch sorted by expert alone, AgMoe's choice
// where a rank's rows of an expert are few: every push waits for the whole GEMM).
// A reduce kernel then waits, per block of our tokens, for every rank's sums and adds them in
// rank order (the same bits on every rank) into out (bf16).
//
// Progress: a combine program waits only for GEMM programs of its own kernel, which come before
// it in the grid (the hardware starts programs in order) and wait for nothing; the reduce
// kernel waits for the peers' combine programs, which wait for nothing remote. Calls alternate
// between two staging halves, as in GemmRs, and a block's flag only grows (by its tokens each
// call: the reduce of call c waits for c times them); the tile counters are zeroed on the stream
// before each run (our kernel alone counts in them).
#include <algorithm>
#include <atomic>
#include <optional>

#include "kernels/gemm_tile.h"
#include "kernels/moe.h"
#include "kernels/moe_tile.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class T>  // bf16, or f8e4m3 with block scales (the scales' pointers read only then)
void moe_reduce(tl::Ptr<T> act, tl::Ptr<float> act_scales, tl::Ptr<int32_t> sorted_ids, tl::Ptr<int32_t> tiles,
                tl::Ptr<int32_t> starts, tl::Ptr<T> w, tl::Ptr<float> w_scales, tl::Ptr<bf16> y, tl::Ptr<int32_t> done,
                tl::Ptr<float> weights, tl::Ptr<int32_t> dest, tl::Ptr<float> staging, tl::Ptr<int32_t> flags,
                tl::Int rows, tl::Int tokens, tl::Int N, tl::Int K, tl::Int w_rows, tl::Int E, tl::Int segments,
                tl::Int slots, tl::Int call, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK,
                tl::Const<int> GROUP_M, tl::Const<int> TOPK, tl::Const<int> BT, tl::Const<int> BH, tl::Const<int> ALL,
                tl::Const<int> SEQ) {
  if (std::is_same_v<T, f8e4m3> && BK != detail::kScaleBlock)
    throw Error(str_cat("tiledist: moe_reduce (f8e4m3): BK = ", BK.value(), ", the scales' block is 128 (BK = 128)"));
  auto n = dist::num_ranks(), me = dist::rank();
  auto pid = tl::program_id(0);
  auto [num_m, num_n] = std::pair{tl::maximum(slots, 1), (tl::maximum(N, 0) + (BN - 1)) / BN};
  auto gemm_programs = num_m * num_n;
  auto chunks = (tl::maximum(tokens, 0) + (BT - 1)) / BT;  // per rank
  auto segs = tl::maximum(segments, 1);
  auto segment_tiles = [&](const Tensor& g) {  // the tiles of segment g's tokens (rank g's, or all)
    return (tl::load(starts + (g + 1) * E) - tl::load(starts + g * E)) / BM * num_n;
  };
  tl::if_then(pid < gemm_programs, [&] {
    auto [slot, pid_n] = detail::grouped_tile(pid, num_m, num_n, GROUP_M);
    auto count = tl::load(tiles);
    tl::if_then(slot < count, [&] {
      auto t =
          (slot + tl::load(starts + (me + 1) % n % segs * E) / BM) % tl::maximum(count, 1);  // the next rank's first
      auto entry = tiles + 1 + t * 3;
      auto expert = tl::load(entry), first = tl::maximum(tl::load(entry + 1), 0), end = tl::load(entry + 2);
      detail::expert_tile(act, act_scales, w, w_scales, y, rows, N, K, w_rows, expert, first, end, pid_n, BM, BN, BK);
      auto segment = tl::load(sorted_ids + first) / TOPK / tl::maximum(tokens, 1) % segs;
      tl::atomic_add(done + segment, 1, {}, {"release", "gpu"});  // (after every thread's stores)
    });
  });
  tl::if_then(pid >= gemm_programs, [&] {
    // One token a program (its k rows of Y gathered by row, each row's columns contiguous: the
    // loads are vectors), the next rank's tokens first.
    auto q = pid - gemm_programs;
    auto owner = (me + 1 + q / tl::maximum(tokens, 1)) % n;
    auto local = q % tl::maximum(tokens, 1);  // the owner's token
    auto token = owner * tokens + local;      // the batch's
    Tensor arrived;
    tl::profile("wait", [&] {
      if (SEQ)  // (no overlap: every segment's tiles first, the whole GEMM before any push)
        arrived = tl::for_range(0, segs, 1, tl::scalar(0, tl::int32), [&](Tensor g, Tensor) {
          return shmem::signal_wait_until(done + g, shmem::Cmp::ge, segment_tiles(g));
        });
      else
        arrived = shmem::signal_wait_until(done + owner % segs, shmem::Cmp::ge, segment_tiles(owner % segs));
    });
    auto rows_of_y = tl::Ptr<bf16>(dist::consume_token(y, arrived).value());
    std::vector<Tensor> rows, scores;  // each of the k slots' row of Y, and its score
    for (int j = 0; j < TOPK; ++j) {
      auto r = tl::load(dest + token * TOPK + j);
      rows.push_back(r);
      scores.push_back(tl::where(r >= 0, tl::load(weights + token * TOPK + j), 0.0f));
    }
    auto push = [&](const Tensor& to) {
      auto slot = dist::symm_at(staging, to) + (me * (ALL ? n * tokens : tokens) * N).to(tl::int64);
      auto out_row = ALL ? token : local;
      tl::for_range(0, N, BH, [&](Tensor h0) {
        auto h = h0 + tl::arange(0, BH);
        auto sum = tl::zeros({BH}, tl::float32);
        for (int j = 0; j < TOPK; ++j)
          sum = sum + tl::load(rows_of_y + rows[j] * N + h, (rows[j] >= 0) & (h < N), 0.0f).to(tl::float32) * scores[j];
        tl::store(slot + out_row * N + h, sum, h < N);
      });
      // (the tokens of a block of BT count themselves in: the reduce waits for all of them)
      auto block = ALL ? owner * chunks + local / BT : local / BT;
      shmem::signal_op(flags + me * (ALL ? n * chunks : chunks) + block, 1, shmem::SIGNAL_ADD, to);
    };
    if (ALL)
      tl::for_range(0, n, 1, [&](Tensor i) { push((me + 1 + i) % n); });
    else
      push(owner);
  });
}

/// out[row, :] = the sum over ranks r (in order) of staging[r][row, :], a block of BT of one
/// owner's `tokens` rows a program (owners: 1, our tokens; or every rank, for the AllReduce),
/// once each rank's block has arrived (its flag counts the block's tokens, over the calls).
void moe_reduce_sum(tl::Ptr<float> staging, tl::Ptr<int32_t> flags, tl::Ptr<bf16> out, tl::Int tokens, tl::Int owners,
                    tl::Int N, tl::Int chunks, tl::Int call, tl::Const<int> BT, tl::Const<int> BH) {
  auto n = dist::num_ranks();
  auto q = tl::program_id(0);
  auto owner = q / tl::maximum(chunks, 1), chunk = q % tl::maximum(chunks, 1);
  auto local = tl::expand_dims(chunk * BT + tl::arange(0, BT), 1);
  auto row = owner * tokens + local;
  auto h = tl::expand_dims(tl::program_id(1) * BH + tl::arange(0, BH), 0);
  auto mask = (local < tokens) & (h < N);
  auto in_block = tl::minimum(tokens - chunk * BT, BT);  // (each adds 1 a call)
  auto arrived = tl::for_range(0, n, 1, tl::scalar(0, tl::int32), [&](Tensor r, Tensor) {
    return shmem::signal_wait_until(flags + r * owners * chunks + q, shmem::Cmp::ge, call * in_block);
  });
  auto slots = tl::Ptr<float>(dist::consume_token(staging, arrived).value());
  auto sum = tl::for_range(0, n, 1, tl::zeros({BT, BH}, tl::float32), [&](Tensor r, Tensor acc) {
    return acc + tl::load(slots + (r * owners * tokens * N).to(tl::int64) + row * N + h, mask, 0.0f);
  });
  tl::store(out + row * N + h, sum.to(tl::bfloat16), mask);
}

const std::vector<std::string> kParams = {
    "act",     "act_scales", "sorted_ids", "tiles",   "starts", "w",  "w_scales", "y",   "done",     "weights", "dest",
    "staging", "flags",      "rows",       "tokens",  "N",      "K",  "w_rows",   "E",   "segments", "slots",   "call",
    "BM",      "BN",         "BK",         "GROUP_M", "TOPK",   "BT", "BH",       "ALL", "SEQ"};
const Constants kDefaults = {{"BM", 64}, {"BN", 64},  {"BK", 32}, {"GROUP_M", 8}, {"TOPK", 2},
                             {"BT", 16}, {"BH", 256}, {"ALL", 0}, {"SEQ", 0}};
// Tokens per block of the reduce (and per flag); columns per step of a token's combine (16
// bytes of bf16 a thread of 8 warps), and of the reduce.
constexpr int kTokensPerCombine = 16, kColumnsPerStep = 2048, kReduceColumns = 256;
}  // namespace

const KernelDef& moe_reduce_kernel(bool all_reduce, ir::DType weights) {
  auto defaults = [](int all, int bk) {
    Constants c = kDefaults;
    c.insert_or_assign("ALL", all);
    c.insert_or_assign("BK", bk);
    return c;
  };
  auto def = [](const char* name, auto fn, Constants c) {
    return KernelDef(name, fn, kParams, std::move(c)).do_not_specialize({"call"});
  };
  static const KernelDef rs = def("moe_reduce_rs", moe_reduce<bf16>, defaults(0, 32));
  static const KernelDef ar = def("moe_reduce_ar", moe_reduce<bf16>, defaults(1, 32));
  static const KernelDef rs8 = def("moe_reduce_rs_fp8", moe_reduce<f8e4m3>, defaults(0, detail::kScaleBlock));
  static const KernelDef ar8 = def("moe_reduce_ar_fp8", moe_reduce<f8e4m3>, defaults(1, detail::kScaleBlock));
  if (weights != ir::DType::bf16 && weights != ir::DType::f8e4m3)
    throw Error(
        str_cat("tiledist: moe_reduce: weights of ", ir::dtype_name(weights), " (bf16, or f8e4m3 with block scales)"));
  if (weights == ir::DType::f8e4m3) return all_reduce ? ar8 : rs8;
  return all_reduce ? ar : rs;
}
const KernelDef& moe_reduce_sum_kernel() {
  static const KernelDef def =
      KernelDef("moe_reduce_sum", moe_reduce_sum,
                {"staging", "flags", "out", "tokens", "owners", "N", "chunks", "call", "BT", "BH"},
                {{"BT", 16}, {"BH", 256}})
          .do_not_specialize({"call"});
  return def;
}
TILEDIST_REGISTER(moe_reduce_kernel(false));
TILEDIST_REGISTER(moe_reduce_kernel(true));
TILEDIST_REGISTER(moe_reduce_kernel(false, ir::DType::f8e4m3));
TILEDIST_REGISTER(moe_reduce_kernel(true, ir::DType::f8e4m3));
TILEDIST_REGISTER(moe_reduce_sum_kernel());

struct MoeReduce::State {
  Target target;
  int ranks = 1, topk = 1;
  bool all = false;
  int64_t tokens = 0, N = 0, K = 0, E = 0, chunks = 0, out_rows = 0;
  ir::DType dtype = ir::DType::bf16;  // the weights' (and the activations')
  float* staging = nullptr;           // two halves of [ranks][out_rows][N]
  int32_t* flags = nullptr;           // [ranks][blocks of out_rows]: rank r's tokens of the block here, over all calls
  detail::Scratch<bf16> y;            // [routing rows, N]: the partial products of our K slice
  detail::Scratch<int32_t> done;
  int32_t calls = 0;
  GemmConfig config;
  Kernel kernel, sum;
  std::optional<Kernel> sequential;  // SEQ = 1: made by the first set_overlap(false)
  Constants constants;               // the kernel's
  bool overlap = true;
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  ~State() {
    streams.finish();
    if (flags) detail::symm_release(target, flags);
    if (staging) detail::symm_release(target, staging);
  }
};

MoeReduce::MoeReduce(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t experts, int topk, Mode mode,
                     ir::DType weights)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.ranks = detail::world_ranks(target);
  s.all = mode == Mode::all_reduce;
  const char* name = s.all ? "moe_reduce_ar" : "moe_reduce_rs";
  if (tokens < 0 || N < 1 || K < 1 || experts < 1 || topk < 1 || topk > experts)
    throw Error(str_cat("tiledist: ", name, ": tokens, N, K, experts, topk = ", tokens, ", ", N, ", ", K, ", ", experts,
                        ", ", topk, " (tokens >= 0, 1 <= topk <= experts, the others >= 1)"));
  s.tokens = tokens, s.N = N, s.K = K, s.E = experts, s.topk = topk, s.dtype = weights;
  const KernelDef& def = moe_reduce_kernel(s.all, weights);  // (checks the dtype)
  const int64_t all = tokens * s.ranks;
  s.config = moe_gemm_config(target, all * topk, N, K, experts, weights);
  MoeRouting::Options layout;  // (the routing of the batch that runs give)
  layout.block_rows = s.config.bm, layout.segments = s.ranks;
  const int64_t rows = MoeRouting::rows_for(all, experts, topk, layout);
  if (rows * std::max(N, K) > INT32_MAX || experts * N * K > INT32_MAX)
    throw Error(str_cat("tiledist: ", name, ": ", rows, " rows of ", N, " and ", K, " columns, W of ", experts, " x ",
                        N, " x ", K, ": each under 2^31 elements"));
  s.out_rows = s.all ? all : tokens;
  s.chunks = (tokens + kTokensPerCombine - 1) / kTokensPerCombine;
  s.y = detail::Scratch<bf16>(target, size_t(rows * N));
  s.done = detail::Scratch<int32_t>(target, size_t(s.ranks));
  s.staging =
      static_cast<float*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * std::max<int64_t>(s.out_rows, 1) * N * 4));
  const int64_t flag_words = int64_t(s.ranks) * (s.all ? s.ranks : 1) * std::max<int64_t>(s.chunks, 1);
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, size_t(flag_words) * 4));
  barrier_all();  // no rank signals before every rank has zeroed its flags
  Constants constants = s.config.constants;
  for (const char* c : {"TRANS_W", "PERSISTENT"}) constants.erase(c);
  constants.insert_or_assign("TOPK", topk);
  constants.insert_or_assign("BT", kTokensPerCombine);
  constants.insert_or_assign("BH", kColumnsPerStep);
  s.kernel = compile(def, constants, target, s.config.options);
  s.constants = constants;
  s.sum = compile(moe_reduce_sum_kernel(), {{"BT", kTokensPerCombine}, {"BH", kReduceColumns}}, target);
}

MoeReduce::~MoeReduce() = default;

void MoeReduce::run(const bf16* act, const MoeRouting& routing, const float* topk_weights, const bf16* w, bf16* out,
                    const runtime::Stream* stream) {
  if (s_->dtype != ir::DType::bf16)
    throw Error(str_cat("tiledist: ", s_->all ? "moe_reduce_ar" : "moe_reduce_rs",
                        ": run with bf16 activations and weights on a MoeReduce made for ", ir::dtype_name(s_->dtype),
                        " (which takes their scales)"));
  launch(act, nullptr, routing, topk_weights, w, nullptr, out, stream);
}

void MoeReduce::run(const f8e4m3* act, const float* act_scales, const MoeRouting& routing, const float* topk_weights,
                    const f8e4m3* w, const float* w_scales, bf16* out, const runtime::Stream* stream) {
  const char* name = s_->all ? "moe_reduce_ar" : "moe_reduce_rs";
  if (s_->dtype != ir::DType::f8e4m3)
    throw Error(str_cat("tiledist: ", name, ": run with f8e4m3 activations and weights on a MoeReduce made for ",
                        ir::dtype_name(s_->dtype)));
  if (s_->tokens > 0 && (!act_scales || !w_scales))
    throw Error(str_cat("tiledist: ", name, ": f8e4m3 operands without their scales (a null pointer)"));
  launch(act, act_scales, routing, topk_weights, w, w_scales, out, stream);
}

void MoeReduce::launch(const void* act, const float* act_scales, const MoeRouting& routing, const float* topk_weights,
                       const void* w, const float* w_scales, bf16* out, const runtime::Stream* stream) {
  State& s = *s_;
  const char* name = s.all ? "moe_reduce_ar" : "moe_reduce_rs";
  const int64_t all = s.tokens * s.ranks;
  if (routing.max_tokens() != all || routing.experts() != s.E || routing.topk() != s.topk ||
      (routing.segments() != s.ranks && routing.segments() != 1) || routing.block_rows() != s.config.bm)
    throw Error(str_cat("tiledist: ", name, ": a routing of ", routing.max_tokens(), " tokens, ", routing.experts(),
                        " experts, top-", routing.topk(), ", ", routing.segments(), " segments of ",
                        routing.block_rows(), "-row tiles; this object takes ", all, " tokens (", s.tokens,
                        " per rank), ", s.E, " experts, top-", s.topk, ", a segment per rank (", s.ranks, ") or one, ",
                        s.config.bm, "-row tiles (AgMoe::routing() of the same batch)"));
  if (s.tokens > 0 && (!act || !topk_weights || !w || !out))
    throw Error(str_cat("tiledist: ", name, ": a null pointer among the activations, weights and output"));
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, name) : nullptr;
  const int32_t call = ++s.calls;
  float* half = s.staging + int64_t(call % 2) * s.ranks * s.out_rows * s.N;
  for (int r = 0; r < s.ranks; ++r)  // (the tile counters of this run)
    if (on)
      runtime::write_value(s.done.data() + r, 0, *on);
    else
      std::atomic_ref<int32_t>(s.done.data()[r]).store(0, std::memory_order_relaxed);
  const int64_t tiles_n = (s.N + s.config.bn - 1) / s.config.bn;
  const int64_t programs = routing.slots() * tiles_n + s.ranks * s.tokens;
  auto gemm = [&](auto* a, auto* weights) {
    detail::launch(s.overlap ? s.kernel : *s.sequential, on, Grid(static_cast<int>(programs)), a, act_scales,
                   routing.sorted_ids(), routing.tiles(), routing.group_starts(), weights, w_scales, s.y.data(),
                   s.done.data(), topk_weights, routing.dest(), half, s.flags, static_cast<int>(routing.rows()),
                   static_cast<int>(s.tokens), static_cast<int>(s.N), static_cast<int>(s.K),
                   static_cast<int>(s.E * s.N), static_cast<int>(s.E), routing.segments(),
                   static_cast<int>(routing.slots()), call);
  };
  if (s.dtype == ir::DType::f8e4m3)
    gemm(static_cast<const f8e4m3*>(act), static_cast<const f8e4m3*>(w));
  else
    gemm(static_cast<const bf16*>(act), static_cast<const bf16*>(w));
  const int owners = s.all ? s.ranks : 1;
  if (s.chunks > 0)
    detail::launch(
        s.sum, on,
        Grid(static_cast<int>(owners * s.chunks), static_cast<int>((s.N + kReduceColumns - 1) / kReduceColumns)), half,
        s.flags, out, static_cast<int>(s.tokens), owners, static_cast<int>(s.N), static_cast<int>(s.chunks), call);
  if (on) s.streams.leave(*on, stream);
}

void MoeReduce::set_overlap(bool on) {
  State& s = *s_;
  if (!on && !s.sequential) {
    Constants c = s.constants;
    c.insert_or_assign("SEQ", 1);
    s.sequential = compile(moe_reduce_kernel(s.all, s.dtype), c, s.target, s.config.options);
  }
  s.overlap = on;
}

const GemmConfig& MoeReduce::config() const { return s_->config; }

}  // namespace tiledist::kernels
