// A dense model's L decoder layers from seed-made weights and embeddings (model/model.h).
#include "model/model.h"

#include <cstring>

#include "kernels/scratch.h"
#include "kernels/symmetric.h"
#include "runtime/cuda.h"

namespace tiledist::model {

using kernels::detail::Scratch;

namespace {
/// The residual stream delta + residual on the host (after the device's work), or delta alone.
std::vector<float> stream_of(const Target& target, const Scratch<float>& delta, const Scratch<bf16>* residual) {
  if (kernels::detail::on_gpu(target)) cuda::synchronize();
  std::vector<float> h = delta.values();
  if (!residual) return h;
  const std::vector<bf16> r = residual->values();
  for (size_t i = 0; i < h.size(); ++i) h[i] += float(r[i]);
  return h;
}
}  // namespace

struct Model::State {
  Target target;
  ModelConfig config;
  int64_t T = 0, Ts = 0;
  std::unique_ptr<PrefillLayer> layer;
  std::vector<LayerWeights> weights;
  Scratch<float> embeddings, delta;  // (the rank's rows)
  Scratch<bf16> residual;
  Scratch<int32_t> positions;
  bool run = false;
  // decode steps: the cache, the layer, every step's tokens [steps, batch, hidden], the stream
  int batch = 0, steps = 0, done = -1;  // (done: steps since the prefill; -1 before one)
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<DecodeLayer> decoder;
  Scratch<float> step_tokens, step_delta;
  Scratch<bf16> step_residual;
};

Model::Model(const Target& target, const ModelConfig& config, int layers, int batch, int seqlen, uint64_t seed,
             int decode_steps, const SafeTensors* checkpoint)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  if (layers < 1) throw Error(str_cat("tiledist: model '", config.name, "': ", layers, " layers (at least one)"));
  s.target = target, s.config = config;
  s.layer = std::make_unique<PrefillLayer>(target, config, batch, seqlen);
  const int n = kernels::detail::world_ranks(target), me = kernels::detail::world_rank(target);
  s.T = int64_t(batch) * seqlen, s.Ts = s.T / n;
  const int64_t H = config.hidden;
  for (int l = 0; l < layers; ++l)
    s.weights.push_back(checkpoint ? LayerWeights::load(target, config, l, *checkpoint, me, n)
                                   : LayerWeights::random(target, config, l, seed, me, n));
  std::vector<float> rows(size_t(s.Ts * H));
  const uint64_t key = tensor_key(seed, "model.embed_tokens");
  for (int64_t i = 0; i < s.Ts * H; ++i) rows[size_t(i)] = float(bf16(random_value(key, me * s.Ts * H + i)));
  std::vector<int32_t> pos(static_cast<size_t>(s.T));
  for (int64_t t = 0; t < s.T; ++t) pos[size_t(t)] = int32_t(t % seqlen);
  s.embeddings = Scratch<float>(target, rows);
  s.delta = Scratch<float>(target, rows);
  s.residual = Scratch<bf16>(target, size_t(s.Ts * H));
  s.positions = Scratch<int32_t>(target, pos);
  if (decode_steps < 0)
    throw Error(str_cat("tiledist: model '", config.name, "': ", decode_steps, " decode steps (0 or more)"));
  s.batch = batch, s.steps = decode_steps;
  if (decode_steps > 0) {
    s.cache = std::make_unique<KvCache>(target, config, layers, batch, seqlen + decode_steps);
    s.decoder = std::make_unique<DecodeLayer>(target, config, batch);
    std::vector<float> tokens(size_t(decode_steps) * size_t(batch) * size_t(H));
    const uint64_t step_key = tensor_key(seed, "model.embed_tokens.decode");
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = float(bf16(random_value(step_key, int64_t(i))));
    s.step_tokens = Scratch<float>(target, tokens);
    s.step_delta = Scratch<float>(target, size_t(batch) * size_t(H));
    s.step_residual = Scratch<bf16>(target, size_t(batch) * size_t(H));
  }
}

Model::~Model() = default;

void Model::prefill(const runtime::Stream* stream) {
  State& s = *s_;
  const size_t bytes = s.embeddings.size() * sizeof(float);
  if (kernels::detail::on_gpu(s.target))
    runtime::copy_async(s.delta.data(), s.embeddings.data(), bytes, stream ? *stream : runtime::Stream::legacy());
  else
    std::memcpy(s.delta.data(), s.embeddings.data(), bytes);
  for (size_t l = 0; l < s.weights.size(); ++l) {
    const bf16* residual = l == 0 ? nullptr : s.residual.data();
    if (s.cache)
      s.layer->run(s.delta.data(), residual, s.positions.data(), s.weights[l], s.delta.data(), s.residual.data(),
                   *s.cache, int(l), stream);
    else
      s.layer->run(s.delta.data(), residual, s.positions.data(), s.weights[l], s.delta.data(), s.residual.data(),
                   stream);
  }
  s.run = true;
  s.done = 0;
}

void Model::decode(const runtime::Stream* stream) {
  State& s = *s_;
  if (s.done < 0)
    throw Error(
        str_cat("tiledist: model '", s.config.name, "': a decode step before a prefill (the KV cache is empty)"));
  if (s.done >= s.steps)
    throw Error(str_cat("tiledist: model '", s.config.name, "': decode step ", s.done + 1, " of a model made for ",
                        s.steps, " decode steps (a KV cache of ", s.steps, " rows past the prompt)"));
  const size_t count = size_t(s.batch) * size_t(s.config.hidden);
  const float* tokens = s.step_tokens.data() + size_t(s.done) * count;
  if (kernels::detail::on_gpu(s.target))
    runtime::copy_async(s.step_delta.data(), tokens, count * sizeof(float),
                        stream ? *stream : runtime::Stream::legacy());
  else
    std::memcpy(s.step_delta.data(), tokens, count * sizeof(float));
  for (size_t l = 0; l < s.weights.size(); ++l)
    s.decoder->run(s.step_delta.data(), l == 0 ? nullptr : s.step_residual.data(), s.weights[l], *s.cache, int(l),
                   s.step_delta.data(), s.step_residual.data(), stream);
  ++s.done;
}

std::vector<float> Model::decoded() const {
  const State& s = *s_;
  return stream_of(s.target, s.step_delta, &s.step_residual);
}

std::vector<float> Model::hidden() const {
  const State& s = *s_;
  return stream_of(s.target, s.delta, s.run ? &s.residual : nullptr);
}

int64_t Model::tokens() const { return s_->T; }
const ModelConfig& Model::config() const { return s_->config; }

}  // namespace tiledist::model
