// MoE grouped GEMM: the rows of A sorted by expert, each row multiplied by its expert's
// weights, as torch._grouped_mm(a, w, offs=offs) computes it, written the way a Triton user
// writes it (vLLM's fused_moe, Triton's grouped GEMM tutorial): each program loads its tile's
// expert and rows from a table at run time and offsets the weight pointer by the expert. The
// compiler has no path of its own for it.
//
// What the GPU compiler makes of it today (tiledist-compile ... --target sm_90a --emit asm,
// tested by GroupedGemm.Sm90aCode): through the GPU passes, the library's bf16 config warp
// specialized (grouped_gemm_config): both operands copied by TMA (W [E, K, N] a 3-D map, the
// expert a coordinate) by a producer warpgroup that recomputes the tile's table entry, wgmma
// in the consumers. Without that option, and the f8 blockwise form (its scaled product of
// each K block too): wgmma fed by TMA copies that the math warps issue; the f8 blockwise
// configuration warp specialized too. On sm_80
// bf16 in both layouts: the cp.async + ldmatrix + mma.sync pipeline.
#pragma once

#include <span>
#include <vector>

#include "kernels/kernels.h"

namespace tiledist::kernels {

/// Builds the tile table of a grouped GEMM on the device, from `offs` (int32, E entries: the
/// cumulative end row of each expert, as torch._grouped_mm takes them): each expert's rows are
/// cut into BM-row tiles (as vLLM's moe_align_block_size pads them), tiles numbered expert by
/// expert. tiles[0] = the number of tiles, then per tile t: tiles[1 + 3t] = its expert,
/// tiles[2 + 3t] = its first row, tiles[3 + 3t] = one past its last row; slots past the count
/// hold (0, 0, 0), an empty tile. Parameters: offs, tiles, E, rows (of A), slots (the table's
/// capacity: cdiv(rows, BM) + E); constants BM, TB (slots per program), EB (experts per loop
/// step). Launch over cdiv(slots, TB) programs. Offsets are clamped into [0, rows], so that
/// bad ones (decreasing, past the rows) never make a table that reads or writes out of bounds
/// (the host class checks offsets it can read: GroupedGemm::Offsets). Registered as
/// grouped_gemm_tiles.
const KernelDef& grouped_gemm_tiles_kernel();

/// C[rows, N] (bf16) = A[rows, K] @ W[e(row)], A and W bf16, f32 accumulation, over the table
/// above. TRANS_W = 1 (the layout of the fast path): W is [E, N, K], an nn.Linear weight per
/// expert (torch._grouped_mm is given w.transpose(-2, -1)); TRANS_W = 0: W is [E, K, N]
/// (what torch._grouped_mm's mat_b is when contiguous). Parameters: a, w, c, tiles, M (rows of
/// A), N, K, w_rows (E * N, or E * K where TRANS_W = 0: W seen as one 2-D tensor); constants
/// BM (the table's), BN, BK, GROUP_M, TRANS_W, PERSISTENT. Launch over {slots, cdiv(N, BN)},
/// or with PERSISTENT=1 over any number of programs {P} that walk the table's tiles. Rows of C
/// past the last offset are not written. Registered as grouped_gemm.
const KernelDef& grouped_gemm_kernel();

/// The same in f8e4m3 with W [E, N, K] and scales, f32 accumulation, C in bf16:
/// rowwise: C[r, n] = (A[r, :] . W[e][n, :]) * scale_a[r] * scale_w[e * N + n] (scale_a one
///   f32 per row of A, scale_w one per expert and column: [E, N]); registered as
///   grouped_gemm_fp8_rowwise;
/// blockwise (DeepSeek-V3): A's scale per row and 128-wide block of K (scale_a [rows, KB],
///   KB = cdiv(K, 128)), W's per 128 x 128 block of each expert (scale_w [E, cdiv(N, 128), KB]);
///   each K block's partial dot is scaled into the accumulator (BK must be 128); registered as
///   grouped_gemm_fp8_blockwise.
/// Parameters: a, w, c, scale_a, scale_w, tiles, M, N, K, w_rows (E * N); constants as above
/// without TRANS_W.
const KernelDef& grouped_gemm_fp8_kernel(bool blockwise);

/// Tiles and options for a grouped GEMM of `rows` rows over E experts (bm is the table's BM):
/// on sm_90a 128 x 256 tiles (64-row ones where experts average fewer than 128 rows; 128
/// columns for f8), wgmma over 4 stages, a program per tile.
GemmConfig grouped_gemm_config(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t E, ir::DType dtype,
                               bool blockwise = false);

/// C[offs[e-1]:offs[e], :] = A[offs[e-1]:offs[e], :] @ W[e] for every expert e (offs[-1] = 0),
/// as torch._grouped_mm(a, w, offs=offs) (bf16) or torch._scaled_grouped_mm (f8e4m3, with
/// the scales above) computes it: C (bf16) rows past offs[E-1] are left as they were. A is
/// row-major [rows, K]; W [E, N, K] (Layout::nk, the only one for f8) or [E, K, N]
/// (Layout::kn). Each run builds the tile table on the device from offs (grouped_gemm_tiles;
/// no host round trip), then runs the GEMM, both on the given stream (as Gemm::run: without a
/// stream it returns when done). A, W, C and the scales are device memory on a GPU target,
/// host memory on the host. Runs of one object are ordered (they share its table).
class GroupedGemm {
 public:
  /// W's layout: [E, N, K] (nk: an nn.Linear weight per expert) or [E, K, N] (kn: bf16 only).
  enum class Layout { nk, kn };
  /// The f8e4m3 forms' scales (grouped_gemm_fp8_kernel): none for bf16 operands.
  enum class Scaling { none, rowwise, blockwise };
  /// The offsets: device memory on a GPU target (not read by the host: the table kernel clamps
  /// bad ones, see grouped_gemm_tiles_kernel), or host memory (std::vector, std::span), which
  /// a run checks (E entries, none negative, none decreasing, none past the rows) and copies
  /// to the device. On the host target both are host memory and always checked.
  struct Offsets {
    /// E offsets in the target's memory (device memory on a GPU target: not checked).
    Offsets(const int32_t* p) : pointer(p) {}
    /// E offsets in host memory (viewed, not copied: they must live through the run call).
    Offsets(std::span<const int32_t> h) : host(h), on_host(true) {}
    /// The same from a vector.
    Offsets(const std::vector<int32_t>& h) : host(h), on_host(true) {}
    const int32_t* pointer = nullptr;  ///< the offsets in the target's memory, unless on_host
    std::span<const int32_t> host;     ///< the offsets in host memory, where on_host
    bool on_host = false;              ///< whether `host` holds them
  };
  /// A tile table built elsewhere, on the device on a GPU target (EpLowLatencyDispatch's, whose
  /// rows of an expert come in runs with gaps between them): tiles[0] the count, then per tile
  /// its expert, first row and end row; `slots` entries; no tile longer than `block_rows`, at
  /// most the GEMM's row tile (config().bm). Rows of C that no tile covers are left as they were.
  struct Table {
    const int32_t* tiles = nullptr;  ///< [1 + 3 * slots] int32: the count, then the tiles
    int64_t slots = 0;               ///< the table's capacity in tiles (the grid's rows)
    int block_rows = 0;              ///< no tile longer: 1 to config().bm
  };
  /// A of `rows` rows ([rows, K]), W of `experts` experts, C [rows, N]: dtype bf16 (scaling
  /// none) or f8e4m3 (rowwise or blockwise, layout nk); tiles as grouped_gemm_config picks.
  /// Throws Error for other forms, or for A, W or C of 2^31 elements or more.
  GroupedGemm(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t experts,
              ir::DType dtype = ir::DType::bf16, Scaling scaling = Scaling::none, Layout layout = Layout::nk);
  /// The same with the caller's tiles and options (its constants' BM, BN and PERSISTENT those
  /// of config.bm, config.bn and config.programs; else Error).
  GroupedGemm(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t experts, ir::DType dtype,
              Scaling scaling, Layout layout, const GemmConfig& config);
  ~GroupedGemm();
  /// bf16 A, W and C (a GroupedGemm made for bf16).
  void run(const bf16* a, const bf16* w, bf16* c, Offsets offs, const runtime::Stream* stream = nullptr);
  /// f8e4m3 A and W with their scales (as the Scaling it was made with: grouped_gemm_fp8_kernel).
  void run(const f8e4m3* a, const f8e4m3* w, bf16* c, const float* scale_a, const float* scale_w, Offsets offs,
           const runtime::Stream* stream = nullptr);
  /// The same over a table of tiles built elsewhere (Table).
  void run(const bf16* a, const bf16* w, bf16* c, const Table& table, const runtime::Stream* stream = nullptr);
  /// The f8e4m3 form over a table of tiles built elsewhere (Table).
  void run(const f8e4m3* a, const f8e4m3* w, bf16* c, const float* scale_a, const float* scale_w, const Table& table,
           const runtime::Stream* stream = nullptr);
  /// The GEMM's tiles and options.
  const GemmConfig& config() const;
  /// The tile table's capacity: cdiv(rows, BM) + E.
  int64_t slots() const;
  /// After a run with offsets on the host target, its table (for tests: tiles()[0] is the
  /// count); empty on a GPU target.
  std::vector<int32_t> tiles() const;

  /// Throws Error unless `offs` are E cumulative row ends within [0, rows], not decreasing.
  static void check_offsets(std::span<const int32_t> offs, int64_t rows, int64_t experts);

 private:
  struct State;
  void launch(const void* a, const void* w, bf16* c, const float* scale_a, const float* scale_w, Offsets offs,
              const runtime::Stream* stream, const Table* table = nullptr);
  void check_dtype(ir::DType given) const;
  std::shared_ptr<State> s_;
};

}  // namespace tiledist::kernels
