// Flash decoding (kernels/flash_decode.cpp): a decode step's attention over a KV cache, each
// sequence's keys split over programs and the partial results combined by their log-sum-exp
// (FlashDecoding's split-KV), with grouped-query heads packed into one program per KV head.
#pragma once

#include "kernels/attention.h"
#include "tiledist.h"

namespace tiledist::kernels {

/// The split-KV kernel for bf16 or f16 operands, registered as `flash_decode` and
/// `flash_decode_f16`, and the kernel that combines its partial results, `flash_decode_combine`.
///
/// Layout: q and o [batch, q_tokens, H, HEAD_DIM] (the step's query tokens of each sequence),
/// the cache k and v [batch, max_kv, H_KV, HEAD_DIM] (contiguous), kv_lens [batch] int32 (the
/// keys of sequence b: rows [0, kv_lens[b]) of its cache, the step's own tokens last). Query
/// head h reads KV head h / (H / H_KV); CAUSAL=1: query token t of q_tokens attends keys
/// [0, kv_lens[b] - q_tokens + t] (the step's tokens see the ones before them); CAUSAL=2 (a
/// slice of the sequence's keys, DistFlashDecode's): its keys are positions [kv_starts[b], +
/// kv_lens[b]) of kv_totals[b], and token t attends those before kv_totals[b] - q_tokens + t +
/// 1; else all.
///
/// flash_decode: parameters q, k, v, kv_lens, block_table, kv_starts, kv_totals (CAUSAL=2's;
/// else unread), part_o, part_lse, sent, flags,
/// q_tokens, max_kv, H, H_KV, chunk, half_parts, call, sm_scale; constants HEAD_DIM, BLOCK_M,
/// BLOCK_N, CAUSAL, DIST (DistFlashDecode's form: sent, flags, half_parts and call are its),
/// PAGE (> 0: a paged cache [pages, PAGE, H_KV, HEAD_DIM], block_table [batch, max_kv] its
/// pages, max_kv the pages a sequence). Launch over {splits, batch *
/// H_KV}: program (s, b * H_KV + kh) takes keys [s * chunk, (s + 1) * chunk) of sequence b for
/// the q_tokens * (H / H_KV) query rows of KV head kh (at most BLOCK_M), and writes each row's
/// softmax-weighted sum of values over them (f32) and its log-sum-exp (base 2, -inf where it
/// saw no key) at part_o [batch * q_tokens * H, splits, HEAD_DIM], part_lse [.., splits].
/// flash_decode_combine: parameters part_o, part_lse, o, splits; constants HEAD_DIM, BS (a power
/// of two at least splits). Launch over {batch * q_tokens * H}: each row's splits weighted by
/// 2^(lse - max lse), o in the operands' dtype (0 for a row that saw no key).
///@{
const KernelDef& flash_decode_kernel(ir::DType dtype);
const KernelDef& flash_decode_combine_kernel(ir::DType dtype);
///@}

/// o = softmax(q kᵀ · scale [causal]) v for a decode step, per sequence and query head, in the
/// layout flash_decode_kernel states: f32 accumulation, o in the operands' dtype. `scale` 0
/// means 1 / sqrt(head_dim). The keys of each sequence are split over enough programs to fill
/// the machine (at least one block of keys each), then combined. Pointers are device memory on
/// a GPU target, host memory on the host; a run given a stream is queued on it and returns at
/// once, without one it returns when o is written. Bad shapes or arguments throw Error naming
/// them, before anything is launched. Runs of one object are queued one after another (they
/// share its partial results' buffer).
class FlashDecode {
 public:
  /// Throws Error unless dtype is bf16 or f16, head_dim 64 or 128, heads a positive multiple of
  /// positive kv_heads (at most 16 heads a KV head), and scale finite and not negative.
  FlashDecode(const Target& target, int heads, int kv_heads, int head_dim, ir::DType dtype = ir::DType::bf16,
              bool causal = true, float scale = 0.0f);
  ~FlashDecode();

