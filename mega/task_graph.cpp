// The task graph (mega/task_graph.h): tasks checked against their kernels as they are added;
// the plan orders them (the order they were added, and after()'s), refuses cycles and reads of
// nothing, and finds each tile's dependencies by intersecting the parts of buffers tiles touch.
#include "mega/task_graph.h"

#include <algorithm>
#include <map>
#include <set>

#include "mega/kernel_access.h"

namespace tiledist::mega {

namespace {

Box clip(Box b, const Access& a) {
  b.row0 = std::max<int64_t>(b.row0, 0), b.row1 = std::min(b.row1, a.rows);
  b.col0 = std::max<int64_t>(b.col0, 0), b.col1 = std::min(b.col1, a.cols);
  return b;
}

bool bytes_overlap(const Access& a, const Access& b) {
  return a.unknown || b.unknown || (a.base() < b.base() + b.bytes() && b.base() < a.base() + a.bytes());
}

// The same buffer seen the same way: parts compare by their boxes. Otherwise by the bytes
// they cover (`spans`).
bool same_view(const Access& a, const Access& b) {
  return a.base() == b.base() && a.rows == b.rows && a.cols == b.cols && a.elem_bytes == b.elem_bytes;
}

// The bytes of `box` in `a`, as addresses: a range per row, or one where the box spans whole
// rows.
Ranges box_ranges(const Box& box, const Access& a) {
  Ranges out;
  if (box.empty()) return out;
  const auto at = [&](int64_t r, int64_t c) { return int64_t(uintptr_t(a.base())) + (r * a.cols + c) * a.elem_bytes; };
  if (box.col0 == 0 && box.col1 == a.cols) {
    out.emplace_back(at(box.row0, 0), at(box.row1, 0));
  } else {
    for (int64_t r = box.row0; r < box.row1; ++r) out.emplace_back(at(r, box.col0), at(r, box.col1));
  }
  return out;
}

// What a tile does with one buffer: the addresses it may read and write.
struct Use {
  Ranges reads, writes;
};

// `reads` (a tile's of a buffer it fetches ahead) as runs of lines: equal ranges a stride apart,
// each widened to whole lines of kFetchLine bytes, the lowest addresses first (a K loop's
// first steps) up to kFetchBytes for the tile's fetches from `first` on: with a tile a program
// waiting, what a GPU's programs ask of L2 at once stays within it (132 × 256 KiB: 33 MiB of
// an H100's 50), so that a fetched line is not evicted by the next before it is read.
// At most kFetchRuns runs a tile (the kernel reads each run's words before it asks for its
// lines: one round trip a run), the first ones. A range continues a run it is the next of; else
// it pairs with a run of one before it (its second sets the stride). A run of two that it would
// continue from the first is paired again, its second a run of its own: the rows of two tiles
// side by side (x0, y0, x1, y1, ...) make two runs, not one a row.
constexpr int64_t kFetchLine = Plan::Fetch::kLine, kFetchBytes = int64_t(256) << 10;
constexpr int32_t kFetchRuns = 8;
void add_fetches(std::vector<Plan::Fetch>& fetches, const Ranges& reads, int32_t first) {
  int64_t bytes = 0;
  for (size_t f = size_t(first); f < fetches.size(); ++f) bytes += fetches[f].bytes * fetches[f].count;
  for (auto [b, e] : reads) {
    const bool room = int32_t(fetches.size()) - first < kFetchRuns;  // (for a run more)
    const int64_t begin = b / kFetchLine * kFetchLine;
    const int64_t end = std::min((e + kFetchLine - 1) / kFetchLine * kFetchLine, begin + (kFetchBytes - bytes));
    if (end <= begin) break;
    const int64_t n = end - begin;
    auto find = [&](auto fits) -> Plan::Fetch* {
      for (size_t f = fetches.size(); f-- > size_t(first);)
        if (fetches[f].bytes == n && fits(fetches[f])) return &fetches[f];
      return nullptr;
    };
    if (Plan::Fetch* run =
            find([&](const Plan::Fetch& r) { return r.count >= 2 && r.addr + r.stride * r.count == begin; })) {
      ++run->count;
    } else if (Plan::Fetch* single =
                   find([&](const Plan::Fetch& r) { return r.count == 1 && begin >= r.addr + r.bytes; })) {
      single->stride = begin - single->addr, single->count = 2;
    } else if (Plan::Fetch* pair =
                   room ? find([&](const Plan::Fetch& r) { return r.count == 2 && begin - r.addr > r.stride; })
                        : nullptr) {
      const Plan::Fetch second{pair->addr + pair->stride, n, 0, 1};
      pair->stride = begin - pair->addr;  // (its first, then this one)
      fetches.push_back(second);
    } else if (room) {
      fetches.push_back({begin, n, 0, 1});
    } else {
      break;
    }
    bytes += n;
  }
}

std::string arg_name(const Task& t, size_t i) {
  const std::vector<ParamInfo> params = t.def->runtime_params();
  return i < params.size() ? params[i].name : std::to_string(i);
}

}  // namespace

Part rows(int64_t n, int axis) {
  return [n, axis](const Tile& t) {
    return Box{int64_t(t.coord(axis)) * n, int64_t(t.coord(axis)) * n + n, 0, INT64_MAX};
  };
}
Part cols(int64_t n, int axis) {
  return [n, axis](const Tile& t) {
    return Box{0, INT64_MAX, int64_t(t.coord(axis)) * n, int64_t(t.coord(axis)) * n + n};
  };
}
Part block(int64_t rows_n, int row_axis, int64_t cols_n, int col_axis) {
  return [=](const Tile& t) {
    const int64_t r = t.coord(row_axis), c = t.coord(col_axis);
    return Box{r * rows_n, r * rows_n + rows_n, c * cols_n, c * cols_n + cols_n};
  };
}

void TaskGraph::input_bytes(const void* p, int64_t bytes) {
  if (!p || bytes <= 0)
    throw Error(str_cat("tiledist: task graph '", name_, "': an input of ", bytes, " bytes at ", p));
  inputs_.emplace_back(static_cast<const char*>(p), bytes);
}

void TaskGraph::buffer(const void* p, int64_t bytes) {
  if (!p || bytes <= 0)
    throw Error(str_cat("tiledist: task graph '", name_, "': a buffer of ", bytes, " bytes at ", p));
  buffers_.emplace_back(static_cast<const char*>(p), bytes);
}

void TaskGraph::set_rank(int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error(str_cat("tiledist: task graph '", name_, "': rank ", rank, " of ", ranks));
  rank_ = rank, ranks_ = ranks;
}

int TaskGraph::add(std::string name, const KernelDef& def, Constants constants, Grid grid, std::vector<Arg> args,
                   CompileOptions options) {
  const std::string who = str_cat("tiledist: task graph '", name_, "', task '", name, "' (", def.name(), ")");
  const std::vector<ParamInfo> params = def.runtime_params();
  if (args.size() != params.size())
    throw Error(str_cat(who, ": ", args.size(), " arguments for the kernel's ", params.size(), " runtime parameters"));
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamInfo& p = params[i];
    const Arg& a = args[i];
    if (p.kind == ParamKind::pointer) {
      if (!a.is_buffer)
        throw Error(str_cat(who, ": its parameter '", p.name, "' is a pointer (", p.type.str(),
                            "); give a buffer (mega::in, out or inout)"));
      if (a.access.arg.elem != p.type.dtype)
        throw Error(str_cat(who, ": its parameter '", p.name, "' points to ", ir::dtype_name(p.type.dtype),
                            ", given a buffer of ", ir::dtype_name(a.access.arg.elem)));
      // (a recorded launch's null pointer: one its kernel does not use, as a flash decode's block
      // table where the cache is not paged)
      if ((!a.access.arg.ptr && !a.access.unknown) || (!a.access.unknown && (a.access.rows < 1 || a.access.cols < 1)))
        throw Error(str_cat(who, ": its parameter '", p.name, "' is given an empty buffer (", a.access.rows, " × ",
                            a.access.cols, " at ", a.access.arg.ptr, ")"));
    } else if (a.is_buffer || (a.scalar.kind == LaunchArg::Kind::floating && !p.type.is_float())) {
      throw Error(str_cat(who, ": its parameter '", p.name, "' is a scalar (", p.type.str(), "), given ",
                          a.is_buffer ? "a buffer" : "a floating-point number"));
    }
  }
  // What the kernel's code does with its pointers: against what the buffers say, or for them.
  const std::vector<PointerUse> uses = pointer_uses(def, constants);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_buffer) continue;
    Access& a = args[i].access;
    const PointerUse& u = uses[i];
    if (a.mode == Access::Mode::infer) {
      a.mode = u.writes ? (u.reads ? Access::Mode::read_write : Access::Mode::write) : Access::Mode::read;
    } else if (a.mode == Access::Mode::read && u.surely_writes) {
      throw Error(str_cat(who, ": its kernel writes its parameter '", params[i].name,
                          "', given as mega::in (mega::out or inout, or mega::buf to take what the kernel does)"));
    } else if (a.mode == Access::Mode::write && u.surely_reads && !u.writes) {
      throw Error(str_cat(who, ": its kernel only reads its parameter '", params[i].name,
                          "', given as mega::out (mega::in, or mega::buf to take what the kernel does)"));
    }
  }
  Task t;
  t.name = std::move(name), t.def = &def, t.constants = std::move(constants), t.grid = grid;
  t.args = std::move(args), t.options = std::move(options);
  tasks_.push_back(std::move(t));
  return int(tasks_.size()) - 1;
}

