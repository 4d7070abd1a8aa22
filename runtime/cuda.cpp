#include "runtime/cuda.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/world.h"
#include "support/support.h"

namespace tiledist::cuda {

namespace {

// The few driver types and entry points we use (declared here: no CUDA headers needed).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;
using CUdeviceptr = unsigned long long;
constexpr int kAttrMultiprocessors = 16;
constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;
constexpr int kAttrMaxSharedOptin = 97;
constexpr int kAttrPciBus = 33, kAttrPciDevice = 34, kAttrPciDomain = 50;
constexpr int kAttrMemoryClockKhz = 36, kAttrMemoryBusBits = 37;
constexpr int kFuncAttrMaxDynamicShared = 8;
// CUmemAllocationProp, CUmemLocation and CUmemAccessDesc, laid out as cuda.h lays them out.
struct MemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};
struct AllocationProp {
  int type;                    // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requested_handle_types;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
  MemLocation location;
  void* win32_metadata;
  unsigned char compression_type, gpu_direct_rdma_capable;
  unsigned short usage;
  unsigned char reserved[4];
};
static_assert(sizeof(AllocationProp) == 32, "CUmemAllocationProp is 32 bytes");
struct AccessDesc {
  MemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
};
constexpr int kHandlePosixFd = 1;
constexpr int kGranularityRecommended = 1;
constexpr unsigned kHostAllocPortable = 1, kHostAllocDeviceMap = 2;
constexpr int kJitInfoLogBuffer = 3, kJitInfoLogBufferSize = 4, kJitErrorLogBuffer = 5, kJitErrorLogBufferSize = 6;

struct Driver {
  void* lib = nullptr;
  std::string error;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  // Virtual memory management: heaps shared between processes.
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const AllocationProp*, int);
  CUresult (*cuMemCreate)(uint64_t*, size_t, const AllocationProp*, unsigned long long);
  CUresult (*cuMemRelease)(uint64_t);
  CUresult (*cuMemExportToShareableHandle)(void*, uint64_t, int, unsigned long long);
  CUresult (*cuMemImportFromShareableHandle)(uint64_t*, void*, int);
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, uint64_t, unsigned long long);
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const AccessDesc*, size_t);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  // Copy-engine producers: asynchronous copies and signal words written or awaited by a stream.
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
  CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
  // Stream capture into graphs (CUDA 11.4 and later; optional: null where the driver lacks them).
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, void**) = nullptr;
  CUresult (*cuStreamIsCapturing)(CUstream, int*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(void**, void*, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(void*, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(void*) = nullptr;
  CUresult (*cuGraphDestroy)(void*) = nullptr;
  // TMA tensor maps (CUDA 12 drivers; optional: null where the driver lacks it).
  CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const unsigned*,
                                     const unsigned*, int, int, int, int) = nullptr;

  template <class F>
  bool bind(F& fn, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (void* p = dlsym(lib, n)) {
        fn = reinterpret_cast<F>(p);
        return true;
      }
    error = str_cat("libcuda.so.1 lacks ", *names.begin());
    return false;
  }

  bool load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = str_cat("cannot load libcuda.so.1 (", dlerror(), ")");
      return false;
    }
    return bind(cuInit, {"cuInit"}) && bind(cuGetErrorName, {"cuGetErrorName"}) &&
           bind(cuDeviceGetCount, {"cuDeviceGetCount"}) && bind(cuDeviceGet, {"cuDeviceGet"}) &&
           bind(cuDeviceGetName, {"cuDeviceGetName"}) && bind(cuDeviceGetAttribute, {"cuDeviceGetAttribute"}) &&
           bind(cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}) && bind(cuCtxSetCurrent, {"cuCtxSetCurrent"}) &&
           bind(cuCtxSynchronize, {"cuCtxSynchronize"}) && bind(cuMemAlloc, {"cuMemAlloc_v2"}) &&
           bind(cuMemFree, {"cuMemFree_v2"}) && bind(cuMemcpyHtoD, {"cuMemcpyHtoD_v2"}) &&
           bind(cuMemcpyDtoH, {"cuMemcpyDtoH_v2"}) && bind(cuMemsetD8, {"cuMemsetD8_v2"}) &&
           bind(cuMemcpyDtoD, {"cuMemcpyDtoD_v2"}) && bind(cuPointerGetAttribute, {"cuPointerGetAttribute"}) &&
           bind(cuModuleLoadDataEx, {"cuModuleLoadDataEx"}) && bind(cuModuleUnload, {"cuModuleUnload"}) &&
           bind(cuModuleGetFunction, {"cuModuleGetFunction"}) && bind(cuFuncSetAttribute, {"cuFuncSetAttribute"}) &&
           bind(cuLaunchKernel, {"cuLaunchKernel"}) && bind(cuEventCreate, {"cuEventCreate"}) &&
           bind(cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"}) && bind(cuEventRecord, {"cuEventRecord"}) &&
           bind(cuEventSynchronize, {"cuEventSynchronize"}) &&
           bind(cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}) &&
           bind(cuEventQuery, {"cuEventQuery"}) && bind(cuStreamCreate, {"cuStreamCreate"}) &&
           bind(cuStreamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"}) &&
           bind(cuStreamSynchronize, {"cuStreamSynchronize"}) && bind(cuStreamQuery, {"cuStreamQuery"}) &&
           bind(cuStreamWaitEvent, {"cuStreamWaitEvent"}) &&
           bind(cuMemGetAllocationGranularity, {"cuMemGetAllocationGranularity"}) &&
           bind(cuMemCreate, {"cuMemCreate"}) && bind(cuMemRelease, {"cuMemRelease"}) &&
           bind(cuMemExportToShareableHandle, {"cuMemExportToShareableHandle"}) &&
           bind(cuMemImportFromShareableHandle, {"cuMemImportFromShareableHandle"}) &&
           bind(cuMemAddressReserve, {"cuMemAddressReserve"}) && bind(cuMemAddressFree, {"cuMemAddressFree"}) &&
           bind(cuMemMap, {"cuMemMap"}) && bind(cuMemUnmap, {"cuMemUnmap"}) &&
           bind(cuMemSetAccess, {"cuMemSetAccess"}) && bind(cuMemHostAlloc, {"cuMemHostAlloc"}) &&
           bind(cuMemHostGetDevicePointer, {"cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer"}) &&
           bind(cuMemFreeHost, {"cuMemFreeHost"}) && bind(cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}) &&
           bind(cuStreamWriteValue32, {"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}) &&
           bind(cuStreamWaitValue32, {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"}) && optional_symbols();
  }
  bool optional_symbols() {
    cuTensorMapEncodeTiled = reinterpret_cast<decltype(cuTensorMapEncodeTiled)>(dlsym(lib, "cuTensorMapEncodeTiled"));
    // (cuStreamBeginCapture_v2 takes the capture mode; the first form had none)
    const bool graphs =
        bind(cuStreamBeginCapture, {"cuStreamBeginCapture_v2"}) && bind(cuStreamEndCapture, {"cuStreamEndCapture"}) &&
        bind(cuStreamIsCapturing, {"cuStreamIsCapturing"}) &&
        bind(cuGraphInstantiateWithFlags, {"cuGraphInstantiateWithFlags"}) && bind(cuGraphLaunch, {"cuGraphLaunch"}) &&
        bind(cuGraphExecDestroy, {"cuGraphExecDestroy"}) && bind(cuGraphDestroy, {"cuGraphDestroy"});
    if (!graphs) {  // (graphs are refused where used; everything else works)
      graph_error = error;
      error.clear();
    }
    return true;
  }
  std::string graph_error;  // why graphs are not available ("" where they are)
};

Driver* driver_or_null() {
  static Driver* d = [] {
    auto* drv = new Driver();
    if (drv->load()) {
      CUresult r = drv->cuInit(0);
      int n = 0;
      if (r != 0)
        drv->error = str_cat("cuInit failed with error ", r);
      else if (drv->cuDeviceGetCount(&n) != 0 || n == 0)
        drv->error = "no CUDA device found";
    }
    return drv;
  }();
  return d;
}

Driver& driver() {
  Driver* d = driver_or_null();
  if (!d->error.empty()) throw Error("tiledist: CUDA is not available: " + d->error);
  return *d;
}

std::atomic<std::string (*)()> failure_explainer{nullptr};

void check(CUresult r, const char* call) {
  if (r == 0) return;
  const char* name = "unknown error";
  driver().cuGetErrorName(r, &name);
  std::string what = str_cat(call, " failed: ", name, " (", r, ")");
  // After a kernel has trapped every call fails: say why the kernel gave up, where we know.
  if (auto explain = failure_explainer.load()) {
    std::string why = explain();
    if (!why.empty()) throw Error(str_cat(why, " (", what, ")"));
  }
  throw Error("tiledist: " + what);
}
#define TD_CU(call) check(driver().call, #call)

}  // namespace

bool available() { return driver_or_null()->error.empty(); }
void set_failure_explainer(std::string (*explain)()) { failure_explainer = explain; }
std::string unavailable_reason() { return driver_or_null()->error; }

std::string DeviceInfo::arch() const {
  if (cc_major == 9 && cc_minor == 0) return "sm_90a";
  // Newer GPUs run sm_90's PTX, compiled for them when loaded (sm_90a's features are Hopper's
  // alone: its PTX loads nowhere else).
  if (cc_major >= 9) return "sm_90";
  if (cc_major == 8) return "sm_80";
  throw Error(str_cat("tiledist: ", name, " (compute capability ", cc_major, ".", cc_minor,
                      ") is older than the oldest GPU tiledist compiles for (8.0, Ampere)"));
}

const DeviceInfo& device() {
  static DeviceInfo info;
  static std::once_flag once;
  static void* ctx = nullptr;
  std::call_once(once, [] {
    Driver& d = driver();
    int count = 0;
    TD_CU(cuDeviceGetCount(&count));
    const int ordinal = runtime::device_ordinal(count, "CUDA device");
    CUdevice dev;
    TD_CU(cuDeviceGet(&dev, ordinal));
    char name[256] = {0};
    TD_CU(cuDeviceGetName(name, sizeof name, dev));
    info.ordinal = ordinal;
    info.name = name;
    int v = 0;
    TD_CU(cuDeviceGetAttribute(&info.cc_major, kAttrCcMajor, dev));
    TD_CU(cuDeviceGetAttribute(&info.cc_minor, kAttrCcMinor, dev));
    TD_CU(cuDeviceGetAttribute(&info.sms, kAttrMultiprocessors, dev));
    TD_CU(cuDeviceGetAttribute(&v, kAttrMaxSharedOptin, dev));
    info.max_shared_per_block_optin = static_cast<size_t>(v);
    int bus = 0, device_id = 0, domain = 0;
    TD_CU(cuDeviceGetAttribute(&bus, kAttrPciBus, dev));
    TD_CU(cuDeviceGetAttribute(&device_id, kAttrPciDevice, dev));
    TD_CU(cuDeviceGetAttribute(&domain, kAttrPciDomain, dev));
    info.pci_location = uint64_t(uint32_t(domain)) << 32 | uint64_t(uint32_t(bus)) << 16 | uint32_t(device_id);
    // (a peak for benchmarks to say what share of it they reach; 0 where the driver does not say)
    int clock_khz = 0, bus_bits = 0;
    if (d.cuDeviceGetAttribute(&clock_khz, kAttrMemoryClockKhz, dev) == 0 &&
        d.cuDeviceGetAttribute(&bus_bits, kAttrMemoryBusBits, dev) == 0)
      info.memory_bytes_per_s = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8;
    TD_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    (void)d;
  });
  check(driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return info;
}

void* malloc(size_t bytes) {
  device();
  CUdeviceptr p = 0;
  TD_CU(cuMemAlloc(&p, bytes ? bytes : 1));
  return reinterpret_cast<void*>(p);
}
void free(void* p) {
  if (p && available()) driver().cuMemFree(reinterpret_cast<CUdeviceptr>(p));
}
// From pageable memory cuMemcpyHtoD may return before its DMA lands, and cuMemsetD8 is
// asynchronous: both are waited for on the legacy stream they went on, so that what a rank
// wrote before barrier_all() is there for its peers (two ranks on one GPU read zeros without).
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  TD_CU(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes));
  TD_CU(cuStreamSynchronize(nullptr));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) TD_CU(cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes));
}
void memset(void* dst, int value, size_t bytes) {
  if (!bytes) return;
  TD_CU(cuMemsetD8(reinterpret_cast<CUdeviceptr>(dst), static_cast<unsigned char>(value), bytes));
  TD_CU(cuStreamSynchronize(nullptr));
}
void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  TD_CU(cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes));
}
void synchronize() { TD_CU(cuCtxSynchronize()); }

