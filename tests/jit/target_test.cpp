// Targets: what each arch's hardware has (Target::has), the one table the kernel library and the
// tools ask instead of comparing arch names, and the names parse() takes.
#include "jit/target.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tiledist
