// Tracing of tl:: ops into tile IR: type promotion, broadcasting and literal handling happen
// here; the builder then checks each op (ir/verifier.cpp).
#include "dsl/tl.h"

namespace tiledist {

namespace dsl {
namespace {
thread_local Trace* g_current = nullptr;
}
Trace::Trace(ir::Function* f, bool profile) : fn_(f), profile_(profile), builder_(&f->body), outer_(g_current) {
  g_current = this;
}
Trace::~Trace() { g_current = outer_; }
ProgramScope::ProgramScope(const std::array<ir::Value*, 3>& program_ids, const std::array<ir::Value*, 3>& num_programs)
    : trace_(Trace::current("program scope")), saved_ids_(trace_.program_ids_), saved_nums_(trace_.num_programs_) {
  trace_.program_ids_ = program_ids;
  trace_.num_programs_ = num_programs;
}
ProgramScope::~ProgramScope() {
  trace_.program_ids_ = saved_ids_;
  trace_.num_programs_ = saved_nums_;
}
Trace& Trace::current(const char* op) {
  if (!g_current)
    throw Error(str_cat("tiledist: tl::", op,
                        " used outside of a kernel being traced (call it from a kernel "
                        "function passed to tiledist::compile)"));
  return *g_current;
}
}  // namespace dsl

namespace tl {

namespace {

using ir::OpCode;
using ir::Type;

ir::Builder& builder(const char* op, const SrcLoc& loc) {
  auto& b = dsl::Trace::current(op).builder();
  b.set_loc(Location::from(loc));
  return b;
}

[[noreturn]] void fail(const char* op, const SrcLoc& loc, const std::string& msg) {
  throw Error::at(op, Location::from(loc), msg);
}

int float_rank(DType t) {
  switch (t) {
    case DType::f8e4m3:
    case DType::f8e5m2:
      return 0;
    case DType::f16:
    case DType::bf16:
      return 1;
    case DType::f32:
      return 2;
    default:
      return 3;
  }
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  bool fa = ir::is_float(a), fb = ir::is_float(b);
  if (fa != fb) return fa ? a : b;
  if (!fa) {
    if (a == DType::i1) return b;
    if (b == DType::i1) return a;
    return ir::dtype_bits(a) >= ir::dtype_bits(b) ? a : b;
  }
  int ra = float_rank(a), rb = float_rank(b);
  if (ra != rb) return ra > rb ? a : b;
  return ra == 0 ? DType::f16 : DType::f32;  // f16 with bf16, or e4m3 with e5m2: no exact common type
}

bool fits(int64_t v, DType t) {
  switch (t) {
    case DType::i1:
      return v == 0 || v == 1;
    case DType::i8:
      return v >= INT8_MIN && v <= INT8_MAX;
    case DType::i16:
      return v >= INT16_MIN && v <= INT16_MAX;
    case DType::i32:
      return v >= INT32_MIN && v <= INT32_MAX;
    default:
      return true;
  }
}

Tensor constant(const char* op, const SrcLoc& loc, const Operand& lit, DType t) {
  auto& b = builder(op, loc);
  if (ir::is_float(t))
    return Tensor(b.constant_float(t, lit.literal_is_float ? lit.float_value : double(lit.int_value)));
  if (lit.literal_is_float) fail(op, loc, str_cat("a floating-point literal cannot become ", ir::dtype_name(t)));
  int64_t v = t == DType::i1 ? (lit.int_value != 0) : lit.int_value;
  if (!fits(v, t)) fail(op, loc, str_cat("the literal ", lit.int_value, " does not fit in ", ir::dtype_name(t)));
  return Tensor(b.constant_int(t, v));
}

Tensor convert(const char* op, const SrcLoc& loc, const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  if (x.is_ptr()) fail(op, loc, str_cat("cannot convert pointer ", x.type().str(), " to ", ir::dtype_name(t)));
  return Tensor(builder(op, loc).cast(x.value(), t));
}

Tensor splat_to(const char* op, const SrcLoc& loc, const Tensor& x, const std::vector<int64_t>& shape) {
  if (x.shape() == shape) return x;
  auto& b = builder(op, loc);
  if (!x.type().is_tensor()) return Tensor(b.splat(x.value(), shape));
  auto s = x.shape();
  if (s.size() > shape.size())
    fail(op, loc, str_cat("cannot broadcast shape ", ir::shape_str(s), " to ", ir::shape_str(shape)));
  Tensor y = x;
  if (s.size() < shape.size()) {
    s.insert(s.begin(), shape.size() - s.size(), 1);
    y = Tensor(b.reshape(y.value(), s));
  }
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != shape[i] && s[i] != 1)
      fail(op, loc, str_cat("cannot broadcast shape ", ir::shape_str(x.shape()), " to ", ir::shape_str(shape)));
  return s == shape ? y : Tensor(b.broadcast(y.value(), shape));
}

std::vector<int64_t> broadcast_shape(const char* op, const SrcLoc& loc, const std::vector<int64_t>& a,
                                     const std::vector<int64_t>& b) {
  if (a.empty()) return b;
  if (b.empty() || a == b) return a;
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, loc, str_cat("incompatible shapes ", ir::shape_str(a), " and ", ir::shape_str(b)));
    out[i] = std::max(da, db);
  }
  return out;
}

