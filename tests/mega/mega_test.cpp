// The mega kernel (issue 33) on the default target (the CPU backend; a GPU with
// TILEDIST_TEST_GPU=1): task graphs of kernels written as Triton users write them (a row norm,
// a GEMM by tl::dot, an elementwise add), run as one persistent kernel, against the same
// kernels launched one by one and against a host reference in double precision. Fresh random
// shapes and inputs each run (the seed is printed on failure). Also: the errors for bad
// arguments (the plan's own tests: plan_test.cpp; the kernels and the layer: mega_graphs.h).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "jit/context.h"
#include "jit/trace.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "kernels/scratch.h"
#include "kernels/transformer.h"
#include "mega/kernel_access.h"
#include "mega/mega_kernel.h"
#include "runtime/profiler.h"
#include "tests/jit/error_of.h"
#include "tests/jit/temp_dir.h"
#include "tests/mega/mega_graphs.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using kernels::detail::Scratch;
using tl::Tensor;
using tl::Values;
using namespace testing_mega;  // NOLINT(google-build-using-namespace)

TEST(Mega, ALayerAsOneKernelAgreesWithItsKernelsOneByOne) {
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 4; ++round) {
    const int64_t M = 1 + int64_t(rng() % 100), H = 16 * (1 + int64_t(rng() % 8));  // (H ≤ the norm's BLOCK)
    Layer l(M, H);
    const auto schedule = round % 2 ? mega::Schedule::queue : mega::Schedule::round_robin;
    mega::MegaKernel mk(l.graph(), l.target, 1 + int(rng() % 8), schedule);
    for (int step = 0; step < 3; ++step) {  // (the later steps: new inputs, nothing reset)
      const std::vector<float> xs = ref::random_floats(size_t(M * H));
      l.x.assign(xs);
      mk.run();
      const std::vector<float> got = l.y.values();
      // The same kernels launched one after the other.
      launch_one_by_one(l.graph(), l.target);
      const std::vector<float> one_by_one = l.y.values();
      const double err = rel(got, l.reference(xs));
      const double err_kernels = rel(got, std::vector<double>(one_by_one.begin(), one_by_one.end()));
      std::printf("  M=%ld H=%ld, %d programs (%s), step %d: relative error %.2e (reference), %.2e (one by one)\n", M,
                  H, mk.programs(), round % 2 ? "queue" : "round robin", step, err, err_kernels);
      EXPECT_LT(err, 2e-2) << "M=" << M << " H=" << H << " seed " << ref::last_seed();
      EXPECT_LT(err_kernels, 1e-5) << "M=" << M << " H=" << H << " seed " << ref::last_seed();
    }
  }
}

