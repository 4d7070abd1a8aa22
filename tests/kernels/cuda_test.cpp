// The CUDA runtime on a real GPU: streams and events ordering kernels, more than 48 KB of
// dynamic shared memory, and errors that name the failing driver call. Skipped (with the
// reason) where the default target is not a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "jit/trace.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "runtime/profiler.h"
#include "tests/jit/error_of.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

bool on_gpu() { return Target::default_target().kind == Target::Kind::nvptx; }
#define REQUIRE_GPU() \
  if (!on_gpu()) GTEST_SKIP() << "the default target is not a CUDA GPU (" << cuda::unavailable_reason() << ")"

using test_util::error_of;

/// A GEMM operand of `n` random elements in bf16, and the same values in f32 (the reference's).
std::pair<std::vector<bf16>, std::vector<float>> bf16_operand(size_t n) {
  std::vector<float> f = ref::random_floats(n);
  std::vector<bf16> h(n);
  for (size_t i = 0; i < n; ++i) f[i] = float(h[i] = bf16(f[i]));
  return {std::move(h), std::move(f)};
}

TEST(Cuda, StreamsAndEventsOrderKernels) {
  REQUIRE_GPU();
  const int n = 1 << 22;
  auto xs = ref::random_floats(n), ys = ref::random_floats(n);
  cuda::Buffer<float> x(xs), y(ys), mid(n), out(n);
  auto add = compile(kernels::add_kernel(), {{"BLOCK", 1024}});
  runtime::Stream first, second;
  runtime::Event start, produced, finished;
  start.record(&first);
  add.launch_on(first, {tl::cdiv(n, 1024)}, x, y, mid, n);  // mid = x + y
  produced.record(&first);
  produced.make_wait(second);  // second runs after first's kernel, without the host waiting
  add.launch_on(second, {tl::cdiv(n, 1024)}, mid, y, out, n);  // out = x + 2y
  finished.record(&second);
  finished.synchronize();
  EXPECT_TRUE(finished.done());
  EXPECT_TRUE(second.idle());
  EXPECT_GE(finished.elapsed_since(start), 0.0f);
  std::vector<float> got = out.download(), want(n);
  for (int i = 0; i < n; ++i) want[i] = (xs[i] + ys[i]) + ys[i];
  EXPECT_EQ(ref::rel_error(got, want), 0.0) << "seed " << ref::last_seed();
}

TEST(Cuda, HostVectorsOnAStreamComeBackAfterIt) {
  REQUIRE_GPU();
  const int n = 100003;
  auto xs = ref::random_floats(n), ys = ref::random_floats(n);
  std::vector<float> out(n), want;
  runtime::Stream s;
  compile(kernels::add_kernel(), {{"BLOCK", 1024}}).launch_on(s, {tl::cdiv(n, 1024)}, xs, ys, out, n);
  ref::add(xs, ys, want);
  EXPECT_EQ(ref::rel_error(out, want), 0.0);
}

// A raw pointer is taken as what it points at: the device's memory (another library's, as a
// model's tensors are) where it lies, at its own alignment (a pointer 4 bytes into a buffer
// gets the variant without 16-byte accesses); the host's memory has no size to copy, and is
// refused by name.
TEST(Cuda, RawPointersAreTakenAsWhatTheyPointAt) {
  REQUIRE_GPU();
  const int n = 100003;
  auto xs = ref::random_floats(n + 1), ys = ref::random_floats(n + 1);
  cuda::Buffer<float> x(xs), y(ys), out(size_t(n) + 1);
  auto add = compile(kernels::add_kernel(), {{"BLOCK", 1024}});
  for (int skew : {0, 1}) {
    out.upload(std::vector<float>(size_t(n) + 1, -1.0f));
    add.launch({tl::cdiv(n, 1024)}, x.data() + skew, y.data() + skew, out.data() + skew, n);
    cuda::synchronize();
    std::vector<float> got = out.download(), want(size_t(n) + 1, -1.0f);
    for (int i = 0; i < n; ++i) want[size_t(i + skew)] = xs[size_t(i + skew)] + ys[size_t(i + skew)];
    EXPECT_EQ(ref::rel_error(got, want), 0.0) << "skew " << skew << ", seed " << ref::last_seed();
  }
  std::vector<float> host(size_t(n) + 1);
  std::string e = error_of([&] { add.launch({tl::cdiv(n, 1024)}, x, host.data(), out, n); });
  EXPECT_NE(e.find("argument 1 ('y')"), std::string::npos) << e;
  EXPECT_NE(e.find("raw host pointer"), std::string::npos) << e;
}