/// Turns two operands into tensors of one dtype and one shape.
std::pair<Tensor, Tensor> unify(const char* op, const Operand& a, const Operand& b, const SrcLoc& loc) {
  if (a.is_literal && b.is_literal) fail(op, loc, "needs at least one traced operand");
  Tensor x, y;
  if (a.is_literal || b.is_literal) {
    const Operand& lit = a.is_literal ? a : b;
    const Tensor& t = a.is_literal ? b.tensor : a.tensor;
    if (t.is_ptr()) fail(op, loc, str_cat("cannot combine pointer ", t.type().str(), " with a number here"));
    DType dt = lit.literal_is_float && !ir::is_float(t.dtype()) ? DType::f32 : t.dtype();
    // An integer literal that does not fit the other side's integer type widens it (int8 x < 200
    // compares as i32), rather than wrapping silently.
    if (!lit.literal_is_float && ir::is_int(dt) && !fits(lit.int_value, dt))
      dt = fits(lit.int_value, DType::i32) ? promote(dt, DType::i32) : DType::i64;
    Tensor c = constant(op, loc, lit, dt);
    Tensor tt = convert(op, loc, t, dt);
    x = a.is_literal ? c : tt;
    y = a.is_literal ? tt : c;
  } else {
    x = a.tensor;
    y = b.tensor;
    if (!x.valid() || !y.valid()) fail(op, loc, "operand is an empty tl::Tensor");
    if (x.is_ptr() || y.is_ptr()) {
      if (x.type().element() != y.type().element())
        fail(op, loc, str_cat("operand types differ: ", x.type().str(), " and ", y.type().str()));
    } else {
      DType dt = promote(x.dtype(), y.dtype());
      x = convert(op, loc, x, dt);
      y = convert(op, loc, y, dt);
    }
  }
  auto shape = broadcast_shape(op, loc, x.shape(), y.shape());
  return {splat_to(op, loc, x, shape), splat_to(op, loc, y, shape)};
}

Tensor binary(const char* op, OpCode code, const Operand& a, const Operand& b) {
  const SrcLoc& loc = a.is_literal ? b.loc : a.loc;
  auto [x, y] = unify(op, a, b, loc);
  if (x.is_ptr()) fail(op, loc, str_cat("not defined on pointers (", x.type().str(), ")"));
  if (x.dtype() == DType::i1 && code != OpCode::And && code != OpCode::Or && code != OpCode::Xor) {
    x = convert(op, loc, x, DType::i32);
    y = convert(op, loc, y, DType::i32);
  }
  return Tensor(builder(op, loc).binary(code, x.value(), y.value()));
}

Tensor compare(const char* op, const std::string& pred, const Operand& a, const Operand& b) {
  const SrcLoc& loc = a.is_literal ? b.loc : a.loc;
  auto [x, y] = unify(op, a, b, loc);
  return Tensor(builder(op, loc).cmp(pred, x.value(), y.value()));
}

Tensor int_operand(const char* op, const Operand& o, const SrcLoc& loc) {
  if (!o.is_literal) return o.tensor;
  if (o.literal_is_float) fail(op, loc, "a pointer offset must be an integer");
  return constant(op, loc, o, DType::i32);
}

