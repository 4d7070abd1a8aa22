// The library's GEMMs (bf16, f16, f32, f8 and scaled f8; pipelined, TMA, persistent, warp
// specialized, stream-K) and GEMMs as users write them (Triton's tutorial, epilogues, two dots),
// on the CPU backend at ragged sizes where masks matter (and on a GPU where there is one),
// against host references computed in double precision. Fresh random inputs each run (the seed
// is printed on failure).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

template <class T>
void check_gemm(ir::DType dt, double tol) {
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {67, 45, 39}, {128, 96, 64}, {1, 130, 17}, {70, 33, 129}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<T> a(af.size()), b(bf.size());
    // The reference multiplies the values the kernel sees: inputs rounded to the dtype.
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = T(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = T(bf[i]));
    std::vector<float> c(size_t(M) * N), want;
    compile(kernels::gemm_kernel(dt), {{"BM", 32}, {"BN", 32}, {"BK", 16}})
        .launch({tl::cdiv(M, 32), tl::cdiv(N, 32)}, a, b, c, M, N, K);
    ref::gemm(af, bf, want, M, N, K);
    const double err = ref::rel_error(c, want);
    std::printf("  %s %dx%dx%d: relative error %.2e\n", ir::dtype_name(dt), M, N, K, err);
    EXPECT_LT(err, tol) << ir::dtype_name(dt) << " " << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}
TEST(Gemm, F32) { check_gemm<float>(ir::DType::f32, 1e-6); }
TEST(Gemm, BF16) { check_gemm<bf16>(ir::DType::bf16, 1e-6); }
TEST(Gemm, F16) { check_gemm<f16>(ir::DType::f16, 1e-6); }

// Shapes that are multiples of 16 get the launch-time specialization for aligned arguments: on
// the GPU a cp.async pipeline feeding ldmatrix and mma.sync, or wgmma where sm_90a's tile rules
// allow (codegen/nvptx.cpp, wgmma_eligible). Ragged edges (M, N not multiples of
// the tile, K ending half-way through one) and more than 48 KB of shared memory (4 stages of
// 128x128x32) included.
struct PipelinedCase {
  int M, N, K, bm, bn, bk, warps, stages;
};
/// `programs` > 0: persistent (PERSISTENT=1), that many programs walking the tiles.
template <class T>
void check_pipelined(ir::DType dt, const PipelinedCase& t, bool tma = true, int programs = 0, bool ws = false,
                     bool transposed = false) {
  auto af = ref::random_floats(size_t(t.M) * t.K), bf = ref::random_floats(size_t(t.K) * t.N);
  std::vector<T> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = T(af[i]));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = T(bf[i]));
  std::vector<float> c(size_t(t.M) * t.N, 7.0f), want;
  CompileOptions opts = CompileOptions::from_env();
  opts.num_warps = t.warps;
  opts.num_stages = t.stages;
  opts.tma = opts.tma && tma;
  opts.warp_specialize = ws;
  const Grid grid = programs > 0 ? Grid(programs) : Grid(tl::cdiv(t.M, t.bm), tl::cdiv(t.N, t.bn));
  compile(kernels::gemm_kernel(dt),
          {{"BM", t.bm}, {"BN", t.bn}, {"BK", t.bk}, {"PERSISTENT", programs > 0}, {"TRANSPOSED", transposed}},
          Target::default_target(), opts)
      .launch(grid, a, b, c, t.M, t.N, t.K);
  ref::gemm(af, bf, want, t.M, t.N, t.K);
  EXPECT_LT(ref::rel_error(c, want), 1e-6)
      << ir::dtype_name(dt) << " " << t.M << "x" << t.N << "x" << t.K << " tiles " << t.bm << "x" << t.bn << "x" << t.bk
      << (opts.tma ? "" : " (no TMA)") << (ws ? " (warp specialized)" : "") << (transposed ? " (transposed)" : "")
      << " programs " << programs << " seed " << ref::last_seed();
}
TEST(Gemm, AlignedShapesWithPipelinedTiles) {
  using Case = PipelinedCase;
  for (Case t : {Case{80, 48, 48, 64, 64, 32, 4, 3}, Case{256, 256, 256, 128, 128, 32, 4, 4},
                 Case{144, 272, 96, 128, 128, 32, 8, 3}, Case{64, 128, 1024, 64, 128, 64, 4, 2},
                 // on sm_90a, wgmma: one or two warpgroups, N of 1, 2 or 4 column blocks, K of 1 or 2
                 Case{304, 528, 208, 128, 256, 64, 8, 4}, Case{256, 192, 320, 128, 128, 128, 8, 3},
                 Case{128, 512, 128, 64, 256, 64, 4, 3}, Case{96, 64, 80, 64, 64, 64, 4, 5},
                 // wgmma repeated over the rows: a warpgroup's 64 rows twice (128x128 on 4
                 // warps, 256x128 on 8)
                 Case{304, 528, 208, 128, 128, 64, 4, 4}, Case{272, 192, 160, 256, 128, 64, 8, 3}})
    check_pipelined<bf16>(ir::DType::bf16, t);
}
// On sm_90a the wgmma loops above copy their tiles by TMA (out-of-bounds boxes read as zeros);
// the same shapes with cp.async instead.
TEST(Gemm, AlignedShapesWithoutTma) {
  using Case = PipelinedCase;
  for (Case t : {Case{304, 528, 208, 128, 256, 64, 8, 4}, Case{256, 192, 320, 128, 128, 128, 8, 3},
                 Case{96, 64, 80, 64, 64, 64, 4, 5}})
    check_pipelined<bf16>(ir::DType::bf16, t, false);
}
// Persistent: 3 programs walk the tiles (several each, some none, the K loop's buffers reused
// across tiles), and on sm_90a a producer warpgroup issues the TMA copies (warp specialized,
// with 4 and 8 consumer warps) or not; and warp specialized with a program per tile.
TEST(Gemm, PersistentAndWarpSpecialized) {
  using Case = PipelinedCase;
  for (bool ws : {false, true}) {
    for (Case t : {Case{304, 528, 208, 128, 256, 64, 8, 4}, Case{512, 512, 64, 128, 256, 64, 8, 4},
                   Case{256, 192, 320, 128, 128, 128, 8, 3}, Case{96, 64, 80, 64, 64, 64, 4, 5},
                   Case{80, 48, 48, 64, 64, 32, 4, 3}, Case{304, 528, 208, 128, 128, 64, 4, 4}})
      check_pipelined<bf16>(ir::DType::bf16, t, true, 3, ws);
    check_pipelined<bf16>(ir::DType::bf16, Case{304, 528, 208, 128, 256, 64, 8, 4}, true, 0, ws);
  }
}
// Tiles computed transposed (TRANSPOSED=1: C^T's tile = B's tile^T @ A's tile^T, B's rows the
// M-major A operand of wgmma on sm_90a), a program per tile and persistent, warp specialized or
// not: two warpgroups of m64n256 (C's 256x128 tiles), one of m64n128 repeated over the rows
// (128x128), one instruction (64x64); ragged edges, and K ending half-way through a tile.
TEST(Gemm, TransposedTiles) {
  using Case = PipelinedCase;
  for (Case t : {Case{304, 528, 208, 256, 128, 64, 8, 4}, Case{272, 192, 160, 128, 128, 64, 4, 4},
                 Case{96, 64, 80, 64, 64, 64, 4, 5}}) {
    check_pipelined<bf16>(ir::DType::bf16, t, true, 0, false, true);
    for (bool ws : {false, true}) check_pipelined<bf16>(ir::DType::bf16, t, true, 3, ws, true);
  }
  check_pipelined<f16>(ir::DType::f16, PipelinedCase{304, 528, 208, 256, 128, 64, 8, 4}, true, 3, true, true);
}
// f16 operands take the same pipelines (wgmma on sm_90a).
TEST(Gemm, F16WithPipelinedTiles) {
  using Case = PipelinedCase;
  for (Case t : {Case{144, 272, 96, 128, 128, 32, 8, 3}, Case{304, 528, 208, 128, 256, 64, 8, 4}})
    check_pipelined<f16>(ir::DType::f16, t);
}

