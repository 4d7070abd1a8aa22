// The host CPU's backend: the host lowering (codegen/host/), LLVM's -O3 for this CPU, an object
// file linked into the process by ORC LLJIT (one JITDylib per kernel), and a launch that runs
// the grid's programs on the calling thread (runtime/host.h).
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/passes/passes.h"
#include "ir/numeric.h"
#include "ir/printer.h"
#include "jit/backend.h"
#include "jit/backends/backends.h"
#include "jit/backends/profile.h"
#include "jit/llvm_codegen.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Target/TargetMachine.h"
#include "runtime/host.h"
#include "runtime/stream.h"

namespace tiledist::jit {

namespace {

uint8_t f32_to_f8e4m3(float f) { return float_to_f8e4m3_bits(f); }
float f8e4m3_to_f32(uint8_t b) { return f8e4m3_bits_to_float(b); }
uint8_t f32_to_f8e5m2(float f) { return float_to_f8e5m2_bits(f); }
float f8e5m2_to_f32(uint8_t b) { return f8e5m2_bits_to_float(b); }

/// The host CPU's enabled features, sorted: asked of LLVM once per process.
const std::string& host_features() {
  static const std::string features = [] {
    llvm::StringMap<bool> map = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> on;
    for (auto& f : map)
      if (f.second) on.push_back(f.first().str());
    std::sort(on.begin(), on.end());
    std::string s;
    for (auto& f : on) s += "+" + f;
    return s;
  }();
  return features;
}

struct HostState : Backend::State {
  std::unique_ptr<llvm::TargetMachine> machine;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  int dylibs = 0;

  llvm::TargetMachine& tm() {
    if (!machine) {
      init_llvm();
      auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
      jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
      jtmb.setRelocationModel(llvm::Reloc::PIC_);
      jtmb.setCodeModel(llvm::CodeModel::Small);
      machine = unwrap(jtmb.createTargetMachine(), "creating the host target machine");
    }
    return *machine;
  }

  llvm::orc::LLJIT& jit() {
    if (!lljit) {
      init_llvm();
      lljit = unwrap(llvm::orc::LLJITBuilder().create(), "starting the host JIT");
    }
    return *lljit;
  }
};

class HostBackend final : public Backend {
 public:
  const char* name() const override { return "host"; }
  BinaryKind binary_kind() const override { return BinaryKind::object; }
  std::unique_ptr<State> new_state() const override { return std::make_unique<HostState>(); }

  /// The CPU's name and features: they change the code LLVM generates.
  std::string key(const Target& target) const override { return "host-" + target.arch + host_features(); }

  void prepare(ir::Function& fn, const CompileOptions& options) const override {
    if (options.gpu_passes.empty()) return;
    codegen::run_gpu_passes(fn, codegen::GpuPassContext::for_arch(options.gpu_passes, options.num_warps,
                                                                  options.num_stages, options.lowering));
  }

  std::string gpu_ir(ir::Function& fn, const Target&, const CompileOptions& options) const override {
    if (options.gpu_passes.empty())
      throw Error("tiledist: the GPU IR (layouts) needs a GPU target (sm_80, sm_90a, gfx90a, gfx942)");
    return ir::print(fn);  // (prepare ran the passes)
  }

  Artifact compile(const ir::Function& fn, const Target&, const CompileOptions& options, State& state) const override {
    llvm::LLVMContext ctx;
    auto& s = static_cast<HostState&>(state);
    codegen::HostModule hm = lower(fn, ctx, options, s, true);
    Artifact a;
    a.entry = hm.entry;
    a.scratch_bytes = hm.scratch_bytes;
    a.distributed = hm.distributed;
    a.binary = emit_file(*hm.module, s.tm(), llvm::CodeGenFileType::ObjectFile);
    return a;
  }

  std::string emit(const ir::Function& fn, const Target&, const CompileOptions& options, Stage stage,
                   State& state) const override {
    llvm::LLVMContext ctx;
    auto& s = static_cast<HostState&>(state);
    codegen::HostModule hm = lower(fn, ctx, options, s, stage != Stage::llvm_lowered);
    if (stage == Stage::llvm || stage == Stage::llvm_lowered) return print_module(*hm.module);
    return emit_file(*hm.module, s.tm(),
                     stage == Stage::binary ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile);
  }

