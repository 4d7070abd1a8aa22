// The stress harness's MoE subject (cases.h): kernels::MoeMlp (AgMoe's gather and gate/up GEMM,
// SwiGLU, MoeReduce's down GEMM with the combine and the reduce-scatter or all-reduce) at random
// shapes, routing and streams, bf16 or f8e4m3 weights with block scales, the gathered batch
// sorted as moe_segments picks or either way forced (a segment per rank, or by expert alone),
// each run checked against the host's layer in double from every rank's inputs (drawn again
// from their seeds).
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

using reference::random_values;

/// Each token's k distinct experts, from `seed`: most tokens pick expert 0 (skew), the last
/// expert none where k < E - 1.
std::vector<int32_t> draw_ids(uint64_t seed, int64_t tokens, int64_t E, int k) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k)), pool(static_cast<size_t>(E));
  const int64_t usable = k < E - 1 ? E - 1 : E;
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.begin() + usable, rng);
    if (rng() % 4 != 0) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.begin() + usable, 0));
    std::copy(pool.begin(), pool.begin() + k, ids.begin() + t * k);
  }
  return ids;
}
std::vector<float> draw_scores(uint64_t seed, int64_t n) {
  std::vector<float> v = random_values<float>(seed, size_t(n));
  for (float& x : v) x = 0.1f + std::abs(x);
  return v;
}

/// $TILEDIST_MOE_SEGMENTS set to `sort` ("": left as it is) while one MoeMlp is made (its
/// AgMoe reads it then), put back by restore().
class SortFor {
 public:
  explicit SortFor(const std::string& sort) {
    if (sort.empty()) return;
    const char* v = std::getenv("TILEDIST_MOE_SEGMENTS");
    before_ = v ? std::optional<std::string>(v) : std::nullopt;
    set_ = true;
    setenv("TILEDIST_MOE_SEGMENTS", sort.c_str(), 1);
  }
  void restore() {
    if (!set_) return;
    if (before_)
      setenv("TILEDIST_MOE_SEGMENTS", before_->c_str(), 1);
    else
      unsetenv("TILEDIST_MOE_SEGMENTS");
    set_ = false;
  }

 private:
  std::optional<std::string> before_;
  bool set_ = false;
};

