// NVSHMEM's device library linked into a kernel's module (jit/nvshmem_link.h).
#include "jit/nvshmem_link.h"

#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/MemoryBuffer.h"
#include "runtime/nvshmem.h"
#include "support/support.h"

namespace tiledist::jit {

void link_nvshmem_device(llvm::Module& m) {
  bool calls = false;
  for (const llvm::Function& f : m.functions()) calls |= f.isDeclaration() && f.getName().starts_with("nvshmem");
  if (!calls) return;
  const std::string path = nvshmem::device_bitcode();
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    throw Error(str_cat("tiledist: kernel '", m.getName().str(), "' calls NVSHMEM, and ", path, " cannot be read (",
                        buffer.getError().message(), ")"));
  auto lib = llvm::parseBitcodeFile(**buffer, m.getContext());
  if (!lib) throw Error(str_cat("tiledist: reading ", path, ": ", llvm::toString(lib.takeError())));
  (*lib)->setDataLayout(m.getDataLayout());
  (*lib)->setTargetTriple(m.getTargetTriple());
  // Only what the kernel calls (and what that uses). Not internalized: nvshmemx_cumodule_init
  // looks the device state up in the loaded module by name.
  if (llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::LinkOnlyNeeded))
    throw Error(str_cat("tiledist: linking ", path, " into kernel '", m.getName().str(), "' failed"));
}

}  // namespace tiledist::jit
