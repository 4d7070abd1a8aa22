// Flash decoding (kernels/flash_decode.h), written as a Triton user writes split-KV decoding:
// a program per (split of the keys, sequence and KV head), its query rows the KV head's group
// of query heads times the step's tokens (grouped-query heads packed, so a KV block is read once
// for all of them), an online softmax over the split's key blocks in base 2, and a second
// kernel that weighs the splits by their log-sum-exp.
#include "kernels/flash_decode.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/device_sync.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

template <class T>
void flash_decode(tl::Ptr<T> q, tl::Ptr<T> k, tl::Ptr<T> v, tl::Ptr<int32_t> kv_lens, tl::Ptr<int32_t> block_table,
                  tl::Ptr<int32_t> kv_starts, tl::Ptr<int32_t> kv_totals, tl::Ptr<float> part_o,
                  tl::Ptr<float> part_lse, tl::Ptr<int32_t> sent, tl::Ptr<int32_t> flags, tl::Int q_tokens,
                  tl::Int max_kv, tl::Int H, tl::Int H_KV, tl::Int chunk, tl::Int half_parts, tl::Int call,
                  tl::Float sm_scale, tl::Const<int> HEAD_DIM, tl::Const<int> BLOCK_M, tl::Const<int> BLOCK_N,
                  tl::Const<int> CAUSAL, tl::Const<int> DIST, tl::Const<int> PAGE) {
  const int D = HEAD_DIM;
  const tl::DType dtype = dtype_of<T>();
  auto split = tl::program_id(0), splits = tl::num_programs(0);
  auto b = tl::program_id(1) / H_KV, kh = tl::program_id(1) % H_KV;
  auto group = H / H_KV;
  auto len = tl::load(kv_lens + b);
  // Query rows r = t * group + g: token t's head kh * group + g.
  auto r = tl::arange(0, BLOCK_M);
  auto t = r / group, head = kh * group + r % group;
  auto live = r < q_tokens * group;
  auto row = (b * q_tokens + t) * H + head;  // (of q, o and the partial results)
  auto offs_d = tl::expand_dims(tl::arange(0, D), 0);
  auto q_tile = tl::load(q + tl::expand_dims(row.to(tl::int64) * D, 1) + offs_d, tl::expand_dims(live, 1), 0.0f);
  // Each row's keys: [0, limit) (causal: the step's later tokens hidden from earlier ones; 2:
  // across ranks, this slice's keys positions [start, start + len) of the sequence's total,
  // the step's tokens its last q_tokens: token t sees the positions before total - q_tokens +
  // t + 1).
  auto limit = tl::where(live, len, 0);
  if (CAUSAL.value() == 1) limit = tl::where(live, tl::maximum(len - q_tokens + t + 1, 0), 0);
  if (CAUSAL.value() == 2) {
    auto seen = tl::load(kv_totals + b) - q_tokens + t + 1 - tl::load(kv_starts + b);
    limit = tl::where(live, tl::minimum(tl::maximum(seen, 0), len), 0);
  }
  // (paged: the cache's pages [pages, PAGE, H_KV, D], sequence b's page i at block_table[b, i],
  // max_kv its entries a sequence; else sequence b's rows [b * max_kv, + max_kv))
  auto kv_base = PAGE ? (kh * D).to(tl::int64) : b.to(tl::int64) * max_kv * H_KV * D + kh * D;
  auto stride = H_KV * D;
  auto offs_n = tl::arange(0, BLOCK_N);
  auto qk_scale = sm_scale * 1.44269504f;  // 1/ln(2): exp(x) = exp2(x * log2(e))
  auto lo = split * chunk, hi = tl::minimum((split + 1) * chunk, len);
  Values state = {tl::full({BLOCK_M}, -INFINITY, tl::float32), tl::zeros({BLOCK_M}, tl::float32),
                  tl::zeros({BLOCK_M, D}, tl::float32)};
  state = tl::for_range(lo, hi, BLOCK_N, std::move(state), [&](Tensor start_n, Values c) {
    Tensor m_i = c[0], l_i = c[1], acc = c[2];
    auto cols = start_n + offs_n;
    auto in = tl::expand_dims(cols < hi, 1);
    Tensor key = cols.to(tl::int64);  // (each column's row of the cache)
    if (PAGE)
      key = tl::load(block_table + (b.to(tl::int64) * max_kv + cols / PAGE), cols < hi, 0).to(tl::int64) * PAGE +
            cols % PAGE;
    auto at = kv_base + tl::expand_dims(key * stride, 1) + offs_d;
    auto k_tile = tl::load(k + at, in, 0.0f);
    auto qk = tl::dot(q_tile, tl::trans(k_tile));  // [BLOCK_M, BLOCK_N], f32
    auto keep = tl::expand_dims(cols, 0) < tl::expand_dims(limit, 1);
    qk = tl::where(keep, qk * qk_scale, -INFINITY);
    auto m_ij = tl::maximum(m_i, tl::max(qk, 1));
    // (a row with no key yet: m_ij -inf; subtract 0 instead, so that exp2 gives 0, not NaN)
    auto m_safe = tl::where(m_ij == -INFINITY, 0.0f, m_ij);
    auto p = tl::exp2(qk - tl::expand_dims(m_safe, 1));
    auto alpha = tl::exp2(m_i - m_safe);
    l_i = l_i * alpha + tl::sum(p, 1);
    acc = acc * tl::expand_dims(alpha, 1);
    auto v_tile = tl::load(v + at, in, 0.0f);
    acc = tl::dot(p.to(dtype), v_tile, acc);
    return Values{m_ij, l_i, acc};
  });
  auto seen = state[1] > 0.0f;
  auto out = state[2] / tl::expand_dims(tl::where(seen, state[1], 1.0f), 1);
  auto lse = tl::where(seen, state[0] + tl::log2(tl::where(seen, state[1], 1.0f)), -INFINITY);
  if (DIST == 0) {
    auto part = row.to(tl::int64) * splits + split;
    tl::store(part_o + tl::expand_dims(part * D, 1) + offs_d, out, tl::expand_dims(live, 1));
    tl::store(part_lse + part, lse, live);
    return;
  }
  // Across ranks: the part goes to every rank, at [call % 2][row][us][split] there (a half
  // holds half_parts, whatever the run's shape: a peer may still read the other); the last
  // program sets our flag on every rank and waits for every rank's, so that each rank's combine
  // (queued after) finds every rank's parts.
  auto n = dist::num_ranks(), me = dist::rank();
  auto part = (call % 2).to(tl::int64) * half_parts + (row.to(tl::int64) * n + me) * splits + split;
  tl::for_range(0, n, 1, [&](Tensor to) {
    tl::store(dist::symm_at(part_o, to) + tl::expand_dims(part * D, 1) + offs_d, out, tl::expand_dims(live, 1));
    tl::store(dist::symm_at(part_lse, to) + part, lse, live);
  });
  detail::signal_and_wait_all(sent, flags, call, tl::num_programs(0) * tl::num_programs(1));
}

