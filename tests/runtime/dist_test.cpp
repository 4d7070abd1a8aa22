// Distributed kernels on the CPU backend, run by `tiledist-run -n N dist_test` (N = 1, 2, 3, 4, 8)
// and under mpirun: the world, its fibers, and the primitives (puts, signals, waits, barriers,
// atomics) in kernels written here. Every rank runs every test; each checks its own results
// against a reference the host computes from the inputs (peers' inputs read through host
// symm_at). The kernel library's collectives and overlapped GEMMs: tests/kernels/collectives_test.cpp.
#include <gtest/gtest.h>

#include <numeric>

#include "runtime/world.h"
#include "tests/kernels/collectives_check.h"
#include "tiledist.h"

namespace tiledist {
namespace {

// The SHMEM runtime these tests exercise is the CPU one: compile for the host even where a GPU
// would be the default target.
tiledist::Kernel host_compile(const tiledist::KernelDef& def, const tiledist::Constants& constants = {}) {
  return tiledist::compile(def, constants, tiledist::Target::host());
}
using tl::Tensor;

/// The inputs of rank r: the same numbers wherever they are computed.
float input_value(int r, int i) { return float((r * 7919 + i * 104729) % 1000) / 100.0f - 5.0f; }

TEST(World, RanksAndSymmetricOffsets) {
  int n = world_size(), me = rank();
  ASSERT_GE(n, 1);
  ASSERT_LT(me, n);
  auto slots = symm_alloc<int64_t>(64);
  auto other = symm_alloc<char>(1000);  // offsets must also agree after an odd-sized block
  auto third = symm_alloc<int64_t>(4);
  int64_t* at0 = symm_at(slots.data(), 0);
  at0[me] = reinterpret_cast<char*>(third.data()) - reinterpret_cast<char*>(slots.data());
  barrier_all();
  if (me == 0) {
    for (int r = 0; r < n; ++r) EXPECT_EQ(slots[r], slots[0]) << "rank " << r << " has another offset";
  }
  barrier_all();
  symm_free(third.data());
  symm_free(other.data());
  symm_free(slots.data());
}

// ---- a loop of waits over consecutive signal words (the optimizer's wait_loops pass makes it
// one wait of them all): it returns the last word's value, or 0 where the range is empty
// (hi <= lo: no word waited for, not an error)
void wait_words(tl::Ptr<int32_t> flags, tl::Ptr<int32_t> seen, tl::Int lo, tl::Int hi) {
  auto last = tl::for_range(lo, hi, 1, tl::scalar(0, tl::int32),
                            [&](Tensor w, Tensor) { return shmem::signal_wait_until(flags + w, shmem::Cmp::ge, 1); });
  tl::store(seen, last);
}
// The host world's exchanges (through shared memory on one host; through the rendezvous where
// $TILEDIST_MASTER asks for one): every rank's value in rank order, rank 0's bytes everywhere,
// each twice in a row (the words reused).
TEST(World, AllGatherAndBroadcast) {
  runtime::World& w = runtime::World::get();
  const int n = world_size(), me = rank();
  EXPECT_EQ(w.hosts(), 1);
  for (int round = 0; round < 2; ++round) {
    const std::vector<uint64_t> all = w.all_gather(uint64_t(1000 * round + 7 * me + 1), "the test's values");
    ASSERT_EQ(all.size(), size_t(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[size_t(r)], uint64_t(1000 * round + 7 * r + 1)) << "rank " << r;
    std::vector<int32_t> words(37, me == 0 ? 0 : -1);
    if (me == 0) std::iota(words.begin(), words.end(), 100 * round);
    w.broadcast(words.data(), words.size() * sizeof(int32_t), "the test's words");
    for (int i = 0; i < 37; ++i) EXPECT_EQ(words[size_t(i)], 100 * round + i) << "word " << i;
  }
}

TEST(Waits, ALoopOfWaitsOverConsecutiveWords) {
  auto flags = symm_alloc<int32_t>(8);
  for (int i = 0; i < 8; ++i) flags[i] = 10 + i;  // (every word already signalled)
  barrier_all();
  Kernel k = host_compile(KernelDef("wait_words", wait_words, {"flags", "seen", "lo", "hi"}));
  for (auto [lo, hi, want] : {std::tuple{2, 6, 15}, {0, 8, 17}, {5, 5, 0}, {6, 2, 0}}) {
    std::vector<int32_t> seen(1, -1);
    k.launch({1}, flags.data(), seen, lo, hi);
    EXPECT_EQ(seen[0], want) << "words " << lo << " to " << hi;
  }
  barrier_all();
  symm_free(flags.data());
}

TEST(Waits, ABlockOfScatteredWordsEachForItsValue) {
  const int W = 64;
  auto flags = symm_alloc<int64_t>(W), count = symm_alloc<int64_t>(1);
  for (int k = 0; k < W; ++k) flags[k] = testing_collectives::scattered_wait_late(k, W) ? 0 : 100 + k;
  count[0] = 0;
  barrier_all();
  std::vector<int64_t> seen(1, -1);
  host_compile(KernelDef("scattered_wait", testing_collectives::scattered_wait, {"flags", "count", "seen", "W"}),
               {{"W", W}})
      .launch({3}, flags.data(), count.data(), seen);
  EXPECT_EQ(seen[0], 2) << "the wait returned before every word was set";
  for (int k = 0; k < W; ++k) EXPECT_EQ(flags[k], 100 + k) << "word " << k;
  barrier_all();
  symm_free(count.data());
  symm_free(flags.data());
}

// ---- program i waits for program i+1: needs programs that yield while they wait
void chain(tl::Ptr<int32_t> flags, tl::Ptr<int32_t> order, tl::Ptr<int32_t> counter, tl::Int n) {
  auto pid = tl::program_id(0);
  auto me = dist::rank();
  tl::if_then(pid + 1 < n, [&] { dist::wait(flags + pid + 1, 1); });
  auto ticket = tl::atomic_add(counter, 1);
  tl::store(order + pid, ticket);
  dist::notify(flags + pid, me, 1);
}
TEST(Fibers, EachProgramWaitsForTheNext) {
  const int n = 1024;
  auto flags = symm_alloc<int32_t>(n);
  std::vector<int32_t> order(n, -1), counter(1, 0);
  std::fill(flags.begin(), flags.end(), 0);
  host_compile(KernelDef("chain", chain, {"flags", "order", "counter", "n"}))
      .launch({n}, flags.data(), order, counter, n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(order[i], n - 1 - i) << "program " << i << " finished out of order";
  EXPECT_EQ(counter[0], n);
  barrier_all();
  symm_free(flags.data());
}

// ---- ping-pong between pairs of ranks
void ping_pong(tl::Ptr<int64_t> box, tl::Ptr<int64_t> sig, tl::Ptr<int64_t> seen, tl::Int rounds) {
  auto me = dist::rank();
  auto n = dist::num_ranks();
  auto partner = tl::where((me % 2) == 0, me + 1, me - 1);
  tl::if_then(partner < n, [&] {
    auto starter = (me % 2) == 0;
    tl::for_range(0, rounds, 1, [&](Tensor i) {
      auto value = (i + 1).to(tl::int64) * 1000 + me.to(tl::int64);
      auto my_turn = [&] {
        tl::store(seen + 1, value);  // stage the message in our own symmetric buffer
        shmem::putmem_signal_nbi_block(box, seen + 1, 8, sig, (i + 1).to(tl::int64), shmem::SIGNAL_SET, partner);
      };
      auto receive = [&] {
        shmem::signal_wait_until(sig, shmem::Cmp::ge, (i + 1).to(tl::int64));
        auto got = tl::load(box);
        auto want = (i + 1).to(tl::int64) * 1000 + partner.to(tl::int64);
        tl::if_then(got != want, [&] { tl::atomic_add(seen, 1, {}, {"relaxed", "gpu"}); });
      };
      tl::if_then(starter, [&] {
        my_turn();
        receive();
      });
      tl::if_then(!starter, [&] {
        receive();
        my_turn();
      });
    });
  });
}
TEST(Collectives, PingPong) {
  const int rounds = 200;
  auto box = symm_alloc<int64_t>(1), sig = symm_alloc<int64_t>(1), seen = symm_alloc<int64_t>(2);
  box[0] = 0, sig[0] = 0, seen[0] = 0, seen[1] = 0;
  barrier_all();
  host_compile(KernelDef("ping_pong", ping_pong, {"box", "sig", "seen", "rounds"}))
      .launch({1}, box.data(), sig.data(), seen.data(), rounds);
  bool paired = (rank() ^ 1) < world_size();
  EXPECT_EQ(seen[0], 0) << "messages arrived wrong";
  EXPECT_EQ(sig[0], paired ? rounds : 0);
  barrier_all();
  for (auto* p : {box.data(), sig.data(), seen.data()}) symm_free(p);
}

// ---- ring all-gather (testing_collectives::ring_all_gather)
TEST(Collectives, RingAllGather) {
  int n = world_size(), me = rank(), chunk = 1000;
  auto out = symm_alloc<float>(size_t(n) * chunk);
  auto flags = symm_alloc<int32_t>(n);
  std::fill(flags.begin(), flags.end(), 0);
  for (int i = 0; i < chunk; ++i) out[size_t(me) * chunk + i] = input_value(me, i);
  barrier_all();
  host_compile(KernelDef("ring_all_gather", testing_collectives::ring_all_gather, {"out", "flags", "chunk"}))
      .launch({1}, out.data(), flags.data(), chunk);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < chunk; ++i) ASSERT_EQ(out[size_t(r) * chunk + i], input_value(r, i)) << "chunk " << r;
  barrier_all();
  symm_free(flags.data());
  symm_free(out.data());
}

// ---- all-to-all with uneven splits: rank s sends count(s, d) elements to rank d
int count(int s, int d) { return (s * 3 + d * 5) % 7 * 37 + 1; }

void all_to_all(tl::Ptr<float> send, tl::Ptr<int32_t> send_offsets, tl::Ptr<int32_t> counts, tl::Ptr<float> recv,
                tl::Ptr<int32_t> recv_offsets, tl::Ptr<int64_t> flags) {
  // Program d sends our block for rank d; then each program waits for the block from rank d.
  auto d = tl::program_id(0);
  auto me = dist::rank();
  auto n = dist::num_ranks();
  auto cnt = tl::load(counts + me * n + d);
  auto dst_off = tl::load(recv_offsets + d * n + me);  // where rank d keeps what comes from us
  shmem::putmem_nbi_block(recv + dst_off.to(tl::int64), send + tl::load(send_offsets + d).to(tl::int64),
                          cnt.to(tl::int64) * 4, d);
  shmem::fence();
  shmem::signal_op(flags + me, 1, shmem::SIGNAL_ADD, d);
  auto token = dist::wait(flags + d, 1, dist::Scope::sys, dist::Semantic::acquire, 1);
  (void)dist::consume_token(recv, token);
}
TEST(Collectives, AllToAllUnevenSplits) {
  int n = world_size(), me = rank();
  std::vector<int32_t> counts(n * n), send_offsets(n), recv_offsets(n * n);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d) counts[s * n + d] = count(s, d);
  int send_total = 0;
  for (int d = 0; d < n; ++d) send_offsets[d] = send_total, send_total += count(me, d);
  for (int d = 0; d < n; ++d) {
    int off = 0;
    for (int s = 0; s < n; ++s) recv_offsets[d * n + s] = off, off += count(s, d);
  }
  int recv_total = 0;
  for (int s = 0; s < n; ++s) recv_total += count(s, me);
  auto send = symm_alloc<float>(8 * 37 * 64 + 64), recv = symm_alloc<float>(8 * 37 * 64 + 64);
  auto flags = symm_alloc<int64_t>(n);
  std::fill(flags.begin(), flags.end(), 0);
  for (int i = 0; i < send_total; ++i) send[i] = input_value(me, i);
  barrier_all();
  host_compile(KernelDef("all_to_all", all_to_all, {"send", "send_offsets", "counts", "recv", "recv_offsets", "flags"}))
      .launch({n}, send.data(), send_offsets, counts, recv.data(), recv_offsets, flags.data());
  int off = 0;
  for (int s = 0; s < n; ++s) {
    int from = 0;
    for (int d = 0; d < me; ++d) from += count(s, d);  // where our block starts in rank s's send buffer
    for (int i = 0; i < count(s, me); ++i) ASSERT_EQ(recv[off + i], input_value(s, from + i)) << "from rank " << s;
    off += count(s, me);
  }
  EXPECT_EQ(off, recv_total);
  barrier_all();
  for (void* p : {(void*)send.data(), (void*)recv.data(), (void*)flags.data()}) symm_free(p);
}

// ---- reduce-scatter: rank r ends with sum over ranks of their chunk r
void reduce_scatter(tl::Ptr<float> in, tl::Ptr<float> staging, tl::Ptr<int32_t> flags, tl::Ptr<float> out,
                    tl::Int chunk, tl::Const<int> BLOCK) {
  auto me = dist::rank();
  auto n = dist::num_ranks();
  auto d = tl::program_id(0);  // program d pushes our chunk d into rank d's staging row `me`
  shmem::putmem_signal_nbi_block(staging + (me * chunk).to(tl::int64), in + (d * chunk).to(tl::int64),
                                 chunk.to(tl::int64) * 4, flags + me, 1, shmem::SIGNAL_SET, d);
  tl::if_then(d == 0, [&] {
    auto token = dist::wait(flags, n);
    auto base = dist::consume_token(staging, token);
    tl::for_range(0, chunk, BLOCK, [&](Tensor off) {
      auto o = off + tl::arange(0, BLOCK);
      auto m = o < chunk;
      auto acc = tl::for_range(0, n, 1, tl::zeros({BLOCK}, tl::float32),
                               [&](Tensor s, Tensor a) { return a + tl::load(base + s * chunk + o, m, 0.0f); });
      tl::store(out + o, acc, m);
    });
  });
}
TEST(Collectives, ReduceScatter) {
  int n = world_size(), me = rank(), chunk = 777;
  auto in = symm_alloc<float>(size_t(n) * chunk), staging = symm_alloc<float>(size_t(n) * chunk);
  auto flags = symm_alloc<int32_t>(n);
  std::vector<float> out(chunk);
  std::fill(flags.begin(), flags.end(), 0);
  for (int i = 0; i < n * chunk; ++i) in[i] = input_value(me, i);
  barrier_all();
  host_compile(KernelDef("reduce_scatter", reduce_scatter, {"in", "staging", "flags", "out", "chunk", "BLOCK"}),
               {{"BLOCK", 128}})
      .launch({n}, in.data(), staging.data(), flags.data(), out, chunk);
  for (int i = 0; i < chunk; ++i) {
    double want = 0;
    for (int s = 0; s < n; ++s) want += symm_at(in.data(), s)[me * chunk + i];  // read the peers' inputs
    ASSERT_NEAR(out[i], want, 1e-4) << i;
  }
  barrier_all();
  for (void* p : {(void*)in.data(), (void*)staging.data(), (void*)flags.data()}) symm_free(p);
}

// ---- 1000 device barriers back to back
void barriers(tl::Ptr<int64_t> counter, tl::Ptr<int64_t> errors, tl::Int iters) {
  auto n = dist::num_ranks().to(tl::int64);
  tl::for_range(0, iters, 1, [&](Tensor i) {
    shmem::atomic_add(counter, 1, 0);
    shmem::barrier_all();
    // After barrier i every rank has added i+1 times, and nobody has added a (i+2)th time yet.
    auto seen = tl::load(dist::symm_at(counter, 0));
    auto lo = (i + 1).to(tl::int64) * n;
    tl::if_then((seen < lo) | (seen > lo + n), [&] { tl::atomic_add(errors, 1); });
    shmem::sync_all();
  });
}
TEST(Collectives, ThousandDeviceBarriers) {
  auto counter = symm_alloc<int64_t>(1), errors = symm_alloc<int64_t>(1);
  counter[0] = 0, errors[0] = 0;
  barrier_all();
  host_compile(KernelDef("barriers", barriers, {"counter", "errors", "iters"}))
      .launch({1}, counter.data(), errors.data(), 1000);
  EXPECT_EQ(errors[0], 0);
  EXPECT_EQ(*symm_at(counter.data(), 0), 1000 * world_size());
  barrier_all();
  symm_free(errors.data());
  symm_free(counter.data());
}

// ---- put with signal: whenever the signal is seen, all of the data is there
void producer_consumer(tl::Ptr<int32_t> data, tl::Ptr<int32_t> staging, tl::Ptr<int64_t> sig, tl::Ptr<int64_t> ack,
                       tl::Ptr<int64_t> errors, tl::Int iters, tl::Const<int> WORDS) {
  auto me = dist::rank();
  auto n = dist::num_ranks();
  auto to = (me + 1) % n, from = (me - 1 + n) % n;
  auto o = tl::arange(0, WORDS);
  tl::for_range(1, iters + 1, 1, [&](Tensor it) {
    auto it64 = it.to(tl::int64);
    // Producer: wait until the consumer took the previous message, then send the next.
    shmem::signal_wait_until(ack, shmem::Cmp::ge, it64 - 1);
    tl::store(staging + o, it * 100000 + o);
    shmem::putmem_signal_nbi_block(data, staging, WORDS * 4, sig, it64, shmem::SIGNAL_SET, to);
    // Consumer: when the signal says `it`, every word must be from message `it`.
    shmem::signal_wait_until(sig, shmem::Cmp::ge, it64);
    auto got = tl::load(data + o);
    auto bad = tl::sum((got != it * 100000 + o).to(tl::int32), 0);
    tl::if_then(bad > 0, [&] { tl::atomic_add(errors, bad.to(tl::int64)); });
    shmem::signal_op(ack, it64, shmem::SIGNAL_SET, from);
  });
}
TEST(Collectives, PutWithSignalOrdering) {
  const int words = 4096;
  auto data = symm_alloc<int32_t>(words), staging = symm_alloc<int32_t>(words);
  auto sig = symm_alloc<int64_t>(1), ack = symm_alloc<int64_t>(1), errors = symm_alloc<int64_t>(1);
  sig[0] = 0, ack[0] = 0, errors[0] = 0;
  barrier_all();
  host_compile(
      KernelDef("producer_consumer", producer_consumer, {"data", "staging", "sig", "ack", "errors", "iters", "WORDS"}),
      {{"WORDS", words}})
      .launch({1}, data.data(), staging.data(), sig.data(), ack.data(), errors.data(), 300);
  EXPECT_EQ(errors[0], 0);
  EXPECT_EQ(sig[0], 300);
  barrier_all();
  for (void* p :
       {(void*)data.data(), (void*)staging.data(), (void*)sig.data(), (void*)ack.data(), (void*)errors.data()})
    symm_free(p);
}

// ---- getmem, shmem::ptr and the warp/thread forms
void gets_and_direct_stores(tl::Ptr<float> src, tl::Ptr<float> dst, tl::Ptr<int32_t> flag) {
  auto me = shmem::my_pe();
  auto n = shmem::n_pes();
  auto left = (me - 1 + n) % n, right = (me + 1) % n;
  shmem::getmem_nbi_warp(dst, src, 16 * 4, left);
  shmem::getmem_thread(dst + 16, src + 16, 16 * 4, left);
  shmem::quiet();
  auto o = tl::arange(0, 16);
  tl::store(shmem::ptr(dst, right) + 32 + o, tl::load(src + o) * 2.0f);  // a plain store into the peer
  shmem::fence();
  shmem::signal_op(flag, 1, shmem::SIGNAL_ADD, right);
  shmem::signal_wait_until(flag, shmem::Cmp::ne, 0);
}
TEST(Collectives, GetmemAndDirectPeerStores) {
  int n = world_size(), me = rank(), left = (me - 1 + n) % n;
  auto src = symm_alloc<float>(32), dst = symm_alloc<float>(48);
  auto flag = symm_alloc<int32_t>(1);
  flag[0] = 0;
  for (int i = 0; i < 32; ++i) src[i] = input_value(me, i);
  barrier_all();
  host_compile(KernelDef("gets_and_direct_stores", gets_and_direct_stores, {"src", "dst", "flag"}))
      .launch({1}, src.data(), dst.data(), flag.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(dst[i], input_value(left, i)) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(dst[32 + i], 2 * input_value(left, i)) << i;
  barrier_all();
  for (void* p : {(void*)src.data(), (void*)dst.data(), (void*)flag.data()}) symm_free(p);
}

// ---- a device barrier waits for every program of the grid on every rank
void barrier_grid(tl::Ptr<int32_t> marks, tl::Ptr<int64_t> errors) {
  auto me = dist::rank(), n = dist::num_ranks();
  auto p = tl::program_id(0), programs = tl::num_programs(0);
  // Mark our arrival on every rank, then after the barrier every mark must be there.
  tl::for_range(0, n, 1, [&](Tensor r) { tl::store(dist::symm_at(marks + me * programs + p, r), 1); });
  shmem::barrier_all();
  auto o = tl::arange(0, 64);
  auto seen = tl::sum(tl::load(marks + o, o < n * programs, 0), 0);
  tl::if_then(seen != n * programs, [&] { tl::atomic_add(errors, 1); });
}
TEST(Collectives, DeviceBarrierWaitsForEveryProgram) {
  int programs = 64 / world_size();
  auto marks = symm_alloc<int32_t>(64);
  auto errors = symm_alloc<int64_t>(1);
  std::fill(marks.begin(), marks.end(), 0);
  errors[0] = 0;
  barrier_all();
  host_compile(KernelDef("barrier_grid", barrier_grid, {"marks", "errors"}))
      .launch({programs}, marks.data(), errors.data());
  EXPECT_EQ(errors[0], 0) << "a program left the barrier before every program had arrived";
  barrier_all();
  symm_free(errors.data());
  symm_free(marks.data());
}

TEST(Collectives, RemoteCompareSwap) {
  auto word = symm_alloc<int64_t>(1);
  word[0] = 0;
  barrier_all();
  // Every rank claims slot 0 of rank 0 with a CAS; exactly one wins.
  auto claim = [](tl::Ptr<int64_t> w, tl::Ptr<int64_t> won) {
    auto me = dist::rank().to(tl::int64);
    auto old = shmem::atomic_compare_swap(w, 0, me + 1, 0);
    tl::store(won, (old == 0).to(tl::int64));
  };
  std::vector<int64_t> won(1, -1);
  host_compile(KernelDef("claim", +claim, {"w", "won"})).launch({1}, word.data(), won);
  barrier_all();
  std::vector<int64_t> all(1);
  auto wins = symm_alloc<int64_t>(1);
  *symm_at(wins.data(), 0) = 0;
  barrier_all();
  __atomic_add_fetch(symm_at(wins.data(), 0), won[0], __ATOMIC_SEQ_CST);
  barrier_all();
  EXPECT_EQ(*symm_at(wins.data(), 0), 1);
  int64_t winner = *symm_at(word.data(), 0);
  EXPECT_TRUE(winner >= 1 && winner <= world_size());
  barrier_all();
  symm_free(wins.data());
  symm_free(word.data());
}

}  // namespace
}  // namespace tiledist
