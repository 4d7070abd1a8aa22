// The stress harness's distributed flash decoding subject (cases.h): kernels::DistFlashDecode
// at random shapes (heads per KV head, head dim, batch, the step's query tokens, each rank's
// slice of every sequence's keys ragged and some empty, every key attended or causally across
// the ranks' slices in rank order) and streams, runs of different shapes back to back; each
// run's output checked against the host's attention over every rank's slices (drawn again from
// their seeds). And sequence-parallel attention (kernels::AgAttention, kernels::UlyssesAttention):
// every rank a slice of each sequence's tokens, causal or not, at random shapes and streams,
// checked the same way.
#include <cmath>

#include "kernels/flash_decode.h"
#include "kernels/reference.h"
#include "kernels/sp_attention.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

using reference::random_values;

class DistDecodeSubject : public Subject {
 public:
  DistDecodeSubject(Job& job, int id, int heads, int kv_heads, int D, int max_batch, int max_q_tokens, int max_kv)
      : id_(id),
        heads_(heads),
        kv_heads_(kv_heads),
        D_(D),
        max_batch_(max_batch),
        max_q_tokens_(max_q_tokens),
        max_kv_(max_kv),
        decode_(job.target(), heads, kv_heads, D, max_batch, max_q_tokens) {}
  std::string name() const override {
    return str_cat("dist flash decode #", id_, " (heads ", heads_, "/", kv_heads_, " of ", D_, ", up to ", max_batch_,
                   " sequences of ", max_q_tokens_, " tokens, slices up to ", max_kv_, " keys)");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me(), D = D_;
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    // (the shapes from the shared schedule: every rank's the same)
    const int batch = static_cast<int>(job.draw(1, max_batch_)),
              q_tokens = static_cast<int>(job.draw(1, max_q_tokens_));
    const int max_kv = static_cast<int>(ragged(job, max_kv_));
    const bool causal = job.draw(0, 1) == 1;
    const size_t nkv = size_t(batch) * max_kv * kv_heads_ * D, nq = size_t(batch) * q_tokens * heads_ * D;
    auto lens_of = [=](int r) {
      std::vector<int32_t> lens;
      for (int b = 0; b < batch; ++b) lens.push_back(int32_t((seed + uint64_t(r * 131 + b * 71)) % (max_kv + 1)));
      return lens;
    };
    auto q = mem(job, random_values<bf16>(seed + 1000, nq));
    auto k = mem(job, random_values<bf16>(seed + 2 * me, nkv));
    auto v = mem(job, random_values<bf16>(seed + 2 * me + 1, nkv));
    auto lens = mem(job, lens_of(me));
    auto out = mem(job, poison<bf16>(nq));
    // (causal: our slice's first position in each sequence, after the ranks before us, and its length)
    std::vector<int32_t> starts(size_t(batch), 0), totals(size_t(batch), 0);
    for (int r = 0; r < n; ++r) {
      const std::vector<int32_t> l = lens_of(r);
      for (int b = 0; b < batch; ++b) starts[size_t(b)] += r < me ? l[size_t(b)] : 0, totals[size_t(b)] += l[size_t(b)];
    }
    auto kv_starts = mem(job, starts), kv_totals = mem(job, totals);
    decode_.run(q->ptr(), k->ptr(), v->ptr(), lens->ptr(), causal ? kv_starts->ptr() : nullptr,
                causal ? kv_totals->ptr() : nullptr, out->ptr(), batch, q_tokens, max_kv, job.pick_stream());
    const int heads = heads_, kv_heads = kv_heads_;
    job.after(str_cat(name(), ": run ", runs_), [&job, q, k, v, lens, kv_starts, kv_totals, out, seed, n, batch,
                                                 q_tokens, max_kv, nkv, nq, heads, kv_heads, D, lens_of, causal] {
      std::vector<bf16> got = out->get();
      job.tamper(got);
      // Every rank's slice, drawn again.
      std::vector<std::vector<float>> ks, vs;
      std::vector<std::vector<int32_t>> ls;
      std::vector<reference::KvSlice> slices;
      for (int r = 0; r < n; ++r) {
        ks.push_back(random_values<float>(seed + 2 * r, nkv)),
            vs.push_back(random_values<float>(seed + 2 * r + 1, nkv));
        for (auto* x : {&ks.back(), &vs.back()})
          for (float& e : *x) e = float(bf16(e));
        ls.push_back(lens_of(r));
      }
      for (int r = 0; r < n; ++r)
        slices.push_back({ks[size_t(r)].data(), vs[size_t(r)].data(), ls[size_t(r)].data(), max_kv});
      std::vector<float> qf = random_values<float>(seed + 1000, nq);
      for (float& e : qf) e = float(bf16(e));
      const std::vector<double> want = reference::decode_attention(qf, slices, batch, q_tokens, heads, kv_heads, D,
                                                                   causal, 1.0 / std::sqrt(double(D)));
      const double u = 1.0 / 256;  // (flash_decode_test's bound: 2u an element, slack 1.5)
      for (size_t i = 0; i < nq; ++i)
        if (!(std::fabs(double(float(got[i])) - want[i]) <= 3 * u))
          return str_cat("o[", i, "] is ", float(got[i]), ", not ", want[i], causal ? " (causal)" : "");
      return std::string();
    });
  }

 private:
  int id_, heads_, kv_heads_, D_, max_batch_, max_q_tokens_, max_kv_;
  kernels::DistFlashDecode decode_;
  int runs_ = 0;
};

