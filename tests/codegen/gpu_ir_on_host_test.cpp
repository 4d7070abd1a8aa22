// The GPU passes' output run on the CPU (CompileOptions::gpu_passes): layout assignment and
// pipelining move no arithmetic, so each kernel computes the same bits through them as without
// them, whatever the arch they were run for. A pipeline that copies the wrong iteration's tile,
// reads the wrong tile of its ring, or masks a live copy off gives other numbers. Each kernel
// is also checked against a reference computed another way.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

const char* const kArchs[] = {"sm_80", "sm_90a"};

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> out;
  for (float v : x) out.push_back(bf16(v));
  return out;
}
std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> out;
  for (bf16 v : x) out.push_back(float(v));
  return out;
}

TEST(GpuIrOnHost, LibraryGemmGivesTheSameBits) {
  const int M = 96, N = 80, K = 200;  // ragged: masked tiles at every edge, K not a multiple of BK
  auto a = to_bf16(ref::random_floats(size_t(M) * K)), b = to_bf16(ref::random_floats(size_t(K) * N));
  kernels::GemmConfig plain = kernels::gemm_config(Target::host(), M, N, K);
  std::vector<float> want(size_t(M) * N), base(size_t(M) * N);
  kernels::Gemm(Target::host(), M, N, K, ir::DType::bf16, plain).run(a.data(), b.data(), base.data());
  ref::gemm(to_float(a), to_float(b), want, M, N, K);
  EXPECT_LT(ref::rel_error(base, want), 1e-6) << "seed " << ref::last_seed();
  for (const char* arch : kArchs)
    for (int stages : {2, 3, 4}) {
      kernels::GemmConfig config = plain;
      config.options.gpu_passes = arch;
      config.options.num_stages = stages;
      std::vector<float> got(size_t(M) * N, NAN);
      kernels::Gemm(Target::host(), M, N, K, ir::DType::bf16, config).run(a.data(), b.data(), got.data());
      EXPECT_EQ(got, base) << arch << ", " << stages << " stages; seed " << ref::last_seed();
    }
}

// A GEMM as Triton's tutorial writes it: pointers carried through the loop and advanced by BK.
void carried_gemm(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K,
                  tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::program_id(0) * BM + tl::arange(0, BM);
  auto rn = tl::program_id(1) * BN + tl::arange(0, BN);
  auto rk = tl::arange(0, BK);
  auto a_ptrs = a + tl::expand_dims(rm, 1) * K + tl::expand_dims(rk, 0);
  auto b_ptrs = b + tl::expand_dims(rk, 1) * N + tl::expand_dims(rn, 0);
  auto acc = tl::for_range(
      0, tl::cdiv(K, BK), 1, {tl::zeros({BM, BN}, tl::float32), a_ptrs, b_ptrs}, [&](tl::Tensor k, tl::Values v) {
        auto left = K - k * BK;
        auto x = tl::load(v[1], (tl::expand_dims(rm, 1) < M) & (tl::expand_dims(rk, 0) < left), 0.0f);
        auto y = tl::load(v[2], (tl::expand_dims(rk, 1) < left) & (tl::expand_dims(rn, 0) < N), 0.0f);
        return tl::Values{tl::dot(x, y, v[0]), v[1] + BK, v[2] + BK * N};
      })[0];
  auto mask = (tl::expand_dims(rm, 1) < M) & (tl::expand_dims(rn, 0) < N);
  tl::store(c + tl::expand_dims(rm, 1) * N + tl::expand_dims(rn, 0), acc, mask);
}

