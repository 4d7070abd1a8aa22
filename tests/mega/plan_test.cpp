// The plan of a task graph (mega::TaskGraph::plan) on the default target: the tile-level
// dependencies it finds (and the waits it drops), what a waiting tile fetches ahead, and the
// errors for a cycle and a read of nothing.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/kernels.h"
#include "mega/mega_kernel.h"
#include "tests/mega/mega_graphs.h"

namespace tiledist {
namespace {
using namespace testing_mega;  // NOLINT(google-build-using-namespace)

// gemm1's tile (i, j) waits for the norm's rows of its row block, each by its tile's word, and
// norm2's row r for gemm1's tiles of that row (they write its input and read its output's
// buffer; norm1's row r, which norm2's row r overwrites, those tiles waited for): never a whole
// task where a part is all that is read.
TEST(Mega, DependenciesAreTheTilesThatTouchTheSameElements) {
  Layer l(70, 64);
  mega::TaskGraph g = l.graph();
  const mega::Plan plan = g.plan();
  ASSERT_EQ(plan.order, (std::vector<int>{0, 1, 2, 3, 4}));
  std::vector<int64_t> first(5);
  for (size_t i = 0; i < plan.items.size(); ++i)
    if (plan.items[i].tile == 0) first[size_t(plan.items[i].task)] = int64_t(i);
  for (const mega::Plan::Item& it : plan.items) {
    std::vector<int32_t> words;
    for (int32_t d = it.deps_begin; d < it.deps_end; ++d) {
      EXPECT_EQ(plan.deps[size_t(d)].times, 1) << "task " << it.task << " tile " << it.tile;
      words.push_back(plan.deps[size_t(d)].word);
    }
    std::sort(words.begin(), words.end());
    std::vector<int32_t> want;
    if (it.task == 1) {  // gemm1 (i, j): norm1's rows 32i .. 32i + 31
      const int64_t i = it.tile % 3;
      for (int64_t r = 32 * i; r < std::min<int64_t>(70, 32 * i + 32); ++r) want.push_back(int32_t(first[0] + r));
    } else if (it.task == 2) {  // norm2 row r: gemm1's tiles (r / 32, 0) and (r / 32, 1) (norm1's row r:
      // implied, as those tiles waited for it)
      for (int64_t j = 0; j < 2; ++j) want.push_back(int32_t(first[1] + it.tile / 32 + 3 * j));
    } else {
      continue;
    }
    EXPECT_EQ(words, want) << "task " << it.task << " tile " << it.tile;
  }
  // The residual reads x (an input) and h2 by ranges of 256 elements: gemm2's tiles whose
  // blocks meet them, fewer than all six.
  for (const mega::Plan::Item& it : plan.items) {
    if (it.task != 4) continue;
    EXPECT_LT(it.deps_end - it.deps_begin, 6) << "residual tile " << it.tile;
  }
}

// Layers that reuse one scratch buffer: each tile waits for the tile of the layer before that
// read it last, not for every earlier layer's (those waits are implied, and dropped), so a tile's
// waits do not grow with the layers; the results are each layer's own.
TEST(Mega, WaitsThatOthersImplyAreDropped) {
  const Target target = Target::default_target();
  constexpr int kLayers = 6;
  const std::vector<float> x0 = ref::random_floats(1024);
  Scratch<float> x(target, x0), scratch(target, 1024);
  std::vector<Scratch<float>> y;
  for (int l = 0; l < kLayers; ++l) y.emplace_back(target, 1024);
  mega::TaskGraph g("layers");
  g.input(x.data(), 1024);
  using mega::in, mega::out, mega::cols;
  for (int l = 0; l < kLayers; ++l) {
    g.add(str_cat("write", l), kAdd, {}, Grid(4),
          {in(x.data(), 1024, cols(256)), in(x.data(), 1024, cols(256)), out(scratch.data(), 1024, cols(256)), 1024});
    g.add(str_cat("read", l), kAdd, {}, Grid(4),
          {in(scratch.data(), 1024, cols(256)), in(x.data(), 1024, cols(256)),
           out(y[size_t(l)].data(), 1024, cols(256)), 1024});
  }
  const mega::Plan plan = g.plan();
  ASSERT_EQ(plan.items.size(), size_t(kLayers * 2 * 4));
  for (const mega::Plan::Item& it : plan.items) {
    const int waits = it.deps_end - it.deps_begin;
    const std::string task = g.tasks()[size_t(it.task)].name;
    if (task == "write0") {
      EXPECT_EQ(waits, 0) << task << " tile " << it.tile;
      continue;
    }
    ASSERT_EQ(waits, 1) << task << " tile " << it.tile;
    // (read l: write l's tile; write l: read l - 1's)
    const mega::Plan::Dep d = plan.deps[size_t(it.deps_begin)];
    const mega::Plan::Item& on = plan.items[size_t(d.word)];
    const bool reads = task.rfind("read", 0) == 0;
    const int layer = std::stoi(task.substr(reads ? 4 : 5));
    EXPECT_EQ(g.tasks()[size_t(on.task)].name, reads ? str_cat("write", layer) : str_cat("read", layer - 1)) << task;
    EXPECT_EQ(on.tile, it.tile) << task;
  }
  mega::MegaKernel mk(g, target, 3);
  mk.run();
  for (int l = 0; l < kLayers; ++l) {
    const std::vector<float> got = y[size_t(l)].values();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], (x0[i] + x0[i]) + x0[i]) << "layer " << l << " element " << i;
  }
}

