// The HIP backend's runtime, for AMD GPUs: HIP through dlopen("libamdhip64.so"), so the same
// build runs where there is no ROCm (available() is false there). Every failing call throws
// Error naming the call and the HIP error. It loads the code objects the AMDGCN backend links
// (checking their arch against the device's first), launches them, and gives streams, events,
// stream memory operations and IPC handles (how processes of one host map each other's
// symmetric heaps).
//
// Written against Debian's ROCm 5.2 headers and unit-tested on machines without an AMD GPU:
// none of it has run on one yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace tiledist::hip {

/// Whether the HIP runtime and at least one AMD GPU are present (never throws).
bool available();
/// Why not, when available() is false.
std::string unavailable_reason();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string arch;  // "gfx942"
  int compute_units = 0;
};
/// The current device (ordinal $TILEDIST_DEVICE, else the rank's local rank modulo the count,
/// else 0), made current on the calling thread.
const DeviceInfo& device();

/// The arch of a HIP gcnArchName: "gfx942:sramecc+:xnack-" is gfx942.
std::string arch_of(const std::string& gcn_arch_name);
/// The arch a code object was linked for (its ELF header's EF_AMDGPU_MACH); throws Error saying
/// what the bytes are instead where they are not an AMDGPU code object of a known arch.
std::string code_object_arch(const std::string& binary);

void* malloc(size_t bytes);
/// Fine-grained device memory: coherent while kernels run, for words that peers and the host
/// read and write during a kernel (signals, the symmetric heap).
void* malloc_fine_grained(size_t bytes);
void free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void memset(void* dst, int value, size_t bytes);
void synchronize();
/// Pinned, zeroed host memory that kernels read and write at `*device_address` (it stays
/// readable by the host after a kernel has trapped).
void* host_mapped_alloc(size_t bytes, void** device_address);

/// A stream of its own: work launched on it runs in order, concurrently with other streams'.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void synchronize() const;
  void* handle() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

/// A point in a stream's work, for the host or another stream to wait for, and for timing.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream* stream = nullptr);
  void make_wait(const Stream& stream) const;
  void synchronize() const;
  /// Milliseconds from `start` to this event.
  float elapsed_since(const Event& start) const;

 private:
  void* event_ = nullptr;
};

/// Copy-engine producers, in `stream`'s order: a device-to-device copy, and a signal word
/// written or awaited (until it is at least `value`) by the stream itself.
void copy_async(void* dst, const void* src, size_t bytes, const Stream& stream);
void write_value(void* word, uint32_t value, const Stream& stream);
void wait_value(void* word, uint32_t value, const Stream& stream);

/// A code object loaded on the current device (its arch checked against the device's first).
class Module {
 public:
  Module(const std::string& code_object, const std::string& name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Launches `entry` with `args` (pointers to each argument's value) on `stream` (null: the
  /// default stream). LDS is static in our code objects: nothing is given at launch.
  void launch(const std::string& entry, const int grid[3], int threads, void** args, void* stream = nullptr);

 private:
  void* module_ = nullptr;
  std::string name_;
  std::mutex mutex_;  // guards the cached function
  void* function_ = nullptr;
  std::string entry_;
};

/// IPC: a handle to device memory (from malloc) that other processes of this host open to map
/// it; the bytes travel as they are (over the host world's bootstrap).
struct IpcHandle {
  unsigned char bytes[64] = {};
};
IpcHandle ipc_export(void* p);
/// Maps a peer's memory here (peer access enabled); closed with ipc_close.
void* ipc_import(const IpcHandle& handle);
void ipc_close(void* p);

}  // namespace tiledist::hip
