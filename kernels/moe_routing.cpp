// MoE routing (kernels/moe.h): the top-k of each token's logits, then its token slots sorted by
// expert into BM-row tiles, in four kernels on the device, written as a Triton user writes
// them: a block of tokens per program for the top-k (argmax k times, each pick masked out),
// atomics for each slot's place within its expert, a table built the way the grouped GEMM's
// is (each program finds the group of each of its slots from a running count of the groups'
// tiles), and a scatter.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "kernels/moe.h"
#include "kernels/scratch.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

template <class T>
void moe_topk(tl::Ptr<T> logits, tl::Ptr<int32_t> ids, tl::Ptr<float> weights, tl::Ptr<int32_t> counts,
              tl::Ptr<int32_t> ranks, tl::Int tokens, tl::Int E, tl::Int seg_tokens, tl::Int G, tl::Const<int> BT,
              tl::Const<int> BE, tl::Const<int> TOPK, tl::Const<int> SIGMOID, tl::Const<int> RENORM, tl::Const<int> C) {
  auto t = tl::program_id(0) * BT + tl::arange(0, BT);
  auto row = tl::expand_dims(t, 1), col = tl::expand_dims(tl::arange(0, BE), 0);  // [BT, 1], [1, BE]
  int KP = 1;                                                                     // TOPK's columns, a power of two
  while (KP < TOPK) KP *= 2;
  auto kcol = tl::expand_dims(tl::arange(0, KP), 0);  // [1, KP]
  auto in = row < tokens;
  // Both scores rise with the logit: the top-k of the logits is the top-k of the scores. Each
  // pick is one integer max over a key per logit: its bits turned into an integer of the same
  // order, the lowest log2(BE) bits replaced by BE - 1 - its expert (so a tie, and logits
  // that differ only there, go to the lower expert: exact for bf16 logits, within 2^-15 or so
  // of the best for f32 ones); the expert read back from the key.
  auto x = tl::load(logits + row * E + col, in & (col < E), -INFINITY).to(tl::float32);
  auto bits = tl::bitcast(x, tl::int32);
  const int low = BE - 1;
  auto key = ((bits ^ tl::where(bits < 0, 0x7FFFFFFF, 0)) & ~low) | (low - col);
  auto ids2 = tl::zeros({BT, KP}, tl::int32);
  for (int j = 0; j < TOPK; ++j) {  // (unrolled: TOPK is small)
    auto best = tl::expand_dims(tl::max(key, 1), 1);
    ids2 = tl::where(kcol == j, low - (best & low), ids2);
    if (j + 1 < TOPK) key = tl::where(key == best, INT32_MIN, key);
  }
  // The scores of the k, from their logits read again.
  auto out = in & (kcol < TOPK);
  auto picked = tl::load(logits + row * E + ids2, out, 0.0f).to(tl::float32);  // [BT, KP]
  auto top = tl::expand_dims(tl::max(tl::where(kcol < TOPK, picked, -INFINITY), 1), 1);
  auto value = tl::where(kcol < TOPK, SIGMOID ? 1.0f / (1.0f + tl::exp(-picked)) : tl::exp(picked - top), 0.0f);
  const bool sigmoid = SIGMOID != 0, renormalize = RENORM != 0;
  if (renormalize)
    value = value / tl::expand_dims(tl::sum(value, 1), 1);
  else if (!sigmoid)  // the softmax over all E: its sum
    value = value / tl::expand_dims(tl::sum(tl::exp(x - top), 1), 1);
  tl::store(ids + row * TOPK + kcol, ids2, out);
  tl::store(weights + row * TOPK + kcol, value, out);
  // Each slot's place in its group (moe_count's work, done here while the picks are at hand).
  auto group = row / tl::maximum(seg_tokens, 1) * E + ids2;
  auto counter = counts + tl::program_id(0) % C * G;  // (our copy of the counters)
  auto rank = tl::atomic_add(counter + tl::where(out, group, 0), 1, out, {"relaxed", "gpu"});
  tl::store(ranks + row * TOPK + kcol, rank, out);
}

