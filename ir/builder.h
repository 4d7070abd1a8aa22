// Checked construction of ops (Halide's `make`): each builder infers the result type and the
// op's verifier rule runs on it at once, so an ill-typed op never enters a Function.
#pragma once

#include "ir/ir.h"

namespace tiledist::ir {

/// Checks one op against its rule (operand/result counts and types, attributes, regions).
/// Returns an empty string when the op is well formed, otherwise what is wrong.
std::string check_op(const Op& op);

/// Verifies a whole function: every op's rule, terminators, and that each operand is defined
/// before its use in the same or an enclosing region. Throws Error naming the op and location.
void verify(const Function& f);

class Builder {
 public:
  explicit Builder(Block* block) : block_(block) {}

  Block* block() const { return block_; }
  /// Appends to the end of `b` from now on.
  void set_block(Block* b) {
    block_ = b;
    before_.reset();
  }
  /// Inserts before `pos` in `b` from now on.
  void set_insert_point(Block* b, std::list<std::unique_ptr<Op>>::iterator pos) {
    block_ = b;
    before_ = pos;
  }
  /// Location given to the ops built from now on.
  void set_loc(Location loc) { loc_ = std::move(loc); }
  const Location& loc() const { return loc_; }

  /// Appends an op; ops without regions are checked at once, ops with regions by `finish`.
  Op* create(OpCode code, std::vector<Value*> operands, std::vector<Type> results, Attrs attrs = {});
  /// Checks an op once its regions are complete.
  void finish(Op* op);

  Value* constant_int(DType t, int64_t v);
  Value* constant_float(DType t, double v);
  Value* program_id(int axis);
  Value* num_programs(int axis);
  Value* arange(int64_t start, int64_t end);
  Value* splat(Value* v, const std::vector<int64_t>& shape);
  Value* broadcast(Value* v, const std::vector<int64_t>& shape);
  Value* expand_dims(Value* v, int axis);
  Value* reshape(Value* v, const std::vector<int64_t>& shape);
  Value* trans(Value* v, const std::vector<int64_t>& perm);
  /// The tensor `v` in layout `to` (GPU layout passes).
  Value* convert_layout(Value* v, LayoutRef to);
  /// Shared-memory buffers and asynchronous copies (GPU pipelining pass): `tiles` tiles of
  /// `tile` elements of `dtype` in the #shared layout `l`; a copy of a tile of global memory
  /// into tile `index` (`via` "cp.async" or "tma"), closing a group of copies, waiting for all
  /// but `pending` groups, and tile `index` as a tensor in `layout` (transposed where `trans`).
  Value* local_alloc(DType dtype, int64_t tiles, const std::vector<int64_t>& tile, LayoutRef l);
  void async_copy(Value* buf, Value* index, Value* ptrs, Value* mask, Value* other, const std::string& via);
  void async_commit();
  /// `own`: each thread reads back only what it copied (no barrier needed to see the others').
  void async_wait(int64_t pending, bool own = false);
  Value* local_load(Value* buf, Value* index, LayoutRef layout, bool trans = false);
  /// n mbarriers (a memdesc of i64 [n, 1, 1]), each initialized to expect `count` arrivals.
  Value* barriers(int64_t n, int64_t count);
  /// `tensor` (a runtime::TmaRecipe's line)'s box at `coords` into tile `index` of `buf`,
  /// completing on bars[index], where `pred` holds.
  void async_tma_copy(Value* buf, Value* index, Value* bars, Value* pred, const std::vector<Value*>& coords,
                      const std::string& tensor);
  /// Waits for bars[index]'s phase of parity `phase` (where `pred`, if any, holds; `issuer`:
  /// only the thread that issues TMA copies waits).
  void wait_barrier(Value* bars, Value* index, Value* phase, Value* pred = nullptr, bool issuer = false);
  /// Each thread arrives on bars[index] (where `pred`, if any, holds) once its reads of the tile
  /// are done, but those of the newest `pending` dots, which read other tiles.
  void arrive_barrier(Value* bars, Value* index, Value* pred = nullptr, int64_t pending = 0);
  Value* binary(OpCode code, Value* a, Value* b);
  Value* cmp(const std::string& pred, Value* a, Value* b);
  Value* unary(OpCode code, Value* a);
  Value* cast(Value* v, DType to);
  Value* bitcast(Value* v, Type to);
  Value* select(Value* c, Value* a, Value* b);
  Value* hint(Value* v, Attrs attrs);
  Value* addptr(Value* p, Value* offset);
  Value* load(Value* p, Value* mask = nullptr, Value* other = nullptr);
  void store(Value* p, Value* v, Value* mask = nullptr);
  void prefetch(Value* p, Value* mask = nullptr);
  Value* atomic_rmw(const std::string& kind, Value* p, Value* v, Value* mask, const std::string& sem,
                    const std::string& scope);
  Value* atomic_cas(Value* p, Value* cmp, Value* v, const std::string& sem, const std::string& scope);
  Value* reduce(const std::string& kind, Value* v, int axis);
  Value* dot(Value* a, Value* b, Value* acc);

 private:
  Block* block_;
  std::optional<std::list<std::unique_ptr<Op>>::iterator> before_;
  Location loc_;
};

/// The type of `t` with a reduction axis removed (a scalar when nothing is left).
Type reduced_type(const Type& t, int axis, DType result_dtype);

}  // namespace tiledist::ir
