// tiledist-warmup: compiles kernel specializations into the disk cache ahead of a job, for any
// target, on any machine (PTX needs no GPU).
//   tiledist-warmup manifest.json [--target sm_90a,sm_80]     what a recorded job compiled
//   tiledist-warmup --kernels all|NAME,... --target sm_90a,host  the registry's kernels
//       [--const NAME=VALUE ...] [--num-warps N] [--num-stages N] [--no-tma] [--warp-specialize]
//       [--lowering L] [--world nvshmem] [--args FACTS]
//   tiledist-warmup my_kernels.cpp --target sm_90a [--kernels NAME,...]  a user's source file:
//       compiled in-process by clang against tiledist's headers, its registered kernels warmed
//   common: [--jobs N] [--cache DIR]
// Without --args, GPU targets get the generic variant and the one for 16-aligned arguments;
// launches with other arguments (sizes that are not multiples of 16, strides of 1) pick other
// variants, which a manifest recorded from a real run lists. Exit status 1 if any specialization
// failed (each is named), 2 for bad usage.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jit/backend.h"
#include "jit/manifest.h"
#include "kernels/kernels.h"

namespace {
using namespace tiledist;

int usage(const char* msg) {
  std::fprintf(stderr,
               "tiledist-warmup: %s\n"
               "usage: tiledist-warmup MANIFEST.json [--target T,...] [--jobs N] [--cache DIR]\n"
               "       tiledist-warmup --kernels all|NAME,... --target T,... [--const NAME=VALUE ...]\n"
               "                       [--num-warps N] [--num-stages N] [--no-tma] [--warp-specialize] [--lowering L]\n"
               "                       [--world nvshmem] [--args FACTS] [--jobs N] [--cache DIR]\n"
               "targets: host, sm_80, sm_90a, gfx942, gfx90a\n",
               msg);
  return 2;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int parse_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 1024)
    throw Error("tiledist-warmup: " + flag + " takes a positive number, got '" + v + "'");
  return static_cast<int>(n);
}

/// Loads the kernels of a C++ source through the clang plugin (beside this program in the build
/// tree; where installed, in TILEDIST_INSTALL_PLUGIN_DIR under the prefix); returns the names of
/// the kernels it registered. The source is compiled against $TILEDIST_INCLUDE, else the
/// installed headers (TILEDIST_INSTALL_INCLUDE_DIR under the prefix), else the source tree this
/// program was built from.
std::vector<std::string> load_source(const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path here = fs::read_symlink("/proc/self/exe").parent_path();
  const fs::path prefix = here.parent_path();  // (installed: <prefix>/bin/tiledist-warmup)
  const fs::path installed_plugin = prefix / TILEDIST_INSTALL_PLUGIN_DIR / "libtiledist-cc.so";
  const std::string plugin =
      fs::exists(installed_plugin) ? installed_plugin.string() : (here / "libtiledist-cc.so").string();
  const fs::path installed_headers = prefix / TILEDIST_INSTALL_INCLUDE_DIR;
  const std::string headers =
      fs::exists(installed_headers / "tiledist.h") ? installed_headers.string() : std::string(TILEDIST_INCLUDE_DIR);
  void* lib = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw Error(str_cat("tiledist-warmup: compiling C++ sources needs ", plugin,
                        ", built where libclang-19-dev is installed (", dlerror(), ")"));
  using LoadFn = int (*)(const char*, const char*, char*, size_t);
  auto load = reinterpret_cast<LoadFn>(dlsym(lib, "tiledist_cc_load"));
  if (!load) throw Error("tiledist-warmup: " + plugin + " lacks tiledist_cc_load");
  const char* inc = std::getenv("TILEDIST_INCLUDE");
  auto before = Registry::global().names();
  std::vector<char> err(1 << 16);
  if (load(file.c_str(), inc && *inc ? inc : headers.c_str(), err.data(), err.size()) != 0)
    throw Error(str_cat("tiledist-warmup: ", err.data()));
  std::vector<std::string> added;
  for (const std::string& n : Registry::global().names())
    if (std::find(before.begin(), before.end(), n) == before.end()) added.push_back(n);
  if (added.empty()) throw Error("tiledist-warmup: " + file + " registers no kernels (use TILEDIST_REGISTER(def))");
  return added;
}

struct Outcome {
  enum { compiled, cached, failed } kind;
  std::string error;
};

}  // namespace