void moe_count(tl::Ptr<int32_t> ids, tl::Ptr<int32_t> counts, tl::Ptr<int32_t> ranks, tl::Int pairs, tl::Int E,
               tl::Int seg_pairs, tl::Int G, tl::Const<int> BP, tl::Const<int> C) {
  auto p = tl::program_id(0) * BP + tl::arange(0, BP);
  auto m = p < pairs;
  auto e = tl::load(ids + p, m, -1);
  auto valid = m & (e >= 0) & (e < E);
  auto group = p / tl::maximum(seg_pairs, 1) * E + e;
  auto counter = counts + tl::program_id(0) % C * G;
  auto rank = tl::atomic_add(counter + tl::where(valid, group, 0), 1, valid, {"relaxed", "gpu"});
  tl::store(ranks + p, tl::where(valid, rank, -1), m);
}

/// Programs [0, G): a group each (its tiles, and the sentinel in their rows past its pairs);
/// programs past G: TB slots each of those past the count (empty entries, sentinel rows).
void moe_tiles(tl::Ptr<int32_t> counts, tl::Ptr<int32_t> tiles, tl::Ptr<int32_t> starts, tl::Ptr<int32_t> bases,
               tl::Ptr<int32_t> sorted_ids, tl::Int G, tl::Int E, tl::Int slots, tl::Int pairs, tl::Const<int> BM,
               tl::Const<int> TB, tl::Const<int> GB, tl::Const<int> C) {
  auto pid = tl::program_id(0);
  auto tiles_of = [&](const Tensor& count) { return (count + (BM - 1)) / BM; };
  auto copy = tl::arange(0, C);
  // Every program sums the groups' tiles GB at a time (each group's count the sum of its C
  // copies): all of them, and those before its group.
  auto ig = tl::arange(0, GB);
  Values sums =
      tl::for_range(0, G, GB, Values{tl::scalar(0, tl::int32), tl::scalar(0, tl::int32)}, [&](Tensor g0, Values v) {
        auto g = g0 + ig;
        auto at = tl::expand_dims(copy * G, 1) + tl::expand_dims(g, 0);  // [C, GB]
        auto n = tiles_of(tl::sum(tl::load(counts + at, tl::expand_dims(g < G, 0), 0), 0));
        return Values{v[0] + tl::sum(n, 0), v[1] + tl::sum(tl::where(g < pid, n, 0), 0)};
      });
  auto total = tl::minimum(sums[0], slots);  // (at most the slots, as the host sized them)
  auto lanes = tl::arange(0, TB);
  auto pad_rows = [&](const Tensor& slot, const Tensor& from, const Tensor& in) {      // [TB] each
    auto row = tl::expand_dims(slot * BM, 1) + tl::expand_dims(tl::arange(0, BM), 0);  // [TB, BM]
    tl::store(sorted_ids + row, pairs, (row >= tl::expand_dims(from, 1)) & tl::expand_dims(in, 1));
  };
  tl::if_then(pid < G, [&] {
    auto mine = tl::load(counts + copy * G + pid);  // [C]
    auto before = sums[1], count = tl::sum(mine, 0), first_row = before * BM;
    tl::store(starts + pid, first_row);
    // Each copy's pairs after the copies before it: their first row.
    auto earlier = tl::expand_dims(copy, 0) < tl::expand_dims(copy, 1);  // [C, C]: (i, j) j < i
    tl::store(bases + copy * G + pid, first_row + tl::sum(tl::where(earlier, tl::expand_dims(mine, 0), 0), 1));
    tl::for_range(0, tiles_of(count), TB, [&](Tensor i0) {
      auto slot = before + i0 + lanes;
      auto in = (i0 + lanes < tiles_of(count)) & (slot < slots);
      auto end = tl::minimum((slot + 1) * BM, first_row + count);
      tl::store(tiles + 1 + slot * 3, pid % E, in);
      tl::store(tiles + 2 + slot * 3, slot * BM, in);
      tl::store(tiles + 3 + slot * 3, end, in);
      pad_rows(slot, end, in);
    });
  });
  tl::if_then(pid >= G, [&] {
    auto slot = (pid - G) * TB + lanes;
    auto in = (slot >= total) & (slot < slots);
    tl::store(tiles + 1 + slot * 3, 0, in);
    tl::store(tiles + 2 + slot * 3, 0, in);
    tl::store(tiles + 3 + slot * 3, 0, in);
    pad_rows(slot, slot * BM, in);
    tl::if_then(pid == G, [&] {
      tl::store(tiles, total);
      tl::store(starts + G, total * BM);
    });
  });
}

