// The library collectives (kernels::Collectives) checked on every rank against sums the host
// computes in the same rank order (so results must match exactly): ragged sizes, messages larger
// than the staging area (sent in pieces), calls back to back (staging halves and growing signal
// words), and all-reduce in one shot and in two (with a tail of fewer than 4 per rank). Shared by the CPU test
// (collectives_test, dist_test) and the GPU test (cuda_dist_test).
#pragma once

#include <gtest/gtest.h>

#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "kernels/symmetric.h"

namespace tiledist::testing_collectives {

inline float value(int r, int64_t i, int call) {
  return float((r * 7919 + i * 104729 + call * 31) % 1000) / 100.0f - 5.0f;
}
inline std::vector<float> values(int r, size_t n, int call) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(r, static_cast<int64_t>(i), call);
  return v;
}

/// A ring all-gather written with the primitives: at step s each rank forwards chunk (rank - s)
/// to its right neighbour with putmem_signal_block, after waiting for it to arrive.
inline void ring_all_gather(tl::Ptr<float> out, tl::Ptr<int32_t> flags, tl::Int chunk) {
  using tl::Tensor;
  auto me = dist::rank();
  auto n = dist::num_ranks();
  auto right = (me + 1) % n;
  tl::for_range(0, n - 1, 1, [&](Tensor s) {
    auto c = (me - s + n) % n;
    tl::if_then(s > 0, [&] { dist::wait(flags + c, 1); });
    auto offset = (c * chunk).to(tl::int64);
    shmem::putmem_signal_block(out + offset, out + offset, chunk.to(tl::int64) * 4, flags + c, 1, shmem::SIGNAL_SET,
                               right);
  });
  // The last chunk to arrive is the one two steps behind us.
  auto last = (me + 1) % n;
  tl::if_then(n > 1, [&] { dist::wait(flags + last, 1); });
}

/// A wait on a block of scattered signal words, each for its own value: program 0 waits on
/// words perm(0..W) here (perm: i * 5 mod W), word k for 100 + k. The host set every word but
/// those at places 1 and W - 1 of the block (scattered_wait_late); programs 1 and 2 of the
/// rank before count on our counter, then set those two. Program 0 then stores the count it
/// sees in `seen`: 2, where it waited for every word (and waits again on the same words with
/// dist::wait's ==, done at once).
inline void scattered_wait(tl::Ptr<int64_t> flags, tl::Ptr<int64_t> count, tl::Ptr<int64_t> seen, tl::Const<int> W) {
  auto next = (dist::rank() + 1) % dist::num_ranks();
  auto pid = tl::program_id(0);
  tl::if_then(pid == 0, [&] {
    auto perm = tl::arange(0, W) * 5 % W;
    shmem::signal_wait_until(flags + perm, shmem::Cmp::ge, 100 + perm);
    auto token = dist::wait(flags + perm, 1, dist::Scope::sys, dist::Semantic::acquire, 100 + perm);
    tl::store(seen, tl::load(dist::consume_token(count, token)));
  });
  tl::if_then(pid > 0, [&] {
    auto word = (1 + (pid - 1) * (W - 2)) * 5 % W;
    shmem::atomic_add(count, 1, next);
    dist::notify(flags + word, next, 100 + word);
  });
}
/// The words scattered_wait's programs 1 and 2 set (the others the host sets before).
inline bool scattered_wait_late(int k, int W) { return k == 5 % W || k == (W - 1) * 5 % W; }

/// Host memory for the checks' Memory parameter (below): the CPU backend's buffers.
template <class T>
struct HostMemory {
  std::vector<T> v;
  static HostMemory make(std::vector<T> v) { return {std::move(v)}; }
  T* ptr() { return v.data(); }
  std::vector<T> get() const { return v; }
};

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16(v[i]);
  return h;
}