void* zeros_for_tensor_maps() {
  static void* zeros = [] {
    void* p = cuda::malloc(256 * 128);
    cuda::memset(p, 0, 256 * 128);
    return p;
  }();
  return zeros;
}

TensorMap encode_tensor_map(const TensorMapShape& t) {
  Driver& d = driver();
  if (!d.cuTensorMapEncodeTiled)
    throw Error("tiledist: this CUDA driver lacks cuTensorMapEncodeTiled (TMA needs CUDA 12)");
  // CUtensorMapDataType: UINT8 0, FLOAT16 6, BFLOAT16 9; swizzle 128B 3; L2 promotion 256B 3;
  // out-of-bounds elements read as zeros (fill NONE 0).
  if (t.element_bytes != 1 && t.element_bytes != 2)
    throw Error(str_cat("tiledist: a tensor map of ", t.element_bytes, "-byte elements (only 1 and 2 are encoded)"));
  int type = t.element_bytes == 1 ? 0 : t.bf16 ? 9 : 6;
  const unsigned element_strides[5] = {1, 1, 1, 1, 1};
  TensorMap m;
  CUresult r = d.cuTensorMapEncodeTiled(m.bytes, type, static_cast<unsigned>(t.rank), t.base, t.dims, t.stride_bytes,
                                        t.box, element_strides, 0, 3, 3, 0);
  if (r != 0) {
    const char* name = "unknown error";
    d.cuGetErrorName(r, &name);
    std::string dims, strides, box;
    for (int i = 0; i < t.rank; ++i) {
      dims += str_cat(i ? " x " : "", t.dims[i]);
      box += str_cat(i ? " x " : "", t.box[i]);
      if (i) strides += str_cat(i > 1 ? ", " : "", t.stride_bytes[i - 1]);
    }
    throw Error(str_cat("tiledist: cuTensorMapEncodeTiled failed: ", name, " (", r, ") for a tensor at ", t.base,
                        " of ", dims, " elements of ", t.element_bytes, " bytes (contiguous dimension first), strides ",
                        strides, " bytes, boxes of ", box,
                        " (the base must be 16-byte aligned and every stride a multiple of 16 bytes)"));
  }
  return m;
}