// A transformer's MLP block from the kernel library's own kernels (RMSNorm with the residual,
// the GEMM, SwiGLU), every buffer given as mega::buf: as one kernel, against the same kernels
// launched one by one (which the library's tests check against references).
TEST(Mega, TheLibrarysKernelsAsTasks) {
  std::mt19937 rng(std::random_device{}());
  const Target target = Target::default_target();
  for (int round = 0; round < 2; ++round) {
    const int64_t B = 1 + int64_t(rng() % 40), H = 16 * (1 + int64_t(rng() % 16)), I = 16 * (1 + int64_t(rng() % 16));
    const std::vector<float> xs = ref::random_floats(size_t(B * H));
    Scratch<float> x(target, xs), gu(target, size_t(B * 2 * I)), out(target, size_t(B * H));
    Scratch<bf16> residual(target, random_bf16(size_t(B * H))), w(target, random_bf16(size_t(H)));
    Scratch<bf16> w13(target, random_bf16(size_t(H * 2 * I))), w2(target, random_bf16(size_t(I * H)));
    Scratch<bf16> y(target, size_t(B * H)), sum(target, size_t(B * H)), act(target, size_t(B * I));
    mega::TaskGraph g("mlp");
    for (const void* p : {static_cast<const void*>(x.data()), static_cast<const void*>(residual.data())})
      g.input_bytes(p, B * H * 4);
    g.input(w.data(), H), g.input(w13.data(), H * 2 * I), g.input(w2.data(), I * H);
    using mega::buf;
    const int block = int(std::min<uint64_t>(1024, std::bit_ceil(uint64_t(H))));
    g.add("norm", kernels::rmsnorm_kernel(ir::DType::f32), {{"RESIDUAL", 1}, {"BLOCK", block}}, Grid(B),
          {buf(x.data(), B, H, mega::rows(1)), buf(residual.data(), B, H, mega::rows(1)), buf(w.data(), H),
           buf(y.data(), B, H, mega::rows(1)), buf(sum.data(), B, H, mega::rows(1)), H, 1e-6f});
    g.add("up", kernels::gemm_kernel(ir::DType::bf16), {}, Grid(tl::cdiv(B, 64), tl::cdiv(2 * I, 64)),
          {buf(y.data(), B, H), buf(w13.data(), H, 2 * I), buf(gu.data(), B, 2 * I), B, 2 * I, H});
    g.add("swiglu", kernels::swiglu_kernel(ir::DType::f32), {}, Grid(tl::cdiv(B, 16), tl::cdiv(I, 256)),
          {buf(gu.data(), B, 2 * I), buf(act.data(), B, I, mega::block(16, 0, 256, 1)), B, I});
    g.add("down", kernels::gemm_kernel(ir::DType::bf16), {}, Grid(tl::cdiv(B, 64), tl::cdiv(H, 64)),
          {buf(act.data(), B, I), buf(w2.data(), I, H), buf(out.data(), B, H), B, H, I});
    mega::MegaKernel step(g, target, 1 + int(rng() % 8));
    step.run();
    const std::vector<float> got = out.values();
    const std::vector<bf16> got_sum = sum.values();
    launch_one_by_one(g, target);
    const std::vector<float> want = out.values();
    const double err = rel(got, std::vector<double>(want.begin(), want.end()));
    std::printf("  B=%ld H=%ld I=%ld, %d programs: relative error %.2e (one by one)\n", B, H, I, step.programs(), err);
    EXPECT_LT(err, 1e-5) << "B=" << B << " H=" << H << " I=" << I;
    const std::vector<bf16> want_sum = sum.values();
    for (size_t i = 0; i < want_sum.size(); ++i)
      ASSERT_EQ(float(got_sum[i]), float(want_sum[i])) << "the residual's sum, element " << i;
  }
}

// kernels::Gemm's run recorded as tasks, then a task of ours that adds a bias to its output:
// the graph, and the step checked against the object run and the add launched alone.
struct RecordedGemm {
  int64_t M, N, K;
  Target target = Target::default_target();
  kernels::Gemm gemm;
  Scratch<bf16> a, b;
  Scratch<float> c, bias, y;
  RecordedGemm(int64_t m, int64_t n, int64_t k, const kernels::GemmConfig& config)
      : M(m), N(n), K(k), gemm(target, m, n, k, ir::DType::bf16, config) {
    a = Scratch<bf16>(target, random_bf16(size_t(M * K))), b = Scratch<bf16>(target, random_bf16(size_t(K * N)));
    c = Scratch<float>(target, size_t(M * N)), bias = Scratch<float>(target, ref::random_floats(size_t(M * N)));
    y = Scratch<float>(target, size_t(M * N));
  }
  mega::TaskGraph graph(const std::string& name, std::vector<int>* gemm_tasks = nullptr) {
    mega::TaskGraph g(name);
    g.input(bias.data(), M * N);
    g.input(a.data(), M * K), g.input(b.data(), K * N);
    const std::vector<int> tasks = g.record("gemm", [&] { gemm.run(a.data(), b.data(), c.data()); });
    if (gemm_tasks) *gemm_tasks = tasks;
    g.add("bias", kAdd, {}, Grid(tl::cdiv(M * N, 256)),
          {mega::in(c.data(), M * N, mega::cols(256)), mega::in(bias.data(), M * N, mega::cols(256)),
           mega::out(y.data(), M * N, mega::cols(256)), M * N});
    return g;
  }
  void check(mega::MegaKernel& step) {
    step.run();
    const std::vector<float> got = y.values();
    gemm.run(a.data(), b.data(), c.data());
    compile(kAdd, {}, target)
        .launch_args(Grid(tl::cdiv(M * N, 256)),
                     {tiledist::detail::make_arg(c.data(), M * N), tiledist::detail::make_arg(bias.data(), M * N),
                      tiledist::detail::make_arg(y.data(), M * N), tiledist::detail::to_arg(M * N)});
    const std::vector<float> want = y.values();
    EXPECT_LT(rel(got, std::vector<double>(want.begin(), want.end())), 1e-6) << M << "x" << N << "x" << K;
  }
};