Tensor pointer_offset(const char* op, const Tensor& p, Tensor off, const SrcLoc& loc, bool negate) {
  if (!off.type().is_int() || off.dtype() == DType::i1)
    fail(op, loc, str_cat("a pointer offset must be an integer, got ", off.type().str()));
  auto shape = broadcast_shape(op, loc, p.shape(), off.shape());
  Tensor pp = splat_to(op, loc, p, shape);
  off = splat_to(op, loc, off, shape);
  if (negate) off = Tensor(builder(op, loc).unary(OpCode::Neg, off.value()));
  return Tensor(builder(op, loc).addptr(pp.value(), off.value()));
}

Tensor unary_math(const char* op, OpCode code, const Tensor& x, const SrcLoc& loc) {
  if (!x.valid()) fail(op, loc, "operand is an empty tl::Tensor");
  if (!x.type().is_float())
    fail(op, loc, str_cat("needs a floating-point operand, got ", x.type().str(), " (convert with .to(tl::float32))"));
  return Tensor(builder(op, loc).unary(code, x.value()));
}

Tensor as_tensor(const char* op, const Operand& o, DType dt_if_literal) {
  return o.is_literal ? constant(op, o.loc, o, dt_if_literal) : o.tensor;
}

Tensor check_ptr(const char* op, const Tensor& p, const SrcLoc& loc) {
  if (!p.valid()) fail(op, loc, "pointer is an empty tl::Tensor");
  if (!p.is_ptr()) fail(op, loc, str_cat("expected a pointer, got ", p.type().str()));
  return p;
}

Tensor mask_for(const char* op, const Tensor& m, const std::vector<int64_t>& shape, const SrcLoc& loc) {
  if (m.dtype() != DType::i1 || m.is_ptr()) fail(op, loc, str_cat("mask must be a boolean (i1), got ", m.type().str()));
  return splat_to(op, loc, m, shape);
}

/// A value to store or combine through a pointer: converted to the pointee dtype and shape.
Tensor value_for(const char* op, const Tensor& p, const Operand& v, const SrcLoc& loc) {
  Tensor t = as_tensor(op, v, p.dtype());
  if (t.is_ptr()) fail(op, loc, "cannot store a pointer");
  t = convert(op, loc, t, p.dtype());
  return splat_to(op, loc, t, p.shape());
}

Tensor atomic(const char* op, const std::string& kind, const Tensor& ptr, const Operand& val,
              const std::optional<Tensor>& mask, const AtomicOpts& o, const SrcLoc& loc) {
  check_ptr(op, ptr, loc);
  Tensor v = value_for(op, ptr, val, loc);
  Tensor m = mask ? mask_for(op, *mask, ptr.shape(), loc) : Tensor();
  return Tensor(
      builder(op, loc).atomic_rmw(kind, ptr.value(), v.value(), m.valid() ? m.value() : nullptr, o.sem, o.scope));
}

Tensor reduction(const char* op, const std::string& kind, const Tensor& x, int axis, const SrcLoc& loc) {
  if (!x.type().is_tensor()) fail(op, loc, str_cat("needs a tensor, got ", x.type().str()));
  Tensor y = x.dtype() == DType::i1 ? convert(op, loc, x, DType::i32) : x;
  return Tensor(builder(op, loc).reduce(kind, y.value(), axis));
}

Type region_type_check(const char* op, const SrcLoc& loc, const Tensor& t, size_t i) {
  if (!t.valid()) fail(op, loc, str_cat("value ", i, " is an empty tl::Tensor"));
  return t.type();
}

std::vector<ir::Value*> values_of(const Values& v) {
  std::vector<ir::Value*> out;
  for (auto& t : v) out.push_back(t.value());
  return out;
}

void yield_checked(const char* op, const SrcLoc& loc, ir::Builder& b, const Values& got, const std::vector<Type>& want,
                   ir::OpCode term = OpCode::Yield, ir::Value* cond = nullptr) {
  if (got.size() != want.size())
    fail(op, loc, str_cat("the body returns ", got.size(), " values, the loop carries ", want.size()));
  std::vector<ir::Value*> vals;
  if (cond) vals.push_back(cond);
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor t = got[i];
    region_type_check(op, loc, t, i);
    if (t.type() != want[i]) {
      if (t.shape() == want[i].shape && !t.is_ptr() && !want[i].is_ptr) {
        t = convert(op, loc, t, want[i].dtype);
      } else {
        fail(op, loc,
             str_cat("carried value ", i, " has type ", want[i].str(), " on entry but ", t.type().str(),
                     " at the end of the body"));
      }
    }
    vals.push_back(t.value());
  }
  b.set_loc(Location::from(loc));
  b.create(term, vals, {});
}

}  // namespace

