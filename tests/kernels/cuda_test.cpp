// The CUDA runtime on a real GPU: streams and events ordering kernels, more than 48 KB of
// dynamic shared memory, and errors that name the failing driver call. Skipped (with the
// reason) where the default target is not a GPU.
#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "tests/jit/error_of.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;

bool on_gpu() { return Target::default_target().kind == Target::Kind::nvptx; }
#define REQUIRE_GPU() \
  if (!on_gpu()) GTEST_SKIP() << "the default target is not a CUDA GPU (" << cuda::unavailable_reason() << ")"

using test_util::error_of;

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

TEST(Cuda, MoreThan48KBOfSharedMemory) {
  REQUIRE_GPU();
  CompileOptions opts;
  opts.num_stages = 4;  // 4 x 16 KB of operand buffers, and 64 KB for the epilogue
  int M = 256, N = 256, K = 512;
  auto k = compile(kernels::gemm_kernel(ir::DType::bf16), {{"BM", 128}, {"BN", 128}, {"BK", 32}},
                   Target::default_target(), opts);
  auto af = ref::random_floats(size_t(M) * K), bf = ref::random_floats(size_t(K) * N);
  std::vector<bf16> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = bf16(af[i]));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = bf16(bf[i]));
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
