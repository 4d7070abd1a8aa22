// tiledist-stress: hunts for deadlocks and wrong results in the kernel library's communicating
// objects (Collectives, AgGemm, GemmRs, GemmAr) for a given time.
//
//   tiledist-stress [--seconds S] [--seed N] [--ranks 1,2,3,4] [--steps K] [--target host|cuda]
//   tiledist-stress --replay SEED --ranks R [--steps K] [--target ...]
//   tiledist-stress --self-test ...   (each job's first result is altered: every job must fail)
//
// It starts jobs one after another until the time is spent, each `tiledist-run -n R` of itself
// with a rank count R drawn from --ranks and a job seed drawn from --seed; every rank of a job
// draws the same schedule from the job seed (tools/stress/cases.h): objects of random kinds and
// shapes (ragged, tiny and large), runs of them back to back and interleaved, on random
// streams, apart and in place, each result checked against a reference. A job that fails
// (a wrong result, an error, a wait that times out, a rank that dies, the job's own time limit)
// ends the run with the command that replays it exactly. --target: cuda where an NVIDIA GPU is
// found, else host (ranks may share a GPU). Exit status: 0 when every job passed.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tiledist.h"
#include "tools/stress/cases.h"

namespace {

using namespace tiledist;
using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 60;
  uint64_t seed = 0;
  bool seeded = false;
  std::vector<int> ranks = {1, 2, 3, 4};
  int steps = 12;
  std::string target;  // host or cuda; empty: cuda where there is a GPU
  bool worker = false;
  bool replay = false;
  bool self_test = false;  // every job must fail: its first result is altered before its check
  double job_timeout = 600;
};

int usage(const std::string& msg) {
  std::fprintf(stderr,
               "tiledist-stress: %s\n"
               "usage: tiledist-stress [--seconds S] [--seed N] [--ranks 1,2,3,4] [--steps K] [--target host|cuda]\n"
               "                       [--job-timeout S]\n"
               "       tiledist-stress --replay SEED --ranks R [--steps K] [--target host|cuda]\n",
               msg.c_str());
  return 2;
}

bool parse(int argc, char** argv, Options& o, std::string& error) {
  auto number = [&](const char* v, double lo, double hi, double& out) {
    char* end = nullptr;
    out = std::strtod(v, &end);
    return *v && !*end && out >= lo && out <= hi;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    double x = 0;
    if (a == "--worker" || a == "--self-test") {
      (a == "--worker" ? o.worker : o.self_test) = true;
      continue;
    }
    if (!v) return error = str_cat("option '", a, "' needs a value (or is unknown)"), false;
    ++i;
    if (a == "--seconds") {
      if (!number(v, 0, 1e7, o.seconds)) return error = "--seconds takes a number of seconds", false;
    } else if (a == "--seed" || a == "--replay") {
      char* end = nullptr;
      o.seed = std::strtoull(v, &end, 0);
      if (!*v || *end) return error = str_cat(a, " takes a number"), false;
      o.seeded = true;
      o.replay = o.replay || a == "--replay";
    } else if (a == "--ranks") {
      o.ranks.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        if (!number(item.c_str(), 1, 64, x) || x != int(x))
          return error = "--ranks takes rank counts from 1 to 64, as 1,2,4", false;
        o.ranks.push_back(int(x));
      }
      if (o.ranks.empty()) return error = "--ranks names no rank count", false;
    } else if (a == "--steps") {
      if (!number(v, 1, 1e6, x)) return error = "--steps takes a positive number", false;
      o.steps = int(x);
    } else if (a == "--target") {
      if (std::string(v) != "host" && std::string(v) != "cuda") return error = "--target takes host or cuda", false;
      o.target = v;
    } else if (a == "--job-timeout") {
      if (!number(v, 1, 1e6, o.job_timeout)) return error = "--job-timeout takes a number of seconds", false;
    } else {
      return error = str_cat("unknown option '", a, "'"), false;
    }
  }
  if (o.replay && o.ranks.size() != 1) return error = "--replay takes one rank count (--ranks R)", false;
  return true;
}

