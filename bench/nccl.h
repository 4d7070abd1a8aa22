// NCCL for the multi-GPU benchmarks (libnccl.so.2, loaded at run time; $TILEDIST_NCCL names it
// where it is not on the library path), and how they time: every rank runs the same calls.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>
#include <vector>

#include "tiledist.h"

namespace tiledist::bench {

struct Nccl {
  struct UniqueId {
    char internal[128];
  };
  using Comm = void*;
  void* lib = nullptr;
  Comm comm = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*init_rank)(Comm*, int, UniqueId, int) = nullptr;
  int (*all_reduce)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  int (*all_gather)(const void*, void*, size_t, int, Comm, void*) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, Comm, void*) = nullptr;
  static constexpr int kFloat32 = 7, kBfloat16 = 9, kSum = 0;

  bool load() {
    if (const char* p = std::getenv("TILEDIST_NCCL")) lib = dlopen(p, RTLD_NOW);
    if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW);
    if (!lib) return false;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    return sym(get_unique_id, "ncclGetUniqueId") && sym(init_rank, "ncclCommInitRank") &&
           sym(all_reduce, "ncclAllReduce") && sym(all_gather, "ncclAllGather") &&
           sym(reduce_scatter, "ncclReduceScatter");
  }
  /// Loaded and initialized on this rank's GPU (made current first: NCCL's runtime adopts it);
  /// false where NCCL is not found. Collective.
  bool start() {
    const bool found = load();
    cuda::device();
    if (found) init();
    return found;
  }
  /// Collective: rank 0's id reaches the others through the host world's symmetric heap.
  void init() {
    auto id = symm_alloc<UniqueId>(1);
    if (rank() == 0 && get_unique_id(id.data()) != 0) throw Error("ncclGetUniqueId failed");
    barrier_all();
    UniqueId mine = *symm_at(id.data(), 0);
    if (int r = init_rank(&comm, world_size(), mine, rank()); r != 0)
      throw Error(str_cat("ncclCommInitRank failed: ", r));
    barrier_all();
    symm_free(id.data());
  }
  void check(int r, const char* what) const {
    if (r != 0) throw Error(str_cat(what, " failed: ", r));
  }
};

/// Median microseconds of each of `fns` (null: skipped, 0), timed in turns, one call of each
/// per round, so that the GPU's drift (clocks under the power cap, temperature) falls on all
/// of them alike; every rank runs the same.
std::vector<double> time_in_turns(const std::vector<std::function<void()>>& fns, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns)
      if (fn) fn();
  barrier_all();
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < reps; ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      if (!fns[f]) continue;
      auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      t[f].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v.empty() ? 0.0 : v[v.size() / 2]);
  }
  return medians;
}

/// Median microseconds of `reps` calls of `fn`, after `warmup` calls; every rank runs the same.
double time_us(const std::function<void()>& fn, int reps, int warmup = 5) {
  return time_in_turns({fn}, reps, warmup)[0];
}
/// `fn` where `ok`, else nothing to time (a baseline that is not there).
std::function<void()> when(bool ok, std::function<void()> fn) { return ok ? fn : std::function<void()>(); }

/// Microseconds per call of `reps` calls queued back to back on `stream`, waited for after the
/// last (as nccl-tests time): the median of 5 rounds; every rank runs the same.
double queued_us(const std::function<void()>& enqueue, const runtime::Stream& stream, int reps) {
  for (int i = 0; i < 10; ++i) enqueue();
  stream.synchronize();
  std::vector<double> t;
  for (int round = 0; round < 5; ++round) {
    barrier_all();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) enqueue();
    stream.synchronize();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Whether a CUDA GPU is here; where none is, `name` says it skips.
inline bool have_gpu(const char* name) {
  if (cuda::available()) return true;
  std::printf("%s: skipped, no CUDA GPU (%s)\n", name, cuda::unavailable_reason().c_str());
  return false;
}

}  // namespace tiledist::bench
