// Distributed kernels on GPUs, one process per GPU, run by `tiledist-run -n N cuda_dist_test`
// (ctest's gpu.dist.ranks2; skipped, exit 77, where there is no CUDA GPU): the GPU world and the
// primitives in kernels written here, and faults. Ranks may share a GPU: its heaps are mapped
// between processes all the same. Every rank checks its own results against what the host
// computes from the inputs. The kernel library's objects: tests/kernels/cuda_collectives_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kernels/ep.h"
#include "runtime/nvshmem.h"
#include "tests/kernels/collectives_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

using tl::Tensor;

float input_value(int r, int i) { return float((int64_t(r) * 7919 + int64_t(i) * 104729) % 1000) / 100.0f - 5.0f; }
std::vector<float> inputs(int r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = input_value(r, static_cast<int>(i));
  return v;
}
Kernel gpu_compile(const KernelDef& def, const Constants& constants = {}) {
  return compile(def, constants, Target::cuda());
}

TEST(GpuWorld, EveryRankMapsEveryHeap) {
  auto& w = cuda::World::get();
  cuda::SymmBuffer<int32_t> slot(16);
  slot.upload(std::vector<int32_t>(16, 1000 + w.rank()));
  barrier_all();
  for (int r = 0; r < w.size(); ++r) {
    std::vector<int32_t> got(16);
    cuda::copy_to_host(got.data(), slot.at(r), 16 * 4);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(got[i], 1000 + r) << "rank " << r << "'s heap, word " << i;
  }
  barrier_all();
  EXPECT_THROW(w.at(slot.data(), w.size()), Error);
  if (nvshmem::world_kind() == nvshmem::WorldKind::nvshmem) {  // (the world asked for is the one made)
    EXPECT_TRUE(nvshmem::initialized());
    EXPECT_EQ(nvshmem::library().n_pes(), w.size());
    EXPECT_EQ(nvshmem::library().my_pe(), w.rank());
    for (int r = 0; r < w.size(); ++r) EXPECT_EQ(nvshmem::library().ptr(slot.data(), r), slot.at(r)) << "rank " << r;
  }
}

// Each program stores its block into the next rank's buffer (symm_at), signals it there, waits
// for the previous rank's signal here, and doubles what arrived.
void ring_put(tl::Ptr<float> src, tl::Ptr<float> dst, tl::Ptr<int32_t> sig, tl::Ptr<float> out, tl::Int n,
              tl::Const<int> BLOCK) {
  auto me = dist::rank();
  auto next = (me + 1) % dist::num_ranks();
  auto pid = tl::program_id(0);
  auto offs = pid * BLOCK + tl::arange(0, BLOCK);
  auto mask = offs < n;
  tl::store(dist::symm_at(dst, next) + offs, tl::load(src + offs, mask), mask);
  dist::notify(sig + pid, next, 1);
  auto token = dist::wait(sig + pid, 1);
  tl::store(out + offs, tl::load(dist::consume_token(dst, token) + offs, mask) * 2.0f, mask);
}
TEST(GpuKernels, RingPutAndSignal) {
  const int n = 100003, block = 1024, programs = (n + block - 1) / block;  // ragged
  auto& w = cuda::World::get();
  cuda::SymmBuffer<float> src(n), dst(n);
  cuda::SymmBuffer<int32_t> sig(programs);
  cuda::Buffer<float> out(n);
  src.upload(inputs(w.rank(), n));
  cuda::memset(dst.data(), 0, n * 4);
  cuda::memset(sig.data(), 0, programs * 4);
  barrier_all();
  gpu_compile(KernelDef("ring_put", ring_put, {"src", "dst", "sig", "out", "n", "BLOCK"}), {{"BLOCK", block}})
      .launch({programs}, src, dst, sig, out, n);
  const int prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> got = out.download(), want = inputs(prev, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], 2 * want[i]) << "element " << i << " from rank " << prev;
  barrier_all();
}

