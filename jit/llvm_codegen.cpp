#include "jit/llvm_codegen.h"

#include <mutex>

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTarget();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUAsmPrinter();
}

namespace tiledist::jit {

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

void check(llvm::Error e, const std::string& what) {
  if (e) throw Error(str_cat("tiledist: ", what, ": ", llvm::toString(std::move(e))));
}

std::unique_ptr<llvm::TargetMachine> gpu_target_machine(const char* triple, const char* backend,
                                                        const std::string& arch, const char* features,
                                                        std::optional<llvm::Reloc::Model> relocation) {
  init_llvm();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) throw Error(str_cat("tiledist: no ", backend, " backend in this build: ", err));
  return std::unique_ptr<llvm::TargetMachine>(t->createTargetMachine(
      triple, arch, features, llvm::TargetOptions(), relocation, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
}

void run_o3(llvm::Module& m, llvm::TargetMachine& machine) {
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

std::string emit_file(llvm::Module& m, llvm::TargetMachine& machine, llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (machine.addPassesToEmitFile(pm, os, nullptr, type))
    throw Error(str_cat("tiledist: the target ", machine.getTargetTriple().str(), " cannot emit this file type"));
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

const llvm::Function* first_declared(const llvm::Module& m, const std::string& prefix) {
  for (const llvm::Function& f : m.functions())
    if (f.isDeclaration() && f.getName().starts_with(prefix)) return &f;
  return nullptr;
}

void link_bitcode(llvm::Module& m, const std::string& path, bool internalize, const std::string& what,
                  const std::string& hint) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    throw Error(str_cat("tiledist: kernel '", m.getName().str(), "' calls ", what, ", and ", path, " cannot be read (",
                        buffer.getError().message(), ")", hint));
  // (lazily: only the functions linked are read; NVSHMEM's library is large, its put small)
  auto lib = llvm::getOwningLazyBitcodeModule(std::move(*buffer), m.getContext());
  if (!lib) throw Error(str_cat("tiledist: reading ", path, ": ", llvm::toString(lib.takeError())));
  (*lib)->setDataLayout(m.getDataLayout());
  (*lib)->setTargetTriple(m.getTargetTriple());
  auto internal = [](llvm::Module& mod, const llvm::StringSet<>& names) {
    for (llvm::GlobalValue& g : mod.global_values())
      if (!g.isDeclaration() && names.count(g.getName())) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  };
  const bool failed = internalize
                          ? llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::LinkOnlyNeeded, internal)
                          : llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::LinkOnlyNeeded);
  if (failed) throw Error(str_cat("tiledist: linking ", path, " into kernel '", m.getName().str(), "' failed"));
}

std::string print_module(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

}  // namespace tiledist::jit
