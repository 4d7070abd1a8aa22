// AllGather + GEMM, overlapped: C[M, N] = all_gather(A)[M, K] @ B[K, N], where each rank holds
// M / ranks rows of A. The gather is the copy engine's (GPU; the host's memcpy on the CPU): each
// rank copies its rows into every rank's gathered A and then writes the call's number into the
// signal word for its rows there (its own copy before the GEMM starts, the peers' on a stream
// of their own). The GEMM starts at once: a program waits only for the ranks
// whose rows its tile covers, and the programs start with this rank's own rows, which are
// already there, so the wait for the others' overlaps the first tiles' math.
//
// Calls alternate between two gathered buffers, and signal words only grow (as in the
// collectives): a rank copies call k+1 into a peer's buffer only after its GEMM of call k has
// received every rank's rows of call k, which each peer sent after finishing call k-1, the last
// reader of that buffer.
#include <atomic>
#include <cstring>

#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class T>
void ag_gemm(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Ptr<int32_t> flags, tl::Int M, tl::Int N, tl::Int K,
             tl::Int call, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto rows = M / n;  // per rank
  auto [grouped_m, pid_n] = detail::grouped_tile(GROUP_M);
  auto pid_m = (grouped_m + me * rows / BM) % tl::num_programs(0);  // our own rows first
  auto first = pid_m * BM / rows;
  auto last = tl::minimum((pid_m * BM + BM - 1) / rows, n - 1);
  auto token = tl::for_range(first, last + 1, 1, tl::scalar(0, tl::int32), [&](Tensor owner, Tensor) {
    return shmem::signal_wait_until(flags + owner, shmem::Cmp::ge, call);
  });
  detail::gemm_tile(tl::Ptr<T>(dist::consume_token(a, token).value()), b, c, M, N, K, pid_m, pid_n, BM, BN, BK);
}
}  // namespace

const KernelDef& ag_gemm_kernel() {
  static const KernelDef def = KernelDef("ag_gemm", ag_gemm<bf16>,
                                         {"a", "b", "c", "flags", "M", "N", "K", "call", "BM", "BN", "BK", "GROUP_M"},
                                         {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}})
                                   .do_not_specialize({"call"});
  return def;
}
TILEDIST_REGISTER(ag_gemm_kernel());

struct AgGemm::State {
  Target target;
  int rank = 0, ranks = 1;
  int64_t M = 0, N = 0, K = 0, rows = 0;
  bf16* gathered = nullptr;  // two buffers of M x K
  int32_t* flags = nullptr;   // flags[r]: the last call whose rows of rank r are here
  int32_t calls = 0;
  GemmConfig config;
  Kernel kernel;
  std::unique_ptr<cuda::Stream> copies;
  std::unique_ptr<cuda::Event> ready;  // the run's stream, as the run starts
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  void* at(const void* p, int r) const { return detail::symm_on(target, p, r); }
};

AgGemm::AgGemm(const Target& target, int64_t M, int64_t N, int64_t K) : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.rank = detail::world_rank(target);
  s.ranks = detail::world_ranks(target);
  if (M % s.ranks)
    throw Error(str_cat("tiledist: ag_gemm: M = ", M, " rows do not split evenly over ", s.ranks, " ranks"));
  s.M = M, s.N = N, s.K = K, s.rows = M / s.ranks;
  s.gathered = static_cast<bf16*>(detail::symm_zeroed(target, 2 * size_t(M) * K * sizeof(bf16)));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, s.ranks * sizeof(int32_t)));
  if (s.gpu()) {
    s.copies = std::make_unique<cuda::Stream>();
    s.ready = std::make_unique<cuda::Event>(false);
  }
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.config = gemm_config(target, M, N, K);
  Constants constants = s.config.constants;
  constants.insert_or_assign("GROUP_M", ConstValue(8));
  s.kernel = compile(ag_gemm_kernel(), constants, target, s.config.options);
}

AgGemm::~AgGemm() {
  s_->streams.finish();
  if (s_->copies) s_->copies->synchronize();
  detail::symm_release(s_->target, s_->flags);
  detail::symm_release(s_->target, s_->gathered);
}

void AgGemm::run(const bf16* a, const bf16* b, float* c, const cuda::Stream* stream) {
  State& s = *s_;
  const int32_t call = ++s.calls;
  bf16* gathered = s.gathered + (call % 2) * s.M * s.K;
  bf16* mine = gathered + s.rank * s.rows * s.K;
  const size_t bytes = size_t(s.rows) * s.K * sizeof(bf16);
  const cuda::Stream* on = s.gpu() ? &s.streams.enter(stream) : nullptr;
  if (on) {
    // The peers' copies start once `a` is ready and our last run's GEMM is done (its half of
    // the gathered rows is then free on every rank: a peer's GEMM of this run waits for our
    // copies, and ours waited for theirs of the last run).
    s.ready->record(on);
    s.ready->make_wait(*s.copies);
    // Our own rows before the GEMM starts, on its stream: a copy within one GPU runs as a
    // kernel, which would find every SM taken by GEMM programs waiting for it.
    cuda::copy_async(mine, a, bytes, *on);
    cuda::write_value(s.flags + s.rank, static_cast<uint32_t>(call), *on);
  }
  for (int k = 1; k <= s.ranks; ++k) {  // the next rank first, ourselves last
    const int r = (s.rank + k) % s.ranks;
    if (on) {
      if (r == s.rank) continue;
      cuda::copy_async(s.at(mine, r), a, bytes, *s.copies);  // peer to peer: the copy engine
      cuda::write_value(s.at(s.flags + s.rank, r), static_cast<uint32_t>(call), *s.copies);
    } else {
      std::memcpy(s.at(mine, r), a, bytes);
      std::atomic_ref<int32_t>(*static_cast<int32_t*>(s.at(s.flags + s.rank, r))).store(call, std::memory_order_release);
    }
  }
  if (on) {
    s.kernel.launch_on(*on, s.config.grid(s.M, s.N), cuda::DevicePtr<bf16>{gathered, 0}, cuda::DevicePtr<const bf16>{b, 0},
                       cuda::DevicePtr<float>{c, 0}, cuda::DevicePtr<int32_t>{s.flags, 0}, s.M, s.N, s.K, call);
    s.streams.leave(*on, stream);
  } else
    s.kernel.launch(s.config.grid(s.M, s.N), gathered, b, c, s.flags, s.M, s.N, s.K, call);
}

const bf16* AgGemm::gathered() const { return s_->gathered + (s_->calls % 2) * s_->M * s_->K; }

}  // namespace tiledist::kernels
