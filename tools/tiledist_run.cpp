// tiledist-run: starts N ranks of a program on this machine.
//   tiledist-run -n N [--timeout S] [--bind] [--nodes K --node-rank I --master HOST:PORT] PROGRAM ARGS...
//   tiledist-run --topology
// Each rank gets TILEDIST_RANK, TILEDIST_WORLD_SIZE and a TILEDIST_SESSION shared by the job;
// each line it prints is prefixed with "[rank] ". When a rank fails, the others are ended and
// tiledist-run exits with the failing rank's status, naming it.
// A job on K hosts: tiledist-run on each, with the same -n, --nodes K, the host's number I (0 to
// K - 1) and rank 0's host and a free port there; host I's ranks are I * N to I * N + N - 1, and
// they meet the other hosts' at that address (TILEDIST_MASTER: runtime/rendezvous.h).
#include <fcntl.h>
#include <hwloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int usage(const char* msg) {
  std::fprintf(stderr,
               "tiledist-run: %s\n"
               "usage: tiledist-run -n N [--timeout SECONDS] [--bind] [--nodes K --node-rank I --master HOST:PORT]\n"
               "                    PROGRAM [ARGS...]\n"
               "       tiledist-run --topology\n",
               msg);
  return 2;
}

struct Rank {
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends of the child's stdout and stderr
  std::string out_buf, err_buf;
  bool running = false;
  int status = 0;
};

volatile sig_atomic_t g_interrupted = 0;
void on_signal(int sig) { g_interrupted = sig; }

void emit(int rank, std::string& buf, FILE* to, bool flush_all) {
  size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    std::fprintf(to, "[%d] %.*s\n", rank, static_cast<int>(nl - start), buf.data() + start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush_all && !buf.empty()) {
    std::fprintf(to, "[%d] %s\n", rank, buf.c_str());
    buf.clear();
  }
  std::fflush(to);
}

/// One group of cores per rank, from hwloc's view of the machine.
std::vector<hwloc_bitmap_t> rank_cpusets(hwloc_topology_t topo, int n) {
  int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  hwloc_obj_type_t unit = HWLOC_OBJ_CORE;
  if (cores <= 0) {
    unit = HWLOC_OBJ_PU;
    cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  }
  std::vector<hwloc_bitmap_t> sets;
  for (int r = 0; r < n; ++r) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int lo = cores >= n ? r * cores / n : r % cores;
    int hi = cores >= n ? (r + 1) * cores / n : lo + 1;
    for (int c = lo; c < hi; ++c) hwloc_bitmap_or(set, set, hwloc_get_obj_by_type(topo, unit, c)->cpuset);
    sets.push_back(set);
  }
  return sets;
}

