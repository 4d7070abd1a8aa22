// libtiledist-cc: the C++ front end that `tiledist-warmup my_kernels.cpp` loads on demand. It
// compiles a user's source of eDSL kernels in-process with clang (Debian's libclang-19-dev)
// against tiledist's headers, JIT-links it against the running process (libtiledist.so and the
// C++ runtime) and runs its static initializers, so that its TILEDIST_REGISTER lines add its
// kernels to the registry. The user builds nothing.
//
// A plugin, not part of libtiledist.so or the tool: it needs the shared clang and LLVM libraries,
// which GPU hosts (and the relocatable bundle) do without.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "clang/Basic/DiagnosticOptions.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Driver/Compilation.h"
#include "clang/Driver/Driver.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

namespace {

void set_error(char* err, size_t len, const std::string& msg) {
  if (!err || !len) return;
  std::snprintf(err, len, "%s", msg.c_str());
}

}  // namespace

/// Compiles `file` with the include directory `include_dir` (tiledist's headers) and runs its
/// static initializers. Returns 0, or 1 with the compiler's diagnostics or the error in `err`.
extern "C" __attribute__((visibility("default"))) int tiledist_cc_load(const char* file, const char* include_dir,
                                                                       char* err, size_t err_len) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  std::string diagnostics;
  llvm::raw_string_ostream diag_os(diagnostics);
  auto diag_opts = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  auto* printer = new clang::TextDiagnosticPrinter(diag_os, &*diag_opts);
  clang::DiagnosticsEngine diags(llvm::makeIntrusiveRefCnt<clang::DiagnosticIDs>(), &*diag_opts, printer);

  // The driver works out the system and C++ library include paths, as `clang++ -c` would.
  clang::driver::Driver driver(CLANG_EXECUTABLE, llvm::sys::getDefaultTargetTriple(), diags);
  driver.setCheckInputsExist(false);
  std::string inc = std::string("-I") + include_dir;
  std::vector<const char*> args = {"clang++", "-std=c++20", "-O1", "-fPIC", inc.c_str(), "-c", file};
  std::unique_ptr<clang::driver::Compilation> c(driver.BuildCompilation(args));
  if (!c || c->getJobs().empty()) {
    set_error(err, err_len, "clang could not set up the compilation of " + std::string(file) + "\n" + diagnostics);
    return 1;
  }
  const auto& cmd = llvm::cast<clang::driver::Command>(*c->getJobs().begin());
  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, cmd.getArguments(), diags)) {
    set_error(err, err_len, "bad compiler arguments\n" + diagnostics);
    return 1;
  }
  clang::CompilerInstance ci;
  ci.setInvocation(invocation);
  ci.createDiagnostics(new clang::TextDiagnosticPrinter(diag_os, &ci.getDiagnosticOpts()), true);
  auto context = std::make_unique<llvm::LLVMContext>();
  clang::EmitLLVMOnlyAction action(context.get());
  if (!ci.ExecuteAction(action)) {
    diag_os.flush();
    set_error(err, err_len, "compiling " + std::string(file) + " failed:\n" + diagnostics);
    return 1;
  }
  std::unique_ptr<llvm::Module> module = action.takeModule();

  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) {
    set_error(err, err_len, "starting the JIT: " + llvm::toString(jit.takeError()));
    return 1;
  }
  auto& main = (*jit)->getMainJITDylib();  // (the JIT is released below, once it holds user code)
  auto search =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
  if (!search) {
    set_error(err, err_len, "searching the process: " + llvm::toString(search.takeError()));
    return 1;
  }
  main.addGenerator(std::move(*search));
  if (auto e = (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
    set_error(err, err_len, "adding " + std::string(file) + ": " + llvm::toString(std::move(e)));
    return 1;
  }
  // From here on the JIT holding the user's code is never destroyed: the registry keeps the
  // kernels' trace functions, and the C++ runtime the destructors of its statics, which all live
  // in its memory until the very end of the process (even when an initializer fails half-way).
  llvm::orc::LLJIT* kept = jit->release();
  try {
    if (auto e = kept->initialize(main)) {  // static constructors: TILEDIST_REGISTER(...)
      set_error(err, err_len,
                "running the static initializers of " + std::string(file) + ": " + llvm::toString(std::move(e)));
      return 1;
    }
  } catch (const std::exception& e) {
    set_error(err, err_len, "a static initializer of " + std::string(file) + " threw: " + e.what());
    return 1;
  }
  return 0;
}
