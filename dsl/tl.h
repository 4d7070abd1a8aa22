/// @file
/// The tiledist eDSL: Triton's `triton.language` in C++. A kernel is an ordinary C++ function
/// over tl:: values; calling it with symbolic arguments (tiledist::compile does) traces it into
/// tile IR. Every op records the user's source line for error messages.
#pragma once

#include <array>
#include <functional>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/dtypes.h"
#include "ir/builder.h"

namespace tiledist {
/// The ops and types that kernels are written with (Triton's `tl`). They are called while a
/// kernel is traced: each records IR ops at the caller's source location, and throws Error there
/// when its operands do not fit (types, shapes, axes) or when it is called outside of a trace.
namespace tl {

using ir::DType;
/// The caller's source location, taken by default by every op: errors name the user's line.
using SrcLoc = std::source_location;

/// Triton's dtype names: tl::float16 for DType::f16, and so on.
///@{
inline constexpr DType int1 = DType::i1, int8 = DType::i8, int16 = DType::i16, int32 = DType::i32, int64 = DType::i64,
                       float16 = DType::f16, bfloat16 = DType::bf16, float32 = DType::f32, float64 = DType::f64,
                       float8e4m3 = DType::f8e4m3, float8e5m2 = DType::f8e5m2;
///@}

/// A traced value: a scalar or a block tensor, of numbers or pointers.
class Tensor {
 public:
  /// An empty tensor: not valid(), and an error as an op's operand.
  Tensor() = default;
  /// Wraps a value of the trace in progress.
  explicit Tensor(ir::Value* v) : v_(v) {}

  /// The IR value (null for an empty tensor).
  ir::Value* value() const { return v_; }
  /// Whether it holds a value (a default-constructed Tensor does not).
  bool valid() const { return v_ != nullptr; }
  /// The IR type: dtype, shape and whether it is a pointer. An empty tensor throws Error.
  const ir::Type& type() const {
    if (!v_) empty();
    return v_->type;
  }
  /// The element dtype; for pointers, the pointee's. An empty tensor throws Error.
  DType dtype() const { return type().dtype; }
  /// The block shape, empty for a scalar. An empty tensor throws Error.
  const std::vector<int64_t>& shape() const { return type().shape; }
  /// Whether its elements are pointers. An empty tensor throws Error.
  bool is_ptr() const { return type().is_ptr; }
  /// Converts to another dtype (Triton's `x.to(tl.float16)`); the same dtype returns it
  /// unchanged, and a pointer throws Error.
  Tensor to(DType t, SrcLoc loc = SrcLoc::current()) const;

 private:
  [[noreturn]] static void empty();
  ir::Value* v_ = nullptr;
};

/// A compile-time constant parameter: its value specializes the kernel.
template <class T>
class Const {
 public:
  /// Holds `v` (tracing makes Consts from the constants the kernel is compiled for).
  explicit Const(T v) : v_(v) {}
  /// The value, an ordinary C++ `T` at trace time.
  ///@{
  operator T() const { return v_; }
  T value() const { return v_; }
  ///@}

 private:
  T v_;
};

/// A kernel parameter: a scalar pointer to elements of the host type T (float, bf16, int32_t...:
/// see dtype_of); the host passes an address.
template <class T>
class Ptr : public Tensor {
 public:
  using element_type = T;  ///< The host element type pointed to.
  /// Wraps a traced value of this type (tracing makes the kernel's arguments).
  explicit Ptr(ir::Value* v) : Tensor(v) {}
};
/// A kernel parameter: a runtime i32 scalar.
class Int : public Tensor {
 public:
  /// Wraps a traced value of this type (tracing makes the kernel's arguments).
  explicit Int(ir::Value* v) : Tensor(v) {}
};
/// A kernel parameter: a runtime i64 scalar.
class Int64 : public Tensor {
 public:
  /// Wraps a traced value of this type (tracing makes the kernel's arguments).
  explicit Int64(ir::Value* v) : Tensor(v) {}
};
/// A kernel parameter: a runtime f32 scalar.
class Float : public Tensor {
 public:
  /// Wraps a traced value of this type (tracing makes the kernel's arguments).
  explicit Float(ir::Value* v) : Tensor(v) {}
};

/// An operand of an op: a traced value, or a C++ number that takes the other operand's
/// type (Triton's "weak" literals). It carries the user's source location.
struct Operand {
  Tensor tensor;                  ///< The traced value, where not a literal.
  bool is_literal = false;        ///< Whether it is a C++ number rather than a traced value.
  bool literal_is_float = false;  ///< A literal's kind: float_value if set, else int_value.
  int64_t int_value = 0;          ///< An integer (or bool) literal's value.
  double float_value = 0;         ///< A floating-point literal's value.
  SrcLoc loc;                     ///< Where the user's code made it: ops report errors there.