TEST(GpuIrOnHost, CarriedPointerGemmGivesTheSameBits) {
  static const KernelDef def("carried_gemm", carried_gemm, {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK"});
  const int M = 70, N = 64, K = 150;
  const Constants tiles = {{"BM", 32}, {"BN", 32}, {"BK", 32}};
  auto a = to_bf16(ref::random_floats(size_t(M) * K)), b = to_bf16(ref::random_floats(size_t(K) * N));
  std::vector<float> want(size_t(M) * N), base(size_t(M) * N);
  const Grid grid(tl::cdiv(M, 32), tl::cdiv(N, 32));
  compile(def, tiles, Target::host()).launch(grid, a, b, base, M, N, K);
  ref::gemm(to_float(a), to_float(b), want, M, N, K);
  EXPECT_LT(ref::rel_error(base, want), 1e-6) << "seed " << ref::last_seed();
  for (const char* arch : kArchs)
    for (int stages : {2, 3}) {
      CompileOptions options;
      options.gpu_passes = arch;
      options.num_stages = stages;
      std::vector<float> got(size_t(M) * N, NAN);
      compile(def, tiles, Target::host(), options).launch(grid, a, b, got, M, N, K);
      EXPECT_EQ(got, base) << arch << ", " << stages << " stages; seed " << ref::last_seed();
    }
}

TEST(GpuIrOnHost, AttentionGivesTheSameBits) {
  // Ragged sequences (one shorter than a block, one not a multiple of it), causal and not:
  // both of the kernel's loops (whole blocks, then the masked last one) are pipelined, and with
  // dot_prefetch their first dots issued an iteration ahead (the last one's from masked loads).
  const int heads = 2, kv_heads = 1, D = 64;
  const std::vector<int32_t> cu = {0, 45, 45 + 130};
  const int tokens = cu.back(), batch = 2, longest = 130;
  auto q = to_bf16(ref::random_floats(size_t(tokens) * heads * D));
  auto k = to_bf16(ref::random_floats(size_t(tokens) * kv_heads * D));
  auto v = to_bf16(ref::random_floats(size_t(tokens) * kv_heads * D));
  for (bool causal : {false, true}) {
    kernels::AttentionConfig plain = kernels::attention_config(Target::host(), D, causal);
    std::vector<bf16> base(q.size());
    kernels::Attention(Target::host(), heads, kv_heads, D, ir::DType::bf16, causal, 0, plain)
        .run_varlen(q.data(), k.data(), v.data(), base.data(), cu.data(), batch, longest);
    // (sm_90a with gpu_ir_prefetch: the first dot of each loop computed an iteration ahead)
    for (std::string arch : {"sm_80", "sm_90a", "sm_90a+prefetch"}) {
      kernels::AttentionConfig config = plain;
      config.options.gpu_passes = arch.substr(0, arch.find('+'));
      if (arch.find('+') != std::string::npos) config.options.lowering = "gpu_ir_prefetch";
      std::vector<bf16> got(q.size());
      kernels::Attention(Target::host(), heads, kv_heads, D, ir::DType::bf16, causal, 0, config)
          .run_varlen(q.data(), k.data(), v.data(), got.data(), cu.data(), batch, longest);
      EXPECT_EQ(to_float(got), to_float(base)) << arch << (causal ? ", causal" : "") << "; seed " << ref::last_seed();
    }
  }
}

TEST(GpuIrOnHost, GroupedGemmGivesTheSameBits) {
  const int64_t rows = 150, N = 64, K = 96, E = 4;
  const std::vector<int32_t> offs = {30, 30, 110, 150};  // an empty expert, one under a tile
  auto a = to_bf16(ref::random_floats(size_t(rows) * K)), w = to_bf16(ref::random_floats(size_t(E) * N * K));
  kernels::GemmConfig plain = kernels::grouped_gemm_config(Target::host(), rows, N, K, E, ir::DType::bf16);
  std::vector<bf16> base(size_t(rows) * N);
  kernels::GroupedGemm(Target::host(), rows, N, K, E, ir::DType::bf16, kernels::GroupedGemm::Scaling::none,
                       kernels::GroupedGemm::Layout::nk, plain)
      .run(a.data(), w.data(), base.data(), offs);
  for (const char* arch : kArchs) {
    kernels::GemmConfig config = plain;
    config.options.gpu_passes = arch;
    std::vector<bf16> got(size_t(rows) * N);
    kernels::GroupedGemm(Target::host(), rows, N, K, E, ir::DType::bf16, kernels::GroupedGemm::Scaling::none,
                         kernels::GroupedGemm::Layout::nk, config)
        .run(a.data(), w.data(), got.data(), offs);
    EXPECT_EQ(to_float(got), to_float(base)) << arch << "; seed " << ref::last_seed();
  }
}

// An expert's GEMM as a user writes it: the expert loaded from a table, W [E, K, N] offset by
// it, the pointers and sizes stated 16-aligned (tl::multiple_of, as a GPU launch's
// specialization states them). With 128-byte rows in wgmma's layouts (sm_90a, 4 warps) and
// lowering "gpu_ir_tma" the pipeline copies A and W as 3-D boxes, the expert a coordinate of
// each; the host runs each copy as the box of the tensor map's tensor, zeros outside its
// extents. The same bits as without the
// passes: a coordinate, stride or extent wrong gives other numbers.
void expert_gemm(tl::Ptr<bf16> a, tl::Ptr<bf16> w, tl::Ptr<int32_t> experts, tl::Ptr<float> c, tl::Int M, tl::Int N,
                 tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto a16 = tl::multiple_of(a, 16), w16 = tl::multiple_of(w, 16);
  auto n16 = tl::multiple_of(N, 16), k16 = tl::multiple_of(K, 16);
  auto expert = tl::maximum(tl::load(experts + tl::program_id(0)), 0);
  auto w_e = w16 + expert.to(tl::int64) * k16 * n16;
  auto rm = tl::expand_dims(tl::program_id(1) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(2) * BN + tl::arange(0, BN), 0);
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](tl::Tensor k, tl::Tensor acc) {
    auto ka = tl::expand_dims(k + tl::arange(0, BK), 0), kb = tl::expand_dims(k + tl::arange(0, BK), 1);
    auto x = tl::load(a16 + (expert * M + rm) * k16 + ka, (rm < M) & (ka < K), 0.0f);
    auto y = tl::load(w_e + kb * n16 + rn, (kb < K) & (rn < N), 0.0f);
    return tl::dot(x, y, acc);
  });
  tl::store(c + (expert * M + rm) * N + rn, acc, (rm < M) & (rn < N));
}