namespace {
AllocationProp device_allocation() {
  AllocationProp prop{};
  prop.type = 1;
  prop.requested_handle_types = kHandlePosixFd;
  prop.location = {1, device().ordinal};
  return prop;
}
}  // namespace

size_t vmm_granularity() {
  AllocationProp prop = device_allocation();
  size_t g = 0;
  TD_CU(cuMemGetAllocationGranularity(&g, &prop, kGranularityRecommended));
  return g;
}
uint64_t vmm_create(size_t bytes) {
  AllocationProp prop = device_allocation();
  uint64_t handle = 0;
  TD_CU(cuMemCreate(&handle, bytes, &prop, 0));
  return handle;
}
int vmm_export(uint64_t handle) {
  int fd = -1;
  TD_CU(cuMemExportToShareableHandle(&fd, handle, kHandlePosixFd, 0));
  return fd;
}
uint64_t vmm_import(int fd) {
  uint64_t handle = 0;
  TD_CU(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kHandlePosixFd));
  return handle;
}
void vmm_release(uint64_t handle) {
  if (handle && available()) driver().cuMemRelease(handle);
}
void* vmm_reserve(size_t bytes) {
  CUdeviceptr p = 0;
  TD_CU(cuMemAddressReserve(&p, bytes, vmm_granularity(), 0, 0));
  return reinterpret_cast<void*>(p);
}
void vmm_map(void* at, size_t bytes, uint64_t handle) {
  TD_CU(cuMemMap(reinterpret_cast<CUdeviceptr>(at), bytes, 0, handle, 0));
  AccessDesc access{{1, device().ordinal}, 3};
  TD_CU(cuMemSetAccess(reinterpret_cast<CUdeviceptr>(at), bytes, &access, 1));
}
void vmm_unmap(void* at, size_t bytes) {
  if (at && available()) driver().cuMemUnmap(reinterpret_cast<CUdeviceptr>(at), bytes);
}
void vmm_free_range(void* at, size_t bytes) {
  if (at && available()) driver().cuMemAddressFree(reinterpret_cast<CUdeviceptr>(at), bytes);
}
void* host_mapped_alloc(size_t bytes, void** device_address) {
  device();
  void* p = nullptr;
  TD_CU(cuMemHostAlloc(&p, bytes, kHostAllocPortable | kHostAllocDeviceMap));
  std::memset(p, 0, bytes);
  CUdeviceptr d = 0;
  TD_CU(cuMemHostGetDevicePointer(&d, p, 0));
  *device_address = reinterpret_cast<void*>(d);
  return p;
}
void host_mapped_free(void* p) {
  if (p && available()) driver().cuMemFreeHost(p);
}

