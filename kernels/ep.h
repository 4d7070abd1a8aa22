// Expert-parallel all-to-all (DeepEP's dispatch and combine): each rank holds the weights of
// experts / ranks experts (rank d: experts [d * El, (d + 1) * El), El = experts / ranks), and
// every token goes to the ranks of its top-k experts and back. Written in the DSL with the
// dist::/shmem:: primitives; one process per GPU (ranks may share one), or ranks of the CPU
// backend.
#pragma once

#include <vector>

#include "kernels/kernels.h"

namespace tiledist::kernels {

/// The kernels of EpDispatch (kernels/ep_dispatch.cpp), registered as ep_exchange and
/// ep_dispatch:
/// - ep_exchange (one program): this rank's count of slots for each expert (counts [E], from
///   moe_count) stored into every rank's matrix [2, ranks, E] (the half call % 2, row `rank`),
///   the count zeroed for the next run, flags[rank] set to `call` on every rank; then waits
///   until every rank's flag here has reached `call`. Parameters: counts, matrix, flags, E,
///   call; constant BE (experts a step).
/// - ep_dispatch (a program per slot p = token * TOPK + j, at least one): slot p's token row of
///   x ([tokens, H] bf16) stored into rank d = ids[p] / El's recv at row bases[ids[p]] +
///   place[p] (place: moe_count's place of the slot among this rank's slots of its expert; -1:
///   dropped), and recv_src[row] = rank * max_pairs + p there; the last program to finish (a
///   counter, `sent`, zeroed again by it) sets flags[rank] = call on every rank and waits until
///   every rank's flag here has reached `call`: when the kernel is done, every row for this
///   rank's experts is here. Parameters: x, ids, place, bases, recv, recv_src, sent, flags,
///   pairs, H, El, max_pairs, call; constants TOPK, BH (columns a step).
///@{
const KernelDef& ep_exchange_kernel();
const KernelDef& ep_dispatch_kernel();
///@}

/// The kernels of EpCombine (kernels/ep_combine.cpp), registered as ep_combine and
/// ep_combine_sum:
/// - ep_combine (a program per received row, at least one): row r of y ([rows, H] bf16) stored
///   into its source's comb ([max_pairs, H], at the slot recv_src[r] % max_pairs of rank
///   recv_src[r] / max_pairs); the last program (as ep_dispatch's) sets flags[rank] = call on
///   every rank and waits for every rank's. Parameters: y, recv_src, comb, sent, flags, rows, H,
///   max_pairs, call; constant BH.
/// - ep_combine_sum (programs {tokens, cdiv(H, BH)}): out[t, :] (bf16) = the sum over j < TOPK,
///   in order, of weights[t, j] * comb[t * TOPK + j, :] (f32), the slots whose place is -1
///   (dropped) left out (kernels/ep_sum.h). Parameters: comb, place, weights, out, H; constants
///   TOPK, BH.
///@{
const KernelDef& ep_combine_kernel();
const KernelDef& ep_combine_sum_kernel();
///@}

/// Dispatch of expert parallelism, normal mode (DeepEP's normal kernels: prefill and
/// training, throughput first): every rank gives its tokens (x [tokens, hidden] bf16) and their
/// top-k experts (topk_ids [tokens, topk] int32, global expert ids; -1, or any id outside
/// [0, experts), sends the slot nowhere); a run sends each slot's token row to the rank of its
/// expert. Each rank receives, in recv() ([recv_capacity, hidden] bf16), the rows for its own
/// El = experts / ranks experts, packed per local expert (rows of local expert 0 first, then 1,
/// ...; within an expert, by source rank, then in any order): the layout GroupedGemm takes
/// with offs() as its offsets (no copy between the dispatch, the grouped GEMM and the combine).
/// recv_src() keeps each row's source: rank * max_tokens * topk + token * topk + j.
///
/// A run first exchanges the counts (every rank's per-expert counts, on the device), reads them
/// on the host (a host synchronization, as DeepEP's normal mode) and checks every rank's
/// receive capacity: a run that would receive more than recv_capacity rows on any rank throws
/// Error on every rank, naming the rank, and sends nothing. recv_counts() (host) and offs()
/// (device) are then this rank's; the rows are sent by the GPU's SMs (stores into the peers'
/// recv), and the run is done on the stream once every rank's rows for us are here.
///
/// recv(), recv_src() and offs() hold the last run's until the next run on this rank's stream:
/// work that reads them (a grouped GEMM, EpCombine) must be queued on that stream before the
/// next run (every rank's next run begins with the count exchange, which peers wait for before
/// they write into our buffers). Device memory on a GPU target, host memory on the host;
/// construction and every run are collective; streams as AgGemm's (kernels.h).
class EpDispatch {
 public:
  /// Construction options.
  struct Options {
    /// Rows recv() holds; 0: as many as any run can send here (ranks * max_tokens * min(topk,
    /// El), where each token's k experts differ: a token that names an expert twice sends it
    /// two rows). A smaller capacity takes less memory; a run past it throws.
    int64_t recv_capacity = 0;
  };
  /// Collective: the buffers for up to `max_tokens` tokens a run of `hidden` channels, each
  /// sent to its top-`topk` of `experts` experts. Throws Error unless max_tokens >= 0, hidden,
  /// experts and topk >= 1, topk <= experts, and experts a multiple of the ranks.
  EpDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts, int topk, Options options);
  /// The same with the default Options.
  EpDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts, int topk)
      : EpDispatch(target, max_tokens, hidden, experts, topk, Options{}) {}
  ~EpDispatch();
  /// Sends `tokens` (<= max_tokens) rows of x by their top-k ids.
  void run(const bf16* x, const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream = nullptr);

  /// [recv_capacity(), hidden] bf16: the rows the last run received (the first recv_rows()).
  const bf16* recv() const;
  /// [recv_capacity()] int32: each row of recv()'s source slot, rank * max_tokens * topk +
  /// token * topk + j.
  const int32_t* recv_src() const;
  /// [El] int32 on the device: the cumulative end row of each local expert in recv().
  const int32_t* offs() const;
  /// The last run's rows received for each local expert (host).
  const std::vector<int64_t>& recv_counts() const;
  /// The last run's rows received in all (host): y's rows for EpCombine.
  int64_t recv_rows() const;
  /// Rows recv() holds: Options::recv_capacity, or by default the most a run can send here.
  int64_t recv_capacity() const;
  /// El = experts / ranks: this rank's experts, global ids [rank * El, (rank + 1) * El).
  int64_t local_experts() const;
  int64_t experts() const;     ///< The experts over all ranks.
  int64_t hidden() const;      ///< The width of x's and recv()'s rows.
  int64_t max_tokens() const;  ///< The most tokens a run (on a rank).
  int topk() const;            ///< The experts of each token.
  /// The last run's token count (on this rank).
  int64_t tokens() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
  friend class EpCombine;
};