void TaskGraph::after(int later, int earlier) {
  const int n = int(tasks_.size());
  if (later < 0 || later >= n || earlier < 0 || earlier >= n || later == earlier)
    throw Error(str_cat("tiledist: task graph '", name_, "': after(", later, ", ", earlier, ") with tasks 0 to ", n - 1,
                        " (two different ones)"));
  after_.emplace_back(later, earlier);
}

std::vector<int> TaskGraph::record(const std::string& name, const std::function<void()>& run) {
  struct Recorder : LaunchRecorder {
    TaskGraph* g = nullptr;
    std::string name;
    std::vector<int> added;
    void launched(const Kernel& kernel, Grid grid, const std::vector<LaunchArg>& args,
                  const runtime::Stream*) override {
      const std::shared_ptr<const KernelSource>& src = kernel.source();
      if (!src)
        throw Error(str_cat("tiledist: task graph '", g->name_, "', recording '", name, "': kernel '", kernel.name(),
                            "' was not made by compile(), so its definition is not known"));
      std::vector<Arg> task_args;
      for (const LaunchArg& a : args) {
        if (a.kind != LaunchArg::Kind::pointer) {
          Arg scalar(0);
          scalar.scalar = a;
          task_args.push_back(scalar);
          continue;
        }
        Access x;
        x.mode = Access::Mode::infer, x.arg = a, x.elem_bytes = ir::dtype_bytes(a.elem);
        x.unknown = a.extent_bytes < 0;
        x.cols = x.unknown ? 1 : std::max<int64_t>(1, a.extent_bytes / x.elem_bytes);
        task_args.emplace_back(x);
      }
      added.push_back(
          g->add(str_cat(name, "#", added.size()), src->def, src->constants, grid, std::move(task_args), src->options));
      g->tasks_.back().source = src;
    }
  } recorder;
  recorder.g = this, recorder.name = name;
  {
    RecordLaunches scope(recorder);
    run();
  }
  return recorder.added;
}

