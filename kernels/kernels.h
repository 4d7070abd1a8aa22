// The kernel library's definitions, for programs, tools and tests.
#pragma once

#include "runtime/graph.h"
#include "tiledist.h"

namespace tiledist::kernels {

/// out[i] = x[i] + y[i] for i < n. Constants: BLOCK.
const KernelDef& add_kernel();
/// Row-wise softmax of an n_rows x n_cols matrix (row stride `stride`). Constants: BLOCK >= n_cols.
const KernelDef& softmax_kernel();
/// Row-wise layer normalization y = (x - mean) * rstd * w + b. Constants: BLOCK.
const KernelDef& layernorm_kernel();
/// C[M,N] (f32) = A[M,K] @ B[K,N], row-major, A and B in `dtype`. Constants: BM, BN, BK,
/// GROUP_M, PERSISTENT, TRANSPOSED (1: each BM x BN tile computed as C^T's BN x BM, B's tile
/// transposed as the A operand). Launch over {cdiv(M, BM), cdiv(N, BN)}, or with PERSISTENT=1 over
/// any number of programs {P} (best: the SMs), which walk the tiles.
const KernelDef& gemm_kernel(ir::DType dtype);

/// Tile sizes and options for a GEMM of this shape on `target` (what bench/RESULTS.md found best
/// on H100 for the GPU; the definition's defaults on the host).
struct GemmConfig {
  /// The kernel's constants (BM, BN, BK, and PERSISTENT or TRANSPOSED where set; the
  /// definition's defaults for those absent).
  Constants constants;
  /// How it is compiled (warps, stages, warp specialization): CompileOptions::from_env(), tuned.
  CompileOptions options;
  /// The tile's rows and columns of C: the constants' BM and BN (Gemm checks that they agree).
  ///@{
  int bm = 64, bn = 64;
  ///@}
  /// Persistent (PERSISTENT=1): at most this many programs, walking the tiles; 0: a program per
  /// tile.
  int programs = 0;
  /// Gemm's stream-K: the most runs a tile of the last wave is cut into (the constant MAX_PARTS
  /// where the constants have it).
  int max_parts = 4;
  /// For the kernels that take a program per tile and cut its K (gemm_ar): each tile's K in
  /// this many runs, a program each (grid z), summed after. 1: whole tiles.
  int split_k = 1;
  /// The grid to launch over for an M x N C: {min(tiles, programs), 1} (at least 1) where
  /// `programs` > 0, else a program per tile, {cdiv(M, bm), cdiv(N, bn)}.
  Grid grid(int64_t M, int64_t N) const {
    const int64_t tiles_m = (M + bm - 1) / bm, tiles_n = (N + bn - 1) / bn;
    if (programs > 0)
      return {static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles_m * tiles_n, programs))), 1};
    return {static_cast<int>(tiles_m), static_cast<int>(tiles_n)};
  }
  /// The integer constant `name` (BM, BK, PERSISTENT, ...), or `otherwise` where it has none.
  int64_t constant(const char* name, int64_t otherwise) const {
    auto it = constants.find(name);
    const int64_t* v = it == constants.end() ? nullptr : std::get_if<int64_t>(&it->second.v);
    return v ? *v : otherwise;
  }
  /// The same tiles, a program per tile: for kernels that order their tiles themselves
  /// (ag_gemm by SM puts, gemm_rs by pushes, gemm_ar). Compiled as the configuration says
  /// (on Hopper through the GPU passes, warp specialized: as fast as the matched-loop lowering
  /// they replaced, on 2 x H200, bench/RESULTS.md).
  GemmConfig per_tile() const {
    GemmConfig g = *this;
    g.constants.erase("PERSISTENT");
    g.programs = 0;
    return g;
  }
};
/// The configuration for C[M, N] = A[M, K] @ B[K, N] on `target`. `transposable`: the kernel may
/// compute its tiles transposed (the library's gemm, with the constant TRANSPOSED; not ag_gemm's
/// or gemm_rs's).
GemmConfig gemm_config(const Target& target, int64_t M, int64_t N, int64_t K, bool transposable = true);