void moe_scatter(tl::Ptr<int32_t> ids, tl::Ptr<int32_t> ranks, tl::Ptr<int32_t> bases, tl::Ptr<int32_t> sorted_ids,
                 tl::Ptr<int32_t> dest, tl::Ptr<int32_t> counts, tl::Int pairs, tl::Int E, tl::Int seg_pairs, tl::Int G,
                 tl::Int chunk, tl::Const<int> BP, tl::Const<int> C) {
  auto p = tl::program_id(0) * BP + tl::arange(0, BP);
  auto m = p < pairs;
  auto rank = tl::load(ranks + p, m, -1);
  auto valid = rank >= 0;
  auto e = tl::load(ids + p, valid, 0);
  auto group = p / tl::maximum(seg_pairs, 1) * E + e;
  auto copy = p / tl::maximum(chunk, 1) % C;  // (the counters' copy that ranked the pair)
  auto row = tl::load(bases + copy * G + group, valid, 0) + rank;
  tl::store(sorted_ids + row, p, valid);
  tl::store(dest + p, tl::where(valid, row, -1), m);
  tl::store(counts + p, 0, p < G * C);  // (read by moe_tiles only, which is done)
}

const std::vector<std::string> kTopkParams = {"logits", "ids",  "weights",    "counts", "ranks",
                                              "tokens", "E",    "seg_tokens", "G",      "BT",
                                              "BE",     "TOPK", "SIGMOID",    "RENORM", "C"};
const Constants kTopkDefaults = {{"BT", 16}, {"BE", 64}, {"TOPK", 2}, {"SIGMOID", 0}, {"RENORM", 1}, {"C", 1}};
constexpr int kPairsPerProgram = 1024;
int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}
// Slots per program of moe_tiles: its pad rows ([slots, BM]) about 8192 elements a program.
int slots_per_program(int bm) { return std::clamp(8192 / bm, 1, 128); }
// Groups summed at a time by each program of moe_tiles: all of them, up to 4096 counters.
int groups_per_step(int64_t groups, int copies) { return std::min(4096 / copies, pow2_at_least(groups)); }
/// Copies of the counters: a slot's place in its group is an atomic add on its group's counter,
/// and the adds on one counter are done one at a time (a few tens of ns each, measured: 1024
/// slots per expert took 30 us on an H200), so programs spread them over copies (a program's
/// copy: its number modulo the copies), about 64 slots on each where the tokens allow.
int counter_copies(int64_t max_pairs, int64_t groups) {
  int c = 1;
  while (c < 32 && int64_t(c) * 2 * 64 * groups <= max_pairs) c *= 2;
  return c;
}

/// moe_topk's tokens per program: at most 4096 logits a program (the registers of a program of
/// 4 warps), and about 256 programs where the tokens allow (a program's picks are a chain of k
/// reductions per row it holds: fewer rows each, more programs side by side).
int topk_rows(int64_t max_tokens, int64_t E) {
  const int cap = std::max(1, 4096 / pow2_at_least(E));
  int want = 1;
  while (int64_t(want) * 2 * 256 <= max_tokens) want *= 2;
  return std::clamp(want, std::min(4, cap), cap);
}
}  // namespace

