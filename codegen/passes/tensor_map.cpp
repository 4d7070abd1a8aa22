// A load's tile as a box of a tensor a TMA tensor map describes (tensor_map.h says which).
#include "codegen/passes/tensor_map.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>

#include "ir/attrs.h"

namespace tiledist::codegen {

namespace {

using ir::OpCode;
using ir::Value;
using Dim = runtime::TmaRecipe::Dim;

bool is(const Value* v, OpCode code) { return v->def && v->def->code == code; }

Value* through(Value* v, std::initializer_list<OpCode> codes) {
  for (;;) {
    bool moved = false;
    for (OpCode c : codes)
      if (is(v, c)) {
        v = v->def->operands[0];
        moved = true;
        break;
      }
    if (!moved) return v;
  }
}

/// Through hints and integer casts that keep every value (widening, not from i1).
Value* through_widening(Value* v) {
  for (;;) {
    v = through(v, {OpCode::Hint});
    if (!is(v, OpCode::Cast)) return v;
    const Value* from = v->def->operands[0];
    if (!v->type.is_int() || !from->type.is_int() || from->type.dtype == ir::DType::i1 ||
        ir::dtype_bytes(from->type.dtype) > ir::dtype_bytes(v->type.dtype))
      return v;
    v = v->def->operands[0];
  }
}

/// A tile index: `expand_dims(x + arange(o, o + n), axis)` (or without x), broadcast; `dim` the
/// tile dimension it counts along.
struct Index {
  int dim = 0;
  Value* start = nullptr;
  int64_t offset = 0;
  bool operator==(const Index&) const = default;
};

std::optional<Index> tile_index(Value* v) {
  v = through(v, {OpCode::Broadcast});
  if (!is(v, OpCode::ExpandDims) || v->type.shape.size() != 2) return std::nullopt;
  Index t;
  t.dim = v->def->int_attr("axis") == 1 ? 0 : 1;  // [n, 1] counts along rows
  Value* x = v->def->operands[0];
  auto arange = [&](const Value* r) {
    if (!is(r, OpCode::Arange)) return false;
    t.offset = r->def->int_attr("start");
    return true;
  };
  if (arange(x)) return t;
  if (!is(x, OpCode::Add)) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    Value* s = x->def->operands[k];
    if (is(s, OpCode::Splat) && arange(x->def->operands[1 - k])) {
      t.start = s->def->operands[0];
      return t;
    }
  }
  return std::nullopt;
}

class Matcher {
 public:
  Matcher(const ir::Function& f, const ir::Op& load, AxisAnalysis& axis) : f_(f), load_(load), axis_(axis) {}