Tensor Tensor::to(DType t, SrcLoc loc) const { return convert("to", loc, *this, t); }
void Tensor::empty() {
  throw Error("tiledist: an empty tl::Tensor (default-constructed, never assigned a value) used as an operand");
}

Tensor operator+(const Operand& a, const Operand& b) {
  const SrcLoc& loc = a.is_literal ? b.loc : a.loc;
  if (!a.is_literal && a.tensor.valid() && a.tensor.is_ptr())
    return pointer_offset("add", a.tensor, int_operand("add", b, loc), loc, false);
  if (!b.is_literal && b.tensor.valid() && b.tensor.is_ptr())
    return pointer_offset("add", b.tensor, int_operand("add", a, loc), loc, false);
  return binary("add", OpCode::Add, a, b);
}
Tensor operator-(const Operand& a, const Operand& b) {
  if (!a.is_literal && a.tensor.valid() && a.tensor.is_ptr() && (b.is_literal || !b.tensor.is_ptr()))
    return pointer_offset("sub", a.tensor, int_operand("sub", b, a.loc), a.loc, true);
  return binary("sub", OpCode::Sub, a, b);
}
Tensor operator*(const Operand& a, const Operand& b) { return binary("mul", OpCode::Mul, a, b); }
Tensor operator/(const Operand& a, const Operand& b) { return binary("div", OpCode::Div, a, b); }
Tensor operator%(const Operand& a, const Operand& b) { return binary("rem", OpCode::Rem, a, b); }
Tensor operator&(const Operand& a, const Operand& b) { return binary("and", OpCode::And, a, b); }
Tensor operator|(const Operand& a, const Operand& b) { return binary("or", OpCode::Or, a, b); }
Tensor operator^(const Operand& a, const Operand& b) { return binary("xor", OpCode::Xor, a, b); }
Tensor operator<<(const Operand& a, const Operand& b) { return binary("shl", OpCode::Shl, a, b); }
Tensor operator>>(const Operand& a, const Operand& b) { return binary("shr", OpCode::Shr, a, b); }
Tensor operator<(const Operand& a, const Operand& b) { return compare("cmp", "lt", a, b); }
Tensor operator<=(const Operand& a, const Operand& b) { return compare("cmp", "le", a, b); }
Tensor operator>(const Operand& a, const Operand& b) { return compare("cmp", "gt", a, b); }
Tensor operator>=(const Operand& a, const Operand& b) { return compare("cmp", "ge", a, b); }
Tensor operator==(const Operand& a, const Operand& b) { return compare("cmp", "eq", a, b); }
Tensor operator!=(const Operand& a, const Operand& b) { return compare("cmp", "ne", a, b); }
Tensor minimum(const Operand& a, const Operand& b) { return binary("minimum", OpCode::Min, a, b); }
Tensor maximum(const Operand& a, const Operand& b) { return binary("maximum", OpCode::Max, a, b); }

Tensor operator-(const Operand& a) {
  if (a.is_literal) fail("neg", a.loc, "needs a traced operand");
  return Tensor(builder("neg", a.loc).unary(OpCode::Neg, a.tensor.value()));
}
Tensor operator~(const Operand& a) {
  if (a.is_literal) fail("not", a.loc, "needs a traced operand");
  return Tensor(builder("not", a.loc).unary(OpCode::Not, a.tensor.value()));
}
Tensor operator!(const Operand& a) {
  if (a.is_literal || a.tensor.dtype() != DType::i1 || a.tensor.is_ptr())
    fail("not", a.loc, "logical not needs a boolean (i1) operand");
  return Tensor(builder("not", a.loc).unary(OpCode::Not, a.tensor.value()));
}

