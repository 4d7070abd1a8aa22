// AllGather + GEMM, overlapped: C[M, N] = all_gather(A)[M, K] @ B[K, N], where each rank holds
// M / ranks rows of A, gathered into every rank's copy of the whole A one of two ways:
// - by the copy engine (GPU; the host's memcpy on the CPU): each rank copies its rows into every
//   rank's gathered A and then writes the call's number into the signal word for its rows
//   there (its own copy before the GEMM starts, the peers' on a stream of their own);
// - by SM puts: the first PUTS programs of the GEMM's grid push a slice of this rank's rows
//   each, to every rank (itself first), with putmem_signal, one signal word per (rank, slice).
//   They wait for nothing, and come first in the grid, so they are resident before any GEMM
//   program that waits for them (the hardware starts programs in order; a GEMM program of a
//   peer's rows may then wait, but never for a program that cannot start).
// The GEMM starts at once: a program waits only for the slices of rows its tile covers, and
// the programs start with this rank's own rows, so the wait for the others' overlaps the first
// tiles' math.
//
// Calls alternate between two gathered buffers, and signal words only grow (as in the
// collectives): a rank copies call k+1 into a peer's buffer only after its GEMM of call k has
// received every rank's rows of call k, which each peer sent after finishing call k-1, the last
// reader of that buffer.
//
// What the protocol needs to make progress (a GEMM program that waits holds its SM until the
// rows come):
// - By the copy engine, a copy to a peer on another GPU runs on the copy engines, beside a GEMM
//   whose programs may hold every SM while they wait. A copy to a peer that shares our GPU (a
//   process whose context takes turns with ours on it) runs on its SMs, as a kernel of ours: it
//   must come before our GEMM on its stream, or it can wait behind GEMM programs that wait, on
//   every rank, for the copies of the others (the deadlock of 4 ranks on one H200 in the
//   second run, when the GEMM no longer started late behind its first compile: the copies to
//   the second and third peer, queued behind the first on the side stream, found every SM
//   taken). So the copies to peers on our GPU are queued before the GEMM, on its stream; the
//   GEMM starts once they are done, and then waits only for copies that need no SM of ours.
// - By SM puts, the pushing programs wait for nothing and come first in a 1-D grid, which the
//   hardware starts in order.
// - Runs of one object, and of every communicating object of the library, are queued in one
//   order per rank (detail::RunOrder): two side by side could hold the SMs the other needs.
#include <atomic>
#include <cstring>

#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// `a`: the gathered A (symmetric); `shard`: this rank's rows (read by the SM puts only).
/// flags[r * slices + s]: the last call whose slice s of rank r's rows is here.
template <class T>
void ag_gemm(tl::Ptr<T> a, tl::Ptr<T> shard, tl::Ptr<T> b, tl::Ptr<float> c, tl::Ptr<int32_t> flags, tl::Int M,
             tl::Int N, tl::Int K, tl::Int call, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK,
             tl::Const<int> GROUP_M, tl::Const<int> PUTS, tl::Const<int> PERSISTENT) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto rows = tl::maximum(M, 0) / n;  // per rank
  // (M >= 0 said so: the compiler then knows the tile coordinates are, as TMA copies need)
  const int slices = PUTS > 0 ? int(PUTS) : 1;
  auto slice_rows = (rows + slices - 1) / slices;
  auto word = [&](const Tensor& row) { return row / rows * slices + row % rows / slice_rows; };  // row's signal word
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  auto gemm = [&](const std::pair<Tensor, Tensor>& tile) {
    auto pid_m = (tile.first + me * rows / BM) % num_m;  // our own rows first
    auto pid_n = tile.second;
    auto top = pid_m * BM, bottom = tl::minimum(top + BM, M) - 1;
    Tensor token;
    tl::profile("wait",
                [&] {
                  token = tl::for_range(
                      word(top), word(bottom) + 1, 1, tl::scalar(0, tl::int32),
                      [&](Tensor w, Tensor) { return shmem::signal_wait_until(flags + w, shmem::Cmp::ge, call); });
                },
                {pid_m, pid_n});
    detail::gemm_tile(tl::Ptr<T>(dist::consume_token(a, token).value()), b, c, M, N, K, pid_m, pid_n, BM, BN, BK);
  };
  if (PUTS == 0 && PERSISTENT) {  // (PERSISTENT: the programs walk the tiles, as gemm's)
    return detail::for_each_tile(num_m, num_n, GROUP_M, [&](const Tensor& m, const Tensor& n) { gemm({m, n}); });
  }
  if (PUTS == 0) return gemm(detail::grouped_tile(GROUP_M));
  // Programs [0, PUTS) push slice `pid` of our rows to every rank, ourselves first; the rest
  // are the GEMM's, over a 1-D grid.
  auto pid = tl::program_id(0);
  tl::if_then(pid < int(PUTS), [&] {
    auto lo = pid * slice_rows;
    auto count = tl::maximum(tl::minimum(slice_rows, rows - lo), 0);
    auto bytes = count.to(tl::int64) * K.to(tl::int64) * int64_t(sizeof(T));
    tl::profile("put",
                [&] {
                  tl::for_range(0, n, 1, [&](Tensor i) {
                    shmem::putmem_signal_nbi_block(a + (me * rows + lo).to(tl::int64) * K.to(tl::int64),
                                                   shard + lo.to(tl::int64) * K.to(tl::int64), bytes,
                                                   flags + me * slices + pid, call, shmem::SIGNAL_SET, (me + i) % n);
                  });
                },
                {pid});
  });
  tl::if_then(pid >= int(PUTS), [&] { gemm(detail::grouped_tile(pid - int(PUTS), num_m, num_n, GROUP_M)); });
}
}  // namespace

