// Memory in the GPU IR lowering (codegen/gpu_ir/lowering.h): global loads and stores of
// registers, vectorized over a layout's contiguous registers; the shared-memory buffers of
// local_alloc (placed by their live ranges, so that one loop's ring reuses another's); the
// asynchronous copies into them (cp.async); and local_load, by ldmatrix where the result
// layout's lanes take 8x8 blocks as ldmatrix hands them out.
#include <llvm/IR/PatternMatch.h>

#include <cmath>

#include "codegen/gpu_ir/lowering.h"
#include "ir/layout.h"

namespace tiledist::codegen::gpu_ir {

using ir::LinearLayout;

int64_t LayoutLowering::vector_width(const ir::Type& t, const ir::Value* ptr, const ir::Value* mask, int dim) {
  const LinearLayout& ll = linear(t);
  // (by default along the dimension a thread's first registers run: the last, or a transposed
  // tile's)
  if (dim < 0) {
    dim = static_cast<int>(t.shape.size()) - 1;
    for (int d = dim - 1; d >= 0 && ir::contiguous_registers(ll, dim) < 2; --d)
      if (ir::contiguous_registers(ll, d) > 1) dim = d;
  }
  int64_t v = std::min(ir::contiguous_registers(ll, dim), 16 / std::max<int64_t>(1, ir::dtype_bytes(t.dtype)));
  while (v > 1 && !axis_.vectorizable(ptr, mask, v, dim)) v /= 2;
  return v;
}

llvm::Type* LayoutLowering::memory_words(llvm::FixedVectorType* vt) {
  // (NVPTX splits a vector of bytes into 4-byte accesses whatever its alignment: 8 f8 codes
  // were two st.u32 where one st.v2.b32 does. As 32-bit words the access stays one; the words
  // are put together and taken apart by shifts, which InstCombine leaves, where it turns a
  // bitcast of the loaded or stored value back into the byte vector.)
  const unsigned bits = vt->getPrimitiveSizeInBits().getFixedValue();
  if (vt->getElementType()->getPrimitiveSizeInBits() != 8 || bits < 64) return vt;
  return llvm::FixedVectorType::get(b_.getInt32Ty(), bits / 32);
}

llvm::Value* LayoutLowering::to_words(llvm::FixedVectorType* vt, const std::vector<llvm::Value*>& elems) {
  llvm::Type* wt = memory_words(vt);
  llvm::Value* w = llvm::PoisonValue::get(wt);
  if (wt == vt) {
    for (size_t k = 0; k < elems.size(); ++k) w = b_.CreateInsertElement(w, elems[k], uint64_t(k));
    return w;
  }
  // Two bytes that are one 16-bit value's low and high ones (a pair of f8 codes converted by
  // one cvt) go in as that value, not taken apart and put together again.
  auto pair = [](llvm::Value* lo, llvm::Value* hi) -> llvm::Value* {
    using namespace llvm::PatternMatch;
    llvm::Value* p = nullptr;
    if (match(lo, m_Trunc(m_Value(p))) && p->getType()->isIntegerTy(16) &&
        match(hi, m_Trunc(m_LShr(m_Specific(p), m_SpecificInt(8)))))
      return p;
    return nullptr;
  };
  for (size_t k = 0; k < elems.size(); k += 4) {
    llvm::Value* word = b_.getInt32(0);
    for (size_t i = 0; i < 4; ++i) {
      llvm::Value* p = i % 2 == 0 ? pair(elems[k + i], elems[k + i + 1]) : nullptr;
      word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(p ? p : elems[k + i], b_.getInt32Ty()), uint64_t(8 * i)));
      i += p ? 1 : 0;
    }
    w = b_.CreateInsertElement(w, word, uint64_t(k / 4));
  }
  return w;
}

llvm::Value* LayoutLowering::from_words(llvm::FixedVectorType* vt, llvm::Value* w, unsigned k) {
  if (w->getType() == vt) return b_.CreateExtractElement(w, uint64_t(k));
  llvm::Value* word = b_.CreateExtractElement(w, uint64_t(k / 4));
  return b_.CreateTrunc(b_.CreateLShr(word, uint64_t(8 * (k % 4))), vt->getElementType());
}

