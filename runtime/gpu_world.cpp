#include "runtime/gpu_world.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime/heap_labels.h"
#include "support/support.h"

namespace tiledist::runtime {

void GpuWorld::start_bootstrap(const runtime::World& host, size_t granularity) {
  rank_ = host.rank();
  size_ = host.size();
  timeout_s_ = host.wait_timeout();
  if (size_ > runtime::kMaxDeviceRanks)
    throw Error(str_cat("tiledist: the GPU world holds at most ", runtime::kMaxDeviceRanks, " ranks, not ", size_));
  heap_size_ =
      (runtime::env_size("TILEDIST_GPU_HEAP_SIZE", size_t(1) << 30) + granularity - 1) / granularity * granularity;
  bases_.assign(size_, nullptr);
}

void GpuWorld::finish_bootstrap(runtime::World& host, const Device& device) {
  offsets_.reset(heap_size_);
  offsets_.alloc(runtime::kHeapReservedBytes);  // the device barrier's words, at offset 0 everywhere
  device.memset(bases_[rank_], 0, runtime::kHeapReservedBytes);
  device.synchronize();
  // (after every rank has mapped every heap)
  gpus_ = host.all_gather(device.gpu, "the GPU of every rank");
  for (int r = 0; r < size_; ++r)
    for (int q = 0; q < r; ++q) shared_ = shared_ || gpus_[q] == gpus_[r];

  runtime::DeviceWorld w{};
  w.rank = rank_;
  w.num_ranks = size_;
  w.heap_size = heap_size_;
  w.timeout_ns = static_cast<uint64_t>(timeout_s_ * 1e9);
  void* failure_on_device = nullptr;
  failure_ = static_cast<runtime::DeviceFailureRecord*>(
      device.host_mapped_alloc(sizeof(runtime::DeviceFailureRecord), &failure_on_device));
  w.failure = reinterpret_cast<uint64_t>(failure_on_device);
  for (int r = 0; r < size_; ++r) w.bases[r] = reinterpret_cast<uint64_t>(bases_[r]);
  device_world_ = device.malloc(sizeof w);
  device.copy_to_device(device_world_, &w, sizeof w);
}

void GpuWorld::note_kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(kernels_mutex_);
  kernels_.emplace(runtime::kernel_tag(name), name);
}

void* GpuWorld::alloc(size_t bytes) {
  if (bytes > heap_size_)
    throw Error(str_cat("tiledist: a GPU symmetric allocation of ", bytes, " bytes is larger than the GPU heap (",
                        heap_size_, " bytes; set $TILEDIST_GPU_HEAP_SIZE)"));
  runtime::World::get().agree_on_size(bytes, "GPU symmetric allocation");
  int64_t off = offsets_.alloc(bytes);
  if (off < 0)
    throw Error(str_cat("tiledist: a GPU symmetric allocation of ", bytes, " bytes does not fit: the GPU heap holds ",
                        heap_size_, " bytes and its largest free block is ", offsets_.largest_free(),
                        " bytes (set $TILEDIST_GPU_HEAP_SIZE)"));
  return bases_[rank_] + off;
}

void GpuWorld::free(void* p) {
  if (!p) return;
  if (!contains(p) || !offsets_.free(offset_of(p)))
    throw Error("tiledist: freeing a GPU pointer that the GPU symmetric heap did not allocate (or freed twice)");
}

bool GpuWorld::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= bases_[rank_] && c < bases_[rank_] + heap_size_;
}

void* GpuWorld::at(const void* p, int rank) const {
  if (rank < 0 || rank >= size_)
    throw Error(str_cat("tiledist: symm_at: rank ", rank, " is out of range (the world has ", size_, " ranks)"));
  if (!contains(p)) throw Error(str_cat("tiledist: symm_at: pointer ", p, " is not in this rank's GPU symmetric heap"));
  return bases_[rank] + offset_of(p);
}

std::string GpuWorld::failure() const {
  using runtime::DeviceFailure;
  volatile runtime::DeviceFailureRecord* f = failure_;
  if (!f || f->kind == 0) return "";
  for (int i = 0; i < 1000 && !f->complete; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Where an address falls: rank and offset in the heaps mapped here.
  auto where = [&](uint64_t a) {
    const auto* c = reinterpret_cast<const char*>(a);
    for (int r = 0; r < size_; ++r)
      if (c >= bases_[r] && c < bases_[r] + heap_size_) {
        const std::string label = heap_label(Heap::gpu, static_cast<size_t>(c - bases_[r]));
        return str_cat("byte offset ", c - bases_[r], " of rank ", r, "'s GPU heap", label.empty() ? "" : " (", label,
                       label.empty() ? "" : ")");
      }
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(a));
    return str_cat("address ", hex, " (outside the GPU heaps)");
  };
  std::string kernel = "(a kernel this process did not launch)";
  {
    std::lock_guard<std::mutex> lock(kernels_mutex_);
    if (auto k = kernels_.find(uint32_t{f->kernel}); k != kernels_.end()) kernel = str_cat("'", k->second, "'");
  }
  std::string head = str_cat("tiledist: kernel ", kernel, " on rank ", rank_, ", program ", f->block, ": ");
  switch (static_cast<DeviceFailure>(f->kind)) {
    case DeviceFailure::wait_timeout:
      return str_cat(head, "gave up after ", timeout_s_, " s ($TILEDIST_WAIT_TIMEOUT) waiting for the signal word at ",
                     where(f->address), " to reach ", f->expected, "; it last read ", f->seen);
    case DeviceFailure::symm_at_outside_heap:
      return str_cat(head, "symm_at of a pointer outside this rank's GPU symmetric heap (", where(f->address), ")");
    case DeviceFailure::barrier_timeout:
      return str_cat(head, "gave up after ", timeout_s_,
                     " s ($TILEDIST_WAIT_TIMEOUT) in a device barrier (barrier_all, ", "sync_all): ", f->seen, " of ",
                     f->expected, " programs of all ranks had arrived. A device barrier ",
                     "needs every program of the grid resident at once on every rank: launch at most as many as the ",
                     "GPU holds");
    case DeviceFailure::pipeline_timeout:
      return str_cat(head, "a pipeline stage (the mbarrier at shared-memory address ", f->address, ", phase ",
                     f->expected, ") did not complete in twice the wait timeout ($TILEDIST_WAIT_TIMEOUT, ", timeout_s_,
                     " s): tiledist's pipeline is stuck, a bug to report with the kernel and its options");
    case DeviceFailure::symm_at_bad_rank:
      return str_cat(head, "symm_at to rank ", f->expected, ", but the world has ", f->seen, " ranks");
    default:
      return str_cat(head, "failed (record kind ", f->kind, ")");
  }
}

}  // namespace tiledist::runtime