/// gemm with the last wave of tiles split over K among the programs that would idle through it,
/// registered as gemm_sk (and _f16, _f32, _f8e4m3). Parameters: gemm's, then `partials` and
/// `counts` (scratch; kernels::Gemm sizes, zeroes and passes them); constants BM, BN, BK,
/// GROUP_M and MAX_PARTS (the most runs a tile of the last wave is cut into). Always
/// persistent: launched over one program per SM.
const KernelDef& gemm_sk_kernel(ir::DType dtype);

/// The operand types Gemm::run takes (another is a compile error, not a link error).
template <class T>
concept GemmOperand =
    std::is_same_v<T, bf16> || std::is_same_v<T, f16> || std::is_same_v<T, float> || std::is_same_v<T, f8e4m3>;

/// C[M, N] (f32) = A[M, K] @ B[K, N], row-major, A and B in `dtype` (bf16, f16, f32 or f8e4m3),
/// by the library's GEMM: gemm_config's tiles (or the given ones). Where its programs are
/// persistent and the tiles of their last wave would leave at least half of them idle, each of
/// that wave's tiles is cut over K into as many runs as the idle programs allow (up to
/// MAX_PARTS, gemm_sk), the runs computed side by side and summed, by the last to finish, in
/// a fixed order (the same bits on every run). A, B and C are device memory
/// on a GPU target, host memory on the host; a run given a stream is queued on it (AgGemm says
/// how the library's runs and streams behave). Runs of one object are ordered (they share its
/// scratch).
class Gemm {
 public:
  /// Compiles the kernel for this shape, with gemm_config's tiles or `config`'s, and allocates
  /// stream-K's scratch where it splits. Throws Error where M, N or K is negative, A, B or C
  /// would hold 2^31 elements or more, `dtype` has no GEMM, or `config`'s bm and bn disagree
  /// with its constants' BM and BN (or MAX_PARTS < 1).
  ///@{
  Gemm(const Target& target, int64_t M, int64_t N, int64_t K, ir::DType dtype = ir::DType::bf16);
  Gemm(const Target& target, int64_t M, int64_t N, int64_t K, ir::DType dtype, const GemmConfig& config);
  ///@}
  ~Gemm();
  /// C = A @ B, `a` M x K, `b` K x N, `c` M x N. T is the dtype the Gemm was made for (another
  /// throws Error).
  template <GemmOperand T>
  void run(const T* a, const T* b, float* c, const runtime::Stream* stream = nullptr);
  /// The configuration it was made with.
  const GemmConfig& config() const;
  /// Whether the last wave is split over K (else every program computes whole tiles).
  bool stream_k() const;
  /// The grid a run launches.
  Grid grid() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// Scaled f8 GEMM, as torch._scaled_mm and cuBLAS take it ("TN"): C[M,N] (f32) =
/// (A[M,K] @ Bt[N,K]^T) * scale_a[0] * scale_b[0], A and Bt row-major in `dtype` (f8e4m3 or
/// f8e5m2), the scales f32 in device memory. Registered as gemm_fp8 and gemm_fp8_e5m2.
/// Constants: BM, BN, BK, GROUP_M, PERSISTENT (as gemm's); launch over gemm_fp8_config's grid().
const KernelDef& gemm_fp8_kernel(ir::DType dtype);
/// Tiles for it (on sm_90a: wgmma m64n256k32 from TMA tiles of 128-byte rows, persistent and
/// warp specialized unless $TILEDIST_WS=0).
GemmConfig gemm_fp8_config(const Target& target, int64_t M, int64_t N, int64_t K);

/// AllGather + GEMM (kernels/ag_gemm.cpp), registered as ag_gemm; launched by AgGemm.
const KernelDef& ag_gemm_kernel();

/// C[M, N] (f32) = all_gather(A)[M, K] @ B[K, N] (bf16), each rank holding M / ranks rows of A:
/// the gather overlapped with the GEMM, whose programs wait only for the rows their tile needs.
/// The gather goes by the copy engine (GPU: no SM spent on it; to a peer that shares this
/// rank's GPU the copy runs on its SMs, before the GEMM), or by SM puts: the kernel's first
/// `puts` programs (where 0, kDefaultPuts on a GPU and 2 on the host) push slices of this rank's
/// rows to every rank, which lets a GEMM tile start once its slice is there. `a` (this rank's
/// rows), `b` and `c` are device memory on a GPU target, host memory on the host target.
/// Construction and every run are collective.
///
/// Streams (GPU), here as in GemmRs and Collectives: a run given a stream is queued on it,
/// after the work already there, and returns at once; its result is in place once the stream
/// has got past it, and a failure (a peer that never signals: the device-side timeout) is
/// reported by the stream's synchronize. Without a stream a run returns when its result is
/// there (it runs on the default stream, and waits for it). Runs may use different streams:
/// each run of a communicating object of the library (AgGemm, GemmRs, GemmAr, Collectives) is
/// queued after the last such run on this rank, of any object, on any stream, since two side
/// by side could deadlock (each holding SMs that the other's peers wait on). The host target
/// has no streams: every run returns when done. Bad arguments throw before anything is queued;
/// a run that fails on the GPU (a trap) ends the CUDA context, and the object with it.
///
/// Graphs (runtime/graph.h): a run on a stream being captured is recorded, to run at each
/// launch of the graph, where its object counts its calls in device memory: Gemm, GemmAr,
/// GemmRs by SM pushes (or where ranks share a GPU), FlashDecode. The others (AgGemm, GemmRs by
/// the copy engine, Collectives, the MoE and expert-parallel objects, DistFlashDecode) count
/// them on the host, where a graph would freeze the count: a run of theirs on a capturing
/// stream throws Error naming the object. A graph's arguments are fixed: its runs read and write
/// the memory they were captured with, and a launch is queued as a run (launch_graph below).
class AgGemm {
 public:
  /// How the rows are gathered: by the copy engine (the host's memcpy on the host target), or by
  /// the kernel's first programs (SM puts).
  enum class Gather { copy_engine, sm_puts };
  /// The programs that push the rows, by SM puts on a GPU, where `puts` is 0.
  static constexpr int kDefaultPuts = 16;
  /// Allocates the gathered A (two buffers of M x K) and signal words in the symmetric heap and
  /// compiles the kernel, with gemm_config's tiles. `puts` (Gather::sm_puts only) is clamped to
  /// [1, M / ranks]. Throws Error where M does not split evenly over the ranks, or `puts` < 0.
  AgGemm(const Target& target, int64_t M, int64_t N, int64_t K, Gather gather = Gather::copy_engine, int puts = 0);
  ~AgGemm();
  /// c[M, N] = all_gather(a)[M, K] @ b[K, N], `a` this rank's M / ranks x K rows.
  void run(const bf16* a, const bf16* b, float* c, const runtime::Stream* stream = nullptr);
  /// The gathered A of the last run (device memory on a GPU target).
  const bf16* gathered() const;
  /// Where the next run keeps this rank's rows (M / ranks x K) in the gathered A: a run given
  /// `a == next_input()` does not copy them there (in place, as NCCL's in-place all-gather).
  /// It changes with every run (the runs alternate between two buffers): write into it only
  /// once the run before last, which used the same buffer, has completed (runs on streams).
  bf16* next_input() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// GEMM + ReduceScatter (kernels/gemm_rs.cpp), registered as gemm_rs, gemm_ar (GEMM +
/// AllReduce: the same kernel with the constant ALL = 1) and rs_reduce (the sum of the tiles that
/// SM pushes staged); launched by GemmRs and GemmAr.
///@{
const KernelDef& gemm_rs_kernel();
const KernelDef& gemm_ar_kernel();
const KernelDef& rs_reduce_kernel();
///@}

/// out[M / ranks, N] (f32) = rows [rank * M / ranks, ...) of the sum over ranks r of
/// A_r[M, K] @ B_r[K, N] (bf16), each tile sent to its rows' owner as it is produced: by the
/// copy engine (GPU, the default): a peer's tiles are stored here and each finished row of
/// tiles is copied to its owner, whose own tiles (made last) add the peers' copies in their
/// epilogue; or by SM pushes (the host target always, and GPUs where two ranks share one,
/// since a copy within a GPU needs the SMs that the waiting tiles hold): each tile stored
/// straight into its owner's staging area, and a reduce kernel after the GEMM. M / ranks must be
/// a multiple of the GEMM's row tile. Device memory on a GPU target, host memory on the host
/// target. Construction and every run are collective.
class GemmRs {
 public:
  /// How the tiles go to their rows' owners: by the copy engine (taken only on a GPU target
  /// where no two ranks share a GPU; SM pushes otherwise), or by SM pushes.
  enum class Scatter { copy_engine, sm_pushes };
  /// Allocates the staging area (two halves of ranks x M / ranks x N f32) and signal words in
  /// the symmetric heap and compiles the kernels, with gemm_config's tiles. Throws Error where M
  /// does not split over the ranks into rows that are a multiple of the tile's (GemmConfig::bm).
  GemmRs(const Target& target, int64_t M, int64_t N, int64_t K, Scatter scatter = Scatter::copy_engine)
      : GemmRs(target, M, N, K, scatter, false) {}
  ~GemmRs();
  /// `out` (M / ranks x N) = this rank's rows of the sum over ranks of a[M, K] @ b[K, N]
  /// (GemmAr: `out` M x N, the whole sum).
  void run(const bf16* a, const bf16* b, float* out, const runtime::Stream* stream = nullptr);

