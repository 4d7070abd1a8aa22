// Mixture-of-experts kernels: routing (top-k of the router's logits, then the token slots
// sorted by expert into tiles of BM rows, as vLLM's moe_align_block_size pads them), written
// the way a Triton user writes them, with atomics and no host round trip.
#pragma once

#include "kernels/kernels.h"

namespace tiledist::kernels {

/// Top-k of each token's router logits, and moe_count's work for the picks (below). Parameters:
/// logits ([tokens, E], f32 or bf16), ids ([tokens, TOPK] int32, each token's experts, best
/// first), weights ([tokens, TOPK] f32, their scores), counts, ranks (moe_count's), tokens, E,
/// seg_tokens (tokens per segment), G; constants BT (tokens per program), BE (a power of two
/// >= E), TOPK, SIGMOID (0: softmax over the E logits; 1: the sigmoid of each), RENORM (1: the
/// k scores divided by their sum), C. The picks compare each logit's bits with the lowest
/// log2(BE) replaced by the expert (BE - 1 - e: ties, and logits that differ only in those
/// bits, go to the lower expert; exact for bf16 logits). Launch over cdiv(tokens, BT) programs.
/// Registered as moe_topk (f32 logits) and moe_topk_bf16.
const KernelDef& moe_topk_kernel(ir::DType logits = ir::DType::f32);

/// The three kernels that sort token slots (pair p = token * TOPK + j) by expert, the tokens cut
/// into `segments` runs of equal length (a rank's tokens, where they are gathered from
/// several; else one), each (segment, expert) a group g = segment * E + expert of its own. The
/// counters are C copies of G (counts [C, G], zero between runs): program q counts in copy
/// q % C (adds on one counter are done one at a time; copies spread them).
/// - moe_count: ranks[p] = the pair's place among its group's in its program's copy (atomics:
///   the order is whichever the hardware gives), counts[c, g] = the copy's pairs of the group.
///   Ids outside [0, E) (-1: a slot that goes nowhere, such as an expert of another rank) are
///   dropped: ranks[p] = -1. Parameters: ids, counts, ranks, pairs, E, seg_pairs (pairs per
///   segment), G; constants BP, C. Launch over cdiv(pairs, BP) programs.
/// - moe_tiles: each group's pairs padded to a multiple of BM rows, groups in order; starts[g]
///   = the group's first row (starts[G] = the rows of all), bases[c, g] = the first row of
///   copy c's pairs of the group, and the tile table of the grouped GEMM
///   (grouped_gemm_kernel): tiles[0] = the tiles, then per tile t its expert (g % E), its
///   first row (t * BM) and one past its last pair's row; slots past the count (0, 0, 0).
///   Every row of sorted_ids that no pair takes (slots * BM rows) gets the sentinel `pairs`.
///   Parameters: counts, tiles, starts, bases, sorted_ids, G, E, slots, pairs; constants BM,
///   TB (slots per program past G), GB (groups summed at a time), C. Launch over G +
///   cdiv(slots, TB) programs.
/// - moe_scatter: sorted_ids[row] = p and dest[p] = row (-1 for a dropped pair), row =
///   bases[c, g] + ranks[p], c = (p / chunk) % C (chunk: the pairs per program of the kernel
///   that ranked them); counts zeroed for the next run. Parameters: ids, ranks, bases,
///   sorted_ids, dest, counts, pairs, E, seg_pairs, G, chunk; constants BP, C. Launch over
///   cdiv(max(pairs, C * G), BP) programs.
///@{
const KernelDef& moe_count_kernel();
const KernelDef& moe_tiles_kernel();
const KernelDef& moe_scatter_kernel();
///@}

/// Routing for a MoE layer, on the device: for up to `max_tokens` tokens, the top-k experts of
/// each (with their scores), then the table a grouped GEMM over the experts reads. A run with
/// `tokens` tokens leaves, in the object's buffers (device memory on a GPU target, host memory
/// on the host):
/// - topk_ids() [tokens, topk] int32 and topk_weights() [tokens, topk] f32 (the k best logits;
///   f32 logits within about 2^(log2(experts) - 23) of each other, relative, may come in either
///   order: moe_topk_kernel says why);
/// - sorted_ids() [rows()]: the pair (token * topk + j) that each row of the grouped GEMM
///   computes, grouped by (segment, expert), each group padded to a multiple of block_rows()
///   with the sentinel tokens * topk (vLLM's moe_align_block_size's sorted_token_ids);
/// - dest() [tokens * topk]: the row of each pair, -1 for one dropped (an id outside the
///   experts: only from align());
/// - tiles(): the tile table (GroupedGemm's: count, then expert, first row, end row per tile),
///   slots() entries;
/// - group_starts() [segments * experts + 1]: each group's first row, then the rows in all.
/// The order of the pairs within a group varies from run to run (atomics); everything else is
/// the same bits. Runs are queued on the stream given (GPU), or done when they return. Runs
/// of one object are ordered (they share its buffers).
class MoeRouting {
 public:
  /// The scores of a token's experts: the softmax over its logits, or the sigmoid of each.
  enum class Scores { softmax, sigmoid };
  /// Construction options.
  struct Options {
    Scores scores = Scores::softmax;  ///< how the logits become scores
    bool renormalize = true;          ///< the k scores divided by their sum
    int block_rows = 64;              ///< BM: the grouped GEMM's rows per tile (a power of two)
    /// Runs of tokens sorted apart (a rank's, for a gathered batch).
    int segments = 1;
  };
  /// Buffers for up to `max_tokens` tokens a run, each routed to `topk` of `experts` experts.
  /// Throws Error unless 1 <= topk <= experts, topk <= 32, experts <= 4096, block_rows is a
  /// power of two, and segments >= 1 divides max_tokens (>= 0).
  MoeRouting(const Target& target, int64_t max_tokens, int64_t experts, int topk, Options options);
  /// The same with the default Options.
  MoeRouting(const Target& target, int64_t max_tokens, int64_t experts, int topk)
      : MoeRouting(target, max_tokens, experts, topk, Options{}) {}
  ~MoeRouting();
  /// Top-k of `logits` ([tokens, experts]), then the sort. `tokens` <= max_tokens, a multiple
  /// of the segments.
  void run(const float* logits, int64_t tokens, const runtime::Stream* stream = nullptr);
  /// The same with bf16 logits.
  void run(const bf16* logits, int64_t tokens, const runtime::Stream* stream = nullptr);
  /// The sort alone, of top-k ids computed elsewhere ([tokens, topk] int32; -1 drops a slot);
  /// topk_ids()/topk_weights() are then not written.
  void align(const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream = nullptr);

