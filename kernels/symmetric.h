// Symmetric memory for the library's communicating kernels, on the world of their target: the
// GPU world's heap for GPU targets, the host world's for the host.
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>

#include "runtime/graph.h"
#include "runtime/heap_labels.h"
#include "tiledist.h"

namespace tiledist::kernels::detail {

/// Whether `target`'s world is the GPU's (CUDA's) rather than the host's; throws Error for a GPU
/// whose runtime the objects do not take yet.
inline bool on_gpu(const Target& target) {
  if (!target.is_gpu()) return false;
  if (!target.runs_on_cuda())  // (their streams and heaps are CUDA's; kernels alone run there)
    throw Error(
        str_cat("tiledist: the kernel library's communicating objects run on the host and on NVIDIA GPUs, not yet on ",
                target.name(), " (its kernels compile for it and launch through Kernel)"));
  return true;
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
/// The offset of `p` (from symm_zeroed) in the heap of `target`'s world.
inline size_t symm_offset(const Target& target, const void* p) {
  if (on_gpu(target)) return cuda::World::get().offset_of(p);
  return static_cast<size_t>(static_cast<const char*>(p) - runtime::World::get().base(rank()));
}
/// Names `bytes` at `p` (from symm_zeroed) for failure messages (runtime/heap_labels.h): what
/// they hold and what each element is; symm_release drops the name.
inline void symm_label(const Target& target, const void* p, size_t bytes, runtime::HeapLabel label) {
  runtime::label_heap(on_gpu(target) ? runtime::Heap::gpu : runtime::Heap::host, symm_offset(target, p), bytes,
                      std::move(label));
}
/// In the same order on every rank, once every call that used it has completed everywhere.
inline void symm_release(const Target& target, void* p) {
  runtime::unlabel_heap(on_gpu(target) ? runtime::Heap::gpu : runtime::Heap::host, symm_offset(target, p));
  if (on_gpu(target))
    cuda::World::get().free(p);
  else
    symm_free(p);
}
/// Whether `rank` uses this rank's GPU (on the host target there is none: false). A copy
/// between two ranks that share a GPU runs on its SMs, as a kernel of the rank that queued it;
/// a copy between two GPUs runs on their copy engines, beside whatever the SMs do.
inline bool shares_gpu(const Target& target, int rank) {
  return on_gpu(target) && rank != world_rank(target) && cuda::World::get().shares_gpu(rank);
}
/// Whether any two ranks of the target's world share a GPU (the same answer on every rank).
inline bool gpus_shared(const Target& target) { return on_gpu(target) && cuda::World::get().gpus_shared(); }

/// The order of the library's communicating runs on this rank's GPU: each run, of any object,
/// on any stream, is queued after the one before it. Two runs side by side could deadlock: the
/// programs of one, waiting for a peer, may hold every SM that the other needs to make the
/// progress a peer of ours waits for (NCCL leaves this to its users; we order the runs, since
/// every rank makes the same calls in the same order anyway). From one thread at a time, as the
/// calls themselves.
class RunOrder {
 public:
  static RunOrder& get() {
    static RunOrder* order = new RunOrder();  // (never destroyed: events outlive static destructors' driver)
    return *order;
  }
  /// Makes `s` wait for the last run queued (on another stream; on the same one it does anyway).
  void after_last(const runtime::Stream& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_ && s.handle() != last_stream_) last_->make_wait(s);
  }
  /// A run has been queued on `s`.
  void mark(const runtime::Stream& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!last_) last_ = std::make_unique<runtime::Event>(false);
    last_->record(&s);
    last_stream_ = s.handle();
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<runtime::Event> last_;
  void* last_stream_ = nullptr;
};

/// The streams of a library object's runs on a GPU (kernels.h, AgGemm, says what users see):
/// a run goes on the caller's stream, else on the default stream and is waited for; it is
/// queued after the last communicating run of any object (RunOrder), so its own runs are in
/// order on each rank too, as their protocols need. On a stream being captured into a graph
/// (runtime/graph.h) a run is recorded, not run: objects whose protocols keep their state in
/// device memory allow it (`capturable`); the others refuse it, naming themselves (`who`), as
/// the host's call counts they pass would be frozen in the graph (refused before the run
/// changes anything: it may run outside the graph next). A captured run neither waits for nor
/// marks RunOrder: the graph's launch does (launch_graph). An object with a captured run waits
/// for the whole device when it goes (finish): a graph's launches are not its runs.
class RunStreams {
 public:
  /// The stream of a run about to start.
  const runtime::Stream& enter(const runtime::Stream* stream, const char* who, bool capturable = false) {
    const runtime::Stream& s = stream ? *stream : runtime::Stream::legacy();
    capturing_ = stream && s.capturing();
    if (capturing_ && !capturable)
      throw Error(str_cat("tiledist: ", who,
                          ": a run on a stream being captured into a graph (what it passes its kernels changes from "
                          "run to run, or the host takes part in it; run it outside the graph)"));
    captured_ = captured_ || capturing_;
    if (!capturing_) RunOrder::get().after_last(s);
    return s;
  }
  /// The run is queued on `s`: marks its end, and without a caller's stream waits for it (a
  /// failure, such as a peer's signal that never came, is reported here).
  void leave(const runtime::Stream& s, const runtime::Stream* stream) {
    if (capturing_) return;  // (events recorded in a capture cannot be waited for outside it)
    if (!last_) last_ = std::make_unique<runtime::Event>(false);
    last_->record(&s);
    RunOrder::get().mark(s);
    if (!stream) s.synchronize();
  }
  /// For the object's destructor: waits for its last run (a failure is the stream's to report).
  void finish() const noexcept {
    try {
      if (captured_) cuda::synchronize();
      if (last_) last_->synchronize();
    } catch (const Error&) {
    }
  }
  /// Whether a run of the object has been captured into a graph (whose launches may use what
  /// the object held then).
  bool captured() const { return captured_; }

