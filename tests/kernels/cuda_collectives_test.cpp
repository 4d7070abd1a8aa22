// The kernel library's communicating objects on GPUs (kernels/collectives.cpp, ag_gemm.cpp,
// gemm_rs.cpp), one process per GPU, run by `tiledist-run -n N cuda_collectives_test` (ctest's
// gpu.collectives.ranks2; skipped, exit 77, where there is no CUDA GPU). Ranks may share a GPU.
// Every rank checks its own results (tests/kernels/collectives_check.h, shared with the CPU
// world's collectives_test), and the overlapped GEMMs at Triton-distributed's check shapes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "kernels/reference.h"
#include "tests/jit/error_of.h"
#include "tests/kernels/collectives_check.h"
#include "tests/kernels/ep_check.h"
#include "tests/kernels/flash_decode_check.h"
#include "tests/kernels/moe_check.h"
#include "tests/kernels/sp_attention_check.h"
#include "tests/model/model_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

// The kernel library's collectives on GPU memory (kernels/collectives.cpp).
template <class T>
struct DeviceMemory {
  std::unique_ptr<cuda::Buffer<T>> b;
  static DeviceMemory make(const std::vector<T>& v) { return {std::make_unique<cuda::Buffer<T>>(v)}; }
  T* ptr() { return b->data(); }
  std::vector<T> get() const { return b->download(); }
};
TEST(GpuKernels, LibraryCollectives) {
  testing_collectives::check<DeviceMemory>(Target::cuda(), 256 << 10);  // 100003 floats go in pieces
}
TEST(GpuKernels, LibraryCollectivesOfBf16) {
  testing_collectives::check<DeviceMemory, bf16>(Target::cuda(), 256 << 10);
  testing_collectives::check<DeviceMemory, bf16>(Target::cuda(), 256 << 20, {18000001});  // pipelined chunks
}
TEST(GpuKernels, LibraryCollectivesInPipelinedChunks) {
  // One piece, slices of over 65536 floats per program: chunks pipelined, the last one ragged.
  testing_collectives::check<DeviceMemory>(Target::cuda(), 256 << 20, {9000001});
}
// Calls queued back to back on two streams in turn, sizes alternating (one in pieces, through
// both staging halves), nothing waited for until the last: every result checked after.
TEST(GpuKernels, LibraryCollectivesQueuedOnStreams) {
  using testing_collectives::values;
  kernels::Collectives c(Target::cuda(), 256 << 10);
  const int n = c.ranks(), me = cuda::World::get().rank();
  runtime::Stream first, second;
  const size_t sizes[] = {5, 100003, 1, 4099, 65536};
  struct Call {
    size_t count;
    bool gather;
    std::unique_ptr<cuda::Buffer<float>> in, out;
  };
  std::vector<Call> calls;
  for (int call = 0; call < 40; ++call) {
    const size_t count = sizes[call % 5];
    const bool gather = call % 3 == 1;
    auto in = std::make_unique<cuda::Buffer<float>>(values(me, count, call));
    auto out = std::make_unique<cuda::Buffer<float>>(std::vector<float>(gather ? n * count : count, -1.0f));
    const runtime::Stream* on = call % 4 < 2 ? &first : &second;
    if (gather)
      c.all_gather(in->data(), out->data(), count, on);
    else
      c.all_reduce(in->data(), out->data(), count, on);
    calls.push_back({count, gather, std::move(in), std::move(out)});
  }
  // Then one without a stream (on the default stream, after the queued ones), at once.
  const size_t count = 4099;
  cuda::Buffer<float> in(values(me, count, 40)), out(count);
  c.all_reduce(in.data(), out.data(), count);
  std::vector<float> got = out.download();
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += testing_collectives::value(r, int64_t(i), 40);
    ASSERT_EQ(got[i], want) << "all_reduce without a stream after queued ones: element " << i;
  }
  first.synchronize();
  second.synchronize();
  for (int call = 0; call < 40; ++call) {
    const Call& k = calls[call];
    std::vector<float> got = k.out->download();
    for (size_t i = 0; i < k.count; ++i) {
      if (k.gather) {
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(got[r * k.count + i], testing_collectives::value(r, int64_t(i), call))
              << "queued all_gather " << call << " of " << k.count << ": rank " << r << "'s element " << i;
      } else {
        float want = 0;
        for (int r = 0; r < n; ++r) want += testing_collectives::value(r, int64_t(i), call);
        ASSERT_EQ(got[i], want) << "queued all_reduce " << call << " of " << k.count << ": element " << i;
      }
    }
  }
}
TEST(GpuKernels, AllGatherGemm) {
  const int n = cuda::World::get().size();
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 40 * n, 72, 48);     // small tiles, ragged
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 320 * n, 512, 256);  // pipelined mma tiles
  runtime::Stream first, second;
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 40 * n, 72, 48, {&first, &second});  // queued
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 320 * n, 512, 256, {nullptr},        // in place
                                                   kernels::AgGemm::Gather::copy_engine, 0, true);
}
TEST(GpuKernels, AllGatherGemmBySmPuts) {
  const int n = cuda::World::get().size();
  using Gather = kernels::AgGemm::Gather;
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 40 * n, 72, 48, {nullptr}, Gather::sm_puts,
                                                   3);  // ragged slices
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 320 * n, 512, 256, {nullptr},
                                                   Gather::sm_puts);  // 16 slices
  runtime::Stream first, second;
  testing_collectives::check_ag_gemm<DeviceMemory>(Target::cuda(), 256 * n, 256, 128, {&first, &second},
                                                   Gather::sm_puts, 5);
}
// AllGather + MoE grouped GEMM: small and ragged, then the library's tiles (Qwen3-30B-A3B's
// experts: top-8 of 128, K = 2048, N = 768 / ranks), then queued on two streams.
TEST(GpuKernels, AllGatherMoe) {
  const int n = cuda::World::get().size();
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 37, 40, 48, 6, 2);
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 9, 72, 40, 3, 1);
  // (K of 15.6 blocks of 64 over few tiles: three gather programs a tile, the last part short)
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 24, 128, 1000, 4, 2);
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 96, 768 / n, 2048, 128, 8);
  runtime::Stream first, second;
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 100, 256, 512, 16, 2, {&first, &second});
}
// Grouped GEMM + top-k combine + ReduceScatter / AllReduce: small and ragged, then the library's
// tiles (Qwen3-30B-A3B's down projection: hidden 2048, K = 768 / ranks, top-8 of 128), queued.
// Expert-parallel dispatch and combine (tests/kernels/ep_check.h): rows sent back as they came,
// through a grouped GEMM, queued on a stream, and at the seed's low-latency shape (128 tokens a
// rank, hidden 7168, top-8; 32 experts a rank).
TEST(GpuKernels, EpDispatchCombine) {
  const int64_t n = world_size();
  runtime::Stream stream;
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 13, 40, 3 * n, 2);
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 7, 16, 8 * n, 8);
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 5, 1100, 4 * n, 3, 0, 1);
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 9, 48, 2 * n, 2, 24);
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 40, 256, 4 * n, 2, 128, 2, 0, &stream);
  testing_ep::check_ep<DeviceMemory>(Target::cuda(), 128, 7168, 32 * n, 8, 0, 2);
}
// The low-latency mode: bf16 and f8e4m3 rows, a grouped GEMM over its table, the receive hook on
// a stream, and the seed's shape (128 tokens a rank, hidden 7168, top-8 of 32 experts a rank, f8).
TEST(GpuKernels, EpLowLatency) {
  const int64_t n = world_size();
  const auto f8 = ir::DType::f8e4m3, b16 = ir::DType::bf16;
  runtime::Stream stream;
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 13, 40, 3 * n, 2, b16);
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 11, 300, 2 * n, 1, f8);
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 70, 256, 2 * n, 2, b16, 128);
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 40, 512, 4 * n, 4, f8, 0, 3, true, &stream);
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 70, 512, 2 * n, 2, f8, 256, 2);  // (the blockwise f8 GEMM)
  testing_ep::check_ep_ll<DeviceMemory>(Target::cuda(), 128, 7168, 32 * n, 8, f8, 0, 3, true, &stream);
}
// Distributed flash decoding: every rank a slice of the keys, the parts pushed to every rank
// from inside the decode kernel (tests/kernels/flash_decode_check.h).
TEST(GpuKernels, DistFlashDecode) {
  kernels::DistFlashDecode fd(Target::cuda(), 32, 8, 128, /*max_batch*/ 4, /*max_q_tokens*/ 2);
  testing_decode::check_dist_decode<DeviceMemory>(1, 4, 1, 32, 8, 128, 1000, fd);
  testing_decode::check_dist_decode<DeviceMemory>(2, 3, 2, 32, 8, 128, 77, fd);
  testing_decode::check_dist_decode<DeviceMemory>(3, 1, 1, 32, 8, 128, 5000, fd);
  testing_decode::check_dist_decode<DeviceMemory>(4, 3, 2, 32, 8, 128, 300, fd, true);  // (causal across ranks)
  testing_decode::check_dist_decode<DeviceMemory>(5, 2, 2, 32, 8, 128, 3, fd, true);
}
// Sequence-parallel attention by AllGather: each rank a slice of every sequence's tokens, the
// others' keys and values gathered by the copy engine under the kernel
// (tests/kernels/sp_attention_check.h); on a stream, and without one.
TEST(GpuKernels, AgAttention) {
  // (shapes the host's reference in double computes in seconds)
  kernels::AgAttention causal(Target::cuda(), 16, 4, 128, /*max_batch*/ 2, /*max_seqlen*/ 600);
  runtime::Stream stream;
  testing_sp::check_sp_attention<DeviceMemory>(1, 2, 300, 16, 4, 128, true, causal, &stream);
  testing_sp::check_sp_attention<DeviceMemory>(2, 1, 77, 16, 4, 128, true, causal);
  testing_sp::check_sp_attention<DeviceMemory>(3, 1, 600, 16, 4, 128, true, causal, &stream);
  testing_sp::check_sp_attention_queued<DeviceMemory>(4, {{2, 300}, {1, 77}, {2, 129}}, 16, 4, 128, true, causal,
                                                      stream);
  kernels::AgAttention full(Target::cuda(), 8, 8, 64, 3, 200, ir::DType::bf16, false);
  testing_sp::check_sp_attention<DeviceMemory>(1, 3, 200, 8, 8, 64, false, full);
  testing_sp::check_sp_attention<DeviceMemory>(2, 1, 5, 8, 8, 64, false, full, &stream);
}
// Ulysses: each head group's share of every rank's tokens to its rank, attention, and back
// (24 query and 12 KV heads: a multiple of 1 to 4 ranks); runs back to back on a stream with
// the last rank late, one in place.
TEST(GpuKernels, UlyssesAttention) {
  kernels::UlyssesAttention causal(Target::cuda(), 24, 12, 128, /*max_batch*/ 2, /*max_seqlen*/ 300);
  runtime::Stream stream;
  testing_sp::check_sp_attention<DeviceMemory>(1, 2, 300, 24, 12, 128, true, causal, &stream);
  testing_sp::check_sp_attention<DeviceMemory>(2, 1, 77, 24, 12, 128, true, causal);
  if (rank() == world_size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  testing_sp::check_sp_attention<DeviceMemory>(3, 2, 129, 24, 12, 128, true, causal, &stream, /*in_place*/ true);
  // (runs queued back to back on the stream, waited for once: the staging buffer and the halves
  // reused with nothing between the runs on the host)
  testing_sp::check_sp_attention_queued<DeviceMemory>(4, {{2, 300}, {1, 77}, {2, 129}, {1, 600}}, 24, 12, 128, true,
                                                      causal, stream);
  kernels::UlyssesAttention full(Target::cuda(), 12, 12, 64, 1, 200, ir::DType::bf16, false);
  testing_sp::check_sp_attention<DeviceMemory>(1, 1, 200, 12, 12, 64, false, full, &stream);
}
TEST(GpuKernels, MoeReduce) {
  using Mode = kernels::MoeReduce::Mode;
  const int n = cuda::World::get().size();
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 37, 40, 24, 6, 2, Mode::reduce_scatter);
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 9, 300, 32, 3, 1, Mode::reduce_scatter);
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 5, 64, 32, 8, 2, Mode::all_reduce);
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 48, 2048, 768 / n, 128, 8, Mode::reduce_scatter);
  runtime::Stream first, second;
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 40, 256, 128, 16, 2, Mode::reduce_scatter,
                                              {&first, &second});
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 16, 512, 128, 16, 4, Mode::all_reduce, {&first, &second});
}
// The MoE MLP: small, then Qwen3-30B-A3B's layer (hidden 2048, intermediate 768, top-8 of 128
// experts) on a few tokens, reduce-scattered; and all-reduced (decoding).
TEST(GpuKernels, MoeMlp) {
  const int n = cuda::World::get().size();
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 13, 48, 32 * n, 8, 2);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 8, 2048, 768, 128, 8);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 4, 512, 128 * n, 16, 4,
                                           kernels::MoeReduce::Mode::all_reduce);
}
// The MoE MLP with the overlap off (set_overlap(false)): the same kernels one after the other.
TEST(GpuKernels, MoeMlpOneAfterTheOther) {
  const int n = cuda::World::get().size();
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 13, 48, 32 * n, 8, 2, Mode::reduce_scatter, ir::DType::bf16,
                                           false);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 96, 1024, 256 * n, 16, 4, Mode::all_reduce, ir::DType::bf16,
                                           false);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 37, 320, 192 * n, 8, 2, Mode::reduce_scatter,
                                           ir::DType::f8e4m3, false);
}
// AllGather + MoE GEMM with f8e4m3 weights: K over several 128-column blocks, the last partial.
TEST(GpuKernels, AllGatherMoeF8) {
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 37, 192, 320, 6, 2, {nullptr}, ir::DType::f8e4m3);
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 20, 256, 128, 16, 8, {nullptr}, ir::DType::f8e4m3);
  // (K of 8.6 scale blocks over few tiles: two gather programs a tile, quantizing 5 and 3.6 blocks)
  testing_moe::check_ag_moe<DeviceMemory>(Target::cuda(), 20, 128, 1100, 4, 2, {nullptr}, ir::DType::f8e4m3);
}
TEST(GpuKernels, MoeReduceF8) {
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 37, 192, 320, 6, 2, Mode::reduce_scatter, {nullptr},
                                              ir::DType::f8e4m3);
  testing_moe::check_moe_reduce<DeviceMemory>(Target::cuda(), 20, 256, 128, 16, 8, Mode::all_reduce, {nullptr},
                                              ir::DType::f8e4m3);
}
// The MoE MLP with f8e4m3 weights and block scales (DeepSeek-V3's form): hidden and the
// intermediate over several 128-column blocks, the last partial; reduce-scattered and all-reduced.
TEST(GpuKernels, MoeMlpF8) {
  const int n = cuda::World::get().size();
  using Mode = kernels::MoeReduce::Mode;
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 37, 320, 192 * n, 8, 2, Mode::reduce_scatter,
                                           ir::DType::f8e4m3);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 8, 1024, 256 * n, 32, 8, Mode::reduce_scatter,
                                           ir::DType::f8e4m3);
  testing_moe::check_moe_mlp<DeviceMemory>(Target::cuda(), 5, 256, 128 * n, 16, 1, Mode::all_reduce, ir::DType::f8e4m3);
}
TEST(GpuKernels, GemmReduceScatter) {
  const int n = cuda::World::get().size();
  testing_collectives::check_gemm_rs<DeviceMemory>(Target::cuda(), 64 * n, 72, 48);     // 64-row tiles, ragged N, K
  testing_collectives::check_gemm_rs<DeviceMemory>(Target::cuda(), 256 * n, 256, 512);  // pipelined 256-row tiles
  runtime::Stream first, second;
  testing_collectives::check_gemm_rs<DeviceMemory>(Target::cuda(), 64 * n, 72, 48, {&first, &second});  // queued
  // 4 rows of 128-row tiles per rank, 64 columns of tiles: groups of 8 rows of tiles would mix
  // the ranks' rows, and more waiting tiles of our rows than SMs would starve the peers' (a
  // deadlock found in review).
  testing_collectives::check_gemm_rs<DeviceMemory>(Target::cuda(), 512 * n, 16384, 64);
}
// The same by SM pushes (the copy engine is the default on GPUs).
struct GemmRsBySmPushes : kernels::GemmRs {
  GemmRsBySmPushes(const Target& t, int64_t M, int64_t N, int64_t K) : GemmRs(t, M, N, K, Scatter::sm_pushes) {}
};
TEST(GpuKernels, GemmReduceScatterBySmPushes) {
  const int n = cuda::World::get().size();
  testing_collectives::check_gemm_rs<DeviceMemory, GemmRsBySmPushes>(Target::cuda(), 64 * n, 72, 48);
  testing_collectives::check_gemm_rs<DeviceMemory, GemmRsBySmPushes>(Target::cuda(), 256 * n, 256, 512);
}
TEST(GpuKernels, GemmAllReduce) {
  testing_collectives::check_gemm_rs<DeviceMemory, kernels::GemmAr>(Target::cuda(), 70, 72, 48);  // ragged
  testing_collectives::check_gemm_rs<DeviceMemory, kernels::GemmAr>(Target::cuda(), 128, 256,
                                                                    512);  // skinny, pipelined
  runtime::Stream stream;
  testing_collectives::check_gemm_rs<DeviceMemory, kernels::GemmAr>(Target::cuda(), 70, 72, 48, {&stream});  // queued
  // A decode step's: K split as gemm_config splits it (M <= 64), and into 5 runs
  testing_collectives::check_gemm_rs<DeviceMemory, kernels::GemmAr>(Target::cuda(), 1, 512, 4096);
  testing_collectives::check_gemm_rs<DeviceMemory, kernels::GemmAr>(Target::cuda(), 3, 256, 1000, {nullptr}, 5);
}