/// Combine of expert parallelism, normal mode: the way back of an EpDispatch's last run. Each
/// rank gives the rows it computed for the rows it received (y [dispatch.recv_rows(), hidden]
/// bf16, row r for recv() row r: a grouped GEMM's output over recv() and offs()); a run sends
/// each row back to the rank it came from, and each rank sums its tokens' k rows weighted by
/// their top-k scores: out[t, :] = sum over j of topk_weights[t, j] * (the row of slot (t, j)),
/// in f32, in j's order, rounded once to bf16 (slots dropped at the dispatch left out; a token
/// with none is zero). `hidden` is y's width (the dispatch's by default). Each rank's next run
/// of the dispatch must not begin before its combine (the same stream: they are queued in
/// order). Device memory on a GPU target, host memory on the host; collective; streams as
/// AgGemm's.
class EpCombine {
 public:
  /// Collective: the way back of `dispatch` (whose state it shares), y's rows `hidden` wide
  /// (0: the dispatch's hidden(); negative throws Error).
  explicit EpCombine(const EpDispatch& dispatch, int64_t hidden = 0);
  ~EpCombine();
  /// topk_weights [tokens, topk] f32 (tokens: the dispatch's last run's), out [tokens, hidden].
  /// Once for each run of the dispatch: before its first run, after one that threw, or a second
  /// time, it throws Error.
  void run(const bf16* y, const float* topk_weights, bf16* out, const runtime::Stream* stream = nullptr);
  /// The width of y and out.
  int64_t hidden() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// The kernels of the low-latency mode (kernels/ep_low_latency.cpp), registered as ep_ll_send
/// (bf16 rows) and ep_ll_send_fp8, ep_ll_receive, ep_ll_back and ep_ll_sum; EpLowLatencyDispatch
/// and EpLowLatencyCombine say what they do and how they are launched.
///@{
const KernelDef& ep_ll_send_kernel(ir::DType rows = ir::DType::f8e4m3);
const KernelDef& ep_ll_receive_kernel();
const KernelDef& ep_ll_back_kernel();
const KernelDef& ep_ll_sum_kernel();
///@}

/// Dispatch of expert parallelism, low-latency mode (DeepEP's low-latency kernels: decoding):
/// no host synchronization and no count exchange. Each rank's rows for an expert go into a
/// place of their own on the expert's rank, max_tokens rows for each (local expert, source
/// rank): recv() is [El * ranks * max_tokens, hidden], the rows of local expert le from rank r
/// at [(le * ranks + r) * max_tokens, + recv_counts()[le * ranks + r]); each (expert, source)
/// count travels with the rows (stored before a signal word per expert and source). Rows go as
/// f8e4m3 with a scale per 128 channels quantized on the way out (recv_scales() [rows,
/// cdiv(hidden, 128)], each block's max |x| / 448, its codes x * (448 / max |x|) as DeepEP
/// rounds them: reference::quantize_f8_row), or as bf16.
/// After the receive, tiles() is the table of BM-row tiles over those runs that GroupedGemm
/// takes (GroupedGemm::Table{tiles(), slots(), block_rows()}), the blockwise f8 GEMM with
/// recv_scales() as its A's.
///
/// Calls alternate between two halves of the receive buffers (recv() and the others point
/// into the last run's), so back-to-back runs need no barrier while every rank runs
/// dispatch, work on the rows, and combine, in turn: a rank writes into a half two calls after
/// its last use, once each peer has combined the call between. With Options::recv_hook, run()
/// only sends and receive() waits for the rows (DeepEP's return_recv_hook: the caller's work
/// in between overlaps the transfer); else run() does both. A token's k experts must differ
/// (slots past max_tokens for one expert, from repeated ids, are not sent). A peer that never
/// sends ends the receive with the wait's timeout ($TILEDIST_WAIT_TIMEOUT), naming the signal
/// word it gave up on by the label the dispatch gives its words (runtime/heap_labels.h):
/// "expert e's rows from rank r" (word le * ranks + r of the half's).
/// Device memory on a GPU target, host memory on the host; collective; streams as AgGemm's
/// (kernels.h).
class EpLowLatencyDispatch {
 public:
  /// Construction options.
  struct Options {
    ir::DType dtype = ir::DType::f8e4m3;  ///< the rows as sent: f8e4m3 (with scales) or bf16
    int block_rows = 64;                  ///< BM of tiles() (at most the grouped GEMM's row tile)
    bool recv_hook = false;               ///< run() sends; receive() receives
  };
  /// Collective: the receive buffers (two halves of rows() rows) for up to `max_tokens` tokens
  /// a run of `hidden` channels, each sent to its top-`topk` of `experts` experts. Throws Error
  /// unless max_tokens >= 0, hidden, experts, topk and block_rows >= 1, topk <= experts, experts
  /// a multiple of the ranks, and dtype bf16 or f8e4m3.
  EpLowLatencyDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts, int topk,
                       Options options);
  /// The same with the default Options.
  EpLowLatencyDispatch(const Target& target, int64_t max_tokens, int64_t hidden, int64_t experts, int topk)
      : EpLowLatencyDispatch(target, max_tokens, hidden, experts, topk, Options{}) {}
  ~EpLowLatencyDispatch();
  /// Sends `tokens` (<= max_tokens) rows of x ([tokens, hidden] bf16) by their top-k ids
  /// ([tokens, topk] int32; an id outside [0, experts) sends its slot nowhere), then, without
  /// Options::recv_hook, receives them (receive()). With the hook, a run before the last run's
  /// receive(), or before its combine's receive(), throws Error.
  void run(const bf16* x, const int32_t* topk_ids, int64_t tokens, const runtime::Stream* stream = nullptr);
  /// With Options::recv_hook: waits (on the stream) for the last run's rows and writes
  /// recv_counts() and tiles(); once a run (before any run, or twice, it throws Error).
  void receive(const runtime::Stream* stream = nullptr);

