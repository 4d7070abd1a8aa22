// Flash decoding (kernels/flash_decode.h), written as a Triton user writes split-KV decoding:
// a program per (split of the keys, sequence and KV head), its query rows the KV head's group
// of query heads times the step's tokens (grouped-query heads packed, so a KV block is read once
// for all of them), an online softmax over the split's key blocks in base 2, and a second
// kernel that weighs the splits by their log-sum-exp.
#include "kernels/flash_decode.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

template <class T>
void flash_decode(tl::Ptr<T> q, tl::Ptr<T> k, tl::Ptr<T> v, tl::Ptr<int32_t> kv_lens, tl::Ptr<float> part_o,
                  tl::Ptr<float> part_lse, tl::Int q_tokens, tl::Int max_kv, tl::Int H, tl::Int H_KV, tl::Int chunk,
                  tl::Float sm_scale, tl::Const<int> HEAD_DIM, tl::Const<int> BLOCK_M, tl::Const<int> BLOCK_N,
                  tl::Const<int> CAUSAL) {
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
  // Each row's keys: [0, limit) (causal: the step's later tokens hidden from earlier ones).
  auto limit = tl::where(live, len, 0);
  if (CAUSAL) limit = tl::where(live, tl::maximum(len - q_tokens + t + 1, 0), 0);
  auto kv_base = b.to(tl::int64) * max_kv * H_KV * D + kh * D;
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
    auto at = kv_base + tl::expand_dims(cols, 1) * stride + offs_d;
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
  auto part = row.to(tl::int64) * splits + split;
  tl::store(part_o + tl::expand_dims(part * D, 1) + offs_d, out, tl::expand_dims(live, 1));
  tl::store(part_lse + part, lse, live);
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

const std::vector<std::string> kParams = {"q",          "k",        "v",     "kv_lens", "part_o",   "part_lse",
                                          "q_tokens",   "max_kv",   "H",     "H_KV",    "chunk",    "sm_scale",
                                          "HEAD_DIM",   "BLOCK_M",  "BLOCK_N", "CAUSAL"};
const Constants kDefaults = {{"HEAD_DIM", 128}, {"BLOCK_M", 16}, {"BLOCK_N", 64}, {"CAUSAL", 1}};
const std::vector<std::string> kCombineParams = {"part_o", "part_lse", "o", "splits", "HEAD_DIM", "BS"};
const Constants kCombineDefaults = {{"HEAD_DIM", 128}, {"BS", 16}};
constexpr int kMaxRows = 16;     // query rows a KV head (BLOCK_M)
constexpr int kMaxSplits = 128;  // of a sequence's keys
}  // namespace

const KernelDef& flash_decode_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("flash_decode", flash_decode<bf16>, kParams, kDefaults);
  static const KernelDef f16_def("flash_decode_f16", flash_decode<f16>, kParams, kDefaults);
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: flash_decode: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}
const KernelDef& flash_decode_combine_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("flash_decode_combine", flash_decode_combine<bf16>, kCombineParams,
                                  kCombineDefaults);
  static const KernelDef f16_def("flash_decode_combine_f16", flash_decode_combine<f16>, kCombineParams,
                                 kCombineDefaults);
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: flash_decode: no kernel for ", ir::dtype_name(dtype), " operands (bf16, f16)"));
}

struct FlashDecode::State {
  Target target;
  int heads = 0, kv_heads = 0, head_dim = 0, block_n = 64, programs = 0;
  ir::DType dtype = ir::DType::bf16;
  bool causal = true;
  float scale = 0;
  CompileOptions options;
  Kernel decode;
  std::mutex mutex;
  std::map<int, Kernel> combine;       // by BS
  detail::Scratch<float> part_o, lse;  // grown as runs need
  detail::RunStreams streams;
  bool gpu() const { return target.is_gpu(); }
  ~State() { streams.finish(); }
};

FlashDecode::FlashDecode(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype, bool causal,
                         float scale)
    : s_(std::make_shared<State>()) {
  const char* me = "tiledist: flash_decode: ";
  if (dtype != ir::DType::bf16 && dtype != ir::DType::f16)
    throw Error(str_cat(me, "operands of ", ir::dtype_name(dtype), ": only bf16 and f16 are supported"));
  if (head_dim != 64 && head_dim != 128)
    throw Error(str_cat(me, "head_dim = ", head_dim, ": only 64 and 128 are supported"));
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || heads / kv_heads > kMaxRows)
    throw Error(str_cat(me, "heads = ", heads, ", kv_heads = ", kv_heads,
                        ": both positive, heads a multiple of kv_heads, at most ", kMaxRows, " heads a KV head"));
  if (!std::isfinite(scale) || scale < 0)
    throw Error(str_cat(me, "scale = ", scale, ": a positive number (or 0 for 1/sqrt(head_dim))"));
  State& s = *s_;
  detail::on_gpu(target);  // (throws for a GPU whose streams the object does not take yet)
  s.target = target, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.dtype = dtype;
  s.causal = causal, s.scale = scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim));
  s.programs = s.gpu() ? 2 * cuda::device().sms : 8;
  s.block_n = s.gpu() ? 64 : 32;
  s.options = CompileOptions::from_env();
  s.decode = compile(flash_decode_kernel(dtype),
                     {{"HEAD_DIM", head_dim}, {"BLOCK_M", kMaxRows}, {"BLOCK_N", s.block_n}, {"CAUSAL", int(causal)}},
                     target, s.options);
}