// A library object's run recorded as tasks (TaskGraph::record): a program per tile; as one
// kernel, against the object run and the add launched alone.
TEST(Mega, ALibraryObjectsRunRecordedAsTasks) {
  std::mt19937 rng(std::random_device{}());
  const int64_t M = 1 + int64_t(rng() % 70), N = 16 * (1 + int64_t(rng() % 8)), K = 16 * (1 + int64_t(rng() % 8));
  kernels::GemmConfig config;
  config.constants = {{"BM", 32}, {"BN", 32}, {"BK", 32}};
  config.bm = config.bn = 32, config.max_parts = 1;
  RecordedGemm r(M, N, K, config);
  ASSERT_FALSE(r.gemm.stream_k());
  std::vector<int> gemm_tasks;
  const mega::TaskGraph g = r.graph("recorded", &gemm_tasks);
  ASSERT_EQ(gemm_tasks, std::vector<int>{0});
  EXPECT_EQ(g.tasks()[0].name, "gemm#0");
  mega::MegaKernel step(g, r.target, 4);
  r.check(step);
}

// A decode step's GEMM as the library makes it on a GPU (persistent, each tile's K split into
// runs whose last to end sums them: stream-K) recorded as tasks: its programs' partial sums and
// counts are bounded by their code, so the task after it waits on the programs that may write
// its elements, not on the whole task; as one kernel, twice (the counts cleared by the last run
// of each tile).
TEST(Mega, AStreamKGemmRecordedAsTasks) {
  std::mt19937 rng(std::random_device{}());
  // (32 tiles of C over 64 programs: each tile in 2 runs; a bias tile reads 8 of C's tiles)
  kernels::GemmConfig config;
  config.constants = {{"BM", 32}, {"BN", 32}, {"BK", 32}, {"PERSISTENT", 1}};
  config.bm = config.bn = 32, config.programs = 64, config.max_parts = 8;
  RecordedGemm r(1, 1024, 32 * (8 + int64_t(rng() % 8)), config);
  ASSERT_TRUE(r.gemm.stream_k());
  mega::MegaKernel step(r.graph("stream_k"), r.target, 4);
  EXPECT_NE(step.summary().find("64 dependencies (0 on whole tasks)"), std::string::npos) << step.summary();
  for (int run = 0; run < 2; ++run) r.check(step);
}

// A step that fails names the task and tile it was running (here an out-of-bounds store, caught
// with bounds checked: on a GPU a fault ends the context, and gpu.dist.faults covers its waits).
TEST(Mega, AFailedStepNamesTheTaskAndTile) {
  const Target target = Target::default_target();
  if (target.is_gpu()) GTEST_SKIP() << "bounds are checked on the host";
  Scratch<float> a(target, 1024), b(target, 1024), c(target, 1024), d(target, 512);
  mega::TaskGraph g("faulty");
  g.input(a.data(), 1024), g.input(b.data(), 1024);
  CompileOptions checked = CompileOptions::from_env();
  checked.check_bounds = true;
  using mega::in, mega::out, mega::cols;
  g.add("fine", kAdd, {}, Grid(4),
        {in(a.data(), 1024, cols(256)), in(b.data(), 1024, cols(256)), out(c.data(), 1024, cols(256)), 1024}, checked);
  g.add("too_far", kAdd, {}, Grid(4),
        {in(c.data(), 1024, cols(256)), in(b.data(), 1024, cols(256)), out(d.data(), 512, cols(256)), 1024}, checked);
  mega::MegaKernel mk(g, target, 2);
  try {
    mk.run();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out-of-bounds store"), std::string::npos) << m;
    EXPECT_TRUE(std::regex_search(m, std::regex("in task graph 'faulty', program [01] was running task 'too_far' "
                                                "\\(add_f32\\) tile \\([23], 0, 0\\)")))
        << m;
  }
}

