// Model shapes (model/config.h): the built-ins, a config.json read with LLVM's JSON parser, and
// the check that a shape splits over the tensor-parallel ranks.
#include "model/config.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "llvm/Support/JSON.h"
#include "support/support.h"

namespace tiledist::model {

ModelConfig ModelConfig::qwen3_32b() {
  ModelConfig c;
  c.name = "qwen3-32b";
  c.hidden = 5120, c.heads = 64, c.kv_heads = 8, c.head_dim = 128, c.intermediate = 25600, c.layers = 64;
  c.rms_eps = 1e-6, c.rope_theta = 1e6;
  return c;
}

ModelConfig ModelConfig::qwen3_30b_a3b() {
  ModelConfig c;
  c.name = "qwen3-30b-a3b";
  c.hidden = 2048, c.heads = 32, c.kv_heads = 4, c.head_dim = 128, c.intermediate = 6144, c.layers = 48;
  c.rms_eps = 1e-6, c.rope_theta = 1e6;
  c.experts = 128, c.topk = 8, c.expert_intermediate = 768;
  return c;
}

ModelConfig ModelConfig::load(const std::string& name_or_path) {
  if (name_or_path == "qwen3-32b") return qwen3_32b();
  if (name_or_path == "qwen3-30b-a3b") return qwen3_30b_a3b();
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = name_or_path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file);
  if (!in)
    throw Error(str_cat("tiledist: model config '", name_or_path,
                        "': neither a built-in (qwen3-32b, qwen3-30b-a3b) nor a readable config.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse(text, file.string());
}

ModelConfig ModelConfig::parse(const std::string& json, const std::string& where) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed)
    throw Error(str_cat("tiledist: model config ", where, ": not JSON (", llvm::toString(parsed.takeError()), ")"));
  const llvm::json::Object* o = parsed->getAsObject();
  if (!o) throw Error(str_cat("tiledist: model config ", where, ": not a JSON object"));
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    const llvm::json::Value* v = o->get(key);
    if (!v || v->kind() == llvm::json::Value::Null) return std::nullopt;
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i < 0) throw Error(str_cat("tiledist: model config ", where, ": '", key, "' is not a count"));
    return i;
  };
  auto required = [&](const char* key) {
    std::optional<int64_t> i = integer(key);
    if (!i || *i == 0) throw Error(str_cat("tiledist: model config ", where, ": no '", key, "' (at least 1)"));
    return *i;
  };
  auto number = [&](const char* key, double fallback) {
    const llvm::json::Value* v = o->get(key);
    if (!v || v->kind() == llvm::json::Value::Null) return fallback;
    std::optional<double> d = v->getAsNumber();
    if (!d || !(*d > 0))
      throw Error(str_cat("tiledist: model config ", where, ": '", key, "' is not a positive number"));
    return *d;
  };
  ModelConfig c;
  c.name = where;
  c.hidden = required("hidden_size");
  c.heads = required("num_attention_heads");
  c.kv_heads = integer("num_key_value_heads").value_or(c.heads);
  c.head_dim = integer("head_dim").value_or(c.hidden / c.heads);
  c.intermediate = integer("intermediate_size").value_or(0);
  c.layers = required("num_hidden_layers");
  c.rms_eps = number("rms_norm_eps", 1e-6);
  c.rope_theta = number("rope_theta", 1e4);  // (the transformers library's default)
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (std::optional<int64_t> e = integer(key); e && *e > 0) c.experts = *e;
  if (c.experts > 0) {
    c.topk = required("num_experts_per_tok");
    if (const llvm::json::Value* v = o->get("norm_topk_prob"); v && v->kind() != llvm::json::Value::Null) {
      std::optional<bool> b = v->getAsBoolean();
      if (!b) throw Error(str_cat("tiledist: model config ", where, ": 'norm_topk_prob' is not true or false"));
      c.renormalize = *b;
    }
    c.expert_intermediate = integer("moe_intermediate_size").value_or(c.intermediate);
    if (c.expert_intermediate == 0)
      throw Error(str_cat("tiledist: model config ", where, ": experts without 'moe_intermediate_size'"));
  } else if (c.intermediate == 0) {
    throw Error(str_cat("tiledist: model config ", where, ": no 'intermediate_size' (at least 1)"));
  }
  if (c.kv_heads == 0 || c.heads % c.kv_heads != 0)
    throw Error(str_cat("tiledist: model config ", where, ": num_attention_heads = ", c.heads,
                        " is not a multiple of num_key_value_heads = ", c.kv_heads));
  if (c.head_dim == 0) throw Error(str_cat("tiledist: model config ", where, ": head_dim = 0"));
  return c;
}

void ModelConfig::check(int ranks) const {
  auto fail = [&](const char* field, int64_t value, const char* rule) {
    return Error(str_cat("tiledist: model '", name, "': ", field, " = ", value, " ", rule, " ", ranks,
                         " tensor-parallel rank", ranks == 1 ? "" : "s"));
  };
  if (ranks < 1) throw Error(str_cat("tiledist: model '", name, "': ", ranks, " ranks (at least 1)"));
  if (heads % ranks != 0) throw fail("num_attention_heads", heads, "does not divide over");
  if (kv_heads % ranks != 0 && ranks % kv_heads != 0)
    throw fail("num_key_value_heads", kv_heads, "neither divides over nor divides");
  if (moe()) {
    if (expert_intermediate % ranks != 0)
      throw fail("moe_intermediate_size", expert_intermediate, "does not divide over");
    if (topk < 1 || topk > experts)
      throw Error(str_cat("tiledist: model '", name, "': num_experts_per_tok = ", topk, " of ", experts, " experts"));
  } else if (intermediate % ranks != 0) {
    throw fail("intermediate_size", intermediate, "does not divide over");
  }
}

}  // namespace tiledist::model