  /// [tokens, topk] int32: each token's experts, best first (run() only).
  const int32_t* topk_ids() const;
  /// [tokens, topk] f32: their scores (run() only).
  const float* topk_weights() const;
  /// [rows()] int32: the pair each row of the grouped GEMM computes (above).
  const int32_t* sorted_ids() const;
  /// [tokens * topk] int32: each pair's row (-1: dropped).
  const int32_t* dest() const;
  /// [1 + 3 * slots()] int32: the tile table (above).
  const int32_t* tiles() const;
  /// [segments * experts + 1] int32: each group's first row, then the rows in all.
  const int32_t* group_starts() const;
  int64_t rows() const;  ///< sorted_ids' capacity: slots() * block_rows()
  /// rows() of a MoeRouting made so (before making one: the rows of the buffers that follow it).
  static int64_t rows_for(int64_t max_tokens, int64_t experts, int topk, const Options& options);
  /// The tile table's capacity: cdiv(max_tokens * topk, BM) + segments * experts.
  int64_t slots() const;
  int64_t experts() const;     ///< The experts routed to.
  int topk() const;            ///< The experts of each token.
  int block_rows() const;      ///< BM (Options::block_rows).
  int segments() const;        ///< Options::segments.
  int64_t max_tokens() const;  ///< The most tokens a run.

