// Targets: what each arch's hardware has (Target::has), the one table the kernel library and the
// tools ask instead of comparing arch names, and the names parse() takes.
#include "jit/target.h"

#include <gtest/gtest.h>

#include "support/matrix_instrs.h"

namespace tiledist {
namespace {

TEST(Target, CapabilitiesFollowTheArch) {
  const Target sm80 = Target::parse("sm_80"), sm90a = Target::parse("sm_90a");
  const Target gfx942 = Target::parse("gfx942"), gfx90a = Target::parse("gfx90a"), host = Target::host();
  EXPECT_TRUE(sm80.has(Cap::mma_sync));
  EXPECT_FALSE(sm80.has(Cap::wgmma));
  EXPECT_FALSE(sm80.has(Cap::tma));
  EXPECT_TRUE(sm90a.has(Cap::mma_sync));
  EXPECT_TRUE(sm90a.has(Cap::wgmma));
  EXPECT_TRUE(sm90a.has(Cap::tma));
  EXPECT_FALSE(sm90a.has(Cap::mfma));
  for (const Target& t : {gfx942, gfx90a}) {
    EXPECT_TRUE(t.has(Cap::mfma)) << t.name();
    EXPECT_FALSE(t.has(Cap::mma_sync) || t.has(Cap::wgmma) || t.has(Cap::tma)) << t.name();
  }
  for (Cap c : {Cap::mma_sync, Cap::wgmma, Cap::tma, Cap::mfma}) EXPECT_FALSE(host.has(c));
}

// The matrix instructions each arch's units run (support/matrix_instrs.h), the preferred first:
// the shapes the GPU passes tile accumulators by and the library's GEMM sizes its tiles from.
TEST(Target, MatrixInstructionsPerArch) {
  const std::vector<MatrixInstr>& hopper = matrix_instrs("sm_90a");
  ASSERT_EQ(hopper.size(), 2u);
  EXPECT_EQ(hopper[0].unit, MatrixUnit::wgmma);  // m64n8..256, a warpgroup, 32 bytes of K, f8 too
  EXPECT_EQ(hopper[0].threads, 128);
  EXPECT_EQ(hopper[0].m, 64);
  EXPECT_EQ(hopper[0].n, 256);
  EXPECT_EQ(hopper[0].n_step, 8);
  EXPECT_EQ(hopper[0].k_bytes, 32);
  EXPECT_TRUE(hopper[0].f8);
  EXPECT_EQ(hopper[1].unit, MatrixUnit::mma_sync);  // m16n8, a warp (sm_89's f8 form too)
  EXPECT_EQ(hopper[1].m * 100 + hopper[1].n, 1608);
  EXPECT_FALSE(matrix_instr("sm_80", MatrixUnit::mma_sync)->f8);
  EXPECT_TRUE(matrix_instr("sm_89", MatrixUnit::mma_sync)->f8);
  EXPECT_EQ(matrix_instr("sm_90", MatrixUnit::wgmma), nullptr);
  for (const char* amd : {"gfx90a", "gfx942"}) {  // MFMA 32x32 (K 16 bytes), then 16x16 (K 32)
    const std::vector<MatrixInstr>& m = matrix_instrs(amd);
    ASSERT_EQ(m.size(), 2u) << amd;
    EXPECT_EQ(m[0].m * 1000 + m[0].k_bytes, 32016) << amd;
    EXPECT_EQ(m[1].m * 1000 + m[1].k_bytes, 16032) << amd;
    EXPECT_EQ(m[0].threads, 64) << amd;
    EXPECT_EQ(m[0].f8, std::string(amd) == "gfx942");
  }
  EXPECT_TRUE(matrix_instrs("sm_75").empty());
  // Target::has reads the same table
  for (const char* arch : {"sm_80", "sm_90", "sm_90a", "gfx90a", "gfx942"}) {
    const Target t = Target::parse(arch);
    EXPECT_EQ(t.has(Cap::wgmma), matrix_instr(arch, MatrixUnit::wgmma) != nullptr) << arch;
    EXPECT_EQ(t.has(Cap::mma_sync), matrix_instr(arch, MatrixUnit::mma_sync) != nullptr) << arch;
    EXPECT_EQ(t.has(Cap::mfma), matrix_instr(arch, MatrixUnit::mfma) != nullptr) << arch;
  }
}

}  // namespace
}  // namespace tiledist