std::vector<std::vector<std::vector<Footprint>>> TaskGraph::footprints_of(std::vector<Task>& tasks) const {
  std::vector<std::vector<std::vector<Footprint>>> fps(tasks.size());
  for (size_t t = 0; t < tasks.size(); ++t) {
    Task& task = tasks[t];
    if (std::none_of(task.args.begin(), task.args.end(), [](const Arg& a) { return a.is_buffer && !a.access.part; }))
      continue;
    const std::unique_ptr<ir::Function> f = task.def->trace(task.constants);
    std::vector<LaunchArg> args;
    args.reserve(task.args.size());
    for (const Arg& a : task.args) args.push_back(a.launch_arg());
    std::vector<std::vector<Footprint>>& mine = fps[t];
    mine.resize(size_t(task.tiles()));
    for (int64_t i = 0; i < task.tiles(); ++i) {
      const Tile tile = task.tile(i);
      mine[size_t(i)] =
          footprints(*f, args, {tile.x, tile.y, tile.z}, {task.grid.x, task.grid.y, task.grid.z}, rank_, ranks_);
    }
    // A recorded buffer: as far as its tiles reach, where they are bounded; else the declared
    // buffer that holds it; else unknown.
    for (size_t a = 0; a < task.args.size(); ++a) {
      Access& x = task.args[a].access;
      if (!task.args[a].is_buffer || !x.unknown) continue;
      bool bounded = true;
      int64_t lo = 0, hi = 0;
      for (const std::vector<Footprint>& tile : mine) {
        const Footprint& fp = tile[a];
        bounded = bounded && fp.bounded;
        for (const Ranges* r : {&fp.reads, &fp.writes})
          if (!r->empty()) lo = std::min(lo, r->front().first), hi = std::max(hi, r->back().second);
      }
      const char* p = x.base();
      const char* end = nullptr;
      for (const auto* list : {&inputs_, &buffers_})
        for (auto [q, bytes] : *list)
          if (q <= p && p < q + bytes) end = q + bytes;
      if (end) {
        x.unknown = false, x.rows = 1, x.cols = std::max<int64_t>(1, (end - p) / x.elem_bytes);
      } else if (bounded && lo >= 0) {
        x.unknown = false, x.rows = 1, x.cols = std::max<int64_t>(1, (hi + x.elem_bytes - 1) / x.elem_bytes);
      }
    }
  }
  return fps;
}

