// The SHMEM-like world of the CPU backend: ranks are processes on one machine; each owns a
// symmetric heap in POSIX shared memory that every rank maps, so that a symmetric pointer
// (the same offset in every heap) can be translated to a peer's address.
//
// Bootstrap, from the environment: TILEDIST_RANK / TILEDIST_WORLD_SIZE / TILEDIST_SESSION
// (set by tiledist-run), or OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE under mpirun; with
// neither, the process is a world of one. With $TILEDIST_MASTER (HOST:PORT) the ranks also meet
// over TCP there (runtime/rendezvous.h), which is how a job spans hosts: the ranks of each host
// share memory as above, and the collectives (barriers, allocations' agreement, exchanges) and
// failures go through the rendezvous.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tiledist::runtime {

class Rendezvous;

/// The most ranks a World holds.
inline constexpr int kMaxRanks = 64;

/// Shared by all ranks: bootstrap state, barrier counters and the allocation log.
struct ControlBlock {
  std::atomic<uint64_t> magic;                     ///< set by rank 0 once the block is ready
  std::atomic<int32_t> arrived;                    ///< ranks that have joined the bootstrap
  std::atomic<int32_t> failed_rank;                ///< first rank that failed, or -1
  std::atomic<int64_t> pids[kMaxRanks];            ///< each rank's pid (0 once it exits normally)
  std::atomic<int64_t> host_barrier[kMaxRanks];    ///< calls of barrier_all() on the host
  std::atomic<int64_t> device_barrier[kMaxRanks];  ///< calls of shmem::barrier_all() in kernels
  std::atomic<int64_t> alloc_seq[kMaxRanks];       ///< collective allocations each rank has begun
  std::atomic<int64_t> alloc_size[kMaxRanks];      ///< the size of each rank's latest allocation
  std::atomic<uint64_t> exchange[kMaxRanks];       ///< each rank's value in World::all_gather
  /// Each rank's failure message; a rank writes only its own, before publishing failed_rank.
  char failure[kMaxRanks][256];
};

/// First-fit allocation of 256-byte aligned offsets in a heap; used collectively (the same calls
/// in the same order on every rank), so every rank gets the same offsets.
class HeapOffsets {
 public:
  static constexpr size_t kAlign = 256;  ///< bytes: every block's alignment and smallest size
  /// Forgets every allocation: one free block of `size` bytes at offset 0.
  void reset(size_t size);
  /// The offset of `bytes` (at least kAlign), or -1 when no free block is large enough.
  int64_t alloc(size_t bytes);
  /// Frees the block at `offset`; false when no block starts there.
  bool free(size_t offset);
  /// The size of the largest free block, in bytes.
  size_t largest_free() const;

 private:
  std::map<size_t, size_t> free_;  // offset -> size
  std::map<size_t, size_t> used_;
};

/// A size from the environment ("512M", "2G", or bytes; rounded up to a multiple of
/// HeapOffsets::kAlign), else `fallback`; Error names the variable when it is not a size.
size_t env_size(const char* name, size_t fallback);
/// The GPU a process uses among the `count` found: $TILEDIST_DEVICE, else its local rank
/// (tiledist-run's or Open MPI's) modulo the count, else 0. Error names `what` ("CUDA device")
/// when it does not exist.
int device_ordinal(int count, const char* what);

/// The SHMEM-like world of the CPU backend: the ranks of a job are processes, each with a
/// symmetric heap in POSIX shared memory that every rank of its host maps here. Ranks come from
/// $TILEDIST_RANK and $TILEDIST_WORLD_SIZE (tiledist-run), else Open MPI's; else a world of one.
/// A job on several hosts ($TILEDIST_MASTER) holds its collectives and failures in common, not
/// its heaps: the CPU backend's distributed kernels run on one host, and a GPU world across
/// hosts (NVSHMEM's) reaches the other hosts' GPUs itself.
class World {
 public:
  /// The process's world, bootstrapped on first use. Throws Error when bootstrap fails.
  static World& get();
  ~World();

  int rank() const { return rank_; }  ///< this process's rank, 0 to size() - 1
  int size() const { return size_; }  ///< the number of ranks (at most kMaxRanks)
  /// The job's name in its shared-memory segments: $TILEDIST_SESSION (default "job"),
  /// "mpi<jobid>" under mpirun, "solo<pid>" in a world of one.
  const std::string& session() const { return session_; }

  /// The hosts the ranks are on (1 unless $TILEDIST_MASTER joined ranks of several).
  int hosts() const { return hosts_; }
  /// Whether `rank` is on this host (its heap is mapped here; `rank` is not checked).
  bool local(int rank) const { return bases_[rank] != nullptr; }

