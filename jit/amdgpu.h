// The AMDGPU side of the JIT: the ROCm device libraries linked into a kernel's module, and the
// code object linked from its object file by lld, in-process.
#pragma once

#include <string>

namespace llvm {
class Module;
}

namespace tiledist::jit {

/// Links the device-library functions `m` calls (ocml's math) from Debian's rocm-device-libs
/// bitcode, and defines the library's control variables for `arch` (gfx90a, gfx942: wave64,
/// IEEE denormals, no unsafe math). Throws Error naming the directory searched where a called
/// function's library is missing. The directory: $TILEDIST_ROCM_DEVICE_LIBS, else the first of
/// Debian's, ROCm's and LLVM's places that holds ocml.bc.
void link_amdgpu_device_libs(llvm::Module& m, const std::string& arch);

/// A loadable code object (a shared ELF for the amdgcn-amd-amdhsa ABI) from the relocatable
/// object of one kernel, linked by lld in this process. Throws Error with lld's message.
std::string link_amdgpu_code_object(const std::string& object, const std::string& kernel);

}  // namespace tiledist::jit
