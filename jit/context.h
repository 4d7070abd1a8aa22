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
  std::string key;
  std::string kernel;
  std::string target;
  std::string entry;
  int64_t scratch_bytes = 0;  // host: scratch per program; GPU: dynamic shared memory per CTA
  bool distributed = false;   // uses distributed ops: launched as fibers in the World
  int threads = 1;            // GPU: threads per CTA
  std::string binary;         // host: an ELF relocatable object; NVPTX: PTX text
  std::string spec;           // the specialization it was compiled for (Specialization::str), for listings
  std::string tma;            // NVPTX: the TMA tensor maps it takes (runtime::tma_recipes_str)
};

/// A compiled kernel, ready to launch.
struct Loaded {
  Artifact artifact;
  std::unique_ptr<ir::Function> ir;  // the optimized IR it was compiled from
  std::vector<ParamInfo> runtime_params;
  std::vector<runtime::TmaRecipe> tma;  // parsed from artifact.tma
  runtime::HostKernelFn host_fn = nullptr;
  CompileOptions options;
  Target target;
  /// GPU: the module, loaded into the CUDA context at the first launch.
  mutable std::shared_ptr<void> gpu_module;
  mutable std::mutex gpu_mutex;
};

struct Stats {
  int64_t traces = 0;        // kernel functions traced
  int64_t compiles = 0;      // LLVM code generations (the expensive step)
  int64_t memory_hits = 0;   // served from memory
  int64_t disk_hits = 0;     // served from the disk cache
  int64_t disk_rejects = 0;  // disk entries found corrupt or stale and recompiled
};

/// Which stage `emit` prints.
/// llvm_lowered: before LLVM's -O3; binary: what is loaded (host: an object file, NVPTX: PTX,
/// AMDGCN: a code object).
/// What `emit` prints: the traced IR, the optimized IR, the optimized IR after the GPU passes
/// (layouts: a GPU target only), LLVM IR before or after LLVM's optimizer, assembly, or the binary.
enum class Stage { tile_ir, opt_ir, gpu_ir, llvm_lowered, llvm, asm_, binary };

class Context {
 public:
  /// `cache_dir` empty: $TILEDIST_CACHE_DIR, else ~/.cache/tiledist.
  explicit Context(std::string cache_dir = "");
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  static Context& global();

  /// Traces, optimizes and compiles a specialization, through the caches. `facts`: what is known
  /// of the runtime arguments (see ArgFact).
  std::shared_ptr<const Loaded> compile(const KernelDef& def, const Constants& constants, const Target& target,
                                        const CompileOptions& options, const ArgFacts& facts = {});
  /// Compiles a specialization into the disk cache without loading it (tiledist-warmup); true if
  /// it was compiled, false if the cache already held it. Contexts may warm in parallel.
  bool warm(const KernelDef& def, const Constants& constants, const Target& target, const CompileOptions& options,
            const ArgFacts& facts = {});
  /// Prints one stage of a specialization (tiledist-compile --emit).
  std::string emit(const KernelDef& def, const Constants& constants, const Target& target,
                   const CompileOptions& options, Stage stage, const ArgFacts& facts = {});
  /// Prints the LLVM IR or assembly of an already optimized function (tiledist-opt --emit).
  std::string emit(const ir::Function& optimized, const Target& target, const CompileOptions& options, Stage stage);

  Stats stats() const;
  const std::string& cache_dir() const { return cache_dir_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string cache_dir_;
};

/// The version string that every cache key includes.
const char* compiler_version();

}  // namespace tiledist::jit
