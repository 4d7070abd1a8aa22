// Bootstrap of the GPU world. Each rank creates its heap (cuMemCreate, exportable as a file
// descriptor) and listens on an abstract Unix socket; after a host barrier every rank connects
// to every peer, then answers each connection with its descriptor (SCM_RIGHTS), then reads the
// peers' answers. Then each process maps every heap into one reserved range, rank by rank.
#include "runtime/cuda_world.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ir/support.h"

namespace tiledist::cuda {

namespace {

/// A file descriptor closed with the object.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_un socket_address(const std::string& session, int rank, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = str_cat("tiledist-", session, "-gpu", rank);  // abstract: no file, gone with the process
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof a.sun_path - 2));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof a.sun_path - 2));
  return a;
}

[[noreturn]] void sys_fail(int rank, const std::string& what) {
  throw Error(str_cat("tiledist: rank ", rank, " could not ", what, ": ", std::strerror(errno)));
}

/// Sends `fd` and our rank over the connected socket `s`.
void send_fd(int s, int fd, int32_t rank) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&rank, sizeof rank};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(s, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof rank)) sys_fail(rank, "send its heap to a peer");
}

/// Receives a descriptor and the sender's rank from `s`.
int recv_fd(int s, int32_t* from, int me) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{from, sizeof *from};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(s, &msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof *from)) sys_fail(me, "receive a peer's heap");
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) throw Error(str_cat("tiledist: rank ", me, " got no heap descriptor from a peer"));
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace

static World* the_world = nullptr;  // once bootstrapped

World& World::get() {
  static World* world = [] {
    auto* w = new World();  // lives until exit, as the host World does
    w->bootstrap();
    the_world = w;
    set_failure_explainer([]() -> std::string { return the_world ? the_world->failure() : std::string(); });
    return w;
  }();
  return *world;
}

void World::note_kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(kernels_mutex_);
  kernels_.emplace(runtime::kernel_tag(name), name);
}

World::World() = default;

void World::bootstrap() {
  runtime::World& host = runtime::World::get();
  rank_ = host.rank();
  size_ = host.size();
  timeout_s_ = host.wait_timeout();
  if (size_ > runtime::kMaxDeviceRanks)
    throw Error(str_cat("tiledist: the GPU world holds at most ", runtime::kMaxDeviceRanks, " ranks, not ", size_));
  device();
  const size_t g = vmm_granularity();
  heap_size_ = (runtime::env_size("TILEDIST_GPU_HEAP_SIZE", size_t(1) << 30) + g - 1) / g * g;

  // This rank's heap, and a socket on which peers ask for it.
  handles_.assign(size_, 0);
  handles_[rank_] = vmm_create(heap_size_);
  Fd mine(vmm_export(handles_[rank_]));
  Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len = 0;
  sockaddr_un addr = socket_address(host.session(), rank_, &len);
  if (listener.fd < 0 || bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener.fd, runtime::kMaxRanks) != 0)
    sys_fail(rank_, "listen for its peers (is another job using this session?)");
  host.barrier();  // every rank listens

  std::vector<Fd> to_peer(size_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    to_peer[r] = Fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un peer = socket_address(host.session(), r, &len);
    if (to_peer[r].fd < 0 || connect(to_peer[r].fd, reinterpret_cast<sockaddr*>(&peer), len) != 0)
      sys_fail(rank_, str_cat("connect to rank ", r));
  }
  for (int k = 0; k + 1 < size_; ++k) {  // every peer connected to us: answer each
    Fd c(accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.fd < 0) sys_fail(rank_, "accept a peer");
    send_fd(c.fd, mine.fd, rank_);
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    int32_t from = -1;
    Fd theirs(recv_fd(to_peer[r].fd, &from, rank_));
    if (from != r) throw Error(str_cat("tiledist: rank ", rank_, " asked rank ", r, " for its heap and rank ", from, " answered"));
    handles_[r] = vmm_import(theirs.fd);
  }

  // Every heap mapped here, rank by rank, in one range.
  base_ = static_cast<char*>(vmm_reserve(heap_size_ * size_));
  for (int r = 0; r < size_; ++r) {
    try {
      vmm_map(base_ + r * heap_size_, heap_size_, handles_[r]);
    } catch (const Error& e) {
      throw Error(str_cat(e.what(), " (rank ", rank_, " mapping the GPU heap of rank ", r,
                          ": can this GPU reach that one? every pair needs peer access, e.g. NVLink)"));
    }
  }
  offsets_.reset(heap_size_);
  offsets_.alloc(runtime::kHeapReservedBytes);  // the device barrier's words, at offset 0 everywhere
  cuda::memset(base_ + rank_ * heap_size_, 0, runtime::kHeapReservedBytes);
  cuda::synchronize();
  host.barrier();  // every rank has mapped every heap

  runtime::DeviceWorld w{};
  w.rank = rank_;
  w.num_ranks = size_;
  w.heap_size = heap_size_;
  w.timeout_ns = static_cast<uint64_t>(timeout_s_ * 1e9);
  void* failure_on_device = nullptr;
  failure_ = static_cast<runtime::DeviceFailureRecord*>(host_mapped_alloc(sizeof(runtime::DeviceFailureRecord), &failure_on_device));
  w.failure = reinterpret_cast<uint64_t>(failure_on_device);
  for (int r = 0; r < size_; ++r) w.bases[r] = reinterpret_cast<uint64_t>(base_ + r * heap_size_);
  device_world_ = cuda::malloc(sizeof w);
  copy_to_device(device_world_, &w, sizeof w);
}

