// Where a layout puts each register (codegen/gpu_ir/lowering.h), and moving elements between
// layouts: within each thread's registers where the layouts allow it, else through shared
// memory (every thread writes what it holds, everyone reads what it needs).
#include "codegen/gpu_ir/lowering.h"

namespace tiledist::codegen::gpu_ir {

using ir::LinearLayout;

const LinearLayout& LayoutLowering::linear(const ir::Type& t) {
  TD_ASSERT(t.layout && t.is_tensor(), "a tensor without a layout in the GPU IR lowering");
  std::string key = t.str();
  auto it = linear_.find(key);
  if (it != linear_.end()) return it->second;
  return linear_.emplace(key, ir::to_linear(*t.layout, t.shape)).first->second;
}

std::vector<llvm::Value*> LayoutLowering::thread_coords(const LinearLayout& ll) {
  const int ws = target_->warp_size();
  llvm::Value* lane = b_.CreateURem(tid_, b_.getInt32(ws));
  llvm::Value* warp = b_.CreateUDiv(tid_, b_.getInt32(ws));
  std::vector<llvm::Value*> c(ll.shape.size(), b_.getInt32(0));
  for (int in : {LinearLayout::lane, LinearLayout::warp}) {
    llvm::Value* id = in == LinearLayout::lane ? lane : warp;
    for (size_t bit = 0; bit < ll.bases[in].size(); ++bit) {
      llvm::Value* on = b_.CreateAnd(b_.CreateLShr(id, b_.getInt32(static_cast<uint32_t>(bit))), b_.getInt32(1));
      for (size_t d = 0; d < c.size(); ++d)
        if (int64_t v = ll.bases[in][bit][d])
          c[d] = b_.CreateXor(c[d], b_.CreateMul(on, b_.getInt32(static_cast<uint32_t>(v))));
    }
  }
  return c;
}

llvm::Value* LayoutLowering::holds_first_copy(const std::array<int64_t, 3>& dup) {
  const int ws = target_->warp_size();
  llvm::Value* on = b_.getTrue();
  if (dup[LinearLayout::lane])
    on = b_.CreateICmpEQ(
        b_.CreateAnd(b_.CreateURem(tid_, b_.getInt32(ws)), b_.getInt32(static_cast<uint32_t>(dup[LinearLayout::lane]))),
        b_.getInt32(0));
  if (dup[LinearLayout::warp])
    on = b_.CreateAnd(on, b_.CreateICmpEQ(b_.CreateAnd(b_.CreateUDiv(tid_, b_.getInt32(ws)),
                                                       b_.getInt32(static_cast<uint32_t>(dup[LinearLayout::warp]))),
                                          b_.getInt32(0)));
  return on;
}

std::vector<llvm::Value*> LayoutLowering::coords(const LinearLayout& ll, int64_t r) {
  return at_register(thread_coords(ll), ll, r);
}

std::vector<llvm::Value*> LayoutLowering::at_register(std::vector<llvm::Value*> mine, const LinearLayout& ll,
                                                      int64_t r) {
  std::vector<int64_t> own = ll.coords(r, 0, 0);
  for (size_t d = 0; d < mine.size(); ++d)
    if (own[d]) mine[d] = b_.CreateXor(mine[d], b_.getInt32(static_cast<uint32_t>(own[d])));
  return mine;
}

int64_t LayoutLowering::register_at(const LinearLayout& ll, const std::vector<int64_t>& c) {
  for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); ++r)
    if (ll.coords(r, 0, 0) == c) return r;
  return -1;
}

std::optional<std::vector<int64_t>> LayoutLowering::gather(const LinearLayout& from, const LinearLayout& to,
                                                           const CoordMap& map) {
  for (int in : {LinearLayout::lane, LinearLayout::warp}) {
    if (from.bases[in].size() != to.bases[in].size()) return std::nullopt;
    for (size_t bit = 0; bit < to.bases[in].size(); ++bit)
      if (map(to.bases[in][bit]) != from.bases[in][bit]) return std::nullopt;
  }
  std::vector<int64_t> regs;
  for (int64_t r = 0; r < to.in_size(LinearLayout::reg); ++r) {
    int64_t s = register_at(from, map(to.coords(r, 0, 0)));
    if (s < 0) return std::nullopt;
    regs.push_back(s);
  }
  return regs;
}

llvm::Value* LayoutLowering::flat_index(const std::vector<llvm::Value*>& c, const std::vector<int64_t>& shape) {
  llvm::Value* e = b_.getInt32(0);
  for (size_t d = 0; d < c.size(); ++d)
    e = b_.CreateAdd(b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(shape[d]))), c[d]);
  return e;
}

llvm::Value* LayoutLowering::smem_at(llvm::Value* byte_offset) {
  return b_.CreateGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(byte_offset, b_.getInt64Ty()));
}

llvm::Value* LayoutLowering::scratch(int64_t bytes) {
  auto it = scratch_floor_.find(current_);
  const int64_t floor = it == scratch_floor_.end() ? 0 : it->second;
  smem_bytes_ = std::max(smem_bytes_, floor + bytes);
  return b_.getInt32(static_cast<uint32_t>(floor));
}