const KernelDef& ag_gemm_kernel() {
  static const KernelDef def =
      KernelDef(
          "ag_gemm", ag_gemm<bf16>,
          {"a", "shard", "b", "c", "flags", "M", "N", "K", "call", "BM", "BN", "BK", "GROUP_M", "PUTS", "PERSISTENT"},
          {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"PUTS", 0}, {"PERSISTENT", 0}})
          .do_not_specialize({"call"});
  return def;
}
TILEDIST_REGISTER(ag_gemm_kernel());

struct AgGemm::State {
  Target target;
  int rank = 0, ranks = 1;
  int64_t M = 0, N = 0, K = 0, rows = 0;
  bf16* gathered = nullptr;  // two buffers of M x K
  int puts = 0;              // SM puts: the programs that push (slices of each rank's rows)
  int32_t* flags = nullptr;  // flags[r * slices + s]: the last call whose slice s of rank r's rows is here
  int32_t calls = 0;
  GemmConfig config;
  Kernel kernel;
  std::unique_ptr<detail::SideStream> copies;  // the copy engine's gather
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  void* at(const void* p, int r) const { return detail::symm_on(target, p, r); }
  ~State() {  // (here, not in ~AgGemm: copies share the state; it goes once, with the last)
    streams.finish();
    if (copies) copies->finish();
    if (flags) detail::symm_release(target, flags);
    if (gathered) detail::symm_release(target, gathered);
  }
};

AgGemm::AgGemm(const Target& target, int64_t M, int64_t N, int64_t K, Gather gather, int puts)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.rank = detail::world_rank(target);
  s.ranks = detail::world_ranks(target);
  if (M % s.ranks)
    throw Error(str_cat("tiledist: ag_gemm: M = ", M, " rows do not split evenly over ", s.ranks, " ranks"));
  // (the kernels index A, B and C with 32-bit element numbers, as gemm's)
  if (M < 0 || N < 0 || K < 0 || M * K > INT32_MAX || K * N > INT32_MAX || M * N > INT32_MAX)
    throw Error(str_cat("tiledist: ag_gemm: M, N, K = ", M, ", ", N, ", ", K,
                        ": not negative, and the gathered A, B and C under 2^31 elements each"));
  s.M = M, s.N = N, s.K = K, s.rows = M / s.ranks;
  if (gather == Gather::sm_puts) {
    if (puts < 0) throw Error(str_cat("tiledist: ag_gemm: ", puts, " programs cannot push the rows"));
    s.puts = static_cast<int>(std::clamp<int64_t>(puts      ? puts
                                                  : s.gpu() ? kDefaultPuts
                                                            : 2,
                                                  1, std::max<int64_t>(s.rows, 1)));
  }
  s.gathered = static_cast<bf16*>(detail::symm_zeroed(target, 2 * size_t(M) * K * sizeof(bf16)));
  s.flags = static_cast<int32_t*>(detail::symm_zeroed(target, size_t(s.ranks) * std::max(s.puts, 1) * sizeof(int32_t)));
  if (s.gpu() && gather == Gather::copy_engine) s.copies = std::make_unique<detail::SideStream>();
  barrier_all();  // no rank signals before every rank has zeroed its flags
  s.config = gemm_config(target, M, N, K, false);
  if (s.puts) s.config = s.config.per_tile();  // (the pushing programs come first in the grid)
  Constants constants = s.config.constants;
  constants.insert_or_assign("GROUP_M", ConstValue(8));
  constants.insert_or_assign("PUTS", ConstValue(s.puts));
  s.kernel = compile(ag_gemm_kernel(), constants, target, s.config.options);
}

