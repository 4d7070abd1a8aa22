// Bootstrap: every rank creates its heap segment; the lowest rank of each host creates the
// host's control block; all map every heap of their host; after a barrier the names are
// unlinked (the mappings stay), so a crashed job leaves nothing behind in /dev/shm. Ranks on
// several hosts meet first at the rendezvous ($TILEDIST_MASTER), which says who shares a host.
#include "runtime/world.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/rendezvous.h"
#include "support/support.h"

namespace tiledist::runtime {

namespace {

constexpr uint64_t kMagic = 0x7469'6c65'6469'7374ull;  // "tiledist"

using Clock = std::chrono::steady_clock;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*end || v < 0) throw Error(str_cat("tiledist: $", name, " = '", value, "' is not a non-negative integer"));
  return static_cast<int>(v);
}

std::string segment_name(const std::string& session, const std::string& what) {
  return "/tiledist-" + session + "-" + what;
}

void* map_segment(const std::string& name, size_t bytes, bool create) {
  int fd = create ? shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw Error(str_cat("tiledist: cannot size shared memory ", name, " to ", bytes, " bytes: ", std::strerror(e)));
  }
  if (!create) {
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
      close(fd);
      return nullptr;  // not sized yet by its creator
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw Error(str_cat("tiledist: cannot map shared memory ", name, ": ", std::strerror(errno)));
  return p;
}

}  // namespace

World& World::get() {
  static World* world = [] {
    auto* w = new World();  // lives until exit: kernels of static destructors may still use it
    try {
      w->bootstrap();
    } catch (...) {
      // Leave nothing behind in /dev/shm for a start that failed.
      shm_unlink(segment_name(w->session_, str_cat("heap", w->rank_)).c_str());
      if (w->rank_ == w->leader_) shm_unlink(segment_name(w->session_, "ctl").c_str());
      throw;
    }
    return w;
  }();
  return *world;
}

World::World() = default;
World::~World() = default;

