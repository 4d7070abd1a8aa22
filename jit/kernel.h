// Compiling and launching kernels: the user's entry points.
//
//   static const tiledist::KernelDef add_def("add", add, {"x", "y", "out", "n", "BLOCK"});
//   auto k = tiledist::compile(add_def, {{"BLOCK", 1024}});
//   k.launch({tl::cdiv(n, 1024)}, x, y, out, n);
#pragma once

#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "dsl/kernel_def.h"
#include "jit/context.h"
#include "runtime/cuda.h"
#include "runtime/cuda_world.h"
#include "runtime/host.h"
#include "runtime/stream.h"

namespace tiledist {

using runtime::Grid;

/// One argument of a launch, as the caller passed it.
struct LaunchArg {
  /// What was passed, and so which field holds it: a pointer (`ptr`), an integer (`i`) or a
  /// floating-point number (`f`; an integer also fits an f32 parameter).
  enum class Kind { pointer, integer, floating } kind;  ///< what this argument is

  void* ptr = nullptr;             ///< pointers: the address
  int64_t i = 0;                   ///< integers: the value
  double f = 0;                    ///< floating-point numbers: the value
  ir::DType elem = ir::DType::i8;  ///< pointers: the element type
  int64_t extent_bytes = -1;       ///< pointers: the buffer's size in bytes when known, else -1
  bool on_device = false;          ///< pointers: GPU memory (cuda::Buffer, SymmBuffer, DevicePtr; a raw
                                   ///< pointer the backend knows as its device's, at launch)
};

namespace detail {
template <class T>
LaunchArg make_arg(T* p, int64_t count = -1) {
  LaunchArg a{LaunchArg::Kind::pointer};
  a.ptr = const_cast<std::remove_const_t<T>*>(p);
  a.elem = dtype_of<std::remove_const_t<T>>();
  a.extent_bytes = count < 0 ? -1 : count * static_cast<int64_t>(sizeof(T));
  return a;
}
template <class T>
LaunchArg to_arg(T* p) {
  return make_arg(p);
}
template <class T>
LaunchArg to_arg(std::vector<T>& v) {
  return make_arg(v.data(), static_cast<int64_t>(v.size()));
}
template <class T>
LaunchArg to_arg(const std::vector<T>& v) {
  return make_arg(v.data(), static_cast<int64_t>(v.size()));
}
template <class T, size_t N>
LaunchArg to_arg(std::span<T, N> s) {
  return make_arg(s.data(), static_cast<int64_t>(s.size()));
}
template <class T>
LaunchArg to_arg(const cuda::Buffer<T>& b) {
  LaunchArg a = make_arg(b.data(), static_cast<int64_t>(b.size()));
  a.on_device = true;
  return a;
}
template <class T>
LaunchArg to_arg(const cuda::SymmBuffer<T>& b) {
  LaunchArg a = make_arg(b.data(), static_cast<int64_t>(b.size()));
  a.on_device = true;
  return a;
}
template <class T>
LaunchArg to_arg(cuda::DevicePtr<T> p) {
  LaunchArg a = make_arg(p.ptr, p.count ? static_cast<int64_t>(p.count) : -1);
  a.on_device = true;
  return a;
}
template <class T>
  requires std::is_integral_v<T>
LaunchArg to_arg(T v) {
  LaunchArg a{LaunchArg::Kind::integer};
  a.i = static_cast<int64_t>(v);
  return a;
}
template <class T>
  requires std::is_floating_point_v<T>
LaunchArg to_arg(T v) {
  LaunchArg a{LaunchArg::Kind::floating};
  a.f = static_cast<double>(v);
  return a;
}
}  // namespace detail

class Kernel;

/// What a Kernel was compiled from (compile() keeps it, for every target).
struct KernelSource {
  KernelDef def;           ///< The definition (a copy: it shares the traced function).
  Constants constants;     ///< Its constants.
  CompileOptions options;  ///< The options it was compiled with.
};

/// Takes the launches made on this thread while a RecordLaunches holds it, instead of running
/// them: how a task graph (mega/) takes the kernels a library object launches.
class LaunchRecorder {
 public:
  virtual ~LaunchRecorder() = default;
  /// `kernel` launched over `grid` with `args` (converted, as launch_args takes them) on
  /// `stream` (null: the host, or launch() without a stream).
  virtual void launched(const Kernel& kernel, Grid grid, const std::vector<LaunchArg>& args,
                        const runtime::Stream* stream) = 0;
};
/// Hands every launch on this thread to `recorder` for its lifetime (nothing runs); scopes nest.
class RecordLaunches {
 public:
  /// Installs `recorder` on this thread until the scope ends (then the one before it, if any).
  explicit RecordLaunches(LaunchRecorder& recorder);
  ~RecordLaunches();
  RecordLaunches(const RecordLaunches&) = delete;
  RecordLaunches& operator=(const RecordLaunches&) = delete;

