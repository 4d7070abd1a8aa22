// The compile driver: trace -> optimize -> (memory cache) -> (disk cache) -> LLVM codegen ->
// object file -> ORC LLJIT. Every step that can fail reports an Error naming the kernel.
#include "jit/context.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "codegen/codegen.h"
#include "codegen/passes/passes.h"
#include "ir/builder.h"
#include "ir/numeric.h"
#include "ir/passes/passes.h"
#include "ir/printer.h"
#include "jit/amdgpu.h"
#include "jit/cache.h"
#include "jit/manifest.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

#ifndef TILEDIST_VERSION
#define TILEDIST_VERSION "0.1.0"
#endif

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTarget();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUAsmPrinter();
static uint8_t tiledist_f32_to_f8e4m3(float f) { return tiledist::float_to_f8e4m3_bits(f); }
static float tiledist_f8e4m3_to_f32(uint8_t b) { return tiledist::f8e4m3_bits_to_float(b); }
static uint8_t tiledist_f32_to_f8e5m2(float f) { return tiledist::float_to_f8e5m2_bits(f); }
static float tiledist_f8e5m2_to_f32(uint8_t b) { return tiledist::f8e5m2_bits_to_float(b); }
}

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

std::string to_string(llvm::Error e) { return llvm::toString(std::move(e)); }

template <class T>
T unwrap(llvm::Expected<T> v, const std::string& what) {
  if (!v) throw Error(str_cat("tiledist: ", what, ": ", to_string(v.takeError())));
  return std::move(*v);
}
void check(llvm::Error e, const std::string& what) {
  if (e) throw Error(str_cat("tiledist: ", what, ": ", to_string(std::move(e))));
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
    // 32-bit shared-memory addresses, as Triton and nvcc use: address arithmetic for ldmatrix
    // and cp.async stays in 32-bit registers. (A backend option read when a target machine is
    // made; it changes the NVPTX data layout only.)
    auto& options = llvm::cl::getRegisteredOptions();
    if (auto it = options.find("nvptx-short-ptr"); it != options.end())
      static_cast<llvm::cl::opt<bool>*>(it->second)->setValue(true);
  });
}

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
/// options and this build of the compiler.
std::pair<std::unique_ptr<ir::Function>, std::string> trace_optimized(const KernelDef& def, const Constants& constants,
                                                                      const Target& target,
                                                                      const CompileOptions& options,
                                                                      const ArgFacts& facts) {
  options.validate();
  std::unique_ptr<ir::Function> fn = def.trace(constants, facts);
  ir::optimize(*fn);
  if (!options.gpu_passes.empty()) {
    if (target.kind != Target::Kind::host)
      throw Error("tiledist: CompileOptions::gpu_passes runs the GPU passes' output on the host target only");
    codegen::run_gpu_passes(*fn, codegen::GpuPassContext::for_arch(options.gpu_passes, options.num_warps,
                                                                   options.num_stages, options.lowering));
  }
  std::string key =
      sha256_hex(str_cat(ir::print(*fn), "\n", target.key(), "\n", options.key(), "\n", compiler_version()));
  return {std::move(fn), std::move(key)};
}

}  // namespace

struct Context::Impl {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> host_tm;
  std::map<std::string, std::unique_ptr<llvm::TargetMachine>> gpu_tms;
  std::map<std::string, std::shared_ptr<Loaded>> by_key;
  std::map<std::string, std::shared_ptr<Loaded>> by_spec;
  Stats stats;
  int dylibs = 0;

  llvm::TargetMachine& tm() {
    if (!host_tm) {
      init_llvm();
      auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
      jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
      jtmb.setRelocationModel(llvm::Reloc::PIC_);
      jtmb.setCodeModel(llvm::CodeModel::Small);
      host_tm = unwrap(jtmb.createTargetMachine(), "creating the host target machine");
    }
    return *host_tm;
  }

  llvm::TargetMachine& gpu_tm(const Target& target) {
    auto& tm = gpu_tms[target.arch];
    if (!tm) {
      init_llvm();
      std::string err;
      const bool amd = target.kind == Target::Kind::amdgcn;
      const char* triple = amd ? "amdgcn-amd-amdhsa" : "nvptx64-nvidia-cuda";
      const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
      if (!t) throw Error(str_cat("tiledist: no ", amd ? "AMDGPU" : "NVPTX", " backend in this build: ", err));
      // NVPTX: PTX 8.4 (CUDA 12.4 drivers) for Hopper: f8 mma.sync needs it; 8.0 elsewhere.
      const char* features = amd ? "" : target.has(Cap::wgmma) ? "+ptx84" : "+ptx80";
      tm.reset(t->createTargetMachine(triple, target.arch, features, llvm::TargetOptions(),
                                      amd ? std::optional(llvm::Reloc::PIC_) : std::nullopt, std::nullopt,
                                      llvm::CodeGenOptLevel::Aggressive));
    }
    return *tm;
  }

