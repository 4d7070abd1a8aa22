/// @file
/// A task graph (issue 33): a step's kernels as tasks, each split into tiles (its grid's
/// programs), with the dependencies between tiles found from what each tile reads and writes.
///
///   mega::TaskGraph g("mlp");
///   g.input(x, B * H);  g.input(w, N * H);               // data there before the step
///   int up = g.add("up", gemv_def, {{"BN", 64}}, Grid(N / 64),
///                  {mega::in(x, B, H), mega::in(w, N, H, mega::rows(64)), mega::out(y, B, N, mega::cols(64)), N, H});
///   int act = g.add("act", silu_def, {}, Grid(N / 64), {mega::in(y, B, N, mega::cols(64)), ...});
///
/// Tasks run as if one after the other in the order added (a kernel launched after another on
/// a stream); the graph keeps of that order only what the data needs: tile t of a task waits
/// for the tiles of earlier tasks that write what t reads (or read or write what t writes).
/// Orders the buffers do not show (a signal) are given with after(). mega::MegaKernel runs a
/// graph as one persistent kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "jit/kernel.h"
#include "mega/footprint.h"

namespace tiledist::mega {

/// Elements of a buffer seen as rows × columns (a vector: one row): rows [row0, row1),
/// columns [col0, col1).
struct Box {
  /// The rows [row0, row1) and columns [col0, col1).
  ///@{
  int64_t row0 = 0, row1 = 0, col0 = 0, col1 = 0;
  ///@}
  /// No element.
  bool empty() const { return row0 >= row1 || col0 >= col1; }
  /// Some element in both.
  bool overlaps(const Box& o) const {
    return !empty() && !o.empty() && row0 < o.row1 && o.row0 < row1 && col0 < o.col1 && o.col0 < col1;
  }
};
/// One program of a task's grid.
struct Tile {
  /// Its coordinates, as tl::program_id(0), (1) and (2) give them.
  ///@{
  int x = 0, y = 0, z = 0;
  ///@}
  /// The coordinate on `axis` (0, 1 or 2).
  int coord(int axis) const { return axis == 0 ? x : axis == 1 ? y : z; }
};
/// The part of a buffer a tile touches (clipped to the buffer); none given: the bytes the
/// kernel's code may touch in that tile (its footprint, mega/footprint.h), or all of it where
/// they cannot be bounded.
using Part = std::function<Box(const Tile&)>;
/// Tile t (its coordinate on `axis`) touches rows [t·n, t·n + n), every column.
Part rows(int64_t n, int axis = 0);
/// Tile t touches columns [t·n, t·n + n) of every row.
Part cols(int64_t n, int axis = 0);
/// Rows by the coordinate on `row_axis`, columns by that on `col_axis`: a GEMM's tile of C.
Part block(int64_t rows_n, int row_axis, int64_t cols_n, int col_axis);

/// A pointer argument of a task and how its tiles use it.
struct Access {
  /// Whether the task's tiles read the part, write it, or both; `infer`: as the kernel's code
  /// says (mega/kernel_access.h), found when the task is added.
  enum class Mode { read, write, read_write, infer };
  Mode mode = Mode::read;  ///< How the tiles use their parts.
  LaunchArg arg;           ///< What the kernel is given.
  int64_t rows = 1;        ///< The buffer's rows (a vector: 1).
  int64_t cols = 0;        ///< The buffer's columns: elements in a row.
  int64_t elem_bytes = 1;  ///< The size of an element.
  Part part;               ///< Per tile; empty: the whole buffer.
  /// Its size is not known (a recorded launch's raw pointer): its tiles' footprints bound it,
  /// or else a buffer declared with TaskGraph::input or buffer() that holds it; failing both,
  /// it conflicts with every other buffer, and whole.
  bool unknown = false;
  /// Whether the tiles read, and write, their parts.
  ///@{
  bool reads() const { return mode != Mode::write; }
  bool writes() const { return mode != Mode::read; }  // (infer: before it is inferred)
  ///@}
  /// The buffer's size and first byte.
  ///@{
  int64_t bytes() const { return rows * cols * elem_bytes; }
  const char* base() const { return static_cast<const char*>(arg.ptr); }
  ///@}
};

namespace detail {
template <class T>
Access access(Access::Mode mode, T* p, int64_t rows, int64_t cols, Part part) {
  Access a;
  a.mode = mode;
  a.arg = tiledist::detail::make_arg(p, rows * cols);
  a.rows = rows, a.cols = cols, a.elem_bytes = int64_t(sizeof(T));
  a.part = std::move(part);
  return a;
}
}  // namespace detail

/// A buffer a task reads (`in`), writes (`out`) or both (`inout`): `count` elements, or
/// `rows` × `cols`, and the part each tile touches.
///@{
template <class T>
Access in(const T* p, int64_t count, Part part = {}) {
  return detail::access(Access::Mode::read, p, 1, count, std::move(part));
}
template <class T>
Access in(const T* p, int64_t rows, int64_t cols, Part part = {}) {
  return detail::access(Access::Mode::read, p, rows, cols, std::move(part));
}
template <class T>
Access out(T* p, int64_t count, Part part = {}) {
  return detail::access(Access::Mode::write, p, 1, count, std::move(part));
}
template <class T>
Access out(T* p, int64_t rows, int64_t cols, Part part = {}) {
  return detail::access(Access::Mode::write, p, rows, cols, std::move(part));
}
template <class T>
Access inout(T* p, int64_t count, Part part = {}) {
  return detail::access(Access::Mode::read_write, p, 1, count, std::move(part));
}
template <class T>
Access inout(T* p, int64_t rows, int64_t cols, Part part = {}) {
  return detail::access(Access::Mode::read_write, p, rows, cols, std::move(part));
}
/// A buffer the task uses as its kernel's code says: read where the kernel loads through it,
/// written where it stores (TaskGraph::add reads the kernel).
///@{
template <class T>
Access buf(T* p, int64_t count, Part part = {}) {
  return detail::access(Access::Mode::infer, p, 1, count, std::move(part));
}
template <class T>
Access buf(T* p, int64_t rows, int64_t cols, Part part = {}) {
  return detail::access(Access::Mode::infer, p, rows, cols, std::move(part));
}
///@}

/// An argument of a task: a buffer (in, out, inout) or a scalar. A bare pointer is not one:
/// say how the task uses it.
struct Arg {
  /// A buffer.
  Arg(Access a) : access(std::move(a)), is_buffer(true) {}  // NOLINT(google-explicit-constructor)
  /// A scalar: an integer or a floating-point number.
  template <class T>
    requires std::is_arithmetic_v<T>
  Arg(T v) : scalar(tiledist::detail::to_arg(v)) {}  // NOLINT(google-explicit-constructor)
  Access access;                                     ///< A buffer's.
  LaunchArg scalar{LaunchArg::Kind::integer};        ///< A scalar's.
  bool is_buffer = false;                            ///< Which of the two.
  /// What the kernel is given.
  const LaunchArg& launch_arg() const { return is_buffer ? access.arg : scalar; }
};

/// A kernel over its grid, one tile a program.
struct Task {
  std::string name;                ///< As given to TaskGraph::add, for messages.
  const KernelDef* def = nullptr;  ///< Its kernel (which must outlive the graph and its MegaKernel).
  Constants constants;             ///< The kernel's constants.
  Grid grid;                       ///< Its programs: its tiles.
  std::vector<Arg> args;           ///< Its runtime arguments, in order.
  CompileOptions options;          ///< As the kernel would be compiled alone.
  /// A recorded task's kernel source, which `def` points into (kept alive with the task).
  std::shared_ptr<const KernelSource> source;
  /// Its tiles: the grid's size.
  int64_t tiles() const { return grid.size(); }
  /// Tile `i` of tiles(), x fastest.
  Tile tile(int64_t i) const { return {int(i % grid.x), int(i / grid.x % grid.y), int(i / grid.x / grid.y)}; }
};

/// The graph's work in the order it may run: every tile of every task (an item), each item's
/// dependencies as words to wait on. Item i's word is i (set to the step's number when done);
/// task t's counter is word items + t (one added per tile done).
struct Plan {
  /// A tile of a task.
  struct Item {
    int32_t task = 0;  ///< The task's number.
    int64_t tile = 0;  ///< Linear in the task's grid (Task::tile).
    /// Its entries in `deps`: [deps_begin, deps_end).
    ///@{
    int32_t deps_begin = 0, deps_end = 0;
    ///@}
    /// Its entries in `fetches`: [fetch_begin, fetch_end).
    ///@{
    int32_t fetch_begin = 0, fetch_end = 0;
    ///@}
  };
  /// Memory a tile reads that no task writes (weights), to be fetched into the GPU's L2 while
  /// the tile waits for its dependencies (the lowest addresses, up to 256 KiB a tile):
  /// `count` runs of `bytes` (whole lines) from `addr`, `stride` apart.
  struct Fetch {
    /// The line the runs are made of, in bytes (what a prefetch brings in).
    static constexpr int64_t kLine = 128;
    int64_t addr = 0;    ///< The first run's first byte (a line's).
    int64_t bytes = 0;   ///< A run's bytes (whole lines).
    int64_t stride = 0;  ///< From one run to the next.
    int64_t count = 1;   ///< Runs.
  };
  /// Wait until word `word` ≥ the step's number × `times` (a tile: 1; a whole task: its tiles).
  struct Dep {
    int32_t word = 0;   ///< An item's word, or a task's counter.
    int32_t times = 1;  ///< 1 for an item, the task's tiles for its counter.
  };
  std::vector<int> order;      ///< Tasks, in the order their items come.
  std::vector<Item> items;     ///< Every task's tiles, task by task in `order`.
  std::vector<Dep> deps;       ///< The items' dependencies.
  std::vector<Fetch> fetches;  ///< The items' reads to fetch ahead.
  /// The words the dependencies name: an item's each, a task's each.
  int64_t words() const { return int64_t(items.size()) + int64_t(order.size()); }
};

/// Tasks, the buffers they use, the data there before them; see the file's comment.
class TaskGraph {
 public:
  /// An empty graph; `name` names it in messages and names its persistent kernel.
  explicit TaskGraph(std::string name = "step") : name_(std::move(name)) {}

