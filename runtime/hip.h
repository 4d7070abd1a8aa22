// The HIP backend's runtime, for AMD GPUs: HIP through dlopen("libamdhip64.so"), so the same
// build runs where there is no ROCm (available() is false there). Every failing call throws
// Error naming the call and the HIP error. It loads the code objects the AMDGCN backend links
// (checking their arch against the device's first), launches them, and gives streams, events,
// stream memory operations (through runtime/stream.h) and IPC handles (how processes of one
// host map each other's symmetric heaps).
//
// Written against Debian's ROCm 5.2 headers and unit-tested on machines without an AMD GPU:
// none of it has run on one yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/stream.h"

namespace tiledist::hip {

/// Whether the HIP runtime and at least one AMD GPU are present (never throws).
bool available();
/// HIP's streams, events, stream memory operations and modules (runtime/stream.h: held through
/// runtime::Stream, Event and Module). Its modules are code objects, their arch checked against
/// the device's before they load; LDS is static in them (a launch's shared bytes are ignored).
const runtime::GpuApi& api();
/// Why not, when available() is false.
std::string unavailable_reason();

/// An AMD GPU's properties, as HIP gives them.
struct DeviceInfo {
  int ordinal = 0;        ///< the device's HIP ordinal
  std::string name;       ///< hipDeviceProp_t's name
  std::string arch;       ///< "gfx942" (arch_of its gcnArchName)
  int compute_units = 0;  ///< CUs (hipDeviceProp_t's multiProcessorCount)
};
/// The current device (ordinal $TILEDIST_DEVICE, else the rank's local rank modulo the count,
/// else 0), made current on the calling thread.
const DeviceInfo& device();

/// The arch of a HIP gcnArchName: "gfx942:sramecc+:xnack-" is gfx942.
std::string arch_of(const std::string& gcn_arch_name);
/// The arch a code object was linked for (its ELF header's EF_AMDGPU_MACH); throws Error saying
/// what the bytes are instead where they are not an AMDGPU code object of a known arch.
std::string code_object_arch(const std::string& binary);

/// Device memory (coarse-grained: coherent at kernel boundaries). malloc(0) is null.
void* malloc(size_t bytes);
/// Fine-grained device memory: coherent while kernels run, for words that peers and the host
/// read and write during a kernel (signals, the symmetric heap).
void* malloc_fine_grained(size_t bytes);
/// Device memory: free takes malloc's or malloc_fine_grained's (null: nothing); copy_to_device,
/// copy_to_host and memset have completed when they return, as cuda's do; synchronize waits for
/// all of the device's work.
///@{
void free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void memset(void* dst, int value, size_t bytes);
void synchronize();
///@}
/// Pinned, zeroed host memory that kernels read and write at `*device_address` (it stays
/// readable by the host after a kernel has trapped).
void* host_mapped_alloc(size_t bytes, void** device_address);

/// IPC: a handle to device memory (from malloc) that other processes of this host open to map
/// it; the bytes travel as they are (over the host world's bootstrap).
struct IpcHandle {
  unsigned char bytes[64] = {};  ///< hipIpcMemHandle_t, opaque
};
/// The handle of `p`, the start of an allocation (malloc or malloc_fine_grained).
IpcHandle ipc_export(void* p);
/// Maps a peer's memory here (peer access enabled); closed with ipc_close.
void* ipc_import(const IpcHandle& handle);
/// Unmaps what ipc_import mapped.
void ipc_close(void* p);

}  // namespace tiledist::hip