template <class T>
void flash_decode_combine(tl::Ptr<float> part_o, tl::Ptr<float> part_lse, tl::Ptr<T> o, tl::Int splits,
                          tl::Const<int> HEAD_DIM, tl::Const<int> BS) {
  const int D = HEAD_DIM;
  auto row = tl::program_id(0).to(tl::int64);
  auto s = tl::arange(0, BS);
  auto lse = tl::load(part_lse + row * splits + s, s < splits, -INFINITY);
  auto m = tl::max(lse, 0);
  auto w = tl::exp2(lse - tl::where(m == -INFINITY, 0.0f, m));  // (0 for the splits that saw no key)
  auto parts = tl::load(part_o + tl::expand_dims((row * splits + s) * D, 1) + tl::expand_dims(tl::arange(0, D), 0),
                        tl::expand_dims(s < splits, 1), 0.0f);
  auto total = tl::sum(w, 0);
  auto out = tl::sum(parts * tl::expand_dims(w, 1), 0) / tl::where(total > 0.0f, total, 1.0f);
  tl::store(o + row * D + tl::arange(0, D), out.to(dtype_of<T>()));
}

const std::vector<std::string> kParams = {
    "q",        "k",        "v",        "kv_lens", "block_table", "kv_starts", "kv_totals", "part_o",     "part_lse",
    "sent",     "flags",    "q_tokens", "max_kv",  "H",           "H_KV",      "chunk",     "half_parts", "call",
    "sm_scale", "HEAD_DIM", "BLOCK_M",  "BLOCK_N", "CAUSAL",      "DIST",      "PAGE"};