  /// Lowers and optimizes for a GPU (AMDGCN: with the device libraries' functions it calls).
  codegen::GpuModule lower_gpu(const ir::Function& f, llvm::LLVMContext& ctx, const Target& target,
                               const CompileOptions& options, bool optimize = true) {
    llvm::TargetMachine& machine = gpu_tm(target);
    codegen::GpuOptions o{target.arch, options.num_warps, options.num_stages, options.tma, options.warp_specialize,
                          "",          options.lowering};
    codegen::GpuModule gm;
    if (target.kind == Target::Kind::amdgcn) {
      o.data_layout = machine.createDataLayout().getStringRepresentation();
      gm = codegen::lower_amdgcn(f, ctx, o);
      if (optimize) link_amdgpu_device_libs(*gm.module, target.arch);
    } else {
      gm = codegen::lower_nvptx(f, ctx, o);
    }
    gm.module->setDataLayout(machine.createDataLayout());
    if (optimize) run_o3(*gm.module, machine);
    return gm;
  }

  static void run_o3(llvm::Module& m, llvm::TargetMachine& machine) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(&machine);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  }

  llvm::orc::LLJIT& jit() {
    if (!lljit) {
      init_llvm();
      lljit = unwrap(llvm::orc::LLJITBuilder().create(), "starting the host JIT");
    }
    return *lljit;
  }

  /// Lowers and optimizes the host module; `os` receives LLVM IR text when given.
  codegen::HostModule lower(const ir::Function& f, llvm::LLVMContext& ctx, const CompileOptions& options,
                            bool optimize = true) {
    codegen::HostModule hm = codegen::lower_host(f, ctx, {options.check_bounds});
    llvm::TargetMachine& machine = tm();
    hm.module->setDataLayout(machine.createDataLayout());
    hm.module->setTargetTriple(machine.getTargetTriple().str());
    if (optimize) run_o3(*hm.module, machine);
    return hm;
  }

  std::string emit_file(llvm::Module& m, llvm::CodeGenFileType type, llvm::TargetMachine* machine = nullptr) {
    llvm::SmallVector<char, 0> buf;
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;
    if ((machine ? *machine : tm()).addPassesToEmitFile(pm, os, nullptr, type))
      throw Error("tiledist: the host target cannot emit this file type");
    pm.run(m);
    return std::string(buf.begin(), buf.end());
  }

  Artifact codegen(const ir::Function& f, const std::string& key, const Target& target, const CompileOptions& options) {
    llvm::LLVMContext ctx;
    Artifact a;
    a.key = key;
    a.kernel = f.name;
    a.target = target.name();
    if (target.kind != Target::Kind::host) {
      codegen::GpuModule gm = lower_gpu(f, ctx, target, options);
      a.entry = gm.entry;
      a.scratch_bytes = gm.shared_bytes;
      a.threads = gm.threads;
      a.distributed = gm.distributed;
      a.tma = runtime::tma_recipes_str(gm.tma);
      a.binary = target.kind == Target::Kind::amdgcn
                     ? code_object(gm, target)
                     : emit_file(*gm.module, llvm::CodeGenFileType::AssemblyFile, &gpu_tm(target));
    } else {
      codegen::HostModule hm = lower(f, ctx, options);
      a.entry = hm.entry;
      a.scratch_bytes = hm.scratch_bytes;
      a.distributed = hm.distributed;
      a.binary = emit_file(*hm.module, llvm::CodeGenFileType::ObjectFile);
    }
    stats.compiles++;
    return a;
  }

  /// The AMDGPU code object of a lowered kernel: its object file linked by lld. A workgroup has
  /// 64 KiB of LDS on gfx90a and gfx942.
  std::string code_object(codegen::GpuModule& gm, const Target& target) {
    constexpr int64_t kMaxLds = 64 * 1024;
    if (gm.shared_bytes > kMaxLds)
      throw Error(str_cat("tiledist: kernel '", gm.entry, "' needs ", gm.shared_bytes,
                          " bytes of shared memory (LDS) per program; ", target.arch, " has ", kMaxLds,
                          ": use smaller tiles"));
    return link_amdgpu_code_object(emit_file(*gm.module, llvm::CodeGenFileType::ObjectFile, &gpu_tm(target)), gm.entry);
  }

  runtime::HostKernelFn load(const Artifact& a) {
    llvm::orc::LLJIT& j = jit();
    auto created = j.createJITDylib(str_cat("tiledist.", a.kernel, ".", dylibs++));
    if (!created) throw Error(str_cat("tiledist: creating a JIT dylib: ", to_string(created.takeError())));
    llvm::orc::JITDylib& jd = *created;
    jd.addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.getDataLayout().getGlobalPrefix()),
               "searching the process for symbols"));
    llvm::orc::SymbolMap helpers;
    auto add = [&](const char* name, auto* fn) {
      helpers[j.mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported};
    };
    add(codegen::kHostHelperF32ToF8E4M3, &tiledist_f32_to_f8e4m3);
    add(codegen::kHostHelperF8E4M3ToF32, &tiledist_f8e4m3_to_f32);
    add(codegen::kHostHelperF32ToF8E5M2, &tiledist_f32_to_f8e5m2);
    add(codegen::kHostHelperF8E5M2ToF32, &tiledist_f8e5m2_to_f32);
    add(codegen::kHostHelperCheckAccess, &tiledist_check_access);
    add("tiledist_rank", &tiledist_rank);
    add("tiledist_num_ranks", &tiledist_num_ranks);
    add("tiledist_symm_at", &tiledist_symm_at);
    add("tiledist_wait", &tiledist_wait);
    add("tiledist_barrier", &tiledist_barrier);
    add("tiledist_memcpy", &tiledist_memcpy);
    check(jd.define(llvm::orc::absoluteSymbols(std::move(helpers))), "defining helper symbols");
    check(j.addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(a.binary, a.kernel)),
          str_cat("loading the object code of kernel '", a.kernel, "'"));
    auto addr = unwrap(j.lookup(jd, a.entry), str_cat("linking kernel '", a.kernel, "'"));
    return addr.toPtr<runtime::HostKernelFn>();
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
    if (target.kind == Target::Kind::host) loaded->host_fn = impl_->load(a);
    loaded->target = target;
    loaded->artifact = std::move(a);
    loaded->ir = std::move(fn);
    loaded->runtime_params = def.runtime_params();
    auto recipes = runtime::parse_tma_recipes(loaded->artifact.tma);  // (checked when read from disk)
    TD_ASSERT(recipes, "the code generator made a TMA recipe it cannot read back: ", loaded->artifact.tma);
    loaded->tma = std::move(*recipes);
    loaded->options = options;
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
  std::unique_ptr<ir::Function> fn = def.trace(constants, facts);
  if (stage == Stage::tile_ir) return ir::print(*fn);
  ir::optimize(*fn);
  if (stage == Stage::opt_ir) return ir::print(*fn);
  if (!options.gpu_passes.empty() && target.kind == Target::Kind::host) {  // (what compile() lowers: trace_optimized)
    codegen::run_gpu_passes(*fn, codegen::GpuPassContext::for_arch(options.gpu_passes, options.num_warps,
                                                                   options.num_stages, options.lowering));
    if (stage == Stage::gpu_ir) return ir::print(*fn);
  }
  if (stage == Stage::gpu_ir) {
    if (target.kind == Target::Kind::host)
      throw Error("tiledist: the GPU IR (layouts) needs a GPU target (sm_80, sm_90a, gfx90a, gfx942)");
    codegen::run_gpu_passes(
        *fn, codegen::GpuPassContext::for_compile(target.arch, options.num_warps, options.num_stages, options.lowering,
                                                  options.tma, options.warp_specialize));
    return ir::print(*fn);
  }
  return emit(*fn, target, options, stage);
}

