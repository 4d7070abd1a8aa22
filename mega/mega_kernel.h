/// @file
/// A task graph as one persistent kernel (issue 33): a fixed number of programs, each taking
/// the plan's items in turn (item k to program k mod P, or the next from a queue), waiting on
/// the words of the tiles and tasks the item depends on, running the item's task body as that
/// task's program (its tile), then marking the item and its task done. A task's body is its
/// own kernel traced into this one (KernelDef::inline_body), so what its compiler passes make
/// of a kernel they make of it here; tasks of one kernel, constants and grid (a model's layers)
/// share one body, given each task's arguments from a table.
///
/// Deadlock-free by construction: an item waits only on items before it in the plan, and items
/// are taken in the plan's order. From the queue (the default) an item is taken only by a
/// program that is running, so the lowest item not done is always being run, whatever share of
/// the programs the GPU holds at once (another kernel on another stream may hold SMs, even
/// another persistent kernel that waits). Round robin assigns items before programs start: it
/// needs every program resident at once (at most one per SM, nothing else holding them). Steps are numbered by the
/// kernel itself (a word it advances when its last program ends), so a step run again, or replayed from a CUDA graph,
/// needs nothing reset.
///
/// Profiled (TILEDIST_PROFILE=DIR, or a task's CompileOptions::profile: dsl/profile.h), each
/// program's timeline (each SM's, on a GPU) shows its waits for dependencies ("wait") and its
/// tiles: a span a tile, named after its task's kernel, whose arguments are the task's number
/// (TaskGraph::tasks) and the tile's (Task::tile).
#pragma once

#include <memory>

#include "mega/task_graph.h"

namespace tiledist::mega {

/// How programs take the plan's items: each the next not taken, from a counter (`queue`: safe
/// however many programs run at once, and even where tiles take uneven time), or item k to
/// program k mod P (`round_robin`: no counter, but every program must be resident at once).
enum class Schedule { queue, round_robin };

/// Which tasks of a graph share one body in its persistent kernel: those of one kernel
/// (KernelDef::id) with equal constants, grids, stage counts (CompileOptions::num_stages: its
/// loops' pipelines) and ArgFacts (what their arguments tell: aligned pointers, multiples of 16,
/// ones), whose arguments alone differ.
struct TaskBodies {
  std::vector<int> of;          ///< Each task's body.
  std::vector<int> first;       ///< Each body's first task, whose kernel, constants and grid it has.
  std::vector<ArgFacts> facts;  ///< Each body's facts.
};
/// The bodies of `graph`'s tasks, in the order of their first tasks.
TaskBodies task_bodies(const TaskGraph& graph);

/// The persistent kernel of `graph`'s tasks for `plan` (graph.plan()) over `programs` programs:
/// its parameters are the tables `items`, `deps` (i32), `words`, `args` and `fetches` (i64),
/// `args` the tasks' arguments as words (a pointer's address, an integer, an f32's bits), so that
/// it takes five parameters however many tasks it runs; `fetches` the plan's (Plan::Fetch),
/// which a program prefetches into L2 before it waits for an item's dependencies (on a GPU,
/// unless $TILEDIST_MEGA_PREFETCH=0; empty on the host). Each body (task_bodies) is traced
/// once, its arguments read from the words of the task an item names. What MegaKernel compiles
/// and runs; for tools and tests, its code for a target without its GPU. Throws Error naming a
/// task whose body does not trace. `bodies`: task_bodies(graph), where the caller has them.
std::unique_ptr<KernelDef> persistent_kernel(const TaskGraph& graph, const Plan& plan, int programs,
                                             Schedule schedule = Schedule::queue, const TaskBodies* bodies = nullptr);

/// A task graph compiled into one persistent kernel; see the file's comment.
class MegaKernel {
 public:
  /// Plans and compiles `graph` for `target`. `programs`: how many (0: one per SM on a GPU,
  /// 8 on the host; never more than the plan's items). Throws Error as TaskGraph::plan does,
  /// names a task whose kernel does not compile, that needs more shared memory than an SM
  /// has, or whose (recorded) arguments do not fit its kernel's parameters. `num_warps`: each
  /// program's (0: the most any task is compiled with; every body runs on them all).
  MegaKernel(const TaskGraph& graph, const Target& target = Target::default_target(), int programs = 0,
             Schedule schedule = Schedule::queue, int num_warps = 0);
  ~MegaKernel();
  MegaKernel(const MegaKernel&) = delete;
  MegaKernel& operator=(const MegaKernel&) = delete;

  /// Runs one step: on `stream` (a GPU target; null: the legacy stream, done when it returns),
  /// or on the host. A step that fails (a wait that times out, an out-of-bounds access with
  /// bounds checked) throws Error naming, past the failure, the tasks and tiles its programs
  /// were running where they can be read back.
  void run(const runtime::Stream* stream = nullptr);

  /// The graph's plan (TaskGraph::plan), and the kernel's programs.
  ///@{
  const Plan& plan() const;
  int programs() const;
  ///@}
  /// The compiled persistent kernel.
  const Kernel& kernel() const;
  /// One line: its tasks, the bodies they share, tiles, dependencies (those on whole tasks:
  /// where a tile's reads could not be bounded), programs and schedule.
  std::string summary() const;
  /// A line a task, in the plan's order: its name, kernel, tiles, body, and what its tiles wait
  /// on (tiles of earlier tasks, whole tasks).
  std::string describe() const;

 private:
  std::string running() const;
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tiledist::mega
