// NVSHMEM's device library linked into a kernel's module (jit/nvshmem_link.h).
#include "jit/nvshmem_link.h"

#include "jit/llvm_codegen.h"
#include "llvm/IR/Module.h"
#include "runtime/nvshmem.h"

namespace tiledist::jit {

void link_nvshmem_device(llvm::Module& m) {
  bool calls = false;
  for (const llvm::Function& f : m.functions()) calls |= f.isDeclaration() && f.getName().starts_with("nvshmem");
  if (!calls) return;
  // Only what the kernel calls (and what that uses). Not internalized: nvshmemx_cumodule_init
  // looks the device state up in the loaded module by name.
  link_bitcode(m, nvshmem::device_bitcode(), false, "NVSHMEM", "");
}

}  // namespace tiledist::jit
