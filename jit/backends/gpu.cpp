#include "jit/backends/gpu.h"

#include <algorithm>
#include <cstring>

#include "codegen/passes/passes.h"
#include "ir/printer.h"
#include "jit/kernel.h"
#include "llvm/Target/TargetMachine.h"
#include "runtime/nvshmem.h"

namespace tiledist::jit {

namespace {
struct GpuState : Backend::State {
  std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;  // by arch
};
}  // namespace

std::unique_ptr<Backend::State> GpuBackend::new_state() const { return std::make_unique<GpuState>(); }

void GpuBackend::prepare(ir::Function&, const CompileOptions& options) const {
  if (!options.gpu_passes.empty())
    throw Error("tiledist: CompileOptions::gpu_passes runs the GPU passes' output on the host target only");
}

std::string GpuBackend::gpu_ir(ir::Function& fn, const Target& target, const CompileOptions& options) const {
  codegen::run_gpu_passes(fn, codegen::GpuPassContext::for_compile(
                                  target.arch, options.num_warps, options.num_stages, options.lowering, options.tma,
                                  options.warp_specialize));  // (as the lowering runs them)
  return ir::print(fn);
}

void GpuBackend::check_stream(const Loaded& loaded, const runtime::Stream* stream) const {
  if (stream && &stream->api() != &gpu_api())
    throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel, "' runs through ", gpu_api().name(), ": a ",
                        stream->api().name(), " stream cannot order it"));
}

llvm::TargetMachine& GpuBackend::machine(State& state, const Target& target) const {
  auto& tm = static_cast<GpuState&>(state).machines[target.arch];
  if (!tm) tm = new_machine(target);
  return *tm;
}

codegen::GpuOptions GpuBackend::gpu_options(const Target& target, const CompileOptions& options) {
  codegen::GpuOptions o{target.arch, options.num_warps, options.num_stages, options.tma, options.warp_specialize,
                        "",          options.lowering};
  o.nvshmem = options.world == "nvshmem" && target.runs_on_cuda();
  return o;
}

Artifact GpuBackend::artifact_of(const codegen::GpuModule& gm) {
  Artifact a;
  a.entry = gm.entry;
  a.scratch_bytes = gm.shared_bytes;
  a.threads = gm.threads;
  a.distributed = gm.distributed;
  a.tma = runtime::tma_recipes_str(gm.tma);
  return a;
}

std::vector<void*> param_addresses(std::vector<uint64_t>& slots, void** world) {
  std::vector<void*> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) ptrs[i] = &slots[i];
  if (*world) ptrs.push_back(world);
  return ptrs;
}

HostStaging::HostStaging(const DeviceMemory& mem, const Loaded& loaded, const std::vector<LaunchArg>& args,
                         std::vector<uint64_t>& slots)
    : mem_(mem) {
  const auto& params = loaded.runtime_params;
  staged_.reserve(args.size());
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      if (params[i].kind != ParamKind::pointer || args[i].on_device) continue;
      if (args[i].extent_bytes < 0)
        throw Error(
            str_cat("tiledist: argument ", i, " ('", params[i].name, "') of GPU kernel '", loaded.artifact.kernel,
                    "' is a raw host pointer (or another GPU's): pass a device buffer (cuda::DevicePtr{p, count} for "
                    "another library's), or a std::vector or std::span to copy"));
      size_t bytes = static_cast<size_t>(args[i].extent_bytes);
      void* d = mem_.malloc(bytes);
      staged_.push_back({args[i].ptr, d, bytes});
      mem_.to_device(d, args[i].ptr, bytes);
      std::memcpy(&slots[i], &d, sizeof d);
    }
  } catch (...) {  // (no destructor runs for an object whose constructor throws)
    release();
    throw;
  }
}

void HostStaging::finish() {
  for (auto& s : staged_) mem_.to_host(s.host, s.device, s.bytes);
}

void HostStaging::release() {
  // (After a kernel has trapped every call fails: the launch's own error is the one to see.)
  for (auto& s : staged_) {
    try {
      mem_.free(s.device);
    } catch (const Error&) {
    }
  }
  staged_.clear();
}

DeviceProfile::DeviceProfile(const DeviceMemory& mem, const Loaded& loaded, const runtime::Grid& grid)
    : mem_(mem), host_(loaded, grid) {
  if (!on()) return;
  device_ = mem_.malloc(host_.bytes());
  mem_.to_device(device_, host_.buffer(), host_.bytes());  // (zeros: no record written, none dropped)
}

DeviceProfile::~DeviceProfile() {
  try {
    if (device_) mem_.free(device_);
  } catch (const Error&) {  // (after a kernel has trapped every call fails: the launch's error is the one to see)
  }
}

void DeviceProfile::started(const runtime::GpuApi& api, const runtime::Stream* stream) {
  if (!on()) return;
  before_ = std::make_unique<runtime::Event>(api, true);
  after_ = std::make_unique<runtime::Event>(api, true);
  started_ns_ = runtime::steady_ns();
  before_->record(stream);
}

void DeviceProfile::launched(const runtime::Stream* stream) {
  if (on()) after_->record(stream);
}

void DeviceProfile::finish() {
  if (!on()) return;
  const uint64_t completed = runtime::steady_ns();
  after_->synchronize();
  const auto kernel_ns = static_cast<int64_t>(double(after_->elapsed_since(*before_)) * 1e6);
  runtime::ProfileBuffer* buf = host_.buffer();
  mem_.to_host(buf, device_, host_.bytes());
  const GpuClock clock = map_gpu_clock(*buf, started_ns_, completed);
  host_.write(true, clock.offset_ns, clock.error_ns, kernel_ns);
}

std::shared_ptr<runtime::Module> module_of(const Loaded& loaded, const runtime::GpuApi& api, runtime::GpuWorld* world) {
  std::lock_guard<std::mutex> lock(loaded.gpu_mutex);
  if (!loaded.gpu_module) {
    auto module = std::make_shared<runtime::Module>(api, loaded.artifact.binary, loaded.artifact.kernel);
    // A kernel linked with NVSHMEM's device library (its PTX defines NVSHMEM's device state)
    // reads that state, which NVSHMEM fills in the loaded module.
    if (loaded.artifact.binary.find("nvshmemi_device_state_d") != std::string::npos) {
      if (!nvshmem::initialized())
        throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel,
                            "' was compiled for the NVSHMEM world (CompileOptions::world), and this process's GPU "
                            "world is not NVSHMEM's ($TILEDIST_WORLD=nvshmem)"));
      const int status = nvshmem::library().cumodule_init(module->handle());
      if (status != 0)
        throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel, "': nvshmemx_cumodule_init failed (status ",
                            status, ")"));
      module->on_unload([](void* handle) { nvshmem::library().cumodule_finalize(handle); });
    }
    loaded.gpu_module = module;
    if (world) world->note_kernel(loaded.artifact.kernel);
  }
  return std::static_pointer_cast<runtime::Module>(loaded.gpu_module);
}

}  // namespace tiledist::jit
