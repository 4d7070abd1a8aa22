// Symmetric memory for the library's communicating kernels, on the world of their target: the
// GPU world's heap for GPU targets, the host world's for the host.
#pragma once

#include <cstring>
#include <memory>
#include <type_traits>

#include "tiledist.h"

namespace tiledist::kernels::detail {

inline bool on_gpu(const Target& target) {
  if (target.kind == Target::Kind::amdgcn)  // (their streams and heaps are CUDA's; kernels alone run there)
    throw Error(str_cat("tiledist: the kernel library's communicating objects run on the host and on NVIDIA GPUs, not yet on ",
                        target.name(), " (its kernels compile for it and launch through Kernel)"));
  return target.kind == Target::Kind::nvptx;
}
inline int world_rank(const Target& target) { return on_gpu(target) ? cuda::World::get().rank() : rank(); }
inline int world_ranks(const Target& target) { return on_gpu(target) ? cuda::World::get().size() : world_size(); }

/// Collective: `bytes` zeroed in every rank's heap. (The caller's barrier_all() should follow
/// before any rank signals into it.)
inline void* symm_zeroed(const Target& target, size_t bytes) {
  if (!on_gpu(target)) {
    void* p = symm_alloc(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  void* p = cuda::World::get().alloc(bytes);
  cuda::memset(p, 0, bytes);  // done when it returns
  return p;
}
/// In the same order on every rank, once every call that used it has completed everywhere.
inline void symm_release(const Target& target, void* p) {
  if (on_gpu(target)) cuda::World::get().free(p);
  else symm_free(p);
}
/// The streams of a library object's runs on a GPU (kernels.h, AgGemm, says what users see):
/// a run goes on the caller's stream, else on the default stream and is waited for; a run on
/// another stream than the last run's is ordered after that one (the objects' protocols need
/// their runs in order on each rank).
class RunStreams {
 public:
  /// The stream of a run about to start.
  const cuda::Stream& enter(const cuda::Stream* stream) {
    const cuda::Stream& s = stream ? *stream : cuda::Stream::legacy();
    if (!last_) last_ = std::make_unique<cuda::Event>(false);
    else if (s.handle() != last_stream_) last_->make_wait(s);
    return s;
  }
  /// The run is queued on `s`: marks its end, and without a caller's stream waits for it (a
  /// failure, such as a peer's signal that never came, is reported here).
  void leave(const cuda::Stream& s, const cuda::Stream* stream) {
    last_->record(&s);
    last_stream_ = s.handle();
    if (!stream) s.synchronize();
  }
  /// For the object's destructor: waits for its last run (a failure is the stream's to report).
  void finish() const noexcept {
    try {
      if (last_) last_->synchronize();
    } catch (const Error&) {
    }
  }

 private:
  std::unique_ptr<cuda::Event> last_;  // recorded after the last run
  void* last_stream_ = nullptr;
};

/// A stream beside a run's stream, for the copy engine's work: fork() starts its next work after
/// what the run's stream has queued so far; join() makes the run's stream wait for what it
/// has queued so far.
class SideStream {
 public:
  void fork(const cuda::Stream& on) {
    forked_.record(&on);
    forked_.make_wait(stream_);
  }
  void join(const cuda::Stream& on) {
    joined_.record(&stream_);
    joined_.make_wait(on);
  }
  const cuda::Stream& stream() const { return stream_; }
  /// For the object's destructor (a failure is the run's stream's to report).
  void finish() const noexcept {
    try {
      stream_.synchronize();
    } catch (const Error&) {
    }
  }

 private:
  cuda::Stream stream_;
  cuda::Event forked_{false}, joined_{false};
};

/// A pointer argument as a launch on the GPU takes device memory; other arguments as they are.
template <class A>
auto device_arg(A a) {
  if constexpr (std::is_pointer_v<A>) return cuda::DevicePtr<std::remove_pointer_t<A>>{a, 0};
  else return a;
}
/// Launches `k` over `grid`: on the GPU stream `on` (its pointer arguments device memory), or
/// on the host target where `on` is null.
template <class... A>
void launch(const Kernel& k, const cuda::Stream* on, Grid grid, A... args) {
  if (on) k.launch_on(*on, grid, device_arg(args)...);
  else k.launch(grid, args...);
}

/// Symmetric `p` on `rank`, as mapped here.
inline void* symm_on(const Target& target, const void* p, int rank) {
  return on_gpu(target) ? cuda::World::get().at(p, rank) : symm_at(p, rank);
}

}  // namespace tiledist::kernels::detail
