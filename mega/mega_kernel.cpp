// The persistent kernel of a task graph (mega/mega_kernel.h): traced as a KernelDef made here,
// whose parameters are every task's runtime parameters and the plan's three tables, and whose
// body is a loop over the program's items with each task's body inlined under its number.
#include "mega/mega_kernel.h"

#include <algorithm>
#include <cctype>

#include "dsl/dist.h"
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
constexpr int64_t kCudaParamBytes = 32764;

std::string kernel_name(const std::string& graph) {
  std::string n = "mega_";
  for (char c : graph) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
}

std::string who(const TaskGraph& g, const Task& t) {
  return str_cat("tiledist: task graph '", g.name(), "', task '", t.name, "' (", t.def->name(), ")");
}

}  // namespace

std::unique_ptr<KernelDef> persistent_kernel(const TaskGraph& graph, const Plan& plan, int programs,
                                             Schedule schedule) {
  // Its parameters: each task's runtime parameters, then the tables.
  std::vector<ParamInfo> params;
  std::vector<size_t> first_param;
  for (size_t t = 0; t < graph.tasks().size(); ++t) {
    first_param.push_back(params.size());
    for (ParamInfo p : graph.tasks()[t].def->runtime_params()) {
      p.name = str_cat("t", t, "_", p.name);
      params.push_back(p);
    }
  }
  first_param.push_back(params.size());
  for (const char* name : {"items", "deps"})
    params.push_back({name, ParamKind::pointer, ir::Type::ptr(ir::DType::i32)});
  params.push_back({"words", ParamKind::pointer, ir::Type::ptr(ir::DType::i64)});
  const int64_t n_items = int64_t(plan.items.size()), n_tasks = int64_t(graph.tasks().size());
  const int P = programs;
  const bool queue = schedule == Schedule::queue;
  auto body = [tasks = graph.tasks(), first_param, n_items, n_tasks, P, queue, graph_name = graph.name()](
                  const std::vector<ir::Value*>& vals, const std::vector<const ConstValue*>&) {
    const size_t tables = first_param.back();
    const Tensor items(vals[tables]), deps(vals[tables + 1]), words(vals[tables + 2]);
    const int64_t ended = n_items + n_tasks + kEndedWord, stepw = n_items + n_tasks + kStepWord;
    const Tensor step = tl::load(words + stepw) + 1;  // (this step's number)
    const Tensor taken = words + (n_items + n_tasks + kExtraWords) + tl::program_id(0);
    auto run_item = [&](const Tensor& i) {
      tl::store(taken, (i + 1).to(tl::int64));
      const Tensor row = items + i * 4;
      const Tensor task = tl::load(row), tile = tl::load(row + 1);
      tl::for_range(tl::load(row + 2), tl::load(row + 3), 1, [&](Tensor d) {
        const Tensor word = tl::load(deps + d * 2), times = tl::load(deps + d * 2 + 1);
        shmem::signal_wait_until(words + word, shmem::Cmp::ge, step * times.to(tl::int64));
      });
      for (size_t t = 0; t < tasks.size(); ++t) {
        const Task& task_t = tasks[t];
        tl::if_then(task == int64_t(t), [&] {
          const Grid g = task_t.grid;
          const Tensor x = tile % g.x, y = tile / g.x % g.y, z = tile / (int64_t(g.x) * g.y);
          dsl::ProgramScope scope({x.value(), y.value(), z.value()},
                                  {tl::scalar(g.x, tl::int32).value(), tl::scalar(g.y, tl::int32).value(),
                                   tl::scalar(g.z, tl::int32).value()});
          const std::vector<ir::Value*> args(vals.begin() + std::ptrdiff_t(first_param[t]),
                                             vals.begin() + std::ptrdiff_t(first_param[t + 1]));
          try {
            task_t.def->inline_body(args, task_t.constants);
          } catch (const Error& e) {
            throw Error(str_cat("tiledist: task graph '", graph_name, "', task '", task_t.name, "' (",
                                task_t.def->name(), "): ", e.what()));
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
  Scratch<int64_t> words;
  std::unique_ptr<KernelDef> def;
  Kernel kernel;
  std::vector<LaunchArg> args;
};

MegaKernel::MegaKernel(const TaskGraph& graph, const Target& target, int programs, Schedule schedule)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.target = target, s.graph = graph.name();
  s.tasks = graph.tasks();
  s.plan = graph.plan();
  const bool gpu = kernels::detail::on_gpu(target);
  const int64_t n_items = int64_t(s.plan.items.size());
  if (programs < 0) throw Error(str_cat("tiledist: task graph '", graph.name(), "': ", programs, " programs"));
  if (programs == 0) programs = gpu ? (cuda::available() ? cuda::device().sms : 132) : 8;
  s.programs = int(std::min<int64_t>(programs, n_items));
  // A CUDA kernel takes at most 32764 bytes of parameters (since CUDA 12.1, on Volta and after):
  // every task's arguments are the persistent kernel's.
  if (target.kind == Target::Kind::nvptx) {
    int64_t bytes = 0;
    for (const Task& t : s.tasks)
      for (const ParamInfo& p : t.def->runtime_params()) {
        const int64_t size = p.type.is_ptr || ir::dtype_bytes(p.type.dtype) == 8 ? 8 : 4;
        bytes = (bytes + size - 1) / size * size + size;
      }
    bytes += int64_t{3} * 8;  // (the tables)
    if (bytes > kCudaParamBytes)
      throw Error(str_cat("tiledist: task graph '", graph.name(), "': its persistent kernel would take ", bytes,
                          " bytes of parameters (its ", s.tasks.size(),
                          " tasks' arguments), more than a CUDA kernel's ", kCudaParamBytes, ": split the graph"));
  }

  // Each task alone first: a kernel that does not compile, or that needs more shared memory
  // than an SM has, is named here rather than inside the whole.
  CompileOptions options = s.tasks[0].options;
  for (const Task& t : s.tasks) {
    options.num_warps = std::max(options.num_warps, t.options.num_warps);
    options.check_bounds = options.check_bounds || t.options.check_bounds;
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

  // The tables: items (task, tile, first and end of its dependencies), dependencies (word,
  // times), words (zero: no step has run).
  std::vector<int32_t> items, deps;
  for (const Plan::Item& it : s.plan.items)
    items.insert(items.end(), {it.task, int32_t(it.tile), it.deps_begin, it.deps_end});
  for (const Plan::Dep& d : s.plan.deps) deps.insert(deps.end(), {d.word, d.times});
  s.items = Scratch<int32_t>(target, items);
  s.deps = Scratch<int32_t>(target, deps.empty() ? std::vector<int32_t>{0} : deps);
  s.words = Scratch<int64_t>(target, size_t(s.plan.words() + kExtraWords + s.programs));

  // The arguments: each task's, then the tables.
  for (const Task& t : s.tasks)
    for (const Arg& a : t.args) {
      LaunchArg arg = a.launch_arg();
      if (a.is_buffer && gpu) arg.on_device = true;
      s.args.push_back(arg);
    }
  auto table = [&](auto& scratch) {
    LaunchArg a = tiledist::detail::make_arg(scratch.data(), int64_t(scratch.size()));
    a.on_device = gpu;
    s.args.push_back(a);
  };
  table(s.items), table(s.deps), table(s.words);
  s.def = persistent_kernel(graph, s.plan, s.programs, schedule);
  s.kernel = compile(*s.def, {}, target, options);
}

MegaKernel::~MegaKernel() = default;

void MegaKernel::run(const runtime::Stream* stream) {
  State& s = *s_;
  try {
    if (kernels::detail::on_gpu(s.target)) {
      const runtime::Stream& on = stream ? *stream : runtime::Stream::legacy();
      s.kernel.launch_args(Grid(s.programs), s.args, &on);
      if (!stream) on.synchronize();
    } else {
      s.kernel.launch_args(Grid(s.programs), s.args);
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

const Plan& MegaKernel::plan() const { return s_->plan; }
int MegaKernel::programs() const { return s_->programs; }
const Kernel& MegaKernel::kernel() const { return s_->kernel; }

}  // namespace tiledist::mega
