// Layout assignment (passes.h says what it decides and why). Three steps:
//  1. decide: walk the function in order, giving each tensor value a layout from its anchors
//     and operands, or marking it *free* (built from constants, ranges and splats only: any
//     layout costs the same). Loops are walked until their carried layouts settle.
//  2. place: give each op's tensor operands the layout the op needs: a free value is rebuilt in
//     that layout (memoized per layout), another is converted once, right after its definition.
//  3. tidy: the free values' originals, now unused, go (with anything else left dead).
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "codegen/axis_info.h"
#include "codegen/passes/passes.h"
#include "ir/builder.h"
#include "ir/layout.h"
#include "ir/passes/passes.h"
#include "support/matrix_instrs.h"

namespace tiledist::codegen {

namespace {

using ir::Block;
using ir::DType;
using ir::Layout;
using ir::LayoutRef;
using ir::Op;
using ir::OpCode;
using ir::Value;

bool elementwise(OpCode c) {
  switch (c) {
    case OpCode::Add:
    case OpCode::Sub:
    case OpCode::Mul:
    case OpCode::Div:
    case OpCode::Rem:
    case OpCode::Min:
    case OpCode::Max:
    case OpCode::And:
    case OpCode::Or:
    case OpCode::Xor:
    case OpCode::Shl:
    case OpCode::Shr:
    case OpCode::Cmp:
    case OpCode::Neg:
    case OpCode::Not:
    case OpCode::Exp:
    case OpCode::Exp2:
    case OpCode::Log:
    case OpCode::Log2:
    case OpCode::Sqrt:
    case OpCode::Rsqrt:
    case OpCode::Abs:
    case OpCode::Erf:
    case OpCode::Sin:
    case OpCode::Cos:
    case OpCode::Floor:
    case OpCode::Ceil:
    case OpCode::Cast:
    case OpCode::Bitcast:
    case OpCode::Select:
    case OpCode::Hint:
    case OpCode::AddPtr:
    case OpCode::ConsumeToken:
    case OpCode::SymmAt:  // (pointers to a peer's heap: each element its own)
      return true;
    default:
      return false;
  }
}

/// Ops all of whose tensors share one layout: elementwise ones and memory accesses.
bool one_layout(OpCode c) {
  return elementwise(c) || c == OpCode::Load || c == OpCode::Store || c == OpCode::Prefetch || c == OpCode::AtomicRMW ||
         c == OpCode::AtomicCAS;
}

int64_t floor_pow2(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

class LayoutAssignment {
 public:
  explicit LayoutAssignment(const GpuPassContext& ctx) : ctx_(ctx) {}

  void run(ir::Function& f) {
    f.walk([](const Op& op) {  // (layouts map power-of-two shapes, as arange makes them)
      for (auto& r : op.results)
        for (int64_t d : r->type.shape)
          if (d & (d - 1))
            throw Error::at(op.name(), op.loc,
                            str_cat("a tensor of shape ", ir::shape_str(r->type.shape),
                                    " on a GPU target: its dimensions must be powers of two"));
    });
    count_uses(f.body);
    decide_block(f.body);
    sink_loads(f.body);
    place_block(f.body);
    for (Op* op : free_ops_) op->parent->erase(op);
    ir::dce(f);
  }

 private:
  // ---- choices

  /// Triton's default: each thread `vec` contiguous elements of the fastest dimension (16 bytes'
  /// worth where `ptr`'s addresses allow), lanes along it first, warps down the slowest. The
  /// fastest is the last, unless `ptr`'s addresses run longer along another (a transposed
  /// tile's: Triton's coalescing).
  LayoutRef blocked_for(const std::vector<int64_t>& shape, DType dtype, const Value* ptr) {
    const int rank = static_cast<int>(shape.size());
    int fast = rank - 1;
    if (ptr)
      for (int d = rank - 2; d >= 0; --d)
        if (axis_.of(ptr, d).contiguity > axis_.of(ptr, fast).contiguity) fast = d;
    int64_t vec = std::max<int64_t>(1, 16 / std::max(1, ir::dtype_bytes(dtype)));
    if (ptr) vec = std::min(vec, floor_pow2(std::max<int64_t>(1, axis_.of(ptr, fast).contiguity)));
    vec = std::min(vec, shape[fast]);
    std::vector<int64_t> spt(rank, 1), tpw(rank, 1), wpc(rank, 1), order = {fast};
    for (int d = rank - 1; d >= 0; --d)
      if (d != fast) order.push_back(d);
    spt[fast] = vec;
    int64_t lanes = ctx_.warp_size, warps = ctx_.num_warps;
    for (int64_t d : order) {
      int64_t room = std::max<int64_t>(1, shape[d] / spt[d]);
      tpw[d] = std::min(lanes, room);
      lanes /= tpw[d];
    }
    tpw[order.back()] *= lanes;  // more lanes than elements: the rest hold copies
    for (size_t i = order.size(); i-- > 0;) {
      const int64_t d = order[i];
      int64_t room = std::max<int64_t>(1, shape[d] / (spt[d] * tpw[d]));
      wpc[d] = std::min(warps, room);
      warps /= wpc[d];
    }
    wpc[order.back()] *= warps;
    return Layout::blocked(spt, tpw, wpc, order);
  }
  LayoutRef blocked_for(const Value* v) {
    const Value* ptr = v->type.is_ptr ? v : nullptr;
    return blocked_for(v->type.shape, v->type.dtype, ptr);
  }

  /// The accumulator layout of the dot `op`, or null where no matrix unit takes it.
  LayoutRef mma_for(const Op& op) {
    const ir::Type& a = op.operands[0]->type;
    const ir::Type& b = op.operands[1]->type;
    const int64_t M = op.results[0]->type.shape[0], N = op.results[0]->type.shape[1], K = a.shape[1];
    const bool f8 = a.dtype == DType::f8e4m3 || a.dtype == DType::f8e5m2;
    const bool half = a.dtype == DType::bf16 || a.dtype == DType::f16;
    if (!(half || f8) || (half && b.dtype != a.dtype)) return nullptr;
    const int64_t eb = ir::dtype_bytes(a.dtype);
    const int nw = ctx_.num_warps;
    const bool rows = along_rows(op);
    // The arch's matrix instructions (support/matrix_instrs.h), the preferred first; a K that
    // is whole instructions.
    for (const MatrixInstr& mi : matrix_instrs(ctx_.arch)) {
      if ((f8 && !mi.f8) || K % (mi.k_bytes / eb)) continue;
      const int group = mi.threads / ctx_.warp_size;  // warps that issue one instruction
      switch (mi.unit) {
        case MatrixUnit::wgmma: {
          // each warpgroup mi.m rows an instruction, repeated over more rows where the
          // accumulator stays within 128 registers a thread (a 128x128 tile on one warpgroup)
          const int64_t span = int64_t{mi.m} / group * nw;  // (rows of one instruction over the warpgroups)
          if (nw % group == 0 && M % span == 0 && M / span * N / 2 <= 128 && N % mi.n_step == 0 && N <= mi.n)
            return Layout::mma_acc(ir::MmaKind::wgmma, {nw, 1}, {mi.m, N});
          break;
        }
        case MatrixUnit::mfma:  // the larger tile where the warps can share it out
          if (LayoutRef l = mma_grid(ir::MmaKind::mfma, M, N, mi.m, mi.n, rows)) return l;
          break;
        case MatrixUnit::mma_sync:
          return mma_grid(ir::MmaKind::mma_sync, M, N, mi.m, mi.n, rows);
      }
    }
    return nullptr;
  }

  /// An accumulator layout of `kind` over tiles of sm x sn whose warps form the squarest grid of
  /// warp tiles that divides M x N (all along M where `rows`); null if none does.
  LayoutRef mma_grid(ir::MmaKind kind, int64_t M, int64_t N, int64_t sm, int64_t sn, bool rows) {
    const int nw = ctx_.num_warps;
    int64_t best_wm = 0, best = 0;
    for (int64_t wm = 1; wm <= nw; wm *= 2) {
      int64_t wn = nw / wm;
      if (M % (sm * wm) || N % (sn * wn)) continue;
      int64_t score = M / wm + N / wn;
      if (rows && wn == 1) score = -1;  // wanted: beats any other
      if (!best_wm || score < best) best_wm = wm, best = score;
    }
    if (!best_wm) return nullptr;
    return Layout::mma_acc(kind, {best_wm, nw / best_wm}, {sm, sn});
  }

  /// Whether the dot's result feeds another dot's A operand, or its A is another dot's result,
  /// through elementwise ops.
  bool along_rows(const Op& dot) {
    std::function<bool(const Value*, int)> feeds_a = [&](const Value* v, int depth) {
      if (depth > 16) return false;
      for (auto& [user, i] : uses_[v]) {
        if (user->code == OpCode::Dot && i == 0) return true;
        if (elementwise(user->code) && feeds_a(user->results[0].get(), depth + 1)) return true;
      }
      return false;
    };
    std::function<bool(const Value*, int)> from_dot = [&](const Value* v, int depth) {
      if (!v->def || depth > 16) return false;
      if (v->def->code == OpCode::Dot) return true;
      if (!elementwise(v->def->code)) return false;
      for (const Value* o : v->def->operands)
        if (o->type.is_tensor() && from_dot(o, depth + 1)) return true;
      return false;
    };
    return feeds_a(dot.results[0].get(), 0) || from_dot(dot.operands[0], 0);
  }

  /// The registers a thread holds of a tensor of `shape` in layout `l`: more than the elements
  /// over the threads where lanes or warps hold copies (a [BT, 1] column's layout, broadcast
  /// along the columns: every lane of a row's 32 holds the whole row).
  static int64_t registers(const LayoutRef& l, const std::vector<int64_t>& shape) {
    try {
      return ir::to_linear(*l, shape).in_size(0);
    } catch (const std::invalid_argument&) {  // (a shape the layout does not take)
      return INT64_MAX;
    }
  }
  /// Among operands' layouts, the one an elementwise op on `shape` works in: an accumulator's,
  /// else the one whose threads hold the fewest copies of it (the first of those): a tile's own
  /// layout, not that of a row mask or scale broadcast against it (whose layout, chosen for
  /// its [BT, 1] load, can leave each lane a whole row: bench/RESULTS.md, 2026-11-27).
  static LayoutRef prefer(const std::vector<LayoutRef>& ls, const std::vector<int64_t>& shape) {
    for (const LayoutRef& l : ls)
      if (l->kind == Layout::Kind::mma) return l;
    LayoutRef best = ls.front();
    int64_t fewest = registers(best, shape);
    for (const LayoutRef& l : ls)
      if (int64_t n = registers(l, shape); n < fewest) best = l, fewest = n;
    return best;
  }

  // ---- step 1: decide

  void count_uses(const Block& b) {
    for (auto& op : b.ops) {
      for (size_t i = 0; i < op->operands.size(); ++i)
        uses_[op->operands[i]].push_back({op.get(), static_cast<int>(i)});
      for (auto& r : op->regions) count_uses(*r);
    }
  }

  bool is_free(const Value* v) const { return free_.count(v) != 0; }
  void set(const Value* v, LayoutRef l) {
    free_.erase(v);
    layout_[v] = std::move(l);
  }
  void set_free(const Value* v) {
    layout_.erase(v);
    free_.insert(v);
  }
  LayoutRef of(const Value* v) const {
    auto it = layout_.find(v);
    return it == layout_.end() ? nullptr : it->second;
  }

  void decide_block(Block& b) {
    for (auto& op : b.ops) decide(*op);
  }

  void decide(Op& op) {
    const Value* r = op.results.empty() ? nullptr : op.results[0].get();
    const bool tensor = r && r->type.is_tensor();
    std::vector<LayoutRef> laid;
    bool any_free = false;
    for (const Value* o : op.operands)
      if (o->type.is_tensor()) {
        if (is_free(o))
          any_free = true;
        else
          laid.push_back(of(o));
      }
    switch (op.code) {
      case OpCode::Splat:
      case OpCode::Arange:
        return set_free(r);
      case OpCode::ExpandDims:
        if (is_free(op.operands[0])) return set_free(r);
        if (laid[0]->kind == Layout::Kind::slice && laid[0]->dim == op.int_attr("axis")) return set(r, laid[0]->parent);
        return set(r, blocked_for(r));
      case OpCode::Broadcast: {  // (in its operand's layout, unless that leaves threads holding copies)
        if (is_free(op.operands[0])) return set_free(r);
        LayoutRef own = blocked_for(r);
        return set(r, registers(laid[0], r->type.shape) > registers(own, r->type.shape) ? own : laid[0]);
      }
      case OpCode::Reshape:
      case OpCode::Trans:
        return is_free(op.operands[0]) ? set_free(r) : set(r, blocked_for(r));
      case OpCode::Reduce:
        if (!tensor) return;
        if (is_free(op.operands[0])) return set_free(r);
        return set(r, Layout::slice(static_cast<int>(op.int_attr("axis")), laid[0]));
      case OpCode::Load:
        if (tensor) set(r, blocked_for(r->type.shape, r->type.dtype, op.operands[0]));
        return;
      case OpCode::AtomicRMW:
      case OpCode::AtomicCAS:
        if (tensor) set(r, blocked_for(r->type.shape, r->type.dtype, op.operands[0]));
        return;
      case OpCode::Dot: {
        LayoutRef acc = mma_for(op);
        return set(r, acc ? acc : (is_free(op.operands[2]) ? blocked_for(r) : of(op.operands[2])));
      }
      case OpCode::For:
        return decide_loop(op, 3, *op.regions[0], nullptr);
      case OpCode::While:
        return decide_loop(op, 0, *op.regions[0], op.regions[1].get());
      case OpCode::If: {
        decide_block(*op.regions[0]);
        decide_block(*op.regions[1]);
        for (size_t i = 0; i < op.results.size(); ++i) {
          const Value* v = op.results[i].get();
          if (!v->type.is_tensor()) continue;
          LayoutRef l;
          for (auto& region : op.regions) {
            const Value* y = region->terminator()->operands[i];
            if (!l && !is_free(y)) l = of(y);
          }
          set(v, l ? l : blocked_for(v));
        }
        return;
      }
      default:
        if (!tensor || !elementwise(op.code)) return;
        if (laid.empty() && any_free) return set_free(r);
        return set(r, prefer(laid, r->type.shape));
    }
  }

  /// A loop's carried tensors (operands from `first`, the region arguments past the induction
  /// variable of a for) start in their initial values' layouts (free where those are), then
  /// take the layouts the body yields until those settle; any left free (a pointer advanced by
  /// a constant) become blocked, and the body is decided once more with them.
  void decide_loop(Op& op, size_t first, Block& body, Block* after) {
    const size_t skip = op.code == OpCode::For ? 1 : 0;
    const size_t n = op.operands.size() - first;
    auto arg = [&](size_t i) { return body.args[skip + i].get(); };
    for (size_t i = 0; i < n; ++i) {
      const Value* init = op.operands[first + i];
      if (!init->type.is_tensor()) continue;
      if (is_free(init))
        set_free(arg(i));
      else
        set(arg(i), of(init));
    }
    // (A while's after region takes, and its results are, what its `condition` forwards: the
    // verifier wants those in the carried values' layouts, so the condition converts to them.)
    auto decide_body = [&] {
      decide_block(body);
      if (!after) return;
      for (size_t i = 0; i < n; ++i)
        if (after->args[i]->type.is_tensor()) {
          if (is_free(arg(i)))
            set_free(after->args[i].get());
          else
            set(after->args[i].get(), of(arg(i)));
        }
      decide_block(*after);
    };
    for (int round = 0; round < 4; ++round) {
      decide_body();
      const Op* yield = after ? after->terminator() : body.terminator();
      bool settled = true;
      for (size_t i = 0; i < n; ++i) {
        const Value* y = yield->operands[i];
        if (!arg(i)->type.is_tensor() || is_free(y) || ir::same_layout(of(y), of(arg(i)))) continue;
        settled = false;
        set(arg(i), of(y));
      }
      if (settled) break;
    }
    bool freed = false;
    for (size_t i = 0; i < n; ++i)
      if (arg(i)->type.is_tensor() && is_free(arg(i))) freed = true, set(arg(i), blocked_for(arg(i)));
    if (freed) decide_body();
    for (size_t i = 0; i < n; ++i)
      if (op.results[i]->type.is_tensor()) set(op.results[i].get(), of(arg(i)));
  }

  /// A load whose one user works in an MMA layout, directly or through expand_dims and
  /// broadcasts each used once (a row's scale, a column's bias), and whose address and mask are
  /// free loads in that layout (its slices along the way): each thread its own elements, no
  /// conversion (of the broadcast tile, which would move every copy through shared memory).
  void sink_loads(Block& b) {
    for (auto& op : b.ops) {
      for (auto& r : op->regions) sink_loads(*r);
      if (op->code != OpCode::Load || !op->results[0]->type.is_tensor()) continue;
      std::vector<const Value*> chain = {op->results[0].get()};  // the load, then each expand_dims or broadcast
      const Op* user = nullptr;
      while (uses_[chain.back()].size() == 1) {
        user = uses_[chain.back()][0].first;
        if (user->code != OpCode::ExpandDims && user->code != OpCode::Broadcast) break;
        chain.push_back(user->results[0].get());
        user = nullptr;
      }
      if (!user || !elementwise(user->code) || user->results.empty()) continue;
      LayoutRef ul = of(user->results[0].get());
      if (!ul || ul->kind != Layout::Kind::mma) continue;
      bool free_inputs = true;
      for (size_t i = 0; i < op->operands.size(); ++i)
        if (op->operands[i]->type.is_tensor()) free_inputs &= is_free(op->operands[i]);
      if (!free_inputs) continue;
      LayoutRef l = ul;  // (from the user back to the load: an expand_dims' operand is its result's slice)
      for (size_t k = chain.size(); k-- > 0;) {
        set(chain[k], l);
        if (k > 0 && chain[k]->def->code == OpCode::ExpandDims)
          l = Layout::slice(static_cast<int>(chain[k]->def->int_attr("axis")), l);
      }
    }
  }

  // ---- step 2: place

  /// What `op` needs operand `i` (a tensor) in.
  LayoutRef wanted(const Op& op, size_t i) {
    const Value* o = op.operands[i];
    const Value* r = op.results.empty() ? nullptr : op.results[0].get();
    switch (op.code) {
      case OpCode::ExpandDims:
        return Layout::slice(static_cast<int>(op.int_attr("axis")), of(r));
      case OpCode::Broadcast:
        return of(r);
      case OpCode::Store:
        return store_layout(op);
      case OpCode::Wait:  // (a block of pointers: its values in their layout)
        return own(op.operands[0]);
      case OpCode::Dot: {
        LayoutRef acc = of(r);
        if (i == 2 || acc->kind != Layout::Kind::mma) return i == 2 ? acc : own(o);
        const int eb = ir::dtype_bytes(o->type.dtype);
        const bool from_memory = is_loaded(o);
        if (acc->mma == ir::MmaKind::wgmma && (i == 1 || from_memory))
          return wgmma_shared(o->type.dtype, o->type.shape, operand_order(o));
        int kw = acc->mma == ir::MmaKind::mfma ? 8 / eb : 4 / eb;
        return Layout::dot_operand(static_cast<int>(i), acc, std::max(kw, 2));
      }
      case OpCode::For:
        return i < 3 ? nullptr : of(op.regions[0]->args[i - 2].get());
      case OpCode::While:
        return of(op.regions[0]->args[i].get());
      case OpCode::Yield: {
        const Op* owner = op.parent->parent;
        if (owner->code == OpCode::For) return of(op.parent->args[i + 1].get());
        if (owner->code == OpCode::While) return of(owner->regions[0]->args[i].get());
        return of(owner->results[i].get());
      }
      case OpCode::Condition:
        return i == 0 ? nullptr : of(op.parent->parent->regions[1]->args[i - 1].get());
      default:
        if (one_layout(op.code)) return r && r->type.is_tensor() ? of(r) : store_layout(op);
        return own(o);
    }
  }
  /// A value's own layout, or a blocked one where it is free (a reduce or trans of a range).
  LayoutRef own(const Value* v) { return is_free(v) ? blocked_for(v) : of(v); }
  LayoutRef store_layout(const Op& op) {
    auto it = store_layouts_.find(&op);
    if (it != store_layouts_.end()) return it->second;
    const Value* value = op.operands[1];
    LayoutRef l = is_free(value) ? blocked_for(op.operands[0]) : of(value);
    if (value->type.is_tensor() && !is_free(op.operands[0]) && is_free(value)) l = of(op.operands[0]);
    return store_layouts_[&op] = l;
  }
  bool is_loaded(const Value* v) {
    for (int depth = 0; v->def && depth < 4; ++depth) {
      if (v->def->code == OpCode::Load) return true;
      if (v->def->code != OpCode::Trans && v->def->code != OpCode::Hint) return false;
      v = v->def->operands[0];
    }
    return false;
  }
  /// The order of a wgmma operand in shared memory: as its load reads it (a transposed B is
  /// K-major: its dimension 0 is contiguous).
  std::vector<int64_t> operand_order(const Value* v) {
    if (v->def && v->def->code == OpCode::Trans && v->def->ints_attr("perm") == std::vector<int64_t>{1, 0})
      return {0, 1};
    return {1, 0};
  }

  void place_block(Block& b) {
    for (auto it = b.ops.begin(); it != b.ops.end(); ++it) {
      Op& op = **it;
      for (auto& r : op.regions) {
        for (auto& a : r->args)
          if (a->type.is_tensor()) a->type.layout = of(a.get());
      }
      for (auto& r : op.results)
        if (r->type.is_tensor() && !is_free(r.get())) r->type.layout = of(r.get());
      if (is_free_op(op)) {
        free_ops_.push_back(&op);
        continue;  // rebuilt where used
      }
      for (size_t i = 0; i < op.operands.size(); ++i) {
        Value* o = op.operands[i];
        if (!o->type.is_tensor()) continue;
        LayoutRef want = wanted(op, i);
        if (want) op.operands[i] = in_layout(o, want);
      }
      for (auto& r : op.regions) place_block(*r);
    }
  }
  bool is_free_op(const Op& op) const { return op.results.size() == 1 && is_free(op.results[0].get()); }

  /// `v` in layout `l`: itself, a rebuilt free value, or a conversion right after its definition.
  Value* in_layout(Value* v, const LayoutRef& l) {
    if (Value* free = free_origin(v)) v = free;  // (a free value's copy: rebuilt in any layout)
    if (!is_free(v) && ir::same_layout(v->type.layout, l)) return v;
    auto key = std::make_pair(v, l->str());
    auto it = made_.find(key);
    if (it != made_.end()) return it->second;
    Value* out = is_free(v)                                                            ? rebuild(v, l)
                 : l->is_distributed() && remat_cost(v, l, 0) < convert_elements(v, l) ? remat(v, l)
                                                                                       : convert(v, l);
    if (is_free(v)) rebuilt_from_[out] = v;
    return made_[key] = out;
  }

  // Backward rematerialization (Triton's RemoveLayoutConversions): a value that an op needs in
  // another layout is computed again in that layout from its operands, where that moves fewer
  // elements between threads than converting it does. A gather's addresses, `base[:, None] +
  // cols[None, :]` with the base loaded in a column's layout, then convert the [BM, 1] base
  // before the broadcast, not the [BM, BK] pointer tile after it (nor lose the addresses' runs
  // that the load's vectors need).

  /// The free value `v` is, or was rebuilt from; null for any other.
  Value* free_origin(const Value* v) const {
    if (auto it = rebuilt_from_.find(v); it != rebuilt_from_.end()) return it->second;
    return is_free(v) ? const_cast<Value*>(v) : nullptr;
  }
  /// The layout `v` is in, or will be once placed.
  LayoutRef current(const Value* v) const {
    LayoutRef l = of(v);
    return l ? l : v->type.layout;
  }
  /// The elements a conversion of `v` to `l` moves between threads: none within a thread, half
  /// of them by warp shuffles, all through shared memory.
  int64_t convert_elements(const Value* v, const LayoutRef& l) const {
    if (const Value* free = free_origin(v)) {  // (rebuilt in any layout; a trans, reshape or reduce then converted)
      const OpCode c = free->def ? free->def->code : OpCode::Splat;
      return c == OpCode::Trans || c == OpCode::Reshape || c == OpCode::Reduce ? std::max<int64_t>(1, v->type.numel())
                                                                               : 0;
    }
    LayoutRef from = current(v);
    if (!from) return 0;
    switch (ir::convert_cost(*from, *l, v->type.shape)) {
      case ir::ConvertCost::none:
      case ir::ConvertCost::registers:
        return 0;
      case ir::ConvertCost::warp_shuffle:
        return std::max<int64_t>(1, v->type.numel() / 2);
      case ir::ConvertCost::shared_memory:
        break;
    }
    return std::max<int64_t>(1, v->type.numel());
  }
  /// Ops computed again in any layout: elementwise ones, broadcasts and expand_dims.
  static bool rematerializable(const Op* op) {
    return op && op->results.size() == 1 && op->regions.empty() &&
           (elementwise(op->code) || op->code == OpCode::Broadcast || op->code == OpCode::ExpandDims);
  }
  /// The layout `op` (rematerializable) takes operand `i` in when its result is in `l`.
  static LayoutRef operand_in(const Op& op, const LayoutRef& l) {
    return op.code == OpCode::ExpandDims ? Layout::slice(static_cast<int>(op.int_attr("axis")), l) : l;
  }
  /// The elements moved to have `v` in `l` the cheaper way (converted, or computed again in `l`
  /// from its operands, each had the cheaper way), `depth` ops back at most.
  int64_t remat_cost(const Value* v, const LayoutRef& l, int depth) {
    v = unconverted(v);
    const int64_t direct = convert_elements(v, l);
    if (direct == 0 || depth >= 8 || !l->is_distributed() || !rematerializable(v->def)) return direct;
    auto key = std::make_pair(v, l->str());
    if (auto it = remat_costs_.find(key); it != remat_costs_.end()) return it->second;
    int64_t cost = 0;
    for (const Value* o : v->def->operands)
      if (o->type.is_tensor()) cost += remat_cost(o, operand_in(*v->def, l), depth + 1);
    return remat_costs_[key] = std::min(direct, cost);
  }
  /// `v`, or what it converts where it is a conversion this pass placed (the input has none):
  /// had in another layout from its source, not converted twice.
  template <class V>
  static V* unconverted(V* v) {
    return v->def && v->def->code == OpCode::ConvertLayout ? v->def->operands[0] : v;
  }
  /// `v` (not free) computed again in `l` (remat_cost chose it), right after its definition.
  Value* remat(Value* v, const LayoutRef& l) {
    Op& op = *v->def;
    std::vector<Value*> operands;
    operands.reserve(op.operands.size());
    for (Value* o : op.operands)
      operands.push_back(o->type.is_tensor() ? in_layout(unconverted(o), operand_in(op, l)) : o);
    return after(v).create(op.code, operands, {v->type.with_layout(l)}, op.attrs)->result();
  }
  ir::Builder after(Value* v) {
    ir::Builder b(nullptr);
    Block* block = v->def ? v->def->parent : v->owner;
    b.set_insert_point(block, v->def ? std::next(block->position(v->def)) : block->ops.begin());
    if (v->def) b.set_loc(v->def->loc);
    return b;
  }
  /// A conversion, with what it costs (ir::convert_cost) as its `cost`: what the lowering will
  /// have to move, for a reader of the IR.
  Value* convert(Value* v, const LayoutRef& l) {
    Value* c = after(v).convert_layout(v, l);
    c->def->attrs["cost"] = std::string(ir::convert_cost_name(ir::convert_cost(*v->type.layout, *l, v->type.shape)));
    return c;
  }

  /// The free value `v` built again, in layout `l`, from its operands in the layouts it needs.
  Value* rebuild(Value* v, const LayoutRef& l) {
    Op& op = *v->def;
    std::vector<Value*> operands;
    LayoutRef result = l;
    for (size_t i = 0; i < op.operands.size(); ++i) {
      Value* o = op.operands[i];
      if (!o->type.is_tensor()) {
        operands.push_back(o);
        continue;
      }
      LayoutRef want = l;
      if (op.code == OpCode::ExpandDims) {
        want = Layout::slice(static_cast<int>(op.int_attr("axis")), l);
      } else if (op.code == OpCode::Reduce) {
        bool slice = l->kind == Layout::Kind::slice && l->dim == op.int_attr("axis");
        want = slice ? l->parent : blocked_for(o);
        if (!slice) result = Layout::slice(static_cast<int>(op.int_attr("axis")), want);
      } else if (op.code == OpCode::Reshape || op.code == OpCode::Trans) {
        want = blocked_for(o);
        result = blocked_for(v);
      }
      operands.push_back(in_layout(o, want));
    }
    ir::Builder b = after(v);
    Value* made = b.create(op.code, operands, {v->type.with_layout(result)}, op.attrs)->result();
    return ir::same_layout(result, l) ? made : convert(made, l);
  }

  const GpuPassContext& ctx_;
  AxisAnalysis axis_;
  std::map<const Value*, std::vector<std::pair<const Op*, int>>> uses_;
  std::map<const Value*, LayoutRef> layout_;
  std::set<const Value*> free_;
  std::map<const Op*, LayoutRef> store_layouts_;
  std::map<std::pair<const Value*, std::string>, Value*> made_;
  std::map<const Value*, Value*> rebuilt_from_;  // a free value built in some layout -> the free value
  std::map<std::pair<const Value*, std::string>, int64_t> remat_costs_;
  std::vector<Op*> free_ops_;
};

}  // namespace

LayoutRef swizzled_shared(DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& order) {
  int64_t eb = ir::dtype_bytes(dtype), inner = shape[order[0]];
  int64_t vec = std::min<int64_t>(16 / eb, inner);
  int64_t row_bytes = inner * eb;
  int64_t per_phase = std::max<int64_t>(1, 128 / row_bytes);
  int64_t max_phase = std::max<int64_t>(1, std::min<int64_t>(8, inner / vec));
  return Layout::shared(static_cast<int>(vec), static_cast<int>(per_phase), static_cast<int>(max_phase), order);
}

LayoutRef wgmma_shared(DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& order) {
  const int64_t eb = ir::dtype_bytes(dtype), row_bytes = shape[order[0]] * eb;
  if (row_bytes < 128) return swizzled_shared(dtype, shape, order);
  return Layout::shared(static_cast<int>(16 / eb), 1, 8, order, row_bytes > 128 ? 128 / eb : 0);
}

void layout_assignment(ir::Function& f, const GpuPassContext& ctx) { LayoutAssignment(ctx).run(f); }

}  // namespace tiledist::codegen
