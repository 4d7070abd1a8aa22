#include "jit/kernel.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "runtime/cuda_world.h"
#include "runtime/hip.h"
#include "runtime/hip_world.h"

namespace tiledist {

namespace {

/// The device memory functions of a GPU runtime.
struct DeviceMemory {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void (*to_device)(void*, const void*, size_t);
  void (*to_host)(void*, const void*, size_t);
};

/// A GPU launch's parameter addresses: each slot, then the GPU world's address (`*world`, the
/// distributed kernels' trailing parameter) where there is one.
std::vector<void*> param_addresses(std::vector<uint64_t>& slots, void** world) {
  std::vector<void*> ptrs(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) ptrs[i] = &slots[i];
  if (*world) ptrs.push_back(world);
  return ptrs;
}

/// Host buffers given to a GPU launch: copied to device memory before it (their slots then hold
/// the device copies), back after it (`finish`, once the launch is done), freed either way.
class HostStaging {
 public:
  HostStaging(const DeviceMemory& mem, const jit::Loaded& loaded, const std::vector<LaunchArg>& args,
              std::vector<uint64_t>& slots)
      : mem_(mem) {
    const auto& params = loaded.runtime_params;
    staged_.reserve(args.size());
    try {
      for (size_t i = 0; i < args.size(); ++i) {
        if (params[i].kind != ParamKind::pointer || args[i].on_device) continue;
        if (args[i].extent_bytes < 0)
          throw Error(str_cat("tiledist: argument ", i, " ('", params[i].name, "') of GPU kernel '",
                              loaded.artifact.kernel,
                              "' is a raw host pointer: pass a device buffer, or a std::vector or std::span to copy"));
        size_t bytes = static_cast<size_t>(args[i].extent_bytes);
        void* d = mem_.malloc(bytes);
        staged_.push_back({args[i].ptr, d, bytes});
        mem_.to_device(d, args[i].ptr, bytes);
        std::memcpy(&slots[i], &d, sizeof d);
      }
    } catch (...) {  // (no destructor runs for an object whose constructor throws)
      release();
      throw;
    }
  }
  ~HostStaging() { release(); }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  bool empty() const { return staged_.empty(); }
  void finish() {
    for (auto& s : staged_) mem_.to_host(s.host, s.device, s.bytes);
  }

 private:
  void release() {
    // (After a kernel has trapped every call fails: the launch's own error is the one to see.)
    for (auto& s : staged_) {
      try {
        mem_.free(s.device);
      } catch (const Error&) {
      }
    }
    staged_.clear();
  }

  struct Staged {
    void* host;
    void* device;
    size_t bytes;
  };
  DeviceMemory mem_;
  std::vector<Staged> staged_;
};

/// The kernel's module of a GPU runtime, loaded on its first launch (and its name noted with the
/// world, where it has one, for its failure record).
template <class Module>
std::shared_ptr<Module> module_of(const jit::Loaded& loaded, runtime::GpuWorld* world) {
  std::lock_guard<std::mutex> lock(loaded.gpu_mutex);
  if (!loaded.gpu_module) {
    loaded.gpu_module = std::make_shared<Module>(loaded.artifact.binary, loaded.artifact.kernel);
    if (world) world->note_kernel(loaded.artifact.kernel);
  }
  return std::static_pointer_cast<Module>(loaded.gpu_module);
}

const DeviceMemory kCudaMemory{cuda::malloc, cuda::free, cuda::copy_to_device, cuda::copy_to_host};
const DeviceMemory kHipMemory{hip::malloc, hip::free, hip::copy_to_device, hip::copy_to_host};

}  // namespace

Kernel compile(const KernelDef& def, const Constants& constants, const Target& target, const CompileOptions& options,
               jit::Context& ctx) {
  auto generic = ctx.compile(def, constants, target, options);
  if (target.kind == Target::Kind::host) return Kernel(std::move(generic));
  return Kernel(std::move(generic), def, constants, target, options, ctx);
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
  ArgFacts facts(args.size(), ArgFact::none);
  bool any = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const LaunchArg& a = args[i];
    const ParamInfo& p = loaded_->runtime_params[i];
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
    any |= facts[i] != ArgFact::none;
  }
  if (!any) return *loaded_;
  std::lock_guard<std::mutex> lock(variants_->mu);
  auto& slot = variants_->by_facts[facts];
  if (!slot)
    slot = variants_->ctx->compile(variants_->def, variants_->constants, variants_->target, variants_->options, facts);
  return *slot;
}