const Constants kDefaults = {{"HEAD_DIM", 128}, {"BLOCK_M", 16}, {"BLOCK_N", 64},
                             {"CAUSAL", 1},     {"DIST", 0},     {"PAGE", 0}};
const std::vector<std::string> kCombineParams = {"part_o", "part_lse", "o", "splits", "HEAD_DIM", "BS"};
const Constants kCombineDefaults = {{"HEAD_DIM", 128}, {"BS", 16}};
constexpr int kMaxRows = 16;       // query rows a KV head (BLOCK_M)
constexpr int kMaxSplits = 128;    // of a sequence's keys
constexpr int kMaxDistSplits = 8;  // of a rank's slice of them (DistFlashDecode's parts buffer)
}  // namespace

const KernelDef& flash_decode_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("flash_decode", flash_decode<bf16>, kParams, kDefaults);
  static const KernelDef f16_def("flash_decode_f16", flash_decode<f16>, kParams, kDefaults);
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: flash_decode: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
const KernelDef& flash_decode_combine_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("flash_decode_combine", flash_decode_combine<bf16>, kCombineParams, kCombineDefaults);
  static const KernelDef f16_def("flash_decode_combine_f16", flash_decode_combine<f16>, kCombineParams,
                                 kCombineDefaults);
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: flash_decode: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}

namespace {
/// What FlashDecode and DistFlashDecode share: the shape, the kernels, how keys are split.
struct Decoder {
  Target target;
  int heads = 0, kv_heads = 0, head_dim = 0, block_n = 64, programs = 0, max_splits = kMaxSplits;
  int sms = 0;  // the GPU's SMs, whose programs each should be alike (0: not weighed)
  ir::DType dtype = ir::DType::bf16;
  bool causal = true;
  float scale = 0;
  CompileOptions options;
  Kernel decode;
  std::mutex mutex;
  std::map<int, Kernel> combines;  // by BS
  std::map<int, Kernel> pages;     // the paged cache's decode, by page size
  std::map<int, Kernel> across;    // DistFlashDecode's causal decode (CAUSAL 2), at key 0
  bool gpu() const { return target.is_gpu(); }

