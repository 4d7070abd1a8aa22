#include "ir/profile.h"

#include <algorithm>

namespace tiledist::ir {

std::vector<std::string> profile_regions(const Function& f) {
  std::vector<std::string> names;
  f.walk([&](const Op& op) {
    if (op.code != OpCode::Profile) return;
    const std::string& n = op.str_attr("region");
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  });
  if (names.size() > kMaxProfileRegions)
    throw Error(str_cat("tiledist: kernel '", f.name, "' marks ", names.size(), " profiler regions; at most ",
                        kMaxProfileRegions, " are recorded"));
  return names;
}

int profile_region_index(const std::vector<std::string>& regions, const Op& op) {
  auto it = std::find(regions.begin(), regions.end(), op.str_attr("region"));
  TD_ASSERT(it != regions.end(), "a profile op outside the kernel's regions");
  return static_cast<int>(it - regions.begin());
}

}  // namespace tiledist::ir