int print_topology() {
  hwloc_topology_t topo;
  hwloc_topology_init(&topo);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    std::fprintf(stderr, "tiledist-run: hwloc cannot read this machine's topology\n");
    return 1;
  }
  auto count = [&](hwloc_obj_type_t t) { return hwloc_get_nbobjs_by_type(topo, t); };
  std::printf("machine: %d package(s), %d NUMA node(s), %d core(s), %d hardware thread(s)\n", count(HWLOC_OBJ_PACKAGE),
              count(HWLOC_OBJ_NUMANODE), count(HWLOC_OBJ_CORE), count(HWLOC_OBJ_PU));
  for (int i = 0; i < count(HWLOC_OBJ_NUMANODE); ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    char cpus[256];
    hwloc_bitmap_list_snprintf(cpus, sizeof cpus, node->cpuset);
    std::printf("numa %d: cpus %s, %llu MiB\n", i, cpus, (unsigned long long)(node->attr->numanode.local_memory >> 20));
  }
  int gpus = 0;
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo, pci));) {
    unsigned vendor = pci->attr->pcidev.vendor_id;
    unsigned cls = pci->attr->pcidev.class_id >> 8;
    if ((vendor != 0x10de && vendor != 0x1002) || (cls != 0x03)) continue;
    hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo, pci);
    char cpus[256] = "?";
    if (parent && parent->cpuset) hwloc_bitmap_list_snprintf(cpus, sizeof cpus, parent->cpuset);
    std::printf("gpu %d: %s %04x:%02x:%02x.%x, near cpus %s\n", gpus++, vendor == 0x10de ? "NVIDIA" : "AMD",
                pci->attr->pcidev.domain, pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func, cpus);
  }
  if (!gpus) std::printf("gpus: none found\n");
  hwloc_topology_destroy(topo);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 0, nodes = 1, node_rank = -1;
  double timeout = 0;
  bool bind = false;
  std::string master;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    std::string a = argv[i];
    if (a == "--topology") return print_topology();
    if (a == "--bind") {
      bind = true;
    } else if ((a == "-n" || a == "--timeout") && i + 1 < argc) {
      char* end = nullptr;
      const char* v = argv[++i];
      if (a == "-n") {
        n = static_cast<int>(std::strtol(v, &end, 10));
        if (*end || n < 1 || n > 64) return usage("-n takes a number of ranks from 1 to 64");
      } else {
        timeout = std::strtod(v, &end);
        if (*end || timeout <= 0) return usage("--timeout takes a positive number of seconds");
      }
    } else if ((a == "--nodes" || a == "--node-rank") && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end || v < 0 || v > 64) return usage((a + " takes a number from 0 to 64").c_str());
      (a == "--nodes" ? nodes : node_rank) = static_cast<int>(v);
    } else if (a == "--master" && i + 1 < argc) {
      master = argv[++i];
    } else if (a == "-h" || a == "--help") {
      usage("starts N ranks of PROGRAM");
      return 0;
    } else {
      return usage(("unknown option '" + a + "'").c_str());
    }
  }
  if (n == 0) return usage("-n N is required");
  if (i >= argc) return usage("no program given");
  if (nodes < 1) return usage("--nodes takes a number of hosts from 1 to 64");
  if (nodes > 1 && (node_rank < 0 || master.empty()))
    return usage("--nodes K needs this host's --node-rank (0 to K - 1) and --master HOST:PORT (rank 0's host)");
  if (node_rank >= nodes) return usage("--node-rank is a host's number from 0 to --nodes - 1");
  if (nodes * n > 64) return usage("at most 64 ranks in all (--nodes times -n)");
  if (node_rank < 0) node_rank = 0;
  if (master.empty() && std::getenv("TILEDIST_MASTER")) master = std::getenv("TILEDIST_MASTER");
  char** prog = argv + i;

  hwloc_topology_t topo = nullptr;
  std::vector<hwloc_bitmap_t> cpusets;
  if (bind) {
    hwloc_topology_init(&topo);
    if (hwloc_topology_load(topo) != 0) return usage("--bind: hwloc cannot read this machine's topology");
    cpusets = rank_cpusets(topo, n);
  }

  std::string session =
      std::to_string(getpid()) + "x" + std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    int out[2], err[2];
    auto abandon = [&](const char* what) {
      std::perror(what);
      for (int k = 0; k < r; ++k) kill(ranks[k].pid, SIGKILL);
      for (int k = 0; k < r; ++k) waitpid(ranks[k].pid, nullptr, 0);
      return 1;
    };
    if (pipe(out) != 0 || pipe(err) != 0) return abandon("tiledist-run: pipe");
    pid_t pid = fork();
    if (pid < 0) return abandon("tiledist-run: fork");
    if (pid == 0) {
      signal(SIGPIPE, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      setenv("TILEDIST_RANK", std::to_string(node_rank * n + r).c_str(), 1);
      setenv("TILEDIST_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("TILEDIST_WORLD_SIZE", std::to_string(nodes * n).c_str(), 1);
      setenv("TILEDIST_SESSION", session.c_str(), 1);
      if (!master.empty()) setenv("TILEDIST_MASTER", master.c_str(), 1);
      if (bind) {
        if (hwloc_set_cpubind(topo, cpusets[r], HWLOC_CPUBIND_PROCESS) != 0)
          std::fprintf(stderr, "tiledist-run: warning: rank %d could not be bound: %s\n", r, std::strerror(errno));
        hwloc_set_membind(topo, cpusets[r], HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_PROCESS);  // best effort
      }
      execvp(prog[0], prog);
      std::fprintf(stderr, "tiledist-run: cannot run %s: %s\n", prog[0], std::strerror(errno));
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    ranks[r] = Rank{pid, out[0], err[0], "", "", true, 0};
    if (bind) {
      char cpus[256];
      hwloc_bitmap_list_snprintf(cpus, sizeof cpus, cpusets[r]);
      std::fprintf(stderr, "tiledist-run: rank %d bound to cpus %s\n", node_rank * n + r, cpus);
    }
  }

  auto start = Clock::now();
  int first_failed = -1, exit_code = 0;
  Clock::time_point kill_deadline{};
  bool killing = false;
  auto end_all = [&](int sig) {
    for (auto& rk : ranks)
      if (rk.running) kill(rk.pid, sig);
  };
  int open_fds = 2 * n;
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;
    for (int r = 0; r < n; ++r) {
      if (ranks[r].out >= 0) fds.push_back({ranks[r].out, POLLIN, 0}), who.push_back({r, false});
      if (ranks[r].err >= 0) fds.push_back({ranks[r].err, POLLIN, 0}), who.push_back({r, true});
    }
    if (!fds.empty())
      poll(fds.data(), fds.size(), 50);
    else
      usleep(20000);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, is_err] = who[k];
      char buf[65536];
      ssize_t got = read(fds[k].fd, buf, sizeof buf);
      std::string& b = is_err ? ranks[r].err_buf : ranks[r].out_buf;
      if (got > 0) {
        b.append(buf, static_cast<size_t>(got));
        emit(node_rank * n + r, b, is_err ? stderr : stdout, false);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit(node_rank * n + r, b, is_err ? stderr : stdout, true);
        close(fds[k].fd);
        (is_err ? ranks[r].err : ranks[r].out) = -1;
        --open_fds;
      }
    }
    for (int r = 0; r < n; ++r) {
      Rank& rk = ranks[r];
      if (!rk.running) continue;
      int status;
      if (waitpid(rk.pid, &status, WNOHANG) != rk.pid) continue;
      rk.running = false;
      rk.status = status;
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && first_failed < 0 && !killing) {
        first_failed = r;
        if (WIFEXITED(status)) {
          exit_code = WEXITSTATUS(status);
          std::fprintf(stderr, "tiledist-run: rank %d exited with status %d; ending the other ranks\n",
                       node_rank * n + r, exit_code);
        } else {
          exit_code = 128 + WTERMSIG(status);
          std::fprintf(stderr, "tiledist-run: rank %d was killed by signal %d (%s); ending the other ranks\n",
                       node_rank * n + r, WTERMSIG(status), strsignal(WTERMSIG(status)));
        }
        killing = true;
        kill_deadline = Clock::now() + std::chrono::seconds(3);
        end_all(SIGTERM);
      }
    }
    bool any_running = false;
    for (auto& rk : ranks) any_running |= rk.running;
    if (!any_running && open_fds == 0) break;
    if (!any_running) {
      // Children are gone; drain what is left in the pipes without waiting for grandchildren.
      static auto drain_deadline = Clock::now() + std::chrono::seconds(2);
      if (Clock::now() > drain_deadline) break;
    }
    auto now = Clock::now();
    if (g_interrupted && !killing) {
      std::fprintf(stderr, "tiledist-run: interrupted (signal %d); ending all ranks\n", (int)g_interrupted);
      exit_code = 128 + g_interrupted;
      killing = true;
      kill_deadline = now + std::chrono::seconds(3);
      end_all(SIGTERM);
    }
    if (timeout > 0 && !killing && now - start > std::chrono::duration<double>(timeout)) {
      std::fprintf(stderr, "tiledist-run: timed out after %g s; ending all ranks\n", timeout);
      exit_code = 124;
      killing = true;
      kill_deadline = now + std::chrono::seconds(3);
      end_all(SIGTERM);
    }
    if (killing && now > kill_deadline) end_all(SIGKILL);
  }
  for (auto s : cpusets) hwloc_bitmap_free(s);
  if (topo) hwloc_topology_destroy(topo);
  return exit_code;
}
