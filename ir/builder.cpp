#include "ir/builder.h"

#include "ir/layout.h"

namespace tiledist::ir {

Op* Builder::create(OpCode code, std::vector<Value*> operands, std::vector<Type> results, Attrs attrs) {
  auto op = std::make_unique<Op>();
  op->code = code;
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  op->loc = loc_;
  op->parent = block_;
  for (auto& t : results) op->add_result(t);
  for (int i = 0; i < op->info().num_regions; ++i) {
    op->regions.push_back(std::make_unique<Block>());
    op->regions.back()->parent = op.get();
  }
  for (Value* v : op->operands) TD_ASSERT(v != nullptr, "null operand to ", op_name(code));
  if (op->info().num_regions == 0) {
    std::string err = check_op(*op);
    if (!err.empty()) throw Error::at(op->name(), loc_, err);
  }
  Op* raw = op.get();
  if (before_)
    block_->ops.insert(*before_, std::move(op));
  else
    block_->ops.push_back(std::move(op));
  return raw;
}

void Builder::finish(Op* op) {
  std::string err = check_op(*op);
  if (!err.empty()) throw Error::at(op->name(), op->loc, err);
}

Value* Builder::constant_int(DType t, int64_t v) {
  return create(OpCode::Constant, {}, {Type::scalar(t)}, {{"value", v}})->result();
}
Value* Builder::constant_float(DType t, double v) {
  if (t == DType::f32) v = static_cast<double>(static_cast<float>(v));  // what the targets will compute with
  return create(OpCode::Constant, {}, {Type::scalar(t)}, {{"value", v}})->result();
}
Value* Builder::program_id(int axis) {
  return create(OpCode::ProgramId, {}, {Type::scalar(DType::i32)}, {{"axis", int64_t(axis)}})->result();
}
Value* Builder::num_programs(int axis) {
  return create(OpCode::NumPrograms, {}, {Type::scalar(DType::i32)}, {{"axis", int64_t(axis)}})->result();
}
Value* Builder::arange(int64_t start, int64_t end) {
  return create(OpCode::Arange, {}, {Type::tensor(DType::i32, {end - start})}, {{"start", start}, {"end", end}})
      ->result();
}
Value* Builder::splat(Value* v, const std::vector<int64_t>& shape) {
  return create(OpCode::Splat, {v}, {v->type.with_shape(shape)})->result();
}
Value* Builder::broadcast(Value* v, const std::vector<int64_t>& shape) {
  return create(OpCode::Broadcast, {v}, {v->type.with_shape(shape)})->result();
}
Value* Builder::expand_dims(Value* v, int axis) {
  auto shape = v->type.shape;
  int rank = static_cast<int>(shape.size());
  if (axis < 0) axis += rank + 1;
  if (axis < 0 || axis > rank)
    throw Error::at("expand_dims", loc_, str_cat("axis ", axis, " out of range for rank ", rank));
  shape.insert(shape.begin() + axis, 1);
  return create(OpCode::ExpandDims, {v}, {v->type.with_shape(shape)}, {{"axis", int64_t(axis)}})->result();
}
Value* Builder::reshape(Value* v, const std::vector<int64_t>& shape) {
  return create(OpCode::Reshape, {v}, {v->type.with_shape(shape)})->result();
}
Value* Builder::convert_layout(Value* v, LayoutRef to) {
  return create(OpCode::ConvertLayout, {v}, {v->type.with_layout(std::move(to))})->result();
}

Value* Builder::local_alloc(DType dtype, int64_t tiles, const std::vector<int64_t>& tile, LayoutRef l) {
  std::vector<int64_t> shape = {tiles};
  shape.insert(shape.end(), tile.begin(), tile.end());
  return create(OpCode::LocalAlloc, {}, {Type::memdesc(dtype, shape, std::move(l))})->result();
}
void Builder::async_copy(Value* buf, Value* index, Value* ptrs, Value* mask, Value* other, const std::string& via) {
  std::vector<Value*> operands = {buf, index, ptrs};
  if (mask) operands.push_back(mask);
  if (mask && other) operands.push_back(other);
  create(OpCode::AsyncCopy, operands, {}, {{"via", via}});
}
void Builder::async_commit() { create(OpCode::AsyncCommit, {}, {}); }
void Builder::async_wait(int64_t pending, bool own) {
  ir::Op* op = create(OpCode::AsyncWait, {}, {}, {{"pending", pending}});
  if (own) op->attrs["own"] = int64_t{1};
}
Value* Builder::barriers(int64_t n, int64_t count) {
  Value* bars = local_alloc(DType::i64, n, {1, 1}, Layout::shared(1, 1, 1, {1, 0}));
  create(OpCode::InitBarrier, {bars}, {}, {{"count", count}});
  return bars;
}
void Builder::async_tma_copy(Value* buf, Value* index, Value* bars, Value* pred, const std::vector<Value*>& coords,
                             const std::string& tensor) {
  std::vector<Value*> operands = {buf, index, bars, pred};
  operands.insert(operands.end(), coords.begin(), coords.end());
  create(OpCode::AsyncTmaCopy, operands, {}, {{"tensor", tensor}});
}
void Builder::wait_barrier(Value* bars, Value* index, Value* phase, Value* pred, bool issuer) {
  std::vector<Value*> operands = {bars, index, phase};
  if (pred) operands.push_back(pred);
  Attrs attrs;
  if (issuer) attrs["issuer"] = int64_t(1);
  create(OpCode::WaitBarrier, operands, {}, attrs);
}
void Builder::arrive_barrier(Value* bars, Value* index, Value* pred, int64_t pending) {
  std::vector<Value*> operands = {bars, index};
  if (pred) operands.push_back(pred);
  Attrs attrs;
  if (pending) attrs["pending"] = pending;
  create(OpCode::ArriveBarrier, operands, {}, attrs);
}
Value* Builder::local_load(Value* buf, Value* index, LayoutRef layout, bool trans) {
  std::vector<int64_t> tile(buf->type.shape.end() - 2, buf->type.shape.end());
  Attrs attrs;
  if (trans) {
    std::swap(tile[0], tile[1]);
    attrs["perm"] = std::vector<int64_t>{1, 0};
  }
  return create(OpCode::LocalLoad, {buf, index}, {Type::tensor(buf->type.dtype, tile).with_layout(std::move(layout))},
                attrs)
      ->result();
}

Value* Builder::trans(Value* v, const std::vector<int64_t>& perm) {
  auto shape = v->type.shape;
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(shape.size()))
      throw Error::at("trans", loc_,
                      str_cat("permutation ", shape_str(perm), " does not fit shape ", shape_str(shape)));
    out.push_back(shape[p]);
  }
  return create(OpCode::Trans, {v}, {v->type.with_shape(out)}, {{"perm", perm}})->result();
}
Value* Builder::binary(OpCode code, Value* a, Value* b) { return create(code, {a, b}, {a->type})->result(); }
Value* Builder::cmp(const std::string& pred, Value* a, Value* b) {
  Type t = Type::tensor(DType::i1, a->type.shape);
  return create(OpCode::Cmp, {a, b}, {t}, {{"pred", pred}})->result();
}
Value* Builder::unary(OpCode code, Value* a) { return create(code, {a}, {a->type})->result(); }
Value* Builder::cast(Value* v, DType to) { return create(OpCode::Cast, {v}, {v->type.with_dtype(to)})->result(); }
Value* Builder::bitcast(Value* v, Type to) { return create(OpCode::Bitcast, {v}, {to})->result(); }
Value* Builder::select(Value* c, Value* a, Value* b) { return create(OpCode::Select, {c, a, b}, {a->type})->result(); }
Value* Builder::hint(Value* v, Attrs attrs) { return create(OpCode::Hint, {v}, {v->type}, std::move(attrs))->result(); }
Value* Builder::addptr(Value* p, Value* offset) { return create(OpCode::AddPtr, {p, offset}, {p->type})->result(); }

