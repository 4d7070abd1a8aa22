// What every backend does with LLVM: its targets initialized once per process, a target
// machine made, a module optimized at -O3, emitted as a file or printed, LLVM's errors turned
// into tiledist::Error.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "llvm/Support/CodeGen.h"
#include "llvm/Support/Error.h"
#include "support/support.h"

namespace llvm {
class Function;
class Module;
class TargetMachine;
}  // namespace llvm

namespace tiledist::jit {

/// Registers the host's, NVPTX's and AMDGPU's LLVM targets (once per process) and sets the
/// options the backends share (NVPTX: 32-bit shared-memory addresses).
void init_llvm();

/// `v`'s value, or an Error "tiledist: `what`: LLVM's message".
template <class T>
T unwrap(llvm::Expected<T> v, const std::string& what) {
  if (!v) throw Error(str_cat("tiledist: ", what, ": ", llvm::toString(v.takeError())));
  return std::move(*v);
}
/// Throws an Error "tiledist: `what`: LLVM's message" where `e` holds one.
void check(llvm::Error e, const std::string& what);

/// A target machine of a GPU triple (`backend`: the LLVM backend's name, for the error where
/// this build lacks it) at -O3.
std::unique_ptr<llvm::TargetMachine> gpu_target_machine(const char* triple, const char* backend,
                                                        const std::string& arch, const char* features,
                                                        std::optional<llvm::Reloc::Model> relocation);

/// LLVM's -O3 pipeline over `m`, for `machine`.
void run_o3(llvm::Module& m, llvm::TargetMachine& machine);
/// `m` as `machine` emits it: assembly text or an object file.
std::string emit_file(llvm::Module& m, llvm::TargetMachine& machine, llvm::CodeGenFileType type);
/// `m` as LLVM IR text.
std::string print_module(const llvm::Module& m);
/// The first function `m` declares (calls, without defining it) whose name starts with
/// `prefix`; null where there is none.
const llvm::Function* first_declared(const llvm::Module& m, const std::string& prefix);
/// Links into `m` what it calls of the bitcode library at `path` (and what that uses), the
/// library taking m's data layout and triple; `internalize`: what was linked becomes internal.
/// Throws Error "tiledist: kernel 'K' calls `what`, and PATH cannot be read (why)`hint`", or
/// naming what failed to read or link.
void link_bitcode(llvm::Module& m, const std::string& path, bool internalize, const std::string& what,
                  const std::string& hint);

}  // namespace tiledist::jit
