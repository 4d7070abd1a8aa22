// FlashAttention forward as Triton's tutorial 06 (fused attention) writes it: a program per
// (query block, batch * head), a loop over key/value blocks carrying the running row maximum
// m_i, the running row sum l_i and the unnormalized output acc; per block two dots (q kᵀ, then
// p v with p cast to the operands' dtype) and the online softmax in base 2, log2(e) folded into
// the scale. The causal loop is split as the tutorial splits it: the blocks wholly below the
// diagonal without a mask, then the diagonal block with it; ragged sequences mask only their
// last block. Nothing here is known to the compiler: it is an ordinary kernel.
#include "kernels/attention.h"

#include <cmath>
#include <mutex>
#include <optional>

#include "kernels/attention_tile.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

template <class T>
void attention(tl::Ptr<T> q, tl::Ptr<T> k, tl::Ptr<T> v, tl::Ptr<T> o, tl::Ptr<int32_t> cu_seqlens, tl::Int seqlen,
               tl::Int H, tl::Int H_KV, tl::Float sm_scale, tl::Const<int> HEAD_DIM, tl::Const<int> BLOCK_M,
               tl::Const<int> BLOCK_N, tl::Const<int> CAUSAL, tl::Const<int> VARLEN) {
  const int D = HEAD_DIM;
  const tl::DType dtype = dtype_of<T>();
  auto pid_m = tl::program_id(0);
  auto off_hz = tl::program_id(1);
  auto off_z = off_hz / H, off_h = off_hz % H;
  auto off_kv_h = off_h / (H / H_KV);
  // The sequence's rows.
  Tensor start = off_z * seqlen, len = seqlen;
  if (VARLEN) {
    start = tl::maximum(tl::load(cu_seqlens + off_z), 0);  // (not negative: TMA's coordinates may take it)
    len = tl::load(cu_seqlens + off_z + 1) - start;
  }
  // Row strides, and this sequence's and head's first element (64-bit: the sequence may start
  // anywhere in a large batch; offsets within it are 32-bit).
  auto stride_q = H * D, stride_kv = H_KV * D;
  auto q_base = q + (start.to(tl::int64) * stride_q + off_h * D);
  auto o_base = o + (start.to(tl::int64) * stride_q + off_h * D);
  auto k_base = k + (start.to(tl::int64) * stride_kv + off_kv_h * D);
  auto v_base = v + (start.to(tl::int64) * stride_kv + off_kv_h * D);

  auto offs_m = pid_m * BLOCK_M + tl::arange(0, BLOCK_M);
  auto offs_d = tl::arange(0, D);
  auto rows = tl::expand_dims(offs_m, 1);  // [BLOCK_M, 1]
  auto q_tile = tl::load(q_base + rows * stride_q + tl::expand_dims(offs_d, 0), rows < len, 0.0f);
  auto qk_scale = sm_scale * 1.44269504f;  // 1/ln(2): exp(x) = exp2(x * log2(e))

  // One stage of the loop over key blocks [lo, hi): `masked` for the blocks that need one (the
  // diagonal block, or the last block of a ragged sequence). Every row sees a key in the first
  // block it visits (key 0 is in every row's causal range), so m_i is finite after it and
  // exp2(m_i - m_ij) never meets -inf - -inf.
  auto stage = [&](Values state, const tl::Operand& lo, const tl::Operand& hi, bool masked) {
    return detail::attention_blocks(std::move(state), q_tile, k_base, v_base, stride_kv, rows, len, qk_scale, lo, hi,
                                    masked, CAUSAL != 0, BLOCK_N, dtype);
  };

  // A program past its sequence's end (the grid is sized for the longest) runs no iteration
  // and stores nothing.
  auto live = pid_m * BLOCK_M < len;
  Values state = {tl::full({BLOCK_M}, -INFINITY, tl::float32), tl::zeros({BLOCK_M}, tl::float32),
                  tl::zeros({BLOCK_M, D}, tl::float32)};
  if (CAUSAL) {
    // Keys [0, pid_m * BLOCK_M) lie wholly below the diagonal (BLOCK_M % BLOCK_N == 0), then
    // the diagonal block's keys up to the last row (or the sequence's end).
    auto diagonal = tl::multiple_of(tl::where(live, pid_m * BLOCK_M, 0), BLOCK_N);
    state = stage(state, 0, diagonal, false);
    state = stage(state, diagonal, tl::where(live, tl::minimum((pid_m + 1) * BLOCK_M, len), 0), true);
  } else {
    // Whole key blocks, then the sequence's partial last block.
    auto whole = tl::multiple_of(tl::where(live, len / BLOCK_N * BLOCK_N, 0), BLOCK_N);
    state = stage(state, 0, whole, false);
    state = stage(state, whole, tl::where(live, len, 0), true);
  }
  auto out = state[2] / tl::expand_dims(state[1], 1);
  tl::store(o_base + rows * stride_q + tl::expand_dims(offs_d, 0), out.to(dtype), rows < len);
}

