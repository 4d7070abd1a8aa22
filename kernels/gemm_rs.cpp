// GEMM + ReduceScatter, overlapped: every rank computes its partial C_r = A_r[M, K] @ B_r[K, N]
// (K split over the ranks), and rank p gets rows [p M / ranks, (p + 1) M / ranks) of the sum
// over r of C_r. Each GEMM program pushes its finished tile straight from registers into the
// owner rank's staging area (a slot per contributing rank) and counts it there with a signal;
// the programs start with the next rank's rows, so pushes begin with the first tiles and go on
// under the later tiles' math. A reduce kernel then waits until every rank's tiles of our rows
// have arrived and sums the slots in rank order.
//
// Calls alternate between two staging halves and signal words only grow, as in the other
// collectives: a rank pushes call k+1 into a peer's half only after its reduce of call k has
// received every rank's tiles of call k, which each peer pushed after finishing call k-1.
// The call's number lives in device memory, not in the launches' arguments, so a run may be
// captured into a graph and replayed (runtime/graph.h): epochs[0] is the last finished call,
// read by the GEMM (its call is one past it), which publishes its call in epochs[1] for the
// reduce kernel, which advances epochs[0] (where the copy engine scatters, the host does,
// after the GEMM: those runs are not captured). Each word is written by one kernel while the
// other kernel's programs read it, never while its own do. The words and the signal words are
// 64-bit: the tiles pushed over all calls (calls x tiles) pass 2^31 within hours of a model's
// decode steps, which a graph replays without the host seeing them. (The host writes the low
// halves of the copy engine's words: its calls stay under 2^31.)
//
// GEMM + AllReduce is the same with every tile pushed to every rank (ALL): one-shot, suited to
// the small M of decoding more than to large GEMMs.
#include <numeric>

#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

template <class T>
void gemm_rs(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> staging, tl::Ptr<int64_t> flags, tl::Ptr<float> partial,
             tl::Ptr<int32_t> counters, tl::Ptr<float> out, tl::Int M, tl::Int N, tl::Int K, tl::Ptr<int64_t> epochs,
             tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M, tl::Const<int> ALL,
             tl::Const<int> COPY, tl::Const<int> PERSISTENT) {
  auto n = dist::num_ranks(), me = dist::rank();
  auto call = tl::load(epochs) + 1;  // (the header says how the words go)
  // (published at the end: a store before the tiles' loops would keep them from warp
  // specialization, whose producer must not copy ahead of a write)
  auto publish = [&] {
    tl::if_then((tl::program_id(0) == 0) & (tl::program_id(1) == 0), [&] { tl::store(epochs + 1, call); });
  };
  if (ALL) {  // GEMM + AllReduce: every tile goes to every rank (all rows are everyone's)
    // The grid's z: each tile's K cut into that many runs (a slot each, rank by rank: parts
    // slots a rank), summed by the reduce with the ranks'.
    auto parts = tl::num_programs(2), part = tl::program_id(2);
    auto half = staging + (call & 1).to(tl::int64) * n * parts * M * N;
    auto [grouped_m, pid_n] = detail::grouped_tile(GROUP_M);
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
    auto steps = tl::maximum(tl::cdiv(tl::maximum(K, 0), BK), 1);  // K steps of a tile
    auto k0 = part * steps / parts * BK, k1 = tl::minimum((part + 1) * steps / parts * BK, K);
    auto acc = detail::gemm_acc(a, b, M, N, K, grouped_m, pid_n, BM, BN, BK, k0, k1);
    auto row = tl::expand_dims(grouped_m * BM + tl::arange(0, BM), 1);
    tl::for_range(0, n, 1, [&](Tensor k) {
      auto r = (me + 1 + k) % n;
      auto slot = dist::symm_at(half, r) + (me * parts + part).to(tl::int64) * M * N;
      tl::store(slot + row * N + col, acc, (row < M) & (col < N));
      shmem::signal_op(flags + me, 1, shmem::SIGNAL_ADD, r);
    });
    return publish();
  }
  auto rows = tl::maximum(M, 0) / n;  // per rank, a multiple of BM (the host checks)
  auto half = staging + (call & 1).to(tl::int64) * n * rows * N;
  // (M >= 0 said so: the compiler then knows the tile coordinates are, as TMA copies need)
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  auto tile = [&](const Tensor& grouped_m, const Tensor& pid_n) {
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
    auto pid_m = (grouped_m + (me + 1) % n * (rows / BM)) % num_m;  // the next rank's rows first
    auto owner = pid_m * BM / rows;
    if (COPY) {
      // The tiles of the peers' rows go to `partial`, counted per row of tiles; the copy engine
      // takes each finished row of tiles of a peer's rows to that peer. Our own rows come last:
      // their tiles wait for every peer's copies of them (by then normally sent: the peers make
      // our rows early), add them to the accumulator in registers, in rank order from ours, and
      // write the sum to `out` (waiting after the K loop rather than before it hides more of the
      // copies where the GEMM is short: bench/RESULTS.md).
      auto tiles = rows / BM;  // rows of tiles per rank
      auto t = pid_m - me * tiles;
      auto acc = detail::gemm_acc(a, b, M, N, K, pid_m, pid_n, BM, BN, BK);
      tl::if_then(owner != me, [&] {
        auto row = tl::expand_dims(pid_m * BM + tl::arange(0, BM), 1);  // global
        tl::store(partial + row * N + col, acc, (row < M) & (col < N));
        tl::atomic_add(counters + pid_m, 1, {}, {"release", "sys"});  // (after every thread's stores)
      });
      tl::if_then(owner == me, [&] {
        auto local = tl::expand_dims(t * BM + tl::arange(0, BM), 1);  // within our rows
        auto mask = (local < rows) & (col < N);
        Tensor token;
        tl::profile("wait", [&] {
          token = tl::for_range(1, n, 1, tl::scalar(0, tl::int32), [&](Tensor k, Tensor) {
            return shmem::signal_wait_until(flags + (me + k) % n * tiles + t, shmem::Cmp::ge, call);
          });
        });
        auto slots = dist::consume_token(half, token);
        auto sum = tl::for_range(1, n, 1, acc, [&](Tensor k, Tensor s) {
          return s + tl::load(slots + ((me + k) % n * rows * N).to(tl::int64) + local * N + col, mask, 0.0f);
        });
        tl::store(out + local * N + col, sum, mask);
      });
      return;
    }
    auto acc = detail::gemm_acc(a, b, M, N, K, pid_m, pid_n, BM, BN, BK);
    auto row = tl::expand_dims(pid_m * BM - owner * rows + tl::arange(0, BM), 1);  // within the owner's rows
    auto slot = dist::symm_at(half, owner) + me.to(tl::int64) * rows * N;
    tl::store(slot + row * N + col, acc, (row < rows) & (col < N));
    shmem::signal_op(flags + me, 1, shmem::SIGNAL_ADD, owner);
  };
  // PERSISTENT: the programs walk the tiles, as gemm's (in the same order: own rows last).
  if (PERSISTENT) {
    detail::for_each_tile(num_m, num_n, GROUP_M, tile);
  } else {
    auto [grouped_m, pid_n] = detail::grouped_tile(GROUP_M);
    tile(grouped_m, pid_n);
  }
  publish();
}