  /// A traced value, or a C++ number (a bool is the integer 0 or 1; a Const gives its value).
  /// Implicit, so that ops take both; `l` defaults to the caller's location.
  ///@{
  Operand(const Tensor& t, SrcLoc l = SrcLoc::current()) : tensor(t), loc(l) {}
  Operand(int v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(long v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(long long v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(bool v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(float v, SrcLoc l = SrcLoc::current()) : is_literal(true), literal_is_float(true), float_value(v), loc(l) {}
  Operand(double v, SrcLoc l = SrcLoc::current()) : is_literal(true), literal_is_float(true), float_value(v), loc(l) {}
  template <class T>
  Operand(const Const<T>& c, SrcLoc l = SrcLoc::current()) : Operand(c.value(), l) {}
  ///@}
};

// ---- arithmetic, comparison and logic (broadcasting, with Triton's type promotion)
/// Elementwise arithmetic, the operands broadcast to one shape and promoted to one dtype as in
/// Triton: a C++ number takes the other operand's type (widened where it does not fit), and at
/// least one operand must be traced; booleans compute as i32. `ptr + int`, `int + ptr` and
/// `ptr - int` offset pointers by whole elements. Integers are signed: `/` and `%` truncate
/// toward zero, as in C.
///@{
Tensor operator+(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a, const Operand& b);
Tensor operator*(const Operand& a, const Operand& b);
Tensor operator/(const Operand& a, const Operand& b);  // C semantics on integers
Tensor operator%(const Operand& a, const Operand& b);
///@}
/// Elementwise bitwise and, or and xor of integers, or logical ones of booleans (masks), which
/// stay i1. Operands broadcast and promote as for arithmetic.
///@{
Tensor operator&(const Operand& a, const Operand& b);
Tensor operator|(const Operand& a, const Operand& b);
Tensor operator^(const Operand& a, const Operand& b);
///@}
/// Elementwise shifts of integers; `>>` is arithmetic (it copies the sign bit).
///@{
Tensor operator<<(const Operand& a, const Operand& b);
Tensor operator>>(const Operand& a, const Operand& b);
///@}
/// Elementwise comparisons, giving booleans (i1) of the broadcast shape. Operands promote as for
/// arithmetic; integers compare signed, pointers (of one element type) as addresses.
///@{
Tensor operator<(const Operand& a, const Operand& b);
Tensor operator<=(const Operand& a, const Operand& b);
Tensor operator>(const Operand& a, const Operand& b);
Tensor operator>=(const Operand& a, const Operand& b);
Tensor operator==(const Operand& a, const Operand& b);
Tensor operator!=(const Operand& a, const Operand& b);
///@}
/// Negation of a traced number.
Tensor operator-(const Operand& a);
/// Bitwise not of a traced integer (or boolean).
Tensor operator~(const Operand& a);
/// Logical not of a traced boolean (i1).
Tensor operator!(const Operand& a);
/// Elementwise minimum and maximum, promoting as arithmetic does; on floats a NaN gives the
/// other operand.
///@{
Tensor minimum(const Operand& a, const Operand& b);
Tensor maximum(const Operand& a, const Operand& b);
///@}

// ---- program and index
/// This program's index along `axis` (0, 1 or 2) of the launch grid: an i32 scalar.
Tensor program_id(int axis, SrcLoc loc = SrcLoc::current());
/// The number of programs along `axis` (0, 1 or 2) of the launch grid: an i32 scalar.
Tensor num_programs(int axis, SrcLoc loc = SrcLoc::current());
/// The i32 block [start, start + 1, ..., end - 1]; its length must be a positive power of 2.
Tensor arange(int64_t start, int64_t end, SrcLoc loc = SrcLoc::current());
/// A block of `shape` filled with zeros of `dtype` (an empty shape gives a scalar).
Tensor zeros(std::vector<int64_t> shape, DType dtype, SrcLoc loc = SrcLoc::current());
/// A block of `shape` filled with `value` (a number, or a traced scalar) as `dtype`; dimensions
/// must be positive, and an empty shape gives a scalar.
Tensor full(std::vector<int64_t> shape, const Operand& value, DType dtype, SrcLoc loc = SrcLoc::current());
/// A scalar of `dtype` (for loop bounds and carried scalars): a number becomes a constant (it
/// must fit; a float never becomes an integer), a traced scalar is converted.
Tensor scalar(const Operand& value, DType dtype, SrcLoc loc = SrcLoc::current());

// ---- shapes
/// Inserts a dimension of size 1 at `axis` (negative: counted from the end, as in Python); a
/// scalar becomes a block of shape [1].
Tensor expand_dims(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
/// x's elements, in row-major order, as a block of `shape`, which must hold as many.
Tensor reshape(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc = SrcLoc::current());
/// Swaps the two dims of a 2-D tensor.
Tensor trans(const Tensor& x, SrcLoc loc = SrcLoc::current());
/// Reorders a tensor's dimensions: dimension i of the result is dimension perm[i] of x.
Tensor permute(const Tensor& x, std::vector<int64_t> perm, SrcLoc loc = SrcLoc::current());
/// x broadcast to `shape` as in NumPy (leading dimensions added, those of size 1 repeated); a
/// scalar fills the block.
Tensor broadcast_to(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc = SrcLoc::current());

// ---- conversion and selection
/// x's numbers converted to dtype `t` (Tensor::to); a pointer throws Error.
Tensor cast(const Tensor& x, DType t, SrcLoc loc = SrcLoc::current());
/// x's bits reinterpreted as dtype `t`, which must have the same bit width (not for pointers).
Tensor bitcast(const Tensor& x, DType t, SrcLoc loc = SrcLoc::current());
/// Elementwise `cond ? a : b`, with a traced boolean (i1) `cond`; all three broadcast to one
/// shape and `a`, `b` promote as for arithmetic (two numbers: i32, or f32 if either is a float).
Tensor where(const Operand& cond, const Operand& a, const Operand& b);

// ---- memory
/// The elements that `ptr` (a pointer, or a block of them) points to, of its shape. Where the
/// boolean `mask` (broadcast to ptr's shape) is false nothing is read: the element is `other`
/// (converted to the pointee dtype), or zero without it.
///@{
Tensor load(const Tensor& ptr, SrcLoc loc = SrcLoc::current());
Tensor load(const Tensor& ptr, const Tensor& mask, SrcLoc loc = SrcLoc::current());
Tensor load(const Tensor& ptr, const Tensor& mask, const Operand& other, SrcLoc loc = SrcLoc::current());
///@}
/// Stores `value`, converted to the pointee dtype and broadcast to ptr's shape, where `ptr`
/// points; with a boolean `mask` (broadcast likewise), only where it is true.
///@{
void store(const Tensor& ptr, const Operand& value, SrcLoc loc = SrcLoc::current());
void store(const Tensor& ptr, const Operand& value, const Tensor& mask, SrcLoc loc = SrcLoc::current());
///@}
/// Asks that the memory holding what `ptr` points to (where the boolean `mask`, broadcast to
/// ptr's shape, is true) be brought into the GPU's L2 cache for loads to come: a hint, which
/// reads nothing into the program and waits for nothing (nothing on the host).
///@{
void prefetch(const Tensor& ptr, SrcLoc loc = SrcLoc::current());
void prefetch(const Tensor& ptr, const Tensor& mask, SrcLoc loc = SrcLoc::current());
///@}

/// Memory order and scope of atomics, spelled as Triton spells them.
struct AtomicOpts {
  std::string sem = "acq_rel";  ///< Memory order: "relaxed", "acquire", "release" or "acq_rel".
  std::string scope = "gpu";    ///< Who it orders with: "cta", "gpu" or "sys" (other GPUs, host).
};
/// Atomic read-modify-writes of each element `ptr` points to (where the boolean `mask`, broadcast
/// to ptr's shape, is true): add, maximum, minimum or exchange with `val`, converted to the
/// pointee dtype (i32, i64, f32 or f64). Returns the old values.
///@{
Tensor atomic_add(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_max(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_min(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_xchg(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                   SrcLoc loc = SrcLoc::current());
///@}
/// Atomic compare-and-swap of each element `ptr` points to (i32 or i64): where it equals `cmp`
/// it becomes `val`. Returns the old values.
Tensor atomic_cas(const Tensor& ptr, const Operand& cmp, const Operand& val, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());

// ---- reductions and contraction
/// The sum, maximum or minimum of a tensor along `axis` (negative: counted from the end), which
/// the result drops; booleans reduce as i32.
///@{
Tensor sum(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor max(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor min(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
///@}
/// The i32 index along `axis` of a tensor's largest or smallest element, as max and min reduce.
///@{
Tensor argmax(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor argmin(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
///@}
/// a[M,K] @ b[K,N] + acc[M,N] in f32 (acc defaults to zeros). `a` and `b` share a float dtype
/// (f32, f16, bf16 or f8).
Tensor dot(const Tensor& a, const Tensor& b, std::optional<Tensor> acc = {}, SrcLoc loc = SrcLoc::current());

// ---- math
/// Elementwise math of floats: e^x, 2^x, ln, log2, square root, 1/sqrt, abs, erf, sine, cosine,
/// floor, ceiling. Integers throw Error (convert with `.to(tl::float32)`), except that abs takes
/// any number.
///@{
Tensor exp(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor exp2(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor log(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor log2(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor sqrt(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor rsqrt(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor abs(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor erf(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor sin(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor cos(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor floor(const Tensor& x, SrcLoc loc = SrcLoc::current());
Tensor ceil(const Tensor& x, SrcLoc loc = SrcLoc::current());
///@}

/// Ceiling division, for compile-time integers and traced values alike.
///@{
constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
Tensor cdiv(const Operand& a, const Operand& b);
///@}

// ---- compiler hints (Triton's multiple_of / max_contiguous)
/// x, with the promise that its elements are multiples of `n` (of bytes, for pointers), which
/// lets accesses it indexes vectorize; the compiler takes from it the largest power of 2 that
/// divides `n` (24: 8). A false promise is undefined behavior.
Tensor multiple_of(const Tensor& x, int64_t n, SrcLoc loc = SrcLoc::current());
/// x, with the promise that along its last dimension its elements come in runs of `n`
/// consecutive values, each run starting at a multiple of `n` in the dimension (taken as
/// multiple_of takes `n`: 12 promises runs of 4).
Tensor max_contiguous(const Tensor& x, int64_t n, SrcLoc loc = SrcLoc::current());

// ---- control flow: loops and branches take lambdas; loop-carried values are explicit.
/// The values a loop carries or a branch yields.
using Values = std::vector<Tensor>;
/// for (iv = lo; iv < hi; iv += step) carried = body(iv, carried); returns the final values.
/// The bounds and step are integer scalars (iv is i32, or i64 where a traced one is); a literal
/// step must be positive. `body` runs once, at trace time, and returns values of the types it
/// is given (numbers of another dtype but the same shape are converted).
Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, SrcLoc loc = SrcLoc::current());
/// for_range with one carried value.
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, SrcLoc loc = SrcLoc::current());
/// for_range with no carried value (the body stores its results).
void for_range(const Operand& lo, const Operand& hi, const Operand& step, const std::function<void(Tensor)>& body,
               SrcLoc loc = SrcLoc::current());
/// What a kernel asks of the compiler for one loop (as Triton's tl.range(..., warp_specialize=)).
struct LoopHints {
  /// On sm_90a, where the loop is a TMA wgmma pipeline: a producer warpgroup issues its copies
  /// (CompileOptions::warp_specialize, for this loop whatever the options say).
  bool warp_specialize = false;
  /// Above 1: the loop's loads whose addresses are known ahead (from the induction variable and
  /// values from outside the loop) are issued num_stages - 1 iterations ahead through a ring of
  /// shared memory on GPUs with asynchronous copies (as Triton's tl.range(..., num_stages=)),
  /// whatever they feed, and even where the loop stores: the kernel says that no load of the
  /// loop reads what an earlier iteration of it stored (a streaming loop: read a row, write
  /// elsewhere). 0: the compile's own choice (loads feeding dots, in loops that do not store);
  /// 1: this loop is not pipelined.
  int num_stages = 0;
};
/// for_range (with carried values, one, or none) with `hints` for this loop; a num_stages
/// outside 0 to 16 throws Error.
///@{
Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, LoopHints hints, SrcLoc loc = SrcLoc::current());
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, LoopHints hints, SrcLoc loc = SrcLoc::current());
void for_range(const Operand& lo, const Operand& hi, const Operand& step, const std::function<void(Tensor)>& body,
               LoopHints hints, SrcLoc loc = SrcLoc::current());
///@}
/// cond ? then_fn() : else_fn(), both returning values of the same types. `cond` is a scalar
/// boolean (i1; tl::where selects elementwise); both functions run once, at trace time.
///@{
Values if_then_else(const Tensor& cond, const std::function<Values()>& then_fn, const std::function<Values()>& else_fn,
                    SrcLoc loc = SrcLoc::current());
Tensor if_then_else(const Tensor& cond, const std::function<Tensor()>& then_fn, const std::function<Tensor()>& else_fn,
                    SrcLoc loc = SrcLoc::current());
///@}
/// if (cond) then_fn(): for side effects only.
void if_then(const Tensor& cond, const std::function<void()>& then_fn, SrcLoc loc = SrcLoc::current());
/// while (cond(carried)) carried = body(carried); returns the final values. `cond` returns a
/// scalar boolean (i1); `body` returns values of the types it is given.
Values while_(Values init, const std::function<Tensor(Values)>& cond, const std::function<Values(Values)>& body,
              SrcLoc loc = SrcLoc::current());

}  // namespace tl

namespace dsl {
/// The tracing state of the kernel being traced on this thread.
class Trace {
 public:
  /// `profile`: the profiler's marks (tl::profile) trace their ops; without, they trace nothing.
  explicit Trace(ir::Function* f, bool profile = false);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// The trace in progress; throws Error when a tl:: op is used outside of tracing.
  static Trace& current(const char* op);
  ir::Builder& builder() { return builder_; }
  ir::Function& function() { return *fn_; }
  bool profiling() const { return profile_; }
  /// What tl::program_id(axis) and tl::num_programs(axis) give inside a ProgramScope (null:
  /// the kernel's own).
  ir::Value* program_id_override(int axis) const { return program_ids_[size_t(axis)]; }
  ir::Value* num_programs_override(int axis) const { return num_programs_[size_t(axis)]; }

 private:
  friend class ProgramScope;
  ir::Function* fn_;
  bool profile_;
  ir::Builder builder_;
  Trace* outer_;
  std::array<ir::Value*, 3> program_ids_{}, num_programs_{};
};

/// Within its lifetime, tl::program_id and tl::num_programs of the trace in progress give the
/// values given here (i32 scalars traced before it) instead of the kernel's own: how a kernel's
/// body traced into another kernel (KernelDef::inline_body) runs as one program of its own grid
/// (a persistent kernel's task, mega/). Scopes nest; each restores what was before it.
class ProgramScope {
 public:
  ProgramScope(const std::array<ir::Value*, 3>& program_ids, const std::array<ir::Value*, 3>& num_programs);
  ~ProgramScope();
  ProgramScope(const ProgramScope&) = delete;
  ProgramScope& operator=(const ProgramScope&) = delete;

 private:
  Trace& trace_;
  std::array<ir::Value*, 3> saved_ids_, saved_nums_;
};
}  // namespace dsl

}  // namespace tiledist