Tensor program_id(int axis, SrcLoc loc) {
  if (axis < 0 || axis > 2) fail("program_id", loc, "axis must be 0, 1 or 2");
  if (ir::Value* v = dsl::Trace::current("program_id").program_id_override(axis)) return Tensor(v);
  return Tensor(builder("program_id", loc).program_id(axis));
}
Tensor num_programs(int axis, SrcLoc loc) {
  if (axis < 0 || axis > 2) fail("num_programs", loc, "axis must be 0, 1 or 2");
  if (ir::Value* v = dsl::Trace::current("num_programs").num_programs_override(axis)) return Tensor(v);
  return Tensor(builder("num_programs", loc).num_programs(axis));
}
Tensor arange(int64_t start, int64_t end, SrcLoc loc) {
  int64_t n = end - start;
  if (n <= 0 || (n & (n - 1)) != 0)
    fail("arange", loc, str_cat("range [", start, ", ", end, ") must have a positive power-of-2 length"));
  return Tensor(builder("arange", loc).arange(start, end));
}
Tensor scalar(const Operand& value, DType dtype, SrcLoc loc) {
  if (value.is_literal) return constant("scalar", loc, value, dtype);
  if (value.tensor.type().is_tensor()) fail("scalar", loc, "expected a scalar value");
  return convert("scalar", loc, value.tensor, dtype);
}
Tensor full(std::vector<int64_t> shape, const Operand& value, DType dtype, SrcLoc loc) {
  for (int64_t d : shape)
    if (d <= 0) fail("full", loc, str_cat("shape ", ir::shape_str(shape), " has a non-positive dimension"));
  Tensor s = scalar(value, dtype, loc);
  if (shape.empty()) return s;
  return Tensor(builder("full", loc).splat(s.value(), shape));
}
Tensor zeros(std::vector<int64_t> shape, DType dtype, SrcLoc loc) { return full(std::move(shape), 0, dtype, loc); }

Tensor expand_dims(const Tensor& x, int axis, SrcLoc loc) {
  if (!x.type().is_tensor()) return Tensor(builder("expand_dims", loc).splat(x.value(), {1}));
  return Tensor(builder("expand_dims", loc).expand_dims(x.value(), axis));
}
Tensor reshape(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != x.type().numel())
    fail("reshape", loc,
         str_cat("cannot reshape ", x.type().str(), " to ", ir::shape_str(shape), " (", x.type().numel(),
                 " elements vs ", n, ")"));
  if (x.shape() == shape) return x;
  if (!x.type().is_tensor()) return Tensor(builder("reshape", loc).splat(x.value(), shape));
  return Tensor(builder("reshape", loc).reshape(x.value(), shape));
}
Tensor permute(const Tensor& x, std::vector<int64_t> perm, SrcLoc loc) {
  if (!x.type().is_tensor()) fail("permute", loc, str_cat("needs a tensor, got ", x.type().str()));
  return Tensor(builder("permute", loc).trans(x.value(), perm));
}
Tensor trans(const Tensor& x, SrcLoc loc) {
  if (x.shape().size() != 2) fail("trans", loc, str_cat("needs a 2-D tensor, got ", x.type().str()));
  return permute(x, {1, 0}, loc);
}
Tensor broadcast_to(const Tensor& x, std::vector<int64_t> shape, SrcLoc loc) {
  return splat_to("broadcast_to", loc, x, shape);
}

Tensor cast(const Tensor& x, DType t, SrcLoc loc) { return convert("cast", loc, x, t); }
Tensor bitcast(const Tensor& x, DType t, SrcLoc loc) {
  if (ir::dtype_bits(x.dtype()) != ir::dtype_bits(t) || x.is_ptr())
    fail("bitcast", loc, str_cat("cannot bitcast ", x.type().str(), " to ", ir::dtype_name(t), " (bit widths differ)"));
  return Tensor(builder("bitcast", loc).bitcast(x.value(), x.type().with_dtype(t)));
}
Tensor where(const Operand& cond, const Operand& a, const Operand& b) {
  const SrcLoc& loc = cond.loc;
  if (cond.is_literal) fail("where", loc, "the condition must be traced");
  if (cond.tensor.dtype() != DType::i1)
    fail("where", loc, str_cat("the condition must be i1, got ", cond.tensor.type().str()));
  Tensor x, y;
  if (a.is_literal && b.is_literal) {
    DType dt = a.literal_is_float || b.literal_is_float ? DType::f32 : DType::i32;
    x = constant("where", loc, a, dt);
    y = constant("where", loc, b, dt);
  } else {
    std::tie(x, y) = unify("where", a, b, loc);
  }
  auto shape = broadcast_shape("where", loc, cond.tensor.shape(), x.shape());
  Tensor c = splat_to("where", loc, cond.tensor, shape);
  x = splat_to("where", loc, x, shape);
  y = splat_to("where", loc, y, shape);
  return Tensor(builder("where", loc).select(c.value(), x.value(), y.value()));
}