// `parts`: slots a rank (gemm_ar's runs of a tile's K); `tiles`: the pushes of a rank a call.
void rs_reduce(tl::Ptr<float> staging, tl::Ptr<int64_t> flags, tl::Ptr<float> out, tl::Int elems,
               tl::Ptr<int64_t> epochs, tl::Int tiles, tl::Int parts, tl::Const<int> BLOCK) {
  auto n = dist::num_ranks();
  auto call = tl::load(epochs + 1);  // (the GEMM's: the header says how the words go)
  auto arrived = call * tiles;       // (every rank's tiles of every call so far)
  tl::if_then(tl::program_id(0) == 0, [&] { tl::store(epochs, call); });
  auto half = staging + (call & 1).to(tl::int64) * n * parts * elems;
  auto offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  auto m = offs < elems;
  auto token = tl::for_range(0, n, 1, tl::scalar(0, tl::int32), [&](Tensor r, Tensor) {
    return shmem::signal_wait_until(flags + r, shmem::Cmp::ge, arrived);
  });
  auto slots = dist::consume_token(half, token);
  auto sum = tl::for_range(0, n * parts, 1, tl::zeros({BLOCK}, tl::float32), [&](Tensor r, Tensor acc) {
    return acc + tl::load(slots + r.to(tl::int64) * elems + offs, m, 0.0f);
  });
  tl::store(out + offs, sum, m);
}
}  // namespace

const std::vector<std::string> kParams = {"a",   "b",  "staging", "flags", "partial", "counters",
                                          "out", "M",  "N",       "K",     "epochs",  "BM",
                                          "BN",  "BK", "GROUP_M", "ALL",   "COPY",    "PERSISTENT"};

const KernelDef& gemm_rs_kernel() {
  static const KernelDef def =
      KernelDef("gemm_rs", gemm_rs<bf16>, kParams,
                {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"ALL", 0}, {"COPY", 0}, {"PERSISTENT", 0}});
  return def;
}
const KernelDef& gemm_ar_kernel() {
  static const KernelDef def =
      KernelDef("gemm_ar", gemm_rs<bf16>, kParams,
                {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"ALL", 1}, {"COPY", 0}, {"PERSISTENT", 0}});
  return def;
}
const KernelDef& rs_reduce_kernel() {
  static const KernelDef def =
      KernelDef("rs_reduce", rs_reduce, {"staging", "flags", "out", "elems", "epochs", "tiles", "parts", "BLOCK"},
                {{"BLOCK", 1024}});
  return def;
}
TILEDIST_REGISTER(gemm_rs_kernel());
TILEDIST_REGISTER(gemm_ar_kernel());
TILEDIST_REGISTER(rs_reduce_kernel());

