// Kernel: a launch's arguments checked against the kernel's parameters and packed, then run by
// the target's backend (jit/backend.h); GPU kernels' variants specialized at launch.
#include "jit/kernel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "jit/backend.h"

namespace tiledist {

Kernel compile(const KernelDef& def, const Constants& constants, const Target& target, const CompileOptions& options,
               jit::Context& ctx) {
  auto generic = ctx.compile(def, constants, target, options);
  Kernel k = jit::Backend::for_target(target).specializes_at_launch()
                 ? Kernel(std::move(generic), def, constants, target, options, ctx)
                 : Kernel(std::move(generic));
  k.source_ = std::make_shared<const KernelSource>(KernelSource{def, constants, options});
  return k;
}

namespace {
thread_local LaunchRecorder* g_recorder = nullptr;
}
RecordLaunches::RecordLaunches(LaunchRecorder& recorder) : outer_(g_recorder) { g_recorder = &recorder; }
RecordLaunches::~RecordLaunches() { g_recorder = outer_; }

ArgFacts arg_facts(const std::vector<ParamInfo>& params, const std::vector<LaunchArg>& args) {
  ArgFacts facts(args.size(), ArgFact::none);
  for (size_t i = 0; i < args.size() && i < params.size(); ++i) {
    const LaunchArg& a = args[i];
    const ParamInfo& p = params[i];
    if (!p.specialize) continue;
    if (a.kind == LaunchArg::Kind::pointer && p.kind == ParamKind::pointer) {
      // host data is copied to a fresh (aligned) device buffer
      if (!a.on_device || reinterpret_cast<uintptr_t>(a.ptr) % 16 == 0) facts[i] = ArgFact::aligned16;
    } else if (a.kind == LaunchArg::Kind::integer && p.kind == ParamKind::scalar && !p.type.is_float()) {
      if (a.i % 16 == 0 && a.i > 0)
        facts[i] = ArgFact::aligned16;  // (0 and negatives: the generic variant)
      else if (a.i == 1)
        facts[i] = ArgFact::one;
    }
  }
  return facts;
}

uint64_t pack_arg(const ParamInfo& p, const LaunchArg& a, bool device_memory, const std::string& where) {
  auto bad = [&](const std::string& what) { return Error(str_cat(where, ": ", what)); };
  uint64_t slot = 0;
  if (p.kind == ParamKind::pointer) {
    if (a.kind != LaunchArg::Kind::pointer)
      throw bad(str_cat("expected a pointer to ", ir::dtype_name(p.type.dtype), ", got a number"));
    if (a.on_device && !device_memory) throw bad("a cuda::Buffer was given to a kernel compiled for the host");
    if (a.elem != p.type.dtype)
      throw bad(str_cat("expected a pointer to ", ir::dtype_name(p.type.dtype), ", got a pointer to ",
                        ir::dtype_name(a.elem)));
    return uint64_t(reinterpret_cast<uintptr_t>(a.ptr));
  }
  if (a.kind == LaunchArg::Kind::pointer) throw bad(str_cat("expected a number (", p.type.str(), "), got a pointer"));
  switch (p.type.dtype) {
    case ir::DType::i32: {
      if (a.kind != LaunchArg::Kind::integer) throw bad("expected an integer (i32), got a floating-point number");
      if (a.i < std::numeric_limits<int32_t>::min() || a.i > std::numeric_limits<int32_t>::max())
        throw bad(str_cat("value ", a.i, " does not fit in i32 (declare the parameter tl::Int64)"));
      const int32_t v = static_cast<int32_t>(a.i);
      std::memcpy(&slot, &v, 4);
      return slot;
    }
    case ir::DType::i64:
      if (a.kind != LaunchArg::Kind::integer) throw bad("expected an integer (i64), got a floating-point number");
      std::memcpy(&slot, &a.i, 8);
      return slot;
    case ir::DType::f32: {
      const float v = a.kind == LaunchArg::Kind::floating ? static_cast<float>(a.f) : static_cast<float>(a.i);
      std::memcpy(&slot, &v, 4);
      return slot;
    }
    default:
      throw bad(str_cat("unsupported parameter type ", p.type.str()));
  }
}

struct Kernel::Variants {
  Variants(const KernelDef& d, const Constants& c, const Target& t, const CompileOptions& o, jit::Context& x)
      : def(d), constants(c), target(t), options(o), ctx(&x) {}
  KernelDef def;
  Constants constants;
  Target target;
  CompileOptions options;
  jit::Context* ctx;
  std::mutex mu;
  std::map<ArgFacts, std::shared_ptr<const jit::Loaded>> by_facts;
};

Kernel::Kernel(std::shared_ptr<const jit::Loaded> generic, const KernelDef& def, const Constants& constants,
               const Target& target, const CompileOptions& options, jit::Context& ctx)
    : loaded_(std::move(generic)), variants_(std::make_shared<Variants>(def, constants, target, options, ctx)) {}

const jit::Loaded& Kernel::variant_for(const std::vector<LaunchArg>& args) const {
  if (!variants_ || args.size() != loaded_->runtime_params.size()) return *loaded_;
  const ArgFacts facts = arg_facts(loaded_->runtime_params, args);
  if (std::all_of(facts.begin(), facts.end(), [](ArgFact f) { return f == ArgFact::none; })) return *loaded_;
  std::lock_guard<std::mutex> lock(variants_->mu);
  auto& slot = variants_->by_facts[facts];
  if (!slot)
    slot = variants_->ctx->compile(variants_->def, variants_->constants, variants_->target, variants_->options, facts);
  return *slot;
}

const jit::Loaded& Kernel::compiled(const char* what) const {
  if (!loaded_) throw Error(str_cat("tiledist: ", what, "() of an empty Kernel (compile it first)"));
  return *loaded_;
}

namespace {
/// `args` where a raw pointer (no extent: neither a buffer nor a std::vector or std::span) is
/// the backend's device memory: marked so, as a cuda::DevicePtr is (before the variant is
/// chosen: a device pointer's alignment is its own, a host buffer's copy's is 16). Empty where
/// there is none such.
std::optional<std::vector<LaunchArg>> raw_device_pointers(const jit::Backend& backend,
                                                          const std::vector<LaunchArg>& args) {
  std::optional<std::vector<LaunchArg>> marked;
  if (!backend.takes_device_memory()) return marked;
  for (size_t i = 0; i < args.size(); ++i) {
    const LaunchArg& a = args[i];
    if (a.kind != LaunchArg::Kind::pointer || a.on_device || a.extent_bytes >= 0 || !backend.is_device_memory(a.ptr))
      continue;
    if (!marked) marked = args;
    (*marked)[i].on_device = true;
  }
  return marked;
}
}  // namespace

void Kernel::launch_args(Grid grid, const std::vector<LaunchArg>& given, const runtime::Stream* stream,
                         const std::vector<ReachedBuffer>& reached) const {
  if (!loaded_) throw Error("tiledist: launch of an empty Kernel (compile it first)");
  if (g_recorder) return g_recorder->launched(*this, grid, given, stream);
  const jit::Backend& backend = jit::Backend::for_target(loaded_->target);
  backend.check_stream(*loaded_, stream);
  const auto marked = raw_device_pointers(backend, given);
  const std::vector<LaunchArg>& args = marked ? *marked : given;
  const jit::Loaded& loaded = variant_for(args);
  const auto& params = loaded.runtime_params;
  const std::string& kname = loaded.artifact.kernel;
  if (args.size() != params.size()) {
    std::string names;
    for (auto& p : params) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(
        str_cat("tiledist: kernel '", kname, "' takes ", params.size(), " arguments (", names, "), got ", args.size()));
  }
  std::vector<uint64_t> slots(args.size());
  runtime::HostRuntime rt;
  rt.kernel = kname;
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamInfo& p = params[i];
    const LaunchArg& a = args[i];
    slots[i] = pack_arg(p, a, backend.takes_device_memory(),
                        str_cat("tiledist: argument ", i, " ('", p.name, "') of kernel '", kname, "'"));
    if (p.kind == ParamKind::pointer && loaded.options.check_bounds) {
      if (a.extent_bytes < 0)
        throw Error(str_cat("tiledist: argument ", i, " ('", p.name, "') of kernel '", kname,
                            "': TILEDIST_CHECK_BOUNDS=1 needs the buffer's extent: pass a std::span or std::vector "
                            "(host memory) or a cuda::DevicePtr{p, count} (device memory), not a raw pointer"));
      const char* lo = static_cast<const char*>(a.ptr);
      rt.ranges.push_back({lo, lo + a.extent_bytes, p.name, ir::dtype_bytes(p.type.dtype)});
    }
  }
  if (loaded.options.check_bounds)
    for (const ReachedBuffer& r : reached) {
      if (r.arg.kind != LaunchArg::Kind::pointer || r.arg.extent_bytes < 0)
        throw Error(str_cat("tiledist: kernel '", kname, "': TILEDIST_CHECK_BOUNDS=1 needs the extent of ", r.name,
                            ", which it reaches through memory"));
      const char* lo = static_cast<const char*>(r.arg.ptr);
      rt.ranges.push_back({lo, lo + r.arg.extent_bytes, r.name, ir::dtype_bytes(r.arg.elem)});
    }
  jit::Launch launch{grid, args, slots, rt, stream};
  backend.launch(loaded, launch);
}

}  // namespace tiledist