void* World::alloc(size_t bytes) {
  if (bytes > heap_size_)
    throw Error(str_cat("tiledist: a GPU symmetric allocation of ", bytes, " bytes is larger than the GPU heap (",
                        heap_size_, " bytes; set $TILEDIST_GPU_HEAP_SIZE)"));
  runtime::World::get().agree_on_size(bytes, "GPU symmetric allocation");
  int64_t off = offsets_.alloc(bytes);
  if (off < 0)
    throw Error(str_cat("tiledist: a GPU symmetric allocation of ", bytes, " bytes does not fit: the GPU heap holds ",
                        heap_size_, " bytes and its largest free block is ", offsets_.largest_free(),
                        " bytes (set $TILEDIST_GPU_HEAP_SIZE)"));
  return base_ + rank_ * heap_size_ + off;
}

void World::free(void* p) {
  if (!p) return;
  if (!contains(p) || !offsets_.free(static_cast<size_t>(static_cast<char*>(p) - (base_ + rank_ * heap_size_))))
    throw Error("tiledist: freeing a GPU pointer that the GPU symmetric heap did not allocate (or freed twice)");
}

bool World::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  const char* mine = base_ + rank_ * heap_size_;
  return c >= mine && c < mine + heap_size_;
}

void* World::at(const void* p, int rank) const {
  if (rank < 0 || rank >= size_) throw Error(str_cat("tiledist: symm_at: rank ", rank, " is out of range (the world has ", size_, " ranks)"));
  if (!contains(p)) throw Error(str_cat("tiledist: symm_at: pointer ", p, " is not in this rank's GPU symmetric heap"));
  return const_cast<char*>(static_cast<const char*>(p)) + (rank - rank_) * static_cast<std::ptrdiff_t>(heap_size_);
}

std::string World::failure() const {
  using runtime::DeviceFailure;
  volatile runtime::DeviceFailureRecord* f = failure_;
  if (!f || f->kind == 0) return "";
  for (int i = 0; i < 1000 && !f->complete; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Where an address falls: rank and offset in the heaps mapped here.
  auto where = [&](uint64_t a) {
    const auto* c = reinterpret_cast<const char*>(a);
    if (c >= base_ && c < base_ + heap_size_ * size_) {
      int64_t off = c - base_;
      return str_cat("byte offset ", off % static_cast<int64_t>(heap_size_), " of rank ", off / static_cast<int64_t>(heap_size_),
                     "'s GPU heap");
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
      return str_cat(head, "gave up after ", timeout_s_, " s ($TILEDIST_WAIT_TIMEOUT) in a device barrier (barrier_all, ",
                     "sync_all): ", f->seen, " of ", f->expected, " programs of all ranks had arrived. A device barrier ",
                     "needs every program of the grid resident at once on every rank: launch at most as many as the ",
                     "GPU holds");
    case DeviceFailure::symm_at_bad_rank:
      return str_cat(head, "symm_at to rank ", f->expected, ", but the world has ", f->seen, " ranks");
    default:
      return str_cat(head, "failed (record kind ", f->kind, ")");
  }
}

}  // namespace tiledist::cuda