// What a tile reads that no task writes (weights, the step's inputs) is fetched into L2 while it
// waits (Plan::Fetch): a GEMM tile's rows of its weight as one run of whole lines, a recorded
// GEMM's columns of B (found in its code) as runs that cover each of its K rows; nothing that a
// task writes.
TEST(Mega, WhatATileReadsThatNothingWritesIsFetchedAhead) {
  constexpr int64_t kLine = 128;
  auto down = [](int64_t a) { return a / kLine * kLine; };
  auto up = [](int64_t a) { return (a + kLine - 1) / kLine * kLine; };
  auto lines_of = [&](const mega::Plan& plan, const mega::Plan::Item& it) {
    std::set<int64_t> lines;
    for (int32_t f = it.fetch_begin; f < it.fetch_end; ++f) {
      const mega::Plan::Fetch& run = plan.fetches[size_t(f)];
      EXPECT_EQ(run.addr % kLine, 0);
      EXPECT_EQ(run.bytes % kLine, 0);
      for (int64_t r = 0; r < run.count; ++r)
        for (int64_t b = 0; b < run.bytes; b += kLine) lines.insert(run.addr + r * run.stride + b);
    }
    return lines;
  };
  auto addr = [](const void* p) { return int64_t(uintptr_t(p)); };
  {
    Layer l(40, 96);
    const mega::TaskGraph g = l.graph();
    const mega::Plan plan = g.plan();
    for (const mega::Plan::Item& it : plan.items) {
      const mega::Task& t = g.tasks()[size_t(it.task)];
      const std::set<int64_t> lines = lines_of(plan, it);
      std::set<int64_t> want;  // (the tile's lines of the inputs it reads: x, w1, w2)
      auto add = [&](int64_t b, int64_t e) {
        for (int64_t a = down(b); a < up(e); a += kLine) want.insert(a);
      };
      const int64_t row = int64_t{32} * t.tile(it.tile).y, rows = std::min<int64_t>(32, l.H - row);
      if (t.name == "gemm1") add(addr(l.w1.data()) + row * l.H * 2, addr(l.w1.data()) + (row + rows) * l.H * 2);
      if (t.name == "gemm2") add(addr(l.w2.data()) + row * l.H * 2, addr(l.w2.data()) + (row + rows) * l.H * 2);
      if (t.name == "norm1") add(addr(l.x.data()) + it.tile * l.H * 4, addr(l.x.data()) + (it.tile + 1) * l.H * 4);
      if (t.name == "residual") {
        const int64_t first = it.tile * 256, last = std::min<int64_t>(first + 256, l.M * l.H);
        add(addr(l.x.data()) + first * 4, addr(l.x.data()) + last * 4);
      }
      EXPECT_EQ(lines, want) << t.name << " tile " << it.tile;
      if (t.name == "gemm1" || t.name == "gemm2") {
        EXPECT_EQ(it.fetch_end - it.fetch_begin, 1) << t.name;
      }
    }
  }
  {
    const Target target = Target::default_target();
    const int64_t M = 3, N = 96, K = 80;  // (a row of B: 192 bytes; a tile's 32 columns: 64)
    kernels::GemmConfig config;
    config.constants = {{"BM", 32}, {"BN", 32}, {"BK", 32}};
    config.bm = config.bn = 32, config.max_parts = 1;
    kernels::Gemm gemm(target, M, N, K, ir::DType::bf16, config);
    Scratch<bf16> a(target, random_bf16(size_t(M * K))), b(target, random_bf16(size_t(K * N)));
    Scratch<float> c(target, size_t(M * N));
    mega::TaskGraph g("recorded");
    g.input(a.data(), M * K), g.input(b.data(), K * N);
    g.record("gemm", [&] { gemm.run(a.data(), b.data(), c.data()); });
    const mega::Plan plan = g.plan();
    for (const mega::Plan::Item& it : plan.items) {
      const std::set<int64_t> lines = lines_of(plan, it);
      const int64_t col = int64_t{32} * g.tasks()[size_t(it.task)].tile(it.tile).y;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = col; j < col + 32; ++j)
          ASSERT_TRUE(lines.count(down(addr(b.data()) + (k * N + j) * 2))) << "B[" << k << ", " << j << "]";
      for (int64_t line : lines) {
        const bool in_a = line >= down(addr(a.data())) && line < up(addr(a.data()) + M * K * 2);
        const bool in_b = line >= down(addr(b.data())) && line < up(addr(b.data()) + K * N * 2);
        EXPECT_TRUE(in_a || in_b) << "a line of neither input: " << line;
      }
    }
  }
  {  // A tile that reads more: its first 256 KiB (A's row, then W's first rows), no more.
    const Target target = Target::default_target();
    const int64_t N = 32, K = 8192;  // (W [N, K]: the tile's 32 rows, 512 KiB)
    Scratch<bf16> a(target, size_t(K)), w(target, size_t(N * K));
    Scratch<float> c(target, size_t(N));
    mega::TaskGraph g("large");
    g.input(a.data(), K), g.input(w.data(), N * K);
    g.add("mm", kMatmul, {}, Grid(1, 1),
          {mega::in(a.data(), 1, K), mega::in(w.data(), N, K), mega::out(c.data(), 1, N), 1, N, K});
    const mega::Plan plan = g.plan();
    ASSERT_EQ(plan.items.size(), 1u);
    const std::set<int64_t> lines = lines_of(plan, plan.items[0]);
    EXPECT_EQ(int64_t(lines.size()) * kLine, int64_t(256) << 10);
    const int64_t w0 = down(addr(w.data()));
    EXPECT_TRUE(lines.count(w0)) << "W's first line";
    for (int64_t line : lines) {
      const bool in_a = line >= down(addr(a.data())) && line < up(addr(a.data()) + K * 2);
      EXPECT_TRUE(in_a || (line >= w0 && line < w0 + (int64_t(256) << 10)))
          << "a line past the first 256 KiB: " << line;
    }
  }
}