 private:
  LaunchRecorder* outer_;
};

/// A buffer a kernel reaches through an address held in memory, and the name it goes by in
/// messages (Kernel::launch_args).
struct ReachedBuffer {
  std::string name;  ///< For messages: whose buffer it is.
  LaunchArg arg;     ///< Its address and extent.
};

/// What a launch with `args` tells of the runtime parameters `params` (each one's ArgFact): the
/// variant of a kernel it selects.
ArgFacts arg_facts(const std::vector<ParamInfo>& params, const std::vector<LaunchArg>& args);

/// `a` as a kernel's runtime parameter `p` takes it, in a 64-bit slot: a pointer's address, an
/// integer (an i32 in the low four bytes), an f32's bits. `device_memory`: whether the kernel
/// takes GPU memory. Throws Error `where`: what is wrong (a pointer for a number, another
/// element type, an i32 out of range, ...).
uint64_t pack_arg(const ParamInfo& p, const LaunchArg& a, bool device_memory, const std::string& where);

/// A compiled specialization of a kernel.
class Kernel {
 public:
  /// An empty Kernel: launching it, or asking its name(), ir() or scratch_bytes(), throws Error.
  Kernel() = default;
  /// A kernel compiled once, launched as it is (no specialization at launch).
  explicit Kernel(std::shared_ptr<const jit::Loaded> loaded) : loaded_(std::move(loaded)) {}
  /// A GPU kernel that also specializes itself at launch, as Triton does: arguments that are
  /// multiples of 16 (integers) or 16-byte aligned (pointers), and integers equal to 1, select a
  /// variant compiled with that knowledge (vectorized accesses, strides folded away), compiled
  /// at its first launch and kept.
  Kernel(std::shared_ptr<const jit::Loaded> generic, const KernelDef& def, const Constants& constants,
         const Target& target, const CompileOptions& options, jit::Context& ctx);

  /// Runs the kernel over `grid`. Arguments follow the kernel's runtime parameters: pointers
  /// (T*, std::vector<T>&, std::span<T>, and for GPU targets cuda::Buffer<T>) and numbers; a
  /// mismatch throws Error naming it. A GPU kernel given host vectors or spans copies them to
  /// the device and back around the launch (a convenience for tests and first steps).
  template <class... A>
  void launch(Grid grid, A&&... args) const {
    launch_args(grid, {detail::to_arg(std::forward<A>(args))...});
  }
  /// A GPU kernel launched on `stream` (a runtime::Stream of the kernel's GPU runtime: CUDA's
  /// for NVIDIA targets, HIP's for AMD): returns at once where every pointer is device memory
  /// (host vectors are copied in, and out after the stream has finished), unless the kernel is
  /// profiled or, on AMD, has distributed ops.
  template <class... A>
  void launch_on(const runtime::Stream& stream, Grid grid, A&&... args) const {
    launch_args(grid, {detail::to_arg(std::forward<A>(args))...}, &stream);
  }
  /// What launch() and launch_on() call, with the arguments converted; `stream` null: as
  /// launch(). Throws Error as launch() does, and for a stream of another runtime or given to a
  /// host kernel.
  /// `reached`: buffers the kernel reaches through addresses it reads from memory (a table of
  /// arguments) rather than through its parameters; compiled with check_bounds, its accesses may
  /// touch them too (each needs its extent).
  void launch_args(Grid grid, const std::vector<LaunchArg>& args, const runtime::Stream* stream = nullptr,
                   const std::vector<ReachedBuffer>& reached = {}) const;

  /// The kernel's name (its KernelDef's).
  const std::string& name() const { return compiled("name").artifact.kernel; }
  /// The optimized tile IR this kernel was compiled from.
  const ir::Function& ir() const { return *compiled("ir").ir; }
  /// Host: scratch bytes per program; GPU: dynamic shared memory bytes per CTA (of the variant
  /// compiled without launch-time specialization).
  int64_t scratch_bytes() const { return compiled("scratch_bytes").artifact.scratch_bytes; }
  /// What it was compiled from (null for a Kernel made otherwise than by compile()).
  const std::shared_ptr<const KernelSource>& source() const { return source_; }

 private:
  friend Kernel compile(const KernelDef&, const Constants&, const Target&, const CompileOptions&, jit::Context&);
  struct Variants;
  /// The compiled kernel; an empty Kernel throws Error naming `what` was asked of it.
  const jit::Loaded& compiled(const char* what) const;
  const jit::Loaded& variant_for(const std::vector<LaunchArg>& args) const;
  std::shared_ptr<const jit::Loaded> loaded_;
  std::shared_ptr<Variants> variants_;
  std::shared_ptr<const KernelSource> source_;
};

/// Traces, optimizes and compiles `def` for `constants` and `target`, through the caches of
/// `ctx`. Throws Error for bad constants, errors in the kernel, or an unsupported target.
Kernel compile(const KernelDef& def, const Constants& constants = {}, const Target& target = Target::default_target(),
               const CompileOptions& options = CompileOptions::from_env(), jit::Context& ctx = jit::Context::global());

}  // namespace tiledist
