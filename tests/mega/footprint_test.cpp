// Tile footprints (mega/footprint.h): what a program of a kernel may touch, read from its traced
// IR, against the elements its addresses reach enumerated here one by one (fresh random shapes
// and tiles each run); against a run on the host (every element a kernel wrote lies in its
// tiles' footprints); unbounded where an offset comes from memory or from a rank not given; and
// a library object's recorded GEMM whose tiles are followed by a task's tiles that wait for
// the GEMM's tiles of their rows only.
#include "mega/footprint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "dsl/dist.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "mega/mega_kernel.h"

namespace tiledist {
namespace {
using kernels::detail::Scratch;
using tl::Tensor;

// c = a · b (a: M × K, b: K × N bf16, c: M × N f32), as Triton's tutorial writes it: pointers
// advanced through K in the loop.
void matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
            tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::program_id(0) * BM + tl::arange(0, BM);
  auto rn = tl::program_id(1) * BN + tl::arange(0, BN);
  auto rk = tl::arange(0, BK);
  auto a_ptrs = a + tl::expand_dims(rm, 1) * K + tl::expand_dims(rk, 0);
  auto b_ptrs = b + tl::expand_dims(rk, 1) * N + tl::expand_dims(rn, 0);
  auto out = tl::for_range(0, tl::cdiv(K, BK), 1, tl::Values{tl::zeros({BM, BN}, tl::float32), a_ptrs, b_ptrs},
                           [&](Tensor k, tl::Values v) {
                             auto left = K - k * BK;
                             auto at = tl::load(v[1], tl::expand_dims(rk, 0) < left, 0.0f);
                             auto bt = tl::load(v[2], tl::expand_dims(rk, 1) < left, 0.0f);
                             return tl::Values{tl::dot(at, bt, v[0]), v[1] + BK, v[2] + BK * N};
                           });
  auto cm = tl::expand_dims(rm, 1), cn = tl::expand_dims(rn, 0);
  tl::store(c + cm * N + cn, out[0], (cm < M) & (cn < N));
}
const KernelDef kMatmul("fp_matmul", matmul, {"a", "b", "c", "M", "N", "K", "BM", "BN", "BK"});

// y[r] = x[index[r]]: rows gathered by an index read from memory, four a program.
void gather(tl::Ptr<int32_t> index, tl::Ptr<float> x, tl::Ptr<float> y, tl::Int cols) {
  auto r = tl::program_id(0) * 4 + tl::arange(0, 4);
  auto c = tl::arange(0, 16);
  auto src = tl::expand_dims(tl::load(index + r), 1) * cols + tl::expand_dims(c, 0);
  auto dst = tl::expand_dims(r, 1) * cols + tl::expand_dims(c, 0);
  tl::store(y + dst, tl::load(x + src));
}
const KernelDef kGather("fp_gather", gather, {"index", "x", "y", "cols"});

// This rank's slice of out: 64 elements a program at rank · n.
void by_rank(tl::Ptr<float> x, tl::Ptr<float> out, tl::Int n) {
  auto i = tl::program_id(0) * 64 + tl::arange(0, 64);
  tl::store(out + dist::rank() * n + i, tl::load(x + i));
}
const KernelDef kByRank("fp_by_rank", by_rank, {"x", "out", "n"});

// y = 2 x, 256 elements a program.
void twice(tl::Ptr<float> x, tl::Ptr<float> y, tl::Int n) {
  auto i = tl::program_id(0) * 256 + tl::arange(0, 256);
  tl::store(y + i, tl::load(x + i, i < n, 0.0f) * 2.0f, i < n);
}
const KernelDef kTwice("fp_twice", twice, {"x", "y", "n"});

// The byte ranges of a set of element offsets (each `bytes` wide).
mega::Ranges ranges_of(const std::vector<int64_t>& elems, int64_t bytes) {
  mega::Ranges r;
  for (int64_t e : elems) mega::add_range(r, e * bytes, e * bytes + bytes);
  return r;
}

std::vector<LaunchArg> launch_args(const std::vector<LaunchArg>& pointers, const std::vector<int64_t>& scalars) {
  std::vector<LaunchArg> out = pointers;
  for (int64_t v : scalars) out.push_back(tiledist::detail::to_arg(v));
  return out;
}

TEST(Footprint, ATilesFootprintIsTheElementsItsAddressesReach) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const int BM = 16 << (rng() % 3), BN = 16 << (rng() % 3), BK = 16 << (rng() % 2);
    const int64_t M = 1 + rng() % 100, N = 1 + rng() % 100, K = 1 + rng() % 100;
    const int gm = int((M + BM - 1) / BM), gn = int((N + BN - 1) / BN);
    const int pm = int(rng() % uint32_t(gm)), pn = int(rng() % uint32_t(gn));
    const auto f = kMatmul.trace({{"BM", BM}, {"BN", BN}, {"BK", BK}});
    std::vector<char> mem(1);
    const LaunchArg p = tiledist::detail::make_arg(reinterpret_cast<bf16*>(mem.data()), 0);
    const LaunchArg q = tiledist::detail::make_arg(reinterpret_cast<float*>(mem.data()), 0);
    const std::vector<mega::Footprint> fp =
        mega::footprints(*f, launch_args({p, p, q}, {M, N, K}), {pm, pn, 0}, {gm, gn, 1});
    ASSERT_EQ(fp.size(), 6u);
    // What the addresses reach: a's rows of the tile over every k below K, b's columns (the
    // loop, of at most 7 trips here, is walked trip by trip: each trip's k is known, and its
    // mask bounds k + arange by K; a loop of more trips would reach every k it takes), c's
    // block within M × N (its mask does).
    const int64_t k_end = K;
    std::vector<int64_t> a, b, c;
    for (int64_t r = int64_t(pm) * BM; r < int64_t(pm) * BM + BM; ++r)
      for (int64_t k = 0; k < k_end; ++k) a.push_back(r * K + k);
    for (int64_t k = 0; k < k_end; ++k)
      for (int64_t n = int64_t(pn) * BN; n < int64_t(pn) * BN + BN; ++n) b.push_back(k * N + n);
    for (int64_t r = int64_t(pm) * BM; r < std::min(M, int64_t(pm) * BM + BM); ++r)
      for (int64_t n = int64_t(pn) * BN; n < std::min(N, int64_t(pn) * BN + BN); ++n) c.push_back(r * N + n);
    const std::string at = str_cat(M, "x", N, "x", K, " tiles ", BM, "x", BN, "x", BK, " tile (", pm, ", ", pn, ")");
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(fp[size_t(i)].bounded) << at;
    EXPECT_EQ(fp[0].reads, ranges_of(a, 2)) << at;
    EXPECT_EQ(fp[1].reads, ranges_of(b, 2)) << at;
    EXPECT_EQ(fp[2].writes, ranges_of(c, 4)) << at;
    EXPECT_TRUE(fp[0].writes.empty() && fp[1].writes.empty() && fp[2].reads.empty()) << at;
    for (int i = 3; i < 6; ++i) EXPECT_FALSE(fp[size_t(i)].touched()) << at;
  }
}