TEST(Gemm, ConfigurationsChosenForTheTarget) {
  for (auto [M, N, K] : {std::tuple{300, 260, 200}, {64, 256, 128}, {512, 384, 96}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    std::vector<float> c(size_t(M) * N), want;
    Target target = Target::default_target();
    auto cfg = kernels::gemm_config(target, M, N, K);
    compile(kernels::gemm_kernel(ir::DType::bf16), cfg.constants, target, cfg.options)
        .launch(cfg.grid(M, N), a, b, c, M, N, K);
    ref::gemm(af, bf, want, M, N, K);
    EXPECT_LT(ref::rel_error(c, want), 1e-6) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}

// kernels::Gemm on the default target: C through device buffers on a GPU (where the run is
// queued on the default stream and waited for), host memory on the host.
template <class T>
std::vector<float> run_gemm(kernels::Gemm& g, const std::vector<T>& a, const std::vector<T>& b, size_t c_size) {
  if (Target::default_target().kind == Target::Kind::nvptx) {
    cuda::Buffer<T> da(a), db(b);
    cuda::Buffer<float> dc(c_size);
    cuda::memset(dc.data(), 0xFF, c_size * sizeof(float));  // NaN: every element must be written
    g.run(da.data(), db.data(), dc.data());
    return dc.download();
  }
  std::vector<float> c(c_size, std::nanf(""));
  g.run(a.data(), b.data(), c.data());
  return c;
}

// Stream-K's last wave (gemm_sk): the tiles past the full waves of programs shared out over K,
// a tile's parts summed by whichever program finishes it last. Ragged shapes, 3 to 7 programs
// (tiles split in 2 to 4 parts, programs with pieces of 2 tiles, programs with none, K = 0), the
// library's own choice of tiles too (on a GPU: 128x256 wgmma, warp specialized, 132 programs);
// each result against the host reference, and the same bits on a second run.
TEST(Gemm, StreamKLastWave) {
  const Target target = Target::default_target();
  const bool gpu = target.kind == Target::Kind::nvptx;
  struct Case {
    int M, N, K, programs;  // programs 0: gemm_config's tiles and programs
  };
  // (forced: 32x32 tiles over the given programs; the first five split their last wave, into
  // 2, 3, 4, 3 and 4 runs, the last of uneven runs: 7 K steps; the others have none to split)
  std::vector<Case> cases = {{100, 70, 200, 5},  {100, 70, 200, 9}, {96, 96, 64, 4},    {33, 130, 47, 3},
                             {65, 33, 100, 5},   {100, 70, 200, 7}, {64, 64, 0, 3},     {1, 1, 1, 2},
                             {300, 260, 200, 0}, {512, 384, 96, 0}, {100, 70, 200, -5}, {33, 130, 47, -3}};
  // (programs < 0: the same forced, tiles computed transposed)
  if (gpu) cases.insert(cases.end(), {{1000, 1152, 4096, 0}, {2176, 2304, 1024, 0}, {8192, 1152, 2048, 0}});
  int shared = 0;
  for (Case t : cases) {
    auto af = ref::random_floats(size_t(t.M) * t.K), bf = ref::random_floats(size_t(t.K) * t.N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    kernels::GemmConfig cfg = kernels::gemm_config(target, t.M, t.N, t.K);
    if (t.programs) {
      cfg.constants = {{"BM", 32}, {"BN", 32}, {"BK", 16}, {"PERSISTENT", 1}, {"TRANSPOSED", t.programs < 0}};
      cfg.bm = cfg.bn = 32;
      cfg.programs = std::abs(t.programs);
    }
    kernels::Gemm g(target, t.M, t.N, t.K, ir::DType::bf16, cfg);
    shared += g.stream_k();
    std::vector<float> want;
    ref::gemm(af, bf, want, t.M, t.N, t.K);
    const std::vector<float> c = run_gemm(g, a, b, want.size()), again = run_gemm(g, a, b, want.size());
    const double err = ref::rel_error(c, want);
    std::printf("  %dx%dx%d, %d programs%s: relative error %.2e\n", t.M, t.N, t.K, g.grid().x,
                g.stream_k() ? ", stream-K" : "", err);
    // (f32 sums of K products: the reference's order differs, an error growing as sqrt(K))
    EXPECT_LT(err, 1e-6 + 2e-7 * std::sqrt(double(t.K)))
        << t.M << "x" << t.N << "x" << t.K << " programs " << t.programs << " seed " << ref::last_seed();
    EXPECT_EQ(std::memcmp(c.data(), again.data(), c.size() * sizeof(float)), 0) << "a second run differs";
  }
  EXPECT_GE(shared, 7);  // (the forced cases that split their last wave)
  {                      // copies share the scratch (and free it once)
    kernels::GemmConfig cfg = kernels::gemm_config(target, 100, 70, 200);
    cfg.constants = {{"BM", 32}, {"BN", 32}, {"BK", 16}, {"PERSISTENT", 1}};
    cfg.bm = cfg.bn = 32;
    cfg.programs = 5;
    std::optional<kernels::Gemm> g(std::in_place, target, 100, 70, 200, ir::DType::bf16, cfg);
    kernels::Gemm copy = *g;
    g.reset();
    std::vector<bf16> a(100 * 200, bf16(1.0f)), b(200 * 70, bf16(0.5f));
    const std::vector<float> c = run_gemm(copy, a, b, 100 * 70);
    EXPECT_EQ(c[0], 100.0f);
    EXPECT_EQ(c[100 * 70 - 1], 100.0f);
    cfg.bm = 64;  // tiles that are not the constants' BM
    EXPECT_THROW(kernels::Gemm(target, 100, 70, 200, ir::DType::bf16, cfg), Error);
  }
  EXPECT_THROW(kernels::Gemm(target, 16, 16, -1), Error);
  kernels::Gemm f16_gemm(target, 16, 16, 16, ir::DType::f16);
  std::vector<bf16> x(256);
  EXPECT_THROW(run_gemm(f16_gemm, x, x, 256), Error);  // bf16 operands on an f16 GEMM
}

// f8 inputs (on sm_90a: mma.sync.m16n8k32), exact products accumulated in f32.
TEST(Gemm, F8E4M3) {
  for (auto [M, N, K] : {std::tuple{64, 64, 64}, {67, 45, 70}, {128, 96, 256}}) {
    auto af = ref::random_floats(size_t(M) * K, -2, 2), bf = ref::random_floats(size_t(K) * N, -2, 2);
    std::vector<f8e4m3> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = f8e4m3(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = f8e4m3(bf[i]));
    std::vector<float> c(size_t(M) * N), want;
    compile(kernels::gemm_kernel(ir::DType::f8e4m3), {{"BM", 64}, {"BN", 64}, {"BK", 32}})
        .launch({tl::cdiv(M, 64), tl::cdiv(N, 64)}, a, b, c, M, N, K);
    ref::gemm(af, bf, want, M, N, K);
    EXPECT_LT(ref::rel_error(c, want), 1e-6) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}

// Random f8 operands of a TN GEMM (A M x K, Bt N x K) and the values they hold as floats (A's,
// and B = Bt^T's K x N, for the reference).
template <class T>
struct F8Operands {
  std::vector<T> a, bt;
  std::vector<float> af, b;
};
template <class T>
F8Operands<T> f8_operands(int M, int N, int K) {
  F8Operands<T> o;
  o.af = ref::random_floats(size_t(M) * K, -2, 2);
  std::vector<float> bf = ref::random_floats(size_t(N) * K, -2, 2);
  o.a.resize(o.af.size()), o.bt.resize(bf.size()), o.b.resize(size_t(K) * N);
  for (size_t i = 0; i < o.af.size(); ++i) o.af[i] = float(o.a[i] = T(o.af[i]));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(o.bt[i] = T(bf[i]));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) o.b[size_t(k) * N + n] = bf[size_t(n) * K + k];
  return o;
}

// The scaled f8 GEMM at its definition's small tiles (64x64x64): on sm_90a mma.sync's m16n8k32
// in sm_89's form of the GPU passes, both tiles K-major (ldmatrix for each), e4m3 and e5m2; the
// masked loads' f8 zeros padding ragged edges. Exact products accumulated in f32.
template <class T>
void check_gemm_fp8_small_tiles(ir::DType dt) {
  for (auto [M, N, K] : {std::tuple{64, 64, 64}, {67, 45, 70}, {128, 96, 256}}) {
    auto [a, bt, af, b] = f8_operands<T>(M, N, K);
    std::vector<float> scale_a{0.5f}, scale_b{3.0f}, c(size_t(M) * N), want;
    compile(kernels::gemm_fp8_kernel(dt))
        .launch({tl::cdiv(M, 64), tl::cdiv(N, 64)}, a, bt, c, scale_a, scale_b, M, N, K);
    ref::gemm(af, b, want, M, N, K);
    for (float& w : want) w *= 1.5f;
    EXPECT_LT(ref::rel_error(c, want), 1e-6)
        << ir::dtype_name(dt) << " " << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}
TEST(Gemm, ScaledF8SmallTiles) {
  check_gemm_fp8_small_tiles<f8e4m3>(ir::DType::f8e4m3);
  check_gemm_fp8_small_tiles<f8e5m2>(ir::DType::f8e5m2);
}

// Scaled f8 GEMM with B transposed (TN): e4m3 and e5m2, ragged shapes through the generic
// variant and aligned ones through the launch-time specialization (on sm_90a: wgmma k32 with
// both tiles K-major, copied by TMA), with gemm_fp8_config's tiles. Products of f8 values are
// exact in f32; the reference sums the same values in double, then scales. The test prints
// the error it saw: ctest shows it.
template <class T>
void check_gemm_fp8(ir::DType dt) {
  for (auto [M, N, K] : {std::tuple{67, 45, 70}, {128, 256, 128}, {304, 528, 400}, {256, 256, 1024}}) {
    auto [a, bt, af, b] = f8_operands<T>(M, N, K);
    auto scales = ref::random_floats(2, 0.25, 4);
    std::vector<float> scale_a{scales[0]}, scale_b{scales[1]};
    std::vector<float> c(size_t(M) * N, 7.0f), want;
    Target target = Target::default_target();
    auto cfg = kernels::gemm_fp8_config(target, M, N, K);
    compile(kernels::gemm_fp8_kernel(dt), cfg.constants, target, cfg.options)
        .launch(cfg.grid(M, N), a, bt, c, scale_a, scale_b, M, N, K);
    ref::gemm(af, b, want, M, N, K);
    for (float& w : want) w *= scale_a[0] * scale_b[0];
    // Hopper's f8 wgmma keeps its partial sums in less than f32's precision (about 14 bits, as
    // DeepSeek-V3's report measured; cuBLAS's default promotes them): on GPUs, 1e-3.
    const double tol = target.kind == Target::Kind::host ? 1e-6 : 1e-3;
    const double err = ref::rel_error(c, want);
    std::printf("  %s %dx%dx%d: relative error %.2e\n", ir::dtype_name(dt), M, N, K, err);
    EXPECT_LT(err, tol) << ir::dtype_name(dt) << " " << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}
TEST(Gemm, ScaledF8E4M3) { check_gemm_fp8<f8e4m3>(ir::DType::f8e4m3); }
TEST(Gemm, ScaledF8E5M2) { check_gemm_fp8<f8e5m2>(ir::DType::f8e5m2); }

TEST(Gemm, DefaultTilesAgreeWithSmallTiles) {
  int M = 150, N = 70, K = 90;
  auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
  std::vector<float> c1(size_t(M) * N), c2(size_t(M) * N);
  compile(kernels::gemm_kernel(ir::DType::f32)).launch({tl::cdiv(M, 64), tl::cdiv(N, 64)}, af, bf, c1, M, N, K);
  compile(kernels::gemm_kernel(ir::DType::f32), {{"BM", 16}, {"BN", 16}, {"BK", 16}})
      .launch({tl::cdiv(M, 16), tl::cdiv(N, 16)}, af, bf, c2, M, N, K);
  EXPECT_LT(ref::rel_error(c1, c2), 1e-6);
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using tl::Tensor;
using tl::Values;

// Triton's matmul tutorial as its users write it: strides as arguments, operand pointers carried
// by the loop and advanced each iteration, wrapped row and column offsets.
void tutorial_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K,
                     tl::Int stride_am, tl::Int stride_ak, tl::Int stride_bk, tl::Int stride_bn, tl::Int stride_cm,
                     tl::Int stride_cn, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto offs_am = (tl::program_id(0) * BM + tl::arange(0, BM)) % M;
  auto offs_bn = (tl::program_id(1) * BN + tl::arange(0, BN)) % N;
  auto offs_k = tl::arange(0, BK);
  auto a_ptrs = a + (tl::expand_dims(offs_am, 1) * stride_am + tl::expand_dims(offs_k, 0) * stride_ak);
  auto b_ptrs = b + (tl::expand_dims(offs_k, 1) * stride_bk + tl::expand_dims(offs_bn, 0) * stride_bn);
  Values out =
      tl::for_range(0, tl::cdiv(K, BK), 1, {tl::zeros({BM, BN}, tl::float32), a_ptrs, b_ptrs}, [&](Tensor k, Values v) {
        auto at = tl::load(v[1], tl::expand_dims(offs_k, 0) < K - k * BK, 0.0f);
        auto bt = tl::load(v[2], tl::expand_dims(offs_k, 1) < K - k * BK, 0.0f);
        return Values{tl::dot(at, bt, v[0]), v[1] + BK * stride_ak, v[2] + BK * stride_bk};
      });
  auto rm = tl::expand_dims(tl::program_id(0) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(1) * BN + tl::arange(0, BN), 0);
  tl::store(c + rm * stride_cm + rn * stride_cn, out[0], (rm < M) & (rn < N));
}
const KernelDef kTutorial("tutorial_matmul", tutorial_matmul,
                          {"a", "b", "c", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                           "stride_cm", "stride_cn", "BM", "BN", "BK"});

TEST(Gemm, TritonTutorialStyleKernel) {
  for (auto [M, N, K] : {std::tuple{256, 128, 96}, {100, 70, 50}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    std::vector<float> c(size_t(M) * N), want;
    compile(kTutorial, {{"BM", 64}, {"BN", 64}, {"BK", 32}})
        .launch({tl::cdiv(M, 64), tl::cdiv(N, 64)}, a, b, c, M, N, K, K, 1, N, 1, N, 1);
    ref::gemm(af, bf, want, M, N, K);
    EXPECT_LT(ref::rel_error(c, want), 1e-6) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}

// A pipelined operand load whose masked-off elements are not zero (`other` 1 for A, 0.5 for B):
// the K tail past K adds (Kpad - K) * 0.5 to every element. cp.async can only fill zeros, so a
// lowering that copies such a tile asynchronously must fill it another way.
void padded_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K,
                   tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::program_id(0) * BM + tl::arange(0, BM), rn = tl::program_id(1) * BN + tl::arange(0, BN);
  auto offs_k = tl::arange(0, BK);
  Values out = tl::for_range(0, K, BK, {tl::zeros({BM, BN}, tl::float32)}, [&](Tensor k, Values v) {
    auto ks = k + offs_k;
    auto at = tl::load(a + tl::expand_dims(rm % M, 1) * K + tl::expand_dims(ks, 0), tl::expand_dims(ks, 0) < K, 1.0f);
    auto bt = tl::load(b + tl::expand_dims(ks, 1) * N + tl::expand_dims(rn % N, 0), tl::expand_dims(ks, 1) < K, 0.5f);
    return Values{tl::dot(at, bt, v[0])};
  });
  tl::store(c + tl::expand_dims(rm, 1) * N + tl::expand_dims(rn, 0), out[0],
            (tl::expand_dims(rm, 1) < M) & (tl::expand_dims(rn, 0) < N));
}
const KernelDef kPadded("padded_matmul", padded_matmul, {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK"});

TEST(Gemm, MaskedOperandsFilledWithOtherValues) {
  for (auto [M, N, K] : {std::tuple{128, 64, 80}, {70, 33, 45}, {64, 64, 64}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    std::vector<float> c(size_t(M) * N), want;
    compile(kPadded, {{"BM", 64}, {"BN", 64}, {"BK", 32}}).launch({tl::cdiv(M, 64), tl::cdiv(N, 64)}, a, b, c, M, N, K);
    ref::gemm(af, bf, want, M, N, K);
    const float tail = float((K + 31) / 32 * 32 - K) * 0.5f;
    for (float& w : want) w += tail;
    EXPECT_LT(ref::rel_error(c, want), 1e-6) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}

// What a launch with aligned sizes and unit strides compiles to on the GPU (no GPU needed).
TEST(Gemm, TritonTutorialStyleKernelIsPipelined) {
  using F = ArgFact;
  ArgFacts facts = {F::aligned16, F::aligned16, F::aligned16, F::aligned16, F::aligned16, F::aligned16,
                    F::aligned16, F::one,       F::aligned16, F::one,       F::aligned16, F::one};
  std::string ptx = jit::Context::global().emit(kTutorial, {{"BM", 64}, {"BN", 64}, {"BK", 32}}, Target::cuda("sm_80"),
                                                CompileOptions{}, jit::Stage::asm_, facts);
  EXPECT_NE(ptx.find("cp.async.cg.shared.global"), std::string::npos);
  EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), std::string::npos);
  EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
}

// A persistent GEMM as a kernel author writes it: the programs walk the tiles, and the K loop
// asks for warp specialization itself (tl::LoopHints), whatever the compile options say.
// `epilogue(rows, cols, acc)` does what the kernel does with each output tile.
template <class Epilogue>
void persistent_tiles(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Int M, tl::Int N, tl::Int K, int BM, int BN, int BK,
                      Epilogue epilogue) {
  auto tiles_n = (tl::maximum(N, 0) + (BN - 1)) / BN;
  auto tiles = (tl::maximum(M, 0) + (BM - 1)) / BM * tiles_n;
  tl::for_range(tl::program_id(0), tiles, tl::num_programs(0), [&](Tensor t) {
    auto rm = tl::expand_dims(t / tiles_n * BM + tl::arange(0, BM), 1);
    auto rn = tl::expand_dims(t % tiles_n * BN + tl::arange(0, BN), 0);
    auto rk = tl::arange(0, BK);
    auto acc = tl::for_range(
        0, K, BK, tl::zeros({BM, BN}, tl::float32),
        [&](Tensor k, Tensor acc) {
          auto ka = tl::expand_dims(k + rk, 0), kb = tl::expand_dims(k + rk, 1);
          auto at = tl::load(a + rm * K + ka, (rm < M) & (ka < K), 0.0f);
          auto bt = tl::load(b + kb * N + rn, (kb < K) & (rn < N), 0.0f);
          return tl::dot(at, bt, acc);
        },
        tl::LoopHints{.warp_specialize = true});
    epilogue(rm, rn, acc);
  });
}
void persistent_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K,
                       tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  persistent_tiles(a, b, M, N, K, BM, BN, BK,
                   [&](Tensor rm, Tensor rn, Tensor acc) { tl::store(c + rm * N + rn, acc, (rm < M) & (rn < N)); });
}
const KernelDef kPersistent("persistent_matmul", persistent_matmul, {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK"});
// An epilogue of arithmetic on the accumulator and a loaded tile: out = bf16(max(alpha AB + D, 0)).
void matmul_bias_relu(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> d, tl::Ptr<bf16> out, tl::Float alpha, tl::Int M,
                      tl::Int N, tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  persistent_tiles(a, b, M, N, K, BM, BN, BK, [&](Tensor rm, Tensor rn, Tensor acc) {
    auto mask = (rm < M) & (rn < N);
    auto y = tl::maximum(acc * alpha + tl::load(d + rm * N + rn, mask, 0.0f), 0.0f);
    tl::store(out + rm * N + rn, y.to(tl::bfloat16), mask);
  });
}
const KernelDef kBiasRelu("matmul_bias_relu", matmul_bias_relu,
                          {"a", "b", "d", "out", "alpha", "M", "N", "K", "BM", "BN", "BK"});
// An epilogue that needs the tile in the cyclic layout (a row reduction): row sums of AB.
void matmul_row_sums(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> sums, tl::Int M, tl::Int N, tl::Int K,
                     tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  persistent_tiles(a, b, M, N, K, BM, BN, BK, [&](Tensor rm, Tensor rn, Tensor acc) {
    auto rows = tl::reshape(rm, {int(BM)});
    tl::atomic_add(sums + rows, tl::sum(acc, 1), rows < M);
  });
}
const KernelDef kRowSums("matmul_row_sums", matmul_row_sums, {"a", "b", "sums", "M", "N", "K", "BM", "BN", "BK"});

// A persistent GEMM whose epilogue sums each tile's rows into a vector by atomics of a tensor
// (every N tile of a row adds to it), warp specialized where asked: the sums against A @ B's.
TEST(Gemm, PersistentRowSumsByTensorAtomics) {
  CompileOptions opts;
  opts.num_warps = 8;
  opts.num_stages = 4;
  opts.warp_specialize = true;
  for (auto [M, N, K] : {std::tuple{400, 272, 320}, {128, 512, 64}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    std::vector<float> sums(size_t(M), 0.0f), c, want(size_t(M), 0.0f);
    compile(kRowSums, {{"BM", 128}, {"BN", 128}, {"BK", 64}}, Target::default_target(), opts)
        .launch({5}, a, b, sums, M, N, K);
    ref::gemm(af, bf, c, M, N, K);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) want[size_t(m)] += c[size_t(m) * N + n];
    EXPECT_LT(ref::rel_error(sums, want), 1e-5) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
}

TEST(Gemm, PersistentKernelAsksForWarpSpecialization) {
  const Constants tiles = {{"BM", 128}, {"BN", 128}, {"BK", 64}};
  CompileOptions opts;
  opts.num_warps = 8;
  opts.num_stages = 4;
  for (auto [M, N, K] : {std::tuple{400, 272, 320}, {128, 512, 64}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    std::vector<bf16> a(af.size()), b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    std::vector<float> c(size_t(M) * N, 7.0f), want;
    compile(kPersistent, tiles, Target::default_target(), opts).launch({5}, a, b, c, M, N, K);
    ref::gemm(af, bf, want, M, N, K);
    EXPECT_LT(ref::rel_error(c, want), 1e-6) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
  // On sm_90a (no GPU needed): a producer warpgroup, though the options do not ask for one.
  std::string ptx = jit::Context::global().emit(kPersistent, tiles, Target::cuda("sm_90a"), opts, jit::Stage::asm_,
                                                ArgFacts(6, ArgFact::aligned16));
  EXPECT_NE(ptx.find(".maxntid 384, 1, 1"), std::string::npos);
  EXPECT_NE(ptx.find("setmaxnreg.dec.sync.aligned.u32 40;"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
}

// The epilogue's arithmetic and its load of D are done in the accumulator's MMA layout, each
// thread on its own elements: no staging of the 128x256 f32 tile in shared memory, so the
// loop's four stages (192 KiB) keep their warp specialization beside it.
TEST(Gemm, EpilogueInTheAccumulatorLayout) {
  const Constants tiles = {{"BM", 128}, {"BN", 256}, {"BK", 64}};
  CompileOptions opts;
  opts.num_warps = 8;
  opts.num_stages = 4;
  for (auto [M, N, K] : {std::tuple{400, 272, 320}, {256, 512, 128}}) {
    auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
    auto d = ref::random_floats(size_t(M) * N);
    std::vector<bf16> a(af.size()), b(bf.size()), out(size_t(M) * N, bf16(7.0f));
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    const float alpha = 0.75f;
    compile(kBiasRelu, tiles, Target::default_target(), opts).launch({3}, a, b, d, out, alpha, M, N, K);
    std::vector<float> ab, got(out.size()), want(out.size());
    ref::gemm(af, bf, ab, M, N, K);
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = float(bf16(std::max(alpha * ab[i] + d[i], 0.0f)));
      got[i] = float(out[i]);
    }
    // (bf16 outputs: an f32 sum in another order may round to the neighbouring bf16)
    EXPECT_LT(ref::rel_error(got, want), 2e-3) << M << "x" << N << "x" << K << " seed " << ref::last_seed();
  }
  std::string ptx = jit::Context::global().emit(kBiasRelu, tiles, Target::cuda("sm_90a"), opts, jit::Stage::asm_,
                                                ArgFacts(8, ArgFact::aligned16));
  EXPECT_NE(ptx.find("setmaxnreg"), std::string::npos);     // warp specialized: no 128 KiB staging
  EXPECT_NE(ptx.find("ld.global.v2."), std::string::npos);  // D, two columns of a fragment at a time
}

// Back-to-back dots through a cast accumulator, as attention does with P: O = bf16(A B) C
// (P_AS_B: O = C bf16(A B)). P comes out of its dot in the MMA layout; as the next dot's operand
// it must be converted before that dot stages its operands in shared memory (a conversion
// there once overwrote the staged operand).
void b2b_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<bf16> c, tl::Ptr<float> o, tl::Const<int> S,
                tl::Const<int> P_AS_B) {
  auto r = tl::expand_dims(tl::arange(0, S), 1), k = tl::expand_dims(tl::arange(0, S), 0);
  auto p = tl::dot(tl::load(a + r * S + k), tl::load(b + r * S + k)).to(tl::bfloat16);
  auto ct = tl::load(c + r * S + k);
  tl::store(o + r * S + k, P_AS_B ? tl::dot(ct, p) : tl::dot(p, ct));
}
const KernelDef kB2b("b2b_matmul", b2b_matmul, {"a", "b", "c", "o", "S", "P_AS_B"});

TEST(Gemm, BackToBackDotsThroughACastAccumulator) {
  const int S = 64;
  for (int p_as_b : {0, 1}) {
    auto af = ref::random_floats(S * S), bf = ref::random_floats(S * S), cf = ref::random_floats(S * S);
    std::vector<bf16> a(af.size()), b(bf.size()), c(cf.size());
    for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
    for (size_t i = 0; i < cf.size(); ++i) cf[i] = float(c[i] = bf16(cf[i]));
    std::vector<float> p, o(S * S, 7.0f), want;
    ref::gemm(af, bf, p, S, S, S);
    for (float& x : p) x = float(bf16(x));
    if (p_as_b)
      ref::gemm(cf, p, want, S, S, S);
    else
      ref::gemm(p, cf, want, S, S, S);
    compile(kB2b, {{"S", S}, {"P_AS_B", p_as_b}}).launch({1}, a, b, c, o);
    // (P rounded to bf16 from f32 sums made in another order may differ in its last bit)
    EXPECT_LT(ref::rel_error(o, want), 2e-3) << "P_AS_B=" << p_as_b << " seed " << ref::last_seed();
  }
}

// The load of an epilogue through a wait's token (dist::consume_token) is done in the
// accumulator's layout too: it compiles for sm_90a (it once stopped the compiler).
void matmul_plus_waited_tile(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> d, tl::Ptr<int32_t> flag,
                             tl::Ptr<float> out, tl::Const<int> S) {
  auto r = tl::expand_dims(tl::arange(0, S), 1), k = tl::expand_dims(tl::arange(0, S), 0);
  auto acc = tl::dot(tl::load(a + r * S + k), tl::load(b + r * S + k));
  auto token = dist::wait(flag, 1);
  tl::store(out + r * S + k, acc + tl::load(dist::consume_token(d + r * S + k, token)));
}
const KernelDef kWaitedTile("matmul_plus_waited_tile", matmul_plus_waited_tile, {"a", "b", "d", "flag", "out", "S"});

TEST(Gemm, EpilogueLoadThroughAWaitToken) {
  std::string ptx = jit::Context::global().emit(kWaitedTile, {{"S", 64}}, Target::cuda("sm_90a"), CompileOptions{},
                                                jit::Stage::asm_, ArgFacts(5, ArgFact::aligned16));
  EXPECT_NE(ptx.find("ld.acquire.gpu"), std::string::npos);
  EXPECT_NE(ptx.find("ld.global.v2."), std::string::npos);  // D in the accumulator's layout
}

// gemm_config's tiles on sm_90a: 128x256, but where N is short, C's 256x128 tiles computed
// transposed (as C^T's 128x256) if their waves, stream-K's last one included, are shorter; and
// for kernels that cannot transpose (ag_gemm, gemm_rs), 128x128 where the last wave of 128x256
// tiles would leave the GPU's SMs (132 on an H100 or H200, and assumed without a GPU) mostly idle.
TEST(Gemm, ConfigFillsTheLastWave) {
  if (cuda::available() && cuda::device().sms != 132) GTEST_SKIP() << "the choices below are for 132 SMs";
  if (!kernels::detail::library_warp_specialize())
    GTEST_SKIP() << "TILEDIST_WS=0: the library's GEMM is not persistent";
  const Target hopper = Target::cuda("sm_90a");
  EXPECT_EQ(kernels::gemm_config(hopper, 8192, 8192, 8192).bn, 256);
  EXPECT_EQ(kernels::gemm_config(hopper, 8192, 1024, 12288).bn, 256);  // 256 tiles: 2 full waves
  EXPECT_EQ(kernels::gemm_config(hopper, 8192, 896, 14336).bn, 256);   // 2 waves either way
  // 320 tiles of 128x256, half of the last column empty: 2.5 waves with stream-K's; 288 of
  // 256x128, 2.2 waves
  const kernels::GemmConfig t = kernels::gemm_config(hopper, 8192, 1152, 36864);
  EXPECT_EQ(t.bm, 256);
  EXPECT_EQ(t.bn, 128);
  EXPECT_EQ(t.constants.at("TRANSPOSED"), ConstValue(1));
  EXPECT_EQ(t.grid(8192, 1152).x, 132);
  const kernels::GemmConfig plain = kernels::gemm_config(hopper, 8192, 1152, 36864, false);
  EXPECT_EQ(plain.bn, 128);  // 576 tiles: 4.4 waves
  EXPECT_EQ(plain.constants.at("BN"), ConstValue(128));
  EXPECT_EQ(plain.constants.count("TRANSPOSED"), 0u);
}

// A decode step's GEMMs on sm_90a (M <= 64): persistent over the SMs with stream-K, and split_k
// runs a tile for the per-tile kernels (gemm_ar), so that 132 SMs read the weights: Qwen3-8B's
// qkv (48 tiles: 2 runs), O and down (32: 4), gate/up (192: whole, stream-K's last wave);
// $TILEDIST_DECODE_SPLIT=0 leaves them per tile and whole. Past M = 64, unchanged.
TEST(Gemm, DecodeGemmsSplitOverKToFillTheSms) {
  if (cuda::available() && cuda::device().sms != 132) GTEST_SKIP() << "the choices below are for 132 SMs";
  if (!kernels::detail::library_warp_specialize())
    GTEST_SKIP() << "TILEDIST_WS=0: the library's GEMM is not persistent";
  if (std::getenv("TILEDIST_DECODE_SPLIT") || std::getenv("TILEDIST_DECODE_BN"))
    GTEST_SKIP() << "the environment chooses";
  const Target hopper = Target::cuda("sm_90a");
  const kernels::GemmConfig qkv = kernels::gemm_config(hopper, 1, 6144, 4096);
  EXPECT_EQ(qkv.bn, 128);
  EXPECT_EQ(qkv.programs, 132);
  EXPECT_EQ(qkv.constants.at("PERSISTENT"), ConstValue(1));
  EXPECT_EQ(qkv.split_k, 2);
  EXPECT_EQ(kernels::gemm_config(hopper, 8, 4096, 4096, false).split_k, 4);
  EXPECT_EQ(kernels::gemm_config(hopper, 1, 4096, 12288, false).split_k, 4);
  EXPECT_EQ(kernels::gemm_config(hopper, 1, 24576, 4096).split_k, 1);
  EXPECT_EQ(kernels::gemm_config(hopper, 1, 4096, 256).split_k, 1);  // (4 K steps: not worth a cut)
  EXPECT_EQ(kernels::gemm_config(hopper, 128, 8192, 8192).programs, 0);
  EXPECT_EQ(kernels::gemm_config(hopper, 128, 8192, 8192).split_k, 1);
  setenv("TILEDIST_DECODE_SPLIT", "0", 1);
  const kernels::GemmConfig whole = kernels::gemm_config(hopper, 1, 6144, 4096);
  unsetenv("TILEDIST_DECODE_SPLIT");
  EXPECT_EQ(whole.programs, 0);
  EXPECT_EQ(whole.split_k, 1);
}

// Warp specialized where asked: an epilogue that reduces rows keeps the rows' sums in registers
// (their warps' partials meet in a few KiB of shared memory, above the rings the producer keeps
// for the whole kernel). The f8 GEMM's scaling is done in the MMA layout.
// ag_gemm's SM puts are warp specialized too: its pushing programs' puts are in the branch
// apart from the loop's (the warp_specialization pass's apart_from_rings).
TEST(Gemm, WarpSpecializationOnlyWhereItHolds) {
  CompileOptions opts;
  opts.num_warps = 8;
  opts.num_stages = 4;
  opts.warp_specialize = true;
  auto ptx = [&](const KernelDef& def, Constants c) {
    return jit::Context::global().emit(def, c, Target::cuda("sm_90a"), opts, jit::Stage::asm_,
                                       ArgFacts(def.runtime_params().size(), ArgFact::aligned16));
  };
  EXPECT_NE(ptx(kRowSums, {{"BM", 128}, {"BN", 256}, {"BK", 64}}).find("setmaxnreg"), std::string::npos);
  const std::string fp8 = ptx(kernels::gemm_fp8_kernel(ir::DType::f8e4m3), {{"BM", 128}, {"BN", 256}, {"BK", 128}});
  EXPECT_NE(fp8.find("setmaxnreg"), std::string::npos);
  Constants ag = {{"BM", 128}, {"BN", 256}, {"BK", 64}};
  EXPECT_NE(ptx(kernels::ag_gemm_kernel(), ag).find("setmaxnreg"), std::string::npos);
  // ag_gemm's signal waits order only its copies of A: the producer waits, the consumers do not
  // (one acquiring load in the kernel, and no consumer barrier around a wait's result).
  ag.insert_or_assign("PERSISTENT", 1);
  const std::string persistent_ag = ptx(kernels::ag_gemm_kernel(), ag);
  size_t acquires = 0;
  for (size_t at = persistent_ag.find("ld.acquire"); at != std::string::npos;
       at = persistent_ag.find("ld.acquire", at + 1))
    ++acquires;
  EXPECT_EQ(acquires, 1u);
  EXPECT_EQ(persistent_ag.find("barrier.sync \t1"), std::string::npos);
  ag.erase("PERSISTENT");
  ag.insert_or_assign("PUTS", 4);
  EXPECT_NE(ptx(kernels::ag_gemm_kernel(), ag).find("setmaxnreg"), std::string::npos);
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {

// Vectorization is decided by the axis analysis; these kernels look vectorizable but are not
// (each was once claimed to be), and must keep element-wise accesses on the GPU.
std::string ptx_of(const KernelDef& def, size_t runtime_args) {
  return jit::Context::global().emit(def, {}, Target::cuda("sm_80"), CompileOptions{}, jit::Stage::asm_,
                                     ArgFacts(runtime_args, ArgFact::aligned16));
}

void mask_by_pointer(tl::Ptr<float> p, tl::Ptr<float> out, tl::Int n) {
  auto ptrs = p + tl::arange(0, 512);
  auto end = p + n;  // the mask flips at element n, wherever that is
  tl::store(out + tl::arange(0, 512), tl::load(ptrs, ptrs < end, 0.0f));
}
void mask_by_reduction(tl::Ptr<float> p, tl::Ptr<float> out, tl::Int n) {
  auto r = tl::sum(tl::broadcast_to(tl::expand_dims(tl::arange(0, 512), 1), {512, 4}), 1);  // 4i
  tl::store(out + tl::arange(0, 512), tl::load(p + tl::arange(0, 512), r < n, 0.0f));
}
void negative_remainder(tl::Ptr<float> p, tl::Ptr<float> out) {
  auto offs = (tl::arange(0, 512) - 4) % 4;  // 0, -3, -2, -1, 0, 1, ...
  tl::store(out + tl::arange(0, 512), tl::load(p + 8 + offs));
}
void remainder_of_a_constant(tl::Ptr<float> p, tl::Ptr<float> out) {
  auto m = tl::expand_dims(32 % (tl::arange(0, 128) + 16), 1);  // not a multiple of 16 everywhere
  auto offs = m + tl::expand_dims(tl::arange(0, 4), 0);
  tl::store(out + tl::expand_dims(tl::arange(0, 128), 1) * 4 + tl::expand_dims(tl::arange(0, 4), 0),
            tl::load(p + offs));
}

TEST(Vectorization, OnlyWhereTheAnalysisProvesIt) {
  const KernelDef a("mask_by_pointer", mask_by_pointer, {"p", "out", "n"});
  const KernelDef b("mask_by_reduction", mask_by_reduction, {"p", "out", "n"});
  const KernelDef c("negative_remainder", negative_remainder, {"p", "out"});
  const KernelDef d("remainder_of_a_constant", remainder_of_a_constant, {"p", "out"});
  for (auto [def, args] : {std::pair{&a, 3}, {&b, 3}, {&c, 2}, {&d, 2}}) {
    std::string ptx = ptx_of(*def, args);
    EXPECT_EQ(ptx.find("ld.global.v"), std::string::npos) << def->name() << " loads vectors:\n" << ptx.substr(0, 3000);
  }
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

// The pipelined dot loops across their parameters (tile shapes, K steps, warps, stages), with
// aligned shapes (16-byte cp.async) and ragged ones (operands staged through registers). On the
// CPU backend a few of them run (the layouts are GPU notions); on a GPU all of them.
TEST(Gemm, PipelineSweep) {
  struct Case {
    int bm, bn, bk, warps, stages;
  };
  const Case cases[] = {{64, 64, 16, 4, 2},   {64, 64, 32, 2, 3}, {128, 64, 64, 4, 4},  {64, 128, 32, 8, 3},
                        {128, 128, 16, 8, 2}, {32, 64, 32, 1, 3}, {256, 128, 32, 8, 3}, {64, 32, 64, 2, 2}};
  const bool gpu = Target::default_target().kind == Target::Kind::nvptx;
  int run = 0;
  for (const Case& t : cases) {
    if (!gpu && run++ >= 2) break;
    for (auto [M, N, K] : {std::tuple{192, 160, 96}, {133, 71, 77}, {64, 256, 1040}}) {
      auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
      std::vector<f16> a(af.size()), b(bf.size());
      for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = f16(af[i]));
      for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = f16(bf[i]));
      std::vector<float> c(size_t(M) * N, std::nanf("")), want;
      CompileOptions opts = CompileOptions::from_env();
      opts.num_warps = t.warps;
      opts.num_stages = t.stages;
      compile(kernels::gemm_kernel(ir::DType::f16), {{"BM", t.bm}, {"BN", t.bn}, {"BK", t.bk}},
              Target::default_target(), opts)
          .launch({tl::cdiv(M, t.bm), tl::cdiv(N, t.bn)}, a, b, c, M, N, K);
      ref::gemm(af, bf, want, M, N, K);
      // f32 accumulation over K products: the error grows like sqrt(K) units of 2^-24.
      double tol = std::max(1e-6, 8e-8 * std::sqrt(double(K)));
      EXPECT_LT(ref::rel_error(c, want), tol)
          << M << "x" << N << "x" << K << " tiles " << t.bm << "x" << t.bn << "x" << t.bk << "/" << t.warps << "w/"
          << t.stages << "s seed " << ref::last_seed();
    }
  }
}

}  // namespace
}  // namespace tiledist
