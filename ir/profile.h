// The profiler's regions of a kernel (the profile ops: dsl/profile.h): their names, in the order
// of their first mark. A record names its region by its index here (support/profile_abi.h), which
// the lowerings and the runtime derive alike from the same IR.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace tiledist::ir {

/// At most 255 regions a kernel (a record's index is a byte).
inline constexpr size_t kMaxProfileRegions = 255;

/// The distinct `region` names of `f`'s profile ops, in walk order; empty for a kernel compiled
/// without profiling. Throws Error past kMaxProfileRegions.
std::vector<std::string> profile_regions(const Function& f);
/// The index of `op`'s region in `regions`.
int profile_region_index(const std::vector<std::string>& regions, const Op& op);

}  // namespace tiledist::ir