const KernelDef& moe_topk_kernel(ir::DType logits) {
  static const KernelDef f32("moe_topk", moe_topk<float>, kTopkParams, kTopkDefaults);
  static const KernelDef b16("moe_topk_bf16", moe_topk<bf16>, kTopkParams, kTopkDefaults);
  if (logits != ir::DType::f32 && logits != ir::DType::bf16)
    throw Error(str_cat("tiledist: moe_topk: logits of ", ir::dtype_name(logits), " (f32 or bf16)"));
  return logits == ir::DType::f32 ? f32 : b16;
}
const KernelDef& moe_count_kernel() {
  static const KernelDef def("moe_count", moe_count,
                             {"ids", "counts", "ranks", "pairs", "E", "seg_pairs", "G", "BP", "C"},
                             {{"BP", 1024}, {"C", 1}});
  return def;
}
const KernelDef& moe_tiles_kernel() {
  static const KernelDef def(
      "moe_tiles", moe_tiles,
      {"counts", "tiles", "starts", "bases", "sorted_ids", "G", "E", "slots", "pairs", "BM", "TB", "GB", "C"},
      {{"BM", 64}, {"TB", 128}, {"GB", 1024}, {"C", 1}});
  return def;
}
const KernelDef& moe_scatter_kernel() {
  static const KernelDef def(
      "moe_scatter", moe_scatter,
      {"ids", "ranks", "bases", "sorted_ids", "dest", "counts", "pairs", "E", "seg_pairs", "G", "chunk", "BP", "C"},
      {{"BP", 1024}, {"C", 1}});
  return def;
}
TILEDIST_REGISTER(moe_topk_kernel(ir::DType::f32));
TILEDIST_REGISTER(moe_topk_kernel(ir::DType::bf16));
TILEDIST_REGISTER(moe_count_kernel());
TILEDIST_REGISTER(moe_tiles_kernel());
TILEDIST_REGISTER(moe_scatter_kernel());

struct MoeRouting::State {
  Target target;
  int64_t max_tokens = 0, E = 0, groups = 0, slots = 0, rows = 0;
  int topk = 1, copies = 1, topk_rows = 1;
  Options options;
  std::optional<Kernel> topk_f32, topk_bf16;  // compiled at the first run with logits of the dtype
  Kernel count, table, scatter;
  detail::Scratch<int32_t> ids, ranks, sorted_ids, dest, tiles, starts;
  detail::Scratch<int32_t> counts, bases;  // [copies, groups]: zero between runs (moe_scatter); each copy's first row
  detail::Scratch<float> weights;
  detail::RunStreams streams;
  bool gpu = false;
  ~State() { streams.finish(); }
  const Kernel& topk_kernel(ir::DType dtype) {
    std::optional<Kernel>& k = dtype == ir::DType::f32 ? topk_f32 : topk_bf16;
    if (!k) {
      const int be = pow2_at_least(E);
      k = compile(moe_topk_kernel(dtype),
                  {{"BT", topk_rows},
                   {"BE", be},
                   {"TOPK", topk},
                   {"SIGMOID", options.scores == Scores::sigmoid ? 1 : 0},
                   {"RENORM", options.renormalize ? 1 : 0},
                   {"C", copies}},
                  target);
    }
    return *k;
  }
};

