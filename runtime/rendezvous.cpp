// The messages (a header and a payload, in the hosts' byte order: the job's hosts are one kind):
//   hello   rank -> 0      "size\nnode": who joins, for which world
//   table   0 -> rank      every rank's node
//   gather  rank -> 0      a rank's part of collective `seq`
//   result  0 -> rank      'r' and every part of `seq`, or 'x' and why it cannot finish
//   fail    any            a failure, as every rank is to name it (rank 0 forwards it)
//   bye     any            the sender is ending normally
#include "runtime/rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "support/support.h"

namespace tiledist::runtime {

namespace {

using Clock = std::chrono::steady_clock;

enum : uint32_t { kHello = 0x7464'0001, kTable, kGather, kResult, kFail, kBye };

struct Header {
  uint32_t type;
  int32_t from;
  int64_t seq;
  uint64_t bytes;
};

constexpr uint64_t kMaxPayload = uint64_t(1) << 30;

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put, n -= size_t(put);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= size_t(got);
  }
  return true;
}

/// Reads one message; false at the connection's end (or a malformed header).
bool read_message(int fd, Header* h, std::string* payload) {
  if (!read_all(fd, reinterpret_cast<char*>(h), sizeof *h) || h->bytes > kMaxPayload) return false;
  payload->assign(h->bytes, '\0');
  return read_all(fd, payload->data(), payload->size());
}

/// Waits until `fd` is readable; false when `deadline` passes first.
bool readable_by(int fd, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& s : parts) {
    const uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n).append(s);
  }
  return out;
}

std::vector<std::string> unpack(const std::string& in, size_t at = 0) {
  std::vector<std::string> parts;
  while (at + sizeof(uint64_t) <= in.size()) {
    uint64_t n = 0;
    std::memcpy(&n, in.data() + at, sizeof n);
    at += sizeof n;
    if (n > in.size() - at) break;
    parts.push_back(in.substr(at, n));
    at += n;
  }
  return parts;
}

/// "host:port" (the host may be "[v6 address]") split; Error names $TILEDIST_MASTER otherwise.
std::pair<std::string, std::string> split_address(const std::string& master) {
  const size_t colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == master.size())
    throw Error(str_cat("tiledist: the rendezvous address '", master, "' is not HOST:PORT ($TILEDIST_MASTER)"));
  std::string host = master.substr(0, colon), port = master.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end || p < 1 || p > 65535)
    throw Error(
        str_cat("tiledist: the rendezvous address '", master, "' has no port from 1 to 65535 ($TILEDIST_MASTER)"));
  return {host, port};
}

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Rank 0's listening socket on `port`, every interface (IPv6 and IPv4 where it can).
int listen_on(const std::string& port, const std::string& master) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(nullptr, port.c_str(), &hints, &found); e != 0)
    throw Error(str_cat("tiledist: rank 0 cannot listen at ", master, ": ", gai_strerror(e)));
  std::string why = "no address";
  int fd = -1;
  // (IPv6 first: a dual-stack socket takes IPv4 peers too)
  for (int family : {AF_INET6, AF_INET}) {
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
      if (a->ai_family != family) continue;
      fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
    if (fd >= 0) break;
  }
  freeaddrinfo(found);
  if (fd < 0) throw Error(str_cat("tiledist: rank 0 cannot listen at ", master, ": ", why, " ($TILEDIST_MASTER)"));
  return fd;
}

