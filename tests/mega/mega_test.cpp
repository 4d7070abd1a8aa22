// The mega kernel (issue 33) on the default target (the CPU backend; a GPU with
// TILEDIST_TEST_GPU=1): task graphs of kernels written as Triton users write them (a row norm,
// a GEMM by tl::dot, an elementwise add), run as one persistent kernel, against the same
// kernels launched one by one and against a host reference in double precision. Fresh random
// shapes and inputs each run (the seed is printed on failure). Also: the tile-level
// dependencies the plan finds, and the errors for a cycle, a read of nothing and bad arguments.
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

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using kernels::detail::Scratch;
using tl::Tensor;
using tl::Values;

// Each row scaled by the inverse of its root mean square, rounded to bf16: one program a row.
void row_norm(tl::Ptr<float> x, tl::Ptr<bf16> y, tl::Int cols, tl::Const<int> BLOCK) {
  auto base = tl::program_id(0) * cols;
  auto c = tl::arange(0, BLOCK);
  auto m = c < cols;
  auto v = tl::load(x + base + c, m, 0.0f);
  auto rstd = tl::rsqrt(tl::sum(v * v, 0) / cols.to(tl::float32) + 1e-6f);
  tl::store(y + base + c, (v * rstd).to(tl::bfloat16), m);
}
const KernelDef kRowNorm("row_norm", row_norm, {"x", "y", "cols", "BLOCK"}, {{"BLOCK", 128}});

// c = a · wᵀ (a: M × K, w: N × K, c: M × N, f32), a tile of c a program.
void matmul_nt(tl::Ptr<bf16> a, tl::Ptr<bf16> w, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
               tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::expand_dims(tl::program_id(0) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(1) * BN + tl::arange(0, BN), 0);
  auto rk = tl::arange(0, BK);
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
    auto ka = tl::expand_dims(k + rk, 0), kw = tl::expand_dims(k + rk, 1);
    auto at = tl::load(a + rm * K + ka, (rm < M) & (ka < K), 0.0f);
    auto wt = tl::load(w + rn * K + kw, (rn < N) & (kw < K), 0.0f);
    return tl::dot(at, wt, acc);
  });
  tl::store(c + rm * N + rn, acc, (rm < M) & (rn < N));
}
const KernelDef kMatmul("matmul_nt", matmul_nt, {"a", "w", "c", "M", "N", "K", "BM", "BN", "BK"},
                        {{"BM", 32}, {"BN", 32}, {"BK", 32}});

// out = x + y, BLOCK elements a program.
void add(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  tl::store(out + i, tl::load(x + i, i < n, 0.0f) + tl::load(y + i, i < n, 0.0f), i < n);
}
const KernelDef kAdd("add_f32", add, {"x", "y", "out", "n", "BLOCK"}, {{"BLOCK", 256}});

// c = a · b with the operands' pointers carried through the loop (Triton's tutorial), and the
// count of programs done kept by an atomic: what pointer_uses must see through.
void carried_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Ptr<int32_t> done, tl::Int M, tl::Int N,
                    tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::expand_dims(tl::program_id(0) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(1) * BN + tl::arange(0, BN), 0);
  auto rk = tl::arange(0, BK);
  Values out = tl::for_range(
      0, tl::cdiv(K, BK), 1,
      {tl::zeros({BM, BN}, tl::float32), a + rm * K + tl::expand_dims(rk, 0), b + tl::expand_dims(rk, 1) * N + rn},
      [&](Tensor k, Values v) {
        auto at = tl::load(v[1], (rm < M) & (tl::expand_dims(rk, 0) < K - k * BK), 0.0f);
        auto bt = tl::load(v[2], (tl::expand_dims(rk, 1) < K - k * BK) & (rn < N), 0.0f);
        return Values{tl::dot(at, bt, v[0]), v[1] + BK, v[2] + BK * N};
      });
  tl::store(c + rm * N + rn, out[0], (rm < M) & (rn < N));
  tl::atomic_add(done, 1);
}
const KernelDef kCarried("carried_matmul", carried_matmul, {"a", "b", "c", "done", "M", "N", "K", "BM", "BN", "BK"},
                         {{"BM", 32}, {"BN", 32}, {"BK", 32}});

std::vector<bf16> random_bf16(size_t n) {
  std::vector<float> f = ref::random_floats(n);
  return std::vector<bf16>(f.begin(), f.end());
}

// The host reference: norm (rounded to bf16), a · wᵀ, in double.
std::vector<double> norm_ref(const std::vector<double>& x, int64_t M, int64_t H) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < M; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < H; ++c) ss += x[size_t(r * H + c)] * x[size_t(r * H + c)];
    const double rstd = 1 / std::sqrt(ss / H + 1e-6);
    for (int64_t c = 0; c < H; ++c) y[size_t(r * H + c)] = double(float(bf16(float(x[size_t(r * H + c)] * rstd))));
  }
  return y;
}
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<bf16>& w, int64_t M, int64_t N,
                               int64_t K) {
  std::vector<double> c(size_t(M) * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[size_t(i * K + k)] * double(float(w[size_t(j * K + k)]));
      c[size_t(i * N + j)] = s;
    }
  return c;
}