int main(int argc, char** argv) {
  std::string manifest, kernels_arg, targets_arg, cache_dir, args_arg, source;
  Constants constants;
  CompileOptions options = CompileOptions::from_env();
  bool options_given = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw Error("tiledist-warmup: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--kernels")
        kernels_arg = value();
      else if (a == "--target")
        targets_arg = value();
      else if (a == "--cache")
        cache_dir = value();
      else if (a == "--jobs" || a == "-j")
        jobs = parse_count(a, value());
      else if (a == "--num-warps")
        options.num_warps = parse_count(a, value()), options_given = true;
      else if (a == "--num-stages")
        options.num_stages = parse_count(a, value()), options_given = true;
      else if (a == "--no-tma")
        options.tma = false, options_given = true;
      else if (a == "--warp-specialize")
        options.warp_specialize = true, options_given = true;
      else if (a == "--lowering")
        options.lowering = value(), options_given = true;
      else if (a == "--world")
        options.world = value(), options_given = true;
      else if (a == "--args")
        args_arg = value();
      else if (a == "--const") {
        std::string kv = value();
        size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) return usage(("--const takes NAME=VALUE, got '" + kv + "'").c_str());
        constants.insert_or_assign(kv.substr(0, eq),
                                   ConstValue::parse("tiledist-warmup", kv.substr(0, eq), kv.substr(eq + 1)));
      } else if (a == "-h" || a == "--help") {
        usage("compiles kernels into the cache ahead of a job");
        return 0;
      } else if (!a.empty() && a[0] == '-')
        return usage(("unknown option '" + a + "'").c_str());
      else if (a.size() > 4 && (a.substr(a.size() - 4) == ".cpp" || a.substr(a.size() - 3) == ".cc"))
        source = a;
      else if (manifest.empty())
        manifest = a;
      else
        return usage(("unexpected argument '" + a + "'").c_str());
    }
    if (!source.empty()) {
      if (!manifest.empty()) return usage("give a manifest or a source file, not both");
      std::vector<std::string> added = load_source(source);
      if (kernels_arg.empty()) {
        for (const std::string& n : added) kernels_arg += (kernels_arg.empty() ? "" : ",") + n;
      }
      std::fprintf(stderr, "tiledist-warmup: %s registers %zu kernels\n", source.c_str(), added.size());
    }
    if (manifest.empty() == kernels_arg.empty()) return usage("give a manifest, --kernels or a source file");
    if (!manifest.empty() && (!constants.empty() || options_given || !args_arg.empty()))
      return usage(
          "--const, --num-warps, --num-stages, --no-tma, --warp-specialize, --lowering, --world and --args go with "
          "--kernels (a manifest "
          "has its own)");

    std::vector<Target> targets;
    for (const std::string& t : split(targets_arg)) targets.push_back(Target::parse(t));
    if (targets.empty() && !kernels_arg.empty()) targets.push_back(Target::host());

    // The work: specializations, each with the definition it needs (null: unknown kernel).
    std::vector<std::pair<jit::Specialization, const KernelDef*>> work;
    auto& registry = Registry::global();
    auto add = [&](jit::Specialization s) { work.emplace_back(s, registry.find(s.kernel)); };
    if (!manifest.empty()) {
      for (jit::Specialization s : jit::read_manifest(manifest)) {
        if (targets.empty()) add(s);
        for (const Target& t : targets) {
          s.target = t.name();
          add(s);
        }
      }
    } else {
      std::vector<std::string> names = kernels_arg == "all" ? registry.names() : split(kernels_arg);
      for (const std::string& name : names)
        if (!registry.find(name)) {
          std::string known;
          for (auto& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
          return usage(("no kernel '" + name + "' is registered (known: " + known + ")").c_str());
        }
      for (const std::string& name : names)
        for (const Target& t : targets) {
          const KernelDef* def = registry.find(name);
          jit::Specialization s{name, t.name(), constants, options, {}};
          if (!args_arg.empty()) s.facts = jit::parse_facts(args_arg);
          add(s);
          if (def && args_arg.empty() && jit::Backend::for_target(t).specializes_at_launch()) {
            s.facts = def->aligned_facts();
            add(s);
          }
        }
    }

    // Each worker has its own context (its own LLVM state); entries are written atomically.
    std::vector<Outcome> outcomes(work.size());
    std::atomic<size_t> next{0}, done{0};
    std::mutex print_mu;
    bool tty = isatty(STDERR_FILENO);
    auto t0 = std::chrono::steady_clock::now();
    auto report = [&](size_t i) {
      std::lock_guard<std::mutex> lock(print_mu);
      size_t n = ++done;
      const Outcome& o = outcomes[i];
      const char* what = o.kind == Outcome::compiled ? "compiled" : o.kind == Outcome::cached ? "cached  " : "FAILED  ";
      if (tty) {
        int width = 30, filled = static_cast<int>(width * n / work.size());
        std::fprintf(stderr, "\r[%s%s] %zu/%zu %-60.60s", std::string(filled, '=').c_str(),
                     std::string(width - filled, ' ').c_str(), n, work.size(), work[i].first.str().c_str());
        if (n == work.size()) std::fputc('\n', stderr);
      } else {
        std::fprintf(stderr, "[%zu/%zu] %s %s\n", n, work.size(), what, work[i].first.str().c_str());
      }
    };
    auto worker = [&] {
      jit::Context ctx(cache_dir);
      for (size_t i; (i = next++) < work.size();) {
        const auto& [s, def] = work[i];
        try {
          if (!def) throw Error(str_cat("kernel '", s.kernel, "' is not registered in this build of tiledist"));
          outcomes[i].kind = ctx.warm(*def, s.constants, Target::parse(s.target), s.options, s.facts)
                                 ? Outcome::compiled
                                 : Outcome::cached;
        } catch (const std::exception& e) {
          outcomes[i] = {Outcome::failed, e.what()};
        }
        report(i);
      }
    };
    std::vector<std::thread> threads;
    jobs = std::max(1, std::min<int>(jobs, static_cast<int>(work.size())));
    for (int t = 0; t < jobs; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    size_t compiled = 0, cached = 0, failed = 0;
    for (const Outcome& o : outcomes)
      (o.kind == Outcome::compiled ? compiled : o.kind == Outcome::cached ? cached : failed)++;
    std::printf(
        "tiledist-warmup: %zu specializations: %zu compiled, %zu already cached, %zu failed, in %.1f s "
        "(%.1f compiled/s, %d jobs) into %s\n",
        work.size(), compiled, cached, failed, secs, secs > 0 ? compiled / secs : 0.0, jobs,
        jit::Context(cache_dir).cache_dir().c_str());
    for (size_t i = 0; i < work.size(); ++i)
      if (outcomes[i].kind == Outcome::failed)
        std::fprintf(stderr, "tiledist-warmup: FAILED %s: %s\n", work[i].first.str().c_str(),
                     outcomes[i].error.c_str());
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