namespace {

constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDisableTiming = 2;
constexpr CUresult kErrorNotReady = 600;

/// A query's answer: finished (true), not yet (false), or an error (thrown).
bool finished(CUresult r, const char* call) {
  if (r == kErrorNotReady) return false;
  check(r, call);
  return true;
}

/// The driver's side of runtime/stream.h. (Destroys after the driver has gone, at exit, or
/// after a kernel has trapped, do nothing.)
class CudaApi final : public runtime::GpuApi {
 public:
  const char* name() const override { return "CUDA"; }

  void* stream_create() const override {
    device();
    CUstream s = nullptr;
    TD_CU(cuStreamCreate(&s, kStreamNonBlocking));
    return s;
  }
  void stream_destroy(void* stream) const noexcept override {
    if (available()) driver().cuStreamDestroy(stream);
  }
  void stream_synchronize(void* stream) const override { TD_CU(cuStreamSynchronize(stream)); }
  bool stream_idle(void* stream) const override { return finished(driver().cuStreamQuery(stream), "cuStreamQuery"); }

  void* event_create(bool timing) const override {
    device();
    CUevent e = nullptr;
    TD_CU(cuEventCreate(&e, timing ? 0 : kEventDisableTiming));
    return e;
  }
  void event_destroy(void* event) const noexcept override {
    if (available()) driver().cuEventDestroy(event);
  }
  void event_record(void* event, void* stream) const override { TD_CU(cuEventRecord(event, stream)); }
  void stream_wait_event(void* stream, void* event) const override { TD_CU(cuStreamWaitEvent(stream, event, 0)); }
  void event_synchronize(void* event) const override { TD_CU(cuEventSynchronize(event)); }
  bool event_done(void* event) const override { return finished(driver().cuEventQuery(event), "cuEventQuery"); }
  float event_elapsed_ms(void* start, void* end) const override {
    float ms = 0;
    TD_CU(cuEventElapsedTime(&ms, start, end));
    return ms;
  }