void World::bootstrap() {
  if (const char* r = env("TILEDIST_RANK")) {
    rank_ = env_int("TILEDIST_RANK", r);
    const char* s = env("TILEDIST_WORLD_SIZE");
    if (!s)
      throw Error("tiledist: $TILEDIST_RANK is set but $TILEDIST_WORLD_SIZE is not (start ranks with tiledist-run)");
    size_ = env_int("TILEDIST_WORLD_SIZE", s);
    const char* sess = env("TILEDIST_SESSION");
    session_ = sess ? sess : "job";
  } else if (const char* r = env("OMPI_COMM_WORLD_RANK")) {
    rank_ = env_int("OMPI_COMM_WORLD_RANK", r);
    const char* s = env("OMPI_COMM_WORLD_SIZE");
    size_ = s ? env_int("OMPI_COMM_WORLD_SIZE", s) : 1;
    const char* job = env("OMPI_MCA_ess_base_jobid");
    if (!job) job = env("PMIX_NAMESPACE");
    if (!job) throw Error("tiledist: under mpirun, but neither $OMPI_MCA_ess_base_jobid nor $PMIX_NAMESPACE is set");
    session_ = std::string("mpi") + job;
  } else {
    session_ = str_cat("solo", getpid());
  }
  if (size_ < 1 || size_ > kMaxRanks)
    throw Error(str_cat("tiledist: world size ", size_, " is out of range (1 to ", kMaxRanks, ")"));
  if (rank_ >= size_) throw Error(str_cat("tiledist: rank ", rank_, " is not below the world size ", size_));
  heap_size_ = env_size("TILEDIST_SYMM_HEAP_SIZE", size_t(256) << 20);
  if (const char* t = env("TILEDIST_WAIT_TIMEOUT")) {
    char* end = nullptr;
    wait_timeout_ = std::strtod(t, &end);
    if (*end || wait_timeout_ <= 0)
      throw Error(str_cat("tiledist: $TILEDIST_WAIT_TIMEOUT = '", t, "' is not a positive number of seconds"));
  }

  join_hosts();

  std::string ctl_name = segment_name(session_, "ctl");
  bases_.assign(size_, nullptr);
  bases_[rank_] = static_cast<char*>(map_segment(segment_name(session_, str_cat("heap", rank_)), heap_size_, true));
  if (!bases_[rank_])
    throw Error(str_cat("tiledist: rank ", rank_, " cannot create its heap in shared memory (",
                        segment_name(session_, str_cat("heap", rank_)), "): ", std::strerror(errno),
                        " -- is another job using session '", session_, "'?"));
  auto deadline = Clock::now() + std::chrono::duration<double>(wait_timeout_);
  if (rank_ == leader_) {
    ctl_ = static_cast<ControlBlock*>(map_segment(ctl_name, sizeof(ControlBlock), true));
    if (!ctl_) throw Error(str_cat("tiledist: cannot create ", ctl_name, ": ", std::strerror(errno)));
    ctl_->failed_rank.store(-1);
    ctl_->magic.store(kMagic, std::memory_order_release);
  } else {
    while (!(ctl_ = static_cast<ControlBlock*>(map_segment(ctl_name, sizeof(ControlBlock), false))) ||
           ctl_->magic.load(std::memory_order_acquire) != kMagic) {
      if (ctl_) munmap(ctl_, sizeof(ControlBlock));  // mapped before rank 0 finished: try again
      if (Clock::now() > deadline)
        throw Error(str_cat("tiledist: rank ", rank_, " waited ", wait_timeout_, " s for rank ", leader_,
                            " to start session '", session_, "'"));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ctl_->pids[rank_].store(getpid());
  ctl_->arrived.fetch_add(1);
  wait_until([&] { return ctl_->arrived.load() >= int(locals_.size()); }, "the start of all ranks");
  for (int r : locals_) {
    if (r == rank_) continue;
    bases_[r] = static_cast<char*>(map_segment(segment_name(session_, str_cat("heap", r)), heap_size_, false));
    if (!bases_[r])
      throw Error(str_cat("tiledist: rank ", rank_, " cannot map the heap of rank ", r, ": ", std::strerror(errno)));
  }
  local_barrier();  // every heap is mapped everywhere: the names can go
  shm_unlink(segment_name(session_, str_cat("heap", rank_)).c_str());
  if (rank_ == leader_) shm_unlink(ctl_name.c_str());
  offsets_.reset(heap_size_);
  // A rank that exits is not a rank that died: peers stop watching its pid. (Registered only
  // once bootstrap has succeeded; the handler touches nothing but the mapped control block.)
  static ControlBlock* exit_ctl = ctl_;
  static int exit_rank = rank_;
  static Rendezvous* exit_rendezvous = rendezvous_.get();
  std::atexit([] {
    exit_ctl->pids[exit_rank].store(0);
    if (exit_rendezvous) exit_rendezvous->leave();
  });
}

void World::join_hosts() {
  const char* master = env("TILEDIST_MASTER");
  if (!master) {
    // (Open MPI's ranks on several hosts cannot meet in shared memory)
    const char* local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local && env("OMPI_COMM_WORLD_RANK") && !env("TILEDIST_RANK") &&
        env_int("OMPI_COMM_WORLD_LOCAL_SIZE", local) < size_)
      throw Error(str_cat("tiledist: rank ", rank_, ": the job's ", size_, " ranks are on several hosts (", local,
                          " on this one) and $TILEDIST_MASTER is not set: give mpirun "
                          "-x TILEDIST_MASTER=HOST:PORT, rank 0's host and a free port"));
    for (int r = 0; r < size_; ++r) locals_.push_back(r);
    leader_ = 0;
    return;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  rendezvous_ =
      std::make_unique<Rendezvous>(rank_, size_, master, str_cat(host, ", session ", session_), wait_timeout_);
  const std::vector<std::string>& nodes = rendezvous_->nodes();
  std::vector<std::string> seen;
  for (int r = 0; r < size_; ++r) {
    if (nodes[size_t(r)] == nodes[size_t(rank_)]) locals_.push_back(r);
    if (std::find(seen.begin(), seen.end(), nodes[size_t(r)]) == seen.end()) seen.push_back(nodes[size_t(r)]);
  }
  leader_ = locals_.front();
  hosts_ = int(seen.size());
}

std::string World::peer_problem() const {
  int failed = ctl_->failed_rank.load();
  if (failed >= 0 && failed != rank_) return str_cat("rank ", failed, " failed: ", std::string(ctl_->failure[failed]));
  for (int r : locals_) {
    int64_t pid = ctl_->pids[r].load();
    if (r == rank_ || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      return str_cat("rank ", r, " (pid ", pid, ") has died");
  }
  return rendezvous_ ? rendezvous_->problem() : "";
}

void World::report_failure(const std::string& message) {
  if (!ctl_) return;
  std::snprintf(ctl_->failure[rank_], sizeof ctl_->failure[rank_], "%s", message.c_str());
  int expected = -1;
  ctl_->failed_rank.compare_exchange_strong(expected, rank_, std::memory_order_acq_rel);
  if (rendezvous_) rendezvous_->report_failure(message);
}

void World::wait_poll(const std::function<bool()>& done, const char* what) {
  auto start = Clock::now();
  auto next_check = start;
  for (int spins = 0; !done(); ++spins) {
    auto now = Clock::now();
    if (now >= next_check) {
      std::string problem = peer_problem();
      if (!problem.empty()) throw Error(str_cat("tiledist: rank ", rank_, " waiting for ", what, ": ", problem));
      if (now - start > std::chrono::duration<double>(wait_timeout_))
        throw Error(str_cat("tiledist: rank ", rank_, " timed out after ", wait_timeout_, " s waiting for ", what,
                            " ($TILEDIST_WAIT_TIMEOUT)"));
      next_check = now + std::chrono::milliseconds(10);
    }
    if (spins > 100) sched_yield();
  }
}

void World::barrier() {
  if (rendezvous_)
    rendezvous_->all_gather("", "barrier_all()", [this] { return peer_problem(); });
  else
    local_barrier();
}

void World::local_barrier() {
  int64_t mine = ctl_->host_barrier[rank_].fetch_add(1) + 1;
  wait_until(
      [&] {
        for (int r : locals_)
          if (ctl_->host_barrier[r].load(std::memory_order_acquire) < mine) return false;
        return true;
      },
      "barrier_all()");
}

std::vector<uint64_t> World::all_gather(uint64_t value, const char* what) {
  std::vector<uint64_t> all(size_t(size_), 0);
  if (rendezvous_) {
    const std::vector<std::string> parts = rendezvous_->all_gather(
        std::string(reinterpret_cast<const char*>(&value), sizeof value), what, [this] { return peer_problem(); });
    for (int r = 0; r < size_; ++r)
      if (parts[size_t(r)].size() == sizeof value) std::memcpy(&all[size_t(r)], parts[size_t(r)].data(), sizeof value);
    return all;
  }
  ctl_->exchange[rank_].store(value, std::memory_order_relaxed);
  local_barrier();  // (its acquire and release order the words)
  for (int r = 0; r < size_; ++r) all[size_t(r)] = ctl_->exchange[r].load(std::memory_order_relaxed);
  local_barrier();  // every rank has read them: the words may be used again
  return all;
}

void World::broadcast(void* data, size_t bytes, const char* what) {
  if (rendezvous_) {
    const std::vector<std::string> parts =
        rendezvous_->all_gather(rank_ == 0 ? std::string(static_cast<const char*>(data), bytes) : std::string(), what,
                                [this] { return peer_problem(); });
    if (parts[0].size() != bytes)
      throw Error(
          str_cat("tiledist: rank ", rank_, ": ", what, ": rank 0 sent ", parts[0].size(), " bytes, not ", bytes));
    std::memcpy(data, parts[0].data(), bytes);
    return;
  }
  void* shared = alloc(bytes);
  if (rank_ == 0) std::memcpy(shared, data, bytes);
  barrier();
  if (rank_ != 0) std::memcpy(data, at(shared, 0), bytes);
  barrier();  // every rank has its copy
  free(shared);
}

void World::agree_on_size(size_t bytes, const char* what) {
  int64_t seq = ++allocs_;
  if (rendezvous_) {
    const std::vector<std::string> sizes = rendezvous_->all_gather(
        std::to_string(bytes), str_cat(what, " on every rank"), [this] { return peer_problem(); });
    for (int r = 1; r < size_; ++r)
      if (sizes[size_t(r)] != sizes[0])
        throw Error(str_cat("tiledist: ", what, " #", seq, " differs between ranks: rank 0 asked for ", sizes[0],
                            " bytes, rank ", r, " for ", sizes[size_t(r)], " bytes"));
    return;
  }
  ctl_->alloc_size[rank_].store(static_cast<int64_t>(bytes));
  ctl_->alloc_seq[rank_].store(seq, std::memory_order_release);
  wait_until(
      [&] {
        for (int r = 0; r < size_; ++r)
          if (ctl_->alloc_seq[r].load(std::memory_order_acquire) < seq) return false;
        return true;
      },
      str_cat(what, " on every rank").c_str());
  // (the same words on every rank: rank 0's size and the first rank's that differs, whichever
  // rank reports first)
  std::string mismatch;
  const int64_t first = ctl_->alloc_size[0].load();
  for (int r = 1; r < size_ && mismatch.empty(); ++r) {
    int64_t other = ctl_->alloc_size[r].load();
    if (other != first)
      mismatch = str_cat("tiledist: ", what, " #", seq, " differs between ranks: rank 0 asked for ", first,
                         " bytes, rank ", r, " for ", other, " bytes");
  }
  barrier();  // nobody starts the next allocation before all have compared this one
  if (!mismatch.empty()) throw Error(mismatch);
}

void* World::alloc(size_t bytes) {
  if (bytes > heap_size_)
    throw Error(str_cat("tiledist: symm_alloc of ", bytes, " bytes is larger than the symmetric heap (", heap_size_,
                        " bytes; set $TILEDIST_SYMM_HEAP_SIZE)"));
  agree_on_size(bytes, "symm_alloc");
  int64_t off = offsets_.alloc(bytes);
  if (off < 0)
    throw Error(str_cat("tiledist: symm_alloc of ", bytes, " bytes does not fit: the symmetric heap holds ", heap_size_,
                        " bytes and its largest free block is ", offsets_.largest_free(),
                        " bytes (set $TILEDIST_SYMM_HEAP_SIZE)"));
  return bases_[rank_] + off;
}

void World::free(void* p) {
  if (!p) return;
  if (!contains(p) || !offsets_.free(static_cast<size_t>(static_cast<char*>(p) - bases_[rank_])))
    throw Error("tiledist: symm_free of a pointer that symm_alloc did not return (or freed twice)");
}

void HeapOffsets::reset(size_t size) {
  free_.clear();
  used_.clear();
  free_[0] = size;
}

int64_t HeapOffsets::alloc(size_t bytes) {
  size_t need = std::max<size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    size_t off = it->first, size = it->second;
    free_.erase(it);
    if (size > need) free_[off + need] = size - need;
    used_[off] = need;
    return static_cast<int64_t>(off);
  }
  return -1;
}

bool HeapOffsets::free(size_t off) {
  auto it = used_.find(off);
  if (it == used_.end()) return false;
  size_t size = it->second;
  used_.erase(it);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return true;
    }
  }
  free_[off] = size;
  return true;
}

