#include "runtime/hip.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "runtime/world.h"
#include "support/support.h"

#define __HIP_PLATFORM_AMD__
#include <hip/hip_runtime_api.h>

namespace tiledist::hip {

namespace {

/// The HIP entry points we use, bound by name from libamdhip64.so (types from its header).
struct Runtime {
  void* lib = nullptr;
  std::string error;
#define TD_HIP_FN(name) decltype(&::name) name = nullptr;
  TD_HIP_FN(hipInit)
  TD_HIP_FN(hipGetErrorName)
  TD_HIP_FN(hipGetDeviceCount)
  TD_HIP_FN(hipSetDevice)
  TD_HIP_FN(hipGetDeviceProperties)
  TD_HIP_FN(hipDeviceSynchronize)
  hipError_t (*hipMalloc)(void**, size_t) = nullptr;  // (the header overloads it for C++)
  TD_HIP_FN(hipExtMallocWithFlags)
  TD_HIP_FN(hipFree)
  TD_HIP_FN(hipMemcpy)
  TD_HIP_FN(hipMemset)
  TD_HIP_FN(hipMemcpyAsync)
  TD_HIP_FN(hipStreamCreateWithFlags)
  TD_HIP_FN(hipStreamDestroy)
  TD_HIP_FN(hipStreamSynchronize)
  TD_HIP_FN(hipStreamQuery)
  TD_HIP_FN(hipStreamWaitEvent)
  TD_HIP_FN(hipStreamWriteValue32)
  TD_HIP_FN(hipStreamWaitValue32)
  TD_HIP_FN(hipEventCreateWithFlags)
  TD_HIP_FN(hipEventQuery)
  TD_HIP_FN(hipEventDestroy)
  TD_HIP_FN(hipEventRecord)
  TD_HIP_FN(hipEventSynchronize)
  TD_HIP_FN(hipEventElapsedTime)
  TD_HIP_FN(hipModuleLoadData)
  TD_HIP_FN(hipModuleUnload)
  TD_HIP_FN(hipModuleGetFunction)
  TD_HIP_FN(hipModuleLaunchKernel)
  TD_HIP_FN(hipIpcGetMemHandle)
  TD_HIP_FN(hipIpcOpenMemHandle)
  TD_HIP_FN(hipIpcCloseMemHandle)
  hipError_t (*hipHostMalloc)(void**, size_t, unsigned) = nullptr;  // (overloaded for C++ too)
  TD_HIP_FN(hipHostGetDevicePointer)
  TD_HIP_FN(hipPointerGetAttributes)
  // Stream capture into graphs (optional: bound where the runtime has them, refused where not).
  TD_HIP_FN(hipStreamBeginCapture)
  TD_HIP_FN(hipStreamEndCapture)
  TD_HIP_FN(hipStreamIsCapturing)
  TD_HIP_FN(hipGraphInstantiate)
  TD_HIP_FN(hipGraphLaunch)
  TD_HIP_FN(hipGraphExecDestroy)
  TD_HIP_FN(hipGraphDestroy)
#undef TD_HIP_FN

  template <class F>
  bool bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    if (!fn) error = str_cat("libamdhip64.so lacks ", name);
    return fn != nullptr;
  }
  bool load() {
    for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      error = str_cat("cannot load libamdhip64.so (", dlerror(), ")");
      return false;
    }
#define TD_BIND(name) bind(name, #name)
    return TD_BIND(hipInit) && TD_BIND(hipGetErrorName) && TD_BIND(hipGetDeviceCount) && TD_BIND(hipSetDevice) &&
           TD_BIND(hipGetDeviceProperties) && TD_BIND(hipDeviceSynchronize) && TD_BIND(hipMalloc) &&
           TD_BIND(hipExtMallocWithFlags) && TD_BIND(hipFree) && TD_BIND(hipMemcpy) && TD_BIND(hipMemset) &&
           TD_BIND(hipMemcpyAsync) && TD_BIND(hipStreamCreateWithFlags) && TD_BIND(hipStreamDestroy) &&
           TD_BIND(hipStreamSynchronize) && TD_BIND(hipStreamQuery) && TD_BIND(hipStreamWaitEvent) &&
           TD_BIND(hipStreamWriteValue32) && TD_BIND(hipStreamWaitValue32) && TD_BIND(hipEventCreateWithFlags) &&
           TD_BIND(hipEventQuery) && TD_BIND(hipEventDestroy) && TD_BIND(hipEventRecord) &&
           TD_BIND(hipEventSynchronize) && TD_BIND(hipEventElapsedTime) && TD_BIND(hipModuleLoadData) &&
           TD_BIND(hipModuleUnload) && TD_BIND(hipModuleGetFunction) && TD_BIND(hipModuleLaunchKernel) &&
           TD_BIND(hipIpcGetMemHandle) && TD_BIND(hipIpcOpenMemHandle) && TD_BIND(hipIpcCloseMemHandle) &&
           TD_BIND(hipHostMalloc) && TD_BIND(hipHostGetDevicePointer) && TD_BIND(hipPointerGetAttributes) &&
           graph_symbols();
#undef TD_BIND
  }
  bool graph_symbols() {
    const std::string before = error;
    if (!(bind(hipStreamBeginCapture, "hipStreamBeginCapture") && bind(hipStreamEndCapture, "hipStreamEndCapture") &&
          bind(hipStreamIsCapturing, "hipStreamIsCapturing") && bind(hipGraphInstantiate, "hipGraphInstantiate") &&
          bind(hipGraphLaunch, "hipGraphLaunch") && bind(hipGraphExecDestroy, "hipGraphExecDestroy") &&
          bind(hipGraphDestroy, "hipGraphDestroy")))
      graph_error = error;  // (graphs are refused where used; everything else works)
    error = before;
    return true;
  }
  std::string graph_error;  // why graphs are not available ("" where they are)
};