  Decoder(const char* me, const Target& t, int h, int kvh, int d, ir::DType dt, bool c, float sc, bool across) {
    if (dt != ir::DType::bf16 && dt != ir::DType::f16)
      throw Error(str_cat(me, "operands of ", ir::dtype_name(dt), ": only bf16 and f16 are supported"));
    if (d != 64 && d != 128) throw Error(str_cat(me, "head_dim = ", d, ": only 64 and 128 are supported"));
    if (h < 1 || kvh < 1 || h % kvh != 0 || h / kvh > kMaxRows)
      throw Error(str_cat(me, "heads = ", h, ", kv_heads = ", kvh,
                          ": both positive, heads a multiple of kv_heads, at most ", kMaxRows, " heads a KV head"));
    if (!std::isfinite(sc) || sc < 0)
      throw Error(str_cat(me, "scale = ", sc, ": a positive number (or 0 for 1/sqrt(head_dim))"));
    detail::on_gpu(t);  // (throws for a GPU whose streams the objects do not take yet)
    target = t, heads = h, kv_heads = kvh, head_dim = d, dtype = dt, causal = c;
    scale = sc > 0 ? sc : 1.0f / std::sqrt(float(d));
    programs = gpu() ? 2 * cuda::device().sms : 8;
    sms = gpu() ? cuda::device().sms : 0;
    block_n = gpu() ? 64 : 32;
    options = CompileOptions::from_env();
    decode = compile(
        flash_decode_kernel(dt),
        {{"HEAD_DIM", d}, {"BLOCK_M", kMaxRows}, {"BLOCK_N", block_n}, {"CAUSAL", int(c)}, {"DIST", int(across)}},
        target, options);
  }
  /// Splits enough for `programs` programs; where the SMs are known, of those up to four times
  /// as many the one whose programs fill the SMs' last round best (fewest on a tie): 8 × 8 rows
  /// in 5 splits are 320 programs, 2.4 a SM of 132, the last round 40% full; in 6, 384, 2.9.
  int splits(int batch, int max_kv) const {
    const int64_t blocks = std::max<int64_t>((int64_t(max_kv) + block_n - 1) / block_n, 1);
    const int64_t items = std::max<int64_t>(int64_t(batch) * kv_heads, 1);
    const int64_t most = std::min<int64_t>(blocks, max_splits);
    const int64_t least = std::clamp<int64_t>((programs + items - 1) / items, 1, most);
    if (sms <= 0) return static_cast<int>(least);
    auto filled = [&](int64_t s) {  // (the programs over the SMs' rounds)
      const int64_t p = items * s;
      return double(p) / double((p + sms - 1) / sms * sms);
    };
    int64_t best = least;
    for (int64_t s = least + 1; s <= std::min(most, 4 * least); ++s)
      if (filled(s) > filled(best) + 1e-9) best = s;
    return static_cast<int>(best);
  }
  /// keys a split (whole blocks)
  int chunk(int splits, int max_kv) const {
    const int64_t blocks = std::max<int64_t>((int64_t(max_kv) + block_n - 1) / block_n, 1);
    return static_cast<int>((blocks + splits - 1) / splits * block_n);
  }
  /// The decode of a paged cache of `page`-row pages, and the combine of `parts` parts (BS the
  /// power of two at or above), each compiled at its first run.
  const Kernel& paged(int page) {
    return compiled(
        pages, page, flash_decode_kernel(dtype),
        {{"HEAD_DIM", head_dim}, {"BLOCK_M", kMaxRows}, {"BLOCK_N", block_n}, {"CAUSAL", int(causal)}, {"PAGE", page}});
  }
  /// The decode causal across ranks (DistFlashDecode's, given its slices' places), compiled at
  /// its first run.
  const Kernel& causal_across() {
    return compiled(across, 0, flash_decode_kernel(dtype),
                    {{"HEAD_DIM", head_dim}, {"BLOCK_M", kMaxRows}, {"BLOCK_N", block_n}, {"CAUSAL", 2}, {"DIST", 1}});
  }
  const Kernel& combine(int parts) {
    const int bs = static_cast<int>(std::bit_ceil(unsigned(std::max(parts, 1))));
    return compiled(combines, bs, flash_decode_combine_kernel(dtype), {{"HEAD_DIM", head_dim}, {"BS", bs}});
  }
  const Kernel& compiled(std::map<int, Kernel>& made, int key, const KernelDef& def, const Constants& constants) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = made.find(key);
    if (it == made.end()) it = made.emplace(key, compile(def, constants, target, options)).first;
    return it->second;
  }
  /// Throws for a run's bad arguments (`what`: the object's name).
  template <class T>
  void check(const char* me, const T* q, const T* k, const T* v, const int32_t* lens, const T* o, int batch,
             int q_tokens, int max_kv) const {
    if (dtype_of<T>() != dtype)
      throw Error(str_cat(me, "run with ", ir::dtype_name(dtype_of<T>()), " operands on an object made for ",
                          ir::dtype_name(dtype)));
    const int group = heads / kv_heads;
    if (batch < 0 || max_kv < 0 || q_tokens < 1 || q_tokens * group > kMaxRows)
      throw Error(str_cat(me, "batch = ", batch, ", q_tokens = ", q_tokens, ", max_kv = ", max_kv,
                          ": batch and max_kv not negative, 1 <= q_tokens and q_tokens * heads / kv_heads (", group,
                          ") <= ", kMaxRows));
    if (int64_t(batch) * kv_heads > 65535)
      throw Error(str_cat(me, "batch * kv_heads = ", int64_t(batch) * kv_heads, ": at most 65535 (the grid's y)"));
    if (int64_t(max_kv) * kv_heads * head_dim >= INT32_MAX || int64_t(batch) * q_tokens * heads >= INT32_MAX)
      throw Error(str_cat(me, "max_kv = ", max_kv, ", batch = ", batch, ": a sequence's cache, and the query rows, ",
                          "under 2^31 elements (32-bit offsets within them)"));
    if (batch > 0 && (!q || !k || !v || !lens || !o))
      throw Error(str_cat(me, "a null pointer among q, k_cache, v_cache, kv_lens, o"));
  }
};
}  // namespace