  /// Data that is there before the graph runs (weights, the step's inputs): `count` elements
  /// from `p`. A task's read of anything else must follow a task that writes it.
  template <class T>
  void input(const T* p, int64_t count) {
    input_bytes(p, count * int64_t(sizeof(T)));
  }
  /// The same, `bytes` from `p`.
  void input_bytes(const void* p, int64_t bytes);
  /// Memory the tasks use that is not an input (a library object's scratch): `bytes` from
  /// `p`. A recorded task (record()) whose accesses to a pointer inside it cannot be bounded
  /// then conflicts with this buffer alone, not with every buffer.
  void buffer(const void* p, int64_t bytes);
  /// The rank the graph runs on, of `ranks`: what tl::rank() and tl::num_ranks() are when the
  /// tiles' footprints are read (not given: what depends on them is not bounded).
  void set_rank(int rank, int ranks);

  /// Adds task `name`: `def` for `constants` over `grid`, given `args` in the order of the
  /// kernel's runtime parameters. Returns its number. Throws Error naming the task for
  /// arguments that do not fit the kernel's parameters, a buffer given as `in` that the
  /// kernel surely writes, or as `out` that it surely reads and never writes.
  int add(std::string name, const KernelDef& def, Constants constants, Grid grid, std::vector<Arg> args,
          CompileOptions options = CompileOptions::from_env());
  /// Task `later` runs after every tile of task `earlier`, beyond what their buffers say.
  void after(int later, int earlier);
  /// Adds as tasks the kernels `run` launches (a library object's run: kernels::Gemm::run, ...),
  /// recorded instead of run (jit/kernel.h's RecordLaunches), named `name` and a number. Their
  /// pointers' uses, and the bytes each tile touches, come from their code (mega/footprint.h);
  /// a pointer whose accesses cannot be bounded there stands for the declared buffer that holds
  /// it (input(), buffer()), or else for any memory: the task then waits for every task before
  /// it and every task after it waits for it. `run` must do nothing but
  /// launch (host copies and stream events are not recorded: a run that makes them, such as a
  /// copy-engine transfer, is not one to record). Returns the tasks' numbers.
  std::vector<int> record(const std::string& name, const std::function<void()>& run);

  /// The items in an order that respects every dependency, and the dependencies. Throws Error
  /// naming the tasks of a cycle, or the task and argument of a read that nothing before it
  /// writes and that is not an input.
  Plan plan() const;

  /// Its name, and its tasks in the order added.
  ///@{
  const std::string& name() const { return name_; }
  const std::vector<Task>& tasks() const { return tasks_; }
  ///@}

 private:
  /// The footprints of every tile of each task with a buffer whose parts are not given (tile,
  /// then argument), and the sizes of `tasks`' recorded buffers found from them.
  std::vector<std::vector<std::vector<Footprint>>> footprints_of(std::vector<Task>& tasks) const;

  std::string name_;
  std::vector<Task> tasks_;
  std::vector<std::pair<int, int>> after_;  // (later, earlier)
  std::vector<std::pair<const char*, int64_t>> inputs_, buffers_;
  int rank_ = -1, ranks_ = -1;
};

}  // namespace tiledist::mega
