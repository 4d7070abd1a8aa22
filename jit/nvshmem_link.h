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

}  // namespace tiledist::jit
