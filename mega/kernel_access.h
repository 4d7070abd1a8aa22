/// @file
/// What a kernel does with each of its pointer parameters, read from its traced tile IR: which
/// it loads through, which it stores or applies atomics through (issue 33: a task graph checks
/// what its tasks declare against it, and takes it where they declare nothing).
#pragma once

#include <vector>

#include "dsl/kernel_def.h"

namespace tiledist::mega {

/// A pointer parameter's uses.
struct PointerUse {
  bool reads = false;   ///< Some load (or wait, or copy from, or atomic) may go through it.
  bool writes = false;  ///< Some store (or copy to, or atomic) may go through it.
  /// The same, of accesses whose address can come from this parameter only.
  ///@{
  bool surely_reads = false, surely_writes = false;
  ///@}
};

/// Each runtime parameter's uses (scalars: none), in runtime_params' order, for `def` traced
/// with `constants`. An access whose address may come from more than one parameter (pointers
/// chosen between, or carried together through a loop) counts for each of them, not surely.
std::vector<PointerUse> pointer_uses(const KernelDef& def, const Constants& constants);

}  // namespace tiledist::mega