// The persistent kernel through each GPU target's passes and lowering, on any machine (its
// code, not run): every task's body (a dot loop among them) under the item loop's branches.
TEST(Mega, ThePersistentKernelCompilesForEveryGpuTarget) {
  Layer l(70, 64);
  const mega::TaskGraph g = l.graph();
  const mega::Plan plan = g.plan();
  test_util::TempDir dir;
  jit::Context ctx(dir.path.string());
  for (auto schedule : {mega::Schedule::round_robin, mega::Schedule::queue}) {
    const std::unique_ptr<KernelDef> def = mega::persistent_kernel(g, plan, 4, schedule);
    for (const Target& target : {Target::cuda("sm_90a"), Target::cuda("sm_80"), Target::amdgcn("gfx942")}) {
      std::string code;
      try {
        code = ctx.emit(*def, {}, target, CompileOptions{}, jit::Stage::asm_);
      } catch (const Error& e) {
        // (AMD's code links the ROCm device libraries' math, which `make` installs here; a GPU
        // machine of NVIDIA's may lack them)
        if (target.key().rfind("gfx", 0) == 0 &&
            std::string(e.what()).find("ocml.bc cannot be read") != std::string::npos) {
          std::printf("  %s not made: no ROCm device libraries here (%s)\n", target.key().c_str(), e.what());
          continue;
        }
        ADD_FAILURE() << target.key() << ": " << e.what();
        continue;
      }
      EXPECT_NE(code.find("mega_layer"), std::string::npos) << target.key();
      // (a waiting tile's weights asked of L2: Plan::Fetch)
      // and an item's dependencies polled together, relaxed, with one acquire fence at GPU
      // scope after them)
      if (target.key().rfind("sm_", 0) == 0) {
        EXPECT_NE(code.find("prefetch.L2"), std::string::npos) << target.key();
        EXPECT_NE(code.find("ld.relaxed.gpu.global.b64"), std::string::npos) << target.key();
        EXPECT_NE(code.find("fence.acq_rel.gpu;"), std::string::npos) << target.key();
        EXPECT_EQ(code.find("ld.acquire.sys"), std::string::npos) << target.key();
      }
      const std::string ptxas = "/usr/local/cuda/bin/ptxas";
      if (target.is_gpu() && target.key().rfind("sm_", 0) == 0 && std::filesystem::exists(ptxas)) {
        const std::string file = (dir.path / (target.key() + ".ptx")).string();
        std::ofstream(file) << code;
        const std::string cmd = str_cat(ptxas, " -arch=", target.key(), " ", file, " -o ", file, ".cubin");
        EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
      }
    }
  }
}

TEST(Mega, WhatAKernelReadsAndWritesIsReadFromItsCode) {
  auto uses = [](const KernelDef& def) {
    std::string out;
    for (const mega::PointerUse& u : mega::pointer_uses(def, {}))
      out += str_cat(u.reads ? "r" : "-", u.writes ? "w" : "-", u.surely_reads == u.reads ? "" : "?",
                     u.surely_writes == u.writes ? "" : "?", " ");
    return out;
  };
  EXPECT_EQ(uses(kRowNorm), "r- -w -- ");
  EXPECT_EQ(uses(kMatmul), "r- r- -w -- -- -- ");
  EXPECT_EQ(uses(kAdd), "r- r- -w -- ");
  // (a and b carried together through the loop: each may be either load's, surely neither's)
  EXPECT_EQ(uses(kCarried), "r-? r-? -w rw -- -- -- ");
}