 protected:
  /// `all`: GemmAr's GEMM + AllReduce (every tile pushed to every rank; any M; `scatter` unused).
  /// `config`: these tiles rather than gemm_config's.
  GemmRs(const Target& target, int64_t M, int64_t N, int64_t K, Scatter scatter, bool all,
         const GemmConfig* config = nullptr);

 private:
  struct State;
  std::shared_ptr<State> s_;
};

/// out[M, N] (f32) = the sum over ranks r of A_r[M, K] @ B_r[K, N] (bf16), on every rank: GEMM +
/// AllReduce, every tile pushed to every rank as it is produced (registered as gemm_ar).
class GemmAr : public GemmRs {
 public:
  /// Allocates the staging area (two halves of ranks x M x N f32) and signal words in the
  /// symmetric heap and compiles the kernels, a program per tile.
  GemmAr(const Target& target, int64_t M, int64_t N, int64_t K) : GemmRs(target, M, N, K, Scatter::sm_pushes, true) {}
  /// The same with `config`'s tiles (its split_k: each tile's K in that many runs, a program
  /// each, their sums pushed as the ranks' are and added by the reduce).
  GemmAr(const Target& target, int64_t M, int64_t N, int64_t K, const GemmConfig& config)
      : GemmRs(target, M, N, K, Scatter::sm_pushes, true, &config) {}
};

/// The collectives' kernel (kernels/collectives.cpp), registered as all_gather, reduce_scatter
/// and all_reduce (f32) and the same with _bf16; launched by Collectives. Another dtype throws
/// Error.
///@{
const KernelDef& all_gather_kernel(ir::DType dtype = ir::DType::f32);
const KernelDef& reduce_scatter_kernel(ir::DType dtype = ir::DType::f32);
const KernelDef& all_reduce_kernel(ir::DType dtype = ir::DType::f32);
///@}

/// All-gather, reduce-scatter and all-reduce of f32 or bf16 (summed in f32, rounded once) over
/// every rank of the world, pushed rank to rank (in chunks, pipelined against the sums), through
/// a symmetric staging area of `capacity_bytes` (larger messages go in pieces). On a GPU target
/// `in` and `out` are device memory of this rank (any: they need not be symmetric), on the host
/// target host memory; `in` and `out` are apart or in place as NCCL's are (all_reduce: in ==
/// out; reduce_scatter: out == in + rank * count; all_gather: in == out + rank * count), any
/// other overlap throws. Construction is collective, and so is every call: the same calls, in
/// the same order, on every rank. A call given a stream is queued on it and returns at once
/// (AgGemm says how streams behave); without one it returns when its result is in `out`.
class Collectives {
 public:
  /// Allocates the staging area (`capacity_bytes`, in two halves of a row per rank: a row is the
  /// most one launch moves per rank) and signal words in the symmetric heap, and compiles the f32
  /// kernels (bf16's at their first use).
  explicit Collectives(const Target& target = Target::default_target(), size_t capacity_bytes = size_t(64) << 20);
  ~Collectives();
  /// out[r * count + i] = in_r[i].
  void all_gather(const float* in, float* out, size_t count, const runtime::Stream* stream = nullptr);
  /// out[i] = sum over ranks r of in_r[rank * count + i] (in holds ranks * count).
  void reduce_scatter(const float* in, float* out, size_t count, const runtime::Stream* stream = nullptr);
  /// How all_reduce moves the data: one shot (every rank sends all of its input to every other
  /// and sums everything itself) or two (reduce-scatter, then all-gather of the sums: each
  /// rank sends 2 (n - 1) / n of its input instead of n - 1 times it); `automatic` takes two
  /// from kTwoShotBytes on where there are more than two ranks (on two, both send as much, and
  /// two shots measured slower: bench/RESULTS.md).
  enum class AllReduce { automatic, one_shot, two_shot };
  /// AllReduce::automatic's threshold: messages of at least this many bytes take two shots.
  static constexpr size_t kTwoShotBytes = size_t(4) << 20;
  /// out[i] = sum over ranks r of in_r[i]. Every rank gets the same bits. Without `algorithm`:
  /// AllReduce::automatic.
  ///@{
  void all_reduce(const float* in, float* out, size_t count, AllReduce algorithm = AllReduce::automatic,
                  const runtime::Stream* stream = nullptr);
  void all_reduce(const float* in, float* out, size_t count, const runtime::Stream* stream) {
    all_reduce(in, out, count, AllReduce::automatic, stream);
  }
  ///@}
  /// The same for bf16: all_gather, reduce_scatter and all_reduce (sums taken in f32 and rounded
  /// once).
  ///@{
  void all_gather(const bf16* in, bf16* out, size_t count, const runtime::Stream* stream = nullptr);
  void reduce_scatter(const bf16* in, bf16* out, size_t count, const runtime::Stream* stream = nullptr);
  void all_reduce(const bf16* in, bf16* out, size_t count, AllReduce algorithm = AllReduce::automatic,
                  const runtime::Stream* stream = nullptr);
  void all_reduce(const bf16* in, bf16* out, size_t count, const runtime::Stream* stream) {
    all_reduce(in, out, count, AllReduce::automatic, stream);
  }
  ///@}
  /// The ranks of the world (of the target).
  int ranks() const;

