// The GPU passes over every kernel of the library, for every GPU architecture: the result
// verifies (every tensor has a layout that fits its shape, every op's operands agree), prints
// and parses back, and every dot that a matrix unit can take (a tile for every warp) gets its
// accumulator layout.
#include <gtest/gtest.h>

#include "codegen/passes/passes.h"
#include "ir/layout.h"
#include "ir/passes/passes.h"
#include "ir/printer.h"
#include "kernels/kernels.h"

namespace tiledist::codegen {
namespace {

TEST(LayoutAssignment, EveryLibraryKernelOnEveryGpuArch) {
  for (const char* arch : {"sm_80", "sm_90a", "gfx90a", "gfx942"})
    for (int warps : {4, 8})
      for (const std::string& name : Registry::global().names()) {
        SCOPED_TRACE(name + " on " + std::string(arch) + ", " + std::to_string(warps) + " warps");
        auto f = Registry::global().find(name)->trace({});
        ir::optimize(*f);
        ASSERT_NO_THROW(run_gpu_passes(*f, GpuPassContext::for_arch(arch, warps)));
        ASSERT_NO_THROW(ir::verify(*f));
        int untyped = 0;
        f->walk([&](const ir::Op& op) {
          for (auto& r : op.results) untyped += r->type.is_tensor() && !r->type.layout;
          for (auto& region : op.regions)
            for (auto& a : region->args) untyped += a->type.is_tensor() && !a->type.layout;
          if (op.code != ir::OpCode::Dot) return;
          ir::DType d = op.operands[0]->type.dtype;
          // The library's 16-bit dots all fit a matrix unit, where the result holds a tile of the
          // smallest instruction for every warp (16 x 8 on NVIDIA, 16 x 16 on AMD): flash
          // decoding's [16, 64] on 8 AMD wavefronts has 4 and takes a blocked layout (a known limit:
          // no layout gives two wavefronts one tile).
          const auto& shape = op.results[0]->type.shape;
          const int64_t unit = std::string(arch).rfind("gfx", 0) == 0 ? 16 * 16 : 16 * 8;
          if ((d == ir::DType::bf16 || d == ir::DType::f16) && shape[0] * shape[1] >= unit * warps) {
            EXPECT_EQ(op.results[0]->type.layout->kind, ir::Layout::Kind::mma) << ir::print(*f);
          }
        });
        EXPECT_EQ(untyped, 0);
        std::string once = ir::print(*f);
        EXPECT_EQ(once, ir::print(*ir::parse_function(once, name)));
      }
}

TEST(LayoutAssignment, NeedsAGpuArchItKnows) {
  try {
    GpuPassContext::for_arch("sm_75", 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("know sm_80, sm_89, sm_90, sm_90a, gfx90a and gfx942, not 'sm_75'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tiledist::codegen
