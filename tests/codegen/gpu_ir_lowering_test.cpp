// The GPU IR lowering (codegen/gpu_ir/, CompileOptions::lowering), on the CPU: which kernels it
// takes and what it says of the others. What the code does is tested on a GPU (ctest's
// gpu.kernels.gpu_ir runs every kernel test through it) and by FileCheck
// (attention_gpu_ir_sm90a.ptx.check).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "jit/context.h"
#include "kernels/kernels.h"

namespace tiledist {
namespace {

std::string ptx(const KernelDef& def, const std::string& arch, const std::string& lowering, int num_warps = 4) {
  CompileOptions o;
  o.lowering = lowering;
  o.num_warps = num_warps;
  const Target t = arch.rfind("gfx", 0) == 0 ? Target::amdgcn(arch) : Target::cuda(arch);
  return jit::Context::global().emit(def, {}, t, o, jit::Stage::asm_, def.aligned_facts());
}
std::string ptx(const std::string& kernel, const std::string& arch, const std::string& lowering, int num_warps = 4) {
  return ptx(*Registry::global().find(kernel), arch, lowering, num_warps);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every single-GPU kernel of the library without f8 values goes through it on
// the NVIDIA archs, and its dots become mma.sync fed by ldmatrix.
TEST(GpuIrLowering, TakesTheLibrarysSingleGpuKernels) {
  for (const char* arch : {"sm_80", "sm_90", "sm_90a"})
    for (const char* kernel : {"add", "softmax", "layernorm", "gemm", "gemm_f16", "attention", "attention_f16",
                               "grouped_gemm", "grouped_gemm_tiles"}) {
      SCOPED_TRACE(std::string(kernel) + " on " + arch);
      std::string text;
      ASSERT_NO_THROW(text = ptx(kernel, arch, "gpu_ir"));
      EXPECT_NE(text.find(".entry " + std::string(kernel) + "("), std::string::npos);
      const bool dots = std::string(kernel).find("gemm") == 0 ? std::string(kernel) != "grouped_gemm_tiles"
                                                              : std::string(kernel).find("attention") == 0;
      // (at 4 warps sm_89's form: wgmma's layouts want a warp for each 16 of attention's 128
      // rows, and the library GEMM's BK = 32 makes rows of 64 bytes, which wgmma's 128-byte
      // swizzle does not hold; Hopper's form below)
      if (dots) {
        EXPECT_NE(text.find("mma.sync.aligned.m16n8k16"), std::string::npos);
        EXPECT_NE(text.find("ldmatrix.sync.aligned"), std::string::npos);
      }
      if (dots) {
        EXPECT_NE(text.find("cp.async"), std::string::npos);
      }
    }
}

// On sm_90a, attention at the library's 8 warps takes Hopper's form: wgmma, no mma.sync.
TEST(GpuIrLowering, HopperAttentionIsWgmma) {
  for (const char* kernel : {"attention", "attention_f16"}) {
    std::string text = ptx(kernel, "sm_90a", "gpu_ir", 8);
    EXPECT_NE(text.find("wgmma.mma_async.sync.aligned"), std::string::npos) << kernel;
    EXPECT_EQ(text.find("mma.sync.aligned.m16n8k16"), std::string::npos) << kernel;
    text = ptx(kernel, "sm_90a", "gpu_ir_mma", 8);  // (sm_89's form asked for)
    EXPECT_EQ(text.find("wgmma.mma_async"), std::string::npos) << kernel;
    EXPECT_NE(text.find("mma.sync.aligned.m16n8k16"), std::string::npos) << kernel;
  }
}

// Attention warp specialized (CompileOptions::warp_specialize, as the library asks at D = 128 on
// Hopper): a producer warpgroup after the 8 consumer warps (384 threads), registers moved
// (setmaxnreg), the consumers' barriers their own (named barrier 1 of 256 threads), the copies
// TMA's; the kernel's other barriers (the mbarriers' set-up) every thread's.
TEST(GpuIrLowering, WarpSpecializedAttention) {
  const KernelDef& def = *Registry::global().find("attention");
  CompileOptions o;
  o.num_warps = 8;
  o.warp_specialize = true;
  const std::string text = jit::Context::global().emit(def, {{"VARLEN", 0}}, Target::cuda("sm_90a"), o,
                                                       jit::Stage::asm_, def.aligned_facts());
  EXPECT_NE(text.find(".maxntid 384, 1, 1"), std::string::npos);
  EXPECT_NE(text.find("setmaxnreg.dec.sync.aligned.u32 40;"), std::string::npos);
  EXPECT_NE(text.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
  EXPECT_NE(text.find("bar.sync 1, 256;"), std::string::npos);
  EXPECT_NE(text.find("cp.async.bulk.tensor"), std::string::npos);
  EXPECT_EQ(text.find("cp.async.cg"), std::string::npos);
  EXPECT_NE(text.find("wgmma.mma_async"), std::string::npos);
  o.warp_specialize = false;  // (without: 256 threads, no register moves)
  const std::string plain = jit::Context::global().emit(def, {{"VARLEN", 0}}, Target::cuda("sm_90a"), o,
                                                        jit::Stage::asm_, def.aligned_facts());
  EXPECT_NE(plain.find(".maxntid 256, 1, 1"), std::string::npos);
  EXPECT_EQ(plain.find("setmaxnreg"), std::string::npos);
}

// The library GEMM's persistent configuration on Hopper goes through the GPU passes, its tile
// loop warp specialized (a producer warpgroup, the consumers' wgmma kept in flight a step:
// wait_group 1); stream-K's kernel too, its count of a tile's runs a scalar atomic; and the
// scaled f8 GEMM's, on f8 wgmma (K of 32 e4m3 an instruction, both operands K-major).
TEST(GpuIrLowering, LibraryGemmWarpSpecializedThroughThePasses) {
  const Target t = Target::cuda("sm_90a");
  const kernels::GemmConfig g = kernels::gemm_config(t, 8192, 8192, 8192);
  ASSERT_TRUE(g.options.lowering.empty());  // (the default: the GPU passes)
  ASSERT_TRUE(g.options.warp_specialize);
  auto emit = [&](const KernelDef& def, const Constants& constants, const std::string& lowering) {
    CompileOptions o = g.options;
    o.lowering = lowering;
    return jit::Context::global().emit(def, constants, t, o, jit::Stage::asm_, def.aligned_facts());
  };
  const KernelDef& gemm = kernels::gemm_kernel(ir::DType::bf16);
  const kernels::GemmConfig skinny = kernels::gemm_config(t, 128, 8192, 8192);  // (M <= 256: 64x128 tiles)
  EXPECT_TRUE(skinny.options.warp_specialize);
  const std::string text = emit(gemm, g.constants, "");
  EXPECT_NE(text.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
  EXPECT_NE(text.find("cp.async.bulk.tensor"), std::string::npos);
  EXPECT_NE(text.find("wgmma.wait_group.sync.aligned 1;"), std::string::npos);
  Constants sk = g.constants;
  sk.erase("PERSISTENT");
  const std::string stream_k = emit(kernels::gemm_sk_kernel(ir::DType::bf16), sk, "gpu_ir");
  EXPECT_NE(stream_k.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
  EXPECT_NE(stream_k.find("atom.acq_rel.gpu.global.add.u32"), std::string::npos);
  const kernels::GemmConfig f8 = kernels::gemm_fp8_config(t, 8192, 8192, 8192);
  ASSERT_TRUE(f8.options.warp_specialize);
  CompileOptions o = f8.options;
  const KernelDef& fp8 = kernels::gemm_fp8_kernel(ir::DType::f8e4m3);
  const std::string scaled =
      jit::Context::global().emit(fp8, f8.constants, t, o, jit::Stage::asm_, fp8.aligned_facts());
  EXPECT_NE(scaled.find("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"), std::string::npos);
  EXPECT_NE(scaled.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
}

// AMD GPUs: the passes' layouts (64-lane waves) lowered, dots on MFMA (each lane's 8 bytes of A
// and B from its dot-operand registers); the reductions' lanes meet by cross-lane permutes, not
// PTX shuffles. (No AMD GPU has run them: what the code does is the layouts' say.)
TEST(GpuIrLowering, TakesAmdKernels) {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    for (const char* kernel : {"add", "softmax", "layernorm", "gemm", "gemm_f16", "attention", "grouped_gemm"}) {
      std::string text;
      ASSERT_NO_THROW(text = ptx(kernel, arch, "gpu_ir")) << kernel << " on " << arch;
      EXPECT_NE(text.find(".amdhsa_kernel " + std::string(kernel)), std::string::npos) << kernel << " on " << arch;
      const bool dots = std::string(kernel).find("gemm") != std::string::npos || std::string(kernel) == "attention";
      EXPECT_EQ(text.find("v_mfma_f32_") != std::string::npos, dots) << kernel << " on " << arch;
      // (LDS a static array of the size the kernel needs: an unsized one is no LDS at all)
      if (dots)
        EXPECT_EQ(text.find(".amdhsa_group_segment_fixed_size 0\n"), std::string::npos) << kernel << " on " << arch;
    }
    EXPECT_NE(ptx("softmax", arch, "gpu_ir").find("ds_bpermute_b32"), std::string::npos)
        << arch;  // (its row max and sum)
  }
}

// What it does not take (an op the passes' IR may hold but the DSL does not make) is named, or
// falls back: ctest tool.gpu_ir_refusal*. Reductions of 8-bit integers combine as i32.
void sum8(tl::Ptr<int8_t> x, tl::Ptr<int8_t> out) { tl::store(out, tl::sum(tl::load(x + tl::arange(0, 128)), 0)); }
TEST(GpuIrLowering, TakesNarrowIntegerReductions) {
  const KernelDef def("sum8", sum8, {"x", "out"});
  for (const char* arch : {"sm_80", "sm_90a", "gfx942"}) EXPECT_NO_THROW(ptx(def, arch, "gpu_ir")) << arch;
}

// Reductions of 64-bit values (each partial's halves shuffled apart) and of rank-3 tensors.
void sum64(tl::Ptr<int64_t> x, tl::Ptr<double> y, tl::Ptr<int64_t> out, tl::Ptr<double> out_y, tl::Ptr<float> z,
           tl::Ptr<float> out_z) {
  auto r = tl::arange(0, 128);
  tl::store(out, tl::sum(tl::load(x + r), 0));
  tl::store(out_y + r, tl::max(tl::expand_dims(tl::load(y + r), 1) + tl::zeros({128, 4}, tl::float64), 1));
  auto cube = tl::reshape(tl::load(z + tl::arange(0, 512)), {8, 8, 8});
  tl::store(out_z + tl::arange(0, 64), tl::reshape(tl::sum(cube, 1), {64}));
}
TEST(GpuIrLowering, Takes64BitAndRank3Reductions) {
  const KernelDef def("sum64", sum64, {"x", "y", "out", "out_y", "z", "out_z"});
  for (const char* arch : {"sm_80", "sm_90a", "gfx942"}) EXPECT_NO_THROW(ptx(def, arch, "gpu_ir")) << arch;
}

// Atomics of tensors (each element's by the thread holding its first copy; the old values
// shared where used) and argmax/argmin (each partial's index beside its value) go through it.
void histogram(tl::Ptr<int32_t> vals, tl::Ptr<int32_t> hist, tl::Ptr<float> xs, tl::Ptr<int32_t> where, tl::Int n) {
  auto offs = tl::program_id(0) * 128 + tl::arange(0, 128);
  auto m = offs < n;
  auto old = tl::atomic_add(hist + tl::load(vals + offs, m, 0), 1, m);
  tl::store(where + offs, old, m);
  tl::store(where + n + tl::program_id(0), tl::argmax(tl::load(xs + offs, m, 0.0f), 0));
}
TEST(GpuIrLowering, TakesTensorAtomicsAndArgmax) {
  const KernelDef def("histogram", histogram, {"vals", "hist", "xs", "where", "n"});
  for (const char* arch : {"sm_80", "sm_90a", "gfx942"}) {
    std::string text;
    ASSERT_NO_THROW(text = ptx(def, arch, "gpu_ir")) << arch;
    if (std::string(arch) != "gfx942")
      EXPECT_NE(text.find(".global.add."), std::string::npos) << arch;  // (atom.<order>.<scope>)
  }
}

// f8 values in registers: every f8 kernel of the library goes through it on every target, its
// dots on the matrix unit that takes f8 (sm_90a: wgmma where the tiles allow, else mma.sync's
// m16n8k32; gfx942: MFMA) or on FMAs (sm_80, gfx90a); no f8 value is rounded back to its bits by
// the table search (the registers keep the bits they were loaded as).
TEST(GpuIrLowering, TakesF8Kernels) {
  for (const char* arch : {"sm_80", "sm_90", "sm_90a", "gfx942", "gfx90a"})
    for (const char* kernel : {"gemm_f8e4m3", "gemm_fp8", "gemm_fp8_e5m2", "gemm_sk_f8e4m3", "grouped_gemm_fp8_rowwise",
                               "grouped_gemm_fp8_blockwise"}) {
      SCOPED_TRACE(std::string(kernel) + " on " + arch);
      std::string text;
      ASSERT_NO_THROW(text = ptx(kernel, arch, "gpu_ir"));
      EXPECT_EQ(text.find("_finite"), std::string::npos);
      const std::string a = arch;
      if (a == "sm_90a") EXPECT_NE(text.find(".f32.e"), std::string::npos);  // (e4m3 or e5m2 operands)
      if (a == "gfx942") EXPECT_NE(text.find("v_mfma_f32_32x32x16_"), std::string::npos);
      if (a == "sm_80" || a == "sm_90") EXPECT_EQ(text.find("mma.sync"), std::string::npos);
      if (a == "gfx90a") EXPECT_EQ(text.find("v_mfma"), std::string::npos);
    }
}

// The distributed kernels go through it too: the collectives (waits, symm_at, puts), and the
// library's overlapped GEMMs at their Hopper configuration, warp specialized by the passes
// (ag_gemm's waits for the gathered rows run by the producer before its copies, not by the
// consumers, whose loads no longer read their token; gemm_rs's tile stored to a peer and signalled there).
TEST(GpuIrLowering, TakesTheDistributedKernels) {
  for (const char* arch : {"sm_80", "sm_90a"})
    for (const char* kernel : {"all_reduce", "all_gather_bf16", "reduce_scatter", "rs_reduce"}) {
      SCOPED_TRACE(std::string(kernel) + " on " + arch);
      std::string text;
      ASSERT_NO_THROW(text = ptx(kernel, arch, "gpu_ir"));
      EXPECT_NE(text.find(".entry " + std::string(kernel) + "("), std::string::npos);
    }
  const Target t = Target::cuda("sm_90a");
  const kernels::GemmConfig g = kernels::gemm_config(t, 8192, 8192, 8192);
  for (const char* kernel : {"ag_gemm", "gemm_rs", "gemm_ar"}) {
    SCOPED_TRACE(kernel);
    const KernelDef& def = *Registry::global().find(kernel);
    CompileOptions o = g.options;
    o.lowering = "gpu_ir";
    const std::string text = jit::Context::global().emit(def, g.constants, t, o, jit::Stage::asm_, def.aligned_facts());
    EXPECT_NE(text.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
    EXPECT_NE(text.find("cp.async.bulk.tensor"), std::string::npos);
    if (std::string(kernel) == "ag_gemm") {
      // (one poll, the producer's, with its proxy fence after it)
      const size_t first = text.find("ld.acquire.sys.global.b32");
      ASSERT_NE(first, std::string::npos);
      EXPECT_EQ(text.find("ld.acquire.sys.global.b32", first + 1), std::string::npos);
      EXPECT_NE(text.find("fence.proxy.async.global;"), std::string::npos);
    }
  }
  // A peer's heap is global memory: the stores through symm_at's pointers are global ones (the
  // expert all-to-all's rows, scales and sources), none generic.
  const std::string send = ptx("ep_ll_send_fp8", "sm_90a", "gpu_ir");
  EXPECT_NE(send.find("st.global.v2.u32"), std::string::npos);
  std::istringstream lines(send);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string op;
    words >> op;  // (st.global.v2.u32, st.release.sys.global.b32, st.shared.u32: not st.v2.u32)
    if (op.rfind("st.", 0) == 0)
      EXPECT_TRUE(op.find(".global.") != std::string::npos || op.find(".shared.") != std::string::npos) << line;
  }
}

// By default sm_90a's pipelines copy by TMA where they can (as "gpu_ir_tma" asks for), sm_80's
// and AMD's as "gpu_ir" asks (cp.async; plain loads into LDS); sm_90 (Hopper without its
// arch-specific instructions) takes sm_80's form.
TEST(GpuIrLowering, ByDefault) {
  const KernelDef& gemm = *Registry::global().find("gemm");
  auto emit = [&](const Target& t, const std::string& lowering) {
    CompileOptions o;
    o.num_warps = 8, o.num_stages = 4, o.lowering = lowering;
    return jit::Context::global().emit(gemm, {{"BM", 128}, {"BN", 256}, {"BK", 64}}, t, o, jit::Stage::asm_,
                                       gemm.aligned_facts());
  };
  const Target hopper = Target::cuda("sm_90a"), ampere = Target::cuda("sm_80"), mi300 = Target::amdgcn("gfx942");
  const std::string text = emit(hopper, "");
  EXPECT_NE(text.find("wgmma.mma_async"), std::string::npos);
  EXPECT_NE(text.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_EQ(text, emit(hopper, "gpu_ir_tma"));
  EXPECT_EQ(emit(ampere, ""), emit(ampere, "gpu_ir"));
  EXPECT_EQ(emit(mi300, ""), emit(mi300, "gpu_ir"));
  EXPECT_EQ(ptx("attention", "sm_90a", ""), ptx("attention", "sm_90a", "gpu_ir_tma"));
  const std::string plain_hopper = emit(Target::cuda("sm_90"), "");
  EXPECT_NE(plain_hopper.find(".target sm_90\n"), std::string::npos);
  EXPECT_NE(plain_hopper.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  EXPECT_EQ(plain_hopper.find("wgmma"), std::string::npos);
}

TEST(GpuIrLowering, ABadLoweringIsNamed) {
  CompileOptions o;
  o.lowering = "fastest";
  std::string e = error_of([&] { o.validate(); });
  EXPECT_NE(e.find("lowering = 'fastest'"), std::string::npos) << e;
  // (the option is part of the cache key: two variants never share an entry)
  CompileOptions plain;
  o.lowering = "gpu_ir";
  EXPECT_NE(plain.key(), o.key());
}

}  // namespace
}  // namespace tiledist
