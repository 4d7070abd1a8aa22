/// @file
/// A kernel definition: a C++ function over tl:: parameters, its parameter names, and how to
/// trace it for given compile-time constants.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dsl/tl.h"

namespace tiledist {

/// The value of a compile-time constant: an integer or a float.
struct ConstValue {
  std::variant<int64_t, double> v;  ///< The integer (a bool is 0 or 1), or the float.
  /// From an integer or a bool (as 0 or 1), or from a float (kept as a double). Implicit, so
  /// that Constants read `{{"BLOCK", 128}, {"eps", 1e-5}}`.
  ///@{
  ConstValue(int x) : v(int64_t(x)) {}
  ConstValue(long x) : v(int64_t(x)) {}
  ConstValue(long long x) : v(int64_t(x)) {}
  ConstValue(bool x) : v(int64_t(x)) {}
  ConstValue(double x) : v(x) {}
  ConstValue(float x) : v(double(x)) {}
  ///@}
  /// The value as text that parse reads back: an integer in decimal, a float with 17 significant
  /// digits, always with a decimal point or an exponent ("1.0", not "1").
  std::string str() const;
  /// "128", "0x80", "1e-5" as given on a command line: an integer where strtoll reads all of
  /// it, else a float; text that is neither throws Error naming `tool` and `name`.
  static ConstValue parse(const std::string& tool, const std::string& name, const std::string& text);
  /// Equal kind and value: the integer 1 differs from the float 1.0.
  bool operator==(const ConstValue&) const = default;
};
/// Compile-time constants by parameter name.
using Constants = std::map<std::string, ConstValue>;
/// The constants as `name=value` joined by ',' in name order (ConstValue::str), for cache keys
/// and messages.
std::string constants_str(const Constants& c);

/// What a kernel parameter is: a pointer (tl::Ptr), a runtime scalar (tl::Int, tl::Int64,
/// tl::Float) or a compile-time constant (tl::Const).
enum class ParamKind { pointer, scalar, constant };

/// What a launch knows of a runtime argument, as Triton specializes kernels: an integer that is
/// a multiple of 16 or a 16-byte aligned pointer (aligned16), or the integer 1 (one: strides of
/// contiguous dimensions, which then fold away).
enum class ArgFact : uint8_t { none, aligned16, one };
/// The facts of a launch's runtime arguments, in order (KernelDef::runtime_params).
using ArgFacts = std::vector<ArgFact>;

/// A parameter of a kernel definition.
struct ParamInfo {
  std::string name;             ///< As given to KernelDef.
  ParamKind kind;               ///< Pointer, runtime scalar or constant.
  ir::Type type;                ///< Pointers and scalars: the IR type of the argument.
  bool const_is_float = false;  ///< Constants: whether a float (a tl::Const of float or double).
  /// Launches may select variants by this argument's value (ArgFact); cleared by
  /// KernelDef::do_not_specialize.
  bool specialize = true;
};

namespace dsl {
/// How a parameter type of a kernel function is traced.
template <class P>
struct ParamTraits;
template <class T>
struct ParamTraits<tl::Ptr<T>> {
  static ParamInfo info() { return {"", ParamKind::pointer, ir::Type::ptr(dtype_of<T>()), false}; }
  static tl::Ptr<T> make(ir::Value* v, const ConstValue*) { return tl::Ptr<T>(v); }
};
/// The ParamTraits of tl::Cls, a runtime scalar parameter of dtype DT (for tl::Int, tl::Int64
/// and tl::Float; undefined after them).
#define TILEDIST_SCALAR_PARAM(Cls, DT)                                                       \
  template <>                                                                                \
  struct ParamTraits<tl::Cls> {                                                              \
    static ParamInfo info() { return {"", ParamKind::scalar, ir::Type::scalar(DT), false}; } \
    static tl::Cls make(ir::Value* v, const ConstValue*) { return tl::Cls(v); }              \
  };
TILEDIST_SCALAR_PARAM(Int, ir::DType::i32)
TILEDIST_SCALAR_PARAM(Int64, ir::DType::i64)
TILEDIST_SCALAR_PARAM(Float, ir::DType::f32)
#undef TILEDIST_SCALAR_PARAM
template <class T>
struct ParamTraits<tl::Const<T>> {
  static ParamInfo info() {
    return {"", ParamKind::constant, ir::Type::scalar(ir::DType::i64), std::is_floating_point_v<T>};
  }
  static tl::Const<T> make(ir::Value*, const ConstValue* c) {
    return tl::Const<T>(std::visit([](auto x) { return static_cast<T>(x); }, c->v));
  }
};
template <class P>
struct ParamTraits<const P&> : ParamTraits<P> {};
template <class P>
struct ParamTraits<const P> : ParamTraits<P> {};
}  // namespace dsl

/// A traceable kernel: `KernelDef("add", add, {"x", "y", "out", "n", "BLOCK"})`.
class KernelDef {
 public:
  /// Defines kernel `name` (an identifier), traced by calling `fn`, whose parameters are
  /// tl::Ptr, tl::Int, tl::Int64, tl::Float and tl::Const (by value or const reference), named
  /// in order by `param_names`. `defaults`: values of constants that a trace may leave out.
  /// Throws Error where `name` is not an identifier, the names do not match the parameters, or
  /// a default names no constant parameter.
  template <class... P>
  KernelDef(std::string name, void (*fn)(P...), std::vector<std::string> param_names, Constants defaults = {})
      : name_(std::move(name)), defaults_(std::move(defaults)), id_(next_id()) {
    check_name(name_);
    params_ = {dsl::ParamTraits<P>::info()...};
    if (param_names.size() != params_.size())
      throw Error(str_cat("tiledist: kernel '", name_, "' has ", params_.size(), " parameters but ", param_names.size(),
                          " names were given"));
    for (size_t i = 0; i < params_.size(); ++i) params_[i].name = param_names[i];
    check_defaults();
    invoke_ = [fn](const std::vector<ir::Value*>& vals, const std::vector<const ConstValue*>& consts) {
      call(fn, vals, consts, std::index_sequence_for<P...>{});
    };
  }

