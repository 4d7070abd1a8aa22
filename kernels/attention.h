// FlashAttention forward (kernels/attention.cpp): softmax(Q Kᵀ · scale) V per head, written as
// Triton's fused-attention tutorial writes it, with grouped-query heads and ragged sequences.
#pragma once

#include "tiledist.h"

namespace tiledist::kernels {

/// The attention kernel for bf16 or f16 operands, registered as `attention` and `attention_f16`.
///
/// Layout (FlashAttention's varlen layout): rows of tokens, row-major, the sequences of a batch
/// one after another: q and o are [total_tokens, H, HEAD_DIM], k and v [total_tokens, H_KV,
/// HEAD_DIM]. Query head h reads key/value head h / (H / H_KV). Sequence b is rows
/// [cu_seqlens[b], cu_seqlens[b + 1]) (VARLEN=1; int32, batch + 1 entries) or rows
/// [b * seqlen, (b + 1) * seqlen) (VARLEN=0: the dense [B, S, H, D] case; cu_seqlens unused).
/// Keys and queries come from the same rows (self-attention); CAUSAL=1: token i of a sequence
/// attends its tokens 0..i.
///
/// Parameters: q, k, v, o, cu_seqlens, seqlen, H, H_KV, sm_scale; constants HEAD_DIM,
/// BLOCK_M, BLOCK_N (BLOCK_M a multiple of BLOCK_N), CAUSAL, VARLEN. Launch over
/// {cdiv(longest sequence, BLOCK_M), batch * H}: program (m, b * H + h) computes query rows
/// [m * BLOCK_M, (m + 1) * BLOCK_M) of sequence b, head h. Element offsets within a sequence
/// are 32-bit (seqlen * max(H, H_KV) * HEAD_DIM < 2^31); a sequence's first row may be anywhere.
const KernelDef& attention_kernel(ir::DType dtype);

/// Blocks and compile options for attention on `target`.
struct AttentionConfig {
  /// Query rows (block_m, BLOCK_M) and key rows (block_n, BLOCK_N) a step: powers of 2, block_m
  /// a multiple of block_n.
  ///@{
  int block_m = 64, block_n = 32;
  ///@}
  CompileOptions options;  ///< how its kernels are compiled
};
/// The config Attention takes by default: on a GPU 128 x 64 blocks, 8 warps and 3 stages (warp
/// specialized on Hopper where head_dim is 128 or causal, unless $TILEDIST_WS=0); on the host
/// 64 x 32. Options from CompileOptions::from_env().
AttentionConfig attention_config(const Target& target, int head_dim, bool causal);

namespace detail {
/// Throws Error, its message led by `who`, for what the attention kernels do not take: operands
/// other than bf16 and f16, a head dim other than 64 and 128, heads not a positive multiple of
/// positive kv_heads, a scale not finite or negative (0: 1 / sqrt(head_dim)).
void check_attention_args(const char* who, int heads, int kv_heads, int head_dim, ir::DType dtype, float scale);
}  // namespace detail

/// The operand types Attention::run takes.
template <class T>
concept AttentionOperand = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

/// o = softmax(q kᵀ · scale [causal mask]) v per sequence and head, f32 accumulation, o in the
/// operands' dtype, in the layout attention_kernel states. `scale` 0 means 1 / sqrt(head_dim).
/// Pointers are device memory on a GPU target, host memory on the host. A run given a stream
/// is queued on it and returns at once; without one it returns when o is written. Bad shapes,
/// dtypes or arguments throw a tiledist::Error naming them, before anything is launched.
class Attention {
 public:
  /// Throws Error unless dtype is bf16 or f16, head_dim 64 or 128, heads a positive multiple of
  /// positive kv_heads, and scale finite and not negative; or for a GPU target other than NVIDIA's.
  Attention(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype = ir::DType::bf16,
            bool causal = false, float scale = 0.0f);
  /// The same with the caller's blocks and options (bad blocks throw Error).
  Attention(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype, bool causal, float scale,
            const AttentionConfig& config);
  ~Attention();

  /// Dense: `batch` sequences of `seqlen` tokens each (q and o [batch * seqlen, heads,
  /// head_dim], k and v [batch * seqlen, kv_heads, head_dim]).
  template <AttentionOperand T>
  void run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen,
           const runtime::Stream* stream = nullptr) const;
  /// Ragged: sequence b is rows [cu_seqlens[b], cu_seqlens[b + 1]) (int32, batch + 1 entries,
  /// non-decreasing, in the same memory as q), none longer than `max_seqlen` (rows of a longer
  /// one past max_seqlen are not written).
  template <AttentionOperand T>
  void run_varlen(const T* q, const T* k, const T* v, T* o, const int32_t* cu_seqlens, int batch, int max_seqlen,
                  const runtime::Stream* stream = nullptr) const;

  /// The blocks and options its kernels are compiled with.
  const AttentionConfig& config() const;

 private:
  struct State;
  template <class T>
  void launch(const T* q, const T* k, const T* v, T* o, const int32_t* cu_seqlens, int batch, int seqlen, bool varlen,
              const runtime::Stream* stream) const;
  std::shared_ptr<const State> s_;
};

}  // namespace tiledist::kernels