 private:
  struct State;
  template <class T>
  void run(bool reduce, const T* in, T* out, size_t count, size_t in_stride, size_t out_stride,
           const runtime::Stream* stream, bool in_place = false);
  template <class T>
  void all_gather_of(const T* in, T* out, size_t count, const runtime::Stream* stream);
  template <class T>
  void reduce_scatter_of(const T* in, T* out, size_t count, const runtime::Stream* stream);
  template <class T>
  void all_reduce_checked(const T* in, T* out, size_t count, AllReduce algorithm, const runtime::Stream* stream);
  template <class T>
  void all_reduce_of(const T* in, T* out, size_t count, AllReduce algorithm, bool in_place,
                     const runtime::Stream* stream);
  std::shared_ptr<State> s_;
};

/// Launches a graph of the library's runs (runtime/graph.h, captured as the Graphs paragraph
/// above says) on `stream`, ordered as one run after the last communicating run of this rank.
void launch_graph(const runtime::Graph& graph, const runtime::Stream& stream);

}  // namespace tiledist::kernels

// The kernel families with headers of their own.
#include "kernels/attention.h"     // IWYU pragma: export
#include "kernels/ep.h"            // IWYU pragma: export
#include "kernels/grouped_gemm.h"  // IWYU pragma: export
#include "kernels/moe.h"           // IWYU pragma: export