Value* Builder::load(Value* p, Value* mask, Value* other) {
  std::vector<Value*> ops{p};
  if (mask) ops.push_back(mask);
  if (other) {
    if (!mask) throw Error::at("load", loc_, "'other' needs a mask");
    ops.push_back(other);
  }
  Type t = Type::tensor(p->type.dtype, p->type.shape);
  return create(OpCode::Load, ops, {t})->result();
}
void Builder::store(Value* p, Value* v, Value* mask) {
  std::vector<Value*> ops{p, v};
  if (mask) ops.push_back(mask);
  create(OpCode::Store, ops, {});
}
void Builder::prefetch(Value* p, Value* mask) {
  std::vector<Value*> ops{p};
  if (mask) ops.push_back(mask);
  create(OpCode::Prefetch, ops, {});
}
Value* Builder::atomic_rmw(const std::string& kind, Value* p, Value* v, Value* mask, const std::string& sem,
                           const std::string& scope) {
  std::vector<Value*> ops{p, v};
  if (mask) ops.push_back(mask);
  return create(OpCode::AtomicRMW, ops, {v->type}, {{"kind", kind}, {"order", sem}, {"scope", scope}})->result();
}
Value* Builder::atomic_cas(Value* p, Value* c, Value* v, const std::string& sem, const std::string& scope) {
  return create(OpCode::AtomicCAS, {p, c, v}, {v->type}, {{"order", sem}, {"scope", scope}})->result();
}

Type reduced_type(const Type& t, int axis, DType result_dtype) {
  auto shape = t.shape;
  if (axis >= 0 && axis < static_cast<int>(shape.size())) shape.erase(shape.begin() + axis);
  LayoutRef layout = t.layout && !shape.empty() ? Layout::slice(axis, t.layout) : nullptr;
  return Type{result_dtype, false, AddrSpace::global, shape, layout};
}

Value* Builder::reduce(const std::string& kind, Value* v, int axis) {
  int rank = static_cast<int>(v->type.shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) throw Error::at("reduce", loc_, str_cat("axis out of range for ", v->type.str()));
  bool arg = kind == "argmax" || kind == "argmin";
  Type t = reduced_type(v->type, axis, arg ? DType::i32 : v->type.dtype);
  return create(OpCode::Reduce, {v}, {t}, {{"kind", kind}, {"axis", int64_t(axis)}})->result();
}
Value* Builder::dot(Value* a, Value* b, Value* acc) { return create(OpCode::Dot, {a, b, acc}, {acc->type})->result(); }

}  // namespace tiledist::ir