/// A connection to rank 0 at `master`, tried again until `deadline` (rank 0 may start later).
int connect_to(const std::string& host, const std::string& port, const std::string& master, int rank,
               Clock::time_point deadline, double timeout_s) {
  std::string why;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); e != 0) {
      why = gai_strerror(e);
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
          pollfd p{fd, POLLOUT, 0};
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
          int err = ETIMEDOUT;
          socklen_t len = sizeof err;
          if (::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 1, 2000))) > 0)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          r = err == 0 ? 0 : -1;
          errno = err;
        }
        if (r == 0) {
          freeaddrinfo(found);
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
          no_delay(fd);
          return fd;
        }
        why = std::strerror(errno);
        ::close(fd);
      }
      freeaddrinfo(found);
    }
    if (Clock::now() > deadline)
      throw Error(str_cat("tiledist: rank ", rank, " could not reach rank 0 at ", master, " within ", timeout_s,
                          " s: ", why, " ($TILEDIST_MASTER: rank 0's host and a free port)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string message(uint32_t type, int32_t from, int64_t seq, const std::string& payload) {
  Header h{type, from, seq, payload.size()};
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  return out.append(payload);
}

}  // namespace

struct Rendezvous::Peer {
  int fd = -1;
  int rank = -1;
  bool open = true;  // (the reading thread's)
  std::mutex sending;
  ~Peer() {
    if (fd >= 0) ::close(fd);
  }
};

Rendezvous::Rendezvous(int rank, int size, const std::string& master, const std::string& node, double timeout_s)
    : rank_(rank), size_(size), timeout_s_(timeout_s), master_(master) {
  const auto [host, port] = split_address(master);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  nodes_.assign(size_t(size), "");
  gone_.assign(size_t(size), false);
  died_.assign(size_t(size), "");
  if (rank_ == 0) {
    nodes_[0] = node;
    peers_.resize(size_t(size));
    const int listener = listen_on(port, master);
    // Every rank joined so far told, before rank 0 gives up: one waiting for the table ends with
    // the same words.
    auto refuse = [&](const std::string& why, int stray) {
      ::close(listener);
      const std::string m = message(kFail, 0, 0, why);
      if (stray >= 0) write_all(stray, m.data(), m.size()), ::close(stray);
      for (auto& p : peers_)
        if (p) write_all(p->fd, m.data(), m.size());
      throw Error(why);
    };
    for (int k = 1; k < size; ++k) {
      if (!readable_by(listener, deadline)) {
        std::string missing;
        for (int r = 1; r < size; ++r)
          if (!peers_[size_t(r)]) missing += str_cat(missing.empty() ? "" : ", ", r);
        refuse(str_cat("tiledist: rank 0 waited ", timeout_s, " s at ", master, " for rank(s) ", missing,
                       " to join ($TILEDIST_WAIT_TIMEOUT; is every host's launcher given this address?)"),
               -1);
      }
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) refuse(str_cat("tiledist: rank 0 at ", master, ": accept failed: ", std::strerror(errno)), -1);
      no_delay(fd);
      Header h{};
      std::string hello;
      if (!readable_by(fd, deadline) || !read_message(fd, &h, &hello) || h.type != kHello) {
        ::close(fd);  // (not one of ours, or gone at once: wait for another)
        --k;
        continue;
      }
      const size_t nl = hello.find('\n');
      const int their_size = std::atoi(hello.substr(0, nl).c_str()), r = h.from;
      if (their_size != size)
        refuse(str_cat("tiledist: rank ", r, " joined the rendezvous at ", master, " for a world of ", their_size,
                       " ranks; rank 0's has ", size),
               fd);
      if (r < 1 || r >= size || peers_[size_t(r)])
        refuse(str_cat("tiledist: a second rank ", r, " joined the rendezvous at ", master, " (a world of ", size,
                       " ranks): two jobs at one address, or two hosts given one node rank?"),
               fd);
      nodes_[size_t(r)] = nl == std::string::npos ? "" : hello.substr(nl + 1);
      peers_[size_t(r)] = std::make_unique<Peer>();
      peers_[size_t(r)]->fd = fd;
      peers_[size_t(r)]->rank = r;
    }
    ::close(listener);
    const std::string table = pack(nodes_);
    for (int r = 1; r < size; ++r) send(*peers_[size_t(r)], kTable, 0, 0, table);
  } else {
    auto p = std::make_unique<Peer>();
    p->fd = connect_to(host, port, master, rank, deadline, timeout_s);
    p->rank = 0;
    const std::string hello = message(kHello, rank, 0, str_cat(size, "\n", node));
    Header h{};
    std::string table;
    if (!write_all(p->fd, hello.data(), hello.size()))
      throw Error(str_cat("tiledist: rank ", rank, " lost its connection to rank 0 at ", master, " while joining"));
    if (!readable_by(p->fd, deadline))
      throw Error(str_cat("tiledist: rank ", rank, " waited ", timeout_s, " s at ", master,
                          " for every rank to join ($TILEDIST_WAIT_TIMEOUT)"));
    if (!read_message(p->fd, &h, &table))
      throw Error(
          str_cat("tiledist: rank ", rank, ": rank 0 at ", master, " ended the rendezvous before every rank joined"));
    if (h.type == kFail) throw Error(table);
    nodes_ = unpack(table);
    if (h.type != kTable || nodes_.size() != size_t(size))
      throw Error(str_cat("tiledist: rank ", rank, ": rank 0 at ", master, " answered with a malformed table"));
    peers_.push_back(std::move(p));
  }
  if (::pipe2(wake_, O_CLOEXEC) != 0)
    throw Error(str_cat("tiledist: rank ", rank_, ": cannot make a pipe: ", std::strerror(errno)));
  reader_ = std::thread([this] { serve(); });
}