namespace {

// What is surely done at some point of a step: tasks done whole, a bit each, and tiles of
// others, a bit each of the task's (TaskGraph::plan's waits).
class Done {
 public:
  explicit Done(int tasks) : whole_(size_t(tasks + 63) / 64, 0) {}
  void add_task(int s) {
    whole_[size_t(s) / 64] |= uint64_t{1} << (s % 64);
    tiles_.erase(s);
  }
  void add_tile(int s, int64_t j, int64_t of) {
    if (holds(s, -1)) return;
    std::vector<uint64_t>& bits = tiles_[s];
    bits.resize(size_t(of + 63) / 64, 0);
    bits[size_t(j) / 64] |= uint64_t{1} << (j % 64);
  }
  void unite(const Done& o) {
    for (size_t w = 0; w < whole_.size(); ++w) whole_[w] |= o.whole_[w];
    for (auto it = tiles_.begin(); it != tiles_.end();) it = holds(it->first, -1) ? tiles_.erase(it) : std::next(it);
    for (const auto& [s, bits] : o.tiles_) {
      if (holds(s, -1)) continue;
      std::vector<uint64_t>& mine = tiles_[s];
      mine.resize(std::max(mine.size(), bits.size()), 0);
      for (size_t w = 0; w < bits.size(); ++w) mine[w] |= bits[w];
    }
  }
  /// Whether task `s` is done whole (`tile` < 0), or its tile `tile`.
  bool holds(int s, int64_t tile) const {
    if (whole_[size_t(s) / 64] >> (s % 64) & 1) return true;
    if (tile < 0) return false;
    auto it = tiles_.find(s);
    return it != tiles_.end() && size_t(tile) / 64 < it->second.size() &&
           (it->second[size_t(tile) / 64] >> (tile % 64) & 1) != 0;
  }

 private:
  std::vector<uint64_t> whole_;
  std::map<int, std::vector<uint64_t>> tiles_;
};

}  // namespace

