// The stress harness's model subject (cases.h): model::Model, a small Qwen3-shaped config of
// random shape (dense, or MoE with one layer), tensor parallel over the job's ranks: each run a
// model made from a fresh seed, its prefill and a few decode steps on one of the job's streams
// (on a GPU a dense model's steps go as a graph from the second on), every rank's hidden states
// after the prefill and after each step checked against model/reference.h's layers in double
// (a MoE layer's tokens near a tie of their router's logits skipped, as the tests do).
#include <cmath>
#include <numeric>

#include "model/model.h"
#include "model/reference.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

/// What is wrong with `got` [rows, hidden] against the reference's rows `rows` of x (the tests'
/// bounds: model/reference.h's compare_rows), or "".
std::string compare_rows(const std::vector<float>& got, const std::vector<double>& x, const std::vector<int64_t>& rows,
                         int64_t H) {
  const model::reference::RowsDiff d = model::reference::compare_rows(got, x, rows, H, 1);
  if (d.bad) return d.first[0];
  return d.error < std::ldexp(1.0, -7) ? std::string() : str_cat("relative error ", d.error, " (bound 2^-7)");
}

class ModelSubject : public Subject {
 public:
  ModelSubject(Job& job, int id, model::ModelConfig c, int layers, int batch, int seqlen, int steps)
      : id_(id), c_(std::move(c)), layers_(layers), batch_(batch), seqlen_(seqlen), steps_(steps) {
    (void)job;
  }
  std::string name() const override {
    return str_cat("model #", id_, " (", c_.moe() ? "MoE" : "dense", ", hidden ", c_.hidden, ", heads ", c_.heads, "/",
                   c_.kv_heads, " of ", c_.head_dim,
                   c_.moe() ? str_cat(", ", c_.experts, " experts top-", c_.topk) : "", ", ", layers_, " layers, ",
                   batch_, " sequences of ", seqlen_, " tokens, ", steps_, " steps)");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me();
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const runtime::Stream* stream = job.pick_stream();
    const int64_t H = c_.hidden, T = int64_t(batch_) * seqlen_, per_rank = T / n, total = seqlen_ + steps_;
    model::Model m(job.target(), c_, layers_, batch_, seqlen_, seed, steps_);
    m.prefill(stream);
    std::vector<float> prefilled = m.hidden();
    std::vector<std::vector<float>> decoded;
    for (int s = 0; s < steps_; ++s) {
      m.decode(stream);
      decoded.push_back(m.decoded());
    }
    // The reference's sequences: the prompt's embeddings, then the steps' tokens (model/model.h).
    std::vector<double> x(size_t(batch_) * size_t(total) * size_t(H));
    for (int b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < total; ++t)
        for (int64_t h = 0; h < H; ++h)
          x[size_t((b * total + t) * H + h)] =
              t < seqlen_
                  ? float(bf16(model::random_value(seed, "model.embed_tokens", (int64_t(b) * seqlen_ + t) * H + h)))
                  : float(bf16(
                        model::random_value(seed, "model.embed_tokens.decode", ((t - seqlen_) * batch_ + b) * H + h)));
    std::vector<bool> ties;
    for (int l = 0; l < layers_; ++l) model::reference::reference_layer(c_, seed, l, batch_, int(total), x, &ties);
    auto tied = [&](int64_t row) { return size_t(row) < ties.size() && ties[size_t(row)]; };
    std::string wrong;
    {  // our rows of the prompt's tokens (T / n of them, the sequences one after another)
      std::vector<int64_t> rows;
      std::vector<float> got;
      for (int64_t t = 0; t < per_rank; ++t) {
        const int64_t token = me * per_rank + t, row = token / seqlen_ * total + token % seqlen_;
        if (tied(row)) continue;
        rows.push_back(row);
        got.insert(got.end(), prefilled.begin() + t * H, prefilled.begin() + (t + 1) * H);
      }
      job.tamper(got);
      wrong = compare_rows(got, x, rows, H);
      if (!wrong.empty()) wrong = "after the prefill: " + wrong;
    }
    for (int s = 0; s < steps_ && wrong.empty(); ++s) {
      std::vector<int64_t> rows;
      std::vector<float> got;
      for (int b = 0; b < batch_; ++b) {
        const int64_t row = b * total + seqlen_ + s;
        if (tied(row)) continue;
        rows.push_back(row);
        got.insert(got.end(), decoded[size_t(s)].begin() + b * H, decoded[size_t(s)].begin() + (b + 1) * H);
      }
      wrong = compare_rows(got, x, rows, H);
      if (!wrong.empty()) wrong = str_cat("decode step ", s + 1, ": ", wrong);
    }
    job.after(str_cat(name(), ": run ", runs_, " (seed ", seed, ")"), [wrong] { return wrong; });
  }

 private:
  int id_;
  model::ModelConfig c_;
  int layers_, batch_, seqlen_, steps_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<Subject> make_model_subject(Job& job, int id) {
  const int n = job.ranks();
  model::ModelConfig c;
  c.name = "stress";
  c.rms_eps = 1e-6, c.rope_theta = 1e4;
  // KV heads that split over the ranks or that the ranks split; query heads a multiple of both
  c.kv_heads = n == 3 ? (job.chance(0.5) ? 3 : 1) : 1 << job.draw(0, 2);
  c.heads = std::lcm(int64_t(n), c.kv_heads) * job.draw(1, 2);
  // (hidden under 128: the overlapped GEMMs' 64-row tiles, which a rank's 64 tokens fill)
  c.hidden = job.chance(0.5) ? 64 : 96, c.head_dim = job.chance(0.5) ? 64 : 128;
  c.intermediate = int64_t{32} * n * job.draw(1, 3);
  const bool moe = job.chance(0.3);
  if (moe) c.experts = int(job.draw(2, 8)), c.topk = int(job.draw(1, 2)), c.expert_intermediate = int64_t{32} * n;
  c.layers = moe ? 1 : int(job.draw(1, 2));
  // 64 tokens a rank, or 128: in 1, 2 or 4 sequences (a MoE model's decode batch: the ranks'
  // multiple, each rank routing its share)
  const int64_t T = int64_t{64} * n * job.draw(1, 2);
  int batch = moe ? n * int(job.draw(1, 2)) : 1 << job.draw(0, 2);
  if (T % batch) batch = n;
  return std::make_unique<ModelSubject>(job, id, c, int(c.layers), batch, int(T / batch), int(job.draw(1, 3)));
}

}  // namespace tiledist::stress