void LayoutLowering::emit_load(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  const DType d = rt.dtype;
  const ir::Value* mask = op.operands.size() > 1 ? op.operands[1] : nullptr;
  const ir::Value* other = op.operands.size() > 2 ? op.operands[2] : nullptr;
  if (!rt.is_tensor()) {  // every thread loads it: scalars are uniform
    llvm::Value* on = mask ? val(mask).scalar : b_.getTrue();
    llvm::Value* alt = other ? val(other).scalar : llvm::Constant::getNullValue(reg_type(rt));
    return define(op, LVal::of(when_value(on, reg_type(rt), alt, [&] {
                    return from_mem(b_.CreateLoad(mem_type(d), val(op.operands[0]).scalar), d);
                  })));
  }
  const int64_t v = vector_width(rt, op.operands[0], mask);
  auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
  llvm::Type* wt = memory_words(vt);
  const llvm::Align align(v * ir::dtype_bytes(d));
  const LVal& ptrs = val(op.operands[0]);
  LVal g;
  for (size_t j = 0; j < ptrs.regs.size(); j += static_cast<size_t>(v)) {
    llvm::Value* on = mask ? val(mask).regs[j] : b_.getTrue();
    llvm::Value* x = when_value(on, wt, llvm::Constant::getNullValue(wt),
                                [&] { return b_.CreateAlignedLoad(wt, ptrs.regs[j], align); });
    for (int64_t k = 0; k < v; ++k) {
      llvm::Value* m = from_words(vt, x, unsigned(k));
      llvm::Value* e = from_mem(m, d);
      if (other) e = b_.CreateSelect(on, e, val(other).regs[j + static_cast<size_t>(k)]);
      g.regs.push_back(e);
      // (f8: the memory bits too, `other`'s where masked off)
      if (!ir::is_f8(d)) continue;
      if (!other) {
        g.bits.push_back(m);
        continue;
      }
      const LVal& o = val(other);
      const size_t i = j + static_cast<size_t>(k);
      g.bits.push_back(b_.CreateSelect(on, m, o.bits.empty() ? to_mem(o.regs[i], d) : o.bits[i]));
    }
  }
  define(op, g);
}

void LayoutLowering::emit_store(const ir::Op& op) {
  const ir::Type& pt = op.operands[0]->type;
  const DType d = pt.dtype;
  const ir::Value* mask = op.operands.size() > 2 ? op.operands[2] : nullptr;
  if (!pt.is_tensor()) {  // thread 0 stores a scalar
    llvm::Value* on = is_thread0();
    if (mask) on = b_.CreateAnd(on, val(mask).scalar);
    return when(on, [&] { b_.CreateStore(to_mem(val(op.operands[1]).scalar, d), val(op.operands[0]).scalar); });
  }
  const int64_t v = vector_width(pt, op.operands[0], mask);
  auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
  const llvm::Align align(v * ir::dtype_bytes(d));
  const LVal& ptrs = val(op.operands[0]);
  const LVal& x = val(op.operands[1]);
  // (one copy of a replicated tensor stored: its registers, lanes and warps of the first copy)
  const std::array<int64_t, 3> dup = linear(pt).duplicate_bits();
  const int64_t copies = dup[ir::LinearLayout::reg];
  llvm::Value* first = holds_first_copy(dup);
  for (size_t j = 0; j < ptrs.regs.size(); j += static_cast<size_t>(v)) {
    if (static_cast<int64_t>(j) & copies) continue;
    llvm::Value* on = mask ? val(mask).regs[j] : b_.getTrue();
    when(first == b_.getTrue() ? on : b_.CreateAnd(first, on), [&] {
      std::vector<llvm::Value*> elems;
      for (int64_t k = 0; k < v; ++k) {
        const size_t i = j + static_cast<size_t>(k);  // (a narrow value's bits where it has them: rounded once)
        elems.push_back(x.bits.empty() ? to_mem(x.regs[i], d) : b_.CreateBitCast(x.bits[i], mem_type(d)));
      }
      b_.CreateAlignedStore(to_words(vt, elems), ptrs.regs[j], align);
    });
  }
}

// Every element's line, each thread those of its registers (a replicated tensor's copies too:
// the hint costs an instruction, not a transfer).
void LayoutLowering::emit_prefetch(const ir::Op& op) {
  const ir::Value* mask = op.operands.size() > 1 ? op.operands[1] : nullptr;
  if (!op.operands[0]->type.is_tensor()) {
    llvm::Value* on = mask ? val(mask).scalar : b_.getTrue();
    return when(on, [&] { target_->prefetch_l2(val(op.operands[0]).scalar); });
  }
  const LVal& ptrs = val(op.operands[0]);
  for (size_t j = 0; j < ptrs.regs.size(); ++j)
    when(mask ? val(mask).regs[j] : b_.getTrue(), [&] { target_->prefetch_l2(ptrs.regs[j]); });
}