const std::vector<std::string> kParams = {"q",    "k",        "v",        "o",       "cu_seqlens", "seqlen", "H",
                                          "H_KV", "sm_scale", "HEAD_DIM", "BLOCK_M", "BLOCK_N",    "CAUSAL", "VARLEN"};
const Constants kDefaults = {{"HEAD_DIM", 128}, {"BLOCK_M", 128}, {"BLOCK_N", 64}, {"CAUSAL", 0}, {"VARLEN", 1}};

constexpr const char* kDtypes = "bf16, f16";
}  // namespace

const KernelDef& attention_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("attention", attention<bf16>, kParams, kDefaults);
  static const KernelDef f16_def("attention_f16", attention<f16>, kParams, kDefaults);
  if (dtype == ir::DType::bf16) return bf16_def;
  if (dtype == ir::DType::f16) return f16_def;
  throw Error(str_cat("tiledist: attention: no kernel for ", ir::dtype_name(dtype), " operands (", kDtypes, ")"));
}

AttentionConfig attention_config(const Target& target, int head_dim, bool causal) {
  AttentionConfig c;
  c.options = CompileOptions::from_env();
  // (the same tiles for every head dim and mask so far)
  if (!target.is_gpu()) {  // few, large programs: the CPU's cost is per program and op
    c.block_m = 64, c.block_n = 32;
  } else {  // (FlashAttention-2's tiles; `attention_bench one ...` sweeps others)
    c.block_m = 128, c.block_n = 64;
    c.options.num_warps = 8;
    c.options.num_stages = 3;
    // (its loop of two dots goes to the GPU IR lowering by default: CompileOptions::lowering)
    // Hopper, D = 128: a producer warpgroup copies K and V by TMA (0.73 of SDPA against 0.60
    // without, on an H200); at D = 64 causal too (0.70 against 0.61), not at D = 64 without a
    // mask (0.71 against 0.78: 384 threads of 168 registers leave room for one program per SM,
    // where 256 threads of 128 ran two). bench/RESULTS.md.
    if (target.has(Cap::wgmma) && (head_dim == 128 || causal))
      c.options.warp_specialize = c.options.warp_specialize || detail::library_warp_specialize();
  }
  return c;
}

void detail::check_attention_args(const char* who, int heads, int kv_heads, int head_dim, ir::DType dtype,
                                  float scale) {
  if (dtype != ir::DType::bf16 && dtype != ir::DType::f16)
    throw Error(str_cat(who, "operands of ", ir::dtype_name(dtype), ": only ", kDtypes, " are supported"));
  if (head_dim != 64 && head_dim != 128)
    throw Error(str_cat(who, "head_dim = ", head_dim, ": only 64 and 128 are supported"));
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0)
    throw Error(str_cat(who, "heads = ", heads, ", kv_heads = ", kv_heads,
                        ": both positive, and heads a multiple of kv_heads (grouped-query heads)"));
  if (!std::isfinite(scale) || scale < 0)
    throw Error(str_cat(who, "scale = ", scale, ": a positive number (or 0 for 1/sqrt(head_dim))"));
}

struct Attention::State {
  Target target;
  int heads = 0, kv_heads = 0, head_dim = 0;
  ir::DType dtype = ir::DType::bf16;
  bool causal = false;
  float scale = 0;
  AttentionConfig config;
  mutable std::mutex mutex;                     // (compiles, at a form's first run)
  mutable std::optional<Kernel> dense, varlen;  // compiled at their first run
  const Kernel& kernel(bool ragged) const {
    std::lock_guard<std::mutex> lock(mutex);
    std::optional<Kernel>& k = ragged ? varlen : dense;
    if (!k)
      k = compile(attention_kernel(dtype),
                  {{"HEAD_DIM", head_dim},
                   {"BLOCK_M", config.block_m},
                   {"BLOCK_N", config.block_n},
                   {"CAUSAL", int(causal)},
                   {"VARLEN", int(ragged)}},
                  target, config.options);
    return *k;
  }
};

Attention::Attention(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype, bool causal,
                     float scale)
    : Attention(target, heads, kv_heads, head_dim, dtype, causal, scale, attention_config(target, head_dim, causal)) {}

Attention::Attention(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype, bool causal,
                     float scale, const AttentionConfig& config) {
  detail::check_attention_args("tiledist: attention: ", heads, kv_heads, head_dim, dtype, scale);
  if (target.is_gpu() && !target.runs_on_cuda())  // (Attention::run takes a CUDA stream)
    throw Error(str_cat("tiledist: attention: Attention runs on the host and on NVIDIA GPUs, not yet on ",
                        target.name(), " (attention_kernel compiles for it: launch it through Kernel)"));
  auto pow2 = [](int x) { return x > 0 && (x & (x - 1)) == 0; };
  if (!pow2(config.block_m) || !pow2(config.block_n) || config.block_m % config.block_n != 0)
    throw Error(str_cat("tiledist: attention: blocks of ", config.block_m, " x ", config.block_n,
                        " rows: powers of 2, block_m a multiple of block_n"));
  auto s = std::make_shared<State>();
  s->target = target, s->heads = heads, s->kv_heads = kv_heads, s->head_dim = head_dim, s->dtype = dtype;
  s->causal = causal, s->config = config;
  s->scale = scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim));
  s_ = std::move(s);
}