  std::optional<TensorMapView> run() {
    const ir::Type& t = load_.results[0]->type;
    const int64_t esize = ir::dtype_bytes(t.dtype);
    if (t.shape.size() != 2 || (esize != 1 && esize != 2) || t.shape[0] > 256 || (t.shape[1] * esize) % 128)
      return std::nullopt;
    if (load_.operands.size() > 2 && !zero(load_.operands[2])) return std::nullopt;
    if (!address(load_.operands[0]) || !base_ || tensor_terms_.size() != 2) return std::nullopt;
    // One column index (unscaled) and one row index times a stride.
    std::optional<Index> row, col;
    Value* stride = nullptr;
    for (auto& [index, by] : tensor_terms_) {
      auto x = tile_index(index);
      if (!x || x->offset < 0 || (x->start && !nonneg(x->start, 0, true))) return std::nullopt;
      if (x->dim == 0 && by && !row)
        row = x, stride = by;
      else if (x->dim == 1 && !by && !col)
        col = x;
      else
        return std::nullopt;
    }
    if (!row || !col) return std::nullopt;
    auto row_stride = host_size(stride);
    if (!row_stride || divisibility(stride) * esize % 16) return std::nullopt;
    // The mask: bounds on the same indices.
    std::optional<Dim> rows, cols;
    std::function<bool(Value*)> bounds = [&](Value* m) {
      m = through(m, {OpCode::Broadcast});
      if (is(m, OpCode::And)) return bounds(m->def->operands[0]) && bounds(m->def->operands[1]);
      if (!is(m, OpCode::Cmp) || ir::enum_attr<ir::CmpPred>(*m->def, "pred") != ir::CmpPred::lt) return false;
      auto x = tile_index(m->def->operands[0]);
      Value* bound = through(m->def->operands[1], {OpCode::Broadcast});
      if (!x || !is(bound, OpCode::Splat)) return false;
      auto size = host_size(bound->def->operands[0]);
      std::optional<Dim>* slot = *x == *row ? &rows : *x == *col ? &cols : nullptr;
      if (!size || !slot || *slot) return false;
      *slot = size;
      return true;
    };
    if (load_.operands.size() > 1 && !bounds(load_.operands[1])) return std::nullopt;

    TensorMapView v;
    v.tokens = tokens_;
    runtime::TmaRecipe& r = v.recipe;
    const Dim unbounded = Dim::of(runtime::TmaRecipe::kUnbounded);
    r.pointer = static_cast<int>(base_->index);
    r.dtype = t.dtype;
    r.dims = {cols.value_or(unbounded), rows.value_or(unbounded)};
    r.strides = {*row_stride};
    r.box = {128 / esize, t.shape[0]};
    v.copies = t.shape[1] * esize / 128;
    v.coords.resize(2);
    for (auto [c, x] : {std::pair{&v.coords[0], &*col}, std::pair{&v.coords[1], &*row}}) {
      if (x->start) c->terms.push_back({{x->start}, 1});
      c->offset = x->offset;
    }
    // The scalar offsets: into an axis the mask leaves unbounded, else a dimension each.
    for (const std::vector<Value*>& term : scalar_terms_) {
      std::vector<Value*> device, params;
      std::vector<int> param_indices;
      int64_t constant = 1, div = 1;
      for (Value* x : term) {
        auto h = host_size(x);
        if (h && h->params.size() == 1 && h->value == 1) {
          params.push_back(x), param_indices.push_back(h->params[0]);
          div *= divisibility(x);
        } else if (h && h->params.empty()) {
          constant *= h->value;
          div *= h->value;
        } else if (nonneg(x, 0, true)) {
          device.push_back(x);
        } else {
          return std::nullopt;
        }
      }
      // A column offset, where columns are unbounded and the offset is small (no parameter in
      // it: coordinates are 32-bit, where the kernel's offset may be 64-bit); else a multiple
      // of the row stride where rows are unbounded; else a dimension of its own; else columns.
      std::vector<Value*> all = device;
      all.insert(all.end(), params.begin(), params.end());
      if (!cols && params.empty()) {
        v.coords[0].terms.push_back({all, constant});
        continue;
      }
      if (!rows) {
        std::vector<Value*> rest = params;
        std::vector<int> left = param_indices;
        bool whole = row_stride->value > 0 && constant % row_stride->value == 0;
        for (int p : row_stride->params) {
          auto at = std::find(left.begin(), left.end(), p);
          if (at == left.end()) {
            whole = false;
            break;
          }
          rest.erase(rest.begin() + (at - left.begin()));
          left.erase(at);
        }
        if (whole) {
          rest.insert(rest.end(), device.begin(), device.end());
          v.coords[1].terms.push_back({rest, constant / row_stride->value});
          continue;
        }
      }
      if ((params.empty() && constant == 1) || div * esize % 16 || r.dims.size() == 5) {
        if (cols) return std::nullopt;
        v.coords[0].terms.push_back({all, constant});
        continue;
      }
      r.dims.push_back(unbounded);
      r.strides.push_back(Dim{param_indices, constant});
      r.box.push_back(1);
      TensorMapView::Coord c;
      if (device.empty())
        c.offset = 1;
      else
        c.terms.push_back({device, 1});
      v.coords.push_back(c);
    }
    return v;
  }

 private:
  /// A size the launch knows: a product of integer parameters and positive constants.
  std::optional<Dim> host_size(Value* v) {
    v = through_widening(v);
    if (!v->def && v->owner == &f_.body && v->type.is_int() && !v->type.is_tensor() && v->type.dtype != ir::DType::i1)
      return Dim::param(static_cast<int>(v->index));
    if (is(v, OpCode::Constant) && std::holds_alternative<int64_t>(v->def->attrs.at("value")) &&
        std::get<int64_t>(v->def->attrs.at("value")) > 0)
      return Dim::of(std::get<int64_t>(v->def->attrs.at("value")));
    if (is(v, OpCode::Mul) && !v->type.is_tensor()) {
      auto a = host_size(v->def->operands[0]), b = a ? host_size(v->def->operands[1]) : std::nullopt;
      if (!b) return std::nullopt;
      a->params.insert(a->params.end(), b->params.begin(), b->params.end());
      a->value *= b->value;
      return a;
    }
    return std::nullopt;
  }
  int64_t divisibility(Value* v) { return axis_.of(v).divisibility; }