  /// [rows(), hidden] of Options::dtype: the last run's half of the rows (layout above).
  const void* recv() const;
  /// [rows(), cdiv(hidden, 128)] f32: the rows' block scales (f8e4m3; null for bf16 rows).
  const float* recv_scales() const;
  /// [rows()]: each received row's slot at its source (token * topk + j; the source: the run's).
  const int32_t* recv_src() const;
  /// [El * ranks] int32 on the device: the rows received of (local expert le, rank r), at
  /// le * ranks + r.
  const int32_t* recv_counts() const;
  /// [1 + 3 * slots()] int32 on the device: the count of tiles, then per tile its local expert,
  /// first row and end row in recv() (GroupedGemm::Table's form).
  const int32_t* tiles() const;
  int64_t slots() const;  ///< tiles()' capacity: El * ranks * cdiv(max_tokens, BM)
  int64_t rows() const;   ///< recv()'s: El * ranks * max_tokens
  /// El = experts / ranks: this rank's experts, global ids [rank * El, (rank + 1) * El).
  int64_t local_experts() const;
  int block_rows() const;      ///< BM of tiles() (Options::block_rows).
  int64_t hidden() const;      ///< The width of x's and recv()'s rows.
  int64_t max_tokens() const;  ///< The most tokens a run (on a rank).
  int topk() const;            ///< The experts of each token.

