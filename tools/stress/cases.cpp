// The stress harness's objects and their references (cases.h).
#include "tools/stress/cases.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "kernels/symmetric.h"
#include "runtime/graph.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

using Algo = kernels::Collectives::AllReduce;

using reference::random_values;

/// Where an exact result first differs from what it should be, or "".
template <class T>
std::string first_difference(const std::vector<T>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return str_cat("holds ", got.size(), " elements, not ", want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (!(float(got[i]) == want[i]))  // (NaN: an element the run did not write)
      return str_cat("element ", i, " of ", want.size(), " is ", float(got[i]), ", not ", want[i]);
  return "";
}

/// The relative error in norm of `got` against C = A[M, K] @ B[K, N] (bf16), and whether it is
/// within the bound for K (f32 sums: the error grows with sqrt(K)). Where M N K is small the
/// whole of C is computed on the host in double; else on the GPU by the library's plain GEMM
/// (no communication: another way to the same numbers), with 8 rows also in double.
std::string check_gemm(Job& job, const std::vector<bf16>& a, const std::vector<bf16>& b, std::vector<float> got,
                       int64_t M, int64_t N, int64_t K) {
  job.tamper(got);
  const double bound = 1e-5 * std::max(1.0, std::sqrt(double(K) / 1024.0));
  auto row_of = [&](int64_t i, std::vector<double>& out) {
    out.assign(N, 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double av = float(a[i * K + k]);
      if (av == 0) continue;
      for (int64_t j = 0; j < N; ++j) out[j] += av * float(b[k * N + j]);
    }
  };
  auto verdict = [&](double num, double den, const char* how) -> std::string {
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    if (err <= bound) return "";
    return str_cat("relative error ", err, " of C (M=", M, ", N=", N, ", K=", K, ") against ", how, " exceeds ", bound);
  };
  if (got.size() != size_t(M * N)) return str_cat("C holds ", got.size(), " elements, not ", M * N);
  double num = 0, den = 0;  // the squared norms of got - want and of want
  auto add = [&](double g, double w) {
    const double d = g - w;
    num += std::isnan(d) ? INFINITY : d * d;
    den += w * w;
  };
  std::vector<double> row;
  auto add_row = [&](int64_t i) {  // row i against double sums
    row_of(i, row);
    for (int64_t j = 0; j < N; ++j) add(got[i * N + j], row[j]);
  };
  const bool small = double(M) * N * K <= 64e6;
  if (small || !job.gpu()) {
    for (int64_t i = 0; i < M; ++i) add_row(i);
    return verdict(num, den, "the host's double sums");
  }
  cuda::Buffer<bf16> da(a), db(b);
  cuda::Buffer<float> dc(poison<float>(size_t(M * N)));
  kernels::Gemm(Target::cuda(), M, N, K).run(da.data(), db.data(), dc.data());
  const std::vector<float> want = dc.download();
  for (size_t i = 0; i < want.size(); ++i) add(got[i], want[i]);
  if (std::string v = verdict(num, den, "the library's plain GEMM"); !v.empty()) return v;
  std::mt19937_64 pick(M * 31 + N * 17 + K);  // (rows of this rank's choosing: the check is local)
  num = den = 0;
  for (int t = 0; t < 8; ++t) add_row(std::uniform_int_distribution<int64_t>(0, M - 1)(pick));
  return verdict(num, den, "the host's double sums of 8 rows");
}

// ---- Collectives: every op and algorithm, f32 and bf16, apart and in place ------------------

class CollectivesSubject : public Subject {
 public:
  CollectivesSubject(Job& job, int id)
      : id_(id), capacity_(size_t(16) << (2 * job.draw(5, job.gpu() ? 11 : 9))), c_(job.target(), capacity_) {}
  std::string name() const override { return str_cat("collectives #", id_, " (staging ", capacity_, " bytes)"); }
  void run_once(Job& job) override {
    const int op = static_cast<int>(job.draw(0, 2));  // all_gather, reduce_scatter, all_reduce
    const bool bf = job.chance(0.5), in_place = job.chance(0.3);
    const size_t count = static_cast<size_t>(ragged(job, job.gpu() ? (int64_t(3) << 20) / job.ranks() : 60000));
    const Algo algo = std::array{Algo::automatic, Algo::one_shot, Algo::two_shot}[job.draw(0, 2)];
    const runtime::Stream* stream = job.pick_stream();
    if (bf)
      go<bf16>(job, op, count, in_place, algo, stream);
    else
      go<float>(job, op, count, in_place, algo, stream);
  }

 private:
  template <class T>
  void go(Job& job, int op, size_t count, bool in_place, Algo algo, const runtime::Stream* stream) {
    const int n = job.ranks(), me = job.me();
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const size_t in_len = op == 1 ? n * count : count, out_len = op == 0 ? n * count : count;
    auto input = [&](int r) { return random_values<T>(seed + r, in_len); };
    std::vector<float> want(out_len);
    std::vector<std::vector<T>> ins;
    for (int r = 0; r < n; ++r) ins.push_back(input(r));
    for (size_t i = 0; i < out_len; ++i) {
      if (op == 0) {
        want[i] = float(ins[i / count][i % count]);
      } else {
        float sum = 0;  // in rank order, in f32, rounded once: as the kernels sum
        for (int r = 0; r < n; ++r) sum += float(ins[r][op == 1 ? me * count + i : i]);
        want[i] = float(T(sum));
      }
    }
    static const char* ops[] = {"all_gather", "reduce_scatter", "all_reduce"};
    const std::string what =
        str_cat(name(), ": ", ops[op], " of ", count, std::is_same_v<T, bf16> ? " bf16" : " f32",
                in_place ? " in place" : "", op == 2 ? str_cat(" (algorithm ", int(algo), ")") : "");
    std::shared_ptr<Mem<T>> buf;  // what the check reads
    size_t offset = 0;            // where our result starts in it
    if (!in_place) {
      auto in = mem(job, ins[me]);
      buf = mem(job, poison<T>(out_len));
      if (op == 0)
        c_.all_gather(in->ptr(), buf->ptr(), count, stream);
      else if (op == 1)
        c_.reduce_scatter(in->ptr(), buf->ptr(), count, stream);
      else
        c_.all_reduce(in->ptr(), buf->ptr(), count, algo, stream);
      job.after(what, [in] { return std::string(); });  // (keeps the input until the run is done)
    } else if (op == 0) {                               // from our part of the output
      std::vector<T> start = poison<T>(n * count);
      std::copy(ins[me].begin(), ins[me].end(), start.begin() + me * count);
      buf = mem(job, start);
      c_.all_gather(buf->ptr() + me * count, buf->ptr(), count, stream);
    } else if (op == 1) {  // into our part of the input
      buf = mem(job, ins[me]);
      offset = me * count;
      c_.reduce_scatter(buf->ptr(), buf->ptr() + offset, count, stream);
    } else {
      buf = mem(job, ins[me]);
      c_.all_reduce(buf->ptr(), buf->ptr(), count, algo, stream);
    }
    job.after(what, [&job, buf, offset, want = std::move(want)] {
      std::vector<T> got = buf->get();
      got = std::vector<T>(got.begin() + offset, got.begin() + offset + want.size());
      job.tamper(got);
      return first_difference(got, want);
    });
  }

  int id_;
  size_t capacity_;
  kernels::Collectives c_;
  int runs_ = 0;
};

// ---- AllGather + GEMM, by the copy engine and by SM puts, apart and in place ----------------

class AgGemmSubject : public Subject {
 public:
  using Gather = kernels::AgGemm::Gather;
  AgGemmSubject(Job& job, int id, int64_t rows, int64_t N, int64_t K, Gather gather, int puts)
      : id_(id),
        rows_(rows),
        N_(N),
        K_(K),
        gather_(gather),
        op_(job.target(), rows * job.ranks(), N, K, gather, puts) {}
  std::string name() const override {
    return str_cat("ag_gemm by ", gather_ == Gather::copy_engine ? "copy engine" : "SM puts", " #", id_, " (", rows_,
                   " rows per rank, N=", N_, ", K=", K_, ")");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me();
    const int64_t M = rows_ * n;
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const bool in_place = job.chance(0.25);
    const runtime::Stream* stream = job.pick_stream();
    std::vector<bf16> mine = random_values<bf16>(seed + me, rows_ * K_),
                      b = random_values<bf16>(seed + 1000 + me, K_ * N_);
    auto bm = mem(job, b);
    auto c = mem(job, poison<float>(M * N_));
    std::shared_ptr<Mem<bf16>> a;
    bf16* input = nullptr;
    if (in_place) {  // our rows where the run wants them: the run before last, which read them there, must be done
      job.drain();
      input = op_.next_input();
      if (job.gpu())
        cuda::copy_to_device(input, mine.data(), mine.size() * sizeof(bf16));
      else
        std::memcpy(input, mine.data(), mine.size() * sizeof(bf16));
    } else {
      a = mem(job, mine);
      input = a->ptr();
    }
    op_.run(input, bm->ptr(), c->ptr(), stream);
    const int64_t N = N_, K = K_, rows = rows_;
    job.after(str_cat(name(), ": run ", runs_, in_place ? " in place" : ""),
              [&job, a, bm, c, b, seed, n, M, N, K, rows] {
                std::vector<bf16> gathered;
                for (int r = 0; r < n; ++r) {
                  std::vector<bf16> shard = random_values<bf16>(seed + r, rows * K);
                  gathered.insert(gathered.end(), shard.begin(), shard.end());
                }
                return check_gemm(job, gathered, b, c->get(), M, N, K);
              });
  }

 private:
  int id_;
  int64_t rows_, N_, K_;
  Gather gather_;
  kernels::AgGemm op_;
  int runs_ = 0;
};

// ---- GEMM + ReduceScatter (both scatters) and GEMM + AllReduce -------------------------------

// On a GPU, where the object counts its calls in device memory (GemmAr, GemmRs by SM pushes),
// a quarter of the runs are captured into a graph (runtime/graph.h) on one of the job's streams
// and the graph launched twice, the second launch's result checked.
template <class Op>
class GemmReduceSubject : public Subject {
 public:
  /// `capturable`: its runs may go into a graph.
  template <class... Extra>
  GemmReduceSubject(Job& job, int id, int64_t M, int64_t N, int64_t K, std::string kind, bool capturable,
                    Extra... extra)
      : id_(id),
        M_(M),
        N_(N),
        K_(K),
        kind_(std::move(kind)),
        capturable_(capturable && job.gpu()),
        op_(job.target(), M, N, K, extra...) {}
  std::string name() const override {
    return str_cat(kind_, " #", id_, " (M=", M_, ", N=", N_, ", K=", K_, " per rank)");
  }
  void run_once(Job& job) override {
    constexpr bool all = std::is_same_v<Op, kernels::GemmAr>;
    const int n = job.ranks(), me = job.me();
    const int64_t rows = all ? M_ : M_ / n, first = all ? 0 : me * rows;
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const bool in_graph = capturable_ && job.chance(0.25);
    const runtime::Stream* stream = job.pick_stream();
    while (in_graph && !stream) stream = job.pick_stream();  // (a capture needs a stream of its own)
    auto a = mem(job, random_values<bf16>(seed + me, M_ * K_));
    auto b = mem(job, random_values<bf16>(seed + 500 + me, K_ * N_));
    auto out = mem(job, poison<float>(rows * N_));
    std::shared_ptr<runtime::Graph> graph;  // (kept until the check: its launches done by then)
    if (in_graph) {
      graph = std::make_shared<runtime::Graph>(*stream, [&] { op_.run(a->ptr(), b->ptr(), out->ptr(), stream); });
      for (int k = 0; k < 2; ++k) kernels::launch_graph(*graph, *stream);
    } else {
      op_.run(a->ptr(), b->ptr(), out->ptr(), stream);
    }
    const int64_t N = N_, K = K_, M = M_;
    job.after(str_cat(name(), ": run ", runs_, in_graph ? " (a graph launched twice)" : ""), [&job, a, b, out, seed, n,
                                                                                              rows, first, M, N, K,
                                                                                              graph] {
      // The sum over ranks of A_r B_r, our rows: [A_0 .. A_n-1] (rows x nK) @ [B_0; ..; B_n-1].
      std::vector<bf16> wide(rows * n * K), tall;
      for (int r = 0; r < n; ++r) {
        std::vector<bf16> ar = random_values<bf16>(seed + r, M * K), br = random_values<bf16>(seed + 500 + r, K * N);
        for (int64_t i = 0; i < rows; ++i)
          std::copy(ar.begin() + (first + i) * K, ar.begin() + (first + i + 1) * K, wide.begin() + i * n * K + r * K);
        tall.insert(tall.end(), br.begin(), br.end());
      }
      return check_gemm(job, wide, tall, out->get(), rows, N, n * K);
    });
  }

 private:
  int id_;
  int64_t M_, N_, K_;
  std::string kind_;
  bool capturable_;
  Op op_;
  int runs_ = 0;
};

/// GemmRs's rows per rank must be a multiple of its GEMM's row tile.
int64_t gemm_rs_rows(Job& job, int64_t N, int64_t K, int64_t tiles) {
  const int64_t unit = job.gpu() ? 256 : 64;  // (a multiple of every row tile gemm_config picks there)
  const int64_t rows = unit * tiles;
  const int bm = kernels::gemm_config(job.target(), rows * job.ranks(), N, K).bm;
  return rows % bm == 0 ? rows : (rows + bm - 1) / bm * bm;
}

}  // namespace

