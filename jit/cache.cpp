#include "jit/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tiledist::jit {

namespace {
constexpr const char* kMagic = "TILEDIST-CACHE 1";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

std::string cache_entry_path(const std::string& dir, const std::string& key) { return dir + "/" + key + ".tdk"; }

void touch_cache_entry(const std::string& dir, const std::string& key) {
  ::utimensat(AT_FDCWD, cache_entry_path(dir, key).c_str(), nullptr, 0);  // best effort (read-only caches)
}

CacheRead read_cache_entry(const std::string& dir, const std::string& key, Artifact& out) {
  std::ifstream in(cache_entry_path(dir, key), std::ios::binary);
  if (!in) return CacheRead::miss;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  size_t end = data.find("\n\n");
  if (end == std::string::npos) return CacheRead::corrupt;
  std::istringstream header(data.substr(0, end));
  std::string line;
  if (!std::getline(header, line) || line != kMagic) return CacheRead::corrupt;
  std::map<std::string, std::string> fields;
  while (std::getline(header, line)) {
    size_t sp = line.find(' ');
    if (sp == std::string::npos) return CacheRead::corrupt;
    fields[line.substr(0, sp)] = line.substr(sp + 1);
  }
  for (const char* f : {"key", "kernel", "target", "entry", "scratch", "distributed", "threads", "size", "checksum"})
    if (!fields.count(f)) return CacheRead::corrupt;
  if (fields["key"] != key) return CacheRead::corrupt;
  std::string payload = data.substr(end + 2);
  char* stop = nullptr;
  unsigned long long size = std::strtoull(fields["size"].c_str(), &stop, 10);
  if (*stop || size != payload.size()) return CacheRead::corrupt;
  std::string covered = data.substr(0, end);
  covered.erase(covered.rfind("\nchecksum "));
  if (fields["checksum"] != hex(fnv1a(covered + payload))) return CacheRead::corrupt;
  char* scratch_end = nullptr;
  long long scratch = std::strtoll(fields["scratch"].c_str(), &scratch_end, 10);
  if (*scratch_end || scratch < 0 || fields["entry"].empty()) return CacheRead::corrupt;
  out.key = key;
  out.kernel = fields["kernel"];
  out.target = fields["target"];
  out.entry = fields["entry"];
  out.scratch_bytes = scratch;
  out.distributed = fields["distributed"] == "1";
  out.threads = std::atoi(fields["threads"].c_str());
  out.spec = fields.count("spec") ? fields["spec"] : "";
  out.tma = fields.count("tma") ? fields["tma"] : "";
  if (!runtime::parse_tma_recipes(out.tma)) return CacheRead::corrupt;
  if (out.threads < 1 || out.threads > 1024) return CacheRead::corrupt;
  out.binary = std::move(payload);
  return CacheRead::hit;
}

void write_cache_entry(const std::string& dir, const Artifact& a) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "tiledist: warning: cannot create cache directory %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    return;
  }
  // The checksum covers the header too: a damaged scratch size is as dangerous as damaged code.
  std::string spec = a.spec;  // one header line, whatever the names in it hold
  std::replace(spec.begin(), spec.end(), '\n', ' ');
  std::string header =
      str_cat(kMagic, "\nkey ", a.key, "\nkernel ", a.kernel, "\ntarget ", a.target, "\nentry ", a.entry, "\nspec ",
              spec, "\nscratch ", a.scratch_bytes, "\ndistributed ", int(a.distributed), "\nthreads ", a.threads,
              a.tma.empty() ? "" : "\ntma " + a.tma, "\nsize ", a.binary.size());
  std::string content = str_cat(header, "\nchecksum ", hex(fnv1a(header + a.binary)), "\n\n");
  content += a.binary;
  static std::atomic<uint64_t> counter{0};
  std::string tmp = str_cat(dir, "/.", a.key, ".", getpid(), ".", counter++, ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "tiledist: warning: cannot write cache entry %s: %s\n", tmp.c_str(), std::strerror(errno));
    return;
  }
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "tiledist: warning: writing cache entry %s failed: %s\n", tmp.c_str(), std::strerror(errno));
      ::close(fd);
      ::unlink(tmp.c_str());
      return;
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (std::rename(tmp.c_str(), cache_entry_path(dir, a.key).c_str()) != 0) {
    std::fprintf(stderr, "tiledist: warning: cannot rename cache entry into place: %s\n", std::strerror(errno));
    ::unlink(tmp.c_str());
  }
}

}  // namespace tiledist::jit