void Kernel::launch_args(Grid grid, const std::vector<LaunchArg>& args, const cuda::Stream* stream) const {
  if (!loaded_) throw Error("tiledist: launch of an empty Kernel (compile it first)");
  if (stream && loaded_->target.kind == Target::Kind::host)
    throw Error(str_cat("tiledist: kernel '", loaded_->artifact.kernel,
                        "' was compiled for the host: it has no CUDA stream to run on"));
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
  std::vector<void*> ptrs(args.size());
  runtime::HostRuntime rt;
  rt.kernel = kname;
  for (size_t i = 0; i < args.size(); ++i) {
    const ParamInfo& p = params[i];
    const LaunchArg& a = args[i];
    auto bad = [&](const std::string& what) {
      return Error(str_cat("tiledist: argument ", i, " ('", p.name, "') of kernel '", kname, "': ", what));
    };
    void* slot = &slots[i];
    ptrs[i] = slot;
    if (p.kind == ParamKind::pointer) {
      if (a.kind != LaunchArg::Kind::pointer)
        throw bad(str_cat("expected a pointer to ", ir::dtype_name(p.type.dtype), ", got a number"));
      if (a.on_device && loaded.target.kind == Target::Kind::host)
        throw bad("a cuda::Buffer was given to a kernel compiled for the host");
      if (a.elem != p.type.dtype)
        throw bad(str_cat("expected a pointer to ", ir::dtype_name(p.type.dtype), ", got a pointer to ",
                          ir::dtype_name(a.elem)));
      std::memcpy(slot, &a.ptr, sizeof(void*));
      if (loaded.options.check_bounds) {
        if (a.extent_bytes < 0)
          throw bad(
              "TILEDIST_CHECK_BOUNDS=1 needs the buffer's extent: pass a std::span or std::vector, not a raw pointer");
        const char* lo = static_cast<const char*>(a.ptr);
        rt.ranges.push_back({lo, lo + a.extent_bytes, p.name, ir::dtype_bytes(p.type.dtype)});
      }
      continue;
    }
    if (a.kind == LaunchArg::Kind::pointer) throw bad(str_cat("expected a number (", p.type.str(), "), got a pointer"));
    switch (p.type.dtype) {
      case ir::DType::i32: {
        if (a.kind != LaunchArg::Kind::integer) throw bad("expected an integer (i32), got a floating-point number");
        if (a.i < std::numeric_limits<int32_t>::min() || a.i > std::numeric_limits<int32_t>::max())
          throw bad(str_cat("value ", a.i, " does not fit in i32 (declare the parameter tl::Int64)"));
        int32_t v = static_cast<int32_t>(a.i);
        std::memcpy(slot, &v, 4);
        break;
      }
      case ir::DType::i64: {
        if (a.kind != LaunchArg::Kind::integer) throw bad("expected an integer (i64), got a floating-point number");
        std::memcpy(slot, &a.i, 8);
        break;
      }
      case ir::DType::f32: {
        float v = a.kind == LaunchArg::Kind::floating ? static_cast<float>(a.f) : static_cast<float>(a.i);
        std::memcpy(slot, &v, 4);
        break;
      }
      default:
        throw bad(str_cat("unsupported parameter type ", p.type.str()));
    }
  }
  if (loaded.target.kind == Target::Kind::nvptx) return launch_gpu(loaded, grid, args, slots, stream);
  if (loaded.target.kind == Target::Kind::amdgcn) return launch_amdgpu(loaded, grid, args, slots, stream);
  runtime::launch_host(loaded.host_fn, grid, ptrs.data(), loaded.artifact.scratch_bytes, rt,
                       {loaded.options.check_bounds, loaded.artifact.distributed});
}

