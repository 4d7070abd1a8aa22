// The persistent kernel of a task graph (mega/mega_kernel.h): traced as a KernelDef made here,
// whose parameters are the plan's tables and the tasks' arguments, and whose body is a loop over
// the program's items with each distinct task body inlined once, under its number.
#include "mega/mega_kernel.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "dsl/dist.h"
#include "dsl/profile.h"
#include "kernels/scratch.h"

namespace tiledist::mega {

namespace {

using kernels::detail::Scratch;
using tl::Tensor;

// Words after the items' and the tasks': programs ended (all steps), the step last ended, the
// queue's, then a word a program: the item it took last, plus one (0: none yet), for naming the task a
// failed step was running.
// The queue's word: items taken from it (all steps; each step takes its items and one past the
// end a program).
constexpr int64_t kEndedWord = 0, kStepWord = 1, kQueueWord = 2, kExtraWords = 3;
// An item's row: its task, tile, first and end of its dependencies, its task's body and first
// argument word, first and end of its fetches (one row read at once).
constexpr int64_t kItemWords = 8;
// A fetch's words (Plan::Fetch: address, bytes, stride, count), and the lines a program's
// threads prefetch at once.
constexpr int64_t kFetchWords = 4, kFetchLanes = 1024;
// The dependencies of an item polled at once.
constexpr int64_t kDepLanes = 128;

// Until each word of a block of pointers is at least the value beside it (acquire, GPU scope:
// the tasks' words are written by this GPU's programs): dist::wait's op, compared with >=.
void wait_each(const Tensor& ptrs, const Tensor& at_least) {
  ir::Builder& b = dsl::Trace::current("mega").builder();
  b.create(ir::OpCode::Wait, {ptrs.value(), tl::scalar(1, tl::int32).value(), at_least.value()},
           {ir::Type::scalar(ir::DType::i64)},
           {{"cmp", std::string("ge")}, {"scope", std::string("gpu")}, {"order", std::string("acquire")}});
}

std::string kernel_name(const std::string& graph) {
  std::string n = "mega_";
  for (char c : graph) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
}

std::string who(const TaskGraph& g, const Task& t) {
  return str_cat("tiledist: task graph '", g.name(), "', task '", t.name, "' (", t.def->name(), ")");
}

}  // namespace

TaskBodies task_bodies(const TaskGraph& graph) {
  TaskBodies b;
  std::map<std::tuple<uint64_t, std::string, ArgFacts, int, int, int, int>, int> first;
  for (size_t t = 0; t < graph.tasks().size(); ++t) {
    const Task& task = graph.tasks()[t];
    std::vector<LaunchArg> args;
    for (const Arg& a : task.args) {
      args.push_back(a.launch_arg());
      args.back().on_device = true;  // (the addresses as they are: alignment is their own)
    }
    ArgFacts facts = arg_facts(task.def->runtime_params(), args);
    auto [it, added] = first.try_emplace({task.def->id(), constants_str(task.constants), facts, task.grid.x,
                                          task.grid.y, task.grid.z, task.options.num_stages},
                                         int(b.first.size()));
    if (added) b.first.push_back(int(t)), b.facts.push_back(std::move(facts));
    b.of.push_back(it->second);
  }
  return b;
}

namespace {

// The most runtime parameters a task has: the words an item reads from its task's first.
size_t most_params(const TaskGraph& graph) {
  size_t most = 0;
  for (const Task& t : graph.tasks()) most = std::max(most, t.def->runtime_params().size());
  return most;
}

// Every task's arguments as words of the table the kernel reads them from (as a launch packs
// them: pack_arg), task by task, then most_params zeros (an item reads that many words from
// its task's first, whatever its body takes); `first_word`: where each task's start. Throws
// Error naming a task whose argument does not fit its parameter (a recorded launch's are not
// checked until here).
std::vector<int64_t> argument_words(const TaskGraph& graph, bool gpu, std::vector<int32_t>& first_word) {
  std::vector<int64_t> words;
  for (const Task& t : graph.tasks()) {
    first_word.push_back(int32_t(words.size()));
    const std::vector<ParamInfo> params = t.def->runtime_params();
    if (params.size() != t.args.size())
      throw Error(
          str_cat(who(graph, t), ": ", t.args.size(), " arguments for its ", params.size(), " runtime parameters"));
    for (size_t i = 0; i < params.size(); ++i)
      words.push_back(int64_t(pack_arg(params[i], t.args[i].launch_arg(), gpu,
                                       str_cat(who(graph, t), ": its parameter '", params[i].name, "'"))));
  }
  words.resize(words.size() + most_params(graph), 0);
  return words;
}

// Marks the loops of `block` (nested ones too) without a stage count of their own to be
// pipelined with `stages` (the pipelining pass's compile_stages).
void with_stages(ir::Block& block, int stages) {
  for (auto& op : block.ops) {
    if (op->code == ir::OpCode::For && !op->has_attr("num_stages") && !op->has_attr("compile_stages"))
      op->attrs["compile_stages"] = int64_t{stages};
    for (auto& region : op->regions) with_stages(*region, stages);
  }
}

}  // namespace

std::unique_ptr<KernelDef> persistent_kernel(const TaskGraph& graph, const Plan& plan, int programs, Schedule schedule,
                                             const TaskBodies* given) {
  // Its parameters: the tables. (Never specialized: what is known of the tasks' arguments is
  // each body's, from its tasks' own.)
  std::vector<ParamInfo> params;
  for (const char* name : {"items", "deps"})
    params.push_back({name, ParamKind::pointer, ir::Type::ptr(ir::DType::i32)});
  for (const char* name : {"words", "args", "fetches"})
    params.push_back({name, ParamKind::pointer, ir::Type::ptr(ir::DType::i64)});
  for (ParamInfo& p : params) p.specialize = false;
  const TaskBodies bodies = given ? *given : task_bodies(graph);
  const int64_t n_items = int64_t(plan.items.size()), n_tasks = int64_t(graph.tasks().size());
  const int P = programs;
  const bool queue = schedule == Schedule::queue;
  const size_t n_params = most_params(graph);
  auto body = [tasks = graph.tasks(), bodies, n_items, n_tasks, P, queue, n_params, graph_name = graph.name()](
                  const std::vector<ir::Value*>& vals, const std::vector<const ConstValue*>&) {
    const Tensor items(vals[0]), deps(vals[1]), words(vals[2]), arg_words(vals[3]), fetches(vals[4]);
    const int64_t ended = n_items + n_tasks + kEndedWord, stepw = n_items + n_tasks + kStepWord;
    const Tensor step = tl::load(words + stepw) + 1;  // (this step's number)
    const Tensor taken = words + (n_items + n_tasks + kExtraWords) + tl::program_id(0);
    auto run_item = [&](const Tensor& i) {
      tl::store(taken, (i + 1).to(tl::int64));
      const Tensor row = items + i * kItemWords;
      const Tensor task = tl::load(row), tile = tl::load(row + 1);
      const Tensor body_of = tl::load(row + 4), first_word = tl::load(row + 5);
      // Its task's arguments, read before it waits (loads in flight while it does): as many
      // words as the most a task takes, the body below converting those it has.
      std::vector<Tensor> arg_word;
      arg_word.reserve(n_params);
      for (size_t k = 0; k < n_params; ++k) arg_word.push_back(tl::load(arg_words + (first_word + int64_t(k))));
      // What it reads that no task writes (weights), into L2 while it waits: every line of each
      // run, spread over the threads.
      tl::for_range(tl::load(row + 6), tl::load(row + 7), 1, [&](Tensor f) {
        const Tensor at = fetches + f * kFetchWords;
        const Tensor addr = tl::load(at), lines = tl::load(at + 1) / Plan::Fetch::kLine, stride = tl::load(at + 2);
        const Tensor total = lines * tl::load(at + 3);
        const Tensor base(dsl::Trace::current("mega").builder().bitcast(addr.value(), ir::Type::ptr(ir::DType::i8)));
        tl::for_range(int64_t{0}, total, kFetchLanes, [&](Tensor j) {
          const Tensor e = j + tl::arange(0, int(kFetchLanes)).to(tl::int64);
          tl::prefetch(base + (e / lines * stride + e % lines * Plan::Fetch::kLine), e < total);
        });
      });
      // Its dependencies, kDepLanes at a time, polled together: each word done `times` times
      // this step (a lane past the end waits on word 0 for 0 times: done). Profiled as "wait
      // KERNEL", so a profile tells which kernels' tiles wait.
      const Tensor deps_begin = tl::load(row + 2), deps_end = tl::load(row + 3);
      auto wait_deps = [&](const std::string& kernel) {
        tl::profile("wait " + kernel, [&] {
          tl::for_range(deps_begin, deps_end, kDepLanes, [&](Tensor d) {
            const Tensor at = d + tl::arange(0, int(kDepLanes)), in = at < deps_end;
            const Tensor word = tl::load(deps + at * 2, in, 0), times = tl::load(deps + at * 2 + 1, in, 0);
            wait_each(words + word, step * times.to(tl::int64));
          });
        });
      };
      for (size_t b = 0; b < bodies.first.size(); ++b) {
        const Task& task_b = tasks[size_t(bodies.first[b])];
        tl::if_then(body_of == int64_t(b), [&] {
          wait_deps(task_b.def->name());
          const Grid g = task_b.grid;
          const Tensor x = tile % g.x, y = tile / g.x % g.y, z = tile / (int64_t(g.x) * g.y);
          dsl::ProgramScope scope({x.value(), y.value(), z.value()},
                                  {tl::scalar(g.x, tl::int32).value(), tl::scalar(g.y, tl::int32).value(),
                                   tl::scalar(g.z, tl::int32).value()});
          // The task's arguments, from its words in the table.
          ir::Builder& builder = dsl::Trace::current("mega").builder();
          std::vector<ir::Value*> args;
          const std::vector<ParamInfo> params = task_b.def->runtime_params();
          for (size_t k = 0; k < params.size(); ++k) {
            const ParamInfo& p = params[k];
            const Tensor& w = arg_word[k];
            if (p.kind == ParamKind::pointer)
              args.push_back(builder.bitcast(w.value(), p.type));
            else if (p.type.dtype == ir::DType::i64)
              args.push_back(w.value());
            else if (p.type.dtype == ir::DType::f32)
              args.push_back(tl::bitcast(w.to(tl::int32), tl::float32).value());
            else
              args.push_back(w.to(p.type.dtype).value());
          }
          try {
            // (profiled: a span a tile, named after its kernel, the task and tile its arguments)
            tl::profile(task_b.def->name(),
                        [&] {
                          task_b.def->inline_body(args, task_b.constants, bodies.facts[b]);
                          // (its loops pipelined with the stages the task would be compiled with alone)
                          with_stages(*builder.block(), task_b.options.num_stages);
                        },
                        {task, tile});
          } catch (const Error& e) {
            throw Error(str_cat("tiledist: task graph '", graph_name, "', task '", task_b.name, "' (",
                                task_b.def->name(), "): ", e.what()));
          }
        });
      }
      tl::atomic_xchg(words + i, step, {}, {"release", "gpu"});
      tl::atomic_add(words + (task + n_items), 1, {}, {"release", "gpu"});
    };
    if (queue) {
      // The next item of the step: this step's takings start past the earlier steps' (each took
      // its items and one more a program, the one that ended it).
      auto next = [&] {
        const Tensor taken_all =
            tl::atomic_add(words + (n_items + n_tasks + kQueueWord), int64_t{1}, {}, {"relaxed", "gpu"});
        return taken_all - (step - 1) * (n_items + P);
      };
      tl::while_(
          {next()}, [&](const tl::Values& v) { return v[0] < n_items; },
          [&](const tl::Values& v) {
            run_item(v[0]);
            return tl::Values{next()};
          });
    } else {
      tl::for_range(tl::program_id(0), n_items, P, [&](const Tensor& i) { run_item(i); });
    }
    // The last program of the step to end advances the step's number (read by the next).
    const Tensor before = tl::atomic_add(words + ended, 1, {}, {"acq_rel", "gpu"});
    tl::if_then(before + 1 == step * P, [&] { tl::store(words + stepw, step); });
  };
  return std::make_unique<KernelDef>(kernel_name(graph.name()), params, body);
}

struct MegaKernel::State {
  Target target;
  std::string graph;
  std::vector<Task> tasks;
  Plan plan;
  int programs = 0;
  Scratch<int32_t> items, deps;
  Scratch<int64_t> words, arg_words, fetches;
  std::unique_ptr<KernelDef> def;
  Kernel kernel;
  std::vector<LaunchArg> args;
  std::vector<ReachedBuffer> reached;  // (the tasks' buffers, for bounds checks)
  TaskBodies bodies;
  Schedule schedule = Schedule::queue;
};

MegaKernel::MegaKernel(const TaskGraph& graph, const Target& target, int programs, Schedule schedule, int num_warps)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.target = target, s.graph = graph.name();
  s.tasks = graph.tasks();
  s.plan = graph.plan();
  const bool gpu = kernels::detail::on_gpu(target);
  const int64_t n_items = int64_t(s.plan.items.size());
  if (programs < 0) throw Error(str_cat("tiledist: task graph '", graph.name(), "': ", programs, " programs"));
  if (num_warps < 0 || num_warps > 32 || (num_warps & (num_warps - 1)) != 0)
    throw Error(str_cat("tiledist: task graph '", graph.name(), "': ", num_warps,
                        " warps a program (0, or a power of two up to 32)"));
  if (programs == 0) programs = gpu ? (cuda::available() ? cuda::device().sms : 132) : 8;
  s.programs = int(std::min<int64_t>(programs, n_items));