// A GEMM + AllReduce, and a GEMM + ReduceScatter by SM pushes, captured in a graph
// (runtime/graph.h) and launched five times with new inputs, an eager run between launches:
// their calls are counted in device memory, so each launch is a new call on every rank. A
// collective that counts its calls on the host (AllGather + GEMM) refuses the capture.
template <class Op>
void check_gemm_rs_graph(int64_t M, int64_t N, int64_t K) {
  SCOPED_TRACE(str_cat("M=", M, " N=", N, " K=", K));
  using testing_collectives::to_bf16, testing_collectives::values;
  const bool all = std::is_same_v<Op, kernels::GemmAr>;
  const int me = rank();
  const int64_t rows = all ? M : M / world_size();
  Op op(Target::cuda(), M, N, K);
  cuda::Buffer<bf16> a(size_t(M * K)), b(size_t(K * N));
  cuda::Buffer<float> out(size_t(rows * N)), eager(size_t(rows * N));
  runtime::Stream s;
  runtime::Graph step(s, [&] { op.run(a.data(), b.data(), out.data(), &s); });
  for (int call = 1; call <= 10; call += 2) {
    a.upload(to_bf16(values(me, M * K, call)));
    b.upload(to_bf16(values(100 + me, K * N, call)));
    kernels::launch_graph(step, s);
    s.synchronize();
    EXPECT_LT(reference::rel_error(out.download(), testing_collectives::gemm_rs_want(M, N, K, all, call)), 1e-5)
        << "launch " << call / 2 + 1 << " of the graph";
    a.upload(to_bf16(values(me, M * K, call + 1)));
    b.upload(to_bf16(values(100 + me, K * N, call + 1)));
    op.run(a.data(), b.data(), eager.data(), &s);
    s.synchronize();
    EXPECT_LT(reference::rel_error(eager.download(), testing_collectives::gemm_rs_want(M, N, K, all, call + 1)), 1e-5)
        << "the eager run after launch " << call / 2 + 1;
  }
}
TEST(GpuKernels, OverlappedGemmsInAGraph) {
  const int n = cuda::World::get().size();
  check_gemm_rs_graph<kernels::GemmAr>(70, 72, 48);
  check_gemm_rs_graph<GemmRsBySmPushes>(64 * n, 72, 48);
  // The refusal leaves the object as it was: its next run, outside a graph, is right.
  using testing_collectives::to_bf16, testing_collectives::values;
  const int64_t rows = 64, N = 64, K = 32;
  kernels::AgGemm ag(Target::cuda(), rows * n, N, K);
  cuda::Buffer<bf16> a(to_bf16(values(rank(), rows * K, 1))), b(to_bf16(values(100, K * N, 1)));
  cuda::Buffer<float> c(size_t(rows * n * N));
  runtime::Stream s;
  const std::string e =
      test_util::error_of([&] { runtime::Graph g(s, [&] { ag.run(a.data(), b.data(), c.data(), &s); }); });
  EXPECT_NE(e.find("ag_gemm: a run on a stream being captured into a graph"), std::string::npos) << e;
  EXPECT_FALSE(s.capturing());
  ag.run(a.data(), b.data(), c.data());
  std::vector<float> want(size_t(rows * n * N), 0.0f);
  const std::vector<bf16> bh = to_bf16(values(100, K * N, 1));
  for (int r = 0; r < n; ++r) {
    const std::vector<bf16> ar = to_bf16(values(r, rows * K, 1));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) want[(r * rows + i) * N + j] += float(ar[i * K + k]) * float(bh[k * N + j]);
  }
  EXPECT_LT(reference::rel_error(c.download(), want), 1e-5) << "AgGemm's run after its refused capture";
}

