#include "dsl/kernel_def.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <set>

#include "dsl/profile.h"

namespace tiledist {

std::string ConstValue::str() const {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return ir::attr_str(std::get<double>(v));
}

ConstValue ConstValue::parse(const std::string& tool, const std::string& name, const std::string& text) {
  char* end = nullptr;
  long long i = std::strtoll(text.c_str(), &end, 0);
  if (!text.empty() && *end == 0) return ConstValue(i);
  double d = std::strtod(text.c_str(), &end);
  if (!text.empty() && *end == 0) return ConstValue(d);
  throw Error(tool + ": constant " + name + " = '" + text + "' is not a number");
}

ArgFacts KernelDef::aligned_facts() const {
  ArgFacts f;
  for (const ParamInfo& p : runtime_params())
    f.push_back(p.type.is_float() || !p.specialize ? ArgFact::none : ArgFact::aligned16);
  return f;
}

KernelDef& KernelDef::do_not_specialize(std::initializer_list<std::string> names) {
  for (const std::string& n : names) {
    auto it = std::find_if(params_.begin(), params_.end(), [&](const ParamInfo& p) { return p.name == n; });
    if (it == params_.end() || it->kind == ParamKind::constant)
      throw Error(str_cat("tiledist: kernel '", name_, "' has no runtime parameter '", n, "' to leave unspecialized"));
    it->specialize = false;
  }
  return *this;
}

std::string constants_str(const Constants& c) {
  std::string s;
  for (auto& [k, v] : c) s += (s.empty() ? "" : ",") + k + "=" + v.str();
  return s;
}

uint64_t KernelDef::next_id() {
  static std::atomic<uint64_t> counter{1};
  return counter++;
}

void KernelDef::check_defaults() const {
  for (const auto& [name, value] : defaults_) {
    bool found = false;
    for (const ParamInfo& p : params_) found = found || (p.kind == ParamKind::constant && p.name == name);
    if (!found) {
      std::string constants;
      for (const ParamInfo& p : params_)
        if (p.kind == ParamKind::constant) constants += (constants.empty() ? "" : ", ") + p.name;
      throw Error(str_cat("tiledist: kernel '", name_, "': a default for '", name,
                          "', which is not one of its constants (", constants.empty() ? "it has none" : constants,
                          ")"));
    }
  }
}

void KernelDef::check_name(const std::string& name) {
  bool ok = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) throw Error(str_cat("tiledist: kernel name '", name, "' is not an identifier (letters, digits, '_')"));
}

std::vector<ParamInfo> KernelDef::runtime_params() const {
  std::vector<ParamInfo> out;
  for (auto& p : params_)
    if (p.kind != ParamKind::constant) out.push_back(p);
  return out;
}

KernelDef::KernelDef(std::string name, std::vector<ParamInfo> params, Body body, Constants defaults)
    : name_(std::move(name)),
      params_(std::move(params)),
      defaults_(std::move(defaults)),
      id_(next_id()),
      invoke_(std::move(body)) {
  check_name(name_);
  check_defaults();
}

std::vector<const ConstValue*> KernelDef::resolve(const Constants& constants) const {
  std::set<std::string> const_names;
  for (auto& p : params_)
    if (p.kind == ParamKind::constant) const_names.insert(p.name);
  for (auto& [k, v] : constants)
    if (!const_names.count(k)) {
      std::string known;
      for (auto& n : const_names) known += (known.empty() ? "" : ", ") + n;
      throw Error(str_cat("tiledist: kernel '", name_, "' has no constant '", k,
                          "' (its constants: ", known.empty() ? "none" : known, ")"));
    }
  std::vector<const ConstValue*> consts(params_.size(), nullptr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    if (p.kind != ParamKind::constant) continue;
    auto given = constants.find(p.name);
    auto fallback = defaults_.find(p.name);
    if (given != constants.end())
      consts[i] = &given->second;
    else if (fallback != defaults_.end())
      consts[i] = &fallback->second;
    else
      throw Error(str_cat("tiledist: kernel '", name_, "' needs a value for constant '", p.name, "'"));
  }
  return consts;
}

void KernelDef::with_facts(ir::Builder& b, std::vector<ir::Value*>& vals, const ArgFacts& facts) const {
  // Arguments known to be multiples of 16 (integers) or 16-byte aligned (pointers) enter the
  // kernel through a hint, which lets the code generator vectorize the accesses they index;
  // an integer known to be 1 becomes the constant 1.
  size_t runtime_index = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].kind == ParamKind::constant) continue;
    ArgFact fact = runtime_index < facts.size() ? facts[runtime_index] : ArgFact::none;
    if (fact == ArgFact::aligned16) vals[i] = b.hint(vals[i], {{"multiple_of", int64_t{16}}});
    if (fact == ArgFact::one && params_[i].kind == ParamKind::scalar && !params_[i].type.is_float())
      vals[i] = b.constant_int(params_[i].type.dtype, 1);
    ++runtime_index;
  }
}

void KernelDef::inline_body(const std::vector<ir::Value*>& args, const Constants& constants,
                            const ArgFacts& facts) const {
  const std::vector<const ConstValue*> consts = resolve(constants);
  std::vector<ir::Value*> vals(params_.size(), nullptr);
  size_t next = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    if (p.kind == ParamKind::constant) continue;
    if (next >= args.size() || !args[next] || !(args[next]->type == p.type))
      throw Error(str_cat("tiledist: kernel '", name_, "' inlined with ", args.size(), " arguments: its parameter '",
                          p.name, "' (", p.type.str(), ") ",
                          next >= args.size() || !args[next] ? "has none" : "is given a " + args[next]->type.str()));
    vals[i] = args[next++];
  }
  if (next != args.size())
    throw Error(str_cat("tiledist: kernel '", name_, "' inlined with ", args.size(), " arguments for its ", next,
                        " runtime parameters"));
  with_facts(dsl::Trace::current("inline_body").builder(), vals, facts);
  invoke_(vals, consts);
}

std::unique_ptr<ir::Function> KernelDef::trace(const Constants& constants, const ArgFacts& facts, bool profile) const {
  const std::vector<const ConstValue*> consts = resolve(constants);
  auto f = std::make_unique<ir::Function>();
  f->name = name_;
  std::vector<ir::Value*> vals(params_.size(), nullptr);
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].kind != ParamKind::constant) vals[i] = f->body.add_arg(params_[i].type, params_[i].name);
  {
    dsl::Trace trace(f.get(), profile);
    with_facts(trace.builder(), vals, facts);
    if (profile)
      tl::profile(name_, [&] { invoke_(vals, consts); });
    else
      invoke_(vals, consts);
    trace.builder().set_block(&f->body);
    trace.builder().set_loc({});
    trace.builder().create(ir::OpCode::Return, {}, {});
  }
  ir::verify(*f);
  return f;
}

Registry& Registry::global() {
  static Registry r;
  return r;
}
void Registry::add(const KernelDef& def) {
  if (!kernels_.emplace(def.name(), def).second)
    throw Error(str_cat("tiledist: kernel '", def.name(), "' is registered twice"));
}
const KernelDef* Registry::find(const std::string& name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}
std::vector<std::string> Registry::names() const {
  std::vector<std::string> n;
  for (auto& [k, v] : kernels_) n.push_back(k);
  return n;
}

}  // namespace tiledist
