// The compiler driver and its caches. A Context owns the in-memory cache, the on-disk cache
// directory and the host JIT; tests make their own, programs use Context::global().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dsl/kernel_def.h"
#include "ir/ir.h"
#include "jit/target.h"
#include "runtime/host_abi.h"
#include "support/tma.h"

namespace tiledist::jit {

/// What a compile produces and the disk cache stores.
struct Artifact {
  /// The cache key: SHA-256 (hex) of the optimized IR, Target::key(), CompileOptions::key() and
  /// compiler_version().
  std::string key;
  std::string kernel;         ///< the kernel's name
  std::string target;         ///< the target's name (Target::name())
  std::string entry;          ///< the entry function's symbol in `binary`
  int64_t scratch_bytes = 0;  ///< host: scratch per program; GPU: dynamic shared memory per CTA
  bool distributed = false;   ///< uses distributed ops: launched as fibers in the World
  int threads = 1;            ///< GPU: threads per CTA
  /// host: an ELF relocatable object; NVPTX: PTX text; AMDGCN: a code object.
  std::string binary;
  /// The specialization it was compiled for (Specialization::str), for listings.
  std::string spec;
  std::string tma;  ///< NVPTX: the TMA tensor maps it takes (runtime::tma_recipes_str)
};

/// A compiled kernel, ready to launch.
struct Loaded {
  Artifact artifact;                        ///< what was compiled (or read from the disk cache)
  std::unique_ptr<ir::Function> ir;         ///< the optimized IR it was compiled from
  std::vector<ParamInfo> runtime_params;    ///< the kernel's runtime parameters, in order
  std::vector<runtime::TmaRecipe> tma;      ///< parsed from artifact.tma
  runtime::HostKernelFn host_fn = nullptr;  ///< host: the entry point, linked by the host JIT
  CompileOptions options;                   ///< the options it was compiled with
  Target target;                            ///< the target it was compiled for
  /// GPU: the runtime::Module (CUDA's or HIP's), loaded on the launching device at the first
  /// launch.
  mutable std::shared_ptr<void> gpu_module;
  mutable std::mutex gpu_mutex;  ///< guards gpu_module
};

/// What a Context has done since it was made (Context::stats).
struct Stats {
  int64_t traces = 0;        ///< kernel functions traced by compile()
  int64_t compiles = 0;      ///< LLVM code generations (the expensive step), warm() included
  int64_t memory_hits = 0;   ///< compile() served from memory
  int64_t disk_hits = 0;     ///< compile() served from the disk cache
  int64_t disk_rejects = 0;  ///< disk entries found corrupt by compile() and recompiled
};

/// What `emit` prints.
enum class Stage {
  tile_ir,       ///< the traced tile IR
  opt_ir,        ///< the optimized tile IR
  gpu_ir,        ///< after the GPU passes (layouts): a GPU target, or the host with gpu_passes
  llvm_lowered,  ///< LLVM IR before LLVM's -O3
  llvm,          ///< LLVM IR after LLVM's -O3
  asm_,          ///< assembly (NVPTX: PTX)
  binary         ///< what is loaded (host: an object file, NVPTX: PTX, AMDGCN: a code object)
};

/// The compiler driver: owns the in-memory cache, the on-disk cache directory and the host JIT;
/// tests make their own, programs use global(). Its compiles take turns (one mutex).
class Context {
 public:
  /// `cache_dir` empty: $TILEDIST_CACHE_DIR, else $XDG_CACHE_HOME/tiledist, else
  /// ~/.cache/tiledist, else /tmp/tiledist-cache.
  explicit Context(std::string cache_dir = "");
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The process's Context (default cache directory), made at the first call.
  static Context& global();

  /// Traces, optimizes and compiles a specialization, through the caches. `facts`: what is known
  /// of the runtime arguments (see ArgFact). Throws Error where compiling fails, or where
  /// $TILEDIST_JIT=off and the disk cache lacks it. $TILEDIST_RECORD=FILE records each
  /// specialization served in that manifest (tiledist-warmup's input).
  std::shared_ptr<const Loaded> compile(const KernelDef& def, const Constants& constants, const Target& target,
                                        const CompileOptions& options, const ArgFacts& facts = {});
  /// Compiles a specialization into the disk cache without loading it (tiledist-warmup); true if
  /// it was compiled, false if the cache already held it. Contexts may warm in parallel.
  bool warm(const KernelDef& def, const Constants& constants, const Target& target, const CompileOptions& options,
            const ArgFacts& facts = {});
  /// Prints one stage of a specialization (tiledist-compile --emit).
  std::string emit(const KernelDef& def, const Constants& constants, const Target& target,
                   const CompileOptions& options, Stage stage, const ArgFacts& facts = {});
  /// Prints the LLVM IR or assembly of an already optimized function (tiledist-opt --emit); not
  /// Stage::gpu_ir, which needs the definition.
  std::string emit(const ir::Function& optimized, const Target& target, const CompileOptions& options, Stage stage);

  /// A snapshot of the counters.
  Stats stats() const;
  /// The disk cache's directory.
  const std::string& cache_dir() const { return cache_dir_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string cache_dir_;
};

/// The version string that every cache key includes.
const char* compiler_version();

}  // namespace tiledist::jit