// ---- Regressions at Triton-distributed's own check shapes --------------------------------
// Fresh random bf16 inputs in [-1, 1) from a seed that rank 0 draws and every rank shares (so
// that each can draw the peers' inputs again for its reference); a run's output starts as NaN.
uint64_t shared_seed() {
  static uint64_t* seed = symm_alloc<uint64_t>(1).data();
  if (rank() == 0)
    *seed = std::random_device{}() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  barrier_all();
  const uint64_t s = *symm_at(seed, 0);  // (rank 0's)
  barrier_all();
  return s;
}
std::vector<bf16> random_bf16(uint64_t seed, size_t n) { return reference::random_values<bf16>(seed, n); }
/// `got` against C = A[M, K] @ B[K, N] computed another way: every element against the library's
/// plain GEMM (no communication) in relative norm, and 8 rows in double on the host; the bound
/// is 1e-5 up to K = 1024, growing with sqrt(K) past it (f32 sums of bf16 products, in two
/// computations: 4 ranks' K = 12288 gave 1.1e-5 against the plain GEMM).
void expect_gemm(const std::vector<float>& got, const std::vector<bf16>& a, const std::vector<bf16>& b, int64_t M,
                 int64_t N, int64_t K, const std::string& what) {
  const double bound = 1e-5 * std::max(1.0, std::sqrt(double(K) / 1024.0));
  cuda::Buffer<bf16> da(a), db(b);
  cuda::Buffer<float> dc(std::vector<float>(size_t(M * N), NAN));
  kernels::Gemm(Target::cuda(), M, N, K).run(da.data(), db.data(), dc.data());
  EXPECT_LT(reference::rel_error(got, dc.download()), bound) << what << ": against the plain GEMM";
  std::mt19937_64 pick(M + N + K);
  std::vector<float> rows_got, rows_want;
  for (int t = 0; t < 8; ++t) {
    const int64_t i = std::uniform_int_distribution<int64_t>(0, M - 1)(pick);
    std::vector<double> row(N, 0.0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) row[j] += double(float(a[i * K + k])) * float(b[k * N + j]);
    for (int64_t j = 0; j < N; ++j) rows_got.push_back(got[i * N + j]), rows_want.push_back(float(row[j]));
  }
  EXPECT_LT(reference::rel_error(rows_got, rows_want), bound) << what << ": 8 rows against the host's double sums";
}

