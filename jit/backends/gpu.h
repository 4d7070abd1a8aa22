// What the GPU backends (NVPTX, AMDGCN) share: the GPU passes' output for Stage::gpu_ir, one
// LLVM target machine per arch, kernels that specialize at launch, and a launch's host
// buffers staged through device memory.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "jit/backend.h"
#include "jit/backends/profile.h"
#include "runtime/gpu_world.h"
#include "runtime/stream.h"

namespace llvm {
class TargetMachine;
}

namespace tiledist::jit {

class GpuBackend : public Backend {
 public:
  std::unique_ptr<State> new_state() const override;
  /// The arch: LLVM's GPU targets take no feature of the machine compiling.
  std::string key(const Target& target) const override { return target.name(); }
  /// Nothing: the GPU passes run inside the lowering (CompileOptions::lowering).
  void prepare(ir::Function& fn, const CompileOptions& options) const override;
  std::string gpu_ir(ir::Function& fn, const Target& target, const CompileOptions& options) const override;
  /// Nothing: the module is loaded at the first launch, in the launching device's context.
  void load(Loaded&, State&) const override {}
  bool is_gpu() const override { return true; }
  bool specializes_at_launch() const override { return true; }
  bool takes_device_memory() const override { return true; }
  bool is_device_memory(const void* p) const override { return gpu_api().is_device_memory(p); }
  /// A stream of another runtime (a HIP stream for a CUDA kernel) is refused.
  void check_stream(const Loaded& loaded, const runtime::Stream* stream) const override;

 protected:
  /// The runtime that loads and launches the backend's binaries.
  virtual const runtime::GpuApi& gpu_api() const = 0;
  /// The target machine of `target`'s arch, made at its first use in this Context.
  llvm::TargetMachine& machine(State& state, const Target& target) const;
  virtual std::unique_ptr<llvm::TargetMachine> new_machine(const Target& target) const = 0;
  /// The lowering's options from the compile's.
  static codegen::GpuOptions gpu_options(const Target& target, const CompileOptions& options);
  /// An artifact's launch parameters from a lowered module (its binary left to the backend).
  static Artifact artifact_of(const codegen::GpuModule& gm);
};

/// The device memory functions of a GPU runtime.
struct DeviceMemory {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void (*to_device)(void*, const void*, size_t);
  void (*to_host)(void*, const void*, size_t);
};

/// A GPU launch's parameter addresses: each slot, then the GPU world's address (`*world`, the
/// distributed kernels' trailing parameter) where there is one.
std::vector<void*> param_addresses(std::vector<uint64_t>& slots, void** world);

/// Host buffers given to a GPU launch: copied to device memory before it (their slots then hold
/// the device copies), back after it (`finish`, once the launch is done), freed either way.
class HostStaging {
 public:
  HostStaging(const DeviceMemory& mem, const Loaded& loaded, const std::vector<LaunchArg>& args,
              std::vector<uint64_t>& slots);
  ~HostStaging() { release(); }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  bool empty() const { return staged_.empty(); }
  void finish();

 private:
  void release();

  struct Staged {
    void* host;
    void* device;
    size_t bytes;
  };
  DeviceMemory mem_;
  std::vector<Staged> staged_;
};

/// A profiled GPU launch's records (jit/backends/profile.h): a buffer in device memory for the
/// launch (the kernel's trailing parameter after the world's), read back once the launch has
/// completed and added to the trace, the GPU's clock mapped onto the host's by the launch's
/// start and completion. Nothing where the kernel was compiled without profiling.
class DeviceProfile {
 public:
  DeviceProfile(const DeviceMemory& mem, const Loaded& loaded, const runtime::Grid& grid);
  ~DeviceProfile();
  DeviceProfile(const DeviceProfile&) = delete;
  DeviceProfile& operator=(const DeviceProfile&) = delete;
  bool on() const { return host_.on(); }
  /// The address of the kernel's parameter (the buffer's device address).
  void* param() { return &device_; }
  /// Right before the launch on `stream` (null: the default stream): the host's clock (the
  /// earliest any record can be), and an event before the kernel.
  void started(const runtime::GpuApi& api, const runtime::Stream* stream);
  /// Right after the launch: an event after the kernel (the two time it as a benchmark would).
  void launched(const runtime::Stream* stream);
  /// Once the launch has completed: the records back, into the trace.
  void finish();

 private:
  DeviceMemory mem_;
  LaunchProfile host_;
  void* device_ = nullptr;
  uint64_t started_ns_ = 0;
  std::unique_ptr<runtime::Event> before_, after_;
};

/// The kernel's module, loaded by `api` on its first launch (and its name noted with the world,
/// where it has one, for its failure record).
std::shared_ptr<runtime::Module> module_of(const Loaded& loaded, const runtime::GpuApi& api, runtime::GpuWorld* world);

}  // namespace tiledist::jit