Rendezvous::~Rendezvous() {
  leave();
  if (reader_.joinable()) {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    reader_.join();
  }
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void Rendezvous::send(Peer& to, uint32_t type, int32_t from, int64_t seq, const std::string& payload) {
  const std::string m = message(type, from, seq, payload);
  std::lock_guard<std::mutex> lock(to.sending);
  write_all(to.fd, m.data(), m.size());  // (a peer gone: its reading side says so)
}

void Rendezvous::serve() {
  std::vector<pollfd> fds;
  std::vector<int> which;  // peers_ index of each fd past the pipe's
  while (true) {
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    which.clear();
    for (size_t i = 0; i < peers_.size(); ++i)
      if (peers_[i] && peers_[i]->open) fds.push_back({peers_[i]->fd, POLLIN, 0}), which.push_back(int(i));
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Header h{};
      std::string payload;
      const int i = which[k - 1];
      if (read_message(fds[k].fd, &h, &payload))
        on_message(i, h.type, h.from, h.seq, std::move(payload));
      else
        on_closed(i);
    }
  }
}

void Rendezvous::on_message(int i, uint32_t type, int32_t from, int64_t seq, std::string payload) {
  if (type == kFail) {
    note_problem(payload);
    if (rank_ == 0) forward_failure(from, payload, from);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const int who = peers_[size_t(i)]->rank;
  if (type == kBye) {
    gone_[size_t(who)] = true;
    if (rank_ == 0) {
      std::vector<int64_t> pending;
      pending.reserve(gathers_.size());
      for (auto& [s, parts] : gathers_) pending.push_back(s);
      lock.unlock();
      for (int64_t s : pending) complete_if_ready(s);  // (those it left before end now)
      return;
    }
  } else if (type == kGather && rank_ == 0) {
    gathers_[seq][who] = std::move(payload);
    lock.unlock();
    complete_if_ready(seq);
    return;
  } else if (type == kResult && rank_ != 0 && !payload.empty()) {
    if (payload[0] == 'r')
      results_[seq] = unpack(payload, 1);
    else
      refused_[seq] = payload.substr(1);
  }
  changed_.notify_all();
}

void Rendezvous::on_closed(int i) {
  Peer& p = *peers_[size_t(i)];
  p.open = false;
  const std::string why =
      str_cat("rank ", p.rank, " (on ", nodes_[size_t(p.rank)], ") has died: its connection to ",
              rank_ == 0 ? "rank 0" : "this rank", " at ", master_, " ended before it said goodbye");
  {
    // (gone and why in one step: a gather completed between them would name no death)
    std::lock_guard<std::mutex> lock(mutex_);
    const bool said_bye = gone_[size_t(p.rank)];
    gone_[size_t(p.rank)] = true;
    if (said_bye) return;
    died_[size_t(p.rank)] = why;
    if (problem_.empty()) problem_ = why;
  }
  changed_.notify_all();
  if (rank_ == 0) forward_failure(p.rank, why, p.rank);
}

void Rendezvous::complete_if_ready(int64_t seq) {
  std::string answer;
  std::vector<std::string> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = gathers_.find(seq);
    if (it == gathers_.end()) return;
    auto& parts = it->second;
    std::string left, death;
    for (int r = 0; r < size_; ++r)
      if (!parts.count(r) && gone_[size_t(r)]) {
        left += str_cat(left.empty() ? "" : ", ", r);
        if (death.empty()) death = died_[size_t(r)];
      }
    if (!death.empty()) {
      answer = "x" + death;
    } else if (!left.empty()) {
      answer = str_cat("x", "rank(s) ", left, " ended before taking part");
    } else if (int(parts.size()) == size_) {
      for (auto& [r, part] : parts) all.push_back(std::move(part));
      answer = "r" + pack(all);
    } else {
      return;
    }
    gathers_.erase(it);
  }
  // The others told before rank 0 itself goes on: its goodbye, if it ends next, must come after.
  for (int r = 1; r < size_; ++r) {
    Peer* p = peers_[size_t(r)].get();
    if (p) send(*p, kResult, 0, seq, answer);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (answer[0] == 'r')
      results_[seq] = std::move(all);
    else
      refused_[seq] = answer.substr(1);
  }
  changed_.notify_all();
}