Plan TaskGraph::plan() const {
  const int n = int(tasks_.size());
  if (n == 0) throw Error(str_cat("tiledist: task graph '", name_, "' has no tasks"));
  // The tasks with their recorded buffers' sizes found, and the footprints of every tile of a
  // task with a buffer whose parts are not given.
  std::vector<Task> tasks = tasks_;
  const std::vector<std::vector<std::vector<Footprint>>> fps = footprints_of(tasks);
  // Conflicts: an earlier task's access and a later one's to overlapping bytes, one a write.
  struct Conflict {
    int s, t;
    size_t a, b;  // (t's argument, s's argument)
  };
  std::vector<Conflict> conflicts;
  std::vector<std::set<int>> preds(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < t; ++s)
      for (size_t a = 0; a < tasks[size_t(t)].args.size(); ++a)
        for (size_t b = 0; b < tasks[size_t(s)].args.size(); ++b) {
          const Arg& x = tasks[size_t(t)].args[a];
          const Arg& y = tasks[size_t(s)].args[b];
          if (!x.is_buffer || !y.is_buffer || !(x.access.writes() || y.access.writes())) continue;
          if (!bytes_overlap(x.access, y.access)) continue;
          conflicts.push_back({s, t, a, b});
          preds[size_t(t)].insert(s);
        }
  for (auto [later, earlier] : after_) preds[size_t(later)].insert(earlier);

  // The tasks' order: the order added where nothing says otherwise.
  Plan plan;
  {
    std::vector<int> waiting(size_t(n), 0);
    std::vector<std::vector<int>> succs(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t)
      for (int s : preds[size_t(t)]) ++waiting[size_t(t)], succs[size_t(s)].push_back(t);
    std::set<int> ready;
    for (int t = 0; t < n; ++t)
      if (!waiting[size_t(t)]) ready.insert(t);
    while (!ready.empty()) {
      const int t = *ready.begin();
      ready.erase(ready.begin());
      plan.order.push_back(t);
      for (int u : succs[size_t(t)])
        if (--waiting[size_t(u)] == 0) ready.insert(u);
    }
    if (int(plan.order.size()) != n) {
      // A cycle among those left: walk back through predecessors left until one repeats.
      std::vector<int> path;
      std::vector<int> seen(size_t(n), -1);
      int t = 0;
      while (!waiting[size_t(t)]) ++t;
      while (seen[size_t(t)] < 0) {
        seen[size_t(t)] = int(path.size());
        path.push_back(t);
        for (int s : preds[size_t(t)])
          if (waiting[size_t(s)]) {
            t = s;
            break;
          }
      }
      std::string cycle;
      for (size_t i = path.size(); i-- > size_t(seen[size_t(t)]);)
        cycle += str_cat("'", tasks[size_t(path[i])].name, "' → ");
      throw Error(str_cat("tiledist: task graph '", name_, "' has a cycle: ", cycle, "'", tasks[size_t(t)].name,
                          "' (each must run after the one before it: by after(), or by the order tasks were added "
                          "where one writes what another uses)"));
    }
  }

  // Every read of a buffer follows a write of it, or reads an input.
  for (int t = 0; t < n; ++t) {
    const Task& task = tasks[size_t(t)];
    for (size_t a = 0; a < task.args.size(); ++a) {
      const Arg& x = task.args[a];
      // (not checked: a recorded launch's, whose object's own state, as its signal words, is
      // there before the step)
      if (!x.is_buffer || !x.access.reads() || x.access.unknown || !x.access.arg.ptr || task.source) continue;
      bool found = false;
      for (auto [p, bytes] : inputs_)
        found = found || (x.access.base() < p + bytes && p < x.access.base() + x.access.bytes());
      for (const Conflict& c : conflicts)
        found = found || (c.t == t && c.a == a && tasks[size_t(c.s)].args[c.b].access.writes());
      if (!found)
        throw Error(str_cat("tiledist: task graph '", name_, "', task '", task.name, "' (", task.def->name(),
                            ") reads its argument '", arg_name(task, a), "' (", x.access.bytes(), " bytes at ",
                            x.access.arg.ptr,
                            "), which no task before it writes and which is not an input of "
                            "the graph (TaskGraph::input)"));
    }
  }

  // Items, task by task in order; each one's dependencies.
  std::vector<int64_t> first(size_t(n), 0);
  int64_t count = 0;
  for (int t : plan.order) first[size_t(t)] = count, count += tasks[size_t(t)].tiles();
  if (count + n > INT32_MAX)
    throw Error(str_cat("tiledist: task graph '", name_, "' has ", count, " tiles (at most 2^31 - 1 - its tasks)"));
  // Each task's parts, tile by tile, per argument (computed once): as boxes where given, and as
  // the addresses each tile may read and write.
  // (computed once for each task and argument, on first use)
  auto memo = [](auto& cache, int t, size_t a, auto make) -> const auto& {
    auto it = cache.find({t, a});
    if (it == cache.end()) it = cache.emplace(std::make_pair(t, a), make()).first;
    return it->second;
  };
  std::map<std::pair<int, size_t>, std::vector<Box>> boxes;
  auto boxes_of = [&](int t, size_t a) -> const std::vector<Box>& {
    return memo(boxes, t, a, [&] {
      const Task& task = tasks[size_t(t)];
      const Access& x = task.args[a].access;
      std::vector<Box> out(size_t(task.tiles()));
      for (int64_t i = 0; i < task.tiles(); ++i) out[size_t(i)] = clip(x.part(task.tile(i)), x);
      return out;
    });
  };
  // (tile i's of task t's argument a)
  auto use_of = [&](int t, size_t a, int64_t i) {
    const Task& task = tasks[size_t(t)];
    const Access& x = task.args[a].access;
    const int64_t base = int64_t(uintptr_t(x.base()));
    Use u;
    const Footprint* fp = !x.part && !fps[size_t(t)].empty() ? &fps[size_t(t)][size_t(i)][a] : nullptr;
    if (fp && fp->bounded) {
      auto clipped = [&](const Ranges& r) {
        Ranges o;
        for (auto [b, e] : r)
          if (std::max<int64_t>(b, 0) < std::min(e, x.bytes()))
            o.emplace_back(base + std::max<int64_t>(b, 0), base + std::min(e, x.bytes()));
        return o;
      };
      if (x.reads()) u.reads = clipped(fp->reads);
      if (x.writes()) u.writes = clipped(fp->writes);
      return u;
    }
    const Ranges r = x.part ? box_ranges(clip(x.part(task.tile(i)), x), x) : Ranges{{base, base + x.bytes()}};
    if (x.reads()) u.reads = r;
    if (x.writes()) u.writes = r;
    return u;
  };
  std::map<std::pair<int, size_t>, std::vector<Use>> uses;
  auto uses_of = [&](int t, size_t a) -> const std::vector<Use>& {
    return memo(uses, t, a, [&] {
      std::vector<Use> out;
      for (int64_t i = 0; i < tasks[size_t(t)].tiles(); ++i) out.push_back(use_of(t, a, i));
      return out;
    });
  };
  // The arguments whose reads are fetched ahead (Plan::Fetch): read, never written, within an
  // input that no task writes (weights).
  std::vector<std::vector<bool>> fetched(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    for (const Arg& x : tasks[size_t(t)].args) {
      bool steady = x.is_buffer && !x.access.writes() && !x.access.unknown && x.access.arg.ptr;
      bool inside = false;
      for (auto [p, bytes] : inputs_)
        inside = inside || (p <= x.access.base() && x.access.base() + x.access.bytes() <= p + bytes);
      for (int s = 0; s < n && steady && inside; ++s)
        for (const Arg& y : tasks[size_t(s)].args)
          steady = steady && !(y.is_buffer && y.access.writes() && bytes_overlap(x.access, y.access));
      fetched[size_t(t)].push_back(steady && inside);
    }
  // What is surely done when a tile starts: tasks done whole, and tiles of others (its waits'
  // own, and what was done before they ended). A wait that another implies is dropped: without,
  // a model's tiles would wait on every earlier layer's tasks that used the same scratch.
  const Done none(n);
  std::vector<Done> done_item(size_t(count), none), done_task(size_t(n), none);
  for (int t : plan.order) {
    const Task& task = tasks[size_t(t)];
    Done& task_done = done_task[size_t(t)];
    task_done.add_task(t);
    for (int64_t i = 0; i < task.tiles(); ++i) {
      Plan::Item item;
      item.task = t, item.tile = i, item.deps_begin = int32_t(plan.deps.size());
      std::set<int> whole_tasks;
      for (auto [later, earlier] : after_)
        if (later == t) whole_tasks.insert(earlier);
      std::map<int, std::set<int64_t>> tiles;  // (an earlier task's tiles this one waits for)
      for (const Conflict& c : conflicts) {
        if (c.t != t || whole_tasks.count(c.s)) continue;
        const Access& x = task.args[c.a].access;
        const Access& y = tasks[size_t(c.s)].args[c.b].access;
        const int64_t others = tasks[size_t(c.s)].tiles();
        std::set<int64_t>& set = tiles[c.s];
        if (x.unknown || y.unknown) {
          whole_tasks.insert(c.s);
          continue;
        }
        if (x.part && y.part && same_view(x, y)) {
          const Box mine = boxes_of(t, c.a)[size_t(i)];
          const std::vector<Box>& theirs = boxes_of(c.s, c.b);
          for (int64_t j = 0; j < others; ++j)
            if (mine.overlaps(theirs[size_t(j)])) set.insert(j);
        } else {
          const Use& mine = uses_of(t, c.a)[size_t(i)];
          const std::vector<Use>& theirs = uses_of(c.s, c.b);
          for (int64_t j = 0; j < others; ++j) {
            const Use& u = theirs[size_t(j)];
            if (ranges_meet(mine.writes, u.reads) || ranges_meet(mine.writes, u.writes) ||
                ranges_meet(mine.reads, u.writes))
              set.insert(j);
          }
        }
        if (int64_t(set.size()) == others) whole_tasks.insert(c.s);
      }
      // (each wait: a task, or a tile of one, and what was surely done before it ended)
      struct Wait {
        int task;
        int64_t tile;  // (-1: the whole task)
        const Done* before;
      };
      std::vector<Wait> waits;
      for (int s : whole_tasks) waits.push_back({s, -1, &done_task[size_t(s)]});
      for (auto& [s, set] : tiles)
        if (!whole_tasks.count(s))
          for (int64_t j : set) waits.push_back({s, j, &done_item[size_t(first[size_t(s)] + j)]});
      Done& done = done_item[size_t(first[size_t(t)] + i)];
      for (const Wait& w : waits) {
        done.unite(*w.before);
        if (w.tile >= 0) done.add_tile(w.task, w.tile, tasks[size_t(w.task)].tiles());
        // (implied where another wait's task or tile was done only after it: distinct waits
        // never name the same tile)
        if (std::any_of(waits.begin(), waits.end(),
                        [&](const Wait& v) { return &v != &w && v.before->holds(w.task, w.tile); }))
          continue;
        if (w.tile < 0)
          plan.deps.push_back({int32_t(count + w.task), int32_t(tasks[size_t(w.task)].tiles())});
        else
          plan.deps.push_back({int32_t(first[size_t(w.task)] + w.tile), 1});
      }
      item.deps_end = int32_t(plan.deps.size());
      item.fetch_begin = int32_t(plan.fetches.size());
      for (size_t a = 0; a < task.args.size(); ++a)
        if (fetched[size_t(t)][a]) add_fetches(plan.fetches, use_of(t, a, i).reads, item.fetch_begin);
      item.fetch_end = int32_t(plan.fetches.size());
      plan.items.push_back(item);
      task_done.unite(done);
    }
  }
  return plan;
}

}  // namespace tiledist::mega
