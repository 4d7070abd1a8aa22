// The GPU pass pipeline: one list, run top to bottom, verified after every pass; and the table
// of target facts the passes read.
#include "codegen/passes/passes.h"
#include "ir/builder.h"
#include "ir/passes/passes.h"

namespace tiledist::codegen {

GpuPassContext GpuPassContext::for_arch(const std::string& arch, int num_warps, int num_stages,
                                        const std::string& lowering) {
  if (std::optional<GpuPassContext> c = find(arch, num_warps, num_stages, lowering)) return *c;
  throw Error(
      str_cat("tiledist: the GPU passes know sm_80, sm_89, sm_90, sm_90a, gfx90a and gfx942, not '", arch, "'"));
}

std::optional<GpuPassContext> GpuPassContext::find(const std::string& arch, int num_warps, int num_stages,
                                                   const std::string& lowering) {
  struct Facts {
    const char* arch;
    int warp_size;
    bool mma_sync, wgmma, mfma, mma_f8;
  };
  static const Facts table[] = {
      {"sm_80", 32, true, false, false, false},
      {"sm_89", 32, true, false, false, true},   // (mma.sync takes f8: Hopper's form where wgmma's is refused)
      {"sm_90", 32, true, false, false, false},  // (Hopper without wgmma: sm_80's form, PTX 8.0, f8 dots on FMAs)
      {"sm_90a", 32, true, true, false, true},
      {"gfx90a", 64, false, false, true, false},  // (no f8 MFMA: f8 dots on FMAs)
      {"gfx942", 64, false, false, true, true},
  };
  for (const Facts& f : table)
    if (arch == f.arch) {
      GpuPassContext c;
      c.arch = arch, c.num_warps = num_warps, c.num_stages = num_stages, c.warp_size = f.warp_size;
      c.mma_sync = f.mma_sync, c.wgmma = f.wgmma, c.mfma = f.mfma, c.mma_f8 = f.mma_f8;
      c.prefetch_dots = lowering == "gpu_ir_prefetch";
      c.tma = f.wgmma && (lowering == "gpu_ir_tma" || lowering == "gpu_ir_ws");
      c.warp_specialize = c.tma && lowering == "gpu_ir_ws";
      return c;
    }
  return std::nullopt;
}

const std::vector<GpuPass>& gpu_pipeline() {
  static const std::vector<GpuPass> passes = {
      {"layout_assignment", layout_assignment},      // every tensor gets a layout; conversions become ops
      {"pipelining", pipelining},                    // dot operands' loads issued stages ahead, into shared memory
      {"dot_prefetch", dot_prefetch},                // a dot feeding another issued an iteration ahead (wgmma)
      {"warp_specialization", warp_specialization},  // a producer warpgroup issuing the TMA copies
  };
  return passes;
}

const GpuPass* find_gpu_pass(const std::string& name) {
  for (const GpuPass& p : gpu_pipeline())
    if (name == p.name) return &p;
  return nullptr;
}

void run_gpu_passes(ir::Function& f, const GpuPassContext& ctx) {
  for (const GpuPass& p : gpu_pipeline()) {
    p.run(f, ctx);
    ir::verify(f);
    ir::print_if_asked(f, p.name);
  }
}

}  // namespace tiledist::codegen