/// Memory<T>::make(std::vector<T>) -> an object with ptr() and get() (a host copy). T: float or
/// bf16 (inputs rounded to bf16, sums taken in f32 in rank order and rounded once, as the
/// kernels do).
template <template <class> class Memory, class T = float>
void check(const Target& target, size_t capacity_bytes,
           std::initializer_list<size_t> counts = {size_t(1), size_t(5), size_t(4099), size_t(100003)}) {
  kernels::Collectives c(target, capacity_bytes);
  const int n = c.ranks(), me = rank();
  const char* type = std::is_same_v<T, float> ? "f32" : "bf16";
  auto typed = [](const std::vector<float>& v) {
    std::vector<T> t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = T(v[i]);
    return t;
  };
  auto elem = [](int r, int64_t i, int call) { return float(T(value(r, i, call))); };  // as the kernel sees it
  int call = 0;
  for (size_t count : counts) {
    ++call;
    {
      auto in = Memory<T>::make(typed(values(me, count, call)));
      auto out = Memory<T>::make(std::vector<T>(n * count, T(-1.0f)));
      c.all_gather(in.ptr(), out.ptr(), count);
      std::vector<T> got = out.get();
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(float(got[r * count + i]), elem(r, static_cast<int64_t>(i), call))
              << type << " all_gather of " << count << ": rank " << r << "'s element " << i;
    }
    {
      auto in = Memory<T>::make(typed(values(me, n * count, call)));
      auto out = Memory<T>::make(std::vector<T>(count, T(-1.0f)));
      c.reduce_scatter(in.ptr(), out.ptr(), count);
      std::vector<T> got = out.get();
      std::vector<float> want(count, 0.0f);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) want[i] += elem(r, static_cast<int64_t>(me * count + i), call);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(float(got[i]), float(T(want[i]))) << type << " reduce_scatter of " << count << ": element " << i;
    }
    using Algo = kernels::Collectives::AllReduce;
    for (Algo algo : {Algo::one_shot, Algo::two_shot, Algo::automatic}) {
      const char* name = algo == Algo::one_shot ? "one-shot" : algo == Algo::two_shot ? "two-shot" : "automatic";
      auto in = Memory<T>::make(typed(values(me, count, call)));
      auto out = Memory<T>::make(std::vector<T>(count, T(-1.0f)));
      c.all_reduce(in.ptr(), out.ptr(), count, algo);
      std::vector<T> got = out.get();
      std::vector<float> want(count, 0.0f);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) want[i] += elem(r, static_cast<int64_t>(i), call);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(float(got[i]), float(T(want[i])))
            << type << " " << name << " all_reduce of " << count << ": element " << i;
    }
    // In place, as NCCL's: all_reduce in == out (every algorithm), reduce_scatter into our
    // part of the input, all_gather from our part of the output.
    for (Algo algo : {Algo::one_shot, Algo::two_shot}) {
      auto buf = Memory<T>::make(typed(values(me, count, call)));
      c.all_reduce(buf.ptr(), buf.ptr(), count, algo);
      std::vector<T> got = buf.get();
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += elem(r, static_cast<int64_t>(i), call);
        ASSERT_EQ(float(got[i]), float(T(want))) << type << " all_reduce in place of " << count << ": element " << i;
      }
    }
    {
      auto buf = Memory<T>::make(typed(values(me, n * count, call)));
      c.reduce_scatter(buf.ptr(), buf.ptr() + me * count, count);
      std::vector<T> got = buf.get();
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += elem(r, static_cast<int64_t>(me * count + i), call);
        ASSERT_EQ(float(got[me * count + i]), float(T(want)))
            << type << " reduce_scatter in place of " << count << ": element " << i;
      }
    }
    {
      std::vector<T> start(n * count, T(-1.0f));
      std::vector<T> mine = typed(values(me, count, call));
      std::copy(mine.begin(), mine.end(), start.begin() + me * count);
      auto buf = Memory<T>::make(start);
      c.all_gather(buf.ptr() + me * count, buf.ptr(), count);
      std::vector<T> got = buf.get();
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(float(got[r * count + i]), elem(r, static_cast<int64_t>(i), call))
              << type << " all_gather in place of " << count << ": rank " << r << "'s element " << i;
    }
  }
  // Overlap other than in place is refused, naming the op, before anything runs.
  if (n > 1) {
    auto buf = Memory<T>::make(std::vector<T>(n * 8, T(0.0f)));
    EXPECT_THROW(c.all_reduce(buf.ptr(), buf.ptr() + 1, 8), Error);
    EXPECT_THROW(c.reduce_scatter(buf.ptr(), buf.ptr() + (me + 1) % n * 8, 8), Error);
  }
}