MoeRouting::MoeRouting(const Target& target, int64_t max_tokens, int64_t experts, int topk, Options options)
    : s_(std::make_shared<State>()) {
  if (experts < 1 || topk < 1 || topk > experts)
    throw Error(str_cat("tiledist: moe_routing: top-", topk, " of ", experts,
                        " experts (1 <= topk <= experts: each token's k experts are distinct)"));
  if (topk > 32) throw Error(str_cat("tiledist: moe_routing: top-", topk, " (at most 32)"));
  if (experts > 4096) throw Error(str_cat("tiledist: moe_routing: ", experts, " experts (at most 4096)"));
  if (options.block_rows < 1 || (options.block_rows & (options.block_rows - 1)))
    throw Error(str_cat("tiledist: moe_routing: block_rows = ", options.block_rows, " (a power of two)"));
  if (options.segments < 1 || max_tokens < 0 || max_tokens % options.segments)
    throw Error(str_cat("tiledist: moe_routing: ", max_tokens, " tokens in ", options.segments,
                        " segments (segments >= 1, dividing the tokens)"));
  State& s = *s_;
  s.target = target, s.max_tokens = max_tokens, s.E = experts, s.topk = topk, s.options = options;
  s.gpu = detail::on_gpu(target);
  const int64_t pairs = max_tokens * topk, bm = options.block_rows;
  s.groups = experts * options.segments;
  s.rows = rows_for(max_tokens, experts, topk, options);
  s.slots = s.rows / bm;
  if (s.rows > INT32_MAX)
    throw Error(str_cat("tiledist: moe_routing: ", max_tokens, " tokens of top-", topk, " make ", s.rows,
                        " rows (at most 2^31 - 1)"));
  s.ids = detail::Scratch<int32_t>(target, size_t(pairs));
  s.weights = detail::Scratch<float>(target, size_t(pairs));
  s.ranks = detail::Scratch<int32_t>(target, size_t(pairs));
  s.dest = detail::Scratch<int32_t>(target, size_t(pairs));
  s.copies = counter_copies(pairs, s.groups);
  s.topk_rows = topk_rows(max_tokens, experts);
  s.counts = detail::Scratch<int32_t>(target, size_t(s.copies * s.groups));
  s.bases = detail::Scratch<int32_t>(target, size_t(s.copies * s.groups));
  s.sorted_ids = detail::Scratch<int32_t>(target, size_t(s.rows));
  s.tiles = detail::Scratch<int32_t>(target, size_t(1 + 3 * s.slots));
  s.starts = detail::Scratch<int32_t>(target, size_t(s.groups + 1));
  s.count = compile(moe_count_kernel(), {{"BP", kPairsPerProgram}, {"C", s.copies}}, target);
  s.table = compile(moe_tiles_kernel(),
                    {{"BM", int(bm)},
                     {"TB", slots_per_program(int(bm))},
                     {"GB", groups_per_step(s.groups, s.copies)},
                     {"C", s.copies}},
                    target);
  s.scatter = compile(moe_scatter_kernel(), {{"BP", kPairsPerProgram}, {"C", s.copies}}, target);
}

MoeRouting::~MoeRouting() = default;

void MoeRouting::check_tokens(int64_t tokens, const char* what) const {
  const State& s = *s_;
  if (tokens < 0 || tokens > s.max_tokens)
    throw Error(str_cat("tiledist: moe_routing: ", what, " of ", tokens,
                        " tokens; this MoeRouting was made for at most ", s.max_tokens));
  if (tokens % s.options.segments)
    throw Error(str_cat("tiledist: moe_routing: ", what, " of ", tokens, " tokens, not a multiple of its ",
                        s.options.segments, " segments"));
}