TEST(GpuIrOnHost, TmaCopiesGiveTheSameBits) {
  static const KernelDef def("expert_gemm", expert_gemm, {"a", "w", "experts", "c", "M", "N", "K", "BM", "BN", "BK"});
  const int E = 3, M = 70, N = 96, K = 208;  // ragged: edges masked at M and K, N a multiple of 16
  const Constants tiles = {{"BM", 64}, {"BN", 64}, {"BK", 64}};
  const std::vector<int32_t> experts = {2, 0, 1};
  auto a = to_bf16(ref::random_floats(size_t(E) * M * K)), w = to_bf16(ref::random_floats(size_t(E) * K * N));
  const Grid grid(E, tl::cdiv(M, 64), tl::cdiv(N, 64));
  std::vector<float> base(size_t(E) * M * N, NAN);
  CompileOptions plain;
  plain.num_warps = 4;
  compile(def, tiles, Target::host(), plain).launch(grid, a, w, experts, base, M, N, K);
  for (int e = 0; e < E; ++e) {  // (against a reference computed another way)
    std::vector<float> want(size_t(M) * N), x(to_float(a)), y(to_float(w));
    ref::gemm(std::vector<float>(x.begin() + e * M * K, x.begin() + (e + 1) * M * K),
              std::vector<float>(y.begin() + e * K * N, y.begin() + (e + 1) * K * N), want, M, N, K);
    EXPECT_LT(ref::rel_error(std::vector<float>(base.begin() + e * M * N, base.begin() + (e + 1) * M * N), want), 1e-6)
        << "expert " << e << "; seed " << ref::last_seed();
  }
  for (int stages : {2, 3, 4}) {
    CompileOptions options = plain;
    options.gpu_passes = "sm_90a";
    options.lowering = "gpu_ir_tma";
    options.num_stages = stages;
    std::vector<float> got(base.size(), NAN);
    compile(def, tiles, Target::host(), options).launch(grid, a, w, experts, got, M, N, K);
    EXPECT_EQ(got, base) << stages << " stages; seed " << ref::last_seed();
  }
}

// A warp-specialized kernel's producer fills rings ahead of consumers running beside it: the
// CPU, which runs the regions one after the other, says so rather than run it.
TEST(GpuIrOnHost, RefusesWarpSpecializedKernels) {
  static const KernelDef def("expert_gemm", expert_gemm, {"a", "w", "experts", "c", "M", "N", "K", "BM", "BN", "BK"});
  CompileOptions options;
  options.num_warps = 4;
  options.gpu_passes = "sm_90a";
  options.lowering = "gpu_ir_ws";
  try {
    compile(def, {{"BM", 64}, {"BN", 64}, {"BK", 64}}, Target::host(), options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warp_specialize"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not on the CPU"), std::string::npos) << e.what();
  }
}

TEST(GpuIrOnHost, OnlyForTheHostAndKnownArchs) {
  CompileOptions options;
  options.gpu_passes = "sm_75";
  try {
    options.validate();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not 'sm_75'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tiledist