// AllGather+GEMM, each rank holding 4091 rows, N=5120, K=1024, ten runs in a row per object in
// each gather mode: with 4 ranks on one GPU the copy engine's gather deadlocked in its second
// run (kernels/ag_gemm.cpp says why).
// A dense model's two decoder layers (model/prefill_layer.h) against the host's double reference:
// the CPU world's model_dist_test on GPU memory.
TEST(GpuKernels, PrefillLayer) { model::testing_model::check_two_layers<DeviceMemory>(Target::cuda()); }
// Its decode steps after a prefill (the KV cache, flash decoding, GEMM + AllReduce).
TEST(GpuKernels, DenseDecode) {
  const int n = world_size();
  model::testing_model::check_decode(Target::cuda(), model::testing_model::small_config(n), 2, 2, 32 * n);
}
// The same steps as one persistent kernel (mega::MegaKernel), the all-reduces inside it.
TEST(GpuKernels, DenseDecodeAsOneKernel) {
  const int n = world_size();
  model::testing_model::check_decode(Target::cuda(), model::testing_model::small_config(n), 2, 2, 32 * n, true);
}
// A MoE layer's prefill and decode steps (model_dist_test's).
TEST(GpuKernels, MoeModelLayer) {
  const int n = world_size(), batch = n == 3 ? 3 : 4;
  model::testing_model::check_decode(Target::cuda(), model::testing_model::small_moe_config(n), 1, batch,
                                     64 * n / batch);
}

