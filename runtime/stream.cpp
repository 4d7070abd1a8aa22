#include "runtime/stream.h"

#include "runtime/cuda.h"
#include "runtime/hip.h"
#include "support/support.h"

namespace tiledist::runtime {

const GpuApi& GpuApi::current() {
  if (cuda::available()) return cuda::api();
  if (hip::available()) return hip::api();
  throw Error(str_cat("tiledist: no GPU runtime is usable here: CUDA: ", cuda::unavailable_reason(),
                      "; HIP: ", hip::unavailable_reason()));
}

Stream::Stream() : Stream(GpuApi::current()) {}
Stream::Stream(const GpuApi& api) : api_(&api), stream_(api.stream_create()) {}
Stream::~Stream() {
  if (stream_) api_->stream_destroy(stream_);
}
void Stream::synchronize() const { api_->stream_synchronize(stream_); }
bool Stream::idle() const { return api_->stream_idle(stream_); }
const Stream& Stream::legacy() {
  static const Stream s{Legacy{}, GpuApi::current()};
  return s;
}

Event::Event(bool timing) : Event(GpuApi::current(), timing) {}
Event::Event(const GpuApi& api, bool timing) : api_(&api), event_(api.event_create(timing)) {}
Event::~Event() {
  if (event_) api_->event_destroy(event_);
}

namespace {
/// `stream`'s handle, where it belongs to `api` (an Error says whose it is otherwise).
void* handle_for(const GpuApi& api, const Stream* stream, const char* what) {
  if (!stream) return nullptr;
  if (&stream->api() != &api)
    throw Error(str_cat("tiledist: ", what, " of ", api.name(), " was given a ", stream->api().name(), " stream"));
  return stream->handle();
}
}  // namespace

void Event::record(const Stream* stream) { api_->event_record(event_, handle_for(*api_, stream, "an event")); }
void Event::make_wait(const Stream& stream) const {
  api_->stream_wait_event(handle_for(*api_, &stream, "an event"), event_);
}
void Event::synchronize() const { api_->event_synchronize(event_); }
bool Event::done() const { return api_->event_done(event_); }
float Event::elapsed_since(const Event& start) const { return api_->event_elapsed_ms(start.event_, event_); }

void copy_async(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes) stream.api().copy_async(dst, src, bytes, stream.handle());
}
void write_value(void* word, uint32_t value, const Stream& stream) {
  stream.api().write_value(word, value, stream.handle());
}
void wait_value(void* word, uint32_t value, const Stream& stream) {
  stream.api().wait_value(word, value, stream.handle());
}

Module::Module(const GpuApi& api, const std::string& binary, const std::string& name)
    : api_(&api), module_(api.module_load(binary, name)), name_(name) {}
Module::~Module() {
  if (module_ && on_unload_) on_unload_(module_);
  if (module_) api_->module_unload(module_);
}

void Module::launch(const std::string& entry, const int grid[3], int threads, size_t shared_bytes, void** args,
                    const Stream* stream) {
  void* on = handle_for(*api_, stream, str_cat("kernel '", name_, "'").c_str());
  // The function and its shared-memory allowance are looked up and set once (launches of small
  // kernels are host-bound: bench/RESULTS.md).
  std::unique_lock<std::mutex> lock(mutex_);
  if (!function_ || entry != entry_) {
    function_ = api_->module_function(module_, entry, name_);
    entry_ = entry;
    shared_allowed_ = 0;
  }
  void* f = function_;
  if (shared_bytes > shared_allowed_) {
    api_->allow_shared(f, shared_bytes, name_);
    shared_allowed_ = shared_bytes;
  }
  lock.unlock();
  api_->launch(f, grid, threads, shared_bytes, args, on, name_);
}

}  // namespace tiledist::runtime