  void copy_async(void* dst, const void* src, size_t bytes, void* stream) const override {
    TD_CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, stream));
  }
  void write_value(void* word, uint32_t value, void* stream) const override {
    TD_CU(cuStreamWriteValue32(stream, reinterpret_cast<CUdeviceptr>(word), value, 0));  // after a fence
  }
  void wait_value(void* word, uint32_t value, void* stream) const override {
    constexpr unsigned kGeq = 0;  // CU_STREAM_WAIT_VALUE_GEQ (cyclic comparison)
    TD_CU(cuStreamWaitValue32(stream, reinterpret_cast<CUdeviceptr>(word), value, kGeq));
  }

  /// Managed memory (CU_POINTER_ATTRIBUTE_IS_MANAGED: its memory type says where its pages are
  /// now), or memory of type CU_MEMORYTYPE_DEVICE on this process's GPU
  /// (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: another GPU's would fault without peer access). The
  /// host's own memory is unknown to the driver (an error): false.
  bool is_device_memory(const void* p) const override {
    constexpr int kMemoryType = 2, kIsManaged = 8, kDeviceOrdinal = 9, kMemoryTypeDevice = 2;
    if (!p) return false;
    const DeviceInfo& here = device();
    const auto at = reinterpret_cast<CUdeviceptr>(p);
    unsigned managed = 0, type = 0;
    int ordinal = -1;
    if (driver().cuPointerGetAttribute(&managed, kIsManaged, at) == 0 && managed) return true;
    return driver().cuPointerGetAttribute(&type, kMemoryType, at) == 0 && type == kMemoryTypeDevice &&
           driver().cuPointerGetAttribute(&ordinal, kDeviceOrdinal, at) == 0 && ordinal == here.ordinal;
  }

  /// The binary is PTX; the driver's JIT log is in the Error when loading fails.
  void* module_load(const std::string& ptx, const std::string& name) const override {
    device();
    char info[8192] = {0}, errors[8192] = {0};
    int options[] = {kJitInfoLogBuffer, kJitInfoLogBufferSize, kJitErrorLogBuffer, kJitErrorLogBufferSize};
    void* values[] = {info, reinterpret_cast<void*>(sizeof info), errors, reinterpret_cast<void*>(sizeof errors)};
    CUmodule m = nullptr;
    CUresult r = driver().cuModuleLoadDataEx(&m, ptx.c_str(), 4, options, values);
    if (r != 0) {
      const char* err = "unknown error";
      driver().cuGetErrorName(r, &err);
      throw Error(str_cat("tiledist: cuModuleLoadDataEx of kernel '", name, "' failed: ", err, "\n", errors, info));
    }
    return m;
  }
  void module_unload(void* module) const noexcept override {
    if (available()) driver().cuModuleUnload(module);
  }
  void* module_function(void* module, const std::string& entry, const std::string&) const override {
    CUfunction f = nullptr;
    TD_CU(cuModuleGetFunction(&f, module, entry.c_str()));
    return f;
  }
  /// Past 48 KiB a function must opt in to its dynamic shared memory.
  void allow_shared(void* function, size_t shared_bytes, const std::string& name) const override {
    if (shared_bytes <= size_t{48} * 1024) return;
    if (shared_bytes > device().max_shared_per_block_optin)
      throw Error(str_cat("tiledist: kernel '", name, "' needs ", shared_bytes, " bytes of shared memory; ",
                          device().name, " allows ", device().max_shared_per_block_optin));
    TD_CU(cuFuncSetAttribute(function, kFuncAttrMaxDynamicShared, static_cast<int>(shared_bytes)));
  }
  void launch(void* function, const int grid[3], int threads, size_t shared_bytes, void** args, void* stream,
              const std::string&) const override {
    check(driver().cuLaunchKernel(function, grid[0], grid[1], grid[2], threads, 1, 1,
                                  static_cast<unsigned>(shared_bytes), stream, args, nullptr),
          "cuLaunchKernel");
  }

  void capture_begin(void* stream) const override {
    constexpr int kCaptureModeRelaxed = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED
    TD_CU(cuStreamBeginCapture(graphs(stream), kCaptureModeRelaxed));
  }
  void* capture_end(void* stream) const override {
    void* graph = nullptr;
    TD_CU(cuStreamEndCapture(graphs(stream), &graph));
    void* exec = nullptr;
    const CUresult r = driver().cuGraphInstantiateWithFlags(&exec, graph, 0);
    driver().cuGraphDestroy(graph);  // (the executable graph keeps what it needs)
    check(r, "cuGraphInstantiateWithFlags");
    return exec;
  }
  bool capturing(void* stream) const override {
    int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
    if (stream && driver().cuStreamIsCapturing) TD_CU(cuStreamIsCapturing(stream, &status));
    return status != 0;
  }
  void graph_launch(void* graph, void* stream) const override { TD_CU(cuGraphLaunch(graph, stream)); }
  void graph_destroy(void* graph) const noexcept override {
    if (available() && driver().cuGraphExecDestroy) driver().cuGraphExecDestroy(graph);
  }

 private:
  /// `stream`, where the driver captures graphs (an Error says why not otherwise).
  static void* graphs(void* stream) {
    if (!driver().graph_error.empty())
      throw Error(str_cat("tiledist: CUDA graphs are not available: ", driver().graph_error));
    return stream;
  }
};

}  // namespace

const runtime::GpuApi& api() {
  static const CudaApi api;
  return api;
}

}  // namespace tiledist::cuda
