// The CUDA backend's runtime: the driver API through dlopen("libcuda.so.1"), so the same build
// runs where there is no driver (available() is false there). Every failing call throws Error
// naming the call and the CUDA error name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tiledist::cuda {

/// Whether a CUDA driver and at least one device are present (never throws).
bool available();
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
/// default stream, as cuMemcpyDtoD is.
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

/// A module loaded from PTX; the driver's JIT log is in the Error when loading fails.
class Module {
 public:
  Module(const std::string& ptx, const std::string& name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Launches `entry` with `args` (pointers to each argument's value) on the default stream.
  void launch(const std::string& entry, const int grid[3], int threads, size_t shared_bytes, void** args,
              void* stream = nullptr);

 private:
  void* module_ = nullptr;
  std::string name_;
  std::mutex mutex_;  // guards the cached function
  void* function_ = nullptr;
  std::string entry_;
  size_t shared_set_ = 0;  // the dynamic shared memory the function is allowed
};

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

/// A stream of its own (it does not synchronize with the default stream): work launched on it
/// runs in order, concurrently with other streams' work.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Waits for everything launched on the stream.
  void synchronize() const;
  /// Whether everything launched on the stream has finished (never blocks).
  bool idle() const;
  /// The CUstream (for launches and interop).
  void* handle() const { return stream_; }
  /// The context's default (legacy) stream: it waits for, and is waited for by, the work of
  /// the default stream's other users (host copies, launches without a stream).
  static const Stream& legacy();

 private:
  struct Legacy {};
  explicit Stream(Legacy) {}
  void* stream_ = nullptr;
};

/// A point in a stream's work: recorded on a stream, waited for by the host or by another
/// stream, and timed against another event.
class Event {
 public:
  /// `timing`: whether elapsed_since may measure it (events without are cheaper to record).
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Marks the current end of `stream`'s work (null: the default stream).
  void record(const Stream* stream = nullptr);
  /// Makes `stream`'s later work wait for this event (the host does not block).
  void make_wait(const Stream& stream) const;
  void synchronize() const;
  bool done() const;
  /// Milliseconds from `start` to this event; both recorded and complete.
  float elapsed_since(const Event& start) const;

 private:
  void* event_ = nullptr;
};

/// Copy-engine producers, in `stream`'s order: a device-to-device copy (peers' memory mapped
/// here included), and a signal word written (after the stream's earlier writes are visible)
/// or awaited (until it is at least `value`) by the stream itself.
void copy_async(void* dst, const void* src, size_t bytes, const Stream& stream);
void write_value(void* word, uint32_t value, const Stream& stream);
void wait_value(void* word, uint32_t value, const Stream& stream);

/// Elapsed milliseconds between two points on the default stream, measured with CUDA events.
class Timer {
 public:
  Timer();
  ~Timer();
  void start();
  float stop();  // synchronizes

 private:
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace tiledist::cuda
