// A dense model's L decoder layers from seed-made weights and embeddings (model/model.h).
#include "model/model.h"

#include <cstdio>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/scratch.h"
#include "kernels/symmetric.h"
#include "mega/mega_kernel.h"
#include "runtime/cuda.h"
#include "runtime/graph.h"

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
  // a step's layers as a graph (a dense model's, on a GPU): captured on `capture` after a first
  // step run as it comes (which loads the kernels), then launched for each step
  bool graphs = true, warm = false;
  std::unique_ptr<runtime::Stream> capture;
  std::unique_ptr<runtime::Graph> step;
  // or as one persistent kernel (set_decode_mega), made at the first step
  bool use_mega = false;
  int mega_warps = 0;
  std::unique_ptr<mega::MegaKernel> mega;
  /// The L layers of a decode step, queued on `stream` (null: done when they return).
  void decode_layers(const runtime::Stream* stream) {
    for (size_t l = 0; l < weights.size(); ++l)
      decoder->run(step_delta.data(), l == 0 ? nullptr : step_residual.data(), weights[l], *cache, int(l),
                   step_delta.data(), step_residual.data(), stream);
  }
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

Model::~Model() {
  try {  // (a graph's launches are no object's runs: what they use is freed once they are done)
    if (s_->step) cuda::synchronize();
  } catch (const Error&) {
  }
}

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
  const bool gpu = kernels::detail::on_gpu(s.target);
  const runtime::Stream* on = gpu ? (stream ? stream : &runtime::Stream::legacy()) : nullptr;
  if (on)
    runtime::copy_async(s.step_delta.data(), tokens, count * sizeof(float), *on);
  else
    std::memcpy(s.step_delta.data(), tokens, count * sizeof(float));
  if (s.use_mega) {
    if (!s.mega) {
      mega::TaskGraph g(str_cat(s.config.name, "_decode"));
      g.set_rank(kernels::detail::world_rank(s.target), kernels::detail::world_ranks(s.target));
      g.input(s.step_delta.data(), int64_t(count));
      g.buffer(s.step_residual.data(), int64_t(s.step_residual.size() * sizeof(bf16)));
      for (size_t l = 0; l < s.weights.size(); ++l)
        s.decoder->record(g, s.step_delta.data(), l == 0 ? nullptr : s.step_residual.data(), s.weights[l], *s.cache,
                          int(l), s.step_delta.data(), s.step_residual.data());
      s.mega = std::make_unique<mega::MegaKernel>(g, s.target, 0, mega::Schedule::queue, s.mega_warps);
    }
    s.mega->run(stream);
    ++s.done;
    return;
  }
  // (a MoE model's router and MoE MLP count their runs on the host: its steps run as they come)
  if (gpu && s.graphs && !s.config.moe() && !s.step && s.warm) {
    if (!s.capture) s.capture = std::make_unique<runtime::Stream>();
    try {
      s.step = std::make_unique<runtime::Graph>(*s.capture, [&] { s.decode_layers(s.capture.get()); });
    } catch (const Error& e) {  // (as where the driver has no graphs, or kernels are profiled)
      std::fprintf(stderr, "tiledist: model '%s': decode steps go without a graph: %s\n", s.config.name.c_str(),
                   e.what());
      s.graphs = false;
    }
  }
  if (s.step) {
    kernels::launch_graph(*s.step, *on);
    if (!stream) on->synchronize();
  } else {
    s.decode_layers(stream);
    s.warm = true;
  }
  ++s.done;
}

void Model::set_decode_mega(bool on, int num_warps) {
  State& s = *s_;
  s.use_mega = on;
  // (the kernel goes where turned off or asked for other warps: made again at the next step)
  if (s.mega && (!on || s.mega_warps != num_warps)) {
    if (kernels::detail::on_gpu(s.target)) cuda::synchronize();  // (its steps done before it goes)
    s.mega.reset();
  }
  s.mega_warps = num_warps;
}

std::string Model::decode_mega_plan(bool per_task) const {
  const State& s = *s_;
  if (!s.mega) return "";
  return s.mega->summary() + "\n" + (per_task ? s.mega->describe() : "");
}

void Model::set_decode_graph(bool on) {
  State& s = *s_;
  s.graphs = on;
  if (on || !s.step) return;
  cuda::synchronize();  // (the graph's launches done before it goes)
  s.step.reset();
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
