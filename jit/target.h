// Compilation targets and options: both are part of every cache key.
#pragma once

#include <string>

namespace tiledist {

/// What a target's hardware has, decided once from its arch (Target::has), so that the kernel
/// library and the tools ask for a capability instead of comparing arch names.
enum class Cap : uint8_t {
  mma_sync,  ///< NVIDIA tensor cores through mma.sync (sm_80 on)
  wgmma,     ///< Hopper's warpgroup MMA and its instructions (sm_90a)
  tma,       ///< the tensor memory accelerator's bulk tensor copies (sm_90a)
  mfma,      ///< AMD matrix cores (gfx90a, gfx942)
};

/// What a kernel is compiled for: a kind of hardware and its arch.
struct Target {
  /// The backend (jit/backend.h) that compiles and runs the kernels.
  enum class Kind {
    host,   ///< this machine's CPU, through LLVM's JIT
    nvptx,  ///< an NVIDIA GPU: PTX, run through the CUDA driver
    amdgcn  ///< an AMD GPU: a code object, run through HIP
  };
  Kind kind = Kind::host;  ///< the backend
  std::string arch;        ///< "sm_80", "sm_90a", "gfx942"; host: the CPU's name (LLVM's)

  /// The CPU this process runs on.
  static Target host();
  /// An NVIDIA arch: "sm_80", "sm_90" or "sm_90a"; throws Error for another.
  static Target cuda(const std::string& arch);
  /// The arch of the CUDA device found (cuda::DeviceInfo::arch: sm_90a on Hopper, sm_90 on
  /// newer GPUs, sm_80 on 8.x); throws Error without one, or on a GPU older than 8.0.
  static Target cuda();
  /// An AMD arch: "gfx942" or "gfx90a"; throws Error for another.
  static Target amdgcn(const std::string& arch);
  /// "host", "sm_80", "sm_90", "sm_90a", "gfx942", "gfx90a", or "cuda" (the arch of the GPU
  /// found); throws Error naming the known targets.
  static Target parse(const std::string& name);
  /// What compile() uses when no target is given: $TILEDIST_TARGET if set ("host" keeps the CPU
  /// where there is a GPU), else the CUDA GPU found (its arch), else an AMD GPU found (gfx942,
  /// gfx90a), else the host.
  static Target default_target();
  /// The short name users type ("host", "sm_90a").
  std::string name() const;
  /// Everything that changes the generated code (host: CPU name and features), as the target's
  /// backend says (jit/backend.h).
  std::string key() const;
  /// Whether the target's hardware has `c` (the host: nothing of these).
  bool has(Cap c) const;
  /// Whether the target is a GPU (NVIDIA, AMD): its programs are many and small, a block of
  /// threads each, where the host runs a few per core. The kernel library sizes its tiles and
  /// grids by it, as its backend says (jit/backend.h).
  bool is_gpu() const;
  /// Whether the target's kernels run through the CUDA driver (NVIDIA): ordered by a CUDA
  /// runtime::Stream, communicating through cuda::World's symmetric heap. The kernel library's
  /// objects that take a stream run on such a target or on the host.
  bool runs_on_cuda() const;
};

/// How a kernel is compiled, beyond its target: the knobs of the passes and the lowering.
struct CompileOptions {
  /// CPU backend: report out-of-bounds accesses; launches then need every buffer's extent
  /// (a std::span or std::vector). ($TILEDIST_CHECK_BOUNDS=1)
  bool check_bounds = false;
  /// GPU: warps per CTA (NVIDIA: of 32 threads; AMD: wavefronts of 64), a power of two up
  /// to 32.
  int num_warps = 4;
  int num_stages = 3;  ///< GPU: shared-memory buffers of a pipelined dot loop (1 to 16)
  /// sm_90a: wgmma loops copy their tiles with TMA where they can ($TILEDIST_TMA=0: cp.async).
  bool tma = true;
  /// sm_90a: a TMA wgmma loop gets a producer warpgroup of its own (128 threads more per CTA),
  /// which issues the copies ahead of the math warps, across the loop's runs (persistent tile
  /// loops: the next tile's loads under this one's epilogue); setmaxnreg moves registers to
  /// the math warps. Kernels without such a loop are unchanged. ($TILEDIST_WS=1 turns it on
  /// for every compile, 0 off for the kernel library's too.)
  bool warp_specialize = false;
  /// The host target only, to test the GPU passes: run them for this GPU arch ("sm_80",
  /// "sm_90a", ...) before the host lowering, which runs their output (layouts ignored,
  /// asynchronous copies done at once) on the CPU. Empty: the host lowering takes the
  /// optimized IR, as always.
  std::string gpu_passes;
  /// GPU targets: every kernel goes through the GPU passes (layouts, pipelines and warp
  /// specialization as the IR states them) and their lowering (codegen/gpu_ir/); an op it does
  /// not take is an error naming it. This picks the passes' variant: "gpu_ir" pipelines copying
  /// by cp.async (unless warp specialized), in each target's own form of the GPU IR (sm_90a:
  /// wgmma); "gpu_ir_mma" as gpu_ir, but on sm_90a sm_89's form (mma.sync, f8 operands too), to
  /// compare; "gpu_ir_prefetch" as gpu_ir, with the dot_prefetch pass (a dot feeding another
  /// issued an iteration ahead, codegen/passes/);
  /// "gpu_ir_tma" as gpu_ir, its pipelines copying by TMA where they can (sm_90a); "gpu_ir_ws"
  /// as gpu_ir_tma, warp specialized where the warp_specialization pass can (a producer
  /// warpgroup issuing the copies).
  /// Empty (the default): the GPU passes' output, as "gpu_ir" but with the pipelines copying
  /// by TMA where they can (sm_90a, unless `tma` is off). ($TILEDIST_LOWERING sets it for
  /// every compile, the library's included.)
  std::string lowering;
  /// The intra-kernel profiler (dsl/profile.h): where each rank's trace goes (a directory,
  /// made where missing); empty: off, the profiler's marks compiled out. ($TILEDIST_PROFILE=DIR)
  std::string profile;
  /// NVIDIA GPUs (other targets ignore it): the world the kernel's distributed ops go through. Empty: the CUDA world's
  /// heaps, addressed directly; "nvshmem": NVSHMEM's (issue 31: a copy to or from a peer's heap
  /// calls NVSHMEM's device function, linked from its libnvshmem_device.bc).
  /// ($TILEDIST_WORLD=nvshmem)
  std::string world;

  /// Defaults, with the environment's overrides applied (the $TILEDIST_ variables named above).
  static CompileOptions from_env();
  /// The options as the cache key takes them (options at their defaults may be left out, so
  /// that keys made before an option existed stay valid).
  std::string key() const;
  /// Throws Error naming the option unless num_warps is a power of two up to 32 (a CTA of at
  /// most 1024 threads), num_stages is 1 to 16, gpu_passes names an arch the passes know and
  /// lowering is empty or one of the variants above, and world is empty or "nvshmem".
  void validate() const;
};

}  // namespace tiledist