  // Each task alone first: a kernel that does not compile, or that needs more shared memory
  // than an SM has, is named here rather than inside the whole.
  // (once for each kernel, constants and options: a model's layers share them)
  CompileOptions options = s.tasks[0].options;
  std::set<std::tuple<uint64_t, std::string, std::string>> compiled;
  for (const Task& t : s.tasks) {
    options.num_warps = std::max(options.num_warps, t.options.num_warps);
    options.check_bounds = options.check_bounds || t.options.check_bounds;
    if (!compiled.insert({t.def->id(), constants_str(t.constants), t.options.key()}).second) continue;
    Kernel alone;
    try {
      alone = compile(*t.def, t.constants, target, t.options);
    } catch (const Error& e) {
      throw Error(str_cat(who(graph, t), ": ", e.what()));
    }
    if (gpu && cuda::available() && size_t(alone.scratch_bytes()) > cuda::device().max_shared_per_block_optin)
      throw Error(str_cat(who(graph, t), " needs ", alone.scratch_bytes(),
                          " bytes of shared memory, more than an SM of ", cuda::device().name, " has (",
                          cuda::device().max_shared_per_block_optin, ")"));
  }

  // The tables: items (kItemWords each), dependencies (word, times), words (zero: no step has
  // run), the tasks' arguments.
  std::vector<int32_t> items, deps, first_word;
  // (the fetches ahead: $TILEDIST_MEGA_PREFETCH=0 leaves them out, to compare)
  const char* prefetch = std::getenv("TILEDIST_MEGA_PREFETCH");
  const bool fetch = gpu && !(prefetch && std::string(prefetch) == "0");
  std::vector<int64_t> fetches;
  if (fetch)
    for (const Plan::Fetch& f : s.plan.fetches) fetches.insert(fetches.end(), {f.addr, f.bytes, f.stride, f.count});
  const std::vector<int64_t> arg_words = argument_words(graph, gpu, first_word);
  s.bodies = task_bodies(graph);
  s.schedule = schedule;
  const TaskBodies& bodies = s.bodies;
  for (const Plan::Item& it : s.plan.items)
    items.insert(items.end(), {it.task, int32_t(it.tile), it.deps_begin, it.deps_end, bodies.of[size_t(it.task)],
                               first_word[size_t(it.task)], fetch ? it.fetch_begin : 0, fetch ? it.fetch_end : 0});
  for (const Plan::Dep& d : s.plan.deps) deps.insert(deps.end(), {d.word, d.times});
  s.items = Scratch<int32_t>(target, items);
  s.deps = Scratch<int32_t>(target, deps.empty() ? std::vector<int32_t>{0} : deps);
  s.words = Scratch<int64_t>(target, size_t(s.plan.words() + kExtraWords + s.programs));
  s.arg_words = Scratch<int64_t>(target, arg_words.empty() ? std::vector<int64_t>{0} : arg_words);
  s.fetches = Scratch<int64_t>(target, fetches.empty() ? std::vector<int64_t>{0} : fetches);
  auto table = [&](auto& scratch) {
    LaunchArg a = tiledist::detail::make_arg(scratch.data(), int64_t(scratch.size()));
    a.on_device = gpu;
    s.args.push_back(a);
  };
  table(s.items), table(s.deps), table(s.words), table(s.arg_words), table(s.fetches);
  for (const Task& t : s.tasks) {
    const std::vector<ParamInfo> params = t.def->runtime_params();
    for (size_t i = 0; i < t.args.size(); ++i)
      if (t.args[i].is_buffer && t.args[i].launch_arg().ptr)
        s.reached.push_back({str_cat(t.name, ".", params[i].name), t.args[i].launch_arg()});
  }
  s.def = persistent_kernel(graph, s.plan, s.programs, schedule, &s.bodies);
  if (num_warps > 0) options.num_warps = num_warps;
  s.kernel = compile(*s.def, {}, target, options);
}