/// AllGather + GEMM on every rank against a host GEMM of the gathered rows (in f32 from the
/// same bf16 inputs), over a few calls in a row: on `streams` (GPU) the calls are queued back to
/// back, each on the next stream in turn, and checked after the last has been waited for.
template <template <class> class Memory>
void check_ag_gemm(const Target& target, int64_t M, int64_t N, int64_t K,
                   std::vector<const runtime::Stream*> streams = {nullptr},
                   kernels::AgGemm::Gather gather = kernels::AgGemm::Gather::copy_engine, int puts = 0,
                   bool in_place = false) {
  kernels::AgGemm op(target, M, N, K, gather, puts);
  const int n = world_size(), me = rank();
  const int64_t rows = M / n, rows_k = rows * K;
  constexpr int kCalls = 3;
  std::vector<Memory<bf16>> as, bs;
  std::vector<Memory<float>> cs;
  for (int call = 1; call <= kCalls; ++call) {
    as.push_back(Memory<bf16>::make(to_bf16(values(me, rows * K, call))));
    bs.push_back(Memory<bf16>::make(to_bf16(values(1000, K * N, call))));
    cs.push_back(Memory<float>::make(std::vector<float>(M * N, -1.0f)));
    bf16* input = as.back().ptr();
    if (in_place) {  // this rank's rows where the run wants them, written as a producer would
      input = op.next_input();
      std::vector<bf16> rows = to_bf16(values(me, rows_k, call));
      if (kernels::detail::on_gpu(target))
        cuda::copy_to_device(input, rows.data(), rows.size() * sizeof(bf16));
      else
        std::copy(rows.begin(), rows.end(), input);
    }
    op.run(input, bs.back().ptr(), cs.back().ptr(), streams[call % streams.size()]);
  }
  for (const runtime::Stream* s : streams)
    if (s) s->synchronize();
  for (int call = 1; call <= kCalls; ++call) {
    std::vector<std::vector<bf16>> shards;
    for (int r = 0; r < n; ++r) shards.push_back(to_bf16(values(r, rows * K, call)));
    std::vector<bf16> bh = to_bf16(values(1000, K * N, call));
    std::vector<float> got = cs[call - 1].get(), want(M * N, 0.0f);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        float av = float(shards[i / rows][(i % rows) * K + k]);
        for (int64_t j = 0; j < N; ++j) want[i * N + j] += av * float(bh[k * N + j]);
      }
    EXPECT_LT(reference::rel_error(got, want), 1e-5)
        << "call " << call << ": relative error of C (M=" << M << ", N=" << N << ", K=" << K << ")";
  }
}

/// Our rows of the sum over the ranks r of A_r @ B_r, their inputs values(r, M * K, call) and
/// values(100 + r, K * N, call) in bf16, summed in f32 on the host: every row where `all`
/// (GEMM + AllReduce), else this rank's share (GEMM + ReduceScatter).
inline std::vector<float> gemm_rs_want(int64_t M, int64_t N, int64_t K, bool all, int call) {
  const int n = world_size(), me = rank();
  const int64_t rows = all ? M : M / n, first = all ? 0 : me * rows;
  std::vector<float> want(rows * N, 0.0f);
  for (int r = 0; r < n; ++r) {
    const std::vector<bf16> a = to_bf16(values(r, M * K, call)), b = to_bf16(values(100 + r, K * N, call));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const float av = float(a[(first + i) * K + k]);
        for (int64_t j = 0; j < N; ++j) want[i * N + j] += av * float(b[k * N + j]);
      }
  }
  return want;
}

/// GEMM + ReduceScatter (or, with Op = GemmAr, + AllReduce) on every rank: out = our rows (or
/// all rows) of the sum over ranks of A_r @ B_r, against the host's sum of f32 products of the
/// same bf16 inputs, over a few calls in a row (on `streams` as check_ag_gemm does). `split_k`
/// (GemmAr): each tile's K cut into that many runs (0: as gemm_config says).
template <template <class> class Memory, class Op = kernels::GemmRs>
void check_gemm_rs(const Target& target, int64_t M, int64_t N, int64_t K,
                   std::vector<const runtime::Stream*> streams = {nullptr}, int split_k = 0) {
  SCOPED_TRACE(str_cat("M=", M, " N=", N, " K=", K, " split_k=", split_k));
  constexpr bool all = std::is_same_v<Op, kernels::GemmAr>;  // GEMM + AllReduce: every row is ours
  auto make = [&] {
    if constexpr (all) {
      kernels::GemmConfig config = kernels::gemm_config(target, M, N, K, false);
      if (split_k > 0) config.split_k = split_k;
      return Op(target, M, N, K, config);
    } else {
      return Op(target, M, N, K);
    }
  };
  Op op = make();
  const int me = rank();
  const int64_t rows = all ? M : M / world_size();  // the rows we get
  constexpr int kCalls = 3;
  std::vector<Memory<bf16>> a_in, b_in;
  std::vector<Memory<float>> outs;
  for (int call = 1; call <= kCalls; ++call) {
    a_in.push_back(Memory<bf16>::make(to_bf16(values(me, M * K, call))));
    b_in.push_back(Memory<bf16>::make(to_bf16(values(100 + me, K * N, call))));
    outs.push_back(Memory<float>::make(std::vector<float>(rows * N, -1.0f)));
    op.run(a_in.back().ptr(), b_in.back().ptr(), outs.back().ptr(), streams[call % streams.size()]);
  }
  for (const runtime::Stream* s : streams)
    if (s) s->synchronize();
  for (int call = 1; call <= kCalls; ++call)
    EXPECT_LT(reference::rel_error(outs[call - 1].get(), gemm_rs_want(M, N, K, all, call)), 1e-5)
        << "call " << call << ": relative error of our rows (M=" << M << ", N=" << N << ", K=" << K << ")";
}

}  // namespace tiledist::testing_collectives
