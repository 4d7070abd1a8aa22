// The compile driver: trace -> optimize -> (memory cache) -> (disk cache) -> the target's
// backend (jit/backend.h: its passes, lowering, LLVM, the binary, loading it). Every step that
// can fail reports an Error naming the kernel.
#include "jit/context.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "ir/passes/passes.h"
#include "ir/printer.h"
#include "jit/backend.h"
#include "jit/cache.h"
#include "jit/manifest.h"
#include "jit/nvshmem_link.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/SHA256.h"

#ifndef TILEDIST_VERSION
#define TILEDIST_VERSION "0.1.0"
#endif

namespace tiledist::jit {

namespace {
/// The GNU build-id of the object that holds this function (libtiledist.so): it changes with
/// every build, so a cache entry never outlives the compiler that made it.
std::string own_build_id() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&own_build_id), &info) || !info.dli_fbase) return "unknown";
  std::string id;
  struct Search {
    const void* base;
    std::string* out;
  } search{info.dli_fbase, &id};
  dl_iterate_phdr(
      [](dl_phdr_info* obj, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        if (reinterpret_cast<const void*>(obj->dlpi_addr) != s->base) return 0;
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(obj->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* desc = p + sizeof(ElfW(Nhdr)) + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID) {
              static const char* digits = "0123456789abcdef";
              for (unsigned k = 0; k < n->n_descsz; ++k) {
                unsigned char c = static_cast<unsigned char>(desc[k]);
                s->out->push_back(digits[c >> 4]);
                s->out->push_back(digits[c & 15]);
              }
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  return id.empty() ? "unknown" : id;
}
}  // namespace

const char* compiler_version() {
  static const std::string version =
      std::string("tiledist " TILEDIST_VERSION " llvm " LLVM_VERSION_STRING " build ") + own_build_id();
  return version.c_str();
}

namespace {

std::string sha256_hex(const std::string& s) {
  llvm::SHA256 h;
  h.update(s);
  auto digest = h.final();
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("TILEDIST_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tiledist";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tiledist";
  return "/tmp/tiledist-cache";
}

/// TILEDIST_JIT=off: kernels come from the cache only (a warmed job on a host that must not compile).
bool jit_disabled() {
  const char* j = std::getenv("TILEDIST_JIT");
  if (!j || !*j) return false;
  std::string v = j;
  if (v == "off" || v == "0") return true;
  if (v == "on" || v == "1") return false;
  throw Error(str_cat("tiledist: TILEDIST_JIT='", v, "': use off or on"));
}

/// A specialization traced and optimized, with its cache key: the optimized IR, the target, the
/// options, NVSHMEM's device library where the options' world links it, and this build of the
/// compiler.
std::pair<std::unique_ptr<ir::Function>, std::string> trace_optimized(const KernelDef& def, const Constants& constants,
                                                                      const Target& target,
                                                                      const CompileOptions& options,
                                                                      const ArgFacts& facts) {
  options.validate();
  std::unique_ptr<ir::Function> fn = def.trace(constants, facts, !options.profile.empty());
  ir::optimize(*fn);
  Backend::for_target(target).prepare(*fn, options);
  std::string key = sha256_hex(str_cat(ir::print(*fn), "\n", target.key(), "\n", options.key(), "\n",
                                       nvshmem_key(options.world), "\n", compiler_version()));
  return {std::move(fn), std::move(key)};
}

}  // namespace

struct Context::Impl {
  std::mutex mu;
  std::map<const Backend*, std::unique_ptr<Backend::State>> backend_states;
  std::map<std::string, std::shared_ptr<Loaded>> by_key;
  std::map<std::string, std::shared_ptr<Loaded>> by_spec;
  Stats stats;

  /// What `backend` keeps in this Context, made at its first use.
  Backend::State& state(const Backend& backend) {
    auto& s = backend_states[&backend];
    if (!s) s = backend.new_state();
    return *s;
  }

  Artifact codegen(const ir::Function& f, const std::string& key, const Target& target, const CompileOptions& options) {
    const Backend& backend = Backend::for_target(target);
    Artifact a = backend.compile(f, target, options, state(backend));
    a.key = key;
    a.kernel = f.name;
    a.target = target.name();
    stats.compiles++;
    return a;
  }
};

Context::Context(std::string cache_dir)
    : impl_(std::make_unique<Impl>()), cache_dir_(cache_dir.empty() ? default_cache_dir() : std::move(cache_dir)) {}
Context::~Context() = default;

Context& Context::global() {
  static Context ctx;
  return ctx;
}

Stats Context::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::shared_ptr<const Loaded> Context::compile(const KernelDef& def, const Constants& constants, const Target& target,
                                               const CompileOptions& options, const ArgFacts& facts) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string spec = str_cat(def.id(), "|", def.name(), "|", constants_str(constants), "|", target.key(), "|",
                             options.key(), "|", facts_str(facts));
  if (auto it = impl_->by_spec.find(spec); it != impl_->by_spec.end()) {
    impl_->stats.memory_hits++;
    return it->second;
  }
  Specialization what{def.name(), target.name(), constants, options, facts};
  auto [fn, key] = trace_optimized(def, constants, target, options, facts);
  impl_->stats.traces++;
  std::shared_ptr<Loaded> loaded;
  if (auto it = impl_->by_key.find(key); it != impl_->by_key.end()) {
    impl_->stats.memory_hits++;
    loaded = it->second;
  } else {
    Artifact a;
    CacheRead r = read_cache_entry(cache_dir_, key, a);
    if (r == CacheRead::hit) {
      impl_->stats.disk_hits++;
      touch_cache_entry(cache_dir_, key);
    } else {
      if (r == CacheRead::corrupt) impl_->stats.disk_rejects++;
      if (jit_disabled())
        throw Error(str_cat("tiledist: TILEDIST_JIT=off and kernel '", def.name(), "' is not in the cache ", cache_dir_,
                            r == CacheRead::corrupt ? " (its entry is corrupt)" : "", ": ", what.str(),
                            "\n  warm it with: ", what.warmup_command(), "\n  (with TILEDIST_CACHE_DIR=", cache_dir_,
                            ", using this build of tiledist)"));
      a = impl_->codegen(*fn, key, target, options);
      a.spec = what.str();
      write_cache_entry(cache_dir_, a);
    }
    loaded = std::make_shared<Loaded>();
    loaded->target = target;
    loaded->artifact = std::move(a);
    loaded->ir = std::move(fn);
    loaded->runtime_params = def.runtime_params();
    auto recipes = runtime::parse_tma_recipes(loaded->artifact.tma);  // (checked when read from disk)
    TD_ASSERT(recipes, "the code generator made a TMA recipe it cannot read back: ", loaded->artifact.tma);
    loaded->tma = std::move(*recipes);
    loaded->options = options;
    const Backend& backend = Backend::for_target(target);
    backend.load(*loaded, impl_->state(backend));
    impl_->by_key[key] = loaded;
  }
  impl_->by_spec[spec] = loaded;
  if (const char* manifest = std::getenv("TILEDIST_RECORD"); manifest && *manifest) {
    try {  // a record that cannot be written must not stop the job
      record_specialization(manifest, what);
    } catch (const Error& e) {
      std::fprintf(stderr, "tiledist: warning: %s (kernel '%s' not recorded)\n", e.what(), def.name().c_str());
    }
  }
  return loaded;
}

bool Context::warm(const KernelDef& def, const Constants& constants, const Target& target,
                   const CompileOptions& options, const ArgFacts& facts) {
  Specialization what{def.name(), target.name(), constants, options, facts};
  auto [fn, key] = trace_optimized(def, constants, target, options, facts);
  std::lock_guard<std::mutex> lock(impl_->mu);
  Artifact a;
  if (read_cache_entry(cache_dir_, key, a) == CacheRead::hit) {
    touch_cache_entry(cache_dir_, key);  // just warmed: the last thing a prune should take
    return false;
  }
  a = impl_->codegen(*fn, key, target, options);
  a.spec = what.str();
  write_cache_entry(cache_dir_, a);
  return true;
}

std::string Context::emit(const KernelDef& def, const Constants& constants, const Target& target,
                          const CompileOptions& options, Stage stage, const ArgFacts& facts) {
  options.validate();
  std::unique_ptr<ir::Function> fn = def.trace(constants, facts, !options.profile.empty());
  if (stage == Stage::tile_ir) return ir::print(*fn);
  ir::optimize(*fn);
  if (stage == Stage::opt_ir) return ir::print(*fn);
  const Backend& backend = Backend::for_target(target);
  backend.prepare(*fn, options);  // (as compile() does: trace_optimized)
  if (stage == Stage::gpu_ir) return backend.gpu_ir(*fn, target, options);
  return emit(*fn, target, options, stage);
}

std::string Context::emit(const ir::Function& fn, const Target& target, const CompileOptions& options, Stage stage) {
  if (stage == Stage::tile_ir || stage == Stage::opt_ir) return ir::print(fn);
  TD_ASSERT(stage != Stage::gpu_ir, "emit the GPU IR from a definition");
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Backend& backend = Backend::for_target(target);
  return backend.emit(fn, target, options, stage, impl_->state(backend));
}

}  // namespace tiledist::jit
