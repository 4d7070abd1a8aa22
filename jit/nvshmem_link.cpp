// NVSHMEM's device library linked into a kernel's module (jit/nvshmem_link.h).
#include "jit/nvshmem_link.h"

#include <filesystem>
#include <map>
#include <mutex>

#include "jit/llvm_codegen.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"
#include "runtime/nvshmem.h"
#include "support/support.h"

namespace tiledist::jit {

void link_nvshmem_device(llvm::Module& m) {
  if (!first_declared(m, "nvshmem")) return;
  // Only what the kernel calls (and what that uses). Not internalized: nvshmemx_cumodule_init
  // looks the device state up in the loaded module by name.
  const std::string path = nvshmem::device_bitcode();
  link_bitcode(m, path, false, "NVSHMEM", "");
  if (const llvm::Function* f = first_declared(m, "nvshmem"))  // (else the driver's link would fail, less clearly)
    throw Error(str_cat("tiledist: kernel '", m.getName().str(), "' calls ", f->getName().str(),
                        ", which NVSHMEM's device library ", path, " does not define"));
}

std::string nvshmem_key(const std::string& world) {
  if (world.empty()) return "";
  std::string path;
  try {
    path = nvshmem::device_bitcode();
  } catch (const Error& e) {
    return str_cat("nvshmem-device=none (", e.what(), ")");
  }
  std::error_code ec;  // (the file itself: the same library through a link or another prefix shares keys)
  if (auto real = std::filesystem::canonical(path, ec); !ec) path = real.string();
  static std::mutex mu;
  static std::map<std::string, std::string> hashed;  // (a path's hash, once a process)
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = hashed.try_emplace(path);
  if (fresh) {
    auto buffer = llvm::MemoryBuffer::getFile(path);
    it->second = buffer ? str_cat(llvm::xxh3_64bits(llvm::arrayRefFromStringRef((*buffer)->getBuffer())))
                        : str_cat("unreadable (", buffer.getError().message(), ")");
  }
  return str_cat("nvshmem-device=", path, " ", it->second);
}

}  // namespace tiledist::jit
