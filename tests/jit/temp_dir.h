// A fresh directory under /tmp for a test, removed with everything in it at the end of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>

namespace tiledist::test_util {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/tiledist-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace tiledist::test_util