struct GemmRs::State {
  Target target;
  int ranks = 1;
  int64_t M = 0, N = 0, K = 0, rows = 0;
  float* staging = nullptr;  // two halves of [ranks][rows][N]
  // Pushes: flags[r]: tiles of our rows rank r has pushed, over all calls. Copies: flags[r *
  // tile_rows + t]: the last call whose row of tiles t of our rows rank r has copied here.
  int64_t* flags = nullptr;
  int64_t calls = 0;                           // copies: the host's count of the runs (epochs[0] after each)
  detail::Scratch<int64_t> epochs;             // [2]: the last finished call; the running one (the header's)
  int64_t tiles = 0;                           // tiles of one rank's rows, pushed by each rank per call
  bool copy = false;                           // the copy engine scatters
  bool all = false;                            // GEMM + AllReduce
  int64_t parts = 1;                           // GEMM + AllReduce: runs a tile's K is cut into (split_k)
  int64_t tile_rows = 0, tile_cols = 0;        // per rank's rows; over N
  float* partial = nullptr;                    // copies: our tiles of the peers' rows (M x N, device memory)
  int32_t* counters = nullptr;                 // copies: tiles finished per row of tiles, over all calls
  std::unique_ptr<detail::SideStream> copies;  // the copy engine's scatter
  GemmConfig config;
  Kernel gemm, reduce;
  detail::RunStreams streams;
  bool gpu() const { return detail::on_gpu(target); }
  ~State() {  // (here, not in ~GemmRs: copies share the state; it goes once, with the last)
    streams.finish();
    if (copies) {
      copies->finish();
      cuda::free(partial);
      cuda::free(counters);
    }
    if (flags) detail::symm_release(target, flags);
    if (staging) detail::symm_release(target, staging);
  }
};

GemmRs::GemmRs(const Target& target, int64_t M, int64_t N, int64_t K, Scatter scatter, bool all,
               const GemmConfig* config)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  s.ranks = detail::world_ranks(target);
  // (the kernels index A, B and C with 32-bit element numbers, as gemm's)
  if (M < 0 || N < 0 || K < 0 || M * K > INT32_MAX || K * N > INT32_MAX || M * N > INT32_MAX)
    throw Error(str_cat("tiledist: ", all ? "gemm_ar" : "gemm_rs", ": M, N, K = ", M, ", ", N, ", ", K,
                        ": not negative, and A, B and C under 2^31 elements each"));
  s.M = M, s.N = N, s.K = K, s.rows = all ? M : M / s.ranks, s.all = all;
  s.config = config ? *config : gemm_config(target, M, N, K, false);
  if (s.config.split_k < 1 || s.config.split_k > 64)
    throw Error(str_cat("tiledist: ", all ? "gemm_ar" : "gemm_rs", ": split_k = ", s.config.split_k, " (1 to 64)"));
  if (all) {
    s.config = s.config.per_tile();
    // (no more runs than the tile has K steps)
    const int64_t step = std::max<int64_t>(s.config.constant("BK", 32), 1);
    s.parts = std::min<int64_t>(s.config.split_k, std::max<int64_t>((K + step - 1) / step, 1));
  }
  if (!all && (M % s.ranks || s.rows % s.config.bm))
    throw Error(str_cat("tiledist: gemm_rs: M = ", M, " must split into ", s.ranks,
                        " ranks' rows, each a multiple of the ", s.config.bm, "-row tile"));
  s.tile_rows = (s.rows + s.config.bm - 1) / s.config.bm;
  s.tile_cols = (N + s.config.bn - 1) / s.config.bn;
  s.tiles = s.tile_rows * s.tile_cols;
  // By the copy engine, our own rows' tiles wait in the GEMM for the peers' copies, made while
  // the peers' GEMMs run: a copy between two GPUs runs on their copy engines, but one between
  // two ranks on one GPU runs on its SMs, which that rank's waiting tiles may all hold (every
  // rank's, on every rank: a deadlock). Where ranks share a GPU, the tiles go by SM pushes,
  // whose GEMM waits for nothing (its reduce kernel waits, after it). The choice is the
  // world's, the same on every rank.
  s.copy = !all && s.gpu() && scatter == Scatter::copy_engine && !detail::gpus_shared(target);
  s.staging = static_cast<float*>(detail::symm_zeroed(target, 2 * size_t(s.ranks) * s.parts * s.rows * N * 4));
  s.flags = static_cast<int64_t*>(detail::symm_zeroed(target, size_t(s.ranks) * (s.copy ? s.tile_rows : 1) * 8));
  if (s.copy) {
    s.partial = static_cast<float*>(cuda::malloc(size_t(M) * N * 4));
    s.counters = static_cast<int32_t*>(cuda::malloc(size_t(s.ranks) * s.tile_rows * 4));
    cuda::memset(s.counters, 0, size_t(s.ranks) * s.tile_rows * 4);  // done when it returns
    s.copies = std::make_unique<detail::SideStream>();
  }
  s.epochs = detail::Scratch<int64_t>(target, 2);
  barrier_all();  // no rank signals before every rank has zeroed its flags
  Constants constants = s.config.constants;
  // By the copy engine, a rank's own rows must come after every peer's in the tile order (its
  // tiles wait for the peers' copies, which wait for whole rows of tiles on the peers): groups
  // of rows of tiles must not straddle two ranks' rows.
  constants.insert_or_assign("GROUP_M", ConstValue(s.copy ? static_cast<int>(std::gcd<int64_t>(8, s.tile_rows)) : 8));
  constants.insert_or_assign("COPY", ConstValue(s.copy ? 1 : 0));
  s.gemm = compile(all ? gemm_ar_kernel() : gemm_rs_kernel(), constants, target, s.config.options);
  if (!s.copy) s.reduce = compile(rs_reduce_kernel(), {}, target);
}

