// The GPU pass pipeline: one list, run top to bottom, verified after every pass; and the table
// of target facts the passes read.
#include "codegen/passes/passes.h"
#include "ir/builder.h"
#include "ir/passes/passes.h"
#include "support/matrix_instrs.h"

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
  };
  // (the matrix units, and whether they take f8 operands, from the arch's matrix instructions:
  // sm_89 is Hopper's form where wgmma's is refused (mma.sync takes f8); sm_90 Hopper without
  // wgmma, sm_80's form (PTX 8.0, f8 dots on FMAs); gfx90a has no f8 MFMA (f8 dots on FMAs))
  static const Facts table[] = {{"sm_80", 32},  {"sm_89", 32},  {"sm_90", 32},
                                {"sm_90a", 32}, {"gfx90a", 64}, {"gfx942", 64}};
  for (const Facts& f : table)
    if (arch == f.arch) {
      GpuPassContext c;
      c.arch = arch, c.num_warps = num_warps, c.num_stages = num_stages, c.warp_size = f.warp_size;
      for (const MatrixInstr& i : matrix_instrs(arch)) {
        c.mma_sync |= i.unit == MatrixUnit::mma_sync;
        c.wgmma |= i.unit == MatrixUnit::wgmma;
        c.mfma |= i.unit == MatrixUnit::mfma;
        c.mma_f8 |= i.f8;
      }
      c.prefetch_dots = lowering == "gpu_ir_prefetch";
      c.tma = c.wgmma && (lowering == "gpu_ir_tma" || lowering == "gpu_ir_ws");
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