void LayoutLowering::emit_atomic(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  if (producer_) unsupported(op, "an atomic in a warp-specialized producer");  // (its barriers)
  if (rt.is_tensor()) return emit_atomic_tensor(op);
  const bool cas = op.code == OpCode::AtomicCAS;
  const ir::MemOrder order = ir::enum_attr<ir::MemOrder>(op, "order");
  llvm::Type* t = reg_type(rt);
  llvm::Value* thread0 = is_thread0();
  llvm::Value* on = thread0;
  if (!cas && op.operands.size() > 2) on = b_.CreateAnd(on, val(op.operands[2]).scalar);
  const bool used = uses_[op.results[0].get()] > 0;
  llvm::Value* p = val(op.operands[0]).scalar;
  llvm::Value* v = val(op.operands[1]).scalar;
  llvm::Value* desired = cas ? val(op.operands[2]).scalar : nullptr;
  if (order != ir::MemOrder::relaxed && order != ir::MemOrder::acquire) barrier();  // (every thread's writes before it)
  const ir::Op* peer = nvshmem_signal_peer(op);
  llvm::Value* old = when_value(on, t, llvm::Constant::getNullValue(t), [&] {
    if (!peer)
      return target_->atomic(atomic_kind(op), rt.dtype, p, v, desired, order, ir::enum_attr<ir::MemScope>(op, "scope"),
                             used);
    // NVSHMEM's atomic on the symmetric word here, on the peer (after its fence where it
    // releases; our own fence after it where it acquires)
    using Order = ir::MemOrder;
    llvm::Value* got = nvshmem_atomic(*atomic_kind(op) == ir::RmwKind::add, rt.dtype == ir::DType::i64, used,
                                      order == Order::release || order == Order::acq_rel, val(peer->operands[0]).scalar,
                                      v, b_.CreateSExtOrTrunc(val(peer->operands[1]).scalar, b_.getInt32Ty()));
    if (order == Order::acquire || order == Order::acq_rel) fence(Order::acquire, ir::MemScope::sys);
    return got ? got : llvm::Constant::getNullValue(t);
  });
  if (used) return define(op, LVal::of(to_every_thread(old)));
  if (order != ir::MemOrder::relaxed && order != ir::MemOrder::release) barrier();  // (what follows after it)
  define(op, LVal::of(llvm::UndefValue::get(t)));
}

const ir::Op* LayoutLowering::nvshmem_signal_peer(const ir::Op& op) const {
  // (a set or add of an i32 word, or a set of an i64 one, that a symm_at names: NVSHMEM's
  // device library has atomics for those (NVSHMEM 3.x's has no nvshmem_int64_atomic_add); where
  // it has none, or off the NVSHMEM world, the op is the threads' own)
  if (!opts_.nvshmem || op.code != OpCode::AtomicRMW) return nullptr;
  const ir::Op* at = symm_at_of(op.operands[0]);
  if (!at || op.operands[0]->type.is_tensor()) return nullptr;
  const ir::RmwKind kind = *atomic_kind(op);
  const ir::DType d = op.results[0]->type.dtype;
  if (!(kind == ir::RmwKind::xchg && (d == ir::DType::i32 || d == ir::DType::i64)) &&
      !(kind == ir::RmwKind::add && d == ir::DType::i32))
    return nullptr;
  return at;
}

void LayoutLowering::emit_atomic_tensor(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  const bool cas = op.code == OpCode::AtomicCAS;
  const ir::MemOrder order = ir::enum_attr<ir::MemOrder>(op, "order");
  const ir::MemScope scope = ir::enum_attr<ir::MemScope>(op, "scope");
  const ir::Value* mask = !cas && op.operands.size() > 2 ? op.operands[2] : nullptr;
  llvm::Type* t = reg_type(rt);
  const bool used = uses_[op.results[0].get()] > 0;
  const LinearLayout& ll = linear(op.operands[0]->type);
  // (one copy of a replicated element performs it: its registers, lanes and warps of the first copy)
  const std::array<int64_t, 3> dup = ll.duplicate_bits();
  const int64_t copies = dup[LinearLayout::reg];
  llvm::Value* first = holds_first_copy(dup);
  if (order != ir::MemOrder::relaxed && order != ir::MemOrder::acquire) barrier();  // (every thread's writes before it)
  const LVal& p = val(op.operands[0]);
  const LVal& v = val(op.operands[1]);
  const LVal* desired = cas ? &val(op.operands[2]) : nullptr;
  std::vector<llvm::Value*> old(p.regs.size(), nullptr);
  for (size_t j = 0; j < p.regs.size(); ++j) {
    if (static_cast<int64_t>(j) & copies) continue;
    llvm::Value* on = mask ? b_.CreateAnd(first, val(mask).regs[j]) : first;
    old[j] = when_value(on, t, llvm::Constant::getNullValue(t), [&] {
      return target_->atomic(atomic_kind(op), rt.dtype, p.regs[j], v.regs[j], desired ? desired->regs[j] : nullptr,
                             order, scope, used);
    });
  }
  LVal g;
  if (used && !dup[LinearLayout::lane] && !dup[LinearLayout::warp]) {
    for (size_t j = 0; j < old.size(); ++j) g.regs.push_back(old[j & ~static_cast<size_t>(copies)]);
  } else if (used) {  // the old values reach the other copies through shared memory
    const int64_t esize = element_bytes(rt);
    llvm::Value* base = scratch(rt.numel() * esize);
    barrier();
    const std::vector<llvm::Value*> mine = thread_coords(ll);
    auto at = [&](size_t j) {
      llvm::Value* e = flat_index(at_register(mine, ll, static_cast<int64_t>(j)), rt.shape);
      return smem_at(b_.CreateAdd(base, b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(esize)))));
    };
    for (size_t j = 0; j < old.size(); ++j)
      if (old[j]) when(first, [&] { b_.CreateStore(old[j], at(j)); });
    barrier();
    for (size_t j = 0; j < old.size(); ++j) g.regs.push_back(b_.CreateLoad(t, at(j)));
  } else {
    g.regs.assign(old.size(), llvm::UndefValue::get(t));
  }
  if (order != ir::MemOrder::relaxed && order != ir::MemOrder::release) barrier();  // (what follows after it)
  define(op, g);
}