LVal LayoutLowering::move(const ir::Value* v, const ir::Type& to_type, const CoordMap& map) {
  const ir::Type& from_type = v->type;
  const LinearLayout& from = linear(from_type);
  const LinearLayout& to = linear(to_type);
  const LVal& src = val(v);
  LVal out;
  if (auto perm = gather(from, to, map)) {
    for (int64_t s : *perm) out.regs.push_back(src.regs[static_cast<size_t>(s)]);
    if (!src.bits.empty())
      for (int64_t s : *perm) out.bits.push_back(src.bits[static_cast<size_t>(s)]);
    if (!src.wide.empty())
      for (int64_t s : *perm) out.wide.push_back(src.wide[static_cast<size_t>(s)]);
    // (ldmatrix's words where each moves whole: n registers from a word's n, in order)
    const size_t n = src.words.empty() ? 0 : static_cast<size_t>(4 / ir::dtype_bytes(from_type.dtype));
    bool words = n && perm->size() % n == 0;
    for (size_t i = 0; words && i < perm->size(); i += n)
      for (size_t k = 0; words && k < n; ++k)
        words = (*perm)[i] % static_cast<int64_t>(n) == 0 && (*perm)[i + k] == (*perm)[i] + static_cast<int64_t>(k);
    for (size_t i = 0; words && i < perm->size(); i += n)
      out.words.push_back(src.words[static_cast<size_t>((*perm)[i]) / n]);
    return out;
  }
  // Through shared memory: each thread writes its registers at their elements' places, then
  // reads the elements of its new registers.
  // (f8 values with their memory bits move as the bits, which the registers are read back from)
  const bool as_bits = ir::is_f8(from_type.dtype) && !src.bits.empty();
  llvm::Type* t = as_bits ? b_.getInt32Ty() : buf_type(from_type);
  const int64_t esize = element_bytes(from_type);
  llvm::Value* base = scratch(from_type.numel() * esize);
  barrier();
  stage(v, base, as_bits);
  barrier();
  const std::vector<llvm::Value*> mine = thread_coords(to);
  for (int64_t r = 0; r < to.in_size(LinearLayout::reg); ++r) {
    std::vector<llvm::Value*> c = at_register(mine, to, r);
    // map() is linear in the coordinates' bits: apply it to each bit's contribution.
    std::vector<llvm::Value*> sc(from_type.shape.size(), b_.getInt32(0));
    for (size_t d = 0; d < c.size(); ++d)
      for (int64_t bit = 1; bit < to_type.shape[d]; bit *= 2) {
        std::vector<int64_t> unit(c.size(), 0);
        unit[d] = bit;
        std::vector<int64_t> m = map(unit);
        llvm::Value* on = b_.CreateICmpNE(b_.CreateAnd(c[d], b_.getInt32(static_cast<uint32_t>(bit))), b_.getInt32(0));
        for (size_t k = 0; k < m.size(); ++k)
          if (m[k])
            sc[k] = b_.CreateXor(sc[k], b_.CreateSelect(on, b_.getInt32(static_cast<uint32_t>(m[k])), b_.getInt32(0)));
      }
    llvm::Value* e = flat_index(sc, from_type.shape);
    llvm::Value* x =
        b_.CreateLoad(t, smem_at(b_.CreateAdd(base, b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(esize))))));
    if (from_type.dtype == DType::i1 && !from_type.is_ptr) x = b_.CreateICmpNE(x, llvm::ConstantInt::get(t, 0));
    if (as_bits) {
      out.bits.push_back(b_.CreateTrunc(x, b_.getInt8Ty()));
      x = from_mem(out.bits.back(), from_type.dtype);
    }
    out.regs.push_back(x);
  }
  return out;
}

int64_t LayoutLowering::element_bytes(const ir::Type& t) {
  if (t.is_ptr || t.dtype == DType::i64 || t.dtype == DType::f64) return 8;
  return t.dtype == DType::i1 ? 1 : 4;
}

int64_t LayoutLowering::stage(const ir::Value* v, llvm::Value* base, bool as_bits) {
  const ir::Type& type = v->type;
  const LinearLayout& ll = linear(type);
  const int64_t esize = element_bytes(type);
  const std::vector<llvm::Value*> mine = thread_coords(ll);
  for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); ++r) {
    std::vector<llvm::Value*> c = at_register(mine, ll, r);
    llvm::Value* x = as_bits ? b_.CreateZExt(val(v).bits[static_cast<size_t>(r)], b_.getInt32Ty())
                             : val(v).regs[static_cast<size_t>(r)];
    if (type.dtype == DType::i1 && !type.is_ptr) x = b_.CreateZExt(x, b_.getInt8Ty());
    llvm::Value* e = flat_index(c, type.shape);
    b_.CreateStore(x, smem_at(b_.CreateAdd(base, b_.CreateMul(e, b_.getInt32(static_cast<uint32_t>(esize))))));
  }
  return type.numel() * esize;
}

void LayoutLowering::emit_arange(const ir::Op& op) {
  const ir::Type& rt = op.results[0]->type;
  const LinearLayout& ll = linear(rt);
  const int32_t start = static_cast<int32_t>(op.int_attr("start"));
  std::vector<llvm::Value*> mine = thread_coords(ll);
  LVal g;
  for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); ++r) {
    int64_t own = ll.coords(r, 0, 0)[0];
    g.regs.push_back(b_.CreateAdd(b_.CreateXor(mine[0], b_.getInt32(static_cast<uint32_t>(own))), b_.getInt32(start)));
  }
  define(op, g);
}

}  // namespace tiledist::codegen::gpu_ir