  void load(Loaded& loaded, State& state) const override {
    const Artifact& a = loaded.artifact;
    llvm::orc::LLJIT& j = static_cast<HostState&>(state).jit();
    auto created = j.createJITDylib(str_cat("tiledist.", a.kernel, ".", static_cast<HostState&>(state).dylibs++));
    if (!created) throw Error(str_cat("tiledist: creating a JIT dylib: ", llvm::toString(created.takeError())));
    llvm::orc::JITDylib& jd = *created;
    jd.addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.getDataLayout().getGlobalPrefix()),
               "searching the process for symbols"));
    llvm::orc::SymbolMap helpers;
    auto add = [&](const char* name, auto* fn) {
      helpers[j.mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported};
    };
    add(codegen::kHostHelperF32ToF8E4M3, &f32_to_f8e4m3);
    add(codegen::kHostHelperF8E4M3ToF32, &f8e4m3_to_f32);
    add(codegen::kHostHelperF32ToF8E5M2, &f32_to_f8e5m2);
    add(codegen::kHostHelperF8E5M2ToF32, &f8e5m2_to_f32);
    add(codegen::kHostHelperCheckAccess, &tiledist_check_access);
    add("tiledist_rank", &tiledist_rank);
    add("tiledist_num_ranks", &tiledist_num_ranks);
    add("tiledist_symm_at", &tiledist_symm_at);
    add("tiledist_wait", &tiledist_wait);
    add("tiledist_barrier", &tiledist_barrier);
    add("tiledist_memcpy", &tiledist_memcpy);
    add("tiledist_profile", &tiledist_profile);
    check(jd.define(llvm::orc::absoluteSymbols(std::move(helpers))), "defining helper symbols");
    check(j.addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(a.binary, a.kernel)),
          str_cat("loading the object code of kernel '", a.kernel, "'"));
    auto addr = unwrap(j.lookup(jd, a.entry), str_cat("linking kernel '", a.kernel, "'"));
    loaded.host_fn = addr.toPtr<runtime::HostKernelFn>();
  }

  bool is_gpu() const override { return false; }
  bool runs_on_cuda() const override { return false; }
  bool specializes_at_launch() const override { return false; }
  bool takes_device_memory() const override { return false; }
  bool is_device_memory(const void*) const override { return false; }

  void check_stream(const Loaded& loaded, const runtime::Stream* stream) const override {
    if (stream)
      throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel, "' was compiled for the host: it has no ",
                          stream->api().name(), " stream to run on"));
  }

  void launch(const Loaded& loaded, Launch& launch) const override {
    std::vector<void*> ptrs(launch.slots.size());
    for (size_t i = 0; i < ptrs.size(); ++i) ptrs[i] = &launch.slots[i];
    // A profiled kernel's records reach the trace whether or not the launch fails.
    LaunchProfile profile(loaded, launch.grid);
    launch.rt.profile = profile.buffer();
    try {
      runtime::launch_host(loaded.host_fn, launch.grid, ptrs.data(), loaded.artifact.scratch_bytes, launch.rt,
                           {loaded.options.check_bounds, loaded.artifact.distributed});
    } catch (const Error&) {
      try {
        profile.write(false);
      } catch (const Error&) {  // (the launch's error is the one to see)
      }
      throw;
    }
    profile.write(false);
  }

 private:
  /// The host module of `fn`, optimized for this CPU unless `optimize` is false.
  static codegen::HostModule lower(const ir::Function& fn, llvm::LLVMContext& ctx, const CompileOptions& options,
                                   HostState& state, bool optimize) {
    codegen::HostModule hm = codegen::lower_host(fn, ctx, {options.check_bounds});
    llvm::TargetMachine& machine = state.tm();
    hm.module->setDataLayout(machine.createDataLayout());
    hm.module->setTargetTriple(machine.getTargetTriple().str());
    if (optimize) run_o3(*hm.module, machine);
    return hm;
  }
};

}  // namespace

const Backend& host_backend() {
  static const HostBackend backend;
  return backend;
}

}  // namespace tiledist::jit