// ---- shared buffers

namespace {

int64_t memdesc_bytes(const ir::Type& t) { return t.numel() * ir::dtype_bytes(t.dtype); }
int64_t tile_bytes(const ir::Type& t) {
  const size_t n = t.shape.size();
  return t.shape[n - 2] * t.shape[n - 1] * ir::dtype_bytes(t.dtype);
}

}  // namespace

void LayoutLowering::plan_shared_buffers() {
  // Ops numbered in program order; an op's span runs to the last op nested in it.
  std::map<const ir::Op*, std::pair<int64_t, int64_t>> span;
  int64_t next = 0;
  std::function<void(const ir::Block&)> number = [&](const ir::Block& block) {
    for (auto& op : block.ops) {
      int64_t first = next++;
      for (auto& region : op->regions) number(*region);
      span[op.get()] = {first, next - 1};
    }
  };
  number(f_.body);
  // A buffer lives from its local_alloc to the end of the last op of its block that uses it.
  auto placed_here = [](const ir::Op* op) {  // ops whose result is a buffer of shared memory
    return op && (op->code == OpCode::LocalAlloc ||
                  (op->code == OpCode::ConvertLayout && op->results[0]->type.layout->kind == ir::Layout::Kind::shared));
  };
  std::map<const ir::Op*, int64_t> last;
  f_.walk([&](const ir::Op& op) {
    for (const ir::Value* v : op.operands) {
      if (!placed_here(v->def)) continue;
      const ir::Op* user = &op;
      if (op.code == OpCode::LocalLoad)
        if (const ir::Op* dot = sunk_to_dot(op)) user = dot;  // (read where the dot is)
      // (up to the op in the buffer's block; or in a warp_specialize op's region: a ring made
      // before it is the consumers' until their last use, the producer's copies into it all
      // read by then)
      while (user->parent != v->def->parent && user->parent && user->parent->parent &&
             user->parent->parent->code != OpCode::WarpSpecialize)
        user = user->parent->parent;
      last[v->def] = std::max(last[v->def], span[user].second);
    }
  });
  struct Live {
    int64_t from, to, offset, end;
  };
  std::vector<Live> placed;
  f_.walk([&](const ir::Op& op) {
    if (!placed_here(&op)) return;
    const int64_t from = span[&op].first, to = std::max(from, last[&op]);
    const int64_t align = wgmma_ ? 1024 : 128;  // (wgmma's swizzle atoms start at multiples of 1024)
    const int64_t bytes = (memdesc_bytes(op.results[0]->type) + align - 1) / align * align;
    int64_t offset = 0;
    for (bool moved = true; moved;) {  // first fit among the buffers live at the same time
      moved = false;
      for (const Live& l : placed)
        if (l.from <= to && from <= l.to && offset < l.end && l.offset < offset + bytes) offset = l.end, moved = true;
    }
    placed.push_back({from, to, offset, offset + bytes});
    buffers_[&op] = {offset, offset + bytes};
    smem_bytes_ = std::max(smem_bytes_, offset + bytes);
  });
  for (auto& [op, s] : span) {
    int64_t floor = 0;
    for (const Live& l : placed)
      if (l.from <= s.first && s.first <= l.to) floor = std::max(floor, l.end);
    scratch_floor_[op] = floor;
  }
}

void LayoutLowering::emit_to_shared(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  const ir::Value* x = op.operands[0];
  const LinearLayout& ll = linear(x->type);
  llvm::Value* base = b_.getInt32(static_cast<uint32_t>(buffers_.at(&op).first));
  barrier();  // (its bytes may have been scratch or another buffer that threads still read)
  const LVal& src = val(x);
  for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); ++r) {
    std::vector<llvm::Value*> c = coords(ll, r);
    llvm::Value* bits =
        src.bits.empty() ? to_mem(src.regs[static_cast<size_t>(r)], rt.dtype) : src.bits[static_cast<size_t>(r)];
    b_.CreateStore(bits, smem_at(b_.CreateAdd(base, shared_offset(rt, c[0], c[1]))));
  }
  if (wgmma_) ptx(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "", {});  // (wgmma reads it)
  barrier();
  LVal g;
  g.view = base;
  define(op, g);
}