/// The runtime, loaded and initialized once, with at least one device; or why not.
struct State {
  Runtime rt;
  bool ok = false;
  std::string why;
  State() {
    if (!rt.load()) {
      why = rt.error;
      return;
    }
    int count = 0;
    hipError_t e = rt.hipInit(0);
    if (e == hipSuccess) e = rt.hipGetDeviceCount(&count);
    if (e != hipSuccess || count == 0) {
      why = str_cat("no AMD GPU (", e == hipSuccess ? "hipGetDeviceCount found none" : rt.hipGetErrorName(e), ")");
      return;
    }
    ok = true;
  }
};
State& state() {
  static State s;
  return s;
}

/// The runtime, or an Error saying why there is none.
Runtime& runtime() {
  State& s = state();
  if (!s.ok) throw Error(str_cat("tiledist: the HIP runtime is not usable here: ", s.why));
  return s.rt;
}

void check(hipError_t e, const char* call) {
  if (e != hipSuccess) throw Error(str_cat("tiledist: ", call, " failed: ", state().rt.hipGetErrorName(e)));
}
#define TD_HIP(call) check(runtime().call, #call)

hipStream_t as_stream(void* s) { return static_cast<hipStream_t>(s); }

}  // namespace

bool available() { return state().ok; }
std::string unavailable_reason() { return state().ok ? std::string() : state().why; }

std::string arch_of(const std::string& gcn_arch_name) { return gcn_arch_name.substr(0, gcn_arch_name.find(':')); }

std::string code_object_arch(const std::string& binary) {
  // ELF64 header: e_ident[16], e_type (2), e_machine (2) at 18, e_flags (4) at 48.
  if (binary.size() < 64 || binary.compare(0, 4,
                                           "\x7f"
                                           "ELF") != 0)
    throw Error("tiledist: not a code object: the bytes are not an ELF file");
  if (binary[4] != 2) throw Error("tiledist: not a code object: a 32-bit ELF file");
  uint16_t machine;
  uint32_t flags;
  std::memcpy(&machine, binary.data() + 18, sizeof machine);
  std::memcpy(&flags, binary.data() + 48, sizeof flags);
  constexpr uint16_t kEmAmdgpu = 224;
  if (machine != kEmAmdgpu) throw Error(str_cat("tiledist: not an AMDGPU code object (ELF machine ", machine, ")"));
  switch (flags & 0xff) {  // EF_AMDGPU_MACH
    case 0x3f:
      return "gfx90a";
    case 0x40:
      return "gfx940";
    case 0x4b:
      return "gfx941";
    case 0x4c:
      return "gfx942";
    default:
      throw Error(str_cat("tiledist: a code object for an AMD GPU tiledist does not target (EF_AMDGPU_MACH 0x",
                          std::hex, flags & 0xff, ")"));
  }
}

const DeviceInfo& device() {
  static std::once_flag once;
  static DeviceInfo info;
  std::call_once(once, [] {
    Runtime& rt = runtime();
    int count = 0;
    TD_HIP(hipGetDeviceCount(&count));
    const int ordinal = runtime::device_ordinal(count, "AMD GPU");
    // (The properties of ROCm 5's layout, which later runtimes keep under this name; room to spare.)
    alignas(hipDeviceProp_t) unsigned char storage[2 * sizeof(hipDeviceProp_t)] = {};
    auto* props = reinterpret_cast<hipDeviceProp_t*>(storage);
    check(rt.hipGetDeviceProperties(props, ordinal), "hipGetDeviceProperties");
    info.ordinal = ordinal;
    info.name = props->name;
    info.arch = arch_of(props->gcnArchName);
    info.compute_units = props->multiProcessorCount;
  });
  TD_HIP(hipSetDevice(info.ordinal));
  return info;
}

