// The tiledist eDSL: Triton's `triton.language` in C++. A kernel is an ordinary C++ function
// over tl:: values; calling it with symbolic arguments (tiledist::compile does) traces it into
// tile IR. Every op records the user's source line for error messages.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "dsl/dtypes.h"
#include "ir/builder.h"

namespace tiledist {
namespace tl {

using ir::DType;
using SrcLoc = std::source_location;

// Triton's dtype names.
inline constexpr DType int1 = DType::i1, int8 = DType::i8, int16 = DType::i16, int32 = DType::i32, int64 = DType::i64,
                       float16 = DType::f16, bfloat16 = DType::bf16, float32 = DType::f32, float64 = DType::f64,
                       float8e4m3 = DType::f8e4m3, float8e5m2 = DType::f8e5m2;

/// A traced value: a scalar or a block tensor, of numbers or pointers.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(ir::Value* v) : v_(v) {}

  ir::Value* value() const { return v_; }
  bool valid() const { return v_ != nullptr; }
  const ir::Type& type() const { return v_->type; }
  DType dtype() const { return v_->type.dtype; }
  const std::vector<int64_t>& shape() const { return v_->type.shape; }
  bool is_ptr() const { return v_->type.is_ptr; }
  /// Converts to another dtype (Triton's `x.to(tl.float16)`).
  Tensor to(DType t, SrcLoc loc = SrcLoc::current()) const;

 private:
  ir::Value* v_ = nullptr;
};

/// A compile-time constant parameter: its value specializes the kernel.
template <class T>
class Const {
 public:
  explicit Const(T v) : v_(v) {}
  operator T() const { return v_; }
  T value() const { return v_; }

 private:
  T v_;
};

/// Kernel parameter types: a pointer to elements of T, and runtime scalars.
template <class T>
class Ptr : public Tensor {
 public:
  using element_type = T;
  explicit Ptr(ir::Value* v) : Tensor(v) {}
};
class Int : public Tensor {
 public:
  explicit Int(ir::Value* v) : Tensor(v) {}
};
class Int64 : public Tensor {
 public:
  explicit Int64(ir::Value* v) : Tensor(v) {}
};
class Float : public Tensor {
 public:
  explicit Float(ir::Value* v) : Tensor(v) {}
};

/// An operand of an op: a traced value, or a C++ number that takes the other operand's
/// type (Triton's "weak" literals). It carries the user's source location.
struct Operand {
  Tensor tensor;
  bool is_literal = false;
  bool literal_is_float = false;
  int64_t int_value = 0;
  double float_value = 0;
  SrcLoc loc;