/// $TILEDIST_STRESS_SUBJECT: every subject of one kind (its case below: collectives, ag_gemm,
/// gemm_rs, gemm_ar, moe, ep, decode, sp_attention, model), for a focused run; else any.
int forced_kind() {
  static const int kind = [] {
    const char* only = std::getenv("TILEDIST_STRESS_SUBJECT");
    if (!only || !*only) return -1;
    const std::map<std::string, int> kinds = {{"collectives", 0}, {"ag_gemm", 1}, {"gemm_rs", 3}, {"gemm_ar", 4},
                                              {"moe", 5},         {"ep", 6},      {"decode", 7},  {"sp_attention", 8},
                                              {"model", 9},       {"mega", 10}};
    const auto it = kinds.find(only);
    if (it == kinds.end()) throw Error(str_cat("tiledist-stress: TILEDIST_STRESS_SUBJECT=", only, ": no such subject"));
    return it->second;
  }();
  return kind;
}

std::unique_ptr<Subject> make_subject(Job& job, int id) {
  const bool gpu = job.gpu();
  const int n = job.ranks();
  const int drawn = static_cast<int>(job.draw(0, 10));  // (drawn either way: the schedule stays the seed's)
  switch (forced_kind() >= 0 ? forced_kind() : drawn) {
    case 0:
      return std::make_unique<CollectivesSubject>(job, id);
    case 5:
      return make_moe_subject(job, id);
    case 6:
      return make_ep_subject(job, id);
    case 7:
      return make_decode_subject(job, id);
    case 8:
      return make_sp_attention_subject(job, id);
    case 9:
      return make_model_subject(job, id);
    case 10:
      return make_mega_subject(job, id);
    case 1:
    case 2: {
      using Gather = kernels::AgGemm::Gather;
      const Gather gather = job.chance(0.5) ? Gather::copy_engine : Gather::sm_puts;
      const int puts = gather == Gather::sm_puts ? static_cast<int>(job.draw(0, 20)) : 0;  // (0: the default)
      if (gpu && job.chance(0.1))  // Triton-distributed's own check shape
        return std::make_unique<AgGemmSubject>(job, id, 4091, 5120, 1024, gather, puts);
      const int64_t rows = ragged(job, gpu ? 2048 : 40), N = ragged(job, gpu ? 2304 : 72),
                    K = ragged(job, gpu ? 1536 : 72);
      return std::make_unique<AgGemmSubject>(job, id, rows, N, K, gather, puts);
    }
    case 3: {
      using Scatter = kernels::GemmRs::Scatter;
      const Scatter scatter = job.chance(0.5) ? Scatter::copy_engine : Scatter::sm_pushes;
      const bool copies = scatter == Scatter::copy_engine && !kernels::detail::gpus_shared(job.target());
      const char* kind = scatter == Scatter::copy_engine ? "gemm_rs by copy engine" : "gemm_rs by SM pushes";
      if (gpu && job.chance(0.1)) {  // 4096 x 4096 with K = 12288 split over the ranks
        const int64_t K = 12288 / n, M = gemm_rs_rows(job, 4096, K, (4096 / n + 255) / 256) * n;
        return std::make_unique<GemmReduceSubject<kernels::GemmRs>>(job, id, M, 4096, K, kind, !copies, scatter);
      }
      const int64_t N = ragged(job, gpu ? 2048 : 72), K = ragged(job, gpu ? 1024 : 64);
      const int64_t rows = gemm_rs_rows(job, N, K, job.draw(1, gpu ? 4 : 2));
      return std::make_unique<GemmReduceSubject<kernels::GemmRs>>(job, id, rows * n, N, K, kind, !copies, scatter);
    }
    default: {
      const int64_t M = ragged(job, gpu ? 512 : 40), N = ragged(job, gpu ? 2048 : 72), K = ragged(job, gpu ? 1024 : 64);
      if (job.chance(0.4)) {  // each tile's K in runs (GemmConfig::split_k, as a decode step's GEMMs on a GPU)
        kernels::GemmConfig config = kernels::gemm_config(job.target(), M, N, K, false);
        config.split_k = int(job.draw(2, 6));
        return std::make_unique<GemmReduceSubject<kernels::GemmAr>>(
            job, id, M, N, K, str_cat("gemm_ar split_k=", config.split_k), true, config);
      }
      return std::make_unique<GemmReduceSubject<kernels::GemmAr>>(job, id, M, N, K, "gemm_ar", true);
    }
  }
}

