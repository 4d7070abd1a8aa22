// The NVPTX backend: the GPU lowering for NVIDIA (codegen/gpu_ir/), LLVM's -O3 and PTX for the
// arch, the PTX loaded by the CUDA driver at the first launch, and a launch that encodes the
// kernel's TMA tensor maps from its arguments.
#include <algorithm>
#include <cstring>

#include "jit/backends/backends.h"
#include "jit/backends/gpu.h"
#include "jit/kernel.h"
#include "jit/llvm_codegen.h"
#include "jit/nvshmem_link.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"
#include "runtime/cuda_world.h"

namespace tiledist::jit {

namespace {

const DeviceMemory kCudaMemory{cuda::malloc, cuda::free, cuda::copy_to_device, cuda::copy_to_host};

/// The TMA tensor maps of a launch, by value, encoded from its arguments (after staging: the
/// slots hold device addresses).
std::vector<cuda::TensorMap> tensor_maps(const Loaded& loaded, const std::vector<LaunchArg>& args,
                                         const std::vector<uint64_t>& slots) {
  const auto& params = loaded.runtime_params;
  std::vector<cuda::TensorMap> maps;
  maps.reserve(loaded.tma.size());
  for (const runtime::TmaRecipe& r : loaded.tma) {
    auto size = [&](const runtime::TmaRecipe::Dim& d) {
      int64_t v = d.value;
      for (int p : d.params) v *= args.at(static_cast<size_t>(p)).i;
      return v;
    };
    cuda::TensorMapShape t;
    std::memcpy(&t.base, &slots.at(static_cast<size_t>(r.pointer)), sizeof(void*));
    t.element_bytes = static_cast<int>(ir::dtype_bytes(r.dtype));
    t.bf16 = r.dtype == ir::DType::bf16;
    t.rank = static_cast<int>(r.dims.size());
    bool empty = false;
    for (int i = 0; i < t.rank; ++i) {
      const int64_t n = size(r.dims[static_cast<size_t>(i)]);
      empty |= n <= 0;
      t.dims[i] = static_cast<uint64_t>(std::min(n, runtime::TmaRecipe::kUnbounded));
      t.box[i] = static_cast<unsigned>(r.box[static_cast<size_t>(i)]);
      if (i)
        t.stride_bytes[i - 1] = static_cast<uint64_t>(size(r.strides[static_cast<size_t>(i - 1)]) * t.element_bytes);
    }
    if (empty) {  // an empty tensor, whose every element reads as zero: a map of zeros
      t.base = cuda::zeros_for_tensor_maps();
      uint64_t stride = 128;
      for (int i = 0; i < t.rank; ++i) {
        t.dims[i] = t.box[i];
        if (i) t.stride_bytes[i - 1] = stride;
        stride *= t.box[i];
      }
    }
    try {
      maps.push_back(cuda::encode_tensor_map(t));
    } catch (const Error& e) {
      throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel, "', argument ", r.pointer, " ('",
                          params[static_cast<size_t>(r.pointer)].name, "'): ", e.what()));
    }
  }
  return maps;
}

class NvptxBackend final : public GpuBackend {
 public:
  const char* name() const override { return "nvptx"; }
  BinaryKind binary_kind() const override { return BinaryKind::ptx; }
  bool runs_on_cuda() const override { return true; }

  Artifact compile(const ir::Function& fn, const Target& target, const CompileOptions& options,
                   State& state) const override {
    llvm::LLVMContext ctx;
    codegen::GpuModule gm = lower(fn, ctx, target, options, state, true);
    Artifact a = artifact_of(gm);
    a.binary = emit_file(*gm.module, machine(state, target), llvm::CodeGenFileType::AssemblyFile);
    return a;
  }

  /// The binary is the PTX: Stage::binary prints what Stage::asm_ does.
  std::string emit(const ir::Function& fn, const Target& target, const CompileOptions& options, Stage stage,
                   State& state) const override {
    llvm::LLVMContext ctx;
    codegen::GpuModule gm = lower(fn, ctx, target, options, state, stage != Stage::llvm_lowered);
    if (stage == Stage::asm_ || stage == Stage::binary)
      return emit_file(*gm.module, machine(state, target), llvm::CodeGenFileType::AssemblyFile);
    return print_module(*gm.module);
  }

  void launch(const Loaded& loaded, Launch& launch) const override {
    // Kernels with distributed ops take the GPU world as a trailing parameter.
    cuda::World* world = loaded.artifact.distributed ? &cuda::World::get() : nullptr;
    // Host buffers go to the device for the launch and come back after it.
    HostStaging staged(kCudaMemory, loaded, launch.args, launch.slots);
    void* device_world = world ? world->device_world() : nullptr;
    std::vector<void*> ptrs = param_addresses(launch.slots, &device_world);
    // A profiled kernel's record buffer, then the TMA tensor maps, by value after everything else.
    DeviceProfile profile(kCudaMemory, loaded, launch.grid);
    if (profile.on()) ptrs.push_back(profile.param());
    std::vector<cuda::TensorMap> maps = tensor_maps(loaded, launch.args, launch.slots);
    for (auto& m : maps) ptrs.push_back(m.bytes);
    std::shared_ptr<runtime::Module> module = module_of(loaded, gpu_api(), world);
    const int g[3] = {launch.grid.x, launch.grid.y, launch.grid.z};
    const runtime::Stream* stream = launch.stream;
    profile.started(gpu_api(), stream);
    module->launch(loaded.artifact.entry, g, loaded.artifact.threads,
                   static_cast<size_t>(loaded.artifact.scratch_bytes), ptrs.data(), stream);
    profile.launched(stream);
    // The launch is waited for where it is profiled (its records read back, on its stream too),
    // has host buffers to copy back, or is distributed without a stream: a program that gives
    // up (a wait past the timeout: it traps) is then reported here; on a stream it runs
    // asynchronously, and the stream's synchronize reports it. Either way the Error carries
    // the world's failure record (cuda::set_failure_explainer).
    if (!profile.on() && staged.empty() && !(world && !stream)) return;
    if (stream)
      stream->synchronize();
    else
      cuda::synchronize();
    profile.finish();
    staged.finish();
  }

 private:
  const runtime::GpuApi& gpu_api() const override { return cuda::api(); }
  /// PTX 8.4 (CUDA 12.4 drivers) for Hopper: f8 mma.sync needs it; 8.0 elsewhere.
  std::unique_ptr<llvm::TargetMachine> new_machine(const Target& target) const override {
    return gpu_target_machine("nvptx64-nvidia-cuda", "NVPTX", target.arch, target.has(Cap::wgmma) ? "+ptx84" : "+ptx80",
                              std::nullopt);
  }

  /// The kernel's module for the arch, optimized unless `optimize` is false.
  codegen::GpuModule lower(const ir::Function& fn, llvm::LLVMContext& ctx, const Target& target,
                           const CompileOptions& options, State& state, bool optimize) const {
    llvm::TargetMachine& tm = machine(state, target);
    codegen::GpuModule gm = codegen::lower_nvptx(fn, ctx, gpu_options(target, options));
    gm.module->setDataLayout(tm.createDataLayout());
    if (optimize && options.world == "nvshmem") link_nvshmem_device(*gm.module);
    if (optimize) run_o3(*gm.module, tm);
    return gm;
  }
};

}  // namespace

const Backend& nvptx_backend() {
  static const NvptxBackend backend;
  return backend;
}

}  // namespace tiledist::jit
