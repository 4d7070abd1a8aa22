// Errors and source locations shared by every layer.
#pragma once

#include <cstdint>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tiledist {

/// A place in the user's source (or in a parsed .tir file): what error messages quote.
struct Location {
  std::string file;
  int line = 0;
  int col = 0;

  static Location from(const std::source_location& loc) {
    return {loc.file_name(), static_cast<int>(loc.line()), static_cast<int>(loc.column())};
  }
  bool known() const { return line > 0; }
  std::string str() const;
  bool operator==(const Location&) const = default;
};

/// An error the user can act on: what was wrong, where, and what to do.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  /// "op 'add' at kernel.cpp:12: message"
  static Error at(const std::string& op, const Location& loc, const std::string& message);
};

/// Broken internal invariant: a tiledist bug, not a user mistake.
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

/// Builds a string from stream insertions: str_cat("x = ", 3).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace tiledist

#define TD_ASSERT(cond, ...)                                                                              \
  do {                                                                                                    \
    if (!(cond)) ::tiledist::assert_fail(#cond, __FILE__, __LINE__, ::tiledist::str_cat("" __VA_ARGS__)); \
  } while (0)
