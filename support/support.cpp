#include "support/support.h"

#include <cstdio>
#include <cstdlib>

namespace tiledist {

std::string Location::str() const {
  if (!known()) return "<unknown>";
  std::string f = file;
  // Quote the file name the way a user sees it in an editor: the last two components.
  size_t slash = f.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    size_t prev = f.rfind('/', slash - 1);
    if (prev != std::string::npos) f = f.substr(prev + 1);
  }
  return str_cat(f, ":", line);
}

Error Error::at(const std::string& op, const Location& loc, const std::string& message) {
  return Error(str_cat("tiledist: op '", op, "' at ", loc.str(), ": ", message));
}

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "tiledist internal error: %s:%d: assertion '%s' failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace tiledist
