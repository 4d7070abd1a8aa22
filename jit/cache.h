// The on-disk cache: one file per key, written to a temporary name and renamed, so that
// concurrent processes never read half an entry; every read is checked (header, size,
// checksum) and anything that does not check out is treated as a miss.
#pragma once

#include <optional>
#include <string>

#include "jit/context.h"

namespace tiledist::jit {

enum class CacheRead { hit, miss, corrupt };

/// Reads the entry for `key` from `dir`; `corrupt` when a file exists but cannot be trusted.
CacheRead read_cache_entry(const std::string& dir, const std::string& key, Artifact& out);
/// Writes an entry atomically. Failures (read-only disk) are reported on stderr, not thrown:
/// the kernel still runs, only uncached.
void write_cache_entry(const std::string& dir, const Artifact& a);
/// Marks an entry as just used (its modification time: what `tiledist-cache prune` orders by).
void touch_cache_entry(const std::string& dir, const std::string& key);
/// The file name of a key's entry.
std::string cache_entry_path(const std::string& dir, const std::string& key);

}  // namespace tiledist::jit