// The ring all-gather of the CPU tests (testing_collectives::ring_all_gather).
TEST(GpuKernels, RingAllGather) {
  auto& w = cuda::World::get();
  const int n = w.size(), chunk = 4099;  // not a multiple of 4 floats: the copy goes bytewise
  cuda::SymmBuffer<float> out(size_t(n) * chunk);
  cuda::SymmBuffer<int32_t> flags(n);
  cuda::memset(flags.data(), 0, n * 4);
  std::vector<float> mine = inputs(w.rank(), chunk);
  cuda::copy_to_device(out.data() + size_t(w.rank()) * chunk, mine.data(), chunk * 4);
  barrier_all();
  gpu_compile(KernelDef("ring_all_gather", testing_collectives::ring_all_gather, {"out", "flags", "chunk"}))
      .launch({1}, out, flags, chunk);
  std::vector<float> got = out.download();
  for (int r = 0; r < n; ++r) {
    std::vector<float> want = inputs(r, chunk);
    for (int i = 0; i < chunk; ++i)
      ASSERT_EQ(got[size_t(r) * chunk + i], want[i]) << "chunk " << r << ", element " << i;
  }
  barrier_all();
}

// Every program writes a word into every rank's box, meets all the others at barrier_all, then
// reads what all ranks' programs wrote into ours. Twice: the barrier is reused across launches.
void barrier_exchange(tl::Ptr<int32_t> box, tl::Ptr<int32_t> out, tl::Int round) {
  auto me = dist::rank(), n = dist::num_ranks();
  auto pid = tl::program_id(0), np = tl::num_programs(0);
  tl::for_range(0, n, 1,
                [&](Tensor r) { tl::store(dist::symm_at(box, r) + me * np + pid, round * 100000 + me * 1000 + pid); });
  shmem::barrier_all();
  tl::for_range(0, n, 1, [&](Tensor k) { tl::store(out + k * np + pid, tl::load(box + k * np + pid)); });
}
TEST(GpuKernels, DeviceBarrierOfEveryProgramOnEveryRank) {
  auto& w = cuda::World::get();
  const int programs = 64;
  cuda::SymmBuffer<int32_t> box(size_t(w.size()) * programs);
  cuda::Buffer<int32_t> out(size_t(w.size()) * programs);
  Kernel k = gpu_compile(KernelDef("barrier_exchange", barrier_exchange, {"box", "out", "round"}));
  for (int round = 1; round <= 2; ++round) {
    barrier_all();
    k.launch({programs}, box, out, round);
    std::vector<int32_t> got = out.download();
    for (int r = 0; r < w.size(); ++r)
      for (int p = 0; p < programs; ++p)
        ASSERT_EQ(got[r * programs + p], round * 100000 + r * 1000 + p)
            << "round " << round << ", rank " << r << ", program " << p;
  }
  barrier_all();
}

// A wait on a block of scattered words (4 a thread), each for its own value, two of them set
// by the rank before's programs.
TEST(GpuKernels, AWaitOnABlockOfScatteredWordsEachForItsValue) {
  const int W = 512;
  cuda::SymmBuffer<int64_t> flags(W), count(1);
  cuda::Buffer<int64_t> seen(1);
  std::vector<int64_t> words(W);
  for (int k = 0; k < W; ++k) words[k] = testing_collectives::scattered_wait_late(k, W) ? 0 : 100 + k;
  flags.upload(words);
  cuda::memset(count.data(), 0, 8);
  barrier_all();
  gpu_compile(KernelDef("scattered_wait", testing_collectives::scattered_wait, {"flags", "count", "seen", "W"}),
              {{"W", W}})
      .launch({3}, flags, count, seen);
  EXPECT_EQ(seen.download()[0], 2) << "the wait returned before every word was set";
  std::vector<int64_t> got = flags.download();
  for (int k = 0; k < W; ++k) ASSERT_EQ(got[k], 100 + k) << "word " << k;
  barrier_all();
}