// A persistent stream-K GEMM's programs (kernels::Gemm, recorded) walk two tiles each: a whole
// one, then a run of K of the last wave's. Each fetches ahead the columns of B those two tiles
// read (exact footprints: the tile loop walked trip by trip), in a run of lines a tile, not one
// a row of B.
TEST(Mega, AStreamKProgramFetchesTheTilesItWalks) {
  constexpr int64_t kLine = 128;
  const Target target = Target::default_target();
  const int64_t M = 1, tiles = 16, N = 32 * tiles, K = 256;  // (a row of B: 1 KiB; a tile's 32 columns: 64 B)
  kernels::GemmConfig config;
  config.constants = {{"BM", 32}, {"BN", 32}, {"BK", 32}, {"PERSISTENT", 1}};
  config.bm = config.bn = 32, config.programs = 12, config.max_parts = 8;
  kernels::Gemm gemm(target, M, N, K, ir::DType::bf16, config);
  ASSERT_TRUE(gemm.stream_k());
  Scratch<bf16> a(target, size_t(M * K)), b(target, size_t(K * N));
  Scratch<float> c(target, size_t(M * N));
  mega::TaskGraph g("stream_k");
  g.input(a.data(), M * K), g.input(b.data(), K * N);
  g.record("gemm", [&] { gemm.run(a.data(), b.data(), c.data()); });
  const mega::Plan plan = g.plan();
  const int64_t b0 = int64_t(uintptr_t(b.data()));
  int64_t programs = 0;
  for (const mega::Plan::Item& it : plan.items) {
    if (g.tasks()[size_t(it.task)].name != "gemm#0") continue;
    ++programs;
    const int64_t p = it.tile;
    // (12 whole tiles, then the last wave's 4 each in 3 runs of K: program p walks tile p, then tile 12 + p % 4)
    const std::set<int64_t> walked = {p, 12 + p % 4};
    EXPECT_LE(it.fetch_end - it.fetch_begin, 3) << "program " << p << ": A's row and a run a tile";
    int64_t lines_of_b = 0;
    for (int32_t f = it.fetch_begin; f < it.fetch_end; ++f) {
      const mega::Plan::Fetch& run = plan.fetches[size_t(f)];
      for (int64_t r = 0; r < run.count; ++r)
        for (int64_t at = run.addr + r * run.stride; at < run.addr + r * run.stride + run.bytes; at += kLine) {
          if (at + kLine <= b0 || at >= b0 + K * N * 2) continue;  // (A's)
          ++lines_of_b;
          bool ours = false;  // (the line meets a walked tile's columns in its row)
          for (int64_t x = std::max(at, b0); x < std::min(at + kLine, b0 + K * N * 2); x += 2)
            ours = ours || walked.count((x - b0) / 2 % N / 32);
          EXPECT_TRUE(ours) << "program " << p << " fetches a line of B beyond its tiles: byte " << at - b0;
        }
    }
    EXPECT_GE(lines_of_b, K) << "program " << p << ": its whole tile's rows at least";
  }
  EXPECT_EQ(programs, 12);
}

TEST(Mega, ACycleIsRefusedNamingItsTasks) {
  Layer l(8, 16);
  mega::TaskGraph g = l.graph();
  g.after(0, 4);  // (norm1 after residual, which comes after it)
  try {
    g.plan();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("task graph 'layer' has a cycle: "), std::string::npos) << m;
    EXPECT_NE(m.find("'norm1'"), std::string::npos) << m;
    EXPECT_NE(m.find("'residual'"), std::string::npos) << m;
  }
}

TEST(Mega, AReadOfNothingIsRefusedNamingTheTaskAndArgument) {
  Layer l(8, 16);
  mega::TaskGraph g("step");
  g.input(l.w1.data(), int64_t{16} * 16);
  g.add("gemm", kMatmul, {}, Grid(1, 1),
        {mega::in(l.n.data(), 8, 16), mega::in(l.w1.data(), 16, 16), mega::out(l.h.data(), 8, 16), 8, 16, 16});
  try {
    g.plan();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("task graph 'step', task 'gemm' (matmul_nt) reads its argument 'a' (256 bytes"),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("which no task before it writes and which is not an input"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tiledist