std::string Context::emit(const ir::Function& fn, const Target& target, const CompileOptions& options, Stage stage) {
  if (stage == Stage::tile_ir || stage == Stage::opt_ir) return ir::print(fn);
  TD_ASSERT(stage != Stage::gpu_ir, "emit the GPU IR from a definition");
  std::lock_guard<std::mutex> lock(impl_->mu);
  llvm::LLVMContext ctx;
  if (target.kind != Target::Kind::host) {
    codegen::GpuModule gm = impl_->lower_gpu(fn, ctx, target, options, stage != Stage::llvm_lowered);
    if (stage == Stage::binary && target.kind == Target::Kind::amdgcn) return impl_->code_object(gm, target);
    if (stage == Stage::asm_ || stage == Stage::binary)
      return impl_->emit_file(*gm.module, llvm::CodeGenFileType::AssemblyFile, &impl_->gpu_tm(target));
    std::string s;
    llvm::raw_string_ostream os(s);
    gm.module->print(os, nullptr);
    return os.str();
  }
  codegen::HostModule hm = impl_->lower(fn, ctx, options, stage != Stage::llvm_lowered);
  if (stage == Stage::llvm || stage == Stage::llvm_lowered) {
    std::string s;
    llvm::raw_string_ostream os(s);
    hm.module->print(os, nullptr);
    return os.str();
  }
  return impl_->emit_file(
      *hm.module, stage == Stage::binary ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile);
}

}  // namespace tiledist::jit