Tensor load(const Tensor& ptr, SrcLoc loc) {
  check_ptr("load", ptr, loc);
  return Tensor(builder("load", loc).load(ptr.value()));
}
Tensor load(const Tensor& ptr, const Tensor& mask, SrcLoc loc) {
  check_ptr("load", ptr, loc);
  Tensor m = mask_for("load", mask, ptr.shape(), loc);
  return Tensor(builder("load", loc).load(ptr.value(), m.value()));
}
Tensor load(const Tensor& ptr, const Tensor& mask, const Operand& other, SrcLoc loc) {
  check_ptr("load", ptr, loc);
  Tensor m = mask_for("load", mask, ptr.shape(), loc);
  Tensor o = value_for("load", ptr, other, loc);
  return Tensor(builder("load", loc).load(ptr.value(), m.value(), o.value()));
}
void store(const Tensor& ptr, const Operand& value, SrcLoc loc) {
  check_ptr("store", ptr, loc);
  Tensor v = value_for("store", ptr, value, loc);
  builder("store", loc).store(ptr.value(), v.value());
}
void store(const Tensor& ptr, const Operand& value, const Tensor& mask, SrcLoc loc) {
  check_ptr("store", ptr, loc);
  Tensor v = value_for("store", ptr, value, loc);
  Tensor m = mask_for("store", mask, ptr.shape(), loc);
  builder("store", loc).store(ptr.value(), v.value(), m.value());
}

void prefetch(const Tensor& ptr, SrcLoc loc) {
  check_ptr("prefetch", ptr, loc);
  builder("prefetch", loc).prefetch(ptr.value());
}
void prefetch(const Tensor& ptr, const Tensor& mask, SrcLoc loc) {
  check_ptr("prefetch", ptr, loc);
  Tensor m = mask_for("prefetch", mask, ptr.shape(), loc);
  builder("prefetch", loc).prefetch(ptr.value(), m.value());
}

Tensor atomic_add(const Tensor& p, const Operand& v, std::optional<Tensor> m, AtomicOpts o, SrcLoc loc) {
  return atomic("atomic_add", "add", p, v, m, o, loc);
}
Tensor atomic_max(const Tensor& p, const Operand& v, std::optional<Tensor> m, AtomicOpts o, SrcLoc loc) {
  return atomic("atomic_max", "max", p, v, m, o, loc);
}
Tensor atomic_min(const Tensor& p, const Operand& v, std::optional<Tensor> m, AtomicOpts o, SrcLoc loc) {
  return atomic("atomic_min", "min", p, v, m, o, loc);
}
Tensor atomic_xchg(const Tensor& p, const Operand& v, std::optional<Tensor> m, AtomicOpts o, SrcLoc loc) {
  return atomic("atomic_xchg", "xchg", p, v, m, o, loc);
}
Tensor atomic_cas(const Tensor& p, const Operand& cmp, const Operand& val, AtomicOpts o, SrcLoc loc) {
  check_ptr("atomic_cas", p, loc);
  Tensor c = value_for("atomic_cas", p, cmp, loc);
  Tensor v = value_for("atomic_cas", p, val, loc);
  return Tensor(builder("atomic_cas", loc).atomic_cas(p.value(), c.value(), v.value(), o.sem, o.scope));
}

Tensor sum(const Tensor& x, int axis, SrcLoc loc) { return reduction("sum", "sum", x, axis, loc); }
Tensor max(const Tensor& x, int axis, SrcLoc loc) { return reduction("max", "max", x, axis, loc); }
Tensor min(const Tensor& x, int axis, SrcLoc loc) { return reduction("min", "min", x, axis, loc); }
Tensor argmax(const Tensor& x, int axis, SrcLoc loc) { return reduction("argmax", "argmax", x, axis, loc); }
Tensor argmin(const Tensor& x, int axis, SrcLoc loc) { return reduction("argmin", "argmin", x, axis, loc); }