struct FlashDecode::State {
  Decoder core;
  detail::Scratch<float> part_o, lse;           // grown as runs need
  std::vector<detail::Scratch<float>> retired;  // outgrown, kept while a graph may use them
  detail::RunStreams streams;
  State(const Target& t, int h, int kvh, int d, ir::DType dt, bool c, float sc)
      : core("tiledist: flash_decode: ", t, h, kvh, d, dt, c, sc, false) {}
  ~State() { streams.finish(); }
};

FlashDecode::FlashDecode(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype, bool causal,
                         float scale)
    : s_(std::make_shared<State>(target, heads, kv_heads, head_dim, dtype, causal, scale)) {}

FlashDecode::~FlashDecode() = default;

int FlashDecode::splits(int batch, int max_kv) const { return s_->core.splits(batch, max_kv); }

template <AttentionOperand T>
void FlashDecode::run(const T* q, const T* k_cache, const T* v_cache, const int32_t* kv_lens, T* o, int batch,
                      int q_tokens, int max_kv, const runtime::Stream* stream) {
  run_on(q, k_cache, v_cache, kv_lens, nullptr, 0, o, batch, q_tokens, max_kv, stream);
}
template <AttentionOperand T>
void FlashDecode::run_paged(const T* q, const T* k_pages, const T* v_pages, const int32_t* block_table,
                            const int32_t* kv_lens, T* o, int batch, int q_tokens, int page_size, int max_pages,
                            const runtime::Stream* stream) {
  const char* me = "tiledist: flash_decode: ";
  if (page_size < 1 || (page_size & (page_size - 1)) != 0 || page_size > 4096 || max_pages < 0)
    throw Error(str_cat(me, "page_size = ", page_size, ", max_pages = ", max_pages,
                        ": pages of a power of two rows up to 4096, max_pages not negative"));
  if (int64_t(max_pages) * page_size > INT32_MAX)
    throw Error(str_cat(me, max_pages, " pages of ", page_size, " rows: a sequence's keys under 2^31"));
  if (batch > 0 && !block_table) throw Error(str_cat(me, "a null block_table"));
  run_on(q, k_pages, v_pages, kv_lens, block_table, page_size, o, batch, q_tokens, max_pages * page_size, stream);
}
template <AttentionOperand T>
void FlashDecode::run_on(const T* q, const T* k_cache, const T* v_cache, const int32_t* kv_lens,
                         const int32_t* block_table, int page_size, T* o, int batch, int q_tokens, int max_kv,
                         const runtime::Stream* stream) {
  State& s = *s_;
  Decoder& c = s.core;
  c.check("tiledist: flash_decode: ", q, k_cache, v_cache, kv_lens, o, batch, q_tokens, max_kv);
  if (batch == 0) return;
  const int splits = c.splits(batch, max_kv);
  const size_t rows = size_t(batch) * q_tokens * c.heads;
  const Kernel& combine = c.combine(splits);
  if (s.lse.size() < rows * splits) {  // (grown once the runs that read the old ones are done)
    s.streams.finish();
    if (s.streams.captured()) {  // (a graph holds the old ones: kept for its launches)
      s.retired.push_back(std::move(s.part_o));
      s.retired.push_back(std::move(s.lse));
    }
    s.part_o = detail::Scratch<float>(c.target, rows * splits * c.head_dim);
    s.lse = detail::Scratch<float>(c.target, rows * splits);
  }
  const runtime::Stream* on = c.gpu() ? &s.streams.enter(stream, "flash_decode", true) : nullptr;
  const int page = block_table ? page_size : 0;
  detail::launch(page ? c.paged(page) : c.decode, on, Grid(splits, int64_t(batch) * c.kv_heads), q, k_cache, v_cache,
                 kv_lens, block_table, static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                 s.part_o.data(), s.lse.data(), static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                 q_tokens, page ? max_kv / page : max_kv, c.heads, c.kv_heads, c.chunk(splits, max_kv), 0, 0, c.scale);
  detail::launch(combine, on, Grid(int64_t(rows)), static_cast<const float*>(s.part_o.data()),
                 static_cast<const float*>(s.lse.data()), o, splits);
  if (on) s.streams.leave(*on, stream);
}