GemmRs::~GemmRs() = default;

void GemmRs::run(const bf16* a, const bf16* b, float* out, const runtime::Stream* stream) {
  State& s = *s_;
  const int64_t elems = s.rows * s.N;
  const Grid reduce_grid{static_cast<int>((elems + 1023) / 1024)};
  // (by the copy engine the host queues the copies of each call itself: not in a graph)
  const runtime::Stream* on =
      s.gpu() ? &s.streams.enter(stream, s.all ? "gemm_ar" : "gemm_rs by the copy engine", !s.copy) : nullptr;
  if (s.copy) {
    const int32_t call = static_cast<int32_t>(++s.calls);
    float* half = s.staging + (s.calls % 2) * s.ranks * s.rows * s.N;
    // `partial` is ours again once the last run's copies are done; a peer's half of the
    // staging area once our last GEMM is done (it waited for every peer's copies of the last
    // run, made after that peer's GEMM before it, the last reader of this half).
    s.copies->join(*on);
    s.copies->fork(*on);
    detail::launch(s.gemm, on, s.config.grid(s.M, s.N), a, b, s.staging, s.flags, s.partial, s.counters, out, s.M, s.N,
                   s.K, s.epochs.data());
    runtime::write_value(s.epochs.data(), static_cast<uint32_t>(call), *on);  // (after the GEMM: it read the word)
    // Each row of tiles of a peer's rows to that peer as soon as its tiles are done, in the
    // order the GEMM makes them (the next rank's rows first).
    const runtime::Stream& copies = s.copies->stream();
    const int me = detail::world_rank(s.target);
    const size_t bytes = size_t(s.config.bm) * s.N * 4;
    for (int k = 1; k < s.ranks; ++k) {
      const int p = (me + k) % s.ranks;
      auto* theirs = static_cast<float*>(detail::symm_on(s.target, half, p)) + size_t(me) * s.rows * s.N;
      auto* words = static_cast<int64_t*>(detail::symm_on(s.target, s.flags, p)) + size_t(me) * s.tile_rows;
      for (int64_t t = 0; t < s.tile_rows; ++t) {
        const int64_t g = p * s.tile_rows + t;  // the row of tiles, over all M
        runtime::wait_value(s.counters + g, static_cast<uint32_t>(int64_t(call) * s.tile_cols), copies);
        runtime::copy_async(theirs + t * s.config.bm * s.N, s.partial + g * s.config.bm * s.N, bytes, copies);
        runtime::write_value(words + t, static_cast<uint32_t>(call), copies);
      }
    }
  } else {
    // (`partial` and `counters` unused by the pushes: the staging area stands in, no counters)
    const Grid grid = s.config.grid(s.M, s.N);
    detail::launch(s.gemm, on, Grid(grid.x, grid.y, int(s.parts)), a, b, s.staging, s.flags, s.staging,
                   static_cast<int32_t*>(nullptr), out, s.M, s.N, s.K, s.epochs.data());
    detail::launch(s.reduce, on, reduce_grid, static_cast<const float*>(s.staging), s.flags, out, elems,
                   s.epochs.data(), s.tiles * s.parts, s.parts);
  }
  if (on) s.streams.leave(*on, stream);
}

void launch_graph(const runtime::Graph& graph, const runtime::Stream& stream) { detail::launch_graph(graph, stream); }

}  // namespace tiledist::kernels