size_t HeapOffsets::largest_free() const {
  size_t largest = 0;
  for (auto& [o, s] : free_) largest = std::max(largest, s);
  return largest;
}

size_t env_size(const char* name, size_t fallback) {
  const char* h = env(name);
  if (!h) return fallback;
  char* end = nullptr;
  unsigned long long v = std::strtoull(h, &end, 10);
  if (*end == 'M' || *end == 'm')
    v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, ++end;
  if (*end || v == 0) throw Error(str_cat("tiledist: $", name, " = '", h, "' is not a size (e.g. 512M, 2G)"));
  return (v + HeapOffsets::kAlign - 1) / HeapOffsets::kAlign * HeapOffsets::kAlign;
}

int device_ordinal(int count, const char* what) {
  if (count <= 0) throw Error(str_cat("tiledist: no ", what, " found"));
  // A variable's value as a number not below 0, else an error naming it.
  auto number = [](const char* name, const char* value) {
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (end == value || *end || v < 0 || v > INT32_MAX)
      throw Error(str_cat("tiledist: $", name, " = '", value, "' is not a device or rank number"));
    return static_cast<int>(v);
  };
  int ordinal = 0;
  if (const char* e = std::getenv("TILEDIST_DEVICE"))
    ordinal = number("TILEDIST_DEVICE", e);
  else if (const char* l = std::getenv("TILEDIST_LOCAL_RANK"))
    ordinal = number("TILEDIST_LOCAL_RANK", l) % count;
  else if (const char* l = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
    ordinal = number("OMPI_COMM_WORLD_LOCAL_RANK", l) % count;
  if (ordinal < 0 || ordinal >= count)
    throw Error(str_cat("tiledist: ", what, " ", ordinal, " does not exist (", count, " found)"));
  return ordinal;
}

bool World::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= bases_[rank_] && c < bases_[rank_] + heap_size_;
}

std::string World::check_at(const void* p, int64_t rank) const {
  if (rank < 0 || rank >= size_) return str_cat("rank ", rank, " is out of range (the world has ", size_, " ranks)");
  if (!contains(p)) return str_cat("pointer ", p, " is not in the symmetric heap (allocate it with symm_alloc)");
  if (!bases_[size_t(rank)])
    return str_cat("rank ", rank, " is on another host (", rendezvous_->nodes()[size_t(rank)],
                   "): the CPU backend's heaps are shared by the ranks of one host");
  return "";
}

void* World::at(const void* p, int rank) const {
  std::string err = check_at(p, rank);
  if (!err.empty()) throw Error("tiledist: symm_at: " + err);
  return bases_[rank] + (static_cast<const char*>(p) - bases_[rank_]);
}

}  // namespace tiledist::runtime

namespace tiledist {
int rank() { return runtime::World::get().rank(); }
int world_size() { return runtime::World::get().size(); }
void barrier_all() { runtime::World::get().barrier(); }
void* symm_alloc(size_t bytes) { return runtime::World::get().alloc(bytes); }
void symm_free(void* p) { runtime::World::get().free(p); }
void* symm_at(const void* p, int rank) { return runtime::World::get().at(p, rank); }
}  // namespace tiledist
