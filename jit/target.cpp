#include "jit/target.h"

#include <cstdlib>
#include <cstring>

#include "codegen/passes/passes.h"
#include "jit/backend.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/TargetParser/Host.h"
#include "runtime/cuda.h"
#include "runtime/hip.h"
#include "runtime/nvshmem.h"
#include "support/matrix_instrs.h"
#include "support/support.h"

namespace tiledist {

Target Target::host() {
  static const std::string cpu = llvm::sys::getHostCPUName().str();
  return Target{Kind::host, cpu};
}
Target Target::cuda(const std::string& arch) {
  if (arch != "sm_80" && arch != "sm_90a" && arch != "sm_90")
    throw Error(str_cat("tiledist: unknown CUDA architecture '", arch, "' (known: sm_80, sm_90, sm_90a)"));
  return Target{Kind::nvptx, arch};
}
Target Target::cuda() { return cuda(cuda::device().arch()); }
Target Target::amdgcn(const std::string& arch) {
  if (arch != "gfx942" && arch != "gfx90a")
    throw Error(str_cat("tiledist: unknown AMD GPU architecture '", arch, "' (known: gfx942, gfx90a)"));
  return Target{Kind::amdgcn, arch};
}
Target Target::parse(const std::string& name) {
  if (name == "host") return host();
  if (name == "cuda") return cuda();
  if (name.rfind("sm_", 0) == 0) return cuda(name);
  if (name.rfind("gfx", 0) == 0) return amdgcn(name);
  throw Error(
      str_cat("tiledist: unknown target '", name, "' (known: host, cuda, sm_80, sm_90, sm_90a, gfx942, gfx90a)"));
}

Target Target::default_target() {
  const char* t = std::getenv("TILEDIST_TARGET");
  if (t && *t) return parse(t);
  // Probed once (dlopen and a device query): an NVIDIA GPU, else an AMD GPU of an arch we target.
  static const Target found = [] {
    if (cuda::available() && cuda::device().cc_major >= 8) return cuda();
    if (hip::available() && (hip::device().arch == "gfx942" || hip::device().arch == "gfx90a"))
      return amdgcn(hip::device().arch);
    return host();
  }();
  return found;
}

bool Target::has(Cap c) const {
  if (kind == Kind::host) return false;
  switch (c) {  // (the matrix units from the arch's matrix instructions, support/matrix_instrs.h)
    case Cap::mma_sync:
      return matrix_instr(arch, MatrixUnit::mma_sync) != nullptr;
    case Cap::wgmma:
      return matrix_instr(arch, MatrixUnit::wgmma) != nullptr;
    case Cap::mfma:
      return matrix_instr(arch, MatrixUnit::mfma) != nullptr;
    case Cap::tma:
      return arch == "sm_90a";
  }
  return false;
}

std::string Target::name() const { return kind == Kind::host ? "host" : arch; }

std::string Target::key() const { return jit::Backend::for_target(*this).key(*this); }
bool Target::is_gpu() const { return jit::Backend::for_target(*this).is_gpu(); }
bool Target::runs_on_cuda() const { return jit::Backend::for_target(*this).runs_on_cuda(); }

CompileOptions CompileOptions::from_env() {
  CompileOptions o;
  const char* cb = std::getenv("TILEDIST_CHECK_BOUNDS");
  o.check_bounds = cb && std::strcmp(cb, "0") != 0 && *cb;
  const char* tma = std::getenv("TILEDIST_TMA");
  o.tma = !(tma && std::strcmp(tma, "0") == 0);
  const char* ws = std::getenv("TILEDIST_WS");
  o.warp_specialize = ws && std::strcmp(ws, "1") == 0;
  if (const char* l = std::getenv("TILEDIST_LOWERING")) o.lowering = l;
  if (const char* p = std::getenv("TILEDIST_PROFILE")) o.profile = p;
  if (nvshmem::world_kind() == nvshmem::WorldKind::nvshmem) o.world = "nvshmem";
  return o;
}

void CompileOptions::validate() const {
  if (num_warps < 1 || num_warps > 32 || (num_warps & (num_warps - 1)))
    throw Error(str_cat("tiledist: num_warps = ", num_warps, ": must be 1, 2, 4, 8, 16 or 32"));
  if (num_stages < 1 || num_stages > 16)
    throw Error(str_cat("tiledist: num_stages = ", num_stages, ": must be 1 to 16"));
  if (!gpu_passes.empty())
    codegen::GpuPassContext::for_arch(gpu_passes, num_warps, num_stages);  // (names the archs it knows)
  if (!lowering.empty() && lowering != "gpu_ir" && lowering != "gpu_ir_mma" && lowering != "gpu_ir_prefetch" &&
      lowering != "gpu_ir_tma" && lowering != "gpu_ir_ws")
    throw Error(str_cat("tiledist: lowering = '", lowering,
                        "': must be empty, gpu_ir, gpu_ir_mma, gpu_ir_prefetch, gpu_ir_tma or gpu_ir_ws"));
  if (!world.empty() && world != "nvshmem")
    throw Error(str_cat("tiledist: world = '", world, "': must be empty (the CUDA world's) or nvshmem"));
}

std::string CompileOptions::key() const {
  // (the defaults of later options, tma=1 and ws=0, leave the key as it was before them)
  return str_cat("check_bounds=", check_bounds, ",num_warps=", num_warps, ",num_stages=", num_stages,
                 tma ? "" : ",tma=0", warp_specialize ? ",ws=1" : "",
                 gpu_passes.empty() ? "" : ",gpu_passes=" + gpu_passes, lowering.empty() ? "" : ",lowering=" + lowering,
                 profile.empty() ? "" : ",profile=1", world.empty() ? "" : ",world=" + world);
}

}  // namespace tiledist