  static bool zero(const Value* v) {
    v = through(const_cast<Value*>(v), {OpCode::Splat, OpCode::Broadcast});
    if (!is(v, OpCode::Constant)) return false;
    const ir::Attr& a = v->def->attrs.at("value");
    if (std::holds_alternative<int64_t>(a)) return std::get<int64_t>(a) == 0;
    return std::holds_alternative<double>(a) && std::get<double>(a) == 0.0 && !std::signbit(std::get<double>(a));
  }

  bool address(Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (is(v, OpCode::AddPtr)) return address(v->def->operands[0]) && offsets(v->def->operands[1]);
    if (is(v, OpCode::Splat) && !base_) return base(v->def->operands[0]);
    return false;
  }
  bool offsets(Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (is(v, OpCode::Add)) return offsets(v->def->operands[0]) && offsets(v->def->operands[1]);
    if (is(v, OpCode::Splat)) return scalar_offsets(v->def->operands[0]);
    if (is(v, OpCode::Mul))
      for (int k = 0; k < 2; ++k) {
        Value* s = through(v->def->operands[k], {OpCode::Broadcast});
        if (!is(s, OpCode::Splat)) continue;
        // (splat(x) + index) * stride: x * stride joins the scalar offsets
        Value* x = through(v->def->operands[1 - k], {OpCode::Broadcast});
        if (is(x, OpCode::Add))
          for (int j = 0; j < 2; ++j) {
            Value* t = through(x->def->operands[j], {OpCode::Broadcast});
            if (!is(t, OpCode::Splat) || t->def->operands[0]->type.is_tensor()) continue;
            const size_t first = scalar_terms_.size();
            if (!scalar_offsets(t->def->operands[0])) return false;
            for (size_t i = first; i < scalar_terms_.size(); ++i) scalar_terms_[i].push_back(s->def->operands[0]);
            tensor_terms_.emplace_back(x->def->operands[1 - j], s->def->operands[0]);
            return true;
          }
        tensor_terms_.emplace_back(v->def->operands[1 - k], s->def->operands[0]);
        return true;
      }
    tensor_terms_.emplace_back(v, nullptr);
    return true;
  }
  bool base(Value* p) {
    if (is(p, OpCode::AddPtr)) return base(p->def->operands[0]) && scalar_offsets(p->def->operands[1]);
    const int64_t div = axis_.of(p).divisibility;  // (of the hinted value)
    while (is(p, OpCode::Hint) || is(p, OpCode::ConsumeToken)) {
      if (is(p, OpCode::ConsumeToken)) tokens_.push_back(p->def->operands[1]);
      p = p->def->operands[0];
    }
    if (is(p, OpCode::AddPtr)) return base(p->def->operands[0]) && scalar_offsets(p->def->operands[1]);
    if (p->def || p->owner != &f_.body || !p->type.is_ptr || p->type.is_tensor() || div % 16) return false;
    base_ = p;
    return true;
  }
  bool scalar_offsets(Value* v) {
    v = through(v, {OpCode::Hint});
    if (v->type.is_tensor() || !v->type.is_int()) return false;
    if (is(v, OpCode::Add)) return scalar_offsets(v->def->operands[0]) && scalar_offsets(v->def->operands[1]);
    std::vector<Value*> factors;
    std::function<void(Value*)> flatten = [&](Value* x) {  // (a factor as written: its hints tell its divisibility)
      Value* y = through_widening(x);
      if (is(y, OpCode::Mul)) return flatten(y->def->operands[0]), flatten(y->def->operands[1]);
      factors.push_back(x);
    };
    flatten(v);
    scalar_terms_.push_back(factors);
    return true;
  }

  const ir::Function& f_;
  const ir::Op& load_;
  AxisAnalysis& axis_;
  Value* base_ = nullptr;
  std::vector<Value*> tokens_;                           // (of the consume_tokens the base passes through)
  std::vector<std::pair<Value*, Value*>> tensor_terms_;  // (index, stride or null)
  std::vector<std::vector<Value*>> scalar_terms_;        // products of scalars, added to the base
};

}  // namespace

std::optional<TensorMapView> tensor_map_view(const ir::Function& f, const ir::Op& load, AxisAnalysis& axis) {
  return Matcher(f, load, axis).run();
}

}  // namespace tiledist::codegen