MegaKernel::~MegaKernel() = default;

void MegaKernel::run(const runtime::Stream* stream) {
  State& s = *s_;
  try {
    if (kernels::detail::on_gpu(s.target)) {
      const runtime::Stream& on = stream ? *stream : runtime::Stream::legacy();
      s.kernel.launch_args(Grid(s.programs), s.args, &on, s.reached);
      if (!stream) on.synchronize();
    } else {
      s.kernel.launch_args(Grid(s.programs), s.args, nullptr, s.reached);
    }
  } catch (const Error& e) {
    throw Error(str_cat(e.what(), running()));
  }
}

std::string MegaKernel::running() const {
  const State& s = *s_;
  std::vector<int64_t> words;
  try {
    words = s.words.values();
  } catch (const Error&) {
    return " (the tasks it was running cannot be read back: the GPU's context is lost)";
  }
  const int64_t n_items = int64_t(s.plan.items.size()), n_tasks = int64_t(s.tasks.size());
  const int64_t step = words[size_t(n_items + n_tasks + kStepWord)] + 1;
  std::string out;
  for (int p = 0; p < s.programs; ++p) {
    const int64_t taken = words[size_t(n_items + n_tasks + kExtraWords + p)] - 1;
    if (taken < 0 || taken >= n_items || words[size_t(taken)] >= step) continue;  // (none, or done)
    const Plan::Item& it = s.plan.items[size_t(taken)];
    const Task& t = s.tasks[size_t(it.task)];
    const Tile tile = t.tile(it.tile);
    out += str_cat(out.empty() ? "; in task graph '" + s.graph + "', " : ", ", "program ", p, " was running task '",
                   t.name, "' (", t.def->name(), ") tile (", tile.x, ", ", tile.y, ", ", tile.z, ")");
  }
  return out;
}

