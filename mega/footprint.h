/// @file
/// The bytes one program of a kernel may touch through each pointer parameter, read from its
/// traced tile IR by abstract interpretation (issue 33: the task graph's tile-level
/// dependencies for tasks whose parts nobody declared, such as a library object's recorded
/// launches).
///
/// Every integer the program computes is bounded by a set of the form
/// `c + s1·[0, n1) + s2·[0, n2) + ...` (a constant range c and strided terms, the shape of a
/// tile's rows and columns: `tl::arange` gives a term, a loop's induction variable another,
/// `rows * K + cols` their strided sum); the program's coordinates, the grid and the scalar
/// arguments are the launch's. An address is a parameter plus such a set of byte offsets. Masks
/// are not read: an element masked off still counts, so a footprint holds every byte the
/// program may touch, and perhaps more. What cannot be bounded (an offset loaded from memory, a
/// loop whose trip count is not known) leaves the parameter unbounded.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "ir/ir.h"
#include "jit/kernel.h"

namespace tiledist::mega {

/// Byte ranges [begin, end) from a pointer, ascending and disjoint.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

/// What a program touches through one pointer parameter.
struct Footprint {
  bool bounded = true;  ///< False: some access could not be bounded (any byte of the buffer).
  Ranges reads;         ///< Bytes it may load (or wait on, copy from, apply an atomic to).
  Ranges writes;        ///< Bytes it may store (or copy to, apply an atomic to).
  /// Whether it touches the pointer at all.
  bool touched() const { return !bounded || !reads.empty() || !writes.empty(); }
};

/// Program `program` of `grid` of the traced kernel `f` (KernelDef::trace), launched with
/// `args` (the values of its runtime parameters: scalars are read from them), on rank `rank`
/// of `ranks` (-1: not known, which leaves what depends on it unbounded): a footprint for each
/// of f's parameters (scalars: none).
std::vector<Footprint> footprints(const ir::Function& f, const std::vector<LaunchArg>& args,
                                  const std::array<int, 3>& program, const std::array<int, 3>& grid, int rank = -1,
                                  int ranks = -1);

/// Adds [begin, end) to `r`, merging what overlaps or touches.
void add_range(Ranges& r, int64_t begin, int64_t end);
/// Whether two sets of ranges share a byte.
bool ranges_meet(const Ranges& a, const Ranges& b);

}  // namespace tiledist::mega
