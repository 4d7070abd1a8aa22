// tiledist-cache: looks after the on-disk kernel cache ($TILEDIST_CACHE_DIR, or --cache DIR).
//   stats | list | verify | clear | prune --max-size SIZE
//   export --target T|all FILE.tar.xz | import FILE.tar.xz
// Entries are replaced by atomic renames, so jobs and warmups running meanwhile never see half an
// entry; import checks every entry before it enters the cache.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "jit/cache.h"
#include "tiledist.h"

namespace {
namespace fs = std::filesystem;
using namespace tiledist;

int usage(const char* msg) {
  std::fprintf(stderr,
               "tiledist-cache: %s\n"
               "usage: tiledist-cache [--cache DIR] stats|list|verify|clear\n"
               "       tiledist-cache [--cache DIR] prune --max-size SIZE   (bytes, or with K, M, G)\n"
               "       tiledist-cache [--cache DIR] export --target T|all FILE.tar.xz\n"
               "       tiledist-cache [--cache DIR] import FILE.tar.xz\n",
               msg);
  return 2;
}

struct Entry {
  fs::path path;
  std::string key;
  uintmax_t size = 0;
  fs::file_time_type used;
  jit::Artifact artifact;
  jit::CacheRead state = jit::CacheRead::miss;
};

std::vector<Entry> entries(const std::string& dir, bool read) {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".tdk") continue;
    Entry e;
    e.path = f.path();
    e.key = f.path().stem().string();
    e.size = f.file_size(ec);
    e.used = f.last_write_time(ec);
    if (read) e.state = jit::read_cache_entry(dir, e.key, e.artifact);
    out.push_back(std::move(e));
  }
  return out;
}

std::string when(fs::file_time_type t) {
  auto sys = std::chrono::time_point_cast<std::chrono::system_clock::duration>(t - fs::file_time_type::clock::now() +
                                                                               std::chrono::system_clock::now());
  std::time_t tt = std::chrono::system_clock::to_time_t(sys);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&tt));
  return buf;
}

std::string human(uintmax_t bytes) {
  char buf[32];
  if (bytes >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%ju B", bytes);
  return buf;
}

uintmax_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = unit.empty() || unit == "B"    ? 1
                : unit == "K" || unit == "KIB" ? 1024
                : unit == "M" || unit == "MIB" ? 1 << 20
                : unit == "G" || unit == "GIB" ? double(1 << 30)
                : unit == "T" || unit == "TIB" ? 1099511627776.0
                                               : -1;
  double bytes = v * mult;
  if (s.empty() || end == s.c_str() || !std::isfinite(v) || v < 0 || mult < 0 || bytes > 9.0e18)
    throw Error("tiledist-cache: --max-size '" + s + "': give bytes, or a number with K, M, G or T");
  return static_cast<uintmax_t>(bytes);
}