  /// The body of a traced kernel: its parameters' values (runtime ones traced, constants null)
  /// and constants (runtime ones null), in the parameters' order.
  using Body = std::function<void(const std::vector<ir::Value*>&, const std::vector<const ConstValue*>&)>;
  /// A kernel built at run time (a persistent kernel of several tasks, mega/): `params` named
  /// and typed, `body` traced as a function pointer's would be. Throws Error as the other
  /// constructor does.
  KernelDef(std::string name, std::vector<ParamInfo> params, Body body, Constants defaults = {});

  /// Integers (and pointers) named here never select a launch-time variant, as Triton's
  /// do_not_specialize: counters and call numbers, whose values would otherwise compile a new
  /// variant now and then (at 1, at a multiple of 16). Returns the definition, for chaining.
  KernelDef& do_not_specialize(std::initializer_list<std::string> names);

  /// The kernel's name: that of the IR function and of the generated symbol.
  const std::string& name() const { return name_; }
  /// Identifies the traced function: copies share it, distinct definitions never do.
  uint64_t id() const { return id_; }
  /// All parameters, constants included, in the function's order.
  const std::vector<ParamInfo>& params() const { return params_; }
  /// The runtime parameters (pointers and scalars), in order: what `launch` takes.
  std::vector<ParamInfo> runtime_params() const;
  /// The facts of a launch whose integers are multiples of 16 and whose pointers are 16-byte
  /// aligned (the variant most launches pick; floats are never facts).
  ArgFacts aligned_facts() const;
  /// Default values of constants (used by tools and warmup when none are given).
  const Constants& defaults() const { return defaults_; }

  /// Traces the kernel for `constants` (defaults fill the gaps). Throws Error for a missing or
  /// unknown constant, or for any error the kernel's ops raise.
  /// `facts[i]`: what is known of runtime parameter i (a specialization, see ArgFact); the trace
  /// records a multiple of 16 as a `multiple_of` hint and the integer 1 as a constant.
  /// `profile`: the profiler's marks trace their ops (dsl/profile.h), and the whole kernel is a
  /// region named after it.
  std::unique_ptr<ir::Function> trace(const Constants& constants, const ArgFacts& facts = {},
                                      bool profile = false) const;
  /// Traces the kernel's body into the trace in progress, at its insertion point: `args` are
  /// the values of its runtime parameters (in runtime_params' order, of their types), and
  /// `constants` as for trace. Its tl::program_id and tl::num_programs are the trace's (set
  /// them with dsl::ProgramScope). Throws Error as trace does, and for arguments that do not
  /// fit the parameters. `facts`: what is known of the arguments, as for trace.
  void inline_body(const std::vector<ir::Value*>& args, const Constants& constants, const ArgFacts& facts = {}) const;

 private:
  /// `vals` (every parameter's value, constants' null) as `facts` make them: hinted, or 1.
  void with_facts(ir::Builder& b, std::vector<ir::Value*>& vals, const ArgFacts& facts) const;
  template <class... P, size_t... I>
  static void call(void (*fn)(P...), const std::vector<ir::Value*>& vals, const std::vector<const ConstValue*>& consts,
                   std::index_sequence<I...>) {
    fn(dsl::ParamTraits<std::decay_t<P>>::make(vals[I], consts[I])...);
  }

  static uint64_t next_id();
  /// Each parameter's constant (null for runtime ones), from `constants` and the defaults;
  /// throws Error for an unknown constant or a missing one.
  std::vector<const ConstValue*> resolve(const Constants& constants) const;
  /// Kernel names are identifiers: they name the IR function and the generated symbol.
  static void check_name(const std::string& name);
  void check_defaults() const;

  std::string name_;
  std::vector<ParamInfo> params_;
  Constants defaults_;
  uint64_t id_;
  Body invoke_;
};

/// The kernels known to tools (tiledist-compile, warmup), by name.
class Registry {
 public:
  /// The process's registry, which TILEDIST_REGISTER fills.
  static Registry& global();
  /// Adds a copy of `def`; throws Error where a kernel of its name is registered already.
  void add(const KernelDef& def);
  /// The kernel named `name`, or null.
  const KernelDef* find(const std::string& name) const;
  /// The registered kernels' names, sorted.
  std::vector<std::string> names() const;

 private:
  std::map<std::string, KernelDef> kernels_;
};

/// Token pasting after expansion, for TILEDIST_REGISTER's variable names (one per line).
///@{
#define TILEDIST_REGISTER_CAT2(a, b) a##b
#define TILEDIST_REGISTER_CAT(a, b) TILEDIST_REGISTER_CAT2(a, b)
///@}
/// Registers a kernel with Registry::global at static-initialization time:
/// `TILEDIST_REGISTER(add_def);` at namespace scope, at most once per line of a file. A name
/// registered twice throws Error (during static initialization: the program terminates).
#define TILEDIST_REGISTER(def) \
  static const bool TILEDIST_REGISTER_CAT(td_registered_, __LINE__) = (::tiledist::Registry::global().add(def), true)

}  // namespace tiledist
