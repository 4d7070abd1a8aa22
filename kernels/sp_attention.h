// Sequence-parallel attention (kernels/sp_attention.cpp): each rank holds a slice of every
// sequence's tokens (queries, keys and values) and gets attention over the whole sequence for
// its queries, the keys and values of the other ranks gathered while it computes.
#pragma once

#include "kernels/attention.h"
#include "tiledist.h"

namespace tiledist::kernels {

/// The AllGather-attention kernel for bf16 or f16 operands, registered as `sp_ag_attention` and
/// `sp_ag_attention_f16`.
///
/// Layout: rank r holds tokens [r * S, (r + 1) * S) of each of B sequences: q and o [B, S, H,
/// HEAD_DIM], k_all and v_all [ranks, B, S, H_KV, HEAD_DIM] (every rank's slice of the keys and
/// values, gathered, ours included: rank r's at r, once flags[r] >= call). Query head h reads
/// key/value head h / (H / H_KV); CAUSAL=1: a token attends the sequence's tokens up to its
/// own, over the ranks (rank r's queries see the slices of ranks 0..r).
///
/// Parameters: q, k_all, v_all, o, flags, batch, seqlen (S), H, H_KV, call, sm_scale; constants
/// HEAD_DIM, BLOCK_M, BLOCK_N (BLOCK_M a multiple of BLOCK_N), CAUSAL. Launch over {cdiv(S,
/// BLOCK_M), B * H}: program (m, b * H + h) computes query rows [m * BLOCK_M, ...) of sequence
/// b, head h: over its own slice first, then over the ranks before it, nearest first (and,
/// without a mask, the ranks after it), each once its signal is here.
const KernelDef& sp_ag_attention_kernel(ir::DType dtype);

/// Sequence-parallel attention by AllGather (Triton-distributed's sp_ag_attention): o =
/// softmax(q kᵀ · scale [causal]) v over whole sequences, each rank holding `seqlen` tokens of
/// each of `batch` sequences (rank r the positions [r * seqlen, (r + 1) * seqlen)), in the
/// layout sp_ag_attention_kernel states. Each run sends this rank's keys and values to every
/// other rank (by the copy engine on a GPU, a peer sharing our GPU before the kernel, on its
/// stream; by memcpy on the host) and signals each slice's arrival; the kernel starts on its own
/// slice (copied into its place first) and takes each peer's as its signal comes, so the gather
/// overlaps the attention. o may be q (each program reads its queries before it writes them).
/// `scale` 0 means 1 / sqrt(head_dim). Runs alternate between two gathered buffers: a run may
/// start before the last one's peers are done with its buffer, not before the one before.
/// Construction and every run are collective (the same batch and seqlen on every rank; a run of
/// no tokens does nothing, sends nothing); pointers are device memory on a GPU target, host
/// memory on the host.
class AgAttention {
 public:
  /// Capacity: at most max_batch * max_seqlen tokens a rank a run. Throws Error for what
  /// Attention refuses, negative capacities, or capacities past the kernels' 32-bit offsets.
  AgAttention(const Target& target, int heads, int kv_heads, int head_dim, int64_t max_batch, int64_t max_seqlen,
              ir::DType dtype = ir::DType::bf16, bool causal = true, float scale = 0.0f);
  ~AgAttention();

  /// `batch` sequences, `seqlen` tokens of each on this rank (batch * seqlen within the
  /// capacity, batch * heads at most 65535), in the dtype it was made for; else Error.
  template <AttentionOperand T>
  void run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen, const runtime::Stream* stream = nullptr);

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// The kernels of UlyssesAttention (kernels/ulysses_attention.cpp): `ulysses_pack` (each head
/// group's columns of a rank's q, k and v rows into a slot of their own), `ulysses_attention`
/// (the attention over the slices gathered from every rank, each slice taken once its word is
/// here, the output rows stored straight into their rank's buffer) and `ulysses_finish` (waits
/// for every rank's outputs), bf16 and f16 (`_f16`; the finish takes no operands).
///@{
const KernelDef& ulysses_pack_kernel(ir::DType dtype);
const KernelDef& ulysses_attention_kernel(ir::DType dtype);
const KernelDef& ulysses_finish_kernel();
///@}

/// Sequence-parallel attention by all-to-all (DeepSpeed's Ulysses): the same contract as
/// AgAttention (rank r holds tokens [r * seqlen, (r + 1) * seqlen) of each sequence; q, o [B,
/// seqlen, heads, D], k, v [B, seqlen, kv_heads, D]), computed another way: every rank sends
/// each head group's share of its tokens to that group's rank (heads and kv_heads split evenly
/// over the ranks), which attends over the whole sequences for its heads and sends the outputs
/// back. Both ways run under the attention: the other ranks' shares come by the copy engine
/// (memcpy on the host) while the kernel starts on our own tokens' share and takes each slice
/// once its signal is here, and each output block goes straight to its tokens' rank. Runs
/// alternate between two of each buffer, as AgAttention's; o may be q (read before o is
/// written). Construction and every run are collective; a run of no tokens does nothing;
/// pointers are device memory on a GPU target.
class UlyssesAttention {
 public:
  /// As AgAttention's, heads and kv_heads each a multiple of the ranks (else Error).
  UlyssesAttention(const Target& target, int heads, int kv_heads, int head_dim, int64_t max_batch, int64_t max_seqlen,
                   ir::DType dtype = ir::DType::bf16, bool causal = true, float scale = 0.0f);
  ~UlyssesAttention();

  /// As AgAttention's, batch * heads / ranks at most 65535.
  template <AttentionOperand T>
  void run(const T* q, const T* k, const T* v, T* o, int batch, int seqlen, const runtime::Stream* stream = nullptr);

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace tiledist::kernels