/// Runs a command (no shell); throws Error with its exit status.
void run(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    std::perror(a[0]);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw Error(str_cat("tiledist-cache: ", argv[0], " not found (it needs tar and xz)"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(str_cat("tiledist-cache: ", argv[0],
                        WIFEXITED(status) ? str_cat(" exited with status ", WEXITSTATUS(status))
                                          : str_cat(" was killed by signal ", WTERMSIG(status))));
}

}  // namespace

int main(int argc, char** argv) {
  // --cache DIR may come anywhere: a command must never fall back to the default cache because
  // the option came after it.
  std::vector<std::string> args;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cache") {
      if (i + 1 >= argc) return usage("--cache needs a directory");
      dir = argv[++i];
    } else if (a == "-h" || a == "--help") {
      usage("looks after the kernel cache");
      return 0;
    } else {
      args.push_back(a);
    }
  }
  if (args.empty()) return usage("no command given");
  auto no_more = [&](size_t n) { return args.size() == n; };
  if (dir.empty()) dir = jit::Context().cache_dir();
  const std::string cmd = args[0];
  try {
    if ((cmd == "stats" || cmd == "list" || cmd == "verify" || cmd == "clear") && !no_more(1))
      return usage(("unexpected argument '" + args[1] + "' after " + cmd).c_str());
    if (cmd == "stats") {
      auto all = entries(dir, true);
      std::map<std::string, std::pair<size_t, uintmax_t>> by_target;
      uintmax_t total = 0;
      size_t bad = 0;
      for (auto& e : all) {
        total += e.size;
        if (e.state != jit::CacheRead::hit) ++bad;
        auto& t = by_target[e.state == jit::CacheRead::hit ? e.artifact.target : "(unreadable)"];
        t.first++, t.second += e.size;
      }
      std::printf("cache %s: %zu entries, %s\n", dir.c_str(), all.size(), human(total).c_str());
      for (auto& [t, v] : by_target)
        std::printf("  %-14s %6zu entries  %s\n", t.c_str(), v.first, human(v.second).c_str());
      if (bad) std::printf("  %zu entries do not check out: run `tiledist-cache verify`\n", bad);
      return 0;
    }
    if (cmd == "list") {
      auto all = entries(dir, true);
      std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.used > b.used; });
      std::printf("%-18s %-8s %10s  %-16s %s\n", "kernel", "target", "size", "last use", "specialization");
      for (auto& e : all) {
        if (e.state != jit::CacheRead::hit) {
          std::printf("%-18s %-8s %10s  %-16s %s\n", "(corrupt)", "-", human(e.size).c_str(), when(e.used).c_str(),
                      e.key.c_str());
          continue;
        }
        std::printf("%-18s %-8s %10s  %-16s %s\n", e.artifact.kernel.c_str(), e.artifact.target.c_str(),
                    human(e.size).c_str(), when(e.used).c_str(),
                    e.artifact.spec.empty() ? e.key.c_str() : e.artifact.spec.c_str());
      }
      return 0;
    }
    if (cmd == "verify") {
      size_t ok = 0, removed = 0;
      for (auto& e : entries(dir, true)) {
        if (e.state == jit::CacheRead::hit) {
          ++ok;
        } else if (e.state == jit::CacheRead::corrupt) {
          std::printf("corrupt: %s (removed)\n", e.path.c_str());
          fs::remove(e.path);
          ++removed;
        } else {  // gone meanwhile (a prune), or unreadable: not ours to delete
          std::printf("unreadable, left alone: %s\n", e.path.c_str());
        }
      }
      std::printf("tiledist-cache verify: %zu entries check out, %zu corrupt removed\n", ok, removed);
      return removed ? 1 : 0;
    }
    if (cmd == "clear") {
      size_t n = 0;
      for (auto& e : entries(dir, false)) n += fs::remove(e.path);
      std::printf("tiledist-cache clear: removed %zu entries from %s\n", n, dir.c_str());
      return 0;
    }
    if (cmd == "prune") {
      if (args.size() != 3 || args[1] != "--max-size") return usage("prune takes --max-size SIZE");
      uintmax_t limit = parse_size(args[2]);
      auto all = entries(dir, false);
      std::sort(all.begin(), all.end(),
                [](const Entry& a, const Entry& b) { return a.used < b.used; });  // oldest first
      uintmax_t total = 0;
      for (auto& e : all) total += e.size;
      size_t removed = 0;
      for (auto& e : all) {
        if (total <= limit) break;
        fs::remove(e.path);
        total -= e.size;
        ++removed;
      }
      std::printf("tiledist-cache prune: removed %zu least recently used entries; %s left\n", removed,
                  human(total).c_str());
      return 0;
    }
    if (cmd == "export") {
      if (args.size() != 4 || args[1] != "--target") return usage("export takes --target T|all FILE.tar.xz");
      std::string target = args[2] == "all" ? "all" : Target::parse(args[2]).name();
      std::string out = fs::absolute(args[3]).string();
      // The names go to tar in a file, not on its command line (a cache may hold many thousands).
      std::string list = str_cat(out, ".", getpid(), ".list");
      size_t n = 0;
      {
        FILE* f = std::fopen(list.c_str(), "w");
        if (!f) throw Error("tiledist-cache: cannot write " + list);
        for (auto& e : entries(dir, true))
          if (e.state == jit::CacheRead::hit && (target == "all" || e.artifact.target == target)) {
            std::fprintf(f, "%s\n", e.path.filename().c_str());
            ++n;
          }
        std::fclose(f);
      }
      try {
        if (n == 0) throw Error(str_cat("tiledist-cache: no entries for target ", target, " in ", dir));
        run({"tar", "-C", dir, "-cJf", out, "-T", list});
      } catch (...) {
        fs::remove(list);
        fs::remove(out);
        throw;
      }
      fs::remove(list);
      std::printf("tiledist-cache export: %zu entries for %s into %s\n", n, target.c_str(), args[3].c_str());
      return 0;
    }
    if (cmd == "import") {
      if (args.size() != 2) return usage("import takes FILE.tar.xz");
      fs::create_directories(dir);
      fs::path staging = fs::path(dir) / str_cat(".import.", getpid());
      fs::create_directories(staging);
      size_t added = 0, rejected = 0;
      try {
        run({"tar", "-C", staging.string(), "--no-same-owner", "-m", "-xJf", fs::absolute(args[1]).string()});
        std::vector<fs::directory_entry> unpacked(fs::recursive_directory_iterator(staging), {});
        for (const auto& f : unpacked) {
          if (f.is_directory() && !f.is_symlink()) continue;
          bool regular = fs::is_regular_file(fs::symlink_status(f.path()));
          bool top = f.path().parent_path() == staging;
          std::string key = f.path().stem().string();
          jit::Artifact a;
          if (!regular || !top || f.path().extension() != ".tdk" ||
              jit::read_cache_entry(staging.string(), key, a) != jit::CacheRead::hit) {
            std::printf("rejected (%s): %s\n",
                        !regular                                 ? "not a regular file"
                        : !top || f.path().extension() != ".tdk" ? "not a cache entry"
                                                                 : "does not check out",
                        fs::relative(f.path(), staging).c_str());
            ++rejected;
            continue;
          }
          fs::rename(f.path(), fs::path(dir) / f.path().filename());  // atomic within the cache's file system
          jit::touch_cache_entry(dir, key);  // imported now: the newest use, not the archive's date
          ++added;
        }
      } catch (...) {
        fs::remove_all(staging);
        throw;
      }
      fs::remove_all(staging);
      std::printf("tiledist-cache import: %zu entries added to %s, %zu rejected\n", added, dir.c_str(), rejected);
      return rejected ? 1 : 0;
    }
    return usage(("unknown command '" + cmd + "'").c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
