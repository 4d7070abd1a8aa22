#include "jit/manifest.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "llvm/Support/JSON.h"

namespace tiledist::jit {

namespace {

char fact_letter(ArgFact f) { return f == ArgFact::aligned16 ? 'A' : f == ArgFact::one ? '1' : '-'; }

llvm::json::Value to_json(const Specialization& s) {
  llvm::json::Object constants;
  for (auto& [k, v] : s.constants) {
    if (std::holds_alternative<int64_t>(v.v)) constants[k] = std::get<int64_t>(v.v);
    else constants[k] = std::get<double>(v.v);
  }
  return llvm::json::Object{{"kernel", s.kernel},
                            {"target", s.target},
                            {"constants", std::move(constants)},
                            {"options", llvm::json::Object{{"num_warps", s.options.num_warps},
                                                           {"num_stages", s.options.num_stages},
                                                           {"check_bounds", s.options.check_bounds}}},
                            {"args", facts_str(s.facts)}};
}

Specialization from_json(const llvm::json::Value& v, const std::string& where) {
  auto bad = [&](const std::string& what) { return Error(str_cat("tiledist: ", where, ": ", what)); };
  const llvm::json::Object* o = v.getAsObject();
  if (!o) throw bad("a specialization must be a JSON object");
  Specialization s;
  auto kernel = o->getString("kernel");
  auto target = o->getString("target");
  if (!kernel || !target) throw bad("needs \"kernel\" and \"target\" strings");
  s.kernel = kernel->str();
  s.target = target->str();
  if (const llvm::json::Object* c = o->getObject("constants")) {
    for (auto& [k, val] : *c) {
      if (auto i = val.getAsInteger()) s.constants.insert_or_assign(k.str(), ConstValue(static_cast<long long>(*i)));
      else if (auto d = val.getAsNumber()) s.constants.insert_or_assign(k.str(), ConstValue(*d));
      else throw bad(str_cat("constant '", k.str(), "' of kernel '", s.kernel, "' is not a number"));
    }
  }
  if (const llvm::json::Object* opt = o->getObject("options")) {
    if (auto w = opt->getInteger("num_warps")) s.options.num_warps = static_cast<int>(*w);
    if (auto st = opt->getInteger("num_stages")) s.options.num_stages = static_cast<int>(*st);
    if (auto cb = opt->getBoolean("check_bounds")) s.options.check_bounds = *cb;
  }
  if (auto args = o->getString("args")) s.facts = parse_facts(args->str());
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string facts_str(const ArgFacts& facts) {
  std::string s;
  for (ArgFact f : facts) s += fact_letter(f);
  return s;
}

ArgFacts parse_facts(const std::string& s) {
  ArgFacts facts;
  for (char c : s) {
    if (c == 'A') facts.push_back(ArgFact::aligned16);
    else if (c == '1') facts.push_back(ArgFact::one);
    else if (c == '-') facts.push_back(ArgFact::none);
    else throw Error(str_cat("tiledist: argument facts '", s, "': '", std::string(1, c), "' is not A, 1 or -"));
  }
  return facts;
}

std::string Specialization::str() const {
  return str_cat(kernel, " ", target, " ", constants.empty() ? "-" : constants_str(constants), " ", options.key(),
                 facts.empty() ? "" : " args=" + facts_str(facts));
}

std::string Specialization::warmup_command() const {
  std::string cmd = str_cat("tiledist-warmup --target ", target, " --kernels ", kernel);
  for (auto& [k, v] : constants) cmd += str_cat(" --const ", k, "=", v.str());
  cmd += str_cat(" --num-warps ", options.num_warps, " --num-stages ", options.num_stages);
  if (!facts.empty()) cmd += " --args " + facts_str(facts);
  return cmd;
}

std::vector<Specialization> read_manifest(const std::string& path) {
  std::ifstream probe(path);
  if (!probe) throw Error(str_cat("tiledist: cannot read manifest ", path));
  auto parsed = llvm::json::parse(read_file(path));
  if (!parsed) throw Error(str_cat("tiledist: manifest ", path, " is not valid JSON: ", llvm::toString(parsed.takeError())));
  const llvm::json::Object* root = parsed->getAsObject();
  const llvm::json::Array* list = root ? root->getArray("specializations") : nullptr;
  if (!list) throw Error(str_cat("tiledist: manifest ", path, " has no \"specializations\" array"));
  std::vector<Specialization> out;
  for (size_t i = 0; i < list->size(); ++i)
    out.push_back(from_json((*list)[i], str_cat("manifest ", path, ", specialization ", i)));
  return out;
}

void record_specialization(const std::string& path, const Specialization& s) {
  std::string lock_path = path + ".lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (lock < 0) throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot open ", lock_path));
  ::flock(lock, LOCK_EX);
  try {
    std::set<Specialization> all;
    if (std::ifstream(path)) {
      auto existing = read_manifest(path);
      all.insert(existing.begin(), existing.end());
    }
    if (all.insert(s).second) {
      llvm::json::Array list;
      for (const Specialization& x : all) list.push_back(to_json(x));
      llvm::json::Value root = llvm::json::Object{{"version", 1}, {"specializations", std::move(list)}};
      std::string text;
      llvm::raw_string_ostream os(text);
      os << llvm::formatv("{0:2}", root) << "\n";
      os.flush();
      std::string tmp = str_cat(path, ".", getpid(), ".tmp");
      {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out) throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot write ", tmp));
      }
      if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot replace ", path));
    }
  } catch (...) {
    ::flock(lock, LOCK_UN);
    ::close(lock);
    throw;
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
}

}  // namespace tiledist::jit
