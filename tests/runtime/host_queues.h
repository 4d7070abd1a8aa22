// A GPU runtime for tests on any machine (runtime/stream.h's GpuApi): it keeps its streams in
// host memory and runs their work at once (the copies and signal words are real memory), and
// logs every call it is given.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "runtime/stream.h"
#include "support/support.h"

namespace tiledist::test_util {

class HostQueues final : public runtime::GpuApi {
 public:
  explicit HostQueues(const char* name = "HostQueues") : name_(name) {}
  mutable std::vector<std::string> log;
  mutable int live = 0;  // streams, events and modules not yet destroyed

  const char* name() const override { return name_; }
  void* stream_create() const override { return make("stream_create"); }
  void stream_destroy(void* s) const noexcept override { drop("stream_destroy", s); }
  void stream_synchronize(void* s) const override { note("stream_synchronize", s); }
  bool stream_idle(void* s) const override { return note("stream_idle", s), true; }
  void* event_create(bool timing) const override { return make(timing ? "event_create timing" : "event_create"); }
  void event_destroy(void* e) const noexcept override { drop("event_destroy", e); }
  void event_record(void* e, void* s) const override { note("event_record", e, s); }
  void stream_wait_event(void* s, void* e) const override { note("stream_wait_event", s, e); }
  void event_synchronize(void* e) const override { note("event_synchronize", e); }
  bool event_done(void* e) const override { return note("event_done", e), true; }
  float event_elapsed_ms(void* a, void* b) const override { return note("event_elapsed_ms", a, b), 1.5f; }
  void copy_async(void* dst, const void* src, size_t bytes, void* s) const override {
    note("copy_async", s);
    std::memcpy(dst, src, bytes);
  }
  void write_value(void* word, uint32_t value, void* s) const override {
    note("write_value", s);
    *static_cast<uint32_t*>(word) = value;
  }
  void wait_value(void* word, uint32_t value, void* s) const override {
    note("wait_value", s);
    if (*static_cast<uint32_t*>(word) < value) throw Error("wait_value: the word is below the value");
  }
  bool is_device_memory(const void*) const override { return false; }
  void* module_load(const std::string& binary, const std::string& name) const override {
    log.push_back("module_load " + binary + " " + name);
    return make(nullptr);
  }
  void module_unload(void* m) const noexcept override { drop("module_unload", m); }
  void* module_function(void* m, const std::string& entry, const std::string&) const override {
    note(("module_function " + entry).c_str(), m);
    return &functions_[entry.size() % 2];
  }
  void allow_shared(void*, size_t bytes, const std::string&) const override {
    log.push_back(str_cat("allow_shared ", bytes));
  }
  void launch(void*, const int grid[3], int threads, size_t shared, void**, void* s,
              const std::string& name) const override {
    log.push_back(str_cat("launch ", name, " ", grid[0], "x", grid[1], "x", grid[2], " ", threads, " ", shared,
                          s ? " on a stream" : " on the default stream"));
  }
  // Capture: a stream at a time; a graph is a handle (its launches logged, not rerun).
  void capture_begin(void* s) const override {
    note("capture_begin", s);
    if (!s || capturing_) throw Error("capture_begin: the default stream, or a capture already on");
    capturing_ = s;
  }
  void* capture_end(void* s) const override {
    note("capture_end", s);
    if (s != capturing_) throw Error("capture_end: the stream is not capturing");
    capturing_ = nullptr;
    return make("graph");
  }
  bool capturing(void* s) const override { return s && s == capturing_; }
  void graph_launch(void* g, void* s) const override { note("graph_launch", g, s); }
  void graph_destroy(void* g) const noexcept override { drop("graph_destroy", g); }

  /// Handles are numbered from 1 (0 is the default stream).
  std::string id(void* h) const { return h ? std::to_string(static_cast<char*>(h) - handles_) : "0"; }

 private:
  void* make(const char* what) const {
    ++live;
    void* h = handles_ + ++next_;
    if (what) log.push_back(str_cat(what, " ", id(h)));
    return h;
  }
  void drop(const char* what, void* h) const noexcept {
    --live;
    log.push_back(str_cat(what, " ", id(h)));
  }
  void note(const char* what, void* a) const { log.push_back(str_cat(what, " ", id(a))); }
  void note(const char* what, void* a, void* b) const { log.push_back(str_cat(what, " ", id(a), " ", id(b))); }
  const char* name_;
  mutable void* capturing_ = nullptr;
  mutable char handles_[64] = {};  // (a handle is the address of one: its number is its index)
  mutable int next_ = 0;
  mutable int functions_[2] = {};
};

}  // namespace tiledist::test_util
