// The AMD GPU path as far as a machine without one checks it: code objects of every arch we
// target carry that arch and load only on a GPU of it; the HIP runtime says why it cannot run
// (no AMD GPU here) and every call then fails with that reason, a kernel launch included; the
// cache keeps code objects as it keeps other binaries. Where an AMD GPU is found, kernels run
// against the CPU backend's results.
#include "runtime/hip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "tests/jit/error_of.h"
#include "tests/jit/temp_dir.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using test_util::error_of;

std::string code_object(const KernelDef& def, const std::string& arch, const Constants& constants = {}) {
  return jit::Context::global().emit(def, constants, Target::amdgcn(arch), CompileOptions{}, jit::Stage::binary);
}

TEST(Hip, ArchOfAGcnArchName) {
  EXPECT_EQ(hip::arch_of("gfx942:sramecc+:xnack-"), "gfx942");
  EXPECT_EQ(hip::arch_of("gfx90a"), "gfx90a");
}

// (add calls no math function: these tests need no device libraries.)
TEST(Hip, CodeObjectsCarryTheirArch) {
  EXPECT_EQ(hip::code_object_arch(code_object(kernels::add_kernel(), "gfx942")), "gfx942");
  EXPECT_EQ(hip::code_object_arch(code_object(kernels::add_kernel(), "gfx90a")), "gfx90a");
}

TEST(Hip, MissingDeviceLibrariesAreNamed) {
  ::setenv("TILEDIST_ROCM_DEVICE_LIBS", "/nonexistent/bitcode", 1);
  std::string e = error_of([] { code_object(kernels::softmax_kernel(), "gfx942"); });
  ::unsetenv("TILEDIST_ROCM_DEVICE_LIBS");
  EXPECT_NE(e.find("kernel 'softmax' calls math functions of the ROCm device libraries"), std::string::npos) << e;
  EXPECT_NE(e.find("/nonexistent/bitcode/ocml.bc cannot be read"), std::string::npos) << e;
  EXPECT_NE(e.find("apt-get install rocm-device-libs"), std::string::npos) << e;
}

TEST(Hip, WhatIsNotACodeObjectIsNamed) {
  EXPECT_NE(error_of([] {
              hip::code_object_arch("not an elf file at all, and long enough to have a header.....");
            }).find("not an ELF file"),
            std::string::npos);
  // The host's object file of the same kernel: an ELF for x86-64 (machine 62).
  std::string host =
      jit::Context::global().emit(kernels::add_kernel(), {}, Target::host(), CompileOptions{}, jit::Stage::binary);
  EXPECT_NE(error_of([&] { hip::code_object_arch(host); }).find("not an AMDGPU code object (ELF machine 62)"),
            std::string::npos);
  // A code object whose arch field we do not target.
  std::string other = code_object(kernels::add_kernel(), "gfx942");
  other[48] = 0x30;  // EF_AMDGPU_MACH of gfx908
  EXPECT_NE(error_of([&] { hip::code_object_arch(other); }).find("does not target (EF_AMDGPU_MACH 0x30)"),
            std::string::npos);
}

TEST(Hip, WithoutAnAmdGpuEveryCallSaysWhy) {
  if (hip::available()) GTEST_SKIP() << "an AMD GPU is here: " << hip::device().name;
  const std::string why = hip::unavailable_reason();
  ASSERT_FALSE(why.empty());
  EXPECT_TRUE(why.find("libamdhip64") != std::string::npos || why.find("no AMD GPU") != std::string::npos) << why;
  for (const std::string& e : {error_of([] { hip::malloc(64); }), error_of([] { runtime::Stream s(hip::api()); }),
                               error_of([] { hip::device(); }), error_of([] { hip::synchronize(); })})
    EXPECT_NE(e.find("the HIP runtime is not usable here: " + why), std::string::npos) << e;
  // A kernel compiled for gfx942 compiles here; its launch needs the GPU and says so.
  Kernel add = compile(kernels::add_kernel(), {{"BLOCK", 256}}, Target::amdgcn("gfx942"));
  std::vector<float> x(256, 1.0f), y(256, 2.0f), out(256);
  std::string e = error_of([&] { add.launch({1}, x, y, out, 256); });
  EXPECT_NE(e.find("the HIP runtime is not usable here"), std::string::npos) << e;
}

TEST(Hip, AWorkgroupHoldsAtMost1024Threads) {
  // 16 wavefronts of 64 fill a workgroup; 32 warps are 1024 threads on NVIDIA, 2048 here.
  CompileOptions o;
  o.num_warps = 32;
  std::string e = error_of(
      [&] { jit::Context::global().emit(kernels::add_kernel(), {}, Target::amdgcn("gfx942"), o, jit::Stage::asm_); });
  EXPECT_NE(e.find("num_warps = 32 makes 2048 threads per program on gfx942"), std::string::npos) << e;
  o.num_warps = 16;
  EXPECT_NE(jit::Context::global()
                .emit(kernels::add_kernel(), {}, Target::amdgcn("gfx942"), o, jit::Stage::asm_)
                .find(".max_flat_workgroup_size: 1024"),
            std::string::npos);
}

TEST(Hip, LibraryObjectsSayTheyDoNotRunThereYet) {
  // The library's communicating objects keep their streams and heaps on CUDA for now.
  std::string e = error_of([] { kernels::Collectives c(Target::amdgcn("gfx942"), 1 << 20); });
  EXPECT_NE(e.find("run on the host and on NVIDIA GPUs, not yet on gfx942"), std::string::npos) << e;
  e = error_of([] { kernels::GemmRs g(Target::amdgcn("gfx90a"), 256, 256, 256); });
  EXPECT_NE(e.find("not yet on gfx90a"), std::string::npos) << e;
}

TEST(Hip, CodeObjectsGoThroughTheCacheLikeOtherBinaries) {
  test_util::TempDir dir;
  jit::Context ctx(dir.path);
  Target gfx = Target::amdgcn("gfx942");
  compile(kernels::add_kernel(), {}, gfx, CompileOptions{}, ctx);
  EXPECT_EQ(ctx.stats().compiles, 1);
  jit::Context again(dir.path);  // a new process: the entry comes from disk
  compile(kernels::add_kernel(), {}, gfx, CompileOptions{}, again);
  EXPECT_EQ(again.stats().compiles, 0);
  EXPECT_EQ(again.stats().disk_hits, 1);
}

TEST(Hip, KernelsRunOnAnAmdGpu) {
  if (!hip::available()) GTEST_SKIP() << "no AMD GPU: " << hip::unavailable_reason();
  const int n = 1 << 16;
  auto xs = ref::random_floats(n), ys = ref::random_floats(n);
  std::vector<float> out(n);
  Kernel add = compile(kernels::add_kernel(), {{"BLOCK", 1024}}, Target::amdgcn(hip::device().arch));
  add.launch({tl::cdiv(n, 1024)}, xs, ys, out, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], xs[i] + ys[i]) << i;
}

}  // namespace
}  // namespace tiledist