Tensor dot(const Tensor& a, const Tensor& b, std::optional<Tensor> acc, SrcLoc loc) {
  if (a.shape().size() != 2 || b.shape().size() != 2)
    fail("dot", loc, str_cat("needs 2-D operands, got ", a.type().str(), " and ", b.type().str()));
  if (a.shape()[1] != b.shape()[0])
    fail("dot", loc, str_cat("inner dimensions differ: ", ir::shape_str(a.shape()), " x ", ir::shape_str(b.shape())));
  if (a.dtype() != b.dtype())
    fail("dot", loc, str_cat("operand dtypes differ: ", ir::dtype_name(a.dtype()), " and ", ir::dtype_name(b.dtype())));
  Tensor c = acc ? *acc : zeros({a.shape()[0], b.shape()[1]}, DType::f32, loc);
  return Tensor(builder("dot", loc).dot(a.value(), b.value(), c.value()));
}

#define TD_MATH(fn, code) \
  Tensor fn(const Tensor& x, SrcLoc loc) { return unary_math(#fn, OpCode::code, x, loc); }
TD_MATH(exp, Exp)
TD_MATH(exp2, Exp2)
TD_MATH(log, Log)
TD_MATH(log2, Log2)
TD_MATH(sqrt, Sqrt)
TD_MATH(rsqrt, Rsqrt)
TD_MATH(erf, Erf)
TD_MATH(sin, Sin)
TD_MATH(cos, Cos)
TD_MATH(floor, Floor)
TD_MATH(ceil, Ceil)
#undef TD_MATH
Tensor abs(const Tensor& x, SrcLoc loc) {
  if (x.is_ptr() || x.dtype() == DType::i1) fail("abs", loc, str_cat("needs a number, got ", x.type().str()));
  return Tensor(builder("abs", loc).unary(OpCode::Abs, x.value()));
}

Tensor cdiv(const Operand& a, const Operand& b) { return (a + b - 1) / b; }

Tensor multiple_of(const Tensor& x, int64_t n, SrcLoc loc) {
  if (!x.valid()) fail("multiple_of", loc, "operand is an empty tl::Tensor");
  if (n < 1) fail("multiple_of", loc, str_cat("needs a positive number, got ", n));
  return Tensor(builder("multiple_of", loc).hint(x.value(), {{"multiple_of", n}}));
}
Tensor max_contiguous(const Tensor& x, int64_t n, SrcLoc loc) {
  if (!x.valid()) fail("max_contiguous", loc, "operand is an empty tl::Tensor");
  if (n < 1) fail("max_contiguous", loc, str_cat("needs a positive number, got ", n));
  return Tensor(builder("max_contiguous", loc).hint(x.value(), {{"max_contiguous", n}}));
}

Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, SrcLoc loc) {
  return for_range(lo, hi, step, std::move(init), body, LoopHints{}, loc);
}
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, LoopHints hints, SrcLoc loc) {
  return for_range(
      lo, hi, step, Values{init}, [&](Tensor iv, Values c) { return Values{body(iv, c[0])}; }, hints, loc)[0];
}
Values for_range(const Operand& lo, const Operand& hi, const Operand& step, Values init,
                 const std::function<Values(Tensor, Values)>& body, LoopHints hints, SrcLoc loc) {
  const char* op = "for_range";
  DType it = DType::i32;
  for (const Operand* o : {&lo, &hi, &step})
    if (!o->is_literal) {
      if (!o->tensor.type().is_int() || o->tensor.type().is_tensor() || o->tensor.dtype() == DType::i1)
        fail(op, loc, str_cat("bounds and step must be integer scalars, got ", o->tensor.type().str()));
      it = promote(it, o->tensor.dtype());
    }
  if (step.is_literal && step.int_value <= 0) fail(op, loc, "step must be positive");
  if (hints.num_stages < 0 || hints.num_stages > 16)
    fail(op, loc, str_cat("num_stages = ", hints.num_stages, " (0: the compile's choice, else 1 to 16)"));

  Tensor l = convert(op, loc, as_tensor(op, lo, it), it), h = convert(op, loc, as_tensor(op, hi, it), it),
         s = convert(op, loc, as_tensor(op, step, it), it);
  std::vector<ir::Value*> operands{l.value(), h.value(), s.value()};
  std::vector<Type> carried;
  for (size_t i = 0; i < init.size(); ++i) {
    carried.push_back(region_type_check(op, loc, init[i], i));
    operands.push_back(init[i].value());
  }
  auto& b = builder(op, loc);
  ir::Op* f = b.create(OpCode::For, operands, carried);
  if (hints.warp_specialize) f->attrs["warp_specialize"] = int64_t{1};
  if (hints.num_stages > 0) f->attrs["num_stages"] = int64_t{hints.num_stages};
  ir::Block* outer = b.block();
  ir::Block* region = f->regions[0].get();
  Tensor iv(region->add_arg(Type::scalar(it)));
  Values args;
  for (auto& t : carried) args.emplace_back(region->add_arg(t));
  b.set_block(region);
  Values out = body(iv, args);
  yield_checked(op, loc, b, out, carried);
  b.set_block(outer);
  b.finish(f);
  Values results;
  for (auto& r : f->results) results.emplace_back(r.get());
  return results;
}
Tensor for_range(const Operand& lo, const Operand& hi, const Operand& step, Tensor init,
                 const std::function<Tensor(Tensor, Tensor)>& body, SrcLoc loc) {
  return for_range(lo, hi, step, Values{init}, [&](Tensor iv, Values c) { return Values{body(iv, c[0])}; }, loc)[0];
}
void for_range(const Operand& lo, const Operand& hi, const Operand& step, const std::function<void(Tensor)>& body,
               SrcLoc loc) {
  for_range(lo, hi, step, body, LoopHints{}, loc);
}
void for_range(const Operand& lo, const Operand& hi, const Operand& step, const std::function<void(Tensor)>& body,
               LoopHints hints, SrcLoc loc) {
  for_range(
      lo, hi, step, Values{},
      [&](Tensor iv, Values) {
        body(iv);
        return Values{};
      },
      hints, loc);
}