Attention::~Attention() = default;

const AttentionConfig& Attention::config() const { return s_->config; }

template <class T>
void Attention::launch(const T* q, const T* k, const T* v, T* o, const int32_t* cu_seqlens, int batch, int seqlen,
                       bool varlen, const runtime::Stream* stream) const {
  const State& s = *s_;
  const char* len_name = varlen ? "max_seqlen" : "seqlen";
  if (dtype_of<T>() != s.dtype)
    throw Error(str_cat("tiledist: attention: run with ", ir::dtype_name(dtype_of<T>()),
                        " operands on an Attention made for ", ir::dtype_name(s.dtype)));
  if (batch < 0 || seqlen < 0)
    throw Error(str_cat("tiledist: attention: batch = ", batch, ", ", len_name, " = ", seqlen, ": not negative"));
  // (the kernel's offsets within a sequence are 32-bit; the grid's y is at most 65535)
  const int64_t widest = int64_t(std::max(s.heads, s.kv_heads)) * s.head_dim;
  if (int64_t(seqlen) * widest >= INT32_MAX)
    throw Error(str_cat("tiledist: attention: ", len_name, " = ", seqlen, " with ", s.heads, " heads of ", s.head_dim,
                        ": a sequence's elements must number under 2^31"));
  if (int64_t(batch) * s.heads > 65535)
    throw Error(str_cat("tiledist: attention: batch * heads = ", int64_t(batch) * s.heads,
                        ": at most 65535 (the launch grid's second dimension)"));
  if (!varlen && int64_t(batch) * seqlen > INT32_MAX)
    throw Error(str_cat("tiledist: attention: batch * seqlen = ", int64_t(batch) * seqlen, ": under 2^31 tokens"));
  if (batch == 0 || seqlen == 0) return;  // nothing to compute
  if (!q || !k || !v || !o || (varlen && !cu_seqlens))
    throw Error(str_cat("tiledist: attention: a null pointer among q, k, v, o", varlen ? ", cu_seqlens" : "",
                        " (q=", q == nullptr, ", k=", k == nullptr, ", v=", v == nullptr, ", o=", o == nullptr, ")"));
  const Kernel& kernel = s.kernel(varlen);
  const Grid grid(tl::cdiv(int64_t(seqlen), s.config.block_m), int64_t(batch) * s.heads);
  // (the varlen form takes no sequence length: 0, which selects no new launch variant)
  const int len_arg = varlen ? 0 : seqlen;
  if (!s.target.runs_on_cuda()) {  // the host (the constructor takes no other)
    if (stream) throw Error("tiledist: attention: a CUDA stream given to an Attention for the host target");
    kernel.launch(grid, q, k, v, o, cu_seqlens, len_arg, s.heads, s.kv_heads, s.scale);
    return;
  }
  const runtime::Stream& on = stream ? *stream : runtime::Stream::legacy();
  kernel.launch_on(on, grid, cuda::DevicePtr<const T>{q, 0}, cuda::DevicePtr<const T>{k, 0},
                   cuda::DevicePtr<const T>{v, 0}, cuda::DevicePtr<T>{o, 0},
                   cuda::DevicePtr<const int32_t>{cu_seqlens, 0}, len_arg, s.heads, s.kv_heads, s.scale);
  if (!stream) on.synchronize();
}

template <AttentionOperand T>
void Attention::run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen,
                    const runtime::Stream* stream) const {
  launch(q, k, v, o, nullptr, batch, seqlen, false, stream);
}
template <AttentionOperand T>
void Attention::run_varlen(const T* q, const T* k, const T* v, T* o, const int32_t* cu_seqlens, int batch,
                           int max_seqlen, const runtime::Stream* stream) const {
  launch(q, k, v, o, cu_seqlens, batch, max_seqlen, true, stream);
}
template void Attention::run(const bf16*, const bf16*, const bf16*, bf16*, int, int, const runtime::Stream*) const;
template void Attention::run(const f16*, const f16*, const f16*, f16*, int, int, const runtime::Stream*) const;
template void Attention::run_varlen(const bf16*, const bf16*, const bf16*, bf16*, const int32_t*, int, int,
                                    const runtime::Stream*) const;
template void Attention::run_varlen(const f16*, const f16*, const f16*, f16*, const int32_t*, int, int,
                                    const runtime::Stream*) const;

TILEDIST_REGISTER(attention_kernel(ir::DType::bf16));
TILEDIST_REGISTER(attention_kernel(ir::DType::f16));

}  // namespace tiledist::kernels
