// Environment variables a test changes, put back as they were (set or unset) at the end of scope.
#pragma once

#include <stdlib.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tiledist::test_util {

struct SavedEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  /// Keeps `names` as they are; `unset`: and unsets them for the test.
  SavedEnv(std::initializer_list<const char*> names, bool unset) {
    for (const char* n : names) {
      const char* v = std::getenv(n);
      saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      if (unset) unsetenv(n);
    }
  }
  ~SavedEnv() {
    for (auto& [n, v] : saved)
      if (v)
        setenv(n.c_str(), v->c_str(), 1);
      else
        unsetenv(n.c_str());
  }
  SavedEnv(const SavedEnv&) = delete;
  SavedEnv& operator=(const SavedEnv&) = delete;
};

}  // namespace tiledist::test_util
