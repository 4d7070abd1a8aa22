#include "jit/manifest.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "llvm/Support/JSON.h"

namespace tiledist::jit {

namespace {

std::string precise(double d) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

char fact_letter(ArgFact f) { return f == ArgFact::aligned16 ? 'A' : f == ArgFact::one ? '1' : '-'; }

llvm::json::Value to_json(const Specialization& s) {
  llvm::json::Object constants;
  for (auto& [k, v] : s.constants) {
    // Integers as numbers; floats as strings ("0.5", "inf", "nan"), which keep their type and
    // every value JSON has no number for.
    if (std::holds_alternative<int64_t>(v.v))
      constants[k] = std::get<int64_t>(v.v);
    else
      constants[k] = precise(std::get<double>(v.v));
  }
  llvm::json::Object options{{"num_warps", s.options.num_warps},
                             {"num_stages", s.options.num_stages},
                             {"check_bounds", s.options.check_bounds},
                             {"tma", s.options.tma},
                             {"warp_specialize", s.options.warp_specialize}};
  // (strings where they are not their defaults: a job on the NVSHMEM world warms that world's
  // binaries, which have keys of their own)
  if (!s.options.lowering.empty()) options["lowering"] = s.options.lowering;
  if (!s.options.world.empty()) options["world"] = s.options.world;
  return llvm::json::Object{{"kernel", s.kernel},
                            {"target", s.target},
                            {"constants", std::move(constants)},
                            {"options", std::move(options)},
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
  if (const llvm::json::Value* cv = o->get("constants")) {
    const llvm::json::Object* c = cv->getAsObject();
    if (!c) throw bad("\"constants\" must be an object");
    for (auto& [k, val] : *c) {
      if (auto i = val.getAsInteger()) {
        s.constants.insert_or_assign(k.str(), ConstValue(static_cast<long long>(*i)));
      } else if (auto str = val.getAsString()) {
        char* end = nullptr;
        std::string text = str->str();
        double d = std::strtod(text.c_str(), &end);
        if (text.empty() || *end) throw bad(str_cat("constant '", k.str(), "' = \"", text, "\" is not a number"));
        s.constants.insert_or_assign(k.str(), ConstValue(d));
      } else if (auto d = val.getAsNumber()) {
        s.constants.insert_or_assign(k.str(), ConstValue(*d));
      } else {
        throw bad(str_cat("constant '", k.str(), "' of kernel '", s.kernel, "' is not a number"));
      }
    }
  }
  if (const llvm::json::Value* ov = o->get("options")) {
    const llvm::json::Object* opt = ov->getAsObject();
    if (!opt) throw bad("\"options\" must be an object");
    auto integer = [&](const char* name, int& out) {
      const llvm::json::Value* v = opt->get(name);
      if (!v) return;
      auto i = v->getAsInteger();
      if (!i || *i < 1 || *i > 1024) throw bad(str_cat("option \"", name, "\" must be a positive integer"));
      out = static_cast<int>(*i);
    };
    integer("num_warps", s.options.num_warps);
    integer("num_stages", s.options.num_stages);
    auto boolean = [&](const char* name, bool& out) {
      const llvm::json::Value* v = opt->get(name);
      if (!v) return;
      if (!v->getAsBoolean()) throw bad(str_cat("option \"", name, "\" must be true or false"));
      out = *v->getAsBoolean();
    };
    boolean("check_bounds", s.options.check_bounds);
    boolean("tma", s.options.tma);
    boolean("warp_specialize", s.options.warp_specialize);
    auto text = [&](const char* name, std::string& out) {
      const llvm::json::Value* v = opt->get(name);
      if (!v) return;
      if (!v->getAsString()) throw bad(str_cat("option \"", name, "\" must be a string"));
      out = v->getAsString()->str();
    };
    text("lowering", s.options.lowering);
    text("world", s.options.world);
    try {
      s.options.validate();
    } catch (const Error& e) {  // (its message, under the manifest's prefix)
      std::string what = e.what();
      if (what.rfind("tiledist: ", 0) == 0) what.erase(0, 10);
      throw bad(what);
    }
  }
  if (const llvm::json::Value* av = o->get("args")) {
    if (!av->getAsString()) throw bad("\"args\" must be a string of A, 1 and -");
    s.facts = parse_facts(av->getAsString()->str());
  }
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
    if (c == 'A')
      facts.push_back(ArgFact::aligned16);
    else if (c == '1')
      facts.push_back(ArgFact::one);
    else if (c == '-')
      facts.push_back(ArgFact::none);
    else
      throw Error(str_cat("tiledist: argument facts '", s, "': '", std::string(1, c), "' is not A, 1 or -"));
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
  if (!options.tma) cmd += " --no-tma";
  if (options.warp_specialize) cmd += " --warp-specialize";
  if (!options.lowering.empty()) cmd += " --lowering " + options.lowering;
  if (!options.world.empty()) cmd += " --world " + options.world;
  if (!facts.empty()) cmd += " --args " + facts_str(facts);
  return cmd;
}

std::vector<Specialization> read_manifest(const std::string& path) {
  std::ifstream probe(path);
  if (!probe) throw Error(str_cat("tiledist: cannot read manifest ", path));
  auto parsed = llvm::json::parse(read_file(path));
  if (!parsed)
    throw Error(str_cat("tiledist: manifest ", path, " is not valid JSON: ", llvm::toString(parsed.takeError())));
  const llvm::json::Object* root = parsed->getAsObject();
  const llvm::json::Array* list = root ? root->getArray("specializations") : nullptr;
  if (!list) throw Error(str_cat("tiledist: manifest ", path, " has no \"specializations\" array"));
  if (auto version = root->getInteger("version"); version && *version != 1)
    throw Error(str_cat("tiledist: manifest ", path, " has version ", *version, "; this tiledist reads version 1"));
  std::vector<Specialization> out;
  for (size_t i = 0; i < list->size(); ++i)
    out.push_back(from_json((*list)[i], str_cat("manifest ", path, ", specialization ", i)));
  return out;
}

void record_specialization(const std::string& path, const Specialization& s) {
  std::string lock_path = path + ".lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (lock < 0) throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot open ", lock_path, ": ", std::strerror(errno)));
  while (::flock(lock, LOCK_EX) != 0)
    if (errno != EINTR) {
      int e = errno;
      ::close(lock);
      throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot lock ", lock_path, ": ", std::strerror(e)));
    }
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
      // Written in full and synced before it replaces the manifest: a full disk leaves the old
      // manifest as it was.
      std::string tmp = str_cat(path, ".", getpid(), ".tmp");
      int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      bool ok = fd >= 0;
      for (size_t done = 0; ok && done < text.size();) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        done += ok ? static_cast<size_t>(n) : 0;
      }
      int err = errno;
      ok = ok && ::fsync(fd) == 0;
      if (fd >= 0) ok = ::close(fd) == 0 && ok;
      if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        err = errno ? errno : err;
        ::unlink(tmp.c_str());
        throw Error(str_cat("tiledist: TILEDIST_RECORD: cannot write ", path, ": ", std::strerror(err)));
      }
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