double rel(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

// The graph's tasks as kernels launched one after the other, each over its own grid.
void launch_one_by_one(const mega::TaskGraph& g, const Target& target) {
  for (const mega::Task& t : g.tasks()) {
    std::vector<LaunchArg> args;
    for (const mega::Arg& a : t.args) {
      LaunchArg la = a.launch_arg();
      la.on_device = a.is_buffer && target.is_gpu();
      args.push_back(la);
    }
    compile(*t.def, t.constants, target).launch_args(t.grid, args);
  }
}

// A layer's worth of tasks over H × H weights: norm, GEMM, norm again of the GEMM's output
// into the same buffer the first GEMM read (it must wait for that GEMM's reads), a second
// GEMM, and the residual added.
struct Layer {
  int64_t M, H;
  Target target = Target::default_target();
  Scratch<float> x, h, h2, y;
  Scratch<bf16> n, w1, w2;
  std::vector<bf16> w1_host, w2_host;
  Layer(int64_t m, int64_t hid) : M(m), H(hid) {
    x = Scratch<float>(target, size_t(M * H));
    h = Scratch<float>(target, size_t(M * H));
    h2 = Scratch<float>(target, size_t(M * H));
    y = Scratch<float>(target, size_t(M * H));
    n = Scratch<bf16>(target, size_t(M * H));
    w1_host = random_bf16(size_t(H * H)), w2_host = random_bf16(size_t(H * H));
    w1 = Scratch<bf16>(target, w1_host), w2 = Scratch<bf16>(target, w2_host);
  }
  mega::TaskGraph graph() {
    using mega::in, mega::out, mega::inout;
    mega::TaskGraph g("layer");
    g.input(x.data(), M * H), g.input(w1.data(), H * H), g.input(w2.data(), H * H);
    const Grid mm(tl::cdiv(M, 32), tl::cdiv(H, 32));
    g.add("norm1", kRowNorm, {}, Grid(M), {in(x.data(), M, H, mega::rows(1)), out(n.data(), M, H, mega::rows(1)), H});
    g.add("gemm1", kMatmul, {}, mm,
          {in(n.data(), M, H, mega::rows(32)), in(w1.data(), H, H, mega::rows(32, 1)),
           out(h.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
    g.add("norm2", kRowNorm, {}, Grid(M), {in(h.data(), M, H, mega::rows(1)), out(n.data(), M, H, mega::rows(1)), H});
    g.add("gemm2", kMatmul, {}, mm,
          {in(n.data(), M, H, mega::rows(32)), in(w2.data(), H, H, mega::rows(32, 1)),
           out(h2.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
    g.add("residual", kAdd, {}, Grid(tl::cdiv(M * H, 256)),
          {in(x.data(), M * H, mega::cols(256)), in(h2.data(), M * H, mega::cols(256)),
           out(y.data(), M * H, mega::cols(256)), M * H});
    return g;
  }
  std::vector<double> reference(const std::vector<float>& xs) const {
    std::vector<double> xd(xs.begin(), xs.end());
    std::vector<double> y =
        matmul_ref(norm_ref(matmul_ref(norm_ref(xd, M, H), w1_host, M, H, H), M, H), w2_host, M, H, H);
    for (size_t i = 0; i < y.size(); ++i) y[i] += xd[i];
    return y;
  }
};

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
      if (target.key().rfind("sm_", 0) == 0) {
        EXPECT_NE(code.find("prefetch.L2"), std::string::npos) << target.key();
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
// named after its kernel, with its task and tile, after the spans of the tiles it waits for.
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
    if (sp.name == "wait") ++waits;
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
      const int64_t row = 32 * t.tile(it.tile).y, rows = std::min<int64_t>(32, l.H - row);
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
      const int64_t col = 32 * g.tasks()[size_t(it.task)].tile(it.tile).y;
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

// A program's warps may be chosen (every body runs on them): a power of two up to 32.
TEST(Mega, ItsWarpsAreChosenOrRefused) {
  Layer l(8, 16);
  const mega::TaskGraph g = l.graph();
  const std::string e = test_util::error_of([&] { mega::MegaKernel(g, Target::host(), 2, mega::Schedule::queue, 3); });
  EXPECT_NE(e.find("task graph 'layer': 3 warps a program (0, or a power of two up to 32)"), std::string::npos) << e;
  mega::MegaKernel eight(g, Target::default_target(), 2, mega::Schedule::queue, 8);
  EXPECT_EQ(eight.kernel().source()->options.num_warps, 8);
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