  /// `batch` sequences, `q_tokens` query tokens each (1 to 16 / (heads / kv_heads) rows a KV
  /// head: at most 16 rows), caches of `max_kv` rows a sequence (kv_lens[b] <= max_kv, and
  /// >= q_tokens where causal).
  template <AttentionOperand T>
  void run(const T* q, const T* k_cache, const T* v_cache, const int32_t* kv_lens, T* o, int batch, int q_tokens,
           int max_kv, const runtime::Stream* stream = nullptr);

  /// The same over a paged cache (vLLM's): k_pages and v_pages [pages, page_size, kv_heads,
  /// head_dim], sequence b's key j in page block_table[b * max_pages + j / page_size] (int32),
  /// row j % page_size; page_size a power of two.
  template <AttentionOperand T>
  void run_paged(const T* q, const T* k_pages, const T* v_pages, const int32_t* block_table, const int32_t* kv_lens,
                 T* o, int batch, int q_tokens, int page_size, int max_pages, const runtime::Stream* stream = nullptr);

  /// The splits of each sequence's keys a run of this shape uses.
  int splits(int batch, int max_kv) const;

 private:
  template <AttentionOperand T>
  void run_on(const T* q, const T* k, const T* v, const int32_t* kv_lens, const int32_t* block_table, int page_size,
              T* o, int batch, int q_tokens, int max_kv, const runtime::Stream* stream);
  struct State;
  std::shared_ptr<State> s_;
};

/// Distributed flash decoding: each rank holds a slice of every sequence's keys (k_slice and
/// v_slice [batch, max_kv, kv_heads, head_dim], kv_lens [batch] its slice's lengths; the same q
/// on every rank), computes its parts over its slice, and pushes them into every rank's
/// symmetric buffer from inside the decode kernel (the last program sets its flag on every rank
/// and waits for theirs: no separate collective launch); each rank's combine then weighs every
/// rank's parts by their log-sum-exp, so every rank gets o over all the slices. Every key of
/// every slice is attended, or, given kv_starts and kv_totals ([batch] each), causally across
/// ranks: this rank's keys of sequence b are its positions [kv_starts[b], + kv_lens[b]) of
/// kv_totals[b], the step's q_tokens tokens its last positions, and token t attends the
/// positions before kv_totals[b] - q_tokens + t + 1 (a slice wholly after a token's position
/// gives it nothing; a row no rank gives a key is 0). Halves a call apart hold the
/// parts, so back-to-back runs need no barrier. Collective: every rank constructs it and calls
/// run with the same batch, q_tokens and max_kv, in the same order; at most max_batch *
/// max_q_tokens * heads query rows a run. A peer that never runs ends the wait with the wait's
/// timeout ($TILEDIST_WAIT_TIMEOUT) naming its flag. Memory and streams as FlashDecode's.
class DistFlashDecode {
 public:
  /// Collective: the parts' buffers for up to max_batch * max_q_tokens * heads query rows a run
  /// (max_q_tokens * heads / kv_heads at most 16); the arguments as FlashDecode's, else Error.
  DistFlashDecode(const Target& target, int heads, int kv_heads, int head_dim, int max_batch, int max_q_tokens = 1,
                  ir::DType dtype = ir::DType::bf16, float scale = 0.0f);
  ~DistFlashDecode();

  /// Every key of every slice attended: q and o [batch, q_tokens, heads, head_dim] (batch and
  /// q_tokens within the capacity), this rank's slice as FlashDecode::run's cache.
  template <AttentionOperand T>
  void run(const T* q, const T* k_slice, const T* v_slice, const int32_t* kv_lens, T* o, int batch, int q_tokens,
           int max_kv, const runtime::Stream* stream = nullptr);
  /// Causal across ranks (above): kv_starts and kv_totals both given, or both null (every key).
  template <AttentionOperand T>
  void run(const T* q, const T* k_slice, const T* v_slice, const int32_t* kv_lens, const int32_t* kv_starts,
           const int32_t* kv_totals, T* o, int batch, int q_tokens, int max_kv,
           const runtime::Stream* stream = nullptr);

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace tiledist::kernels