AgGemm::~AgGemm() = default;

void AgGemm::run(const bf16* a, const bf16* b, float* c, const runtime::Stream* stream) {
  State& s = *s_;
  const runtime::Stream* on = s.gpu() ? &s.streams.enter(stream, "ag_gemm") : nullptr;
  const int32_t call = ++s.calls;
  bf16* gathered = s.gathered + (call % 2) * s.M * s.K;
  bf16* mine = gathered + s.rank * s.rows * s.K;
  const size_t bytes = size_t(s.rows) * s.K * sizeof(bf16);
  const Grid tiles = s.config.grid(s.M, s.N);
  auto gemm = [&](Grid grid) { detail::launch(s.kernel, on, grid, gathered, a, b, c, s.flags, s.M, s.N, s.K, call); };
  if (s.puts) {  // the kernel's first programs push the rows
    gemm({static_cast<int>(s.puts + int64_t(tiles.x) * tiles.y)});
  } else if (on) {
    // The peers' copies start once `a` is ready and our last run's GEMM is done (its half of
    // the gathered rows is then free on every rank: a peer's GEMM of this run waits for our
    // copies, and ours waited for theirs of the last run).
    s.copies->fork(*on);
    // Our own rows, and the rows of peers on our GPU, before the GEMM starts, on its stream
    // (our own unless they are there: in place): a copy within one GPU runs as a kernel, which
    // would find every SM taken by GEMM programs waiting for it (the protocol, above).
    if (a != mine) runtime::copy_async(mine, a, bytes, *on);
    runtime::write_value(s.flags + s.rank, static_cast<uint32_t>(call), *on);
    for (int k = 1; k < s.ranks; ++k) {  // the next rank first
      const int r = (s.rank + k) % s.ranks;
      const runtime::Stream& by =
          detail::shares_gpu(s.target, r) ? *on : s.copies->stream();  // else peer to peer: the copy engine
      runtime::copy_async(s.at(mine, r), a, bytes, by);
      runtime::write_value(s.at(s.flags + s.rank, r), static_cast<uint32_t>(call), by);
    }
    gemm(tiles);
    s.copies->join(*on);  // the run ends once our copies have read `a` too (the GEMM waits only for the peers')
  } else {
    for (int k = 1; k <= s.ranks; ++k) {  // the next rank first, ourselves last
      const int r = (s.rank + k) % s.ranks;
      if (s.at(mine, r) != a) std::memcpy(s.at(mine, r), a, bytes);
      std::atomic_ref<int32_t>(*static_cast<int32_t*>(s.at(s.flags + s.rank, r)))
          .store(call, std::memory_order_release);
    }
    gemm(tiles);
  }
  if (on) s.streams.leave(*on, stream);
}

const bf16* AgGemm::gathered() const { return s_->gathered + (s_->calls % 2) * s_->M * s_->K; }
bf16* AgGemm::next_input() const {
  return s_->gathered + ((s_->calls + 1) % 2) * s_->M * s_->K + s_->rank * s_->rows * s_->K;
}

}  // namespace tiledist::kernels
