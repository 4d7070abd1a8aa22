// Bootstrap of the GPU world. Each rank creates its heap (cuMemCreate, exportable as a file
// descriptor) and listens on an abstract Unix socket; after a host barrier every rank connects
// to every peer, then answers each connection with its descriptor (SCM_RIGHTS), then reads the
// peers' answers. Then each process maps every heap into one reserved range, rank by rank.
#include "runtime/cuda_world.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "runtime/nvshmem.h"
#include "support/support.h"

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
  if (!c || c->cmsg_type != SCM_RIGHTS)
    throw Error(str_cat("tiledist: rank ", me, " got no heap descriptor from a peer"));
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

}  // namespace

static World* the_world = nullptr;  // once bootstrapped

World& World::get() {
  return once<World>([] {
    std::unique_ptr<World> w(new World());  // lives until exit, as the host World does
    w->bootstrap();
    the_world = w.get();
    set_failure_explainer([]() -> std::string { return the_world ? the_world->failure() : std::string(); });
    return w.release();
  });
}

World::World() = default;

void World::bootstrap() {
  if (nvshmem::world_kind() == nvshmem::WorldKind::nvshmem) return bootstrap_nvshmem();
  runtime::World& host = runtime::World::get();
  if (host.hosts() > 1)
    throw Error(str_cat("tiledist: rank ", host.rank(), ": the job's ranks are on ", host.hosts(),
                        " hosts, and the CUDA world maps its peers' GPU memory through this host's driver: run "
                        "it on the NVSHMEM world ($TILEDIST_WORLD=nvshmem)"));
  device();
  start_bootstrap(host, vmm_granularity());

  // This rank's heap, and a socket on which peers ask for it.
  handles_.assign(size_, 0);
  handles_[rank_] = vmm_create(heap_size_);
  Fd mine(vmm_export(handles_[rank_]));
  Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len = 0;
  sockaddr_un addr = socket_address(host.session(), rank_, &len);
  if (listener.fd < 0 || bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener.fd, runtime::kMaxRanks) != 0)
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
    if (from != r)
      throw Error(str_cat("tiledist: rank ", rank_, " asked rank ", r, " for its heap and rank ", from, " answered"));
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
  for (int r = 0; r < size_; ++r) bases_[r] = base_ + r * heap_size_;
  finish_bootstrap(host, {cuda::malloc, cuda::copy_to_device, cuda::memset, cuda::synchronize, host_mapped_alloc,
                          device().pci_location});
}

}  // namespace tiledist::cuda