 private:
  struct State;
  template <class T>
  void route(const T* logits, int64_t tokens, const runtime::Stream* stream);
  void sort(const int32_t* ids, int64_t tokens, const runtime::Stream* on, int chunk);
  void check_tokens(int64_t tokens, const char* what) const;
  std::shared_ptr<State> s_;
};

/// The MoE grouped GEMM over routed tokens (vLLM's fused_moe; kernels/ag_moe.cpp): for each
/// tile of MoeRouting's table (expert e, rows [first, end)), C[row, :] = A[token(row), :] @
/// W[e]^T, token(row) = sorted_ids[row] / TOPK, W [E, N, K] (an nn.Linear weight per expert)
/// seen as [w_rows = E * N, K], C [rows, N] bf16 in the sorted order (rows of the sentinel not
/// written). A 1-D grid of two parts: programs [0, slots) gather one tile's token rows each into
/// a_sorted ([rows, K], the sorted order) and set ready[tile] = call; the programs after them
/// are the GEMM's tiles ({slots, cdiv(N, BN)} in grouped order), each waiting for its rows'
/// ready and reading a_sorted as a dense tile (TMA on sm_90a). WAIT = 1 (AgMoe): the tokens of
/// rank r, rows [r * seg_tokens, (r + 1) * seg_tokens) of A, are there once flags[r] >= call (a
/// tile's gather waits for each rank from its rows' lowest to their highest); with a segment
/// per rank in the routing (segments = ranks) both parts take our rank's tiles first (from
/// starts[rank * E]), with one (segments = 1) the table's order. Parameters: a, a_sorted,
/// a_scales, sorted_ids, tiles, starts, w, w_scales, c, flags, ready, rows, N, K, w_rows, E,
/// seg_tokens, segments, slots, call; constants BM (the table's), BN, BK, GROUP_M, TOPK, WAIT, SPLIT (the
/// gather programs a tile: each gathers its part of K, whole BK blocks, and marks
/// ready[t * SPLIT + part]). Launch over slots * SPLIT + slots * cdiv(N, BN) programs (ready:
/// slots * SPLIT flags); moe_gather_split picks SPLIT. Registered as moe_gemm (bf16: the scales
/// not read) and moe_gemm_fp8: W f8e4m3 with DeepSeek-V3's block scales (w_scales [E,
/// cdiv(N, 128), cdiv(K, 128)], one per 128 x 128 block of each expert's W), A's rows quantized
/// to f8e4m3 as they are gathered, a scale per row and 128 columns (a_scales [rows,
/// cdiv(K, 128)]: the block's largest magnitude / 448), each K block's product scaled into the
/// f32 accumulator (BK = 128).
const KernelDef& moe_gemm_kernel(ir::DType weights = ir::DType::bf16);

/// The gather programs a tile for moe_gemm (SPLIT): enough that `slots` tiles' gathers fill the
/// GPU's SMs once (as if 8 on the CPU backend), each part at least 4 BK blocks of K, at most 8
/// parts; $TILEDIST_MOE_GATHER_SPLIT (1 to 8) overrides it.
int moe_gather_split(const Target& target, int64_t slots, int64_t K, int bk);

/// The segments of AgMoe's routing for `pairs` slots of a gathered batch over `ranks` ranks, E
/// experts, BM-row tiles: a segment per rank (a tile's rows from one rank: its gather waits for
/// that rank alone, and MoeReduce pushes a rank's tokens once its tiles are done) where that
/// makes at most 1.1 times the tiles of one segment (the batch sorted by expert alone: each
/// expert padded to BM once, not once a rank), else 1. $TILEDIST_MOE_SEGMENTS (1 or ranks)
/// overrides it.
int moe_segments(int ranks, int64_t pairs, int64_t E, int bm);

/// Tiles for the MoE GEMMs (moe_gemm, moe_reduce): grouped_gemm_config's (the routing's BM; on
/// sm_90a TMA copies, warp specialized), 128 columns (the kernels' second part, the gather or the
/// combine, needs the registers that 256 would take).
GemmConfig moe_gemm_config(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t E,
                           ir::DType weights = ir::DType::bf16);

/// AllGather + MoE grouped GEMM, overlapped (tensor-parallel experts, Triton-distributed's
/// ag_moe): every rank holds `tokens` tokens (bf16 [tokens, K]) with their top-k ids (int32
/// [tokens, topk], from its own routing) and a slice of every expert's weights (W [E, N, K]:
/// N of each expert's output columns); a run gathers every rank's tokens and ids (the copy
/// engine on a GPU, the ids first), sorts the gathered batch's slots by (rank, expert) into
/// tiles, or by expert alone where a rank's rows of an expert are few (routing(): a segment per
/// rank, or one; moe_segments), and computes out [rows(), N] (bf16) = each slot's token @ its
/// expert's W^T in the sorted order (moe_gemm_kernel), whose programs wait only for the tokens
/// of their tile's ranks, our own rank's tiles first. Row routing().dest()[p] of out holds slot p
/// (token p / topk of the gathered batch, rank r's tokens at [r * tokens, (r + 1) * tokens)).
/// `weights` f8e4m3: W in e4m3 with its block scales (moe_gemm_kernel's w_scales), each token's
/// row quantized per 128 columns on the way (moe_gemm_kernel says how). Device memory on a GPU
/// target, host memory on the host; construction and every run are collective; streams as
/// AgGemm's (kernels.h).
class AgMoe {
 public:
  /// Collective: for `tokens` tokens a rank in every run, of K columns, and `experts` experts of
  /// N columns each, top-`topk`. Throws Error for negative tokens, N, K or experts below 1,
  /// topk or experts past MoeRouting's limits, weights other than bf16 and f8e4m3, or operands
  /// of 2^31 elements or more.
  AgMoe(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t experts, int topk,
        ir::DType weights = ir::DType::bf16);
  ~AgMoe();
  /// tokens [tokens, K] bf16, topk_ids [tokens, topk] int32, w [E, N, K] bf16 (an AgMoe made
  /// for bf16), out [rows(), N] bf16.
  void run(const bf16* tokens, const int32_t* topk_ids, const bf16* w, bf16* out,
           const runtime::Stream* stream = nullptr);
  /// The same, the tokens' top-k weights ([tokens, topk] f32) gathered too (gathered_weights():
  /// for MoeReduce after it).
  void run(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const bf16* w, bf16* out,
           const runtime::Stream* stream = nullptr);
  /// The same with f8e4m3 weights and their block scales ([E, cdiv(N, 128), cdiv(K, 128)] f32).
  void run(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const f8e4m3* w,
           const float* w_scales, bf16* out, const runtime::Stream* stream = nullptr);
  /// The gathered batch's layout (sorted_ids, dest, tiles) of the last run.
  const MoeRouting& routing() const;
  /// The gathered tokens of the last run ([ranks * tokens, K] bf16).
  const bf16* gathered() const;
  /// Their top-k weights ([ranks * tokens, topk] f32), where the last run was given them.
  const float* gathered_weights() const;
  /// out's rows: routing().rows().
  int64_t rows() const;
  /// The GEMM's tiles and options (moe_gemm_config).
  const GemmConfig& config() const;
  /// Overlap (the default): each GEMM tile starts once its rows' tokens are here. Off: every
  /// rank's tokens are gathered before the GEMM starts (the same copies and kernel, one after
  /// the other: what the overlap is measured against). Collective: every rank alike.
  void set_overlap(bool on);