TEST(GpuKernels, AllGatherGemmAtTheSeedsCheckShape) {
  const int n = world_size(), me = rank();
  const int64_t rows = 4091, M = rows * n, N = 5120, K = 1024;
  using Gather = kernels::AgGemm::Gather;
  for (Gather gather : {Gather::copy_engine, Gather::sm_puts}) {
    kernels::AgGemm op(Target::cuda(), M, N, K, gather);
    for (int run = 1; run <= 10; ++run) {
      const uint64_t seed = shared_seed();
      std::vector<bf16> b = random_bf16(seed + 100 + me, K * N);
      cuda::Buffer<bf16> a(random_bf16(seed + me, rows * K)), db(b);
      cuda::Buffer<float> c(std::vector<float>(size_t(M * N), NAN));
      op.run(a.data(), db.data(), c.data());
      std::vector<bf16> gathered;
      for (int r = 0; r < n; ++r) {
        std::vector<bf16> shard = random_bf16(seed + r, rows * K);
        gathered.insert(gathered.end(), shard.begin(), shard.end());
      }
      expect_gemm(c.download(), gathered, b, M, N, K,
                  str_cat(gather == Gather::copy_engine ? "copy engine" : "SM puts", ", run ", run, ", seed ", seed));
      barrier_all();  // (the next run's inputs are drawn after every rank's check)
    }
  }
}

