// The stress harness's expert-parallel subjects (cases.h): kernels::EpDispatch and the EpCombine
// made from it, or the low-latency pair (EpLowLatencyDispatch, EpLowLatencyCombine), at random shapes (experts a rank,
// top-k, hidden, tokens that differ by rank and call, some ranks with none), routing (skewed, slots dropped) and
// streams; each run's rows sent back as they came and summed per token, checked against the host's sum from every
// rank's inputs (drawn again from their seeds), and each run's receive counts against the host's. Now and then a
// dispatch without its combine (the next dispatch must not need it).
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

using reference::random_values;

/// Rank r's tokens this run: up to `most`, none now and then.
int64_t draw_tokens(uint64_t seed, int64_t most) {
  std::mt19937_64 rng(seed);
  return rng() % 6 == 0 ? 0 : int64_t(1 + rng() % uint64_t(most));
}
/// Each token's k distinct experts (-1 for one slot in nine), most tokens picking expert `hot`.
std::vector<int32_t> draw_ids(uint64_t seed, int64_t tokens, int64_t E, int k, int64_t hot) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k)), pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (rng() % 4 != 0) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), int32_t(hot)));
    std::copy(pool.begin(), pool.begin() + k, ids.begin() + t * k);
    for (int j = 0; j < k; ++j)
      if (rng() % 9 == 0) ids[size_t(t * k + j)] = -1;
  }
  return ids;
}

/// The rows sent back as they came, summed per token: out[t, :] against the sum of its kept
/// slots' scores times its row (f32 sums rounded once to bf16: 2^-8 of the value, 1e-5 of the
/// terms). "" when every element is within.
std::string check_sum(const std::vector<bf16>& got, const std::vector<bf16>& xs, const std::vector<int32_t>& id,
                      const std::vector<float>& w, int64_t T, int64_t H, int k) {
  double num = 0, den = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double want = 0, scale = 0;
      for (int j = 0; j < k; ++j)
        if (id[size_t(t * k + j)] >= 0) {
          want += double(w[size_t(t * k + j)]) * double(float(xs[size_t(t * H + h)]));
          scale += std::abs(double(w[size_t(t * k + j)]) * double(float(xs[size_t(t * H + h)])));
        }
      const double g = double(float(got[size_t(t * H + h)]));
      if (!(std::abs(g - want) <= std::ldexp(std::abs(want), -8) + 1e-5 * scale + 1e-30))
        return str_cat("out[", t, ", ", h, "] is ", g, ", not ", want);
      num += (g - want) * (g - want), den += want * want;
    }
  const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  if (err > std::ldexp(1.0, -8))
    return str_cat("relative error ", err, " of out against the host exceeds ", std::ldexp(1.0, -8));
  return std::string();
}

/// Queues the check of a run whose rows came back summed into `out`: check_sum against our
/// inputs drawn again from `seed` (x: seed + rank, scores: seed + 200 + rank); the inputs'
/// buffers held until then (the run reads them on its stream).
void check_back(Job& job, const std::string& what, const std::shared_ptr<Mem<bf16>>& x,
                const std::shared_ptr<Mem<int32_t>>& ids, const std::shared_ptr<Mem<float>>& scores,
                const std::shared_ptr<Mem<bf16>>& out, uint64_t seed, int64_t T, int64_t H, int k) {
  const int me = job.me();
  job.after(what, [&job, x, ids, scores, out, seed, T, H, k, me] {
    std::vector<bf16> got = out->get();
    got.resize(size_t(T * H));
    job.tamper(got);
    return check_sum(got, random_values<bf16>(seed + me, size_t(T * H)), ids->get(),
                     random_values<float>(seed + 200 + me, size_t(T * k)), T, H, k);
  });
}