 private:
  std::unique_ptr<runtime::Event> last_;  // recorded after this object's last run
  bool capturing_ = false;                // the run entered is being captured
  bool captured_ = false;                 // some run was
};

/// Launches a graph of the library's runs (runtime/graph.h) on `stream`, in RunOrder as a run.
inline void launch_graph(const runtime::Graph& graph, const runtime::Stream& stream) {
  RunOrder::get().after_last(stream);
  graph.launch(stream);
  RunOrder::get().mark(stream);
}

/// A stream beside a run's stream, for the copy engine's work: fork() starts its next work after
/// what the run's stream has queued so far; join() makes the run's stream wait for what it
/// has queued so far.
class SideStream {
 public:
  void fork(const runtime::Stream& on) {
    forked_.record(&on);
    forked_.make_wait(stream_);
  }
  void join(const runtime::Stream& on) {
    joined_.record(&stream_);
    joined_.make_wait(on);
  }
  const runtime::Stream& stream() const { return stream_; }
  /// For the object's destructor (a failure is the run's stream's to report).
  void finish() const noexcept {
    try {
      stream_.synchronize();
    } catch (const Error&) {
    }
  }

 private:
  runtime::Stream stream_;
  runtime::Event forked_{false}, joined_{false};
};

/// A pointer argument as a launch on the GPU takes device memory; other arguments as they are.
template <class A>
auto device_arg(A a) {
  if constexpr (std::is_pointer_v<A>)
    return cuda::DevicePtr<std::remove_pointer_t<A>>{a, 0};
  else
    return a;
}
/// Launches `k` over `grid`: on the GPU stream `on` (its pointer arguments device memory), or
/// on the host target where `on` is null.
template <class... A>
void launch(const Kernel& k, const runtime::Stream* on, Grid grid, A... args) {
  if (on)
    k.launch_on(*on, grid, device_arg(args)...);
  else
    k.launch(grid, args...);
}

/// Symmetric `p` on `rank`, as mapped here.
inline void* symm_on(const Target& target, const void* p, int rank) {
  return on_gpu(target) ? cuda::World::get().at(p, rank) : symm_at(p, rank);
}

}  // namespace tiledist::kernels::detail