void Kernel::launch_gpu(const jit::Loaded& loaded, Grid grid, const std::vector<LaunchArg>& args,
                        std::vector<uint64_t>& slots, const cuda::Stream* stream) const {
  const auto& params = loaded.runtime_params;
  // Kernels with distributed ops take the GPU world as a trailing parameter.
  cuda::World* world = loaded.artifact.distributed ? &cuda::World::get() : nullptr;
  // Host buffers go to the device for the launch and come back after it.
  HostStaging staged(kCudaMemory, loaded, args, slots);
  void* device_world = world ? world->device_world() : nullptr;
  std::vector<void*> ptrs = param_addresses(slots, &device_world);
  // TMA tensor maps, by value after everything else, encoded from this launch's arguments.
  std::vector<cuda::TensorMap> maps;
  maps.reserve(loaded.tma.size());
  for (const runtime::TmaRecipe& r : loaded.tma) {
    auto size = [&](const runtime::TmaRecipe::Dim& d) {
      int64_t v = d.value;
      for (int p : d.params) v *= args.at(static_cast<size_t>(p)).i;
      return v;
    };
    cuda::TensorMapShape t;
    std::memcpy(&t.base, &slots.at(static_cast<size_t>(r.pointer)), sizeof(void*));
    t.element_bytes = static_cast<int>(ir::dtype_bytes(r.dtype));
    t.bf16 = r.dtype == ir::DType::bf16;
    t.rank = static_cast<int>(r.dims.size());
    bool empty = false;
    for (int i = 0; i < t.rank; ++i) {
      const int64_t n = size(r.dims[static_cast<size_t>(i)]);
      empty |= n <= 0;
      t.dims[i] = static_cast<uint64_t>(std::min(n, runtime::TmaRecipe::kUnbounded));
      t.box[i] = static_cast<unsigned>(r.box[static_cast<size_t>(i)]);
      if (i)
        t.stride_bytes[i - 1] = static_cast<uint64_t>(size(r.strides[static_cast<size_t>(i - 1)]) * t.element_bytes);
    }
    if (empty) {  // an empty tensor, whose every element reads as zero: a map of zeros
      t.base = cuda::zeros_for_tensor_maps();
      uint64_t stride = 128;
      for (int i = 0; i < t.rank; ++i) {
        t.dims[i] = t.box[i];
        if (i) t.stride_bytes[i - 1] = stride;
        stride *= t.box[i];
      }
    }
    try {
      maps.push_back(cuda::encode_tensor_map(t));
    } catch (const Error& e) {
      throw Error(str_cat("tiledist: kernel '", loaded.artifact.kernel, "', argument ", r.pointer, " ('",
                          params[static_cast<size_t>(r.pointer)].name, "'): ", e.what()));
    }
  }
  for (auto& m : maps) ptrs.push_back(m.bytes);
  std::shared_ptr<cuda::Module> module = module_of<cuda::Module>(loaded, world);
  const int g[3] = {grid.x, grid.y, grid.z};
  module->launch(loaded.artifact.entry, g, loaded.artifact.threads, static_cast<size_t>(loaded.artifact.scratch_bytes),
                 ptrs.data(), stream ? stream->handle() : nullptr);
  // A distributed kernel launched without a stream is waited for, so that a program that
  // gives up (a wait past the timeout: it traps) is reported here; on a stream it runs
  // asynchronously, and the stream's synchronize reports it. Either way the Error carries
  // the world's failure record (cuda::set_failure_explainer).
  if (world && !stream) cuda::synchronize();
  if (!staged.empty()) {
    if (stream)
      stream->synchronize();
    else
      cuda::synchronize();
    staged.finish();
  }
}

void Kernel::launch_amdgpu(const jit::Loaded& loaded, Grid grid, const std::vector<LaunchArg>& args,
                           std::vector<uint64_t>& slots, const cuda::Stream* stream) const {
  const std::string& kernel = loaded.artifact.kernel;
  if (stream) throw Error(str_cat("tiledist: kernel '", kernel, "' runs on an AMD GPU: a CUDA stream cannot order it"));
  // Kernels with distributed ops take the AMD GPU world as a trailing parameter.
  hip::World* world = loaded.artifact.distributed ? &hip::World::get() : nullptr;
  HostStaging staged(kHipMemory, loaded, args, slots);
  void* device_world = world ? world->device_world() : nullptr;
  std::vector<void*> ptrs = param_addresses(slots, &device_world);
  std::shared_ptr<hip::Module> module = module_of<hip::Module>(loaded, world);
  const int g[3] = {grid.x, grid.y, grid.z};
  module->launch(loaded.artifact.entry, g, loaded.artifact.threads, ptrs.data());
  hip::synchronize();
  // A program that gave up (a wait past the timeout) has filled the failure record and ended
  // its wavefront (codegen/amdgcn.cpp: give_up), and the kernel has completed.
  if (world && !world->failure().empty()) throw Error(world->failure());
  staged.finish();
}

}  // namespace tiledist