void LayoutLowering::emit_local_alloc(const ir::Op& op) {
  barrier();  // its bytes may have been another buffer's, or scratch, that threads still read
  LVal g;
  g.smem = buffers_.at(&op).first;
  define(op, g);
}

llvm::Value* LayoutLowering::shared_offset(const ir::Type& desc, llvm::Value* row, llvm::Value* col) {
  const ir::Layout& l = *desc.layout;
  const size_t n = desc.shape.size();
  const bool rows_contiguous = l.order[0] == 1;  // elements of a row lie together
  llvm::Value* r = rows_contiguous ? row : col;
  llvm::Value* c = rows_contiguous ? col : row;
  const int64_t line = rows_contiguous ? desc.shape[n - 1] : desc.shape[n - 2];
  const int64_t rows = rows_contiguous ? desc.shape[n - 2] : desc.shape[n - 1];
  const int64_t width = l.block ? std::min(l.block, line) : line;  // of a stored row (a column block's)
  auto k = [&](int64_t x) { return b_.getInt32(static_cast<uint32_t>(x)); };
  llvm::Value* phase = b_.CreateURem(b_.CreateUDiv(r, k(l.per_phase)), k(l.max_phase));
  llvm::Value* in_block = b_.CreateURem(c, k(width));
  llvm::Value* chunk = b_.CreateXor(b_.CreateUDiv(in_block, k(l.vec)), phase);
  llvm::Value* e =
      b_.CreateAdd(b_.CreateMul(r, k(width)), b_.CreateAdd(b_.CreateMul(chunk, k(l.vec)), b_.CreateURem(c, k(l.vec))));
  e = b_.CreateAdd(e, b_.CreateMul(b_.CreateUDiv(c, k(width)), k(rows * width)));
  return b_.CreateMul(e, k(ir::dtype_bytes(desc.dtype)));
}

bool LayoutLowering::zero_bits(const ir::Value* v) {
  if (v->def && v->def->code == OpCode::Splat) v = v->def->operands[0];
  if (!v->def || v->def->code != OpCode::Constant) return false;
  const ir::Attr& a = v->def->attrs.at("value");
  if (std::holds_alternative<int64_t>(a)) return std::get<int64_t>(a) == 0;
  return std::holds_alternative<double>(a) && std::get<double>(a) == 0.0 && !std::signbit(std::get<double>(a));
}

void LayoutLowering::emit_async_copy(const ir::Op& op) {
  const ir::Type& desc = op.operands[0]->type;
  const ir::Value* ptrs_v = op.operands[2];
  const ir::Value* mask = op.operands.size() > 3 ? op.operands[3] : nullptr;
  const ir::Type& pt = ptrs_v->type;
  const LinearLayout& ll = linear(pt);
  const int64_t esize = ir::dtype_bytes(desc.dtype);
  const ir::Value* other = op.operands.size() > 4 ? op.operands[4] : nullptr;
  const bool rows_contiguous = desc.layout->order[0] == 1;
  int64_t v = rows_contiguous ? std::min<int64_t>(vector_width(pt, ptrs_v, mask, static_cast<int>(pt.shape.size()) - 1),
                                                  desc.layout->vec)
                              : 1;
  if (v * esize < 4) v = 1;               // cp.async moves 4, 8 or 16 bytes
  if (other && !zero_bits(other)) v = 1;  // (and fills with zeros only)
  llvm::Value* tile =
      b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(val(op.operands[0]).smem)),
                   b_.CreateMul(val(op.operands[1]).scalar, b_.getInt32(static_cast<uint32_t>(tile_bytes(desc)))));
  const LVal& ptrs = val(ptrs_v);
  const std::vector<llvm::Value*> mine = thread_coords(ll);
  for (int64_t j = 0; j < ll.in_size(LinearLayout::reg); j += v) {
    std::vector<llvm::Value*> c = at_register(mine, ll, j);
    llvm::Value* dst = smem_at(b_.CreateAdd(tile, shared_offset(desc, c[0], c[1])));
    llvm::Value* src = b_.CreateAddrSpaceCast(ptrs.regs[static_cast<size_t>(j)], b_.getPtrTy(1));
    llvm::Value* on = mask ? val(mask).regs[static_cast<size_t>(j)] : b_.getTrue();
    if (v > 1) {
      const int64_t bytes = v * esize;
      llvm::Value* size = b_.CreateSelect(on, b_.getInt32(static_cast<uint32_t>(bytes)), b_.getInt32(0));
      ptx(b_.getVoidTy(),
          str_cat("cp.async.", bytes == 16 ? "cg" : "ca", ".shared.global [$0], [$1], ", bytes, ", $2;"), "r,l,r",
          {b_.CreatePtrToInt(dst, b_.getInt32Ty()), src, size});
      continue;
    }
    // One element: loaded now (zero where masked off) and stored (the copy is done at once).
    llvm::Type* mt = mem_type(desc.dtype);
    llvm::Value* alt =
        other ? to_mem(val(other).regs[static_cast<size_t>(j)], desc.dtype) : llvm::Constant::getNullValue(mt);
    llvm::Value* x = when_value(on, mt, alt, [&] { return b_.CreateLoad(mt, src); });
    b_.CreateStore(x, dst);
  }
}