  Operand(const Tensor& t, SrcLoc l = SrcLoc::current()) : tensor(t), loc(l) {}
  Operand(int v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(long v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(long long v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(bool v, SrcLoc l = SrcLoc::current()) : is_literal(true), int_value(v), loc(l) {}
  Operand(float v, SrcLoc l = SrcLoc::current()) : is_literal(true), literal_is_float(true), float_value(v), loc(l) {}
  Operand(double v, SrcLoc l = SrcLoc::current()) : is_literal(true), literal_is_float(true), float_value(v), loc(l) {}
  template <class T>
  Operand(const Const<T>& c, SrcLoc l = SrcLoc::current()) : Operand(c.value(), l) {}
};

// ---- arithmetic, comparison and logic (broadcasting, with Triton's type promotion)
Tensor operator+(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a, const Operand& b);
Tensor operator*(const Operand& a, const Operand& b);
Tensor operator/(const Operand& a, const Operand& b);  // C semantics on integers
Tensor operator%(const Operand& a, const Operand& b);
Tensor operator&(const Operand& a, const Operand& b);
Tensor operator|(const Operand& a, const Operand& b);
Tensor operator^(const Operand& a, const Operand& b);
Tensor operator<<(const Operand& a, const Operand& b);
Tensor operator>>(const Operand& a, const Operand& b);
Tensor operator<(const Operand& a, const Operand& b);
Tensor operator<=(const Operand& a, const Operand& b);
Tensor operator>(const Operand& a, const Operand& b);
Tensor operator>=(const Operand& a, const Operand& b);
Tensor operator==(const Operand& a, const Operand& b);
Tensor operator!=(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a);
Tensor operator~(const Operand& a);
Tensor operator!(const Operand& a);
Tensor minimum(const Operand& a, const Operand& b);
Tensor maximum(const Operand& a, const Operand& b);

// ---- program and index
Tensor program_id(int axis, SrcLoc loc = SrcLoc::current());
Tensor num_programs(int axis, SrcLoc loc = SrcLoc::current());
Tensor arange(int64_t start, int64_t end, SrcLoc loc = SrcLoc::current());
Tensor zeros(std::vector<int64_t> shape, DType dtype, SrcLoc loc = SrcLoc::current());
Tensor full(std::vector<int64_t> shape, const Operand& value, DType dtype, SrcLoc loc = SrcLoc::current());
/// A scalar of `dtype` (for loop bounds and carried scalars).
Tensor scalar(const Operand& value, DType dtype, SrcLoc loc = SrcLoc::current());

// ---- shapes
Tensor expand_dims(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor reshape(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc = SrcLoc::current());
Tensor trans(const Tensor& x, SrcLoc loc = SrcLoc::current());  // swaps the two dims of a 2-D tensor
Tensor permute(const Tensor& x, std::vector<int64_t> perm, SrcLoc loc = SrcLoc::current());
Tensor broadcast_to(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc = SrcLoc::current());

// ---- conversion and selection
Tensor cast(const Tensor& x, DType t, SrcLoc loc = SrcLoc::current());
Tensor bitcast(const Tensor& x, DType t, SrcLoc loc = SrcLoc::current());
Tensor where(const Operand& cond, const Operand& a, const Operand& b);

// ---- memory
Tensor load(const Tensor& ptr, SrcLoc loc = SrcLoc::current());
Tensor load(const Tensor& ptr, const Tensor& mask, SrcLoc loc = SrcLoc::current());
Tensor load(const Tensor& ptr, const Tensor& mask, const Operand& other, SrcLoc loc = SrcLoc::current());
void store(const Tensor& ptr, const Operand& value, SrcLoc loc = SrcLoc::current());
void store(const Tensor& ptr, const Operand& value, const Tensor& mask, SrcLoc loc = SrcLoc::current());

/// Memory order and scope of atomics, spelled as Triton spells them.
struct AtomicOpts {
  std::string sem = "acq_rel";
  std::string scope = "gpu";
};
Tensor atomic_add(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_max(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_min(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());
Tensor atomic_xchg(const Tensor& ptr, const Operand& val, std::optional<Tensor> mask = {}, AtomicOpts o = {},
                   SrcLoc loc = SrcLoc::current());
Tensor atomic_cas(const Tensor& ptr, const Operand& cmp, const Operand& val, AtomicOpts o = {},
                  SrcLoc loc = SrcLoc::current());

// ---- reductions and contraction
Tensor sum(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor max(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor min(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor argmax(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
Tensor argmin(const Tensor& x, int axis, SrcLoc loc = SrcLoc::current());
/// a[M,K] @ b[K,N] + acc[M,N] in f32 (acc defaults to zeros).
Tensor dot(const Tensor& a, const Tensor& b, std::optional<Tensor> acc = {}, SrcLoc loc = SrcLoc::current());

// ---- math
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

/// Ceiling division, for compile-time integers and traced values alike.
constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
Tensor cdiv(const Operand& a, const Operand& b);

// ---- compiler hints (Triton's multiple_of / max_contiguous)
Tensor multiple_of(const Tensor& x, int64_t n, SrcLoc loc = SrcLoc::current());
Tensor max_contiguous(const Tensor& x, int64_t n, SrcLoc loc = SrcLoc::current());

// ---- control flow: loops and branches take lambdas; loop-carried values are explicit.
using Values = std::vector<Tensor>;
/// for (iv = lo; iv < hi; iv += step) carried = body(iv, carried); returns the final values.
Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, SrcLoc loc = SrcLoc::current());
/// One carried value.
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, SrcLoc loc = SrcLoc::current());
/// No carried value (the body stores its results).
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
Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, LoopHints hints, SrcLoc loc = SrcLoc::current());
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, LoopHints hints, SrcLoc loc = SrcLoc::current());
void for_range(const Operand& lo, const Operand& hi, const Operand& step, const std::function<void(Tensor)>& body,
               LoopHints hints, SrcLoc loc = SrcLoc::current());
/// cond ? then_fn() : else_fn(), both returning values of the same types.
Values if_then_else(const Tensor& cond, const std::function<Values()>& then_fn, const std::function<Values()>& else_fn,
                    SrcLoc loc = SrcLoc::current());
Tensor if_then_else(const Tensor& cond, const std::function<Tensor()>& then_fn, const std::function<Tensor()>& else_fn,
                    SrcLoc loc = SrcLoc::current());
/// if (cond) then_fn(): for side effects only.
void if_then(const Tensor& cond, const std::function<void()>& then_fn, SrcLoc loc = SrcLoc::current());
/// while (cond(carried)) carried = body(carried); returns the final values.
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

 private:
  ir::Function* fn_;
  bool profile_;
  ir::Builder builder_;
  Trace* outer_;
};
}  // namespace dsl

}  // namespace tiledist
