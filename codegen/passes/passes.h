// Passes over the tile IR for GPU targets, after the target-independent optimizer
// (ir/passes/) and before the lowering: they make the lowering's decisions explicit in the IR,
// as Triton's TritonGPU passes do. Each pass is one file here, tested IR-in/IR-out by a
// FileCheck test under tests/codegen/passes/; `gpu_pipeline()` lists them in order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace tiledist::codegen {

/// What the GPU passes know of the target: its facts, not its instructions (those are the
/// lowering's). `for_arch` holds the table of the architectures tiledist compiles for.
struct GpuPassContext {
  std::string arch = "sm_90a";
  int num_warps = 4;
  int warp_size = 32;
  bool mma_sync = false;  // NVIDIA tensor cores through mma.sync (sm_80 and later)
  bool wgmma = false;     // Hopper's warpgroup MMA (sm_90a)
  bool mfma = false;      // AMD matrix cores (gfx90a, gfx942)
  bool mma_f8 = false;    // the matrix units take f8 operands
  int num_stages = 3;     // tiles in flight in a pipelined loop
  /// dot_prefetch runs (CompileOptions::lowering "gpu_ir_prefetch"; a pass named to
  /// tiledist-opt always runs). Off by default: on one H100 it gave attention 0.49 of SDPA
  /// at D = 128 where the plain wgmma form gives 0.47, but 0.50 at D = 64 against 0.58
  /// (bench/RESULTS.md, 2026-11-25).
  bool prefetch_dots = false;
  /// pipelining copies by TMA where it can (sm_90a): by default (for_compile), or with warp
  /// specialization, or where CompileOptions::lowering is "gpu_ir_tma". Issued by the math
  /// warps it was slower than cp.async (attention 0.51 of SDPA against 0.60 on an H200,
  /// 2026-11-26) until each slot was released a dot late; since, the same day: a GEMM at
  /// 128x256x64 636 TFLOP/s against cp.async's 498 (the since-deleted matched-loop lowering 638, cuBLAS 645),
  /// attention D = 128 456 against 437, D = 64 362 against 369.
  bool tma = false;
  /// warp_specialization runs (CompileOptions::warp_specialize, as the library asks for
  /// attention at D = 128 and the bf16 grouped GEMM on Hopper, or lowering "gpu_ir_ws" for every
  /// kernel; a loop's tl::for_range warp_specialize hint asks for its own). TMA with it.
  bool warp_specialize = false;

  /// sm_80, sm_89, sm_90, sm_90a, gfx90a, gfx942; throws Error naming the known ones otherwise. `lowering`
  /// (CompileOptions::lowering) asks for the passes that are off by default.
  static GpuPassContext for_arch(const std::string& arch, int num_warps, int num_stages = 3,
                                 const std::string& lowering = "");
  /// The same, or nothing where the table does not know `arch`.
  static std::optional<GpuPassContext> find(const std::string& arch, int num_warps, int num_stages = 3,
                                            const std::string& lowering = "");
  /// The passes a GPU compile runs (the GPU IR lowering, and `--emit gpu-ir` as it shows them):
  /// `for_arch`'s, and what the options ask for: warp specialization (`ws`: CompileOptions::
  /// warp_specialize, on a wgmma target where TMA is on) with the TMA copies it needs; and by
  /// default (`lowering` empty) the pipelines copy by TMA where they can, as the other
  /// lowering's did, unless `tma_on` is off (CompileOptions::tma, $TILEDIST_TMA=0).
  static GpuPassContext for_compile(const std::string& arch, int num_warps, int num_stages, const std::string& lowering,
                                    bool tma_on, bool ws) {
    GpuPassContext c = for_arch(arch, num_warps, num_stages, lowering);
    if (lowering.empty()) c.tma = c.wgmma && tma_on;
    c.warp_specialize |= c.wgmma && ws && tma_on;
    c.tma |= c.warp_specialize;
    return c;
  }
};