FlashDecode::~FlashDecode() = default;

int FlashDecode::splits(int batch, int max_kv) const {
  const State& s = *s_;
  const int64_t blocks = std::max<int64_t>((int64_t(max_kv) + s.block_n - 1) / s.block_n, 1);
  const int64_t want = (s.programs + int64_t(batch) * s.kv_heads - 1) / std::max<int64_t>(int64_t(batch) * s.kv_heads, 1);
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(blocks, kMaxSplits)));
}

template <AttentionOperand T>
void FlashDecode::run(const T* q, const T* k_cache, const T* v_cache, const int32_t* kv_lens, T* o, int batch,
                      int q_tokens, int max_kv, const runtime::Stream* stream) {
  State& s = *s_;
  const char* me = "tiledist: flash_decode: ";
  if (dtype_of<T>() != s.dtype)
    throw Error(str_cat(me, "run with ", ir::dtype_name(dtype_of<T>()), " operands on a FlashDecode made for ",
                        ir::dtype_name(s.dtype)));
  const int group = s.heads / s.kv_heads;
  if (batch < 0 || max_kv < 0 || q_tokens < 1 || q_tokens * group > kMaxRows)
    throw Error(str_cat(me, "batch = ", batch, ", q_tokens = ", q_tokens, ", max_kv = ", max_kv,
                        ": batch and max_kv not negative, 1 <= q_tokens and q_tokens * heads / kv_heads (", group,
                        ") <= ", kMaxRows));
  if (int64_t(batch) * s.kv_heads > 65535)
    throw Error(str_cat(me, "batch * kv_heads = ", int64_t(batch) * s.kv_heads, ": at most 65535 (the grid's y)"));
  if (int64_t(max_kv) * s.kv_heads * s.head_dim >= INT32_MAX || int64_t(batch) * q_tokens * s.heads >= INT32_MAX)
    throw Error(str_cat(me, "max_kv = ", max_kv, ", batch = ", batch, ": a sequence's cache, and the query rows, ",
                        "under 2^31 elements (32-bit offsets within them)"));
  if (batch == 0) return;
  if (!q || !k_cache || !v_cache || !kv_lens || !o)
    throw Error(str_cat(me, "a null pointer among q, k_cache, v_cache, kv_lens, o"));
  const int splits = this->splits(batch, max_kv);
  const int64_t blocks = std::max<int64_t>((int64_t(max_kv) + s.block_n - 1) / s.block_n, 1);
  const int chunk = static_cast<int>((blocks + splits - 1) / splits * s.block_n);
  int bs = 1;
  while (bs < splits) bs *= 2;
  const size_t rows = size_t(batch) * q_tokens * s.heads;
  const Kernel* combine = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.combine.find(bs);
    if (it == s.combine.end())
      it = s.combine
               .emplace(bs, compile(flash_decode_combine_kernel(s.dtype), {{"HEAD_DIM", s.head_dim}, {"BS", bs}},
                                    s.target, s.options))
               .first;
    combine = &it->second;
  }
  if (s.lse.size() < rows * splits) {  // (grown once the runs that read the old ones are done)
    s.streams.finish();
    s.part_o = detail::Scratch<float>(s.target, rows * splits * s.head_dim);
    s.lse = detail::Scratch<float>(s.target, rows * splits);
  }
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream) : nullptr;
  detail::launch(s.decode, on, Grid(splits, int64_t(batch) * s.kv_heads), q, k_cache, v_cache, kv_lens,
                 s.part_o.data(), s.lse.data(), q_tokens, max_kv, s.heads, s.kv_heads, chunk, s.scale);
  detail::launch(*combine, on, Grid(int64_t(rows)), static_cast<const float*>(s.part_o.data()),
                 static_cast<const float*>(s.lse.data()), o, splits);
  if (on) s.streams.leave(*on, stream);
}

template void FlashDecode::run(const bf16*, const bf16*, const bf16*, const int32_t*, bf16*, int, int, int,
                               const runtime::Stream*);
template void FlashDecode::run(const f16*, const f16*, const f16*, const int32_t*, f16*, int, int, int,
                               const runtime::Stream*);

TILEDIST_REGISTER(flash_decode_kernel(ir::DType::bf16));
TILEDIST_REGISTER(flash_decode_kernel(ir::DType::f16));
TILEDIST_REGISTER(flash_decode_combine_kernel(ir::DType::bf16));
TILEDIST_REGISTER(flash_decode_combine_kernel(ir::DType::f16));

}  // namespace tiledist::kernels
