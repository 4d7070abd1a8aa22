#include "jit/backend.h"

#include "jit/backends/backends.h"

namespace tiledist::jit {

const Backend& Backend::for_target(const Target& target) {
  switch (target.kind) {
    case Target::Kind::host:
      return host_backend();
    case Target::Kind::nvptx:
      return nvptx_backend();
    case Target::Kind::amdgcn:
      return amdgcn_backend();
  }
  TD_ASSERT(false, "a target of no known kind");
  return host_backend();
}

}  // namespace tiledist::jit