// Run alone (its trap ends the CUDA context): rank 0 waits for a signal nobody sends.
void wait_forever(tl::Ptr<int32_t> sig) { dist::wait(sig + 3, 1); }
TEST(GpuFaults, AWaitThatNeverCompletesNamesKernelRankAndSignal) {
  auto& w = cuda::World::get();
  cuda::SymmBuffer<int32_t> sig(8);
  cuda::memset(sig.data(), 0, 32);
  barrier_all();
  if (w.rank() == 0) {
    try {
      gpu_compile(KernelDef("wait_forever", wait_forever, {"sig"})).launch({2}, sig);
      FAIL() << "the wait returned";
    } catch (const Error& e) {
      std::string m = e.what();
      std::printf("%s\n", m.c_str());
      EXPECT_NE(m.find("kernel 'wait_forever' on rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("$TILEDIST_WAIT_TIMEOUT"), std::string::npos) << m;
      EXPECT_NE(m.find(str_cat("signal word at byte offset ", w.offset_of(sig.data() + 3), " of rank 0's GPU heap")),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("last read 0"), std::string::npos) << m;
    }
  }
  // (No barrier after: the other ranks would give up on it first, under the same timeout.)
}
// Run alone too: on a stream the launch returns at once, and the stream's synchronize reports
// the failure as the launch without one does.
TEST(GpuFaults, AWaitOnAStreamIsReportedByTheStreamsSynchronize) {
  auto& w = cuda::World::get();
  cuda::SymmBuffer<int32_t> sig(8);
  cuda::memset(sig.data(), 0, 32);
  barrier_all();
  if (w.rank() != 0) return;
  Kernel k = gpu_compile(KernelDef("wait_forever", wait_forever, {"sig"}));
  runtime::Stream stream;
  k.launch_on(stream, {2}, sig);
  EXPECT_FALSE(stream.idle()) << "the launch waited for the kernel ($TILEDIST_WAIT_TIMEOUT=2 s: it should still wait)";
  try {
    stream.synchronize();
    FAIL() << "the stream's wait returned";
  } catch (const Error& e) {
    std::string m = e.what();
    std::printf("%s\n", m.c_str());
    EXPECT_NE(m.find("kernel 'wait_forever' on rank 0, program "), std::string::npos) << m;
    EXPECT_NE(m.find(str_cat("signal word at byte offset ", w.offset_of(sig.data() + 3), " of rank 0's GPU heap")),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("cuStreamSynchronize"), std::string::npos) << m;
  }
}
// An expert-parallel receive whose peers never send gives up naming one: the dispatch labels its
// signal words (runtime/heap_labels.h), and the GPU's failure message says which (expert,
// source) word it waited on. (Ranks 1 and up make the dispatch but never run it; they stay
// alive meanwhile.)
TEST(GpuFaults, AnExpertAllToAllPeerThatNeverSendsIsNamed) {
  auto& w = cuda::World::get();
  if (w.size() < 2) GTEST_SKIP() << "needs a peer";
  kernels::EpLowLatencyDispatch dispatch(Target::cuda(), 4, 16, 2 * w.size(), 1, {ir::DType::bf16, 64, false});
  if (w.rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(4));  // (alive, but never sends)
    return;
  }
  cuda::Buffer<bf16> x(std::vector<bf16>(64, bf16(1.0f)));
  cuda::Buffer<int32_t> ids(std::vector<int32_t>{0, 1, 2, 3});
  try {
    dispatch.run(x.data(), ids.data(), 4);
    runtime::Stream::legacy().synchronize();
    FAIL() << "the receive returned";
  } catch (const Error& e) {
    std::string m = e.what();
    std::printf("%s\n", m.c_str());
    EXPECT_NE(m.find("kernel 'ep_ll_receive' on rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("(EpLowLatencyDispatch's signal words [2, local experts, ranks], element "), std::string::npos)
        << m;
    // (with more than 2 ranks, any silent peer's word may be the one reported)
    const std::string from = "'s rows from rank ";
    const size_t at = m.find(from);
    ASSERT_NE(at, std::string::npos) << m;
    EXPECT_NE(std::atoi(m.c_str() + at + from.size()), 0) << "rank 0 sent; a silent peer should be named: " << m;
    EXPECT_NE(m.find(", the odd calls' half)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tiledist
