/// @file
/// The intra-kernel profiler's marks, for kernel authors: a region around some of a kernel's
/// code, and an instant. With profiling on (TILEDIST_PROFILE=DIR, or CompileOptions::profile)
/// each program records when it enters and leaves each region (NVIDIA: `%globaltimer` and the SM;
/// the CPU backend: the host's clock), and every launch adds them to its rank's trace
/// (runtime/profiler.h); the whole kernel is a region of its own, named after it. With profiling
/// off (the default) the marks trace nothing: the kernel compiles as if they were not there.
///
///     tl::profile("mainloop", [&] { acc = loop(...); }, {pid_m, pid_n});  // a tile's coordinates
///     tl::profile_event("tile_done");
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "dsl/tl.h"

namespace tiledist::tl {

/// Runs `body` (tracing it) inside a region named `name`; `args` (at most two integer scalars,
/// taken as i32) go into the region's records, and into the trace as its arguments.
void profile(const std::string& name, const std::function<void()>& body, std::initializer_list<Operand> args = {},
             SrcLoc loc = SrcLoc::current());
/// An instant named `name` in the program's timeline.
void profile_event(const std::string& name, std::initializer_list<Operand> args = {}, SrcLoc loc = SrcLoc::current());

}  // namespace tiledist::tl
