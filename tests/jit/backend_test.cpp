// Backends: one per kind of target, picked by Backend::for_target, each saying what its binary
// is and whether its kernels run on a GPU, through CUDA, take device memory or specialize at
// launch; the target's cache key as it was; the GPU passes on the host only, through compile
// and emit alike.
#include "jit/backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "error_of.h"
#include "kernels/kernels.h"
#include "runtime/nvshmem.h"
#include "saved_env.h"
#include "temp_dir.h"

namespace tiledist {
namespace {

using jit::Backend;
using jit::BinaryKind;
using test_util::error_of;

TEST(Backend, OnePerKindOfTarget) {
  const Backend& host = Backend::for_target(Target::host());
  const Backend& nvptx = Backend::for_target(Target::parse("sm_80"));
  const Backend& amdgcn = Backend::for_target(Target::parse("gfx942"));
  EXPECT_STREQ(host.name(), "host");
  EXPECT_STREQ(nvptx.name(), "nvptx");
  EXPECT_STREQ(amdgcn.name(), "amdgcn");
  EXPECT_EQ(&Backend::for_target(Target::parse("sm_90a")), &nvptx);
  EXPECT_EQ(&Backend::for_target(Target::parse("gfx90a")), &amdgcn);
  EXPECT_EQ(host.binary_kind(), BinaryKind::object);
  EXPECT_EQ(nvptx.binary_kind(), BinaryKind::ptx);
  EXPECT_EQ(amdgcn.binary_kind(), BinaryKind::code_object);
  EXPECT_FALSE(host.takes_device_memory() || host.specializes_at_launch());
  for (const Backend* gpu : {&nvptx, &amdgcn}) EXPECT_TRUE(gpu->takes_device_memory() && gpu->specializes_at_launch());
}

TEST(Backend, SaysWhereItsKernelsRun) {
  // (what the kernel library and the tools ask of a target in place of its kind)
  EXPECT_FALSE(Target::host().is_gpu());
  EXPECT_FALSE(Target::host().runs_on_cuda());
  for (const char* arch : {"sm_80", "sm_90a"}) {
    EXPECT_TRUE(Target::parse(arch).is_gpu()) << arch;
    EXPECT_TRUE(Target::parse(arch).runs_on_cuda()) << arch;
  }
  for (const char* arch : {"gfx90a", "gfx942"}) {
    EXPECT_TRUE(Target::parse(arch).is_gpu()) << arch;
    EXPECT_FALSE(Target::parse(arch).runs_on_cuda()) << arch;  // (HIP's streams)
  }
}

TEST(Backend, TheSameIrGivesTheSameCodeCompileAfterCompile) {
  // (The host lowering once gave back a kernel's dead scratch buffers in the order of their
  // addresses: their reuse, and so the code, varied from one compile to the next.)
  jit::Context& ctx = jit::Context::global();
  for (const Target& target : {Target::host(), Target::cuda("sm_90a"), Target::amdgcn("gfx942")})
    for (const KernelDef* def : {&kernels::softmax_kernel(), &kernels::gemm_kernel(ir::DType::bf16)}) {
      const std::string first = ctx.emit(*def, {}, target, CompileOptions{}, jit::Stage::asm_);
      for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(ctx.emit(*def, {}, target, CompileOptions{}, jit::Stage::asm_) == first)
            << def->name() << " for " << target.name() << ", compile " << i + 2;
    }
}

TEST(Backend, KeysTheTargetAsBefore) {
  // (cache entries written before the backends keep their keys)
  EXPECT_EQ(Target::parse("sm_90a").key(), "sm_90a");
  EXPECT_EQ(Target::parse("gfx942").key(), "gfx942");
  const Target host = Target::host();
  EXPECT_EQ(host.key().rfind("host-" + host.arch + "+", 0), 0u) << host.key();
}

// The NVSHMEM world (issue 31) is an option of its own in the key (the CUDA world's keys stay as
// they were), set by $TILEDIST_WORLD; another world is an error naming it. A kernel that copies
// to a peer, compiled for it to PTX, needs NVSHMEM's device library: where there is none, the
// error says where it was looked for.
void put_to_next(tl::Ptr<float> data, tl::Ptr<float> src, tl::Int n) {
  auto next = (dist::rank() + 1) % dist::num_ranks();
  shmem::putmem_nbi_block(data, src, n.to(tl::int64) * 4, next);
}
TEST(Backend, TheNvshmemWorldIsAnOptionOfItsOwn) {
  CompileOptions cuda_world, nvshmem_world;
  nvshmem_world.world = "nvshmem";
  EXPECT_EQ(cuda_world.key().find("world"), std::string::npos) << cuda_world.key();
  EXPECT_EQ(nvshmem_world.key(), cuda_world.key() + ",world=nvshmem");
  CompileOptions other;
  other.world = "mpi";
  EXPECT_EQ(test_util::error_of([&] { other.validate(); }),
            "tiledist: world = 'mpi': must be empty (the CUDA world's) or nvshmem");
  {
    const test_util::SavedEnv keep({"TILEDIST_WORLD"}, false);
    setenv("TILEDIST_WORLD", "nvshmem", 1);
    EXPECT_EQ(CompileOptions::from_env().world, "nvshmem");
    unsetenv("TILEDIST_WORLD");
    EXPECT_EQ(CompileOptions::from_env().world, "");
  }

  test_util::TempDir dir;
  jit::Context ctx(dir.path.string());
  const KernelDef def("put_to_next", put_to_next, {"data", "src", "n"});
  const std::string lowered = ctx.emit(def, {}, Target::cuda("sm_90a"), nvshmem_world, jit::Stage::llvm_lowered);
  EXPECT_NE(lowered.find("call void @nvshmemx_putmem_nbi_block("), std::string::npos) << lowered;
  const std::string error =
      test_util::error_of([&] { ctx.emit(def, {}, Target::cuda("sm_90a"), nvshmem_world, jit::Stage::asm_); });
  if (error.empty()) GTEST_SKIP() << "NVSHMEM's device library is installed here: " << nvshmem::device_bitcode();
  EXPECT_NE(error.find("NVSHMEM's device library not found: no libnvshmem_device.bc in"), std::string::npos) << error;
}

TEST(Backend, GpuPassesOnTheHostOnly) {
  test_util::TempDir dir;
  jit::Context ctx(dir.path.string());
  CompileOptions options;
  options.gpu_passes = "sm_80";
  const Constants block{{"BLOCK", 256}};
  const std::string want = "tiledist: CompileOptions::gpu_passes runs the GPU passes' output on the host target only";
  for (const char* gpu : {"sm_80", "gfx942"}) {
    const Target t = Target::parse(gpu);
    EXPECT_EQ(error_of([&] { ctx.compile(kernels::add_kernel(), block, t, options); }), want) << gpu;
    EXPECT_EQ(error_of([&] { ctx.emit(kernels::add_kernel(), block, t, options, jit::Stage::gpu_ir); }), want) << gpu;
  }
  EXPECT_NE(ctx.emit(kernels::add_kernel(), block, Target::host(), options, jit::Stage::gpu_ir).find("#blocked<"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { ctx.emit(kernels::add_kernel(), block, Target::host(), {}, jit::Stage::gpu_ir); }),
            "tiledist: the GPU IR (layouts) needs a GPU target (sm_80, sm_90a, gfx90a, gfx942)");
}

}  // namespace
}  // namespace tiledist
