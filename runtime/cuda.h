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

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  size_t max_shared_per_block_optin = 0;
  /// The GPU's PCI domain, bus and device numbers in one word: the same on every process that
  /// uses this GPU, whatever ordinal its CUDA_VISIBLE_DEVICES gives it.
  uint64_t pci_location = 0;
  /// "sm_90a" for Hopper, "sm_80" for Ampere and Ada (what our code generator targets).
  std::string arch() const;
};

/// The current device (ordinal $TILEDIST_DEVICE, else the rank's local rank modulo the count,
/// else 0), with its primary context made current on the calling thread.
const DeviceInfo& device();

/// Device memory. copy_to_device and memset have completed when they return (what a rank
/// wrote before barrier_all() is there for its peers); copy_device_to_device is queued on the
/// default stream, as cuMemcpyDtoD is. (Streams, events and their copies: runtime/stream.h.)
void* malloc(size_t bytes);
void free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void memset(void* dst, int value, size_t bytes);
void copy_device_to_device(void* dst, const void* src, size_t bytes);
void synchronize();

/// A TMA tensor map (CUtensorMap): what cp.async.bulk.tensor reads to copy a box of a tensor.
struct alignas(64) TensorMap {
  unsigned char bytes[128] = {};
};
/// A tensor of `rank` dimensions (2 to 5), the contiguous one first: dims[i] elements along
/// dimension i, stride_bytes[i - 1] between consecutive indices of dimension i > 0; copied in
/// boxes of box[0] x box[1] x ... elements with the 128-byte swizzle (box[0] x element_bytes =
/// 128).
struct TensorMapShape {
  void* base = nullptr;
  int element_bytes = 2;
  bool bf16 = true;  // 2-byte elements: bf16, else f16
  int rank = 2;
  uint64_t dims[5] = {}, stride_bytes[4] = {};
  unsigned box[5] = {1, 1, 1, 1, 1};
};
/// Encodes the tensor map (cuTensorMapEncodeTiled); throws Error naming the shape it rejects.
TensorMap encode_tensor_map(const TensorMapShape& t);
/// 32 KiB of zeros in device memory (allocated once): what a tensor map of an empty tensor
/// points at (256 rows of 128 bytes, every box of which reads as zeros).
void* zeros_for_tensor_maps();

/// CUDA virtual memory (VMM) on the current device, for heaps that other processes map:
/// physical memory exportable as a POSIX file descriptor, address ranges, mappings (with
/// read-write access for the current device, peers' memory included where P2P allows).
size_t vmm_granularity();
uint64_t vmm_create(size_t bytes);
int vmm_export(uint64_t handle);  // a file descriptor the caller closes
uint64_t vmm_import(int fd);
void vmm_release(uint64_t handle);
void* vmm_reserve(size_t bytes);
void vmm_map(void* at, size_t bytes, uint64_t handle);
void vmm_unmap(void* at, size_t bytes);
void vmm_free_range(void* at, size_t bytes);
/// Pinned, zeroed host memory that kernels read and write at `*device_address` (it stays
/// readable by the host after a kernel has trapped).
void* host_mapped_alloc(size_t bytes, void** device_address);
void host_mapped_free(void* p);

/// `count` elements of T in device memory, copied to and from host vectors.
template <class T>
class DeviceArray {
 public:
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const std::vector<T>& host) {
    copy_to_device(ptr_, host.data(), std::min(host.size(), count_) * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    copy_to_host(host.data(), ptr_, count_ * sizeof(T));
    return host;
  }
  T* data() const { return ptr_; }
  size_t size() const { return count_; }

 protected:
  DeviceArray(size_t count, void* p) : count_(count), ptr_(static_cast<T*>(p)) {}
  ~DeviceArray() = default;
  size_t count_;
  T* ptr_;
};

/// Device memory holding `count` elements of T, freed with the object.
template <class T>
class Buffer : public DeviceArray<T> {
 public:
  explicit Buffer(size_t count) : DeviceArray<T>(count, cuda::malloc(count * sizeof(T))) {}
  explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) { this->upload(host); }
  ~Buffer() { cuda::free(this->ptr_); }
};

/// Device memory given by address (and element count, 0 when unknown), for kernel launches.
template <class T>
struct DevicePtr {
  T* ptr;
  size_t count;
};

}  // namespace tiledist::cuda