// GEMM+ReduceScatter of 4096 x 4096 with K = 12288 split over the ranks (M rounded up to whole
// row tiles per rank where the ranks do not divide it), three runs per object, both scatters.
TEST(GpuKernels, GemmReduceScatterAtTheSeedsCheckShape) {
  const int n = world_size(), me = rank();
  const int64_t N = 4096, K = 12288 / n, tile = 256;
  const int64_t rows = (4096 / n + tile - 1) / tile * tile, M = rows * n;
  using Scatter = kernels::GemmRs::Scatter;
  for (Scatter scatter : {Scatter::copy_engine, Scatter::sm_pushes}) {
    kernels::GemmRs op(Target::cuda(), M, N, K, scatter);
    for (int run = 1; run <= 3; ++run) {
      const uint64_t seed = shared_seed();
      cuda::Buffer<bf16> a(random_bf16(seed + me, M * K)), b(random_bf16(seed + 100 + me, K * N));
      cuda::Buffer<float> out(std::vector<float>(size_t(rows * N), NAN));
      op.run(a.data(), b.data(), out.data());
      // Our rows of the sum over ranks of A_r B_r: [A_0 .. A_n-1] (rows x nK) @ [B_0; ..; B_n-1].
      std::vector<bf16> wide(size_t(rows * n * K)), tall;
      for (int r = 0; r < n; ++r) {
        std::vector<bf16> ar = random_bf16(seed + r, M * K), br = random_bf16(seed + 100 + r, K * N);
        for (int64_t i = 0; i < rows; ++i)
          std::copy(ar.begin() + (me * rows + i) * K, ar.begin() + (me * rows + i + 1) * K,
                    wide.begin() + i * n * K + r * K);
        tall.insert(tall.end(), br.begin(), br.end());
      }
      expect_gemm(
          out.download(), wide, tall, rows, N, n * K,
          str_cat(scatter == Scatter::copy_engine ? "copy engine" : "SM pushes", ", run ", run, ", seed ", seed));
      barrier_all();
    }
  }
}

}  // namespace
}  // namespace tiledist
