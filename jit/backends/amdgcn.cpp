// The AMDGCN backend: the GPU lowering for AMD (codegen/amdgcn), the ROCm device libraries'
// functions it calls linked in, LLVM's -O3, a code object linked by lld in this process
// (jit/amdgpu.h), loaded by HIP at the first launch.
#include "jit/amdgpu.h"
#include "jit/backends/backends.h"
#include "jit/backends/gpu.h"
#include "jit/kernel.h"
#include "jit/llvm_codegen.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"
#include "runtime/hip.h"
#include "runtime/hip_world.h"

namespace tiledist::jit {

namespace {

const DeviceMemory kHipMemory{hip::malloc, hip::free, hip::copy_to_device, hip::copy_to_host};

class AmdgcnBackend final : public GpuBackend {
 public:
  const char* name() const override { return "amdgcn"; }
  BinaryKind binary_kind() const override { return BinaryKind::code_object; }
  bool runs_on_cuda() const override { return false; }  // (HIP's streams)

  Artifact compile(const ir::Function& fn, const Target& target, const CompileOptions& options,
                   State& state) const override {
    llvm::LLVMContext ctx;
    codegen::GpuModule gm = lower(fn, ctx, target, options, state, true);
    Artifact a = artifact_of(gm);
    a.binary = code_object(gm, target, state);
    return a;
  }

  std::string emit(const ir::Function& fn, const Target& target, const CompileOptions& options, Stage stage,
                   State& state) const override {
    llvm::LLVMContext ctx;
    codegen::GpuModule gm = lower(fn, ctx, target, options, state, stage != Stage::llvm_lowered);
    if (stage == Stage::binary) return code_object(gm, target, state);
    if (stage == Stage::asm_) return emit_file(*gm.module, machine(state, target), llvm::CodeGenFileType::AssemblyFile);
    return print_module(*gm.module);
  }

  void launch(const Loaded& loaded, Launch& launch) const override {
    // Kernels with distributed ops take the AMD GPU world as a trailing parameter.
    hip::World* world = loaded.artifact.distributed ? &hip::World::get() : nullptr;
    HostStaging staged(kHipMemory, loaded, launch.args, launch.slots);
    void* device_world = world ? world->device_world() : nullptr;
    std::vector<void*> ptrs = param_addresses(launch.slots, &device_world);
    DeviceProfile profile(kHipMemory, loaded, launch.grid);
    if (profile.on()) ptrs.push_back(profile.param());
    std::shared_ptr<runtime::Module> module = module_of(loaded, gpu_api(), world);
    const int g[3] = {launch.grid.x, launch.grid.y, launch.grid.z};
    const runtime::Stream* stream = launch.stream;
    profile.started(gpu_api(), stream);
    module->launch(loaded.artifact.entry, g, loaded.artifact.threads, 0, ptrs.data(), stream);
    profile.launched(stream);
    // On a stream a kernel runs asynchronously, unless it has host buffers to copy back or
    // distributed ops: a program that gave up (a wait past the timeout) has filled the failure
    // record and ended its wavefront (codegen/amdgcn.cpp: give_up), and the record is read once
    // the kernel has completed (HIP has no failure explainer as CUDA's calls do).
    if (stream && !world && staged.empty() && !profile.on()) return;
    if (stream)
      stream->synchronize();
    else
      hip::synchronize();
    if (world && !world->failure().empty()) throw Error(world->failure());
    staged.finish();
    profile.finish();
  }

 private:
  const runtime::GpuApi& gpu_api() const override { return hip::api(); }
  std::unique_ptr<llvm::TargetMachine> new_machine(const Target& target) const override {
    return gpu_target_machine("amdgcn-amd-amdhsa", "AMDGPU", target.arch, "", llvm::Reloc::PIC_);
  }

  /// The kernel's module for the arch, with the device libraries' functions it calls and
  /// optimized, unless `optimize` is false.
  codegen::GpuModule lower(const ir::Function& fn, llvm::LLVMContext& ctx, const Target& target,
                           const CompileOptions& options, State& state, bool optimize) const {
    llvm::TargetMachine& tm = machine(state, target);
    codegen::GpuOptions o = gpu_options(target, options);
    o.data_layout = tm.createDataLayout().getStringRepresentation();
    codegen::GpuModule gm = codegen::lower_amdgcn(fn, ctx, o);
    if (optimize) link_amdgpu_device_libs(*gm.module, target.arch);
    gm.module->setDataLayout(tm.createDataLayout());
    if (optimize) run_o3(*gm.module, tm);
    return gm;
  }

  /// The code object of a lowered kernel: its object file linked by lld. A workgroup has 64 KiB
  /// of LDS on gfx90a and gfx942.
  std::string code_object(codegen::GpuModule& gm, const Target& target, State& state) const {
    constexpr int64_t kMaxLds = 64 * 1024;
    if (gm.shared_bytes > kMaxLds)
      throw Error(str_cat("tiledist: kernel '", gm.entry, "' needs ", gm.shared_bytes,
                          " bytes of shared memory (LDS) per program; ", target.arch, " has ", kMaxLds,
                          ": use smaller tiles"));
    return link_amdgpu_code_object(emit_file(*gm.module, machine(state, target), llvm::CodeGenFileType::ObjectFile),
                                   gm.entry);
  }
};

}  // namespace

const Backend& amdgcn_backend() {
  static const AmdgcnBackend backend;
  return backend;
}

}  // namespace tiledist::jit