  struct State;

 private:
  std::shared_ptr<State> s_;
  friend class EpLowLatencyCombine;
};

/// Combine of the low-latency mode: the way back of an EpLowLatencyDispatch's last run, as
/// EpCombine's (out[t, :] = the sum over j of topk_weights[t, j] * the row of slot (t, j), f32,
/// in j's order, one rounding to bf16), y [dispatch.rows(), hidden] bf16 in recv()'s rows (rows
/// past each run's count not read). Rows go back into the sources' halves of a buffer of [2,
/// max_tokens * topk, hidden], a signal word per (expert, half). With the dispatch's recv_hook,
/// run() only sends and receive() waits and sums (topk_weights and out then read there).
class EpLowLatencyCombine {
 public:
  /// Collective: the way back of `dispatch` (whose state it shares), y's rows `hidden` wide
  /// (0: the dispatch's hidden(); negative throws Error).
  explicit EpLowLatencyCombine(const EpLowLatencyDispatch& dispatch, int64_t hidden = 0);
  ~EpLowLatencyCombine();
  /// Sends y's rows back (topk_weights [tokens, topk] f32 and out [tokens, hidden], tokens the
  /// dispatch's last run's), then, without the recv_hook, sums them (receive()). Once for each
  /// run of the dispatch, after its receive(); else it throws Error.
  void run(const bf16* y, const float* topk_weights, bf16* out, const runtime::Stream* stream = nullptr);
  /// With the dispatch's recv_hook: waits (on the stream) for every expert's rows back and sums
  /// them into the run's out; once a run (before it, or twice, it throws Error).
  void receive(const runtime::Stream* stream = nullptr);
  /// The width of y and out.
  int64_t hidden() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace tiledist::kernels