void Rendezvous::note_problem(const std::string& problem) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!problem_.empty()) return;
    problem_ = problem;
  }
  changed_.notify_all();
}

void Rendezvous::forward_failure(int failed, const std::string& message, int except) {
  for (int r = 1; r < size_; ++r) {
    Peer* p = peers_[size_t(r)].get();
    if (p && r != except) send(*p, kFail, failed, 0, message);
  }
}

std::vector<std::string> Rendezvous::all_gather(const std::string& mine, const std::string& what,
                                                const std::function<std::string()>& check) {
  int64_t seq;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seq = ++seq_;
    if (rank_ == 0) gathers_[seq][0] = mine;
  }
  if (rank_ == 0)
    complete_if_ready(seq);
  else
    send(*peers_[0], kGather, rank_, seq, mine);
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(timeout_s_);
  auto fail = [&](const std::string& why) {
    return Error(str_cat("tiledist: rank ", rank_, " waiting for ", what, ": ", why));
  };
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (auto it = results_.find(seq); it != results_.end()) {
      std::vector<std::string> parts = std::move(it->second);
      results_.erase(it);
      return parts;
    }
    if (auto it = refused_.find(seq); it != refused_.end()) throw fail(it->second);
    if (!problem_.empty()) throw fail(problem_);
    if (rank_ != 0 && gone_[0]) throw fail(str_cat("rank 0 (at ", master_, ") has ended"));
    if (Clock::now() - start > limit)
      throw Error(str_cat("tiledist: rank ", rank_, " timed out after ", timeout_s_, " s waiting for ", what,
                          " ($TILEDIST_WAIT_TIMEOUT)"));
    if (check) {
      lock.unlock();
      std::string local = check();
      if (!local.empty()) throw fail(local);
      lock.lock();
    }
    changed_.wait_for(lock, std::chrono::milliseconds(10));
  }
}

void Rendezvous::report_failure(const std::string& message) {
  const std::string why = str_cat("rank ", rank_, " failed: ", message);
  if (rank_ == 0)
    forward_failure(0, why, 0);
  else
    send(*peers_[0], kFail, rank_, 0, why);
}

std::string Rendezvous::problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problem_;
}

void Rendezvous::leave() {
  if (left_) return;
  left_ = true;
  for (auto& p : peers_)
    if (p) send(*p, kBye, rank_, 0, "");
}

}  // namespace tiledist::runtime
