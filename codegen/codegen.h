// Lowering of tile IR to LLVM IR, one file per target.
#pragma once

#include <memory>
#include <string>

#include "ir/ir.h"
#include "support/tma.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tiledist::codegen {

struct HostOptions {
  bool check_bounds = false;  // call tiledist_check_access before every load and store
};

/// The host lowering of a kernel: an LLVM module holding one function named after the kernel,
/// with the calling convention of runtime/host_abi.h, and the scratch memory it needs.
struct HostModule {
  std::unique_ptr<llvm::Module> module;
  std::string entry;
  int64_t scratch_bytes = 0;
  bool distributed = false;  // calls the runtime's distributed helpers (they may yield)
};

/// Lowers a verified function for the host CPU: a program instance is one call; block tensors
/// live in scratch memory and each op on them is a loop that LLVM vectorizes.
HostModule lower_host(const ir::Function& f, llvm::LLVMContext& ctx, const HostOptions& opts);

struct GpuOptions {
  std::string arch = "sm_90a";   // sm_80, sm_90a; gfx90a, gfx942
  int num_warps = 4;             // warps (NVIDIA, 32 threads) or wavefronts (AMD, 64) per program
  int num_stages = 3;            // operand buffers of pipelined dot loops
  bool tma = true;               // sm_90a: wgmma pipelines copy their tiles with TMA where they can
  bool warp_specialize = false;  // sm_90a: a producer warpgroup issues a TMA loop's copies
  /// The target machine's data layout, where the lowering needs it (AMDGCN: allocas and
  /// globals live in their own address spaces).
  std::string data_layout;
  /// Which of the GPU passes' variants run (CompileOptions::lowering): "" the default (sm_90a's
  /// pipelines copying by TMA where they can), "gpu_ir" (cp.async unless warp specialized),
  /// "gpu_ir_mma", "gpu_ir_prefetch", "gpu_ir_tma", "gpu_ir_ws".
  std::string lowering;
  /// NVIDIA: copies to and from peers' heaps call NVSHMEM's device functions
  /// (CompileOptions::world "nvshmem"; the module then declares them, and the backend links
  /// NVSHMEM's device library).
  bool nvshmem = false;
};

/// The GPU lowering of a kernel: a module with one kernel named after it, taking the runtime
/// parameters in order, run by `threads` threads per program with `shared_bytes` of dynamic
/// shared memory (LDS on AMD GPUs).
struct GpuModule {
  std::unique_ptr<llvm::Module> module;
  std::string entry;
  int64_t shared_bytes = 0;
  int threads = 128;
  /// Takes a trailing parameter: the address of a runtime::DeviceWorld (distributed ops).
  bool distributed = false;
  /// Takes a trailing parameter (after the world's): the address of a runtime::ProfileBuffer
  /// (support/profile_abi.h), where the kernel was traced with the profiler's marks.
  bool profile = false;
  /// Takes a trailing 128-byte parameter per recipe (after the world's and the profile
  /// buffer's): a TMA tensor map that the launch encodes from its arguments.
  std::vector<runtime::TmaRecipe> tma;
};

/// Lowers a verified function for NVIDIA GPUs. Throws Error for ops this target lacks.
GpuModule lower_nvptx(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts);
/// Lowers a verified function for AMD GPUs (wave64: gfx90a, gfx942); the module calls the ROCm
/// device libraries' math functions (link_amdgcn_device_libs adds them).
GpuModule lower_amdgcn(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts);

/// Names of the helper functions host kernels call (narrow-float conversions, bounds checks).
extern const char* const kHostHelperF32ToF8E4M3;
extern const char* const kHostHelperF8E4M3ToF32;
extern const char* const kHostHelperF32ToF8E5M2;
extern const char* const kHostHelperF8E5M2ToF32;
extern const char* const kHostHelperCheckAccess;

}  // namespace tiledist::codegen