void LayoutLowering::emit_local_load(const ir::Op& op) {
  const ir::Type& desc = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  llvm::Value* tile =
      b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(val(op.operands[0]).smem)),
                   b_.CreateMul(val(op.operands[1]).scalar, b_.getInt32(static_cast<uint32_t>(tile_bytes(desc)))));
  if (rt.layout->kind == ir::Layout::Kind::shared) {  // read in place by its dot (wgmma)
    const bool perm = op.has_attr("perm") && op.ints_attr("perm") == std::vector<int64_t>{1, 0};
    if (!ir::same_layout(rt.layout, perm ? desc.layout->transposed() : desc.layout))
      unsupported(op, str_cat("a view ", rt.str(), " of tiles laid out ", desc.str()));
    LVal g;
    g.view = tile;
    return define(op, g);
  }
  // (a tile each thread reads back alone, `own`: not by ldmatrix, whose lanes read others' copies)
  if (!op.has_attr("own") && ldmatrix_load(op, tile)) return;
  const bool transposed = op.has_attr("perm") && op.ints_attr("perm") == std::vector<int64_t>{1, 0};
  const LinearLayout& ll = linear(rt);
  llvm::Type* mt = mem_type(desc.dtype);
  const int64_t v = shared_vector(rt, desc, transposed);
  const int64_t esize = ir::dtype_bytes(desc.dtype);
  LVal g;
  for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); r += v) {
    std::vector<llvm::Value*> c = coords(ll, r);
    llvm::Value* at = shared_offset(desc, transposed ? c[1] : c[0], transposed ? c[0] : c[1]);
    std::vector<llvm::Value*> xs;
    if (v > 1) {  // (v elements of one 16-byte chunk: one access, as 32-bit words where they fill them)
      auto* vt = llvm::FixedVectorType::get(mt, static_cast<unsigned>(v));
      llvm::Type* lt = v * esize >= 4 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(
                                            b_.getInt32Ty(), static_cast<unsigned>(v * esize / 4)))
                                      : vt;
      llvm::Value* w = b_.CreateAlignedLoad(lt, smem_at(b_.CreateAdd(tile, at)), llvm::Align(v * esize));
      llvm::Value* all = lt == vt ? w : b_.CreateBitCast(w, vt);
      for (int64_t k = 0; k < v; ++k) xs.push_back(b_.CreateExtractElement(all, uint64_t(k)));
    } else {
      xs.push_back(b_.CreateLoad(mt, smem_at(b_.CreateAdd(tile, at))));
    }
    for (llvm::Value* x : xs) {
      if (ir::is_f8(desc.dtype)) g.bits.push_back(x);
      g.regs.push_back(from_mem(x, desc.dtype));
    }
  }
  define(op, g);
}

int64_t LayoutLowering::shared_vector(const ir::Type& rt, const ir::Type& desc, bool transposed) {
  if (transposed || rt.shape.size() != 2 || desc.layout->kind != ir::Layout::Kind::shared) return 1;
  const LinearLayout& ll = linear(rt);
  const size_t cdim = static_cast<size_t>(desc.layout->order[0]);
  // A thread's first v registers run along the tile's contiguous dimension within a chunk of
  // the swizzle (vec elements stay together), and every other basis starts a group of v there.
  int64_t v = std::min<int64_t>(ir::contiguous_registers(ll, static_cast<int>(cdim)), desc.layout->vec);
  for (; v > 1; v /= 2) {
    bool aligned = true;
    const auto& regs = ll.bases[LinearLayout::reg];
    for (size_t i = 0; i < regs.size(); ++i)
      if ((int64_t{1} << i) >= v) aligned &= regs[i][cdim] % v == 0;
    for (int kind : {LinearLayout::lane, LinearLayout::warp})
      for (const auto& b : ll.bases[static_cast<size_t>(kind)]) aligned &= b[cdim] % v == 0;
    if (aligned) break;
  }
  return v;
}

const ir::Op* LayoutLowering::sunk_to_dot(const ir::Op& op) {
  const ir::Value* v = op.results[0].get();
  const ir::Block& block = *op.parent;
  int uses = 0;
  const ir::Op* dot = nullptr;
  ir::for_each_use(block, v, [&](const ir::Op& user, size_t i) {
    ++uses;
    if (user.parent == &block && user.code == OpCode::Dot && i < 2) dot = &user;
  });
  if (uses != 1 || !dot || dot->results[0]->type.layout->kind != ir::Layout::Kind::mma) return nullptr;
  bool after = false;
  for (auto& o : block.ops) {
    if (o.get() == dot) return after ? dot : nullptr;
    if (after && (!o->regions.empty() || o->code == OpCode::AsyncWait || o->code == OpCode::LocalAlloc)) return nullptr;
    after |= o.get() == &op;
  }
  return nullptr;
}

