// The CUDA backend's runtime: the driver API through dlopen("libcuda.so.1"), so the same build
// runs where there is no driver (available() is false there). Every failing call throws Error
// naming the call and the CUDA error name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/stream.h"

namespace tiledist::cuda {

/// Whether a CUDA driver and at least one device are present (never throws).
bool available();
/// The driver's streams, events, stream memory operations and modules (runtime/stream.h: held
/// through runtime::Stream, Event and Module).
const runtime::GpuApi& api();
/// Why not, when available() is false.
std::string unavailable_reason();
/// After a kernel has trapped, every CUDA call fails; where `explain` (the GPU world's failure
/// record) then says why, the Error carries that first. Null: none.
void set_failure_explainer(std::string (*explain)());

/// A CUDA device's properties, as the driver gives them.
struct DeviceInfo {
  int ordinal = 0;   ///< the device's CUDA ordinal (in this process's CUDA_VISIBLE_DEVICES)
  std::string name;  ///< as cuDeviceGetName gives it ("NVIDIA H100 80GB HBM3")
  /// The compute capability, major and minor (9 and 0 for Hopper).
  ///@{
  int cc_major = 0, cc_minor = 0;
  ///@}
  int sms = 0;  ///< streaming multiprocessors
  /// The most shared memory a block may have once it opts in (past 48 KiB it must), in bytes.
  size_t max_shared_per_block_optin = 0;
  /// The memory's peak, in bytes a second: twice its clock times its bus's width (HBM and GDDR
  /// move data on both edges); 0 where the driver does not say.
  double memory_bytes_per_s = 0;
  /// The GPU's PCI domain, bus and device numbers in one word: the same on every process that
  /// uses this GPU, whatever ordinal its CUDA_VISIBLE_DEVICES gives it.
  uint64_t pci_location = 0;
  /// What tiledist compiles for here: "sm_90a" on Hopper (9.0), "sm_90" on newer GPUs (its PTX,
  /// compiled for them when loaded), "sm_80" on Ampere and Ada (8.x); an Error on older ones.
  std::string arch() const;
};

/// The current device (ordinal $TILEDIST_DEVICE, else the rank's local rank modulo the count,
/// else 0), with its primary context made current on the calling thread.
const DeviceInfo& device();

/// Device memory (free ignores null). copy_to_device, copy_to_host and memset have completed
/// when they return (what a rank wrote before barrier_all() is there for its peers);
/// copy_device_to_device is queued on the default stream, as cuMemcpyDtoD is; synchronize waits
/// for all of the device's work (cuCtxSynchronize). (Streams, events and their copies:
/// runtime/stream.h.)
///@{
void* malloc(size_t bytes);
void free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void memset(void* dst, int value, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void synchronize();
///@}

/// A TMA tensor map (CUtensorMap): what cp.async.bulk.tensor reads to copy a box of a tensor.
struct alignas(64) TensorMap {
  unsigned char bytes[128] = {};  ///< the driver's encoding, opaque
};
/// A tensor of `rank` dimensions (2 to 5), the contiguous one first: dims[i] elements along
/// dimension i, stride_bytes[i - 1] between consecutive indices of dimension i > 0; copied in
/// boxes of box[0] x box[1] x ... elements with the 128-byte swizzle (box[0] x element_bytes =
/// 128).
struct TensorMapShape {
  void* base = nullptr;   ///< the tensor's first element, in device memory (16-byte aligned)
  int element_bytes = 2;  ///< 1 (read as 8-bit integers) or 2
  bool bf16 = true;       ///< 2-byte elements: bf16, else f16
  int rank = 2;           ///< the dimensions used, 2 to 5
  /// dims[i]: elements along dimension i; stride_bytes[i - 1]: bytes between consecutive indices
  /// of dimension i > 0 (multiples of 16).
  ///@{
  uint64_t dims[5] = {}, stride_bytes[4] = {};
  ///@}
  unsigned box[5] = {1, 1, 1, 1, 1};  ///< elements of a box along each dimension
};
/// Encodes the tensor map (cuTensorMapEncodeTiled); throws Error naming the shape it rejects.
TensorMap encode_tensor_map(const TensorMapShape& t);
/// 32 KiB of zeros in device memory (allocated once): what a tensor map of an empty tensor
/// points at (256 rows of 128 bytes, every box of which reads as zeros).
void* zeros_for_tensor_maps();

/// CUDA virtual memory (VMM) on the current device, for heaps that other processes map:
/// physical memory exportable as a POSIX file descriptor, address ranges, mappings (with
/// read-write access for the current device, peers' memory included where P2P allows).
///
/// vmm_granularity: the recommended granularity of sizes and addresses, in bytes. vmm_create:
/// physical memory (a handle); vmm_export: a POSIX file descriptor for it, which the caller
/// closes; vmm_import: a handle from a peer's descriptor; vmm_release: drops a handle.
/// vmm_reserve: an address range, aligned to the granularity; vmm_map: maps a handle's memory
/// (from its start) at `at`; vmm_unmap and vmm_free_range undo vmm_map and vmm_reserve. The
/// releases and frees ignore null and do nothing once the driver is gone.
///@{
size_t vmm_granularity();
uint64_t vmm_create(size_t bytes);
int vmm_export(uint64_t handle);  // a file descriptor the caller closes
uint64_t vmm_import(int fd);
void vmm_release(uint64_t handle);
void* vmm_reserve(size_t bytes);
void vmm_map(void* at, size_t bytes, uint64_t handle);
void vmm_unmap(void* at, size_t bytes);
void vmm_free_range(void* at, size_t bytes);
///@}
/// Pinned, zeroed host memory that kernels read and write at `*device_address` (it stays
/// readable by the host after a kernel has trapped).
void* host_mapped_alloc(size_t bytes, void** device_address);
/// Frees host_mapped_alloc's memory (null: nothing).
void host_mapped_free(void* p);

/// `count` elements of T in device memory, copied to and from host vectors.
template <class T>
class DeviceArray {
 public:
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  /// Copies the first min(host.size(), size()) elements of `host` in (done when it returns).
  void upload(const std::vector<T>& host) {
    copy_to_device(ptr_, host.data(), std::min(host.size(), count_) * sizeof(T));
  }
  /// The size() elements, copied out.
  std::vector<T> download() const {
    std::vector<T> host(count_);
    copy_to_host(host.data(), ptr_, count_ * sizeof(T));
    return host;
  }
  T* data() const { return ptr_; }        ///< the device address
  size_t size() const { return count_; }  ///< in elements

 protected:
  /// `count` elements at `p`, which the derived class allocated and frees.
  DeviceArray(size_t count, void* p) : count_(count), ptr_(static_cast<T*>(p)) {}
  ~DeviceArray() = default;
  size_t count_;  ///< elements
  T* ptr_;        ///< the device address
};

/// Device memory holding `count` elements of T, freed with the object.
template <class T>
class Buffer : public DeviceArray<T> {
 public:
  /// `count` elements, not initialized; or a copy of `host`.
  ///@{
  explicit Buffer(size_t count) : DeviceArray<T>(count, cuda::malloc(count * sizeof(T))) {}
  explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) { this->upload(host); }
  ///@}
  ~Buffer() { cuda::free(this->ptr_); }
};

/// Device memory given by address (and element count, 0 when unknown), for kernel launches.
template <class T>
struct DevicePtr {
  T* ptr;        ///< the device address (passed as it is, not copied)
  size_t count;  ///< elements (0: unknown); the extent that TILEDIST_CHECK_BOUNDS=1 checks
};

}  // namespace tiledist::cuda
