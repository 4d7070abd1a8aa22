// One backend per kind of target (host CPU, NVPTX, AMDGCN): everything the compiler driver
// (jit/context.cpp) and the launcher (jit/kernel.cpp) do differently for a target, so that
// neither branches on Target::Kind. As Triton's per-target backend and tinygrad's per-runtime
// Program: the driver traces and optimizes, the backend takes the optimized IR from there
// (its own passes, lowering, LLVM's optimizer, the binary), loads the binary and launches it.
// The implementations: jit/backends/host.cpp, nvptx.cpp, amdgcn.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "jit/context.h"
#include "jit/target.h"
#include "runtime/host.h"

namespace tiledist {
struct LaunchArg;
namespace runtime {
class Stream;
}
}  // namespace tiledist

namespace tiledist::jit {

/// What a backend's binary (Artifact::binary) is.
enum class BinaryKind {
  object,       // host: an ELF relocatable object, linked into the process by ORC
  ptx,          // NVPTX: PTX text, loaded by the CUDA driver
  code_object,  // AMDGCN: a shared ELF for the amdgcn-amd-amdhsa ABI, loaded by HIP
};

/// One launch of a kernel, its arguments checked and packed (Kernel::launch_args).
struct Launch {
  runtime::Grid grid;
  const std::vector<LaunchArg>& args;
  std::vector<uint64_t>& slots;   // each argument's value as the kernel takes it (a pointer: its address)
  runtime::HostRuntime& rt;       // the kernel's name and, with check_bounds, the pointer arguments' ranges
  const runtime::Stream* stream;  // null: the default stream (a host kernel takes none)
};

class Backend {
 public:
  /// What a backend keeps between compiles in one Context (LLVM's target machines, the host
  /// JIT): made at the Context's first use of the backend, guarded by the Context's lock.
  struct State {
    virtual ~State() = default;
  };

  /// The backend of `target`'s kind; one per process, without state of its own.
  static const Backend& for_target(const Target& target);

  virtual ~Backend() = default;
  /// "host", "nvptx", "amdgcn".
  virtual const char* name() const = 0;
  virtual BinaryKind binary_kind() const = 0;
  virtual std::unique_ptr<State> new_state() const = 0;

  /// What the cache key holds of the target (Target::key).
  virtual std::string key(const Target& target) const = 0;
  /// The backend's passes over the optimized IR, before the cache key is taken from it: the host
  /// runs CompileOptions::gpu_passes (a GPU target rejects them).
  virtual void prepare(ir::Function& fn, const CompileOptions& options) const = 0;
  /// The GPU passes' output for this target, printed (Stage::gpu_ir): `fn` has been prepared.
  virtual std::string gpu_ir(ir::Function& fn, const Target& target, const CompileOptions& options) const = 0;
  /// Lowers a prepared function and compiles it to the backend's binary: the artifact's entry,
  /// sizes and binary (the driver fills in its key, kernel and target).
  virtual Artifact compile(const ir::Function& fn, const Target& target, const CompileOptions& options,
                           State& state) const = 0;
  /// One stage after the IR (LLVM IR before or after LLVM's optimizer, assembly, the binary),
  /// printed (Context::emit).
  virtual std::string emit(const ir::Function& fn, const Target& target, const CompileOptions& options, Stage stage,
                           State& state) const = 0;
  /// Makes a compiled kernel ready to launch (the host: links it into the JIT; a GPU loads its
  /// module at the first launch instead, in the device's context).
  virtual void load(Loaded& loaded, State& state) const = 0;

  /// Whether the kernels run on a GPU: a program is a block of threads, many at once over the
  /// GPU's multiprocessors, each small; the host runs a few programs per core, each a loop over
  /// its tile's ops (Target::is_gpu).
  virtual bool is_gpu() const = 0;
  /// Whether the kernels run through the CUDA driver: in order on a CUDA runtime::Stream, the
  /// distributed ones on cuda::World's symmetric heap (Target::runs_on_cuda).
  virtual bool runs_on_cuda() const = 0;
  /// Whether a kernel specializes itself at launch on what its arguments are (Kernel's variants:
  /// GPUs, where aligned accesses vectorize).
  virtual bool specializes_at_launch() const = 0;
  /// Whether a kernel takes device memory (a cuda::Buffer) as an argument.
  virtual bool takes_device_memory() const = 0;
  /// Whether `p`, a raw pointer given to a launch, is this backend's device memory (then taken
  /// as a cuda::DevicePtr is, else as the host's memory).
  virtual bool is_device_memory(const void* p) const = 0;
  /// Throws Error where a kernel of this backend cannot run on `stream` (checked before the
  /// arguments; a backend may also refuse it later, in launch).
  virtual void check_stream(const Loaded& loaded, const runtime::Stream* stream) const = 0;
  /// Runs the kernel.
  virtual void launch(const Loaded& loaded, Launch& launch) const = 0;
};

}  // namespace tiledist::jit
