// The message of the tiledist::Error that `f()` throws, or "" if it throws none.
#pragma once

#include <string>
#include <utility>

#include "support/support.h"

namespace tiledist::test_util {

template <class F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tiledist::test_util
