// Passes over the tile IR for GPU targets, after the target-independent optimizer
// (ir/passes/) and before the lowering: they make the lowering's decisions explicit in the IR,
// as Triton's TritonGPU passes do. Each pass is one file here, tested IR-in/IR-out by a
// FileCheck test under tests/codegen/passes/; `gpu_pipeline()` lists them in order.
#pragma once

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

  /// sm_80, sm_90a, gfx90a, gfx942; throws Error naming the known ones otherwise.
  static GpuPassContext for_arch(const std::string& arch, int num_warps);
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
/// - Warps: a dot whose result becomes another dot's A operand (attention's P), or whose A is
///   another dot's result, puts all its warps along M, so that the accumulator is already the
///   next dot's A operand in each thread's registers (FlashAttention-2).
/// Assumes a verified function without layouts; leaves one whose every tensor has a layout.
void layout_assignment(ir::Function& f, const GpuPassContext& ctx);

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
