// What the GPU lowering emits for the distributed ops: the device world's fields
// (runtime::DeviceWorld, a trailing kernel parameter), failing loudly (the world's failure
// record), spinning with a timeout, symm_at's translation between heaps, a wait's polls, the
// barrier of every program on every rank, and a memcpy's copy loops. Which threads meet at a
// program's barrier, and how a value thread 0 read reaches the others, is distributed.cpp's
// (a warp-specialized producer's one thread alone, or every thread): these emit what one
// thread, or every thread, runs between those barriers. Orders and scopes are the target's (GpuTarget's load, store,
// atomic, fence).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "codegen/gpu_target.h"
#include "support/device_world.h"

#pragma GCC visibility push(hidden)
namespace tiledist::codegen {

class WorldOps : public Elements {
 public:
  /// Whether the kernel's code reads the world (rank, num_ranks, symm_at, wait, barrier): it
  /// then takes the world's parameter after its own.
  static bool uses_world(const ir::Block& block);

 protected:
  WorldOps(llvm::LLVMContext& ctx, llvm::Module& m, const GpuOptions& opts, MakeGpuTarget make, std::string kernel)
      : Elements(ctx, m), target_(make(b_, m, opts)), kernel_(std::move(kernel)) {}

  /// Throws where a program of `threads` threads cannot run together (over 1024: num_warps
  /// wavefronts of 64 on AMD).
  void check_threads(int threads, const GpuOptions& opts) const {
    if (threads > 1024)
      throw Error(str_cat("tiledist: kernel '", kernel_, "': num_warps = ", opts.num_warps, " makes ", threads,
                          " threads per program on ", opts.arch, " (", target_->warp_size(),
                          " a warp); at most 1024 run together"));
  }

  llvm::Value* world_field(size_t offset, llvm::Type* t, llvm::Value* index = nullptr);
  llvm::Value* rank() { return world_field(offsetof(runtime::DeviceWorld, rank), b_.getInt32Ty()); }
  llvm::Value* num_ranks() { return world_field(offsetof(runtime::DeviceWorld, num_ranks), b_.getInt32Ty()); }
  llvm::Value* is_thread0() { return b_.CreateICmpEQ(tid_, b_.getInt32(0)); }
  llvm::Value* global_ptr(llvm::Value* p) { return b_.CreateAddrSpaceCast(p, b_.getPtrTy(1)); }
  void fence(ir::MemOrder order, ir::MemScope scope) { target_->fence(order, scope); }

  /// The thread gives up: it claims the world's failure record (the first to fail keeps it),
  /// fills it, and ends the program (GpuTarget::give_up); the host names the kernel, rank and
  /// what was waited for.
  void fail(runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected, llvm::Value* seen);
  /// if (cond) fail(...): the failing path ends the program.
  void fail_if(llvm::Value* cond, runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected,
               llvm::Value* seen);
  /// Spins until `poll()` (emitted in the loop) returns true; past `timeout` nanoseconds (by
  /// default the world's; 0: never) the thread fails with `kind`, reporting `report()`
  /// (address, expected, seen: emitted on the slow path, after a poll), or in a kernel without a
  /// world, where there is no record to fill, traps. The clock is first read after a poll has
  /// failed, not before the first poll: on H200 a %globaltimer read that ptxas placed just
  /// before a wait's first load made that load fault (CUDA_ERROR_ILLEGAL_ADDRESS on a mapped
  /// address) in some kernels (bench/RESULTS.md, 2026-11-23); a wait already satisfied then
  /// reads no clock at all.
  void spin_until(const std::function<llvm::Value*()>& poll, runtime::DeviceFailure kind,
                  const std::function<std::array<llvm::Value*, 3>()>& report, llvm::Value* timeout = nullptr);