template <class Attn>
class SpAttentionSubject : public Subject {
 public:
  SpAttentionSubject(Job& job, int id, const char* kind, int heads, int kv_heads, int D, int max_batch, int max_seqlen,
                     bool causal)
      : id_(id),
        kind_(kind),
        heads_(heads),
        kv_heads_(kv_heads),
        D_(D),
        max_batch_(max_batch),
        max_seqlen_(max_seqlen),
        causal_(causal),
        attn_(job.target(), heads, kv_heads, D, max_batch, max_seqlen, ir::DType::bf16, causal) {}
  std::string name() const override {
    return str_cat(kind_, " #", id_, " (heads ", heads_, "/", kv_heads_, " of ", D_, ", up to ", max_batch_,
                   " sequences of ", max_seqlen_, " tokens a rank", causal_ ? ", causal" : "", ")");
  }
  void run_once(Job& job) override {
    const int n = job.ranks(), me = job.me(), D = D_, heads = heads_, kv_heads = kv_heads_;
    const bool causal = causal_;
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const int batch = static_cast<int>(job.draw(1, max_batch_)), seqlen = static_cast<int>(ragged(job, max_seqlen_));
    const size_t nkv = size_t(batch) * seqlen * kv_heads * D, nq = size_t(batch) * seqlen * heads * D;
    auto q = mem(job, random_values<bf16>(seed + 1000 + uint64_t(me), nq));
    auto k = mem(job, random_values<bf16>(seed + 2 * me, nkv));
    auto v = mem(job, random_values<bf16>(seed + 2 * me + 1, nkv));
    auto out = mem(job, poison<bf16>(nq));
    attn_.run(q->ptr(), k->ptr(), v->ptr(), out->ptr(), batch, seqlen, job.pick_stream());
    job.after(str_cat(name(), ": run ", runs_),
              [&job, out, seed, n, me, batch, seqlen, nkv, nq, heads, kv_heads, D, causal] {
                std::vector<bf16> got = out->get();
                job.tamper(got);
                // Every rank's slice before ours (causal), or every one, drawn again, in rank order.
                std::vector<std::vector<float>> kv;
                std::vector<reference::KvSlice> slices;
                const std::vector<int32_t> lens(size_t(batch), seqlen);
                for (int r = 0; r < (causal ? me + 1 : n); ++r)
                  for (int j = 0; j < 2; ++j) {
                    kv.push_back(random_values<float>(seed + 2 * r + j, nkv));
                    for (float& e : kv.back()) e = float(bf16(e));
                  }
                for (size_t r = 0; r < kv.size() / 2; ++r)
                  slices.push_back({kv[2 * r].data(), kv[2 * r + 1].data(), lens.data(), seqlen});
                std::vector<float> qf = random_values<float>(seed + 1000 + uint64_t(me), nq);
                for (float& e : qf) e = float(bf16(e));
                const std::vector<double> want = reference::decode_attention(qf, slices, batch, seqlen, heads, kv_heads,
                                                                             D, causal, 1.0 / std::sqrt(double(D)));
                const double u = 1.0 / 256;  // (attention_test's bound: 2u an element, slack 1.5; u in norm)
                std::vector<float> g(nq), w(nq);
                for (size_t i = 0; i < nq; ++i) {
                  if (!(std::fabs(double(float(got[i])) - want[i]) <= 3 * u))
                    return str_cat("o[", i, "] is ", float(got[i]), ", not ", want[i]);
                  g[i] = float(got[i]), w[i] = float(want[i]);
                }
                if (const double e = reference::rel_error(g, w); !(e <= u)) return str_cat("o off by ", e, " in norm");
                return std::string();
              });
  }

 private:
  int id_;
  const char* kind_;
  int heads_, kv_heads_, D_, max_batch_, max_seqlen_;
  bool causal_;
  Attn attn_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<Subject> make_sp_attention_subject(Job& job, int id) {
  const bool gpu = job.gpu(), ulysses = job.chance(0.5);
  // (Ulysses splits the heads over the ranks: KV heads a multiple of them)
  const int kv_heads = static_cast<int>(job.draw(1, 2)) * (ulysses ? job.ranks() : 1), group = 1 << job.draw(0, 2);
  const int D = job.chance(0.5) ? 128 : 64, batch = static_cast<int>(job.draw(1, 2));
  const int seqlen = static_cast<int>(gpu ? 300 : ulysses ? 40 : 100);
  const bool causal = job.chance(0.5);
  if (ulysses)
    return std::make_unique<SpAttentionSubject<kernels::UlyssesAttention>>(
        job, id, "ulysses attention", kv_heads * group, kv_heads, D, batch, seqlen, causal);
  return std::make_unique<SpAttentionSubject<kernels::AgAttention>>(job, id, "ag attention", kv_heads * group, kv_heads,
                                                                    D, batch, seqlen, causal);
}

std::unique_ptr<Subject> make_decode_subject(Job& job, int id) {
  const bool gpu = job.gpu();
  const int kv_heads = static_cast<int>(job.draw(1, 4)), group = 1 << job.draw(0, 2);
  const int D = gpu && job.chance(0.5) ? 128 : 64;
  const int max_q_tokens = static_cast<int>(job.draw(1, 16 / group));
  return std::make_unique<DistDecodeSubject>(job, id, kv_heads * group, kv_heads, D,
                                             static_cast<int>(job.draw(1, gpu ? 8 : 3)), max_q_tokens,
                                             static_cast<int>(gpu ? 8192 : 200));
}

}  // namespace tiledist::stress