  /// Blocks until every rank has called it as often as this one (host side).
  void barrier();
  /// Collective: every rank's `value`, in rank order. `what` names it in a wait's error.
  std::vector<uint64_t> all_gather(uint64_t value, const char* what);
  /// Collective: rank 0's `bytes` at `data` copied to `data` on every rank.
  void broadcast(void* data, size_t bytes, const char* what);
  /// Collective: every rank must ask for the same size, in the same order. Returns the
  /// address in this rank's heap; the offset is the same on every rank.
  void* alloc(size_t bytes);
  /// The collective step of an allocation (of this heap or another, e.g. a GPU heap): waits for
  /// every rank's request and throws Error, on every rank, when the sizes differ.
  void agree_on_size(size_t bytes, const char* what);
  /// Collective, in the same order on every rank.
  void free(void* p);
  /// The address of symmetric `p` in `rank`'s heap. Throws Error for a bad rank or a pointer
  /// outside this rank's heap.
  void* at(const void* p, int rank) const;
  /// Whether `p` points into this rank's heap.
  bool contains(const void* p) const;
  /// Why `at(p, rank)` would fail, or an empty string.
  std::string check_at(const void* p, int64_t rank) const;

  /// The start of `rank`'s heap, as mapped in this process (`rank` is not checked; null for a
  /// rank on another host).
  char* base(int rank) const { return bases_[rank]; }
  /// The size of every rank's heap in bytes ($TILEDIST_SYMM_HEAP_SIZE, default 256M).
  size_t heap_size() const { return heap_size_; }
  /// The block that the ranks share.
  ControlBlock& control() const { return *ctl_; }

  /// Waits until `done()` holds, polling; throws Error (naming `what`) on the wait timeout,
  /// when a peer process has died, or when a peer has reported a failure.
  template <class Pred>
  void wait_until(Pred done, const char* what);
  /// What is wrong with the peers (a dead process, a reported failure), or an empty string.
  std::string peer_problem() const;
  /// Tells the peers that this rank failed, so that their waits end promptly.
  void report_failure(const std::string& message);
  /// Seconds a wait may last ($TILEDIST_WAIT_TIMEOUT, default 120).
  double wait_timeout() const { return wait_timeout_; }

 private:
  World();
  void bootstrap();
  void join_hosts();     // the rendezvous, where $TILEDIST_MASTER asks for one
  void local_barrier();  // the barrier of this host's ranks, through the control block
  void wait_poll(const std::function<bool()>& done, const char* what);

  int rank_ = 0, size_ = 1;
  int leader_ = 0;           // the lowest rank of this host: it makes the control block
  std::vector<int> locals_;  // the ranks of this host
  int hosts_ = 1;
  std::unique_ptr<Rendezvous> rendezvous_;  // null on one host without $TILEDIST_MASTER
  std::string session_;
  size_t heap_size_ = 0;
  double wait_timeout_ = 120;
  ControlBlock* ctl_ = nullptr;
  std::vector<char*> bases_;
  int64_t allocs_ = 0;
  HeapOffsets offsets_;
};

template <class Pred>
void World::wait_until(Pred done, const char* what) {
  wait_poll(std::function<bool()>(done), what);
}

}  // namespace tiledist::runtime

namespace tiledist {

// Host API of the SHMEM-like runtime: calls of the process's World (runtime::World::get()).

/// This process's rank (World::rank).
int rank();
/// The number of ranks (World::size).
int world_size();
/// Blocks until every rank has called it as often as this one (World::barrier).
void barrier_all();
/// Collective: `bytes` of every rank's symmetric heap, at the same offset everywhere; every rank
/// must ask for the same size, in the same order (World::alloc). Throws Error where the sizes
/// differ or the heap has no room ($TILEDIST_SYMM_HEAP_SIZE).
void* symm_alloc(size_t bytes);
/// symm_alloc of `count` elements of T.
template <class T>
std::span<T> symm_alloc(size_t count) {
  return {static_cast<T*>(symm_alloc(count * sizeof(T))), count};
}
/// Collective, in the same order on every rank (World::free); null is ignored. Throws Error for
/// a pointer that symm_alloc did not return, or one freed already.
void symm_free(void* p);
/// The address of symmetric `p` on `rank` (for checks from the host).
///@{
void* symm_at(const void* p, int rank);
template <class T>
T* symm_at(T* p, int rank) {
  return static_cast<T*>(symm_at(static_cast<const void*>(p), rank));
}
///@}

}  // namespace tiledist