// ---- The job -----------------------------------------------------------------------------

Job::Job(const Target& target, uint64_t seed, int steps, bool self_test)
    : target_(target),
      gpu_(target.runs_on_cuda()),
      ranks_(gpu_ ? cuda::World::get().size() : world_size()),
      me_(gpu_ ? cuda::World::get().rank() : rank()),
      seed_(seed),
      steps_(steps),
      self_test_(self_test),
      rng_(seed) {
  if (gpu_)
    for (int i = 0; i < 2; ++i) streams_.push_back(std::make_unique<runtime::Stream>());
}
Job::~Job() = default;

const runtime::Stream* Job::pick_stream() {
  const int64_t k = draw(0, 2);
  return gpu_ && k > 0 ? streams_[k - 1].get() : nullptr;
}

void Job::after(std::string what, std::function<std::string()> check) {
  pending_.emplace_back(std::move(what), std::move(check));
}

void Job::drain() {
  for (auto& s : streams_) s->synchronize();
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& [what, check] : pending)
    if (std::string wrong = check(); !wrong.empty())
      throw Error(
          str_cat("tiledist-stress: ", what, ": ", wrong, " (rank ", me_, " of ", ranks_, ", job seed ", seed_, ")"));
}

void Job::run() {
  std::vector<std::unique_ptr<Subject>> live;
  int next_id = 0;
  live.push_back(make_subject(*this, next_id++));
  for (int step = 0; step < steps_; ++step) {
    if (live.size() < 3 && chance(0.25)) {
      live.push_back(make_subject(*this, next_id++));
    } else if (live.size() > 1 && chance(0.1)) {  // one goes (collectively), its runs drained first
      drain();
      live.erase(live.begin() + draw(0, int64_t(live.size()) - 1));
    }
    Subject& s = *live[draw(0, int64_t(live.size()) - 1)];
    for (int64_t times = draw(1, 3); times > 0; --times) {  // back to back
      s.run_once(*this);
      count(s.name().substr(0, s.name().find(" #")));
    }
    if (chance(0.3)) drain();
  }
  drain();
}

}  // namespace tiledist::stress