TEST(Cuda, MoreThan48KBOfSharedMemory) {
  REQUIRE_GPU();
  CompileOptions opts;
  opts.num_stages = 4;  // 4 x 16 KB of operand buffers, and 64 KB for the epilogue
  int M = 256, N = 256, K = 512;
  auto k = compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", 128}, {"BN", 128}, {"BK", 32}},
                   Target::default_target(), opts);
  auto [a, af] = bf16_operand(size_t(M) * K);
  auto [b, bf] = bf16_operand(size_t(K) * N);
  std::vector<float> c(size_t(M) * N), want;
  k.launch({2, 2}, a, b, c, M, N, K);
  ref::gemm(af, bf, want, M, N, K);
  EXPECT_LT(ref::rel_error(c, want), 1e-6);
  // The variant that ran (aligned arguments) is the one with the pipeline.
  auto aligned =
      jit::Context::global().compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", 128}, {"BN", 128}, {"BK", 32}},
                                     Target::default_target(), opts, ArgFacts(6, ArgFact::aligned16));
  EXPECT_GT(aligned->artifact.scratch_bytes, 48 * 1024);
}

TEST(Cuda, AProfiledGemmTracesEveryProgramOnItsSm) {
  REQUIRE_GPU();
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/tiledist-cuda-profile-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  CompileOptions opts = CompileOptions::from_env();
  opts.profile = dir;
  const int M = 512, N = 512, K = 256;
  auto k = compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", 128}, {"BN", 128}, {"BK", 64}},
                   Target::default_target(), opts);
  auto [a, af] = bf16_operand(size_t(M) * K);
  auto [b, bf] = bf16_operand(size_t(K) * N);
  cuda::Buffer<bf16> da(a), db(b);
  cuda::Buffer<float> dc(size_t(M) * N);
  k.launch({4, 4}, da, db, dc, M, N, K);
  std::vector<float> want;
  ref::gemm(af, bf, want, M, N, K);
  EXPECT_LT(ref::rel_error(dc.download(), want), 1e-5) << "seed " << ref::last_seed();

  const trace::Trace t = trace::read(runtime::trace_path(dir, runtime::profile_rank()));
  ASSERT_EQ(t.launches.size(), 1u);
  EXPECT_EQ(t.launches[0].dropped, 0);
  EXPECT_EQ(t.launches[0].records, static_cast<int64_t>(2 * t.spans.size()));
  EXPECT_GE(t.launches[0].clock_error_ns, 0);
  EXPECT_LT(t.launches[0].clock_error_ns, 1000000000);
  EXPECT_GT(t.launches[0].kernel_ns, 0) << "the kernel timed by events";
  std::set<int64_t> programs;
  std::map<int64_t, std::vector<const trace::Span*>> by_program;
  for (const trace::Span& s : t.spans) {
    ASSERT_EQ(s.program.size(), 3u);
    const int64_t p = s.program[0] + 4 * s.program[1];
    programs.insert(p);
    by_program[p].push_back(&s);
    EXPECT_EQ(t.track_names.at({s.rank, s.track}).rfind("SM ", 0), 0u) << t.track_names.at({s.rank, s.track});
    EXPECT_GE(s.start_ns, t.launches[0].at_ns - t.launches[0].clock_error_ns) << s.name;
    EXPECT_GT(s.dur_ns, 0) << s.name;
  }
  EXPECT_EQ(programs.size(), 16u) << "every program has its spans";
  std::set<std::vector<int64_t>> tiles;
  for (auto& [p, spans] : by_program) {
    // The kernel's region holds the main loop, marked with its tile's coordinates.
    const trace::Span* whole = nullptr;
    const trace::Span* loop = nullptr;
    for (const trace::Span* s : spans) {
      if (s->name == k.name()) whole = s;
      if (s->name == "mainloop") loop = s;
    }
    ASSERT_TRUE(whole && loop) << "program " << p;
    EXPECT_LE(whole->start_ns, loop->start_ns);
    EXPECT_GE(whole->end_ns(), loop->end_ns());
    tiles.insert(loop->coords);
  }
  EXPECT_EQ(tiles.size(), 16u) << "every tile's coordinates, once";
}

TEST(Cuda, ErrorsNameTheCallAndTheCudaError) {
  REQUIRE_GPU();
  std::string e = error_of([] { runtime::Module(cuda::api(), "this is not PTX", "garbage"); });
  EXPECT_NE(e.find("cuModuleLoadDataEx"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA_ERROR_"), std::string::npos) << e;
  e = error_of([] { cuda::malloc(size_t(1) << 50); });  // a petabyte
  EXPECT_NE(e.find("cuMemAlloc"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << e;
  runtime::Stream s;
  e = error_of([&] {
    std::vector<float> x(16);
    compile(kernels::add_kernel(), {{"BLOCK", 16}}, Target::host()).launch_on(s, {1}, x, x, x, 16);
  });
  EXPECT_NE(e.find("compiled for the host"), std::string::npos) << e;
}

}  // namespace
}  // namespace tiledist