template void FlashDecode::run(const bf16*, const bf16*, const bf16*, const int32_t*, bf16*, int, int, int,
                               const runtime::Stream*);
template void FlashDecode::run(const f16*, const f16*, const f16*, const int32_t*, f16*, int, int, int,
                               const runtime::Stream*);
template void FlashDecode::run_paged(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*, bf16*, int,
                                     int, int, int, const runtime::Stream*);
template void FlashDecode::run_paged(const f16*, const f16*, const f16*, const int32_t*, const int32_t*, f16*, int, int,
                                     int, int, const runtime::Stream*);

struct DistFlashDecode::State {
  Decoder core;
  int rank = 0, ranks = 1, max_rows = 0;
  size_t half_parts = 0;  // the parts of a half: max_rows * ranks * kMaxDistSplits
  int32_t calls = 0;
  float* part_o = nullptr;   // symmetric [2, max_rows, ranks, max_splits, head_dim]
  float* lse = nullptr;      // symmetric [2, max_rows, ranks, max_splits]
  int32_t* flags = nullptr;  // symmetric [ranks]: the last call whose parts from rank r are here
  detail::Scratch<int32_t> sent;
  detail::RunStreams streams;
  State(const Target& t, int h, int kvh, int d, ir::DType dt, float sc)
      : core("tiledist: dist_flash_decode: ", t, h, kvh, d, dt, false, sc, true) {}
  ~State() {
    streams.finish();
    for (void* p : {static_cast<void*>(flags), static_cast<void*>(lse), static_cast<void*>(part_o)})
      if (p) detail::symm_release(core.target, p);
  }
};

DistFlashDecode::DistFlashDecode(const Target& target, int heads, int kv_heads, int head_dim, int max_batch,
                                 int max_q_tokens, ir::DType dtype, float scale)
    : s_(std::make_shared<State>(target, heads, kv_heads, head_dim, dtype, scale)) {
  State& s = *s_;
  if (max_batch < 0 || max_q_tokens < 1 || max_q_tokens * (heads / kv_heads) > kMaxRows)
    throw Error(str_cat("tiledist: dist_flash_decode: max_batch = ", max_batch, ", max_q_tokens = ", max_q_tokens,
                        ": max_batch not negative, 1 <= max_q_tokens * heads / kv_heads <= ", kMaxRows));
  s.rank = detail::world_rank(target), s.ranks = detail::world_ranks(target);
  s.core.max_splits = kMaxDistSplits;
  s.core.programs = 256;  // (not the GPU's SMs: every rank must split alike, whatever its device)
  s.core.sms = 0;
  s.max_rows = max_batch * max_q_tokens * heads;
  s.half_parts = size_t(std::max(s.max_rows, 1)) * s.ranks * kMaxDistSplits;
  if (s.half_parts * head_dim >= INT32_MAX)
    throw Error(str_cat("tiledist: dist_flash_decode: ", s.max_rows, " query rows on ", s.ranks,
                        " ranks: the parts' elements under 2^31"));
  const size_t parts = 2 * s.half_parts;
  s.part_o = static_cast<float*>(detail::symm_zeroed(target, parts * head_dim * 4));
  s.lse = static_cast<float*>(detail::symm_zeroed(target, parts * 4));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, size_t(s.ranks) * 4));
  detail::symm_label(target, s.flags, size_t(s.ranks) * 4, {"DistFlashDecode's signal words [ranks]", 4, [](int64_t i) {
                                                              return str_cat("the partial results from rank ", i);
                                                            }});
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.sent = detail::Scratch<int32_t>(target, 1);
}

