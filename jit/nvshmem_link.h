// The NVSHMEM world's side of the NVPTX JIT (issue 31): NVSHMEM's device library linked into a
// kernel's module where the lowering called its functions (GpuOptions::nvshmem).
#pragma once

#include <string>

namespace llvm {
class Module;
}

namespace tiledist::jit {

/// Links the functions of NVSHMEM's device library (libnvshmem_device.bc, found as
/// nvshmem::device_bitcode() finds it) that `m` calls (declarations named nvshmem*), with what
/// they use: the device state nvshmemx_cumodule_init fills when the module is loaded stays an
/// external global for it to find. Nothing where `m` calls none. Throws Error naming where the
/// library was looked for, or what failed to read or link.
void link_nvshmem_device(llvm::Module& m);

/// What a kernel compiled for `world` links of NVSHMEM, for its cache key: "" for the CUDA
/// world's (empty `world`); else the device library's path (resolved: through links) and a hash
/// of its contents, read once a process (another NVSHMEM is another key, never a stale binary;
/// a library replaced in place while a process runs is not seen by that process), or why it was
/// not found (then a kernel that calls NVSHMEM fails to compile, naming it).
std::string nvshmem_key(const std::string& world);

}  // namespace tiledist::jit