Values if_then_else(const Tensor& cond, const std::function<Values()>& then_fn, const std::function<Values()>& else_fn,
                    SrcLoc loc) {
  const char* op = "if_then_else";
  if (cond.type() != Type::scalar(DType::i1))
    fail(op, loc, str_cat("needs a scalar i1 condition, got ", cond.type().str(), " (use tl::where for tensors)"));
  auto& b = builder(op, loc);
  ir::Op* f = b.create(OpCode::If, {cond.value()}, {});
  ir::Block* outer = b.block();
  b.set_block(f->regions[0].get());
  Values t = then_fn();
  std::vector<Type> types;
  for (size_t i = 0; i < t.size(); ++i) types.push_back(region_type_check(op, loc, t[i], i));
  yield_checked(op, loc, b, t, types);
  b.set_block(f->regions[1].get());
  Values e = else_fn ? else_fn() : Values{};
  if (e.size() != t.size()) fail(op, loc, str_cat("then returns ", t.size(), " values, else ", e.size()));
  yield_checked(op, loc, b, e, types);
  b.set_block(outer);
  for (auto& ty : types) f->add_result(ty);
  b.finish(f);
  Values results;
  for (auto& r : f->results) results.emplace_back(r.get());
  return results;
}
Tensor if_then_else(const Tensor& cond, const std::function<Tensor()>& then_fn, const std::function<Tensor()>& else_fn,
                    SrcLoc loc) {
  return if_then_else(cond, [&] { return Values{then_fn()}; }, [&] { return Values{else_fn()}; }, loc)[0];
}
void if_then(const Tensor& cond, const std::function<void()>& then_fn, SrcLoc loc) {
  if_then_else(
      cond,
      [&] {
        then_fn();
        return Values{};
      },
      [] { return Values{}; }, loc);
}

Values while_(Values init, const std::function<Tensor(Values)>& cond, const std::function<Values(Values)>& body,
              SrcLoc loc) {
  const char* op = "while_";
  std::vector<Type> carried;
  for (size_t i = 0; i < init.size(); ++i) carried.push_back(region_type_check(op, loc, init[i], i));
  auto& b = builder(op, loc);
  ir::Op* w = b.create(OpCode::While, values_of(init), carried);
  ir::Block* outer = b.block();
  for (int r = 0; r < 2; ++r) {
    ir::Block* region = w->regions[r].get();
    Values args;
    for (auto& t : carried) args.emplace_back(region->add_arg(t));
    b.set_block(region);
    if (r == 0) {
      Tensor c = cond(args);
      if (!c.valid() || c.type() != Type::scalar(DType::i1)) fail(op, loc, "the condition must return a scalar i1");
      yield_checked(op, loc, b, args, carried, OpCode::Condition, c.value());
    } else {
      yield_checked(op, loc, b, body(args), carried);
    }
  }
  b.set_block(outer);
  b.finish(w);
  Values results;
  for (auto& r : w->results) results.emplace_back(r.get());
  return results;
}

}  // namespace tl
}  // namespace tiledist