 private:
  struct State;
  void launch(const bf16* tokens, const int32_t* topk_ids, const float* topk_weights, const void* w,
              const float* w_scales, bf16* out, const runtime::Stream* stream);
  std::shared_ptr<State> s_;
};

/// Grouped GEMM + top-k combine + ReduceScatter (kernels/moe_reduce.cpp), registered as
/// moe_reduce_rs, or + AllReduce, moe_reduce_ar (with f8e4m3 activations and weights and their
/// block scales, as moe_gemm_kernel's: moe_reduce_rs_fp8, moe_reduce_ar_fp8); and the sum of the
/// ranks' blocks after it, moe_reduce_sum. Launched by MoeReduce.
///@{
const KernelDef& moe_reduce_kernel(bool all_reduce, ir::DType weights = ir::DType::bf16);
const KernelDef& moe_reduce_sum_kernel();
///@}

/// The down projection of tensor-parallel experts, Triton-distributed's moe_reduce_rs (and
/// moe_reduce_ar for decoding): every rank holds K columns of the gathered batch's
/// intermediate activations (act [routing.rows(), K] bf16, in the sorted order of `routing`:
/// AgMoe::routing() of the same batch) and the matching slice of every expert's down weights
/// (W [E, N, K]); out[t, :] (bf16) = the sum over ranks and over token t's k slots of its slot's
/// row of act @ W[e]^T times the slot's score (topk_weights [ranks * tokens, topk] f32, of the
/// gathered batch). Mode::reduce_scatter: out [tokens, N] holds this rank's tokens (rank r's:
/// rows [r * tokens, (r + 1) * tokens) of the batch); Mode::all_reduce: out [ranks * tokens, N],
/// every token, on every rank. The GEMM's tiles are pushed, weighted and summed per token, to
/// the owner as each rank's tokens are done (the kernel's header says how). `weights` f8e4m3:
/// act and W in e4m3 with their block scales (act_scales [routing.rows(), cdiv(K, 128)], one per
/// row and 128 columns; w_scales [E, cdiv(N, 128), cdiv(K, 128)]). Device memory on a GPU
/// target, host memory on the host; construction and every run are collective; streams as
/// AgGemm's (kernels.h).
class MoeReduce {
 public:
  /// Where the sums go: each rank's own tokens (reduce_scatter) or every token to every rank.
  enum class Mode { reduce_scatter, all_reduce };
  /// Collective: for `tokens` tokens a rank, `experts` experts of N output columns, K columns
  /// of act a rank, top-`topk`. Throws Error unless tokens >= 0, N, K >= 1, 1 <= topk <=
  /// experts, weights bf16 or f8e4m3, and act, W and the output under 2^31 elements each.
  MoeReduce(const Target& target, int64_t tokens, int64_t N, int64_t K, int64_t experts, int topk,
            Mode mode = Mode::reduce_scatter, ir::DType weights = ir::DType::bf16);
  ~MoeReduce();
  /// bf16 act and w (a MoeReduce made for bf16). `routing` must be of the gathered batch's form
  /// (ranks * tokens tokens, the experts and topk, a segment per rank or one, config().bm-row
  /// tiles: AgMoe::routing()); else it throws Error.
  void run(const bf16* act, const MoeRouting& routing, const float* topk_weights, const bf16* w, bf16* out,
           const runtime::Stream* stream = nullptr);
  /// The same with f8e4m3 act and w and their block scales (above).
  void run(const f8e4m3* act, const float* act_scales, const MoeRouting& routing, const float* topk_weights,
           const f8e4m3* w, const float* w_scales, bf16* out, const runtime::Stream* stream = nullptr);
  /// The GEMM's tiles and options (moe_gemm_config).
  const GemmConfig& config() const;
  /// Overlap (the default): a token's sum is pushed to its owner once the tiles of its rank's
  /// tokens are done, while the rest of the GEMM runs. Off: once the whole GEMM is done (the
  /// GEMM, then the reduce-scatter or all-reduce: what the overlap is measured against).
  /// Collective: every rank alike.
  void set_overlap(bool on);