class EpSubject : public Subject {
 public:
  EpSubject(Job& job, int id, int64_t max_tokens, int64_t hidden, int64_t per_rank, int k)
      : id_(id),
        max_tokens_(max_tokens),
        hidden_(hidden),
        E_(per_rank * job.ranks()),
        k_(k),
        dispatch_(job.target(), max_tokens, hidden, per_rank * job.ranks(), k),
        combine_(dispatch_) {}
  std::string name() const override {
    return str_cat("ep dispatch/combine #", id_, " (up to ", max_tokens_, " tokens, hidden ", hidden_, ", top-", k_,
                   " of ", E_, ")");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me();
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const int64_t H = hidden_, E = E_, per_rank = E / n, hot = job.draw(0, E - 1);
    const int k = k_;
    auto tokens_of = [=, this](int r) { return draw_tokens(seed + 500 + r, max_tokens_); };
    auto x_of = [=](int r, int64_t T) { return random_values<bf16>(seed + r, size_t(T * H)); };
    auto ids_of = [=](int r, int64_t T) { return draw_ids(seed + 100 + r, T, E, k, hot); };
    const int64_t T = tokens_of(me);
    auto x = mem(job, x_of(me, T));
    auto ids = mem(job, ids_of(me, T));
    const runtime::Stream* stream = job.pick_stream();
    dispatch_.run(x->ptr(), ids->ptr(), T, stream);
    // The counts now (the next run replaces them), against every rank's slots for our experts.
    std::vector<int64_t> want(size_t(per_rank), 0);
    for (int r = 0; r < n; ++r)
      for (int32_t e : ids_of(r, tokens_of(r)))
        if (e >= 0 && e / per_rank == me) ++want[size_t(e % per_rank)];
    if (dispatch_.recv_counts() != want) {
      std::string got;
      for (int64_t c : dispatch_.recv_counts()) got += str_cat(got.empty() ? "" : ", ", c);
      throw Error(str_cat(name(), ": run ", runs_, ": rows received per local expert: ", got, " (seed ", seed, ")"));
    }
    if (job.chance(0.2)) {  // (no combine: the next dispatch goes on without it)
      job.after(str_cat(name(), ": run ", runs_), [x, ids] { return std::string(); });
      return;
    }
    auto scores = mem(job, random_values<float>(seed + 200 + me, size_t(T * k)));
    auto out = mem(job, poison<bf16>(size_t(std::max<int64_t>(T, 1) * H)));
    combine_.run(dispatch_.recv(), scores->ptr(), out->ptr(), stream);
    check_back(job, str_cat(name(), ": run ", runs_), x, ids, scores, out, seed, T, H, k);
  }

 private:
  int id_;
  int64_t max_tokens_, hidden_, E_;
  int k_;
  kernels::EpDispatch dispatch_;
  kernels::EpCombine combine_;
  int runs_ = 0;
};

/// The low-latency mode, the receive hook or not; each run's rows sent back as they came (bf16
/// rows: the f8e4m3 rows' way out and back is the tests', whose host dequantizes them between).
class EpLowLatencySubject : public Subject {
 public:
  EpLowLatencySubject(Job& job, int id, int64_t max_tokens, int64_t hidden, int64_t per_rank, int k, bool hook)
      : id_(id),
        max_tokens_(max_tokens),
        hidden_(hidden),
        E_(per_rank * job.ranks()),
        k_(k),
        hook_(hook),
        dispatch_(job.target(), max_tokens, hidden, per_rank * job.ranks(), k, {ir::DType::bf16, 64, hook}),
        combine_(dispatch_) {}
  std::string name() const override {
    return str_cat("ep low latency", hook_ ? " (receive hook)" : "", " #", id_, " (up to ", max_tokens_,
                   " tokens, hidden ", hidden_, ", top-", k_, " of ", E_, ")");
  }
  void run_once(Job& job) override {
    const int me = job.me();
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const int64_t H = hidden_, E = E_, hot = job.draw(0, E - 1);
    const int k = k_;
    // (repeated experts in a token are not this mode's: draw_ids picks distinct ones)
    const int64_t T = draw_tokens(seed + 500 + me, max_tokens_);
    auto x = mem(job, random_values<bf16>(seed + me, size_t(T * H)));
    auto ids = mem(job, draw_ids(seed + 100 + me, T, E, k, hot));
    auto scores = mem(job, random_values<float>(seed + 200 + me, size_t(T * k)));
    auto out = mem(job, poison<bf16>(size_t(std::max<int64_t>(T, 1) * H)));
    const runtime::Stream* stream = job.pick_stream();
    dispatch_.run(x->ptr(), ids->ptr(), T, stream);
    if (hook_) dispatch_.receive(stream);
    if (job.chance(0.2)) {  // (no combine: the next dispatch goes on without it, a half later)
      job.after(str_cat(name(), ": run ", runs_), [x, ids] { return std::string(); });
      return;
    }
    combine_.run(static_cast<const bf16*>(dispatch_.recv()), scores->ptr(), out->ptr(), stream);
    if (hook_) combine_.receive(stream);
    check_back(job, str_cat(name(), ": run ", runs_), x, ids, scores, out, seed, T, H, k);
  }

 private:
  int id_;
  int64_t max_tokens_, hidden_, E_;
  int k_;
  bool hook_;
  kernels::EpLowLatencyDispatch dispatch_;
  kernels::EpLowLatencyCombine combine_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<Subject> make_ep_subject(Job& job, int id) {
  const bool gpu = job.gpu();
  const int64_t max_tokens = ragged(job, gpu ? 256 : 24), hidden = ragged(job, gpu ? 2048 : 80),
                per_rank = job.draw(1, gpu ? 8 : 4);
  const int k = static_cast<int>(job.draw(1, std::min<int64_t>(per_rank * job.ranks(), 8)));
  if (job.chance(0.5))
    return std::make_unique<EpLowLatencySubject>(job, id, max_tokens, hidden, per_rank, k, job.chance(0.5));
  return std::make_unique<EpSubject>(job, id, max_tokens, hidden, per_rank, k);
}

}  // namespace tiledist::stress
