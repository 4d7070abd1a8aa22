// Streams, events and modules of a GPU, whichever runtime drives it: one interface (GpuApi)
// that the CUDA driver (runtime/cuda.cpp) and HIP (runtime/hip.cpp) implement, and the objects
// the compiler's launchers, the kernel library and users hold (Stream, Event, Module, Timer),
// which call through it. As tinygrad's one Program/Allocator per runtime and Triton's driver
// objects: code above this layer never names CUDA or HIP to order its work.
//
//   runtime::Stream s;                        // on this process's GPU (CUDA, else HIP)
//   kernel.launch_on(s, grid, x, y, out, n);  // queued; returns at once
//   runtime::Event done;
//   done.record(&s);
//   done.synchronize();
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace tiledist::runtime {

/// What a GPU runtime does for streams, events, stream memory operations and modules. Handles
/// are the runtime's own (CUstream, hipStream_t, ...); a null stream is the runtime's default
/// (legacy) stream. Every failing call throws Error naming the call and the runtime's error;
/// the destroy calls never throw (they run in destructors, possibly after a kernel has trapped).
class GpuApi {
 public:
  /// The runtime of this process's GPU: CUDA's where its driver finds a device, else HIP's where
  /// it finds an AMD GPU; throws Error saying why neither is usable.
  static const GpuApi& current();

  virtual ~GpuApi() = default;
  /// "CUDA", "HIP": what errors call it.
  virtual const char* name() const = 0;

  /// A stream that does not synchronize with the default stream.
  virtual void* stream_create() const = 0;
  /// Destroys a stream of stream_create().
  virtual void stream_destroy(void* stream) const noexcept = 0;
  /// Blocks until everything queued on `stream` has finished.
  virtual void stream_synchronize(void* stream) const = 0;
  /// Whether everything queued on `stream` has finished (never blocks).
  virtual bool stream_idle(void* stream) const = 0;

  /// An event; `timing`: whether event_elapsed_ms may measure it.
  virtual void* event_create(bool timing) const = 0;
  /// Destroys an event of event_create().
  virtual void event_destroy(void* event) const noexcept = 0;
  /// Makes `event` mark the current end of `stream`'s work.
  virtual void event_record(void* event, void* stream) const = 0;
  /// Makes `stream`'s later work wait for `event` (the host does not block).
  virtual void stream_wait_event(void* stream, void* event) const = 0;
  /// Blocks until `event` has completed.
  virtual void event_synchronize(void* event) const = 0;
  /// Whether `event` has completed (never blocks).
  virtual bool event_done(void* event) const = 0;
  /// Milliseconds from `start` to `end`, both recorded with timing and complete.
  virtual float event_elapsed_ms(void* start, void* end) const = 0;

  /// In `stream`'s order: a device-to-device copy (peers' memory mapped here included), a
  /// signal word written after the stream's earlier writes are visible, and one awaited until
  /// it is at least `value` (cyclic comparison).
  ///@{
  virtual void copy_async(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  virtual void write_value(void* word, uint32_t value, void* stream) const = 0;
  virtual void wait_value(void* word, uint32_t value, void* stream) const = 0;
  ///@}

  /// Whether `p` is memory a kernel on this process's device reads where it lies: the device's
  /// own, or managed memory; false for the host's memory, another device's, and what the
  /// runtime does not know.
  virtual bool is_device_memory(const void* p) const = 0;

  /// Loads a backend's binary (PTX for CUDA, a code object for HIP, its arch checked against
  /// the device's) on the current device; `name` (the kernel's) is for errors.
  virtual void* module_load(const std::string& binary, const std::string& name) const = 0;
  /// Unloads a module of module_load().
  virtual void module_unload(void* module) const noexcept = 0;
  /// The function `entry` of `module`; `name` (the kernel's) is for errors.
  virtual void* module_function(void* module, const std::string& entry, const std::string& name) const = 0;
  /// Allows `function` `shared_bytes` of dynamic shared memory, where the runtime asks for more
  /// than its default (throws Error naming the kernel where the device has less).
  virtual void allow_shared(void* function, size_t shared_bytes, const std::string& name) const = 0;
  /// Launches `function` with `args` (pointers to each argument's value) on `stream`.
  virtual void launch(void* function, const int grid[3], int threads, size_t shared_bytes, void** args, void* stream,
                      const std::string& name) const = 0;

  /// Stream capture (CUDA graphs, HIP graphs): from capture_begin the work queued on `stream`
  /// (not the default stream) is recorded rather than run, in relaxed mode (other threads' calls
  /// go on as before); capture_end ends it and returns the recorded work instantiated, an
  /// executable graph (throws Error where the capture was invalidated: it is ended either way).
  ///@{
  virtual void capture_begin(void* stream) const = 0;
  virtual void* capture_end(void* stream) const = 0;
  /// Whether `stream` is capturing now (false for the default stream).
  virtual bool capturing(void* stream) const = 0;
  /// Runs an executable graph of capture_end() on `stream`.
  virtual void graph_launch(void* graph, void* stream) const = 0;
  /// Destroys an executable graph of capture_end().
  virtual void graph_destroy(void* graph) const noexcept = 0;
  ///@}
};

/// A stream of its own (it does not synchronize with the default stream): work launched on it
/// runs in order, concurrently with other streams' work.
class Stream {
 public:
  /// A stream of GpuApi::current().
  Stream();
  /// A stream of `api`.
  explicit Stream(const GpuApi& api);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Waits for everything launched on the stream.
  void synchronize() const;
  /// Whether everything launched on the stream has finished (never blocks).
  bool idle() const;
  /// The runtime's handle (CUstream, hipStream_t), for launches and interop; null: the default
  /// stream.
  void* handle() const { return stream_; }
  /// The runtime the stream belongs to.
  const GpuApi& api() const { return *api_; }
  /// Whether the stream's work is being captured into a graph now (runtime/graph.h): a run
  /// queued on it is recorded, not run; the default stream never is.
  bool capturing() const { return stream_ && api_->capturing(stream_); }
  /// The default (legacy) stream of GpuApi::current(): it waits for, and is waited for by, the
  /// work of the default stream's other users (host copies, launches without a stream).
  static const Stream& legacy();

 private:
  struct Legacy {};
  Stream(Legacy, const GpuApi& api) : api_(&api) {}
  const GpuApi* api_;
  void* stream_ = nullptr;
};

/// A point in a stream's work: recorded on a stream, waited for by the host or by another
/// stream, and timed against another event.
class Event {
 public:
  /// An event of GpuApi::current(). `timing`: whether elapsed_since may measure it (events
  /// without are cheaper to record).
  explicit Event(bool timing = true);
  /// An event of `api`.
  Event(const GpuApi& api, bool timing);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Marks the current end of `stream`'s work (null: the default stream).
  void record(const Stream* stream = nullptr);
  /// Makes `stream`'s later work wait for this event (the host does not block).
  void make_wait(const Stream& stream) const;
  /// Blocks until the event has completed.
  void synchronize() const;
  /// Whether the event has completed (never blocks).
  bool done() const;
  /// Milliseconds from `start` to this event; both recorded and complete.
  float elapsed_since(const Event& start) const;

 private:
  const GpuApi* api_;
  void* event_ = nullptr;
};

/// Copy-engine producers, in `stream`'s order (GpuApi::copy_async, write_value, wait_value).
///@{
void copy_async(void* dst, const void* src, size_t bytes, const Stream& stream);
void write_value(void* word, uint32_t value, const Stream& stream);
void wait_value(void* word, uint32_t value, const Stream& stream);
///@}

/// A backend's binary loaded on the current device; launches look the entry up (and set its
/// shared memory) once.
class Module {
 public:
  /// Loads `binary` with `api` (GpuApi::module_load); `name` (the kernel's) is for errors.
  Module(const GpuApi& api, const std::string& binary, const std::string& name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Launches `entry` with `args` (pointers to each argument's value) on `stream` (null: the
  /// default stream).
  void launch(const std::string& entry, const int grid[3], int threads, size_t shared_bytes, void** args,
              const Stream* stream = nullptr);
  /// The runtime that loaded the module.
  const GpuApi& api() const { return *api_; }
  /// The runtime's handle of the loaded module (CUmodule, hipModule_t).
  void* handle() const { return module_; }
  /// Called with handle() before the module is unloaded (NVSHMEM's cumodule_finalize, for a
  /// module it was told of).
  void on_unload(void (*hook)(void*)) { on_unload_ = hook; }

 private:
  const GpuApi* api_;
  void* module_ = nullptr;
  void (*on_unload_)(void*) = nullptr;
  std::string name_;
  std::mutex mutex_;  // guards the cached function
  void* function_ = nullptr;
  std::string entry_;
  size_t shared_allowed_ = 0;
};

/// Elapsed milliseconds between two points on the default stream, measured with events.
class Timer {
 public:
  /// Marks the start.
  void start() { begin_.record(); }
  /// Marks the end and waits for it: the milliseconds since start().
  float stop() {
    end_.record();
    end_.synchronize();
    return end_.elapsed_since(begin_);
  }

 private:
  Event begin_, end_;
};

}  // namespace tiledist::runtime