DistFlashDecode::~DistFlashDecode() = default;

template <AttentionOperand T>
void DistFlashDecode::run(const T* q, const T* k_slice, const T* v_slice, const int32_t* kv_lens, T* o, int batch,
                          int q_tokens, int max_kv, const runtime::Stream* stream) {
  run(q, k_slice, v_slice, kv_lens, nullptr, nullptr, o, batch, q_tokens, max_kv, stream);
}

template <AttentionOperand T>
void DistFlashDecode::run(const T* q, const T* k_slice, const T* v_slice, const int32_t* kv_lens,
                          const int32_t* kv_starts, const int32_t* kv_totals, T* o, int batch, int q_tokens, int max_kv,
                          const runtime::Stream* stream) {
  State& s = *s_;
  Decoder& c = s.core;
  const char* me = "tiledist: dist_flash_decode: ";
  c.check(me, q, k_slice, v_slice, kv_lens, o, batch, q_tokens, max_kv);
  if (!kv_starts != !kv_totals)
    throw Error(str_cat(me, "kv_starts ", kv_starts ? "given" : "null", " but kv_totals ", kv_totals ? "given" : "null",
                        " (causal across ranks takes both; neither: every key attended)"));
  if (int64_t(batch) * q_tokens * c.heads > s.max_rows)
    throw Error(str_cat(me, "batch = ", batch, ", q_tokens = ", q_tokens, " on rank ", s.rank, ": ",
                        int64_t(batch) * q_tokens * c.heads, " query rows, past the ", s.max_rows,
                        " this DistFlashDecode was made for"));
  if (batch == 0) return;  // (every rank alike: the shapes are the job's)
  const runtime::Stream* on = c.gpu() ? &s.streams.enter(stream, "dist_flash_decode") : nullptr;
  const int32_t call = ++s.calls;
  const int splits = c.splits(batch, max_kv), parts = s.ranks * splits;
  const int rows = batch * q_tokens * c.heads;
  detail::launch(kv_starts ? c.causal_across() : c.decode, on, Grid(splits, int64_t(batch) * c.kv_heads), q, k_slice,
                 v_slice, kv_lens, static_cast<const int32_t*>(nullptr), kv_starts, kv_totals, s.part_o, s.lse,
                 s.sent.data(), s.flags, q_tokens, max_kv, c.heads, c.kv_heads, c.chunk(splits, max_kv),
                 static_cast<int>(s.half_parts), call, c.scale);
  const size_t half = size_t(call % 2) * s.half_parts;
  detail::launch(c.combine(parts), on, Grid(int64_t(rows)), static_cast<const float*>(s.part_o + half * c.head_dim),
                 static_cast<const float*>(s.lse + half), o, parts);
  if (on) s.streams.leave(*on, stream);
}

template void DistFlashDecode::run(const bf16*, const bf16*, const bf16*, const int32_t*, bf16*, int, int, int,
                                   const runtime::Stream*);
template void DistFlashDecode::run(const f16*, const f16*, const f16*, const int32_t*, f16*, int, int, int,
                                   const runtime::Stream*);
template void DistFlashDecode::run(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*,
                                   const int32_t*, bf16*, int, int, int, const runtime::Stream*);
template void DistFlashDecode::run(const f16*, const f16*, const f16*, const int32_t*, const int32_t*, const int32_t*,
                                   f16*, int, int, int, const runtime::Stream*);

TILEDIST_REGISTER(flash_decode_kernel(ir::DType::bf16));
TILEDIST_REGISTER(flash_decode_kernel(ir::DType::f16));
TILEDIST_REGISTER(flash_decode_combine_kernel(ir::DType::bf16));
TILEDIST_REGISTER(flash_decode_combine_kernel(ir::DType::f16));

}  // namespace tiledist::kernels