std::string MegaKernel::summary() const {
  const State& s = *s_;
  const int64_t n_items = int64_t(s.plan.items.size());
  int64_t whole = 0;
  for (const Plan::Dep& d : s.plan.deps) whole += d.word >= n_items;
  return str_cat("task graph '", s.graph, "': ", s.tasks.size(), " tasks in ", s.bodies.first.size(), " bodies, ",
                 n_items, " tiles, ", s.plan.deps.size(), " dependencies (", whole, " on whole tasks), ", s.programs,
                 " programs, ", s.schedule == Schedule::queue ? "queue" : "round robin");
}

std::string MegaKernel::describe() const {
  const State& s = *s_;
  const int64_t n_items = int64_t(s.plan.items.size());
  struct Count {
    int64_t tiles = 0, on_tiles = 0, on_tasks = 0;
  };
  std::vector<Count> counts(s.tasks.size());
  for (const Plan::Item& it : s.plan.items) {
    Count& c = counts[size_t(it.task)];
    ++c.tiles;
    for (int32_t d = it.deps_begin; d < it.deps_end; ++d)
      ++(s.plan.deps[size_t(d)].word >= n_items ? c.on_tasks : c.on_tiles);
  }
  std::string out;
  for (int t : s.plan.order) {
    const Task& task = s.tasks[size_t(t)];
    const Count& c = counts[size_t(t)];
    out += str_cat(task.name, " (", task.def->name(), "): ", c.tiles, " tiles, body ", s.bodies.of[size_t(t)],
                   ", waits on ", c.on_tiles, " tiles and ", c.on_tasks, " whole tasks\n");
  }
  return out;
}

const Plan& MegaKernel::plan() const { return s_->plan; }
int MegaKernel::programs() const { return s_->programs; }
const Kernel& MegaKernel::kernel() const { return s_->kernel; }

}  // namespace tiledist::mega