// Every element a run wrote lies in some tile's footprint, and the tiles' footprints of c
// (rows and columns that exist) do not overlap.
TEST(Footprint, WhatARunWritesLiesInItsTilesFootprints) {
  std::mt19937 rng(std::random_device{}());
  const int64_t M = 1 + rng() % 80, N = 1 + rng() % 80, K = 1 + rng() % 80;
  const Constants k = {{"BM", 32}, {"BN", 16}, {"BK", 16}};
  const Grid grid(int((M + 31) / 32), int((N + 15) / 16));
  Scratch<bf16> a(Target::host(), std::vector<bf16>(size_t(M * K), bf16(1.0f)));
  Scratch<bf16> b(Target::host(), std::vector<bf16>(size_t(K * N), bf16(1.0f)));
  Scratch<float> c(Target::host(), std::vector<float>(size_t(M * N), NAN));
  const std::vector<LaunchArg> args =
      launch_args({tiledist::detail::make_arg(a.data(), M * K), tiledist::detail::make_arg(b.data(), K * N),
                   tiledist::detail::make_arg(c.data(), M * N)},
                  {M, N, K});
  compile(kMatmul, k, Target::host()).launch_args(grid, args);
  const auto f = kMatmul.trace(k);
  mega::Ranges all;
  for (int x = 0; x < grid.x; ++x)
    for (int y = 0; y < grid.y; ++y) {
      const std::vector<mega::Footprint> fp = mega::footprints(*f, args, {x, y, 0}, {grid.x, grid.y, 1});
      for (auto [begin, end] : fp[2].writes) mega::add_range(all, begin, end);
    }
  const std::vector<float> got = c.values();
  for (int64_t i = 0; i < M * N; ++i) {
    ASSERT_FALSE(std::isnan(got[size_t(i)])) << "element " << i << " not written";
    EXPECT_TRUE(mega::ranges_meet(all, {{i * 4, i * 4 + 4}})) << "element " << i << " outside every footprint";
  }
}