  /// symm_at(p, r) for each pointer of one op: checks r (failing, reporting `probe`, where it
  /// names no rank) and returns the map of a pointer into this rank's heap to its place in rank
  /// r's heap as mapped here (failing where it is outside the heap).
  std::function<llvm::Value*(llvm::Value*)> symm_at(llvm::Value* r, llvm::Value* probe);
  /// wait(p, n, v)'s polls: reads words first, first + step, ... < n of type `t` from p with
  /// ld.<acquire|relaxed>.<scope> (the op's order and scope) until each compares to v (its
  /// `cmp`), giving up (fail) after the world's timeout. Returns the last word read (0 where
  /// none). One thread polls all n (first 0, step 1), or each thread of a program its share
  /// (first its thread, step the threads).
  llvm::Value* poll_words(const ir::Op& wait, llvm::Type* t, llvm::Value* p, llvm::Value* n, llvm::Value* want,
                          llvm::Value* first = nullptr, int64_t step = 1);
  /// A wait on a block of pointers, a thread's share: reads the word at each of `ptrs` (ld.relaxed
  /// at the op's scope, all issued before any is compared) until every one compares to the
  /// value beside it in `wants`, then, where the op acquires, fences (acquire) once. Fails as
  /// poll_words does, reporting the first word that did not compare.
  void poll_each(const ir::Op& wait, llvm::Type* t, const std::vector<llvm::Value*>& ptrs,
                 const std::vector<llvm::Value*>& wants);
  /// The barrier of every program on every rank (barrier_all, sync_all), as thread 0 of each
  /// program runs it between two of its program's barriers: a central counter on rank 0 and a
  /// generation word on every rank (the heaps' reserved words). It reads its rank's generation,
  /// arrives with an acq_rel add on the counter; the last to arrive resets the counter and
  /// releases everyone by bumping every rank's generation; the others spin until theirs moves
  /// (or give up after the timeout: a grid larger than the GPU holds at once would never arrive).
  void device_barrier_by_thread0();
  /// memcpy's copy of `n` bytes (i64) from `src` to `dst` by `threads` threads (this one tid_):
  /// 16 bytes at a time where both ends and the size allow, else bytewise. The program's
  /// threads meet before it (the source is written) and after (the copy is done before whatever
  /// the program does next, a signal included): the lowering's barriers.
  void copy_by_threads(llvm::Value* dst, llvm::Value* src, llvm::Value* n, int threads);
  /// NVSHMEM's copy by every thread of the program (nvshmemx_{put,get}mem[_nbi]_block): `n`
  /// bytes between `here`, a symmetric address of this rank's heap, on `pe`, and `other`, an
  /// address here; `put`: here on pe <- other, else other <- here on pe. Declared in the module,
  /// defined by NVSHMEM's device library, which the backend links.
  void nvshmem_copy(bool put, bool nbi, llvm::Value* here, llvm::Value* other, llvm::Value* n, llvm::Value* pe);
  /// NVSHMEM's atomic by this thread on `here` (a symmetric address of this rank's heap, an i32
  /// or i64 word: `wide`) on `pe`: set (xchg) or add of `v`, fetching the old value (swap,
  /// fetch_add; returned) where `fetch`, else none (null returned). Where `release`, a release
  /// fence at system scope (every earlier write, to any rank) and nvshmem_fence() (the puts to
  /// pe) first. Declared here, defined
  /// by NVSHMEM's device library.
  llvm::Value* nvshmem_atomic(bool add, bool wide, bool fetch, bool release, llvm::Value* here, llvm::Value* v,
                              llvm::Value* pe);
  /// NVSHMEM's nvshmem_quiet() (`quiet`: the puts this PE made are complete) or nvshmem_fence()
  /// (they are ordered, peer by peer), by this thread. Defined by NVSHMEM's device library.
  void nvshmem_order(bool quiet);

  /// A variable for loops to carry: an alloca in the entry block, holding `init` from here on
  /// (a register after mem2reg).
  llvm::Value* local(llvm::Type* t, llvm::Value* init);
  /// A counted loop `for (i = start; i < n; i += step)` with the body emitted by `body(i)`; i has
  /// the type of `start`.
  void counted_loop(llvm::Value* start, llvm::Value* n, int64_t step, const std::function<void(llvm::Value*)>& body);

  std::unique_ptr<GpuTarget> target_;
  llvm::Function* fn_ = nullptr;
  llvm::Value* tid_ = nullptr;
  llvm::Value* world_ = nullptr;          // the DeviceWorld parameter of kernels with distributed ops
  std::map<const ir::Value*, int> uses_;  // the kernel's values: how many uses each has (ir::count_uses)

 private:
  std::string kernel_;  // (named in the failure record)
};

}  // namespace tiledist::codegen
#pragma GCC visibility pop