// The same layer with every buffer given as mega::buf: the kernels' code says which are read
// and written, and the plan is the one the explicit declarations give.
TEST(Mega, BuffersTakeTheirUseFromTheKernel) {
  Layer l(70, 64);
  const mega::Plan want = l.graph().plan();
  mega::TaskGraph g("layer");
  const int64_t M = 70, H = 64;
  g.input(l.x.data(), M * H), g.input(l.w1.data(), H * H), g.input(l.w2.data(), H * H);
  const Grid mm(tl::cdiv(M, 32), tl::cdiv(H, 32));
  using mega::buf;
  g.add("norm1", kRowNorm, {}, Grid(M),
        {buf(l.x.data(), M, H, mega::rows(1)), buf(l.n.data(), M, H, mega::rows(1)), H});
  g.add("gemm1", kMatmul, {}, mm,
        {buf(l.n.data(), M, H, mega::rows(32)), buf(l.w1.data(), H, H, mega::rows(32, 1)),
         buf(l.h.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
  g.add("norm2", kRowNorm, {}, Grid(M),
        {buf(l.h.data(), M, H, mega::rows(1)), buf(l.n.data(), M, H, mega::rows(1)), H});
  g.add("gemm2", kMatmul, {}, mm,
        {buf(l.n.data(), M, H, mega::rows(32)), buf(l.w2.data(), H, H, mega::rows(32, 1)),
         buf(l.h2.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
  g.add("residual", kAdd, {}, Grid(tl::cdiv(M * H, 256)),
        {buf(l.x.data(), M * H, mega::cols(256)), buf(l.h2.data(), M * H, mega::cols(256)),
         buf(l.y.data(), M * H, mega::cols(256)), M * H});
  const mega::Plan got = g.plan();
  ASSERT_EQ(got.items.size(), want.items.size());
  ASSERT_EQ(got.deps.size(), want.deps.size());
  for (size_t i = 0; i < got.deps.size(); ++i) {
    EXPECT_EQ(got.deps[i].word, want.deps[i].word) << i;
    EXPECT_EQ(got.deps[i].times, want.deps[i].times) << i;
  }
}

TEST(Mega, ABufferDeclaredAgainstWhatItsKernelDoesIsRefused) {
  Layer l(8, 16);
  mega::TaskGraph g("step");
  auto error = [&](std::vector<mega::Arg> args) {
    try {
      g.add("norm", kRowNorm, {}, Grid(8), std::move(args));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({mega::in(l.x.data(), 8, 16), mega::in(l.n.data(), 8, 16), 16}),
            "tiledist: task graph 'step', task 'norm' (row_norm): its kernel writes its parameter 'y', given as "
            "mega::in (mega::out or inout, or mega::buf to take what the kernel does)");
  EXPECT_EQ(error({mega::out(l.x.data(), 8, 16), mega::out(l.n.data(), 8, 16), 16}),
            "tiledist: task graph 'step', task 'norm' (row_norm): its kernel only reads its parameter 'x', given as "
            "mega::out (mega::in, or mega::buf to take what the kernel does)");
}

// y = alpha · x + y over n elements (an i64 count, an f32 scale: every kind of scalar a task's
// arguments table holds).
void axpy(tl::Ptr<float> x, tl::Ptr<float> y, tl::Float alpha, tl::Int64 n, tl::Int offset, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto m = i < n;
  tl::store(y + offset + i, alpha * tl::load(x + i, m, 0.0f) + tl::load(y + offset + i, m, 0.0f), m);
}
const KernelDef kAxpy("axpy_f32", axpy, {"x", "y", "alpha", "n", "offset", "BLOCK"}, {{"BLOCK", 64}});

// A thousand tasks of one kernel (a model's layers, many times over) share a body in the
// persistent kernel, each given its own arguments (pointers, an f32, an i64, an i32) from the
// table: the kernel takes five parameters however many tasks it runs, and every task's result
// is its own.
TEST(Mega, TasksOfOneKernelShareOneBody) {
  const Target target = Target::default_target();
  constexpr int kTasks = 1100;
  constexpr int64_t kN = 48;
  std::vector<float> x0 = ref::random_floats(size_t(kTasks) * kN), y0 = ref::random_floats(size_t(kTasks) * kN);
  Scratch<float> x(target, x0), y(target, y0);
  std::vector<float> alpha(kTasks);
  std::mt19937 rng(std::random_device{}());
  for (float& a : alpha) a = std::uniform_real_distribution<float>(-2, 2)(rng);
  mega::TaskGraph g("wide");
  g.input(x.data(), kTasks * kN), g.input(y.data(), kTasks * kN);
  for (int t = 0; t < kTasks; ++t) {
    // (the x's by pointer, the y's by offset: both kinds of argument vary)
    g.add(str_cat("axpy", t), kAxpy, {}, Grid(1),
          {mega::in(x.data() + t * kN, kN), mega::inout(y.data(), kTasks * kN, mega::cols(kN)), alpha[size_t(t)],
           int64_t{kN}, int(t * kN)});
  }
  // (two bodies: the first task's offset, 0, is not known a multiple of 16; the others' are)
  const mega::TaskBodies bodies = mega::task_bodies(g);
  std::vector<int> want_of(kTasks, 1);
  want_of[0] = 0;
  EXPECT_EQ(bodies.first, (std::vector<int>{0, 1}));
  EXPECT_EQ(bodies.of, want_of);
  mega::MegaKernel mk(g, target, 8);
  EXPECT_EQ(mk.kernel().ir().body.args.size(), 5u);  // (its tables: items, deps, words, args, fetches)
  mk.run();
  const std::vector<float> got = y.values();
  std::vector<double> want(got.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double(alpha[i / kN]) * x0[i] + y0[i];
  EXPECT_LT(rel(got, want), 1e-6);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i << " (task " << i / kN << ")";
}

// Tasks of one kernel differ in body where what their arguments tell differs (an aligned
// pointer and one that is not: the aligned one's accesses may be vectorized) or their grids,
// constants or stage counts do.
TEST(Mega, TasksWhoseArgumentsTellOtherwiseGetTheirOwnBody) {
  std::vector<float> x(256), y(256);
  mega::TaskGraph g("bodies");
  g.input(x.data(), 256), g.input(y.data(), 256);
  const auto add = [&](int grid, int64_t x_at, Constants c, int stages = CompileOptions::from_env().num_stages) {
    CompileOptions o = CompileOptions::from_env();
    o.num_stages = stages;
    g.add(str_cat("t", g.tasks().size()), kAxpy, std::move(c), Grid(grid),
          {mega::in(x.data() + x_at, 64), mega::inout(y.data(), 256), 1.5f, int64_t{64}, 0}, o);
  };
  add(1, 0, {}), add(1, 16, {}), add(1, 1, {}), add(2, 0, {}), add(1, 0, {{"BLOCK", 32}}), add(1, 32, {});
  add(1, 0, {}, 7);  // (its loops pipelined otherwise)
  EXPECT_EQ(mega::task_bodies(g).of, (std::vector<int>{0, 0, 1, 2, 3, 0, 4}));
}

// Profiled, the persistent kernel shows each program's tiles on its timeline: a span a tile,
// named after its kernel, with its task and tile, after the spans of the tiles it waits for;
// before each, its wait ("wait KERNEL").
TEST(Mega, TheProfilerShowsEachProgramsTiles) {
  const Target target = Target::default_target();
  test_util::TempDir dir;
  Scratch<float> a(target, ref::random_floats(1024)), b(target, ref::random_floats(1024)), c(target, 1024),
      d(target, 1024);
  CompileOptions profiled = CompileOptions::from_env();
  profiled.profile = dir.path.string();
  mega::TaskGraph g("profiled");
  g.input(a.data(), 1024), g.input(b.data(), 1024);
  using mega::in, mega::out, mega::cols;
  g.add("first", kAdd, {}, Grid(4),
        {in(a.data(), 1024, cols(256)), in(b.data(), 1024, cols(256)), out(c.data(), 1024, cols(256)), 1024}, profiled);
  g.add("second", kAdd, {}, Grid(4),
        {in(c.data(), 1024, cols(256)), in(b.data(), 1024, cols(256)), out(d.data(), 1024, cols(256)), 1024}, profiled);
  mega::MegaKernel mk(g, target, 2);
  mk.run();
  const trace::Trace t = trace::read(runtime::trace_path(dir.path.string(), runtime::profile_rank()));
  ASSERT_EQ(t.launches.size(), 1u);
  EXPECT_EQ(t.launches[0].kernel, "mega_profiled");
  EXPECT_EQ(t.launches[0].dropped, 0);
  std::map<std::pair<int64_t, int64_t>, trace::Span> tiles;  // (task, tile)
  int waits = 0;
  for (const trace::Span& sp : t.spans) {
    if (sp.name == "wait add_f32") ++waits;
    if (sp.name != "add_f32") continue;
    ASSERT_EQ(sp.coords.size(), 2u);
    EXPECT_TRUE(tiles.emplace(std::make_pair(sp.coords[0], sp.coords[1]), sp).second)
        << "task " << sp.coords[0] << " tile " << sp.coords[1] << " twice";
  }
  EXPECT_EQ(waits, 8);
  ASSERT_EQ(tiles.size(), 8u);
  for (int64_t tile = 0; tile < 4; ++tile) {
    ASSERT_TRUE(tiles.count({0, tile}) && tiles.count({1, tile})) << "tile " << tile;
    EXPECT_GE(tiles.at({1, tile}).start_ns, tiles.at({0, tile}).end_ns()) << "tile " << tile;
  }
  std::set<int64_t> tracks;
  for (const auto& [key, sp] : tiles) tracks.insert(sp.track);
  EXPECT_LE(tracks.size(), 2u);  // (the two programs', or on a GPU their SMs')
}

// A program's warps may be chosen (every body runs on them): a power of two up to 32.
TEST(Mega, ItsWarpsAreChosenOrRefused) {
  Layer l(8, 16);
  const mega::TaskGraph g = l.graph();
  const std::string e = test_util::error_of([&] { mega::MegaKernel(g, Target::host(), 2, mega::Schedule::queue, 3); });
  EXPECT_NE(e.find("task graph 'layer': 3 warps a program (0, or a power of two up to 32)"), std::string::npos) << e;
  mega::MegaKernel eight(g, Target::default_target(), 2, mega::Schedule::queue, 8);
  EXPECT_EQ(eight.kernel().source()->options.num_warps, 8);
}

TEST(Mega, ArgumentsThatDoNotFitTheKernelAreRefused) {
  Layer l(8, 16);
  mega::TaskGraph g("step");
  auto expect_error = [&](const std::function<void()>& f, const std::string& want) {
    try {
      f();
      ADD_FAILURE() << "no error, wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error([&] { g.add("norm", kRowNorm, {}, Grid(8), {mega::in(l.x.data(), 8, 16), 16}); },
               "task graph 'step', task 'norm' (row_norm): 2 arguments for the kernel's 3 runtime parameters");
  expect_error([&] { g.add("norm", kRowNorm, {}, Grid(8), {mega::in(l.x.data(), 8, 16), 3, 16}); },
               "its parameter 'y' is a pointer (ptr<bf16>); give a buffer");
  expect_error(
      [&] { g.add("norm", kRowNorm, {}, Grid(8), {mega::in(l.x.data(), 8, 16), mega::out(l.h.data(), 8, 16), 16}); },
      "its parameter 'y' points to bf16, given a buffer of f32");
  expect_error([&] { g.after(0, 0); }, "after(0, 0)");
}

}  // namespace
}  // namespace tiledist