TEST(Footprint, AnOffsetFromMemoryOrAnUnknownRankIsUnbounded) {
  std::vector<char> mem(1);
  const LaunchArg i32 = tiledist::detail::make_arg(reinterpret_cast<int32_t*>(mem.data()), 0);
  const LaunchArg f32 = tiledist::detail::make_arg(reinterpret_cast<float*>(mem.data()), 0);
  const std::vector<mega::Footprint> g =
      mega::footprints(*kGather.trace({}), launch_args({i32, f32, f32}, {16}), {3, 0, 0}, {8, 1, 1});
  EXPECT_EQ(g[0].reads, (mega::Ranges{{48, 64}}));  // (index[12 .. 15])
  EXPECT_FALSE(g[1].bounded);                       // (x at rows read from index)
  EXPECT_EQ(g[2].writes, (mega::Ranges{{12 * 64, 16 * 64}}));
  const auto f = kByRank.trace({});
  const std::vector<LaunchArg> args = launch_args({f32, f32}, {1000});
  EXPECT_FALSE(mega::footprints(*f, args, {2, 0, 0}, {4, 1, 1})[1].bounded);
  const std::vector<mega::Footprint> r = mega::footprints(*f, args, {2, 0, 0}, {4, 1, 1}, 3, 4);
  EXPECT_EQ(r[0].reads, (mega::Ranges{{128 * 4, 192 * 4}}));
  EXPECT_EQ(r[1].writes, (mega::Ranges{{(3000 + 128) * 4, (3000 + 192) * 4}}));
}

// kernels::Gemm recorded (a program per 32 × 32 tile of C, M = 70, N = 32: three row blocks),
// then a task of 256 elements (8 rows) a tile: each of its tiles waits for the GEMM's tile of
// its rows, by that tile's word, and for nothing else.
TEST(Footprint, ARecordedGemmsTilesAreWaitedForByTheTilesThatReadThem) {
  const Target target = Target::default_target();
  const int64_t M = 70, N = 32, K = 48;
  kernels::GemmConfig config;
  config.constants = {{"BM", 32}, {"BN", 32}, {"BK", 16}};
  config.bm = config.bn = 32, config.max_parts = 1;
  kernels::Gemm gemm(target, M, N, K, ir::DType::bf16, config);
  Scratch<bf16> a(target, size_t(M * K)), b(target, size_t(K * N));
  Scratch<float> c(target, size_t(M * N)), y(target, size_t(M * N));
  mega::TaskGraph g("rows");
  g.input(a.data(), M * K), g.input(b.data(), K * N);
  g.record("gemm", [&] { gemm.run(a.data(), b.data(), c.data()); });
  ASSERT_EQ(g.tasks().size(), 1u);
  ASSERT_EQ(g.tasks()[0].tiles(), 3);
  g.add("twice", kTwice, {}, Grid(int((M * N + 255) / 256)),
        {mega::buf(c.data(), M * N), mega::buf(y.data(), M * N), M * N});
  const mega::Plan plan = g.plan();
  ASSERT_EQ(plan.order, (std::vector<int>{0, 1}));
  for (const mega::Plan::Item& it : plan.items) {
    if (it.task != 1) continue;
    ASSERT_EQ(it.deps_end - it.deps_begin, 1) << "tile " << it.tile;
    const mega::Plan::Dep& d = plan.deps[size_t(it.deps_begin)];
    EXPECT_EQ(d.times, 1) << "tile " << it.tile;
    EXPECT_EQ(d.word, int32_t(it.tile * 8 / 32)) << "tile " << it.tile;  // (the GEMM's tile j: rows 32j ..)
  }
}

}  // namespace
}  // namespace tiledist