 private:
  struct State;
  void launch(const void* act, const float* act_scales, const MoeRouting& routing, const float* topk_weights,
              const void* w, const float* w_scales, bf16* out, const runtime::Stream* stream);
  std::shared_ptr<State> s_;
};

/// SwiGLU of the gate/up projection's rows (kernels/moe_mlp.cpp): act[row, i] = silu(gu[row,
/// i]) * gu[row, I + i] for the rows < starts[G]. Parameters: gu ([rows, 2 I] bf16), act ([rows,
/// I] bf16), act_scales (not written), starts, G, I; constants BR, BI. Launch over {cdiv(rows, BR),
/// cdiv(I, BI)}. Registered as moe_swiglu; and as moe_swiglu_fp8, act f8e4m3 quantized per row
/// and 128 columns (BI = 128), act_scales [rows, cdiv(I, 128)] (moe_gemm_kernel's form).
const KernelDef& moe_swiglu_kernel(ir::DType act = ir::DType::bf16);

/// A tensor-parallel MoE MLP (Qwen3-MoE's, DeepSeek-V3's routed experts, Mixtral's) as one host
/// call: out = sum over each token's k experts e of its score times
///   (silu(x @ W1[e]^T) * (x @ W3[e]^T)) @ W2[e]^T,
/// the intermediate size split over the ranks: every rank holds `tokens` tokens (x [tokens,
/// hidden] bf16) and, for every expert, its slice of the gate and up projections (w13 [E, 2 I,
/// hidden]: rows [0, I) gate, [I, 2 I) up, I = intermediate / ranks) and of the down projection
/// (w2 [E, hidden, I]). A run gathers the tokens (AgMoe, the gate/up GEMM overlapped with the
/// gather), applies SwiGLU (moe_swiglu), and runs the down GEMM with the top-k combine and the
/// reduce-scatter (MoeReduce): out [tokens, hidden] bf16 holds this rank's tokens
/// (Mode::all_reduce: [ranks * tokens, hidden], every rank's). The routing is the caller's
/// (top-k ids and weights of its tokens: MoeRouting's), or made from router logits ([tokens, E]
/// f32) by the run. `weights` f8e4m3: w13 and w2 in e4m3 with DeepSeek-V3's block scales
/// (w13_scales [E, cdiv(2 I, 128), cdiv(hidden, 128)], w2_scales [E, cdiv(hidden, 128),
/// cdiv(I, 128)]: one per 128 x 128 block of each expert's slice as it is stored, gate and up
/// rows together: a checkpoint's scales, blocked over gate and up apart, are these where I is a
/// multiple of 128), the activations quantized per token and 128 columns where they are written
/// (the gathered tokens, SwiGLU's output; moe_gemm_kernel says how). Device memory on a GPU
/// target, host memory on the host; construction and every run are collective; streams as
/// AgGemm's (kernels.h).
class MoeMlp {
 public:
  /// Collective: for `tokens` tokens a rank of `hidden` channels, `experts` experts of an
  /// intermediate size `intermediate` (a multiple of the ranks), top-`topk`. Throws Error for
  /// an intermediate size that does not split, weights other than bf16 and f8e4m3, or the
  /// shapes AgMoe and MoeReduce refuse.
  MoeMlp(const Target& target, int64_t tokens, int64_t hidden, int64_t intermediate, int64_t experts, int topk,
         MoeReduce::Mode mode = MoeReduce::Mode::reduce_scatter, ir::DType weights = ir::DType::bf16);
  ~MoeMlp();
  /// Routed by the caller: topk_ids [tokens, topk] int32 and topk_weights [tokens, topk] f32 of
  /// this rank's tokens; bf16 weights (an MoeMlp made for bf16).
  void run(const bf16* x, const int32_t* topk_ids, const float* topk_weights, const bf16* w13, const bf16* w2,
           bf16* out, const runtime::Stream* stream = nullptr);
  /// The same, routed here (MoeRouting over this rank's tokens, scored as `options` say: its
  /// scores and renormalize; its segments not read).
  void run(const bf16* x, const float* logits, const bf16* w13, const bf16* w2, bf16* out,
           const runtime::Stream* stream = nullptr, MoeRouting::Options options = {});
  /// The first with f8e4m3 weights and their block scales (above).
  void run(const bf16* x, const int32_t* topk_ids, const float* topk_weights, const f8e4m3* w13,
           const float* w13_scales, const f8e4m3* w2, const float* w2_scales, bf16* out,
           const runtime::Stream* stream = nullptr);
  /// The second (routed here) with f8e4m3 weights and their block scales.
  void run(const bf16* x, const float* logits, const f8e4m3* w13, const float* w13_scales, const f8e4m3* w2,
           const float* w2_scales, bf16* out, const runtime::Stream* stream = nullptr,
           MoeRouting::Options options = {});
  /// I: the intermediate size / ranks.
  int64_t intermediate_per_rank() const;
  /// Overlap on (the default) or off for both GEMMs (AgMoe::set_overlap, MoeReduce::set_overlap):
  /// off runs the gather, the gate/up GEMM, SwiGLU, the down GEMM and the reduce-scatter one
  /// after the other. Collective: every rank alike.
  void set_overlap(bool on);

 private:
  struct State;
  void swiglu(const runtime::Stream* stream);
  const MoeRouting& route(const float* logits, const runtime::Stream* stream, MoeRouting::Options options);
  std::shared_ptr<State> s_;
};

}  // namespace tiledist::kernels