template <class T>
void MoeRouting::route(const T* logits, int64_t tokens, const runtime::Stream* stream) {
  check_tokens(tokens, "run");
  State& s = *s_;
  if (!logits && tokens > 0) throw Error("tiledist: moe_routing: no logits (a null pointer)");
  const runtime::Stream* on = s.gpu ? &s.streams.enter(stream, "moe_routing") : nullptr;
  const Kernel& k = s.topk_kernel(std::is_same_v<T, float> ? ir::DType::f32 : ir::DType::bf16);
  const int bt = s.topk_rows;
  detail::launch(k, on, Grid(static_cast<int>(std::max<int64_t>(1, (tokens + bt - 1) / bt))), logits, s.ids.data(),
                 s.weights.data(), s.counts.data(), s.ranks.data(), static_cast<int>(tokens), static_cast<int>(s.E),
                 static_cast<int>(tokens / s.options.segments), static_cast<int>(s.groups));
  sort(s.ids.data(), tokens, on, /*chunk=*/bt * s.topk);
  if (on) s.streams.leave(*on, stream);
}
void MoeRouting::run(const float* logits, int64_t tokens, const runtime::Stream* stream) {
  route(logits, tokens, stream);
}
void MoeRouting::run(const bf16* logits, int64_t tokens, const runtime::Stream* stream) {
  route(logits, tokens, stream);
}

void MoeRouting::align(const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream) {
  check_tokens(tokens, "align");
  State& s = *s_;
  if (!topk_ids && tokens > 0) throw Error("tiledist: moe_routing: no top-k ids (a null pointer)");
  const runtime::Stream* on = s.gpu ? &s.streams.enter(stream, "moe_routing") : nullptr;
  sort(topk_ids, tokens, on, /*chunk=*/0);
  if (on) s.streams.leave(*on, stream);
}

void MoeRouting::sort(const int32_t* ids, int64_t tokens, const runtime::Stream* on, int chunk) {
  State& s = *s_;
  const int pairs = static_cast<int>(tokens * s.topk), E = static_cast<int>(s.E);
  const int seg_pairs = pairs / s.options.segments, groups = static_cast<int>(s.groups);
  auto programs = [](int64_t n, int64_t per) {
    return Grid(static_cast<int>(std::max<int64_t>(1, (n + per - 1) / per)));
  };
  if (chunk == 0) {  // (else moe_topk has counted them, `chunk` pairs a program)
    detail::launch(s.count, on, programs(pairs, kPairsPerProgram), ids, s.counts.data(), s.ranks.data(), pairs, E,
                   seg_pairs, groups);
    chunk = kPairsPerProgram;
  }
  const Grid table_grid{groups + programs(s.slots, slots_per_program(s.options.block_rows)).x};
  detail::launch(s.table, on, table_grid, s.counts.data(), s.tiles.data(), s.starts.data(), s.bases.data(),
                 s.sorted_ids.data(), groups, E, static_cast<int>(s.slots), pairs);
  detail::launch(s.scatter, on, programs(std::max(pairs, groups * s.copies), kPairsPerProgram), ids, s.ranks.data(),
                 s.bases.data(), s.sorted_ids.data(), s.dest.data(), s.counts.data(), pairs, E, seg_pairs, groups,
                 chunk);
}

int64_t MoeRouting::rows_for(int64_t max_tokens, int64_t experts, int topk, const Options& options) {
  const int64_t bm = options.block_rows;
  return ((max_tokens * topk + bm - 1) / bm + experts * options.segments) * bm;
}

const int32_t* MoeRouting::topk_ids() const { return s_->ids.data(); }
const float* MoeRouting::topk_weights() const { return s_->weights.data(); }
const int32_t* MoeRouting::sorted_ids() const { return s_->sorted_ids.data(); }
const int32_t* MoeRouting::dest() const { return s_->dest.data(); }
const int32_t* MoeRouting::tiles() const { return s_->tiles.data(); }
const int32_t* MoeRouting::group_starts() const { return s_->starts.data(); }
int64_t MoeRouting::rows() const { return s_->rows; }
int64_t MoeRouting::slots() const { return s_->slots; }
int64_t MoeRouting::experts() const { return s_->E; }
int MoeRouting::topk() const { return s_->topk; }
int MoeRouting::block_rows() const { return s_->options.block_rows; }
int MoeRouting::segments() const { return s_->options.segments; }
int64_t MoeRouting::max_tokens() const { return s_->max_tokens; }

}  // namespace tiledist::kernels