/// One rank of a job: the schedule of `o.seed`, on the target; prints the summary on rank 0.
int worker(const Options& o) {
  const bool gpu = o.target == "cuda";
  const Target target = gpu ? Target::cuda() : Target::host();
  try {
    stress::Job job(target, o.seed, o.steps, o.self_test);
    job.run();
    if (job.me() == 0) {
      std::string summary;
      for (const auto& [kind, runs] : job.counts()) summary += str_cat(summary.empty() ? "" : ", ", kind, " x", runs);
      std::printf("runs: %s\n", summary.c_str());
    }
    barrier_all();  // (no rank leaves while a peer may still read its heap)
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

/// Where this program is, to start tiledist-run (beside it) and itself.
std::string self_dir() {
  char path[4096];
  const ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
  if (len <= 0) return ".";
  std::string p(path, size_t(len));
  return p.substr(0, p.rfind('/'));
}

std::vector<std::string> job_command(const Options& o, int ranks, uint64_t seed) {
  const std::string dir = self_dir();
  return {dir + "/tiledist-run",
          "-n",
          std::to_string(ranks),
          "--timeout",
          str_cat(o.job_timeout),
          dir + "/tiledist-stress",
          "--worker",
          "--seed",
          std::to_string(seed),
          "--steps",
          std::to_string(o.steps),
          "--target",
          o.target,
          o.self_test ? "--self-test" : "--worker"};  // (a second --worker says nothing new)
}
std::string shell_words(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

/// Runs a job to its end; returns its exit status (or 128 + the signal that ended it).
int run_job(const std::vector<std::string>& cmd) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& w : cmd) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::perror("tiledist-stress: cannot start tiledist-run");
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int driver(Options o) {
  if (!o.seeded) o.seed = std::random_device{}() ^ uint64_t(Clock::now().time_since_epoch().count());
  // Waits time out well inside a job's limit, so a hang is reported by the rank that waits.
  setenv("TILEDIST_WAIT_TIMEOUT", "60", 0);
  if (o.target == "cuda") setenv("TILEDIST_GPU_HEAP_SIZE", "1G", 0);
  std::printf("tiledist-stress: target %s, seed %llu, rank counts", o.target.c_str(), (unsigned long long)o.seed);
  for (int r : o.ranks) std::printf(" %d", r);
  std::printf(", %d steps a job, %s\n", o.steps, o.replay ? "one job (replay)" : str_cat(o.seconds, " s").c_str());
  std::mt19937_64 rng(o.seed);
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::map<int, int> jobs_by_ranks;
  int jobs = 0;
  do {
    const int ranks = o.ranks[std::uniform_int_distribution<size_t>(0, o.ranks.size() - 1)(rng)];
    const uint64_t seed = o.replay ? o.seed : rng();
    const auto cmd = job_command(o, ranks, seed);
    const auto t0 = Clock::now();
    const int status = run_job(cmd);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    ++jobs;
    ++jobs_by_ranks[ranks];
    std::printf("job %d: %d rank(s), seed %llu: %s (%.1f s)\n", jobs, ranks, (unsigned long long)seed,
                status == 0 ? "ok" : str_cat("FAILED, status ", status).c_str(), took);
    if (status != 0) {
      std::printf(
          "tiledist-stress: FAILED after %d job(s), %.0f s. Replay it with:\n  %s\n  (or: tiledist-stress --replay "
          "%llu --ranks %d --steps %d --target %s%s)\n",
          jobs, elapsed(), shell_words(cmd).c_str(), (unsigned long long)seed, ranks, o.steps, o.target.c_str(),
          o.self_test ? " --self-test" : "");
      return 1;
    }
  } while (!o.replay && elapsed() < o.seconds);
  std::string by;
  for (const auto& [r, k] : jobs_by_ranks) by += str_cat(by.empty() ? "" : ", ", k, " of ", r, " rank(s)");
  std::printf("tiledist-stress: %d job(s) passed in %.0f s (%s)\n", jobs, elapsed(), by.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string error;
  if (!parse(argc, argv, o, error)) return usage(error);
  if (o.target.empty()) o.target = cuda::available() ? "cuda" : "host";
  if (o.target == "cuda" && !cuda::available())
    return usage(str_cat("--target cuda, but no CUDA GPU is found here (", cuda::unavailable_reason(), ")"));
  return o.worker ? worker(o) : driver(o);
}