bool LayoutLowering::ldmatrix_load(const ir::Op& op, llvm::Value* tile) {
  const ir::Type& desc = op.operands[0]->type;
  const ir::Type& rt = op.results[0]->type;
  const int64_t eb = ir::dtype_bytes(desc.dtype);
  if ((eb != 2 && eb != 1) || rt.shape.size() != 2 || desc.layout->vec * eb != 16) return false;
  const int64_t n = 4 / eb;  // (elements a 32-bit word)
  const bool transposed = op.has_attr("perm") && op.ints_attr("perm") == std::vector<int64_t>{1, 0};
  // The result's bases in the tile's coordinates, as (s, c): c the dimension contiguous in
  // shared memory, s the other.
  const LinearLayout& ll = linear(rt);
  const int cdim = static_cast<int>(desc.layout->order[0]);  // of the tile
  auto sc = [transposed, cdim](const std::vector<int64_t>& b) {
    std::vector<int64_t> t = transposed ? std::vector<int64_t>{b[1], b[0]} : b;
    return std::pair<int64_t, int64_t>{t[1 - cdim], t[cdim]};
  };
  using P = std::pair<int64_t, int64_t>;
  const auto& reg = ll.bases[LinearLayout::reg];
  const auto& lane = ll.bases[LinearLayout::lane];
  const size_t word_bits = static_cast<size_t>(n == 4 ? 2 : 1);  // (register bits within a word)
  if (reg.size() < word_bits || lane.size() != 5) return false;
  // plain: a lane's n elements lie together in a row of the tile; trans: two 16-bit elements in
  // two rows (ldmatrix.trans)
  bool plain = sc(lane[0]) == P{0, n} && sc(lane[1]) == P{0, 2 * n} && sc(lane[2]) == P{1, 0} &&
               sc(lane[3]) == P{2, 0} && sc(lane[4]) == P{4, 0};
  for (size_t i = 0; i < word_bits; ++i) plain = plain && sc(reg[i]) == P{0, int64_t{1} << i};
  const bool trans = !plain && n == 2 && sc(reg[0]) == P{1, 0} && sc(lane[0]) == P{2, 0} && sc(lane[1]) == P{4, 0} &&
                     sc(lane[2]) == P{0, 1} && sc(lane[3]) == P{0, 2} && sc(lane[4]) == P{0, 4};
  if (!plain && !trans) return false;
  for (size_t i = word_bits; i < reg.size(); ++i)
    if (sc(reg[i]).second % (4 * n)) return false;  // every block starts at a 16-byte chunk
  for (const auto& w : ll.bases[LinearLayout::warp])
    if (sc(w).second % (4 * n)) return false;
  const int64_t words = ll.in_size(LinearLayout::reg) / n;
  // This thread's block origin from its warp, and the row its lane's address names.
  llvm::Value* lane_id = b_.CreateURem(tid_, b_.getInt32(32));
  llvm::Value* warp_id = b_.CreateUDiv(tid_, b_.getInt32(32));
  llvm::Value* s0 = b_.CreateAnd(lane_id, b_.getInt32(7));
  llvm::Value* c0 = b_.getInt32(0);
  const auto& warps = ll.bases[LinearLayout::warp];
  for (size_t bit = 0; bit < warps.size(); ++bit) {
    llvm::Value* on = b_.CreateAnd(b_.CreateLShr(warp_id, b_.getInt32(static_cast<uint32_t>(bit))), b_.getInt32(1));
    auto [s, c] = sc(warps[bit]);
    s0 = b_.CreateXor(s0, b_.CreateMul(on, b_.getInt32(static_cast<uint32_t>(s))));
    c0 = b_.CreateXor(c0, b_.CreateMul(on, b_.getInt32(static_cast<uint32_t>(c))));
  }
  // One ldmatrix.xm of the words `ws` (m of them): lane l names row l % 8 of block l / 8, block
  // i being word ws[i] (its origin: the word's register bits, and the warp's).
  auto group = [this, s0, c0, lane_id, tile, cdim, trans, n, &desc, &ll, sc](const std::vector<int64_t>& ws) {
    const int64_t m = static_cast<int64_t>(ws.size());
    llvm::Value* blk = b_.CreateAnd(b_.CreateLShr(lane_id, b_.getInt32(3)), b_.getInt32(static_cast<uint32_t>(m - 1)));
    llvm::Value* s = nullptr;
    llvm::Value* c = nullptr;
    for (int64_t i = m; i-- > 0;) {
      auto [bs, bc] = sc(ll.coords(n * ws[static_cast<size_t>(i)], 0, 0));
      llvm::Value* is = b_.CreateICmpEQ(blk, b_.getInt32(static_cast<uint32_t>(i)));
      s = s ? b_.CreateSelect(is, b_.getInt32(static_cast<uint32_t>(bs)), s) : b_.getInt32(static_cast<uint32_t>(bs));
      c = c ? b_.CreateSelect(is, b_.getInt32(static_cast<uint32_t>(bc)), c) : b_.getInt32(static_cast<uint32_t>(bc));
    }
    s = b_.CreateXor(s, s0);
    c = b_.CreateXor(c, c0);
    llvm::Value* row = cdim == 1 ? s : c;
    llvm::Value* col = cdim == 1 ? c : s;
    llvm::Value* addr = b_.CreatePtrToInt(smem_at(b_.CreateAdd(tile, shared_offset(desc, row, col))), b_.getInt32Ty());
    std::vector<llvm::Type*> rts(static_cast<size_t>(m), b_.getInt32Ty());
    std::string outs, cons;
    for (int64_t i = 0; i < m; ++i) outs += str_cat(i ? "," : "", "$", i), cons += "=r,";
    llvm::Value* res =
        ptx(m == 1 ? static_cast<llvm::Type*>(b_.getInt32Ty()) : llvm::StructType::get(ctx_, rts),
            str_cat("ldmatrix.sync.aligned.m8n8.x", m, trans ? ".trans" : "", ".shared.b16 {", outs, "}, [$", m, "];"),
            cons + "r", {addr});
    llvm::cast<llvm::CallInst>(res)->addFnAttr(llvm::Attribute::Convergent);  // (the warp's, together)
    std::vector<llvm::Value*> got;
    for (int64_t i = 0; i < m; ++i)
      got.push_back(m == 1 ? res : b_.CreateExtractValue(res, {static_cast<unsigned>(i)}));
    return got;
  };
  // The words in groups of up to four; for a dot, each group's words in one k step (32 bytes
  // of K), so that a k step's fragments are loaded together and die after it.
  const ir::Op* dot = sunk_to_dot(op);
  std::vector<int64_t> order(static_cast<size_t>(words));
  for (int64_t w = 0; w < words; ++w) order[static_cast<size_t>(w)] = w;
  if (dot) {
    const int kdim = dot->operands[0] == op.results[0].get() ? 1 : 0;
    const int64_t kstep = 8 * n;
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return ll.coords(n * x, 0, 0)[kdim] / kstep < ll.coords(n * y, 0, 0)[kdim] / kstep;
    });
  }
  const int64_t per = std::min<int64_t>(4, words);  // (words is a power of two)
  std::vector<std::vector<int64_t>> groups;
  for (int64_t q = 0; q < words; q += per) groups.emplace_back(order.begin() + q, order.begin() + q + per);
  LVal g;
  if (dot) {
    auto cache = std::make_shared<std::vector<llvm::Value*>>(static_cast<size_t>(words), nullptr);
    auto where = std::make_shared<std::vector<size_t>>(static_cast<size_t>(words));
    for (size_t i = 0; i < groups.size(); ++i)
      for (int64_t w : groups[i]) (*where)[static_cast<size_t>(w)] = i;
    g.lazy_word = std::make_shared<std::function<llvm::Value*(int64_t)>>([group, cache, where, groups](int64_t w) {
      if (!(*cache)[static_cast<size_t>(w)]) {
        const std::vector<int64_t>& ws = groups[(*where)[static_cast<size_t>(w)]];
        std::vector<llvm::Value*> got = group(ws);
        for (size_t i = 0; i < ws.size(); ++i) (*cache)[static_cast<size_t>(ws[i])] = got[i];
      }
      return (*cache)[static_cast<size_t>(w)];
    });
    define(op, g);
    return true;
  }
  g.words.resize(static_cast<size_t>(words));
  for (const std::vector<int64_t>& ws : groups) {
    std::vector<llvm::Value*> got = group(ws);
    for (size_t i = 0; i < ws.size(); ++i) g.words[static_cast<size_t>(ws[i])] = got[i];
  }
  llvm::Type* et = b_.getIntNTy(static_cast<unsigned>(32 / n));
  for (llvm::Value* w : g.words)
    for (int64_t i = 0; i < n; ++i) {
      llvm::Value* bits = b_.CreateTrunc(i ? b_.CreateLShr(w, static_cast<uint64_t>(32 / n * i)) : w, et);
      if (ir::is_f8(desc.dtype)) g.bits.push_back(bits);
      g.regs.push_back(from_mem(desc.dtype == DType::f16 ? b_.CreateBitCast(bits, b_.getHalfTy()) : bits, desc.dtype));
    }
  define(op, g);
  return true;
}

}  // namespace tiledist::codegen::gpu_ir