class MoeMlpSubject : public Subject {
 public:
  MoeMlpSubject(Job& job, int id, int64_t tokens, int64_t hidden, int64_t inter, int64_t E, int k,
                kernels::MoeReduce::Mode mode, bool f8, bool overlap, std::string sort)
      : sort_(std::move(sort)),
        sort_for_(sort_),
        id_(id),
        tokens_(tokens),
        hidden_(hidden),
        inter_(inter),
        E_(E),
        k_(k),
        all_(mode == kernels::MoeReduce::Mode::all_reduce),
        f8_(f8),
        overlap_(overlap),
        op_(job.target(), tokens, hidden, inter * job.ranks(), E, k, mode, f8 ? ir::DType::f8e4m3 : ir::DType::bf16) {
    sort_for_.restore();
    if (!overlap) op_.set_overlap(false);
  }
  std::string name() const override {
    return str_cat("moe_mlp", all_ ? " all-reduce" : "", f8_ ? " f8e4m3" : "", overlap_ ? "" : " one after the other",
                   sort_ == "1"       ? " sorted by expert"
                   : sort_ == "ranks" ? " a segment per rank"
                                      : "",
                   " #", id_, " (", tokens_, " tokens, hidden ", hidden_, ", intermediate ", inter_, " a rank, top-",
                   k_, " of ", E_, ")");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me();
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const int64_t T = tokens_, H = hidden_, I = inter_, E = E_;
    const int k = k_;
    auto x = mem(job, random_values<bf16>(seed + me, size_t(T * H)));
    auto ids = mem(job, draw_ids(seed + 100 + me, T, E, k));
    auto scores = mem(job, draw_scores(seed + 200 + me, T * k));
    const int64_t out_rows = all_ ? T * n : T, first = all_ ? 0 : me * T;
    auto out = mem(job, poison<bf16>(size_t(out_rows * H)));
    const bool f8 = f8_;
    // Rank r's weights: bf16, or f8e4m3 codes and scales (and, for the host, the values they stand for).
    auto weights = [f8, E](uint64_t s, int64_t rows, int64_t cols, std::vector<f8e4m3>* codes,
                           std::vector<float>* scales) {
      if (!f8) {
        auto w = random_values<bf16>(s, size_t(E * rows * cols));
        return std::vector<float>(w.begin(), w.end());
      }
      auto w = reference::spread_blocks(random_values<float>(s, size_t(E * rows * cols)), E, rows, cols);
      reference::quantize_f8_experts(w, E, rows, cols, *codes, *scales);
      return w;
    };
    std::vector<f8e4m3> c13, c2;
    std::vector<float> s13, s2;
    const std::vector<float> w13v = weights(seed + 300 + me, 2 * I, H, &c13, &s13),
                             w2v = weights(seed + 400 + me, H, I, &c2, &s2);
    // (the inputs' buffers held until the check: the run reads them on its stream)
    std::vector<std::shared_ptr<void>> held;
    if (f8) {
      auto w13 = mem(job, c13), w2 = mem(job, c2);
      auto sc13 = mem(job, s13), sc2 = mem(job, s2);
      op_.run(x->ptr(), ids->ptr(), scores->ptr(), w13->ptr(), sc13->ptr(), w2->ptr(), sc2->ptr(), out->ptr(),
              job.pick_stream());
      held = {w13, w2, sc13, sc2};
    } else {
      auto w13 = mem(job, std::vector<bf16>(w13v.begin(), w13v.end()));
      auto w2 = mem(job, std::vector<bf16>(w2v.begin(), w2v.end()));
      op_.run(x->ptr(), ids->ptr(), scores->ptr(), w13->ptr(), w2->ptr(), out->ptr(), job.pick_stream());
      held = {w13, w2};
    }
    job.after(str_cat(name(), ": run ", runs_),
              [&job, x, ids, scores, held, out, seed, n, T, H, I, E, k, out_rows, first, f8, weights, gpu = job.gpu()] {
                std::vector<bf16> got = out->get();
                job.tamper(got);
                // Every rank's inputs, drawn again once (bf16 values as floats, as the kernels read them).
                auto floats = [](const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); };
                std::vector<std::vector<float>> xs, w13s, w2s, all_scores;
                std::vector<std::vector<int32_t>> all_ids;
                for (int r = 0; r < n; ++r) {
                  xs.push_back(floats(random_values<bf16>(seed + r, size_t(T * H))));
                  all_ids.push_back(draw_ids(seed + 100 + r, T, E, k));
                  all_scores.push_back(draw_scores(seed + 200 + r, T * k));
                  std::vector<f8e4m3> codes;
                  std::vector<float> scales;
                  w13s.push_back(weights(seed + 300 + r, 2 * I, H, &codes, &scales));
                  w2s.push_back(weights(seed + 400 + r, H, I, &codes, &scales));
                }
                // Each element within reference::MoeTokenBounds::bound (moe_check.h's: the
                // layer's sums cancel, so a bound in norm against |want| alone fails where the
                // terms are large and their sum is not); bf16: and 2^-7 in norm, as before the f8
                // form.
                double num = 0, den = 0;
                for (int64_t t = first; t < first + out_rows; ++t) {
                  const int owner = int(t / T);
                  const int64_t local = t % T;
                  const std::vector<int32_t> experts(all_ids[owner].begin() + local * k,
                                                     all_ids[owner].begin() + (local + 1) * k);
                  const std::vector<float> slot_scores(all_scores[owner].begin() + local * k,
                                                       all_scores[owner].begin() + (local + 1) * k);
                  reference::MoeTokenBounds b;
                  const std::vector<double> want = reference::moe_mlp_token(&xs[owner][size_t(local * H)], experts,
                                                                            slot_scores, w13s, w2s, H, I, &b, f8);
                  for (int64_t h = 0; h < H; ++h) {
                    const double g = double(float(got[size_t((t - first) * H + h)])), w = want[size_t(h)];
                    const double bound = b.bound(size_t(h), w, f8, gpu);
                    if (!(std::abs(g - w) <= bound))
                      return str_cat("out[", t - first, ", ", h, "] = ", g, ", want ", w, " (bound ", bound, ")");
                    num += (g - w) * (g - w), den += w * w;
                  }
                }
                const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-30), norm_bound = std::ldexp(1.0, -7);
                if (!f8 && err > norm_bound)
                  return str_cat("relative error ", err, " of out against the host exceeds ", norm_bound);
                return std::string();
              });
  }

 private:
  std::string sort_;  // $TILEDIST_MOE_SEGMENTS while op_ is made ("": moe_segments' choice)
  SortFor sort_for_;
  int id_;
  int64_t tokens_, hidden_, inter_, E_;
  int k_;
  bool all_, f8_, overlap_;
  kernels::MoeMlp op_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<Subject> make_moe_subject(Job& job, int id) {
  const bool gpu = job.gpu();
  // (hidden: the up projection's K; a long one now and then, whose rows are gathered in parts:
  // moe_gather_split)
  const int64_t tokens = ragged(job, gpu ? 256 : 24),
                hidden = ragged(job, gpu               ? 1100
                                     : job.chance(0.2) ? 600
                                                       : 48),
                inter = ragged(job, gpu ? 256 : 32), E = job.draw(1, gpu ? 32 : 8);
  const int k = static_cast<int>(job.draw(1, std::min<int64_t>(E, 8)));
  const auto mode = job.chance(0.3) ? kernels::MoeReduce::Mode::all_reduce : kernels::MoeReduce::Mode::reduce_scatter;
  const bool f8 = job.chance(0.3), overlap = !job.chance(0.2);
  const int64_t sort = job.draw(0, 2);  // (moe_segments', or either forced)
  return std::make_unique<MoeMlpSubject>(job, id, tokens, hidden, inter, E, k, mode, f8, overlap,
                                         sort == 0   ? ""
                                         : sort == 1 ? "1"
                                                     : "ranks");
}

}  // namespace tiledist::stress