/// Layout assignment: gives every block tensor a layout (ir/layout.h) and makes each change of
/// layout an explicit convert_layout.
/// - Anchors: a dot's result takes the MMA accumulator layout of the target's matrix unit
///   (wgmma where each warp can hold 16 of its rows, mma.sync, MFMA) and its operands that
///   unit's operand layouts (wgmma reads B, and an A loaded from memory, from shared memory); a
///   load takes a blocked layout whose threads each hold as many contiguous elements as its
///   address allows 16-byte accesses for.
/// - Propagation forward: elementwise work and reductions keep their operands' layout,
///   preferring an accumulator's (an online softmax stays in the MMA layout); a loop-carried
///   value takes the layout its loop yields (the accumulator stays in registers across
///   iterations). A load whose only user works in an MMA layout, and whose addresses can be
///   computed anywhere, loads straight into that layout (an epilogue's bias).
/// - Values made from nothing but constants, ranges and splats are rebuilt in whatever layout
///   each user needs rather than converted.
/// - Backward rematerialization (Triton's RemoveLayoutConversions): a value an op needs in
///   another layout of registers is computed again in it from its operands (elementwise ops,
///   broadcasts, expand_dims, up to 8 ops back) where that moves fewer elements between threads
///   than converting it: a gather's [BM, 1] row addresses are converted before the broadcast,
///   not the [BM, BK] pointer tile after it.
/// - Warps: a dot whose result becomes another dot's A operand (attention's P), or whose A is
///   another dot's result, puts all its warps along M, so that the accumulator is already the
///   next dot's A operand in each thread's registers (FlashAttention-2).
/// Assumes a verified function without layouts; leaves one whose every tensor has a layout.
void layout_assignment(ir::Function& f, const GpuPassContext& ctx);

/// The shared-memory layout of a 2-D tile of `dtype` whose dimension order[0] is contiguous:
/// 16-byte chunks XOR-swizzled over up to 8 rows (128 bytes of rows per phase), so that 8
/// consecutive rows read at one chunk hit 8 different banks.
ir::LayoutRef swizzled_shared(ir::DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& order);

/// The shared layout of a wgmma operand tile: where its rows hold 128 bytes or more, 16-byte
/// chunks swizzled over 8 rows of 128 bytes, rows longer than that cut into 128-byte column
/// blocks (the atoms of wgmma's 128-byte swizzle: each block's rows 128 bytes apart); shorter
/// rows as swizzled_shared.
ir::LayoutRef wgmma_shared(ir::DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& order);

/// Dot prefetch (sm_90a, where ctx.prefetch_dots asks for it), after pipelining: in a loop whose
/// body starts with the pipeline's `async_wait {pending = S - 2}` over rings of S >= 3 tiles, the
/// first wgmma dot whose operands are values the same in every iteration and ring tiles at the
/// carried tile index t, and whose result reaches another dot of the body, is issued one
/// iteration ahead: the first iteration's before the loop (from tile 0, once it has landed),
/// each next one where the dot was, from tile (t + 1) % S (the loop now waits for it too:
/// `pending = S - 3`), carried. The lowering issues wgmma without waiting for it, so the dot runs
/// while the rest of the iteration works on the one before (attention's softmax beside the next
/// QK^T: FlashAttention-3's overlap within a warpgroup). The same arithmetic in the same order.
void dot_prefetch(ir::Function& f, const GpuPassContext& ctx);

