// What the code generators know about integer and pointer tensors along each dimension (the
// last, the fastest in memory, unless asked for another), after Triton's AxisInfo: how long the runs of consecutive
// values are, how long the runs of equal values are, and what the first value of a run is divisible by. Vectorized
// memory accesses are legal where a pointer tensor is contiguous and aligned over the vector
// and its mask is constant over it.
#pragma once

#include <cstdint>
#include <map>

#include "ir/ir.h"

namespace tiledist::codegen {

struct AxisInfo {
  static constexpr int64_t kMax = int64_t{1} << 30;
  /// Along the dimension the tensor splits into runs of `contiguity` elements, starting at
  /// multiples of it, over which the value grows by one (one element, for pointers).
  int64_t contiguity = 1;
  /// The first value of each such run is a multiple of this (pointers: in bytes).
  int64_t divisibility = 1;
  /// Runs of this many elements (starting at multiples of it) hold equal values. Scalars: kMax.
  int64_t constancy = 1;
};

/// Whether every element of `v` is provably >= 0 (from constants, aranges, program and rank
/// ids, loop counters from a non-negative start, and the ops that keep signs); `sizes`: the
/// kernel's integer parameters taken as not negative too (sizes and strides, as the TMA
/// analysis takes them).
bool nonneg(const ir::Value* v, int depth = 0, bool sizes = false);

/// A value carried by a for loop that advances by a loop-invariant step each iteration
/// (`p = p + inc` with p a carried pointer or integer tensor): its value at iteration j is
/// `init + j * inc`. Null fields where `v` is not such a value.
struct CarriedStep {
  const ir::Value* init = nullptr;
  const ir::Value* inc = nullptr;
};
CarriedStep carried_step(const ir::Value* v);

class AxisAnalysis {
 public:
  /// Along the last dimension.
  const AxisInfo& of(const ir::Value* v);
  /// Along dimension `dim` of a tensor (a scalar's: any).
  const AxisInfo& of(const ir::Value* v, int dim);

  /// Whether `ptr`'s accesses can be made `vec` elements at a time along dimension `dim` (-1:
  /// the last), each access aligned to its size, with `mask` (may be null) the same over each
  /// vector.
  bool vectorizable(const ir::Value* ptr, const ir::Value* mask, int64_t vec, int dim = -1);

 private:
  AxisInfo compute(const ir::Value* v, int dim);
  std::map<std::pair<const ir::Value*, int>, AxisInfo> memo_;
};

}  // namespace tiledist::codegen
