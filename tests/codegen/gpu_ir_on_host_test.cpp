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
void carried_gemm(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
                  tl::Const<int> BN, tl::Const<int> BK) {
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
