// The backends that Backend::for_target picks from, one per file of this folder.
#pragma once

#include "jit/backend.h"

namespace tiledist::jit {

const Backend& host_backend();
const Backend& nvptx_backend();
const Backend& amdgcn_backend();

}  // namespace tiledist::jit