void* malloc(size_t bytes) {
  device();
  void* p = nullptr;
  if (bytes) TD_HIP(hipMalloc(&p, bytes));
  return p;
}
void* malloc_fine_grained(size_t bytes) {
  device();
  void* p = nullptr;
  if (bytes) TD_HIP(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocFinegrained));
  return p;
}
void free(void* p) {
  if (p) TD_HIP(hipFree(p));
}
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  TD_HIP(hipMemcpy(dst, src, bytes, hipMemcpyHostToDevice));
  TD_HIP(hipStreamSynchronize(nullptr));  // done when it returns, as cuda::copy_to_device
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) TD_HIP(hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost));
}
void memset(void* dst, int value, size_t bytes) {
  if (!bytes) return;
  TD_HIP(hipMemset(dst, value, bytes));
  TD_HIP(hipStreamSynchronize(nullptr));  // hipMemset is asynchronous to the host (cuda.cpp: why)
}
void synchronize() { TD_HIP(hipDeviceSynchronize()); }
void* host_mapped_alloc(size_t bytes, void** device_address) {
  device();
  void* p = nullptr;
  TD_HIP(
      hipHostMalloc(&p, bytes, hipHostMallocMapped | hipHostMallocCoherent));  // (uncached: seen while a kernel runs)
  std::memset(p, 0, bytes);
  TD_HIP(hipHostGetDevicePointer(device_address, p, 0));
  return p;
}

namespace {

/// A query's answer: finished (true), not yet (false), or an error (thrown).
bool finished(hipError_t e, const char* call) {
  if (e == hipErrorNotReady) return false;
  check(e, call);
  return true;
}
hipEvent_t as_event(void* e) { return static_cast<hipEvent_t>(e); }

/// HIP's side of runtime/stream.h. (Destroys after a failure do nothing.)
class HipApi final : public runtime::GpuApi {
 public:
  const char* name() const override { return "HIP"; }

  void* stream_create() const override {
    device();
    hipStream_t s = nullptr;
    TD_HIP(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    return s;
  }
  void stream_destroy(void* stream) const noexcept override {
    if (available()) (void)state().rt.hipStreamDestroy(as_stream(stream));
  }
  void stream_synchronize(void* stream) const override { TD_HIP(hipStreamSynchronize(as_stream(stream))); }
  bool stream_idle(void* stream) const override {
    return finished(runtime().hipStreamQuery(as_stream(stream)), "hipStreamQuery");
  }

  void* event_create(bool timing) const override {
    device();
    hipEvent_t e = nullptr;
    TD_HIP(hipEventCreateWithFlags(&e, timing ? hipEventDefault : hipEventDisableTiming));
    return e;
  }
  void event_destroy(void* event) const noexcept override {
    if (available()) (void)state().rt.hipEventDestroy(as_event(event));
  }
  void event_record(void* event, void* stream) const override {
    TD_HIP(hipEventRecord(as_event(event), as_stream(stream)));
  }
  void stream_wait_event(void* stream, void* event) const override {
    TD_HIP(hipStreamWaitEvent(as_stream(stream), as_event(event), 0));
  }
  void event_synchronize(void* event) const override { TD_HIP(hipEventSynchronize(as_event(event))); }
  bool event_done(void* event) const override {
    return finished(runtime().hipEventQuery(as_event(event)), "hipEventQuery");
  }
  float event_elapsed_ms(void* start, void* end) const override {
    float ms = 0;
    TD_HIP(hipEventElapsedTime(&ms, as_event(start), as_event(end)));
    return ms;
  }

  void copy_async(void* dst, const void* src, size_t bytes, void* stream) const override {
    TD_HIP(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, as_stream(stream)));
  }
  void write_value(void* word, uint32_t value, void* stream) const override {
    TD_HIP(hipStreamWriteValue32(as_stream(stream), word, value, 0));
  }
  void wait_value(void* word, uint32_t value, void* stream) const override {
    TD_HIP(hipStreamWaitValue32(as_stream(stream), word, value, hipStreamWaitValueGte, 0xFFFFFFFFu));
  }