/// Software pipelining: in a for loop of constant positive step, each load whose address and
/// mask depend only on the induction variable, on values from outside the loop and on values
/// the loop carries and advances by a step from outside it (`a_ptrs += BK`), and whose
/// value becomes a dot operand (its one use a convert_layout to a dot operand or shared layout,
/// directly or through a trans), is issued `num_stages - 1` iterations ahead: an async_copy into
/// a ring of num_stages tiles of shared memory (local_alloc), the first ones before the loop,
/// one group per iteration (async_commit); where it was loaded, the loop waits for its tile
/// (async_wait) and reads it in the layout its dot takes (local_load). Copies past the loop's
/// end are masked off. Loops that store, use atomics, copy, fence, wait or meet a barrier are
/// left alone (a load moved ahead of those could read stale data), as are address computations
/// that divide by anything but a nonzero constant, a float or max(x, c > 0) (run for an
/// iteration that may not exist).
/// An inner loop's trailing wait also waits for an outer pipelined loop's copies (correct, not
/// faster). Copies are cp.async, or on sm_90a where ctx.tma (or the loop's warp_specialize
/// hint) asks and every candidate's tile is a box of a tensor map (tensor_map.h), TMA copies
/// onto a ring of full and empty mbarriers (a count carried; one thread issues, waiting for the
/// slot's empty phase); a TMA copy of a load whose pointer went through consume_token takes
/// the token on its first coordinate (consume_token), so that it follows the wait as the load
/// did. num_stages < 2: nothing. A loop the kernel marks streaming (tl::LoopHints::num_stages,
/// the attribute `num_stages`: its stages, whatever ctx says) may store (its loads pass its
/// stores, as the kernel says they may; it may not use atomics, copy, fence, wait or meet a
/// barrier), and every 2-D load of it whose addresses are known ahead is pipelined, whatever it
/// feeds: copied by cp.async into a plainly swizzled ring and read back in the layout it was
/// loaded in (`own` where no element is held by two threads: each thread reads only what it
/// copied, so the wait needs no barrier). Assumes layout_assignment ran.
void pipelining(ir::Function& f, const GpuPassContext& ctx);

/// Warp specialization (sm_90a, where ctx.warp_specialize asks for it), after pipelining: where
/// every TMA ring of the kernel (pipelining's full/empty mbarriers) belongs to a loop that sits
/// in ifs and loops of the kernel (no if inside a loop around it), and what those loops' bounds
/// and copies need is computed from the parameters and the loops' induction variables by scalar
/// ops (loads of scalars included) before any write to memory, the kernel becomes one
/// `warp_specialize`: a producer warpgroup of its own, one thread of which runs each loop's
/// range again issuing its copies (waiting for each slot to be emptied), and the program's warps
/// as consumers running the kernel as it was, without the copies. The producer takes the same
/// branches and runs the same iterations of the loops around (a persistent kernel's tile loop:
/// the next tile's copies under this one's epilogue; stores and atomics there may precede
/// them, not fences or barriers). A wait on the way whose token a copy takes (ag_gemm's: the
/// load's consume_token, kept on the copy's coordinate by pipelining) or that nothing reads
/// the producer runs too, before the copies after it, where its compare stays true once true
/// (ge, gt); a wait whose token only the consumers read orders their loads. The rings' buffers and barriers move to the
/// kernel's start (made by every thread), their counts carried by the loops around; a ring whose loop follows another's
/// in its block with the same tiles shares that ring, its count going on (one ring's shared memory for attention's two
/// loops). Where the body's dots read the tiles, the consumers release each slot an iteration late (`arrive_barrier
/// {pending = 1}` after the next iteration's dots; the last after the loop), so that one dot runs while the next
/// issues. With 8 consumer warps the producer gives registers to them (`producer_regs` 40, `consumer_regs` 232). Asked
/// for by ctx.warp_specialize or a ring loop's warp_specialize hint.
void warp_specialization(ir::Function& f, const GpuPassContext& ctx);

struct GpuPass {
  const char* name;
  void (*run)(ir::Function&, const GpuPassContext&);
};

/// The GPU passes, in order.
const std::vector<GpuPass>& gpu_pipeline();
/// Looks a GPU pass up by name; null if there is none.
const GpuPass* find_gpu_pass(const std::string& name);
/// Runs the GPU pipeline, verifying after each pass; prints the IR to stderr after the passes
/// named in $TILEDIST_PRINT_AFTER (as ir::optimize does).
void run_gpu_passes(ir::Function& f, const GpuPassContext& ctx);

}  // namespace tiledist::codegen
