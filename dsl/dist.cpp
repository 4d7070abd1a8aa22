// Tracing of dist:: and shmem:: ops. Signals and remote atomics are symm_at + an atomic with
// the order the primitive names; copies are symm_at + memcpy; waits and barriers are their
// own ops (the backends make them yield or spin).
#include "dsl/dist.h"

namespace tiledist {

namespace {
using ir::DType;
using ir::OpCode;
using ir::Type;
using tl::Tensor;

ir::Builder& builder(const char* op, const tl::SrcLoc& loc) {
  auto& b = dsl::Trace::current(op).builder();
  b.set_loc(Location::from(loc));
  return b;
}
[[noreturn]] void fail(const char* op, const tl::SrcLoc& loc, const std::string& msg) {
  throw Error::at(op, Location::from(loc), msg);
}

Tensor scalar_int(const char* op, const tl::Operand& o, DType t, const tl::SrcLoc& loc) {
  if (!o.is_literal && (o.tensor.type().is_tensor() || !o.tensor.type().is_int() || o.tensor.is_ptr()))
    fail(op, loc, str_cat("expected an integer scalar, got ", o.tensor.type().str()));
  if (o.is_literal && o.literal_is_float) fail(op, loc, "expected an integer, got a floating-point number");
  return tl::scalar(o, t, loc);
}

Tensor scalar_ptr(const char* op, const Tensor& p, const tl::SrcLoc& loc) {
  if (!p.valid() || !p.is_ptr() || p.type().is_tensor())
    fail(op, loc, str_cat("expected a scalar pointer, got ", p.valid() ? p.type().str() : "an empty tl::Tensor"));
  return p;
}

Tensor signal_ptr(const char* op, const Tensor& p, const tl::SrcLoc& loc) {
  scalar_ptr(op, p, loc);
  if (p.dtype() != DType::i32 && p.dtype() != DType::i64)
    fail(op, loc, str_cat("signal words are i32 or i64, got ", p.type().str()));
  return p;
}

Tensor remote(const char* op, const Tensor& p, const tl::Operand& pe, const tl::SrcLoc& loc) {
  if (!p.valid() || !p.is_ptr())
    fail(op, loc, str_cat("expected a pointer, got ", p.valid() ? p.type().str() : "nothing"));
  Tensor r = scalar_int(op, pe, DType::i32, loc);
  return Tensor(builder(op, loc).create(OpCode::SymmAt, {p.value(), r.value()}, {p.type()})->result());
}

void update_signal(const char* op, const Tensor& sig, const tl::Operand& signal, dist::SigOp sig_op,
                   const tl::Operand& pe, const tl::SrcLoc& loc) {
  signal_ptr(op, sig, loc);
  Tensor target = remote(op, sig, pe, loc);
  Tensor v = scalar_int(op, signal, sig.dtype(), loc);
  builder(op, loc).atomic_rmw(sig_op == dist::SigOp::set ? "xchg" : "add", target.value(), v.value(), nullptr,
                              "release", "sys");
}

void copy(const char* op, const char* granularity, bool nbi, const Tensor& dest, const Tensor& src,
          const tl::Operand& nbytes, const tl::SrcLoc& loc) {
  scalar_ptr(op, dest, loc);
  scalar_ptr(op, src, loc);
  Tensor n = scalar_int(op, nbytes, DType::i64, loc);
  builder(op, loc).create(OpCode::Memcpy, {dest.value(), src.value(), n.value()}, {},
                          {{"granularity", std::string(granularity)}, {"nbi", int64_t(nbi)}});
}

Tensor wait_op(const char* op, const Tensor& p, const tl::Operand& n, const char* cmp, const char* scope,
               const char* semantic, const tl::Operand& value, const tl::SrcLoc& loc) {
  Tensor count = scalar_int(op, n, DType::i32, loc);
  Tensor v;
  if (p.valid() && p.is_ptr() && p.type().is_tensor()) {
    // (a block of pointers: each its words, each with its value)
    if (p.dtype() != DType::i32 && p.dtype() != DType::i64)
      fail(op, loc, str_cat("signal words are i32 or i64, got ", p.type().str()));
    const ir::Type& vt = value.tensor.type();
    if (value.is_literal || !vt.is_tensor()) {
      v = tl::full(p.type().shape, scalar_int(op, value, p.dtype(), loc), p.dtype(), loc);
    } else {
      if (!vt.is_int() || value.tensor.is_ptr() || vt.is_bool())
        fail(op, loc, str_cat("the values to compare with must be integers, got ", vt.str()));
      v = tl::broadcast_to(value.tensor.to(p.dtype()), p.type().shape, loc);
    }
  } else {
    signal_ptr(op, p, loc);
    v = scalar_int(op, value, p.dtype(), loc);
  }
  return Tensor(
      builder(op, loc)
          .create(OpCode::Wait, {p.value(), count.value(), v.value()}, {Type::scalar(p.dtype())},
                  {{"cmp", std::string(cmp)}, {"scope", std::string(scope)}, {"order", std::string(semantic)}})
          ->result());
}
}  // namespace

namespace dist {

Tensor rank(SrcLoc loc) {
  return Tensor(builder("rank", loc).create(OpCode::Rank, {}, {Type::scalar(DType::i32)})->result());
}
Tensor num_ranks(SrcLoc loc) {
  return Tensor(builder("num_ranks", loc).create(OpCode::NumRanks, {}, {Type::scalar(DType::i32)})->result());
}
Tensor symm_at(const Tensor& ptr, const Operand& rank, SrcLoc loc) { return remote("symm_at", ptr, rank, loc); }
void notify(const Tensor& ptr, const Operand& rank, const Operand& signal, SigOp sig_op, CommScope, SrcLoc loc) {
  update_signal("notify", ptr, signal, sig_op, rank, loc);
}
Tensor wait(const Tensor& ptrs, const Operand& n, Scope scope, Semantic semantic, const Operand& expected, SrcLoc loc) {
  return wait_op("wait", ptrs, n, "eq", scope == Scope::gpu ? "gpu" : "sys",
                 semantic == Semantic::acquire ? "acquire" : "relaxed", expected, loc);
}
Tensor consume_token(const Tensor& value, const Tensor& token, SrcLoc loc) {
  if (!value.valid() || !token.valid()) fail("consume_token", loc, "needs a value and a token");
  if (token.type().is_tensor()) fail("consume_token", loc, "the token must be the scalar that dist::wait returned");
  return Tensor(builder("consume_token", loc)
                    .create(OpCode::ConsumeToken, {value.value(), token.value()}, {value.type()})
                    ->result());
}

}  // namespace dist

namespace shmem {

Tensor my_pe(SrcLoc loc) { return dist::rank(loc); }
Tensor n_pes(SrcLoc loc) { return dist::num_ranks(loc); }
Tensor ptr(const Tensor& p, const Operand& pe, SrcLoc loc) { return remote("shmem::ptr", p, pe, loc); }

#define TILEDIST_SHMEM_COPIES(suffix, gran, nbi)                                                                      \
  void putmem##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Operand& pe,             \
                      SrcLoc loc) {                                                                                   \
    copy("putmem" #suffix, gran, nbi, remote("putmem" #suffix, dest, pe, loc), source, nbytes, loc);                  \
  }                                                                                                                   \
  void getmem##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Operand& pe,             \
                      SrcLoc loc) {                                                                                   \
    copy("getmem" #suffix, gran, nbi, dest, remote("getmem" #suffix, source, pe, loc), nbytes, loc);                  \
  }                                                                                                                   \
  void putmem_signal##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Tensor& sig_addr, \
                             const Operand& signal, dist::SigOp sig_op, const Operand& pe, SrcLoc loc) {              \
    copy("putmem_signal" #suffix, gran, nbi, remote("putmem_signal" #suffix, dest, pe, loc), source, nbytes, loc);    \
    update_signal("putmem_signal" #suffix, sig_addr, signal, sig_op, pe, loc);                                        \
  }
TILEDIST_SHMEM_COPIES(_block, "block", false)
TILEDIST_SHMEM_COPIES(_warp, "warp", false)
TILEDIST_SHMEM_COPIES(_thread, "thread", false)
TILEDIST_SHMEM_COPIES(_nbi_block, "block", true)
TILEDIST_SHMEM_COPIES(_nbi_warp, "warp", true)
TILEDIST_SHMEM_COPIES(_nbi_thread, "thread", true)
#undef TILEDIST_SHMEM_COPIES

void signal_op(const Tensor& sig_addr, const Operand& signal, dist::SigOp sig_op, const Operand& pe, SrcLoc loc) {
  update_signal("signal_op", sig_addr, signal, sig_op, pe, loc);
}
Tensor signal_wait_until(const Tensor& sig_addr, Cmp cmp, const Operand& value, SrcLoc loc) {
  static const char* names[] = {"eq", "ne", "gt", "ge", "lt", "le"};
  return wait_op("signal_wait_until", sig_addr, 1, names[static_cast<int>(cmp)], "sys", "acquire", value, loc);
}
void fence(SrcLoc loc) {
  builder("fence", loc)
      .create(OpCode::Fence, {}, {}, {{"order", std::string("release")}, {"scope", std::string("sys")}});
}
void quiet(SrcLoc loc) {
  builder("quiet", loc)
      .create(OpCode::Fence, {}, {}, {{"order", std::string("seq_cst")}, {"scope", std::string("sys")}});
}
void barrier_all(SrcLoc loc) {
  quiet(loc);
  builder("barrier_all", loc).create(OpCode::Barrier, {}, {}, {{"kind", std::string("barrier_all")}});
}
void sync_all(SrcLoc loc) {
  builder("sync_all", loc).create(OpCode::Barrier, {}, {}, {{"kind", std::string("sync_all")}});
}
void atomic_add(const Tensor& p, const Operand& value, const Operand& pe, SrcLoc loc) {
  atomic_fetch_add(p, value, pe, loc);
}
Tensor atomic_fetch_add(const Tensor& p, const Operand& value, const Operand& pe, SrcLoc loc) {
  scalar_ptr("atomic_fetch_add", p, loc);
  Tensor target = remote("atomic_fetch_add", p, pe, loc);
  Tensor v = tl::scalar(value, p.dtype(), loc);
  return Tensor(
      builder("atomic_fetch_add", loc).atomic_rmw("add", target.value(), v.value(), nullptr, "acq_rel", "sys"));
}
Tensor atomic_compare_swap(const Tensor& p, const Operand& cond, const Operand& value, const Operand& pe, SrcLoc loc) {
  scalar_ptr("atomic_compare_swap", p, loc);
  Tensor target = remote("atomic_compare_swap", p, pe, loc);
  Tensor c = tl::scalar(cond, p.dtype(), loc), v = tl::scalar(value, p.dtype(), loc);
  return Tensor(builder("atomic_compare_swap", loc).atomic_cas(target.value(), c.value(), v.value(), "acq_rel", "sys"));
}

}  // namespace shmem
}  // namespace tiledist