  /// By hipPointerGetAttributes' addresses, not its memory type (whose values changed between
  /// ROCm 5 and 6): managed memory; else device memory (a device address and no host one) of
  /// this process's device; pinned host memory has a host address; the host's own memory is
  /// unknown to HIP (an error). (Unrun: no AMD GPU.)
  bool is_device_memory(const void* p) const override {
    const DeviceInfo& here = device();
    hipPointerAttribute_t a{};
    if (!p || state().rt.hipPointerGetAttributes(&a, p) != hipSuccess) return false;
    return a.isManaged || (a.devicePointer && !a.hostPointer && a.device == here.ordinal);
  }

  void* module_load(const std::string& code_object, const std::string& name) const override {
    const std::string arch = code_object_arch(code_object);
    if (arch != device().arch)
      throw Error(str_cat("tiledist: kernel '", name, "' was compiled for ", arch, ", and this GPU (", device().name,
                          ") is ", device().arch, ": compile it for --target ", device().arch));
    hipModule_t m = nullptr;
    TD_HIP(hipModuleLoadData(&m, code_object.data()));
    return m;
  }
  void module_unload(void* module) const noexcept override {
    if (available()) (void)state().rt.hipModuleUnload(static_cast<hipModule_t>(module));
  }
  void* module_function(void* module, const std::string& entry, const std::string& name) const override {
    hipFunction_t f = nullptr;
    check(runtime().hipModuleGetFunction(&f, static_cast<hipModule_t>(module), entry.c_str()),
          str_cat("hipModuleGetFunction(", entry, ") of kernel '", name, "'").c_str());
    return f;
  }
  /// Nothing: LDS is static in our code objects.
  void allow_shared(void*, size_t, const std::string&) const override {}
  void launch(void* function, const int grid[3], int threads, size_t, void** args, void* stream,
              const std::string& name) const override {
    check(runtime().hipModuleLaunchKernel(static_cast<hipFunction_t>(function), static_cast<unsigned>(grid[0]),
                                          static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2]),
                                          static_cast<unsigned>(threads), 1, 1, 0, as_stream(stream), args, nullptr),
          str_cat("hipModuleLaunchKernel of kernel '", name, "'").c_str());
  }

  void capture_begin(void* stream) const override {
    TD_HIP(hipStreamBeginCapture(graphs(stream), hipStreamCaptureModeRelaxed));
  }
  void* capture_end(void* stream) const override {
    hipGraph_t graph = nullptr;
    TD_HIP(hipStreamEndCapture(graphs(stream), &graph));
    hipGraphExec_t exec = nullptr;
    const hipError_t e = runtime().hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0);
    (void)runtime().hipGraphDestroy(graph);  // (the executable graph keeps what it needs)
    check(e, "hipGraphInstantiate");
    return exec;
  }
  bool capturing(void* stream) const override {
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    if (stream && runtime().hipStreamIsCapturing) TD_HIP(hipStreamIsCapturing(as_stream(stream), &status));
    return status != hipStreamCaptureStatusNone;
  }
  void graph_launch(void* graph, void* stream) const override {
    TD_HIP(hipGraphLaunch(static_cast<hipGraphExec_t>(graph), as_stream(stream)));
  }
  void graph_destroy(void* graph) const noexcept override {
    if (available() && state().rt.hipGraphExecDestroy)
      (void)state().rt.hipGraphExecDestroy(static_cast<hipGraphExec_t>(graph));
  }

 private:
  /// `stream`, where the runtime captures graphs (an Error says why not otherwise).
  static hipStream_t graphs(void* stream) {
    if (!runtime().graph_error.empty())
      throw Error(str_cat("tiledist: HIP graphs are not available: ", runtime().graph_error));
    return as_stream(stream);
  }
};

}  // namespace

const runtime::GpuApi& api() {
  static const HipApi api;
  return api;
}

IpcHandle ipc_export(void* p) {
  hipIpcMemHandle_t h;
  TD_HIP(hipIpcGetMemHandle(&h, p));
  IpcHandle out;
  static_assert(sizeof out.bytes == sizeof h, "HIP's IPC handle is 64 bytes");
  std::memcpy(out.bytes, &h, sizeof h);
  return out;
}
void* ipc_import(const IpcHandle& handle) {
  device();
  hipIpcMemHandle_t h;
  std::memcpy(&h, handle.bytes, sizeof h);
  void* p = nullptr;
  TD_HIP(hipIpcOpenMemHandle(&p, h, hipIpcMemLazyEnablePeerAccess));
  return p;
}
void ipc_close(void* p) { TD_HIP(hipIpcCloseMemHandle(p)); }

}  // namespace tiledist::hip
