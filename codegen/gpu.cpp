// The GPU lowering, shared by NVPTX and AMDGCN (codegen/gpu_target.h: what each target gives).
// A program instance is one CTA (workgroup) of `num_warps` warps (wavefronts) of threads. A block
// tensor of N elements is spread cyclically over the threads: element e (in row-major order)
// lives in thread e % T, slot e / T, so consecutive threads touch consecutive addresses
// (coalesced). Elementwise ops stay in registers; ops that move elements between threads
// (broadcast, transpose, reductions, dot) go through dynamic shared memory between two
// barriers. Scalars are uniform: every thread computes them, and side effects on scalars are
// done by thread 0. On NVIDIA tensor cores, dot's accumulator has an MMA layout of its own
// (mma.sync, wgmma), and pipelined dot loops copy their tiles ahead (cp.async, TMA).
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "codegen/axis_info.h"
#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "codegen/gpu_target.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/MDBuilder.h"
#include "runtime/device_world.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"

namespace tiledist::codegen {

namespace {

/// A value in generated code: a uniform scalar, or this thread's slots of a tensor.
struct GVal {
  llvm::Value* scalar = nullptr;
  std::vector<llvm::Value*> slots;
  /// Slots in the MMA accumulator layout instead of the cyclic one: slot 4*i + r is register r
  /// of the warp's i-th 16x8 tile (see tile_of). Only dot produces it and only loops carry it;
  /// every other use sees the value converted to the cyclic layout.
  bool mma = false;
};

class GpuLowering : public Elements {
 public:
  GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make)
      : GpuLowering(f, ctx, opts, make, std::make_unique<llvm::Module>(f.name, ctx)) {}

  GpuModule run() {
    if (threads_ > 1024)
      throw Error(str_cat("tiledist: kernel '", f_.name, "': num_warps = ", opts_.num_warps, " makes ", threads_,
                          " threads per program on ", opts_.arch, " (", target_->warp_size(), " a warp); at most 1024 run together"));
    module_->setTargetTriple(target_->triple());
    if (!opts_.data_layout.empty()) module_->setDataLayout(opts_.data_layout);
    std::vector<llvm::Type*> params;
    for (auto& a : f_.body.args) params.push_back(target_->param_type(reg_type(a->type)));
    const bool with_world = uses_world(f_.body);
    if (with_world) params.push_back(b_.getPtrTy(1));  // the DeviceWorld (runtime/device_world.h)
    find_wgmma_loops();  // (and the TMA tensor maps they take)
    first_map_ = static_cast<unsigned>(params.size());
    for (size_t i = 0; i < tma_recipes_.size(); ++i) params.push_back(b_.getPtrTy());
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f_.name, module_.get());
    for (auto& a : f_.body.args) fn_->getArg(a->index)->setName(a->name);  // (AMDGPU metadata lists them)
    target_->define_kernel(fn_, block_threads(), first_map_, static_cast<unsigned>(tma_recipes_.size()));
    smem_ = new llvm::GlobalVariable(*module_, llvm::ArrayType::get(b_.getInt8Ty(), 0), false,
                                     llvm::GlobalValue::ExternalLinkage, nullptr, "tiledist_smem", nullptr,
                                     llvm::GlobalValue::NotThreadLocal, 3);
    smem_->setAlignment(llvm::Align(16));
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    tid_ = target_->thread_id();
    for (auto& a : f_.body.args) vals_[a.get()] = GVal{target_->param(fn_->getArg(a->index)), {}};
    if (with_world) world_ = fn_->getArg(static_cast<unsigned>(f_.body.args.size()));
    uses_ = ir::count_uses(f_.body);
    max_vec_ = narrow_memory(f_) ? 8 : 4;
    if (!wgmma_shapes_.empty()) smem_->setAlignment(llvm::Align(1024));  // wgmma's 128-byte swizzle atoms
    if (ws_) emit_warp_specialized_entry();
    emit_block(f_.body);
    if (target_->static_shared_memory() && smem_bytes_ > 0) {
      // The scratch area as a static array of the size the kernel needs (the code object then
      // states its LDS use, and a launch gives no dynamic size).
      auto* type = llvm::ArrayType::get(b_.getInt8Ty(), static_cast<uint64_t>(smem_bytes_));
      auto* fixed = new llvm::GlobalVariable(*module_, type, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(type),
                                             "tiledist_smem.static", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      fixed->setAlignment(smem_->getAlign());
      smem_->replaceAllUsesWith(fixed);
      smem_->eraseFromParent();
      fixed->setName("tiledist_smem");
    }
    verify_lowered(opts_.arch.c_str());
    return GpuModule{std::move(module_), f_.name, smem_bytes_, block_threads(), with_world, tma_recipes_};
  }
  void without_warp_specialization() { ws_allowed_ = false; }
  bool warp_specialized() const { return ws_.has_value(); }
  /// Threads per program: the layouts' threads_, and a producer warpgroup where warp specialized.
  int block_threads() const { return threads_ + (ws_ ? 128 : 0); }

 private:
  GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make,
              std::unique_ptr<llvm::Module> m)
      : Elements(ctx, *m), f_(f), ctx_(ctx), opts_(opts), module_(std::move(m)), target_(make(b_, *module_, opts)),
        threads_(opts.num_warps * target_->warp_size()) {}

  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what) {
    throw Error::at(op.name(), op.loc, str_cat(what, " is not supported on ", opts_.arch, " yet"));
  }

  // ---- Elements' hooks
  llvm::Value* math(OpCode code, llvm::Value* x) override { return target_->math(code, x); }
  llvm::Value* bf16_bits(llvm::Value* v) override {
    if (!target_->bf16_convert()) return Elements::bf16_bits(v);
    return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getInt16Ty());
  }
  /// The values of an f8 format: all 256 codes (for decoding), or the non-negative finite ones
  /// in ascending order (for rounding), as constant arrays.
  llvm::GlobalVariable* f8_table(DType d, bool positive_only) {
    std::string name = str_cat("tiledist_", ir::dtype_name(d), positive_only ? "_finite" : "_values");
    if (auto* g = module_->getGlobalVariable(name, true)) return g;
    std::vector<llvm::Constant*> values;
    int count = positive_only ? max_finite_code(d) + 1 : 256;
    for (int c = 0; c < count; ++c) {
      float v = d == DType::f8e4m3 ? f8e4m3_bits_to_float(static_cast<uint8_t>(c)) : f8e5m2_bits_to_float(static_cast<uint8_t>(c));
      values.push_back(llvm::ConstantFP::get(b_.getFloatTy(), v));
    }
    auto* ty = llvm::ArrayType::get(b_.getFloatTy(), values.size());
    return new llvm::GlobalVariable(*module_, ty, true, llvm::GlobalValue::InternalLinkage,
                                    llvm::ConstantArray::get(ty, values), name);
  }
  static int max_finite_code(DType d) { return d == DType::f8e4m3 ? 0x7E : 0x7B; }

  llvm::Value* f8_from_bits(llvm::Value* bits, DType d) override {
    llvm::GlobalVariable* t = f8_table(d, false);
    return b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(t->getValueType(), t, {b_.getInt32(0), b_.CreateZExt(bits, b_.getInt32Ty())}));
  }

  /// Round to nearest even, saturating finite overflow (as the host conversion does): binary
  /// search for the largest code whose value is <= |v|, then pick it or the next one.
  llvm::Value* f8_to_bits(llvm::Value* v, DType d) override {
    llvm::GlobalVariable* t = f8_table(d, true);
    int max_code = max_finite_code(d);
    auto value_at = [&](llvm::Value* code) {
      return b_.CreateLoad(b_.getFloatTy(), b_.CreateGEP(t->getValueType(), t, {b_.getInt32(0), code}));
    };
    llvm::Value* a = target_->fabs(v);
    llvm::Value* lo = b_.getInt32(0);
    for (int step = 64; step >= 1; step /= 2) {
      llvm::Value* probe = b_.CreateAdd(lo, b_.getInt32(step));
      llvm::Value* in_range = b_.CreateICmpSLE(probe, b_.getInt32(max_code));
      llvm::Value* safe = b_.CreateSelect(in_range, probe, b_.getInt32(0));
      llvm::Value* take = b_.CreateAnd(in_range, b_.CreateFCmpOLE(value_at(safe), a));
      lo = b_.CreateSelect(take, probe, lo);
    }
    llvm::Value* hi = b_.CreateSelect(b_.CreateICmpSLT(lo, b_.getInt32(max_code)), b_.CreateAdd(lo, b_.getInt32(1)), lo);
    llvm::Value* below = b_.CreateFSub(a, value_at(lo));
    llvm::Value* above = b_.CreateFSub(value_at(hi), a);
    llvm::Value* lo_even = b_.CreateICmpEQ(b_.CreateAnd(lo, b_.getInt32(1)), b_.getInt32(0));
    llvm::Value* pick_hi = b_.CreateOr(b_.CreateFCmpOLT(above, below), b_.CreateAnd(b_.CreateFCmpOEQ(above, below),
                                                                                     b_.CreateNot(lo_even)));
    llvm::Value* code = b_.CreateSelect(b_.CreateAnd(pick_hi, b_.CreateICmpNE(hi, lo)), hi, lo);
    if (d == DType::f8e5m2) {  // e5m2 has infinities
      llvm::Value* inf = b_.CreateFCmpOEQ(a, llvm::ConstantFP::getInfinity(b_.getFloatTy()));
      code = b_.CreateSelect(inf, b_.getInt32(0x7C), code);
    }
    llvm::Value* nan = b_.CreateFCmpUNO(v, v);
    code = b_.CreateSelect(nan, b_.getInt32(d == DType::f8e4m3 ? 0x7F : 0x7E), code);
    llvm::Value* sign = b_.CreateLShr(b_.CreateBitCast(v, b_.getInt32Ty()), 24);
    code = b_.CreateOr(code, b_.CreateAnd(sign, b_.getInt32(0x80)));
    return b_.CreateTrunc(code, b_.getInt8Ty());
  }

  // ---- layout: element index of slot j of this thread, and validity
  /// Consecutive elements per thread: max_vec_ (16-byte accesses: 4 f32, or 8 bf16 where the
  /// kernel's tensor memory is all 16-bit or narrower), or down to 2, where every thread gets
  /// whole vectors of them, else 1. A function of the element count only (within a kernel), so
  /// that every operand of an elementwise op has the same layout.
  int64_t vec_of(const ir::Type& t) const {
    for (int64_t v = max_vec_; v >= 2; v /= 2)
      if (t.numel() % (v * threads_) == 0) return v;
    return 1;
  }
  /// Whether every tensor the kernel loads or stores has elements of at most 2 bytes (and there
  /// is at least one).
  static bool narrow_memory(const ir::Function& f) {
    bool any = false, wide = false;
    f.walk([&](const ir::Op& op) {
      const ir::Type* t = op.code == OpCode::Load ? &op.results[0]->type : op.code == OpCode::Store ? &op.operands[0]->type : nullptr;
      if (!t || !t->is_tensor()) return;
      any = true;
      wide |= ir::dtype_bytes(t->dtype) > 2;
    });
    return any && !wide;
  }
  int64_t slots_of(const ir::Type& t) const { return (t.numel() + threads_ - 1) / threads_; }
  /// The widest vector access for a load or store of `t` at `ptr` under `mask`: a power of two
  /// up to vec_of(t) whose runs the axis analysis proves contiguous, aligned and masked as a
  /// whole (the slots of a layout vector are contiguous, so are its halves); 1 for none.
  int64_t vector_width(const ir::Type& t, const ir::Value* ptr, const ir::Value* mask) {
    for (int64_t v = vec_of(t); v > 1; v /= 2)
      if (axis_.vectorizable(ptr, mask, v)) return v;
    return 1;
  }
  /// Slot j of this thread holds element (j / V) * V * T + tid * V + j % V.
  llvm::Value* element_index(const ir::Type& t, int64_t j) {
    int64_t v = vec_of(t);
    llvm::Value* lane = v == 1 ? tid_ : b_.CreateMul(tid_, b_.getInt32(static_cast<int32_t>(v)));
    return b_.CreateAdd(lane, b_.getInt32(static_cast<int32_t>((j / v) * v * threads_ + j % v)));
  }
  /// Whether slot j holds an element (the last slot may not, in every thread).
  llvm::Value* valid(const ir::Type& t, int64_t j) {
    if ((j + 1) * threads_ <= t.numel()) return b_.getTrue();
    return b_.CreateICmpSLT(element_index(t, j), b_.getInt32(static_cast<int32_t>(t.numel())));
  }
  static std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size(), 1);
    for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
    return s;
  }
  std::vector<llvm::Value*> multi_index(llvm::Value* e, const std::vector<int64_t>& shape) {
    auto strides = strides_of(shape);
    std::vector<llvm::Value*> idx;
    for (size_t d = 0; d < shape.size(); ++d)
      idx.push_back(b_.CreateURem(b_.CreateUDiv(e, b_.getInt32(static_cast<int32_t>(strides[d]))),
                                  b_.getInt32(static_cast<int32_t>(shape[d]))));
    return idx;
  }
  llvm::Value* linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& strides) {
    llvm::Value* off = b_.getInt32(0);
    for (size_t d = 0; d < idx.size(); ++d)
      if (strides[d]) off = b_.CreateAdd(off, b_.CreateMul(idx[d], b_.getInt32(static_cast<int32_t>(strides[d]))));
    return off;
  }

  // ---- shared memory staging
  /// `bytes` of dynamic shared memory at offset `base` of the scratch area, which starts above
  /// whatever a pipelined loop being lowered keeps there (its operand buffers).
  llvm::Value* scratch(int64_t base, int64_t bytes) {
    smem_bytes_ = std::max(smem_bytes_, smem_floor_ + base + bytes);
    return b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, smem_floor_ + base);
  }
  /// The program's threads meet: all of them, or where warp specialized the consumers (named
  /// barrier 1; the producer warpgroup never takes part).
  void barrier() {
    TD_ASSERT(!producer_, "a barrier in the producer's code");
    if (ws_) b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_sync_cnt, {}, {b_.getInt32(1), b_.getInt32(threads_)});
    else target_->barrier();
  }
  llvm::Type* buf_type(const ir::Type& t) { return !t.is_ptr && t.dtype == DType::i1 ? b_.getInt8Ty() : reg_type(t); }
  int64_t elem_bytes(const ir::Type& t) {
    return static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(buf_type(t)));
  }
  /// Stages a tensor in shared memory at byte offset `base`; returns the staged array.
  llvm::Value* stage(const ir::Value* v, int64_t base) {
    const ir::Type& t = v->type;
    llvm::Value* arr = scratch(base, t.numel() * elem_bytes(t));
    const GVal& g = val(v);
    for (int64_t j = 0; j < slots_of(t); ++j)
      when(valid(t, j), [&] {
        llvm::Value* x = g.slots[j];
        if (!t.is_ptr && t.dtype == DType::i1) x = b_.CreateZExt(x, b_.getInt8Ty());
        b_.CreateStore(x, b_.CreateGEP(buf_type(t), arr, element_index(t, j)));
      });
    return arr;
  }
  llvm::Value* staged_load(llvm::Value* arr, const ir::Type& t, llvm::Value* index) {
    llvm::Value* x = b_.CreateLoad(buf_type(t), b_.CreateGEP(buf_type(t), arr, index));
    return !t.is_ptr && t.dtype == DType::i1 ? b_.CreateTrunc(x, b_.getInt1Ty()) : x;
  }
  llvm::Value* is_thread0() { return b_.CreateICmpEQ(tid_, b_.getInt32(0)); }
  /// A scalar computed by thread 0 only (a side effect), made known to every thread.
  llvm::Value* from_thread0(llvm::Type* t, const std::function<llvm::Value*()>& value) {
    if (producer_) return value();  // (one thread runs the producer's code)
    llvm::Value* v = when_value(is_thread0(), t, llvm::UndefValue::get(t), value);
    int64_t bytes = static_cast<int64_t>(module_->getDataLayout().getTypeAllocSize(t));
    llvm::Value* slot = scratch(0, bytes);
    barrier();
    when(is_thread0(), [&] { b_.CreateStore(v, slot); });
    barrier();
    llvm::Value* r = b_.CreateLoad(t, slot);
    barrier();
    return r;
  }

  /// The value as lowered, in whatever layout it has.
  GVal& raw(const ir::Value* v) {
    auto it = vals_.find(v);
    TD_ASSERT(it != vals_.end(), "value used before lowering");
    return it->second;
  }
  /// The value in the cyclic layout (converted once per consuming op, see emit()).
  GVal& val(const ir::Value* v) {
    auto c = converted_.find(v);
    if (c != converted_.end()) return c->second;
    GVal& g = raw(v);
    if (!g.mma) return g;
    return converted_[v] = cyclic_from_mma(g, v->type);
  }

  // ---- the MMA accumulator layout
  /// How the 16x8 tiles of an MMA accumulator are shared by the warps: where the warps can
  /// form a grid of WM x WN warp tiles of wtm x wtn elements (wtn a multiple of 16), warp w owns
  /// the warp tile (w / WN, w % WN) and its tiles in row-major order (operand fragments are
  /// reused across a warp tile); otherwise warp w takes the tiles w, w + W, ...
  /// On AMD GPUs the tiles are MFMA's (GpuTarget::mfma_tile: 32x32 or 16x16, a wavefront's 64
  /// lanes holding 16 or 4 registers each), wavefront w taking the tiles w, w + W, ...
  struct MmaTiles {
    int64_t M, N, tiles_n, tiles, per_warp;
    int64_t warps_n = 0, wtm = 0, wtn = 0;  // the warp grid, when warps_n > 0
    int64_t tile = 0;  // MFMA: the tile's side (0: mma.sync's 16x8)
    int regs = 4;      // registers per tile and thread
  };
  MmaTiles mma_tiles(const ir::Type& t) const {
    int64_t M = t.shape[0], N = t.shape[1];
    if (int64_t side = target_->mfma_tile(M, N)) {
      int64_t tiles = (M / side) * (N / side), waves = threads_ / target_->warp_size();
      MmaTiles m{M, N, N / side, tiles, (tiles + waves - 1) / waves};
      m.tile = side, m.regs = static_cast<int>(side * side / 64);
      return m;
    }
    int64_t tiles = (M / 16) * (N / 8), warps = threads_ / 32;
    MmaTiles m{M, N, N / 8, tiles, (tiles + warps - 1) / warps};
    if (wgmma_shapes_.count({M, N})) {  // a warpgroup's wgmma.m64nN: warp w holds rows [16w, 16w + 16)
      m.warps_n = 1, m.wtm = 16, m.wtn = N, m.per_warp = N / 8;
      return m;
    }
    int64_t best = 0;
    for (int64_t wm = 1; wm <= warps; ++wm) {  // the squarest warp tile
      if (warps % wm || M % (16 * wm) || N % (16 * (warps / wm))) continue;
      int64_t wtm = M / wm, wtn = N / (warps / wm);
      if (best && wtm + wtn >= best) continue;
      best = wtm + wtn;
      m.warps_n = warps / wm, m.wtm = wtm, m.wtn = wtn, m.per_warp = (wtm / 16) * (wtn / 8);
    }
    return m;
  }
  /// Tensor cores take bf16/f16 (m16n8k16, sm_80+) and f8 (m16n8k32, sm_89+: our sm_90a).
  bool mma_eligible(const ir::Op& dot) const {
    const ir::Type& at = dot.operands[0]->type;
    const ir::Type& bt = dot.operands[1]->type;
    const ir::Type& rt = dot.results[0]->type;
    if (int64_t side = target_->mfma_tile(rt.shape[0], rt.shape[1]))  // K a multiple of the MFMA's
      return target_->mfma_takes(at.dtype, bt.dtype) && at.shape[1] % mfma_k(side, at.dtype) == 0;
    if (!target_->mma_sync() || rt.shape[0] % 16 != 0 || rt.shape[1] % 8 != 0) return false;
    if (at.dtype == DType::bf16 || at.dtype == DType::f16) return bt.dtype == at.dtype && at.shape[1] % 16 == 0;
    auto f8 = [](DType d) { return d == DType::f8e4m3 || d == DType::f8e5m2; };
    return f8(at.dtype) && f8(bt.dtype) && target_->hopper() && at.shape[1] % 32 == 0;
  }
  /// K of one MFMA of tile side `side`: a lane's 8 bytes of operand times the 64 / side lanes
  /// that share a row (32x32x8 and 16x16x16 for 16-bit operands, 32x32x16 and 16x16x32 for f8).
  static int64_t mfma_k(int64_t side, DType d) { return 8 / ir::dtype_bytes(d) * (64 / side); }
  llvm::Value* warp_id() { return b_.CreateUDiv(tid_, b_.getInt32(target_->warp_size())); }
  /// Tile t's register r: its row-major element index; `tile_ok` whether this warp has tile i.
  llvm::Value* mma_index(const MmaTiles& m, llvm::Value* t, int r) {
    if (m.tile) return mfma_index(m, t, r);
    llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
    llvm::Value* row = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(t, b_.getInt32(static_cast<int32_t>(m.tiles_n))), b_.getInt32(16)),
                                    b_.CreateLShr(lane, 2));
    if (r >= 2) row = b_.CreateAdd(row, b_.getInt32(8));
    llvm::Value* col = b_.CreateAdd(b_.CreateMul(b_.CreateURem(t, b_.getInt32(static_cast<int32_t>(m.tiles_n))), b_.getInt32(8)),
                                    b_.CreateAdd(b_.CreateMul(b_.CreateAnd(lane, b_.getInt32(3)), b_.getInt32(2)), b_.getInt32(r & 1)));
    return b_.CreateAdd(b_.CreateMul(row, b_.getInt32(static_cast<int32_t>(m.N))), col);
  }
  /// MFMA's accumulator: in a tile of side S, register r of lane l holds row
  /// 4 (64 / S) (r / 4) + 4 (l / S) + r % 4 and column l % S.
  llvm::Value* mfma_index(const MmaTiles& m, llvm::Value* t, int r) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    llvm::Value* lane = b_.CreateURem(tid_, c(64));
    llvm::Value* row = b_.CreateAdd(c(4 * (64 / m.tile) * (r / 4) + r % 4), b_.CreateMul(b_.CreateUDiv(lane, c(m.tile)), c(4)));
    row = b_.CreateAdd(row, b_.CreateMul(b_.CreateUDiv(t, c(m.tiles_n)), c(m.tile)));
    llvm::Value* col = b_.CreateAdd(b_.CreateURem(lane, c(m.tile)), b_.CreateMul(b_.CreateURem(t, c(m.tiles_n)), c(m.tile)));
    return b_.CreateAdd(b_.CreateMul(row, c(m.N)), col);
  }
  llvm::Value* tile_of(const MmaTiles& m, int64_t i) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    if (m.warps_n) {
      int64_t per_row = m.wtn / 8;
      llvm::Value* row = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(warp_id(), c(m.warps_n)), c(m.wtm / 16)), c(i / per_row));
      llvm::Value* col = b_.CreateAdd(b_.CreateMul(b_.CreateURem(warp_id(), c(m.warps_n)), c(per_row)), c(i % per_row));
      return b_.CreateAdd(b_.CreateMul(row, c(m.tiles_n)), col);
    }
    return b_.CreateAdd(warp_id(), c(i * (threads_ / target_->warp_size())));
  }
  llvm::Value* tile_ok(const MmaTiles& m, int64_t i) {
    if (m.warps_n || (i + 1) * (threads_ / target_->warp_size()) <= m.tiles) return b_.getTrue();
    return b_.CreateICmpSLT(tile_of(m, i), b_.getInt32(static_cast<int32_t>(m.tiles)));
  }
  GVal cyclic_from_mma(const GVal& g, const ir::Type& t) {
    MmaTiles m = mma_tiles(t);
    llvm::Value* buf = scratch(0, m.M * m.N * 4);
    llvm::Type* f32 = b_.getFloatTy();
    barrier();
    for (int64_t i = 0; i < m.per_warp; ++i)
      when(tile_ok(m, i), [&] {
        for (int r = 0; r < m.regs; ++r)
          b_.CreateStore(g.slots[i * m.regs + r], b_.CreateGEP(f32, buf, mma_index(m, tile_of(m, i), r)));
      });
    barrier();
    GVal out;
    for (int64_t j = 0; j < slots_of(t); ++j)
      out.slots.push_back(when_value(valid(t, j), f32, llvm::UndefValue::get(f32),
                                        [&] { return b_.CreateLoad(f32, b_.CreateGEP(f32, buf, element_index(t, j))); }));
    barrier();
    return out;
  }
  GVal mma_from(const ir::Value* v) {
    GVal& g = raw(v);
    if (g.mma) return g;
    MmaTiles m = mma_tiles(v->type);
    llvm::Type* f32 = b_.getFloatTy();
    if (v->def && v->def->code == OpCode::Splat) {  // the same value everywhere: no staging
      GVal out;
      out.mma = true;
      out.slots.assign(m.per_warp * m.regs, val(v->def->operands[0]).scalar);
      return out;
    }
    llvm::Value* arr = stage(v, 0);
    barrier();
    GVal out;
    out.mma = true;
    for (int64_t i = 0; i < m.per_warp; ++i)
      for (int r = 0; r < m.regs; ++r)
        out.slots.push_back(when_value(tile_ok(m, i), f32, llvm::UndefValue::get(f32), [&] {
          return b_.CreateLoad(f32, b_.CreateGEP(f32, arr, mma_index(m, tile_of(m, i), r)));
        }));
    barrier();
    return out;
  }
  llvm::Value* element(const ir::Value* v, int64_t j) {
    const GVal& g = val(v);
    return g.slots.empty() ? g.scalar : g.slots[j];
  }
  void define(const ir::Op& op, GVal g) { vals_[op.results[0].get()] = std::move(g); }

  void emit_block(const ir::Block& block) {
    for (auto& op : block.ops) emit(*op);
  }

  void emit(const ir::Op& op) {
    converted_.clear();
    if (op.code == OpCode::Load && loads_into_mma(op)) return void(mma_loads_.insert(&op));  // done by its user
    // Operands in the MMA layout are converted up front, where the conversion dominates every
    // use inside the op (a dot its accumulator and hint take them as they are; loops manage their
    // own). A dot's A and B in the MMA layout (a cast accumulator: attention's P) are converted
    // here too, not where the dot stages them, which is shared memory the conversion would use.
    const bool in_mma = in_mma_layout(op);
    const bool mma_dot = op.code == OpCode::Dot && mma_eligible(op);
    bool keeps_layout = op.code == OpCode::Hint || op.code == OpCode::For || op.code == OpCode::Yield ||
                        !op.regions.empty() || stores_from_mma(op) || in_mma;
    if (!keeps_layout)
      for (size_t i = 0; i < op.operands.size(); ++i) {
        const ir::Value* v = op.operands[i];
        if (mma_dot && i == 2) continue;
        if (vals_.count(v) && raw(v).mma && !converted_.count(v)) converted_[v] = cyclic_from_mma(raw(v), v->type);
      }
    if (in_mma) emit_in_mma_layout(op);
    else emit_op(op);
    converted_.clear();
  }

  llvm::Value* constant(const ir::Op& op) {
    const ir::Type& rt = op.results[0]->type;
    const ir::Attr& a = op.attrs.at("value");
    if (rt.is_float()) {
      double d = std::holds_alternative<double>(a) ? std::get<double>(a) : double(std::get<int64_t>(a));
      if (narrow(rt.dtype)) d = round_to_dtype(static_cast<float>(d), rt.dtype);
      return llvm::ConstantFP::get(reg_type(rt), d);
    }
    return llvm::ConstantInt::get(reg_type(rt), static_cast<uint64_t>(std::get<int64_t>(a)), true);
  }

  void emit_op(const ir::Op& op) {
    const ir::Type* rt = op.results.empty() ? nullptr : &op.results[0]->type;
    switch (op.code) {
      case OpCode::Constant: return define(op, {constant(op), {}});
      case OpCode::ProgramId:
      case OpCode::NumPrograms: {
        int axis = static_cast<int>(op.int_attr("axis"));
        return define(op, {op.code == OpCode::ProgramId ? target_->program_id(axis) : target_->num_programs(axis), {}});
      }
      case OpCode::Arange: {
        GVal g;
        for (int64_t j = 0; j < slots_of(*rt); ++j)
          g.slots.push_back(b_.CreateAdd(element_index(*rt, j), b_.getInt32(static_cast<int32_t>(op.int_attr("start")))));
        return define(op, g);
      }
      case OpCode::Splat:
        return define(op, {nullptr, std::vector<llvm::Value*>(slots_of(*rt), val(op.operands[0]).scalar)});
      case OpCode::Hint:
        return define(op, raw(op.operands[0]));  // keeps its layout
      case OpCode::Reshape:
      case OpCode::ExpandDims:
      case OpCode::ConsumeToken:
        return define(op, val(op.operands[0]));  // the same elements in the same order
      case OpCode::Broadcast: return emit_permute(op);
      case OpCode::Trans:
        if (deferred_loads_.count(&op)) return;  // B^T's tile, which its pipelined loop reads K-major
        return emit_permute(op);
      case OpCode::Load:
        if (deferred_loads_.count(&op)) return;  // filled by its pipelined loop
        return emit_load(op);
      case OpCode::Store: return emit_store(op);
      case OpCode::AtomicRMW:
      case OpCode::AtomicCAS: return emit_atomic(op);
      case OpCode::Reduce: return emit_reduce(op);
      case OpCode::Dot: return emit_dot(op);
      case OpCode::For: return emit_for(op);
      case OpCode::If: return emit_if(op);
      case OpCode::While: return emit_while(op);
      case OpCode::Yield:
      case OpCode::Condition: return;
      case OpCode::Return:
        b_.CreateRetVoid();
        return;
      case OpCode::Rank: return define(op, {world_field(offsetof(runtime::DeviceWorld, rank), b_.getInt32Ty()), {}});
      case OpCode::NumRanks:
        return define(op, {world_field(offsetof(runtime::DeviceWorld, num_ranks), b_.getInt32Ty()), {}});
      case OpCode::SymmAt: return emit_symm_at(op);
      case OpCode::Wait: return emit_wait(op);
      case OpCode::Memcpy: return emit_memcpy(op);
      case OpCode::Fence:
        fence(op.str_attr("order"), op.str_attr("scope"));
        return;
      case OpCode::Barrier: return emit_device_barrier();
      default:
        break;
    }
    if (!rt->is_tensor()) {
      std::vector<llvm::Value*> in;
      for (auto* v : op.operands) in.push_back(val(v).scalar);
      return define(op, {elementwise(op, in), {}});
    }
    GVal g;
    for (int64_t j = 0; j < slots_of(*rt); ++j) {
      std::vector<llvm::Value*> in;
      for (auto* v : op.operands) in.push_back(element(v, j));
      g.slots.push_back(elementwise(op, in));
    }
    define(op, g);
  }

  /// Input strides of a broadcast or transpose: element (i0, i1, ...) of the result reads the
  /// input at sum(i_d * strides[d]).
  std::vector<int64_t> permute_strides(const ir::Op& op) {
    const ir::Type& in = op.operands[0]->type;
    const ir::Type& rt = op.results[0]->type;
    auto in_strides = strides_of(in.shape);
    std::vector<int64_t> s(rt.shape.size());
    for (size_t d = 0; d < s.size(); ++d) {
      if (op.code == OpCode::Trans) s[d] = in_strides[op.ints_attr("perm")[d]];
      else s[d] = in.shape[d] == 1 && rt.shape[d] != 1 ? 0 : in_strides[d];
    }
    return s;
  }

  /// Whether the elements of `v` can be recomputed at any index from aranges, splats and
  /// elementwise ops (index arithmetic, masks), rather than read from the thread that holds them.
  bool recomputable(const ir::Value* v, int budget = 24) {
    if (!v->type.is_tensor()) return true;
    const ir::Op* d = v->def;
    if (!d || budget <= 0) return false;
    switch (d->code) {
      case OpCode::Arange: case OpCode::Splat: return true;
      case OpCode::Load: case OpCode::AtomicRMW: case OpCode::AtomicCAS: case OpCode::Reduce: case OpCode::Dot:
      case OpCode::SymmAt: case OpCode::For: case OpCode::If: case OpCode::While:
        return false;
      default:
        if (!d->is_pure() || d->results.size() != 1) return false;
        for (const ir::Value* o : d->operands)
          if (!recomputable(o, budget - 1)) return false;
        return true;
    }
  }
  /// The element of `v` at row-major index `e` (an i32), recomputed (see recomputable). While a
  /// pipelined loop prefetches, scalars of its body are recomputed for a later iteration.
  llvm::Value* recompute(const ir::Value* v, llvm::Value* e) {
    if (!v->type.is_tensor()) return recompute_scalar(v);
    if (!v->def) return advanced(v, recompute(carried_step(v).init, e), recompute(carried_step(v).inc, e));
    const ir::Op& d = *v->def;
    switch (d.code) {
      case OpCode::Arange: return b_.CreateAdd(e, b_.getInt32(static_cast<int32_t>(d.int_attr("start"))));
      case OpCode::Splat: return recompute_scalar(d.operands[0]);
      case OpCode::ExpandDims: case OpCode::Reshape: case OpCode::Hint: case OpCode::ConsumeToken:
        return recompute(d.operands[0], e);
      case OpCode::Broadcast: case OpCode::Trans:
        return recompute(d.operands[0], linear(multi_index(e, v->type.shape), permute_strides(d)));
      default: {
        std::vector<llvm::Value*> in;
        for (const ir::Value* o : d.operands) in.push_back(recompute(o, e));
        return elementwise(d, in);
      }
    }
  }

  /// A loop-carried value that advances by `inc` per iteration, at the iteration prefetched.
  llvm::Value* advanced(const ir::Value* v, llvm::Value* init, llvm::Value* inc) {
    TD_ASSERT(subst_iteration_, "a carried value recomputed outside a prefetch");
    llvm::Value* n = b_.CreateMul(b_.CreateSExt(subst_iteration_, b_.getInt64Ty()), b_.CreateSExtOrTrunc(inc, b_.getInt64Ty()));
    if (v->type.is_ptr) return b_.CreateGEP(mem_type(v->type.dtype), init, n);
    return b_.CreateAdd(init, b_.CreateTrunc(n, init->getType()));
  }
  llvm::Value* recompute_scalar(const ir::Value* v) {
    if (auto it = subst_.find(v); it != subst_.end()) return it->second;
    if (subst_body_ && !v->def && v->owner == subst_body_)
      return advanced(v, recompute_scalar(carried_step(v).init), recompute_scalar(carried_step(v).inc));
    if (!subst_body_ || !v->def || v->def->parent != subst_body_) return val(v).scalar;
    const ir::Op& d = *v->def;
    if (d.code == OpCode::Constant) return constant(d);
    if (d.code == OpCode::Hint || d.code == OpCode::ConsumeToken) return recompute_scalar(d.operands[0]);
    std::vector<llvm::Value*> in;
    for (const ir::Value* o : d.operands) in.push_back(recompute_scalar(o));
    return elementwise(d, in);
  }
  /// Whether `v` can be recomputed for any iteration of the loop whose body is `body`: tensors
  /// as in recomputable(), scalars of the body from its induction variable and outer values.
  bool loop_recomputable(const ir::Value* v, const ir::Block& body, int budget = 32) {
    if (budget <= 0) return false;
    if (!v->def) {
      if (v->owner != &body) return !v->type.is_tensor();
      if (v->index == 0) return true;  // the induction variable
      CarriedStep c = carried_step(v);  // or a value that advances by a fixed step
      return c.init && loop_recomputable(c.init, body, budget - 1) && loop_recomputable(c.inc, body, budget - 1);
    }
    const ir::Op& d = *v->def;
    if (!v->type.is_tensor() && d.parent != &body) return true;
    switch (d.code) {
      case OpCode::Constant: return !v->type.is_tensor();
      case OpCode::Arange: return true;
      case OpCode::ProgramId: case OpCode::NumPrograms: case OpCode::Rank: case OpCode::NumRanks:
      case OpCode::Reduce: case OpCode::Dot:
        return false;  // not elementwise (or, in the body, not hoisted: not worth handling)
      default:
        if (!d.is_pure() || d.results.size() != 1 || !d.regions.empty()) return false;
        for (const ir::Value* o : d.operands)
          if (!loop_recomputable(o, body, budget - 1)) return false;
        return true;
    }
  }

  /// Broadcast and transpose: index arithmetic is recomputed where it is needed; other values
  /// go through shared memory.
  void emit_permute(const ir::Op& op) {
    const ir::Type& in = op.operands[0]->type;
    const ir::Type& rt = op.results[0]->type;
    auto s = permute_strides(op);
    if (recomputable(op.operands[0])) {
      GVal g;
      for (int64_t j = 0; j < slots_of(rt); ++j)
        g.slots.push_back(recompute(op.operands[0], linear(multi_index(element_index(rt, j), rt.shape), s)));
      return define(op, g);
    }
    llvm::Value* arr = stage(op.operands[0], 0);
    barrier();
    GVal g;
    for (int64_t j = 0; j < slots_of(rt); ++j) {
      llvm::Value* src = linear(multi_index(element_index(rt, j), rt.shape), s);
      g.slots.push_back(when_value(valid(rt, j), reg_type(rt.element()), llvm::UndefValue::get(reg_type(rt.element())),
                                      [&] { return staged_load(arr, in, src); }));
    }
    barrier();
    define(op, g);
  }

  void emit_load(const ir::Op& op) {
    const ir::Type& rt = op.results[0]->type;
    DType d = rt.dtype;
    auto one = [&](int64_t j, llvm::Value* ok) -> llvm::Value* {
      llvm::Value* p = element(op.operands[0], j);
      llvm::Value* mask = op.operands.size() > 1 ? element(op.operands[1], j) : nullptr;
      llvm::Value* other = op.operands.size() > 2 ? element(op.operands[2], j) : llvm::Constant::getNullValue(reg_type(rt.element()));
      llvm::Value* cond = mask ? (ok == b_.getTrue() ? mask : b_.CreateAnd(ok, mask)) : ok;
      return when_value(cond, reg_type(rt.element()), other, [&] { return from_mem(b_.CreateLoad(mem_type(d), p), d); });
    };
    // A scalar must be the same in every thread (branches on it contain barriers): thread 0
    // loads it and shares it, rather than each thread reading memory that may be changing.
    if (!rt.is_tensor()) return define(op, {from_thread0(reg_type(rt), [&] { return one(0, b_.getTrue()); }), {}});
    GVal g;
    const ir::Value* mask = op.operands.size() > 1 ? op.operands[1] : nullptr;
    int64_t v = vector_width(rt, op.operands[0], mask);
    if (v > 1) {
      // Each vector of slots is contiguous and aligned in memory, and masked as a whole.
      auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
      llvm::Align align(v * ir::dtype_bytes(d));
      for (int64_t j = 0; j < slots_of(rt); j += v) {
        llvm::Value* on = mask ? element(mask, j) : b_.getTrue();
        llvm::Value* x = when_value(on, vt, llvm::Constant::getNullValue(vt),
                                    [&] { return b_.CreateAlignedLoad(vt, element(op.operands[0], j), align); });
        for (int64_t k = 0; k < v; ++k) {
          llvm::Value* e = from_mem(b_.CreateExtractElement(x, uint64_t(k)), d);
          if (op.operands.size() > 2) e = b_.CreateSelect(on, e, element(op.operands[2], j + k));
          g.slots.push_back(e);
        }
      }
      return define(op, g);
    }
    for (int64_t j = 0; j < slots_of(rt); ++j) g.slots.push_back(one(j, valid(rt, j)));
    define(op, g);
  }

  /// A store of an MMA accumulator whose addresses and mask can be recomputed anywhere: each
  /// thread stores its own fragment elements, two adjacent ones at a time where aligned.
  bool stores_from_mma(const ir::Op& op) {
    if (op.code != OpCode::Store || !vals_.count(op.operands[1]) || !raw(op.operands[1]).mma) return false;
    return recomputable(op.operands[0]) && (op.operands.size() < 3 || recomputable(op.operands[2]));
  }
  void emit_store_from_mma(const ir::Op& op) {
    const ir::Type& pt = op.operands[0]->type;
    DType d = pt.dtype;
    const ir::Value* mask = op.operands.size() > 2 ? op.operands[2] : nullptr;
    const GVal& g = raw(op.operands[1]);
    MmaTiles m = mma_tiles(pt);
    bool pairs = !m.tile && axis_.vectorizable(op.operands[0], mask, 2);  // (MFMA: a thread's registers are rows)
    llvm::Type* mt = mem_type(d);
    for (int64_t i = 0; i < m.per_warp; ++i)
      when(tile_ok(m, i), [&] {
        llvm::Value* tile = tile_of(m, i);
        for (int r = 0; r < m.regs; r += pairs ? 2 : 1) {
          llvm::Value* e = mma_index(m, tile, r);
          llvm::Value* ok = mask ? recompute(mask, e) : b_.getTrue();
          when(ok, [&] {
            llvm::Value* p = recompute(op.operands[0], e);
            if (!pairs) return void(b_.CreateStore(to_mem(g.slots[i * m.regs + r], d), p));
            llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, 2));
            v = b_.CreateInsertElement(v, to_mem(g.slots[i * m.regs + r], d), uint64_t{0});
            v = b_.CreateInsertElement(v, to_mem(g.slots[i * m.regs + r + 1], d), uint64_t{1});
            b_.CreateAlignedStore(v, p, llvm::Align(2 * ir::dtype_bytes(d)));
          });
        }
      });
  }

  // ---- arithmetic in the MMA layout
  // An accumulator's epilogue (acc + a tile loaded from memory, acc * a scale) is done where
  // the accumulator is: each thread on its own fragment elements, loading its own elements of
  // the other tile (in pairs of adjacent columns where they are aligned), rather than through
  // shared memory into the cyclic layout.

  /// Whether `def` (a loop body's) will be done in the MMA layout given its `carried` operand in
  /// it: arithmetic whose other operands are recomputable or loads that can be left to it.
  bool updates_in_mma(const ir::Op& def, const ir::Value* carried) {
    if (!target_->mma_sync() || !mma_arithmetic(def) || uses_[def.results[0].get()] != 1 ||
        std::find(def.operands.begin(), def.operands.end(), carried) == def.operands.end())
      return false;
    for (const ir::Value* v : def.operands) {
      if (v == carried || recomputable(v)) continue;
      if (!v->def || v->def->code != OpCode::Load || uses_[v] != 1 || !only_pure_between(*v->def, def)) return false;
      for (const ir::Value* o : v->def->operands)
        if (!recomputable(o)) return false;
    }
    return true;
  }
  /// Whether `to` follows `from` in its block with only pure, regionless ops between them.
  static bool only_pure_between(const ir::Op& from, const ir::Op& to) {
    if (!from.parent || from.parent != to.parent) return false;
    auto it = std::find_if(from.parent->ops.begin(), from.parent->ops.end(), [&](const auto& p) { return p.get() == &from; });
    for (++it; it != from.parent->ops.end() && it->get() != &to; ++it)
      if (!(*it)->is_pure() || !(*it)->regions.empty()) return false;
    return it != from.parent->ops.end();
  }
  /// Elementwise float arithmetic that can be done in the MMA layout (whose slots are f32
  /// registers, as every float but f64 is).
  static bool mma_arithmetic(const ir::Op& op) {
    if (op.results.size() != 1 || !op.results[0]->type.is_tensor() || !op.results[0]->type.is_float() ||
        op.results[0]->type.dtype == DType::f64)
      return false;
    switch (op.code) {
      case OpCode::Add: case OpCode::Sub: case OpCode::Mul: case OpCode::Div: case OpCode::Min: case OpCode::Max:
      case OpCode::Neg: case OpCode::Abs: case OpCode::Cast: case OpCode::Select:
      case OpCode::Exp: case OpCode::Exp2: case OpCode::Log: case OpCode::Log2: case OpCode::Sqrt: case OpCode::Rsqrt:
      case OpCode::Sin: case OpCode::Cos: case OpCode::Floor: case OpCode::Ceil: case OpCode::Erf:
        return true;
      default:
        return false;
    }
  }
  /// Whether `op` is done in the MMA layout: arithmetic with one use and an operand in it, every
  /// other operand in it too, recomputable at any element, or a load left to `op` (`pending`, or one
  /// already in mma_loads_).
  bool in_mma_layout(const ir::Op& op, const ir::Op* pending = nullptr) {
    // (With one use: a user that needs the cyclic layout converts the result once, as this op
    // would have converted its operand; with more, each such user would convert it again.)
    if (!target_->mma_sync() || !mma_arithmetic(op) || uses_[op.results[0].get()] != 1) return false;
    bool any = false;
    for (const ir::Value* v : op.operands) {
      if (mma_made(v, pending)) any = true;
      else if (!(v->def && (v->def == pending || mma_loads_.count(v->def))) && !recomputable(v)) return false;
    }
    return any;
  }
  /// Whether `v` is (or, not lowered yet, will be) in the MMA layout.
  bool mma_made(const ir::Value* v, const ir::Op* pending) {
    if (vals_.count(v)) return raw(v).mma;
    return v->def && in_mma_layout(*v->def, pending);
  }
  /// Whether load `op` is left to its one user, done in the MMA layout. Only pure ops may lie
  /// between them: the load must not move past a store, a wait or a barrier.
  bool loads_into_mma(const ir::Op& op) {
    const ir::Value* r = op.results[0].get();
    if (!r->type.is_tensor() || uses_[r] != 1 || !op.parent) return false;
    for (const ir::Value* o : op.operands)
      if (!recomputable(o)) return false;
    for (const auto& p : op.parent->ops)  // (its user: the op after it that takes it)
      if (std::find(p->operands.begin(), p->operands.end(), r) != p->operands.end())
        return only_pure_between(op, *p) && in_mma_layout(*p, &op);
    return false;
  }
  /// The elements e and e + 1 of `load`, loaded by this thread (`ok`: whether it holds them).
  std::array<llvm::Value*, 2> load_pair(const ir::Op& load, llvm::Value* e, llvm::Value* ok) {
    const ir::Value* ptr = load.operands[0];
    const ir::Value* mask = load.operands.size() > 1 ? load.operands[1] : nullptr;
    DType d = load.results[0]->type.dtype;
    llvm::Type* t = reg_type(load.results[0]->type.element());
    std::array<llvm::Value*, 2> at = {e, b_.CreateAdd(e, b_.getInt32(1))}, on, other;
    for (int k = 0; k < 2; ++k) {
      on[k] = mask ? recompute(mask, at[k]) : b_.getTrue();
      if (ok != b_.getTrue()) on[k] = b_.CreateAnd(ok, on[k]);
      other[k] = load.operands.size() > 2 ? recompute(load.operands[2], at[k]) : llvm::Constant::getNullValue(t);
    }
    if (ir::dtype_bytes(d) == 4 && axis_.vectorizable(ptr, mask, 2)) {
      // The pair is contiguous, aligned and masked as a whole: one predicated load, no branch
      // (branches around the loads would split the epilogue into blocks, each of whose loads
      // stays in flight, its register held, up to the block where its sum is made).
      llvm::Type* i32 = b_.getInt32Ty();
      auto bits = [&](llvm::Value* v) { return b_.CreateBitCast(to_mem(v, d), i32); };
      llvm::Value* x = ptx(llvm::StructType::get(ctx_, {i32, i32}),
                           "{\nmov.b32 $0, $4;\nmov.b32 $1, $5;\n"
                           "@$2 ld.global.v2.b32 {$0, $1}, [$3];\n}",
                           "=r,=r,b,l,r,r",
                           {on[0], b_.CreateAddrSpaceCast(recompute(ptr, e), b_.getPtrTy(1)),
                            bits(other[0]), bits(other[1])});
      for (int k = 0; k < 2; ++k) at[k] = from_mem(b_.CreateBitCast(b_.CreateExtractValue(x, unsigned(k)), mem_type(d)), d);
      return at;
    }
    if (axis_.vectorizable(ptr, mask, 2)) {
      auto* vt = llvm::FixedVectorType::get(mem_type(d), 2);
      llvm::Value* x = when_value(on[0], vt, llvm::Constant::getNullValue(vt), [&] {
        return b_.CreateAlignedLoad(vt, recompute(ptr, e), llvm::Align(2 * ir::dtype_bytes(d)));
      });
      for (int k = 0; k < 2; ++k) at[k] = b_.CreateSelect(on[0], from_mem(b_.CreateExtractElement(x, uint64_t(k)), d), other[k]);
      return at;
    }
    for (int k = 0; k < 2; ++k)
      at[k] = when_value(on[k], t, other[k], [&] { return from_mem(b_.CreateLoad(mem_type(d), recompute(ptr, at[k])), d); });
    return at;
  }
  void emit_in_mma_layout(const ir::Op& op) {
    MmaTiles m = mma_tiles(op.results[0]->type);
    GVal out;
    out.mma = true;
    for (int64_t i = 0; i < m.per_warp; ++i) {
      llvm::Value* ok = tile_ok(m, i);
      llvm::Value* tile = tile_of(m, i);
      for (int r = 0; r < m.regs; r += 2) {  // registers r and r + 1: elements e and e + 1 (mma.sync)
        llvm::Value* e = mma_index(m, tile, r);
        std::array<std::vector<llvm::Value*>, 2> in;
        for (const ir::Value* v : op.operands) {
          std::array<llvm::Value*, 2> x;
          if (vals_.count(v) && raw(v).mma) x = {raw(v).slots[i * m.regs + r], raw(v).slots[i * m.regs + r + 1]};
          else if (v->def && mma_loads_.count(v->def)) x = load_pair(*v->def, e, ok);
          else x = {recompute(v, e), recompute(v, b_.CreateAdd(e, b_.getInt32(1)))};
          in[0].push_back(x[0]), in[1].push_back(x[1]);
        }
        out.slots.push_back(elementwise(op, in[0]));
        out.slots.push_back(elementwise(op, in[1]));
      }
    }
    define(op, std::move(out));
  }

  void emit_store(const ir::Op& op) {
    if (stores_from_mma(op)) return emit_store_from_mma(op);
    const ir::Type& pt = op.operands[0]->type;
    DType d = pt.dtype;
    auto one = [&](int64_t j, llvm::Value* ok) {
      llvm::Value* mask = op.operands.size() > 2 ? element(op.operands[2], j) : nullptr;
      llvm::Value* cond = mask ? (ok == b_.getTrue() ? mask : b_.CreateAnd(ok, mask)) : ok;
      when(cond, [&] { b_.CreateStore(to_mem(element(op.operands[1], j), d), element(op.operands[0], j)); });
    };
    if (!pt.is_tensor()) return one(0, is_thread0());
    const ir::Value* mask = op.operands.size() > 2 ? op.operands[2] : nullptr;
    int64_t v = vector_width(pt, op.operands[0], mask);
    if (v > 1) {
      auto* vt = llvm::FixedVectorType::get(mem_type(d), static_cast<unsigned>(v));
      llvm::Align align(v * ir::dtype_bytes(d));
      for (int64_t j = 0; j < slots_of(pt); j += v)
        when(mask ? element(mask, j) : b_.getTrue(), [&] {
          llvm::Value* x = llvm::PoisonValue::get(vt);
          for (int64_t k = 0; k < v; ++k) x = b_.CreateInsertElement(x, to_mem(element(op.operands[1], j + k), d), uint64_t(k));
          b_.CreateAlignedStore(x, element(op.operands[0], j), align);
        });
      return;
    }
    for (int64_t j = 0; j < slots_of(pt); ++j) one(j, valid(pt, j));
  }

  // ---- distributed ops and the memory model
  // Orders and scopes are the target's (GpuTarget's load, store, atomic, fence). The world
  // (rank, heaps, timeout) comes from a trailing kernel parameter that points at a
  // runtime::DeviceWorld.

  static bool uses_world(const ir::Block& block) {
    for (const auto& op : block.ops) {
      if (op->code == OpCode::Rank || op->code == OpCode::NumRanks || op->code == OpCode::SymmAt ||
          op->code == OpCode::Wait || op->code == OpCode::Barrier)
        return true;
      for (const auto& r : op->regions)
        if (uses_world(*r)) return true;
    }
    return false;
  }
  llvm::Value* world_field(size_t offset, llvm::Type* t, llvm::Value* index = nullptr) {
    TD_ASSERT(world_, "a world field read by a kernel without the world parameter");
    llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), world_, offset);
    if (index) at = b_.CreateGEP(t, at, index);
    // (Alignment spelled out: the module has no data layout yet, and LLVM's default aligns i64 to 4.)
    auto* ld = b_.CreateAlignedLoad(t, at, llvm::Align(t->getPrimitiveSizeInBits() / 8));
    ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
    return ld;
  }
  /// Inline PTX (NVIDIA's tensor-core paths) that keeps its place among loads, stores and barriers.
  llvm::Value* ptx(llvm::Type* ret, const std::string& text, std::string constraints, const std::vector<llvm::Value*>& args) {
    return inline_asm(b_, ret, text, std::move(constraints), args);
  }
  /// An instruction with no operands that keeps its place (fences, commits, waits).
  void ptx_void(const std::string& text) { ptx(b_.getVoidTy(), text, "", {}); }
  llvm::Value* global_ptr(llvm::Value* p) { return b_.CreateAddrSpaceCast(p, b_.getPtrTy(1)); }
  void fence(const std::string& order, const std::string& scope) { target_->fence(order, scope); }

  /// The thread gives up: it claims the world's failure record (the first to fail keeps it),
  /// fills it, and ends the program (GpuTarget::give_up); the host names the kernel, rank and
  /// what was waited for.
  void fail(runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected, llvm::Value* seen) {
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Value* rec = b_.CreateIntToPtr(world_field(offsetof(runtime::DeviceWorld, failure), i64), b_.getPtrTy(1));
    llvm::Value* old = target_->atomic("cas", ir::DType::i32, rec, b_.getInt32(0), b_.getInt32(static_cast<uint32_t>(kind)),
                                       "relaxed", "sys", true);
    when(b_.CreateICmpEQ(old, b_.getInt32(0)), [&] {
      auto field = [&](size_t offset, llvm::Value* v) {
        b_.CreateAlignedStore(v, b_.CreateConstGEP1_64(b_.getInt8Ty(), rec, offset),
                              llvm::Align(v->getType()->getPrimitiveSizeInBits() / 8), /*volatile*/ true);
      };
      llvm::Value* x = target_->program_id(0);
      llvm::Value* y = target_->program_id(1);
      llvm::Value* z = target_->program_id(2);
      llvm::Value* nx = target_->num_programs(0);
      llvm::Value* ny = target_->num_programs(1);
      field(offsetof(runtime::DeviceFailureRecord, block), b_.CreateAdd(x, b_.CreateMul(nx, b_.CreateAdd(y, b_.CreateMul(ny, z)))));
      field(offsetof(runtime::DeviceFailureRecord, address), b_.CreatePtrToInt(address, i64));
      field(offsetof(runtime::DeviceFailureRecord, expected), b_.CreateSExt(expected, i64));
      field(offsetof(runtime::DeviceFailureRecord, seen), b_.CreateSExt(seen, i64));
      field(offsetof(runtime::DeviceFailureRecord, kernel), b_.getInt32(runtime::kernel_tag(f_.name)));
      fence("seq_cst", "sys");
      field(offsetof(runtime::DeviceFailureRecord, complete), b_.getInt32(1));
      fence("seq_cst", "sys");
    });
    target_->give_up();
  }
  /// if (cond) fail(...): the failing path ends the program.
  void fail_if(llvm::Value* cond, runtime::DeviceFailure kind, llvm::Value* address, llvm::Value* expected, llvm::Value* seen) {
    auto* bad = llvm::BasicBlock::Create(ctx_, "fail", fn_);
    auto* ok = llvm::BasicBlock::Create(ctx_, "ok", fn_);
    b_.CreateCondBr(cond, bad, ok, llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20));
    b_.SetInsertPoint(bad);
    fail(kind, address, expected, seen);
    b_.CreateUnreachable();
    b_.SetInsertPoint(ok);
  }

  /// Spins until `poll()` (emitted in the loop) returns true; past `timeout` nanoseconds (by
  /// default the world's; 0: never) the thread fails with `kind`, reporting `report()`
  /// (address, expected, seen: emitted on the slow path, after a poll), or in a kernel without a
  /// world, where there is no record to fill, traps. The clock is first read after a poll has
  /// failed, not before the first poll: on H200 a %globaltimer read that ptxas placed just
  /// before a wait's first load made that load fault (CUDA_ERROR_ILLEGAL_ADDRESS on a mapped
  /// address) in some kernels (bench/RESULTS.md, 2026-11-23); a wait already satisfied then
  /// reads no clock at all.
  void spin_until(const std::function<llvm::Value*()>& poll, runtime::DeviceFailure kind,
                  const std::function<std::array<llvm::Value*, 3>()>& report, llvm::Value* timeout = nullptr) {
    if (!timeout) timeout = world_field(offsetof(runtime::DeviceWorld, timeout_ns), b_.getInt64Ty());
    llvm::Value* started = local(b_.getInt64Ty(), b_.getInt64(0));  // the clock at the first poll that failed
    auto* spin = llvm::BasicBlock::Create(ctx_, "spin", fn_);
    auto* late = llvm::BasicBlock::Create(ctx_, "spin.late", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "spin.done", fn_);
    b_.CreateBr(spin);
    b_.SetInsertPoint(spin);
    b_.CreateCondBr(poll(), done, late);
    b_.SetInsertPoint(late);
    llvm::Value* now = target_->nanoseconds();
    llvm::Value* was = b_.CreateLoad(b_.getInt64Ty(), started);
    llvm::Value* start = b_.CreateSelect(b_.CreateICmpEQ(was, b_.getInt64(0)), now, was);
    b_.CreateStore(start, started);
    llvm::Value* waited = b_.CreateSub(now, start);
    llvm::Value* late_enough = b_.CreateAnd(b_.CreateICmpNE(timeout, b_.getInt64(0)), b_.CreateICmpUGT(waited, timeout));
    if (world_) {
      auto [address, expected, seen] = report();
      fail_if(late_enough, kind, address, expected, seen);
    } else {
      when(late_enough, [&] { b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {}); });
    }
    b_.CreateBr(spin);
    b_.SetInsertPoint(done);
  }

  /// symm_at(p, r): p's offset in this rank's heap, added to rank r's heap as mapped here.
  void emit_symm_at(const ir::Op& op) {
    using runtime::DeviceFailure;
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Value* r = val(op.operands[1]).scalar;
    llvm::Value* ranks = world_field(offsetof(runtime::DeviceWorld, num_ranks), b_.getInt32Ty());
    llvm::Value* probe = op.operands[0]->type.is_tensor() ? element(op.operands[0], 0) : val(op.operands[0]).scalar;
    fail_if(b_.CreateICmpUGE(r, ranks), DeviceFailure::symm_at_bad_rank, probe, r, ranks);
    const size_t bases = offsetof(runtime::DeviceWorld, bases);
    llvm::Value* mine = world_field(bases, i64, world_field(offsetof(runtime::DeviceWorld, rank), b_.getInt32Ty()));
    llvm::Value* theirs = world_field(bases, i64, r);
    llvm::Value* size = world_field(offsetof(runtime::DeviceWorld, heap_size), i64);
    auto one = [&](llvm::Value* p) {
      llvm::Value* off = b_.CreateSub(b_.CreatePtrToInt(p, i64), mine);
      fail_if(b_.CreateICmpUGE(off, size), DeviceFailure::symm_at_outside_heap, p, r, size);
      return b_.CreateIntToPtr(b_.CreateAdd(theirs, off), p->getType());
    };
    if (!op.operands[0]->type.is_tensor()) return define(op, {one(val(op.operands[0]).scalar), {}});
    GVal g;
    for (int64_t j = 0; j < slots_of(op.operands[0]->type); ++j) g.slots.push_back(one(element(op.operands[0], j)));
    define(op, g);
  }

  /// wait(p, n, v): thread 0 reads each of the n words from p with ld.<acquire|relaxed>.<scope>
  /// until it compares to v, giving up (fail) after the world's timeout; the program's threads
  /// meet after it, so their later loads follow the acquire. The result is the last word read.
  void emit_wait(const ir::Op& op) {
    llvm::Type* t = reg_type(op.results[0]->type);
    if (!producer_ && producer_only_waits_.count(&op))  // (warp specialized: the producer waits)
      return define(op, {llvm::Constant::getNullValue(t), {}});
    const std::string order = op.str_attr("semantic") == "acquire" ? "acquire" : "relaxed";
    const std::string& cmp = op.str_attr("cmp");
    llvm::CmpInst::Predicate pred = cmp == "eq" ? llvm::CmpInst::ICMP_EQ : cmp == "ne" ? llvm::CmpInst::ICMP_NE
                                  : cmp == "lt" ? llvm::CmpInst::ICMP_SLT : cmp == "le" ? llvm::CmpInst::ICMP_SLE
                                  : cmp == "gt" ? llvm::CmpInst::ICMP_SGT : llvm::CmpInst::ICMP_SGE;
    llvm::Value* p = val(op.operands[0]).scalar;
    llvm::Value* n = val(op.operands[1]).scalar;
    llvm::Value* want = val(op.operands[2]).scalar;
    llvm::Value* last = from_thread0(t, [&]() -> llvm::Value* {
      llvm::Value* seen = local(t, llvm::Constant::getNullValue(t));
      counted_loop(b_.getInt32(0), n, 1, [&](llvm::Value* i) {
        llvm::Value* at = b_.CreateGEP(t, p, i);
        llvm::Value* v = nullptr;
        spin_until(
            [&] {
              v = target_->load(t, at, order, op.str_attr("scope"));
              return b_.CreateICmp(pred, v, want);
            },
            runtime::DeviceFailure::wait_timeout, [&] { return std::array<llvm::Value*, 3>{at, want, v}; });
        b_.CreateStore(v, seen);
      });
      return b_.CreateLoad(t, seen);
    });
    define(op, {last, {}});
  }

  /// A barrier of every program on every rank (barrier_all, sync_all): a central counter on
  /// rank 0 and a generation word on every rank (the heaps' reserved words). Thread 0 of each
  /// program reads its rank's generation, arrives with an acq_rel add on the counter; the last
  /// to arrive resets the counter and releases everyone by bumping every rank's generation; the
  /// others spin until theirs moves (or give up after the timeout: a grid larger than the GPU
  /// holds at once would never arrive).
  void emit_device_barrier() {
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* i64 = b_.getInt64Ty();
    barrier();  // the program's threads are here, their writes before thread 0's release
    when(is_thread0(), [&] {
      const size_t bases = offsetof(runtime::DeviceWorld, bases);
      llvm::Value* ranks = world_field(offsetof(runtime::DeviceWorld, num_ranks), i32);
      auto word = [&](llvm::Value* rank, uint64_t offset) {
        return b_.CreateIntToPtr(b_.CreateAdd(world_field(bases, i64, rank), b_.getInt64(offset)), b_.getPtrTy(1));
      };
      llvm::Value* counter = word(b_.getInt32(0), runtime::kBarrierCounterOffset);
      llvm::Value* mine = word(world_field(offsetof(runtime::DeviceWorld, rank), i32), runtime::kBarrierGenerationOffset);
      llvm::Value* nx = target_->num_programs(0);
      llvm::Value* ny = target_->num_programs(1);
      llvm::Value* nz = target_->num_programs(2);
      llvm::Value* total = b_.CreateMul(b_.CreateMul(b_.CreateMul(nx, ny), nz), ranks);
      llvm::Value* generation = target_->load(i32, mine, "acquire", "sys");
      llvm::Value* before = target_->atomic("add", ir::DType::i32, counter, b_.getInt32(1), nullptr, "acq_rel", "sys", true);
      llvm::Value* last = b_.CreateICmpEQ(before, b_.CreateSub(total, b_.getInt32(1)));
      auto* release = llvm::BasicBlock::Create(ctx_, "barrier.release", fn_);
      auto* wait = llvm::BasicBlock::Create(ctx_, "barrier.wait", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "barrier.done", fn_);
      b_.CreateCondBr(last, release, wait);
      b_.SetInsertPoint(release);
      target_->store(counter, b_.getInt32(0), "relaxed", "sys");
      counted_loop(b_.getInt32(0), ranks, 1, [&](llvm::Value* r) {
        target_->store(word(r, runtime::kBarrierGenerationOffset), b_.CreateAdd(generation, b_.getInt32(1)), "release", "sys");
      });
      b_.CreateBr(done);
      b_.SetInsertPoint(wait);
      spin_until(
          [&] {
            llvm::Value* now = target_->load(i32, mine, "acquire", "sys");
            return b_.CreateICmpNE(now, generation);
          },
          runtime::DeviceFailure::barrier_timeout, [&] {
            llvm::Value* arrived = target_->load(i32, counter, "relaxed", "sys");
            return std::array<llvm::Value*, 3>{counter, total, arrived};
          });
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    });
    barrier();
  }

  /// memcpy by the program's threads: 16 bytes at a time where both ends and the size allow,
  /// else bytewise; the threads meet before (the source is written) and after (the copy is
  /// done before whatever the program does next, a signal included).
  void emit_memcpy(const ir::Op& op) {
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Value* dst = global_ptr(val(op.operands[0]).scalar);
    llvm::Value* src = global_ptr(val(op.operands[1]).scalar);
    llvm::Value* n = b_.CreateSExtOrTrunc(val(op.operands[2]).scalar, i64);
    barrier();
    llvm::Value* bits = b_.CreateOr(b_.CreateOr(b_.CreatePtrToInt(dst, i64), b_.CreatePtrToInt(src, i64)), n);
    llvm::Value* tid = b_.CreateZExt(tid_, i64);
    // Each thread moves `unroll` chunks per round, all loads before the stores: enough bytes in
    // flight to cover the latency of a peer's memory. The rest goes a chunk at a time.
    auto copy = [&](int64_t width, int64_t unroll) {
      llvm::Type* t = width == 16 ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(b_.getInt32Ty(), 4)) : b_.getInt8Ty();
      const int64_t stride = width * threads_;
      llvm::Value* start = b_.CreateMul(tid, b_.getInt64(width));
      llvm::Value* rest = start;
      if (unroll > 1) {
        llvm::Value* bound = b_.CreateSub(n, b_.getInt64((unroll - 1) * stride));  // a round fits below it
        counted_loop(start, bound, unroll * stride, [&](llvm::Value* at) {
          std::vector<llvm::Value*> v;
          for (int64_t k = 0; k < unroll; ++k)
            v.push_back(b_.CreateAlignedLoad(t, b_.CreateGEP(b_.getInt8Ty(), src, b_.CreateAdd(at, b_.getInt64(k * stride))),
                                             llvm::Align(width)));
          for (int64_t k = 0; k < unroll; ++k)
            b_.CreateAlignedStore(v[k], b_.CreateGEP(b_.getInt8Ty(), dst, b_.CreateAdd(at, b_.getInt64(k * stride))),
                                  llvm::Align(width));
        });
        // Where the rounds stopped: start + cdiv(bound - start, unroll * stride) rounds.
        llvm::Value* span = b_.CreateSub(bound, start);
        llvm::Value* rounds = b_.CreateSelect(b_.CreateICmpSGT(span, b_.getInt64(0)),
                                              b_.CreateSDiv(b_.CreateAdd(span, b_.getInt64(unroll * stride - 1)),
                                                            b_.getInt64(unroll * stride)),
                                              b_.getInt64(0));
        rest = b_.CreateAdd(start, b_.CreateMul(rounds, b_.getInt64(unroll * stride)));
      }
      counted_loop(rest, n, stride, [&](llvm::Value* at) {
        llvm::Value* v = b_.CreateAlignedLoad(t, b_.CreateGEP(b_.getInt8Ty(), src, at), llvm::Align(width));
        b_.CreateAlignedStore(v, b_.CreateGEP(b_.getInt8Ty(), dst, at), llvm::Align(width));
      });
    };
    llvm::Value* aligned = b_.CreateICmpEQ(b_.CreateAnd(bits, b_.getInt64(15)), b_.getInt64(0));
    auto* vec = llvm::BasicBlock::Create(ctx_, "copy.v4", fn_);
    auto* bytes = llvm::BasicBlock::Create(ctx_, "copy.bytes", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "copy.done", fn_);
    b_.CreateCondBr(aligned, vec, bytes);
    b_.SetInsertPoint(vec);
    copy(16, 4);
    b_.CreateBr(join);
    b_.SetInsertPoint(bytes);
    copy(1, 1);
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    barrier();
  }

  void emit_atomic(const ir::Op& op) {
    const ir::Type& rt = op.results[0]->type;
    bool cas = op.code == OpCode::AtomicCAS;
    const std::string kind = cas ? "cas" : op.str_attr("kind");
    const bool used = uses_[op.results[0].get()] > 0;
    auto one = [&](int64_t j, llvm::Value* ok) -> llvm::Value* {
      llvm::Value* p = element(op.operands[0], j);
      llvm::Value* v = element(op.operands[1], j);
      llvm::Value* mask = !cas && op.operands.size() > 2 ? element(op.operands[2], j) : nullptr;
      llvm::Value* cond = mask ? b_.CreateAnd(ok, mask) : ok;
      llvm::Type* t = reg_type(rt.element());
      return when_value(cond, t, llvm::Constant::getNullValue(t),
                        [&] {
                          return target_->atomic(kind, rt.dtype, p, v, cas ? element(op.operands[2], j) : nullptr,
                                                 op.str_attr("sem"), op.str_attr("scope"), used);
                        });
    };
    if (!rt.is_tensor()) {
      // One thread performs it for the program; a releasing atomic must follow every thread's
      // earlier writes, so the program's threads meet first.
      const std::string& sem = op.str_attr("sem");
      if (sem != "relaxed" && sem != "acquire") barrier();
      if (uses_[op.results[0].get()] == 0) {  // nothing to share: an acquire still orders what follows
        when(is_thread0(), [&] { one(0, b_.getTrue()); });
        if (sem != "relaxed" && sem != "release") barrier();
        return define(op, {llvm::UndefValue::get(reg_type(rt)), {}});
      }
      return define(op, {from_thread0(reg_type(rt), [&] { return one(0, b_.getTrue()); }), {}});
    }
    GVal g;
    for (int64_t j = 0; j < slots_of(rt); ++j) g.slots.push_back(one(j, valid(rt, j)));
    define(op, g);
  }

  /// A whole 1-D tensor reduced to a scalar (softmax, layernorm): each thread combines its
  /// slots, warps combine through butterfly shuffles, and warps through shared memory.
  bool emit_reduce_to_scalar(const ir::Op& op) {
    const ir::Type& in = op.operands[0]->type;
    const std::string& kind = op.str_attr("kind");
    llvm::Type* t = reg_type(in.element());
    if (in.shape.size() != 1 || kind == "argmax" || kind == "argmin" || !(t->isFloatTy() || t->isIntegerTy(32))) return false;
    bool fl = t->isFloatTy();
    llvm::Value* identity = reduce_identity(kind, t);
    auto combine = [&](llvm::Value* a, llvm::Value* x) -> llvm::Value* {
      if (kind == "sum") return fl ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x);
      if (fl) return b_.CreateBinaryIntrinsic(kind == "max" ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, a, x);
      return b_.CreateBinaryIntrinsic(kind == "max" ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, a, x);
    };
    llvm::Value* partial = identity;
    for (int64_t j = 0; j < slots_of(in); ++j)
      partial = combine(partial, b_.CreateSelect(valid(in, j), element(op.operands[0], j), identity));
    const int warp_size = target_->warp_size();
    for (int offset = warp_size / 2; offset >= 1; offset /= 2) partial = combine(partial, target_->shuffle_xor(partial, offset));
    int warps = threads_ / warp_size;
    if (warps > 1) {
      llvm::Value* buf = scratch(0, warps * 4);
      llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(warp_size - 1));
      llvm::Value* warp = b_.CreateUDiv(tid_, b_.getInt32(warp_size));
      barrier();  // the staging area may still be read by an earlier op
      when(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] { b_.CreateStore(partial, b_.CreateGEP(t, buf, warp)); });
      barrier();
      partial = identity;
      for (int w = 0; w < warps; ++w) partial = combine(partial, b_.CreateLoad(t, b_.CreateConstGEP1_32(t, buf, w)));
      barrier();
    }
    define(op, {round(partial, op.results[0]->type.dtype), {}});
    return true;
  }

  /// Reductions: stage the operand; each output element is reduced by the thread that owns it.
  void emit_reduce(const ir::Op& op) {
    if (emit_reduce_to_scalar(op)) return;
    const ir::Type& in = op.operands[0]->type;
    const ir::Type& rt = op.results[0]->type;
    const std::string& kind = op.str_attr("kind");
    int axis = static_cast<int>(op.int_attr("axis"));
    bool arg = kind == "argmax" || kind == "argmin";
    bool fl = in.is_float();
    llvm::Type* acc_t = reg_type(in.element());
    auto in_strides = strides_of(in.shape);
    std::vector<int64_t> kept;
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (static_cast<int>(d) != axis) kept.push_back(in_strides[d]);
    llvm::Value* arr = stage(op.operands[0], 0);
    barrier();
    auto reduce_one = [&](llvm::Value* base) -> llvm::Value* {
      // A loop over the reduced axis (not unrolled: it can be long).
      llvm::Value* acc = local(acc_t, reduce_identity(kind, acc_t));
      llvm::Value* best = local(b_.getInt32Ty(), b_.getInt32(0));
      counted_loop(b_.getInt32(0), b_.getInt32(static_cast<int32_t>(in.shape[axis])), 1, [&](llvm::Value* k) {
        llvm::Value* x = staged_load(arr, in, b_.CreateAdd(base, b_.CreateMul(k, b_.getInt32(static_cast<int32_t>(in_strides[axis])))));
        llvm::Value* a = b_.CreateLoad(acc_t, acc);
        if (kind == "sum") {
          b_.CreateStore(fl ? b_.CreateFAdd(a, x) : b_.CreateAdd(a, x), acc);
          return;
        }
        bool greater = kind == "max" || kind == "argmax";
        llvm::Value* better = fl ? (greater ? b_.CreateFCmpOGT(x, a) : b_.CreateFCmpOLT(x, a))
                                 : (greater ? b_.CreateICmpSGT(x, a) : b_.CreateICmpSLT(x, a));
        b_.CreateStore(b_.CreateSelect(better, x, a), acc);
        b_.CreateStore(b_.CreateSelect(better, k, b_.CreateLoad(b_.getInt32Ty(), best)), best);
      });
      return arg ? b_.CreateLoad(b_.getInt32Ty(), best) : round(b_.CreateLoad(acc_t, acc), rt.dtype);
    };
    GVal g;
    if (!rt.is_tensor()) {
      g.scalar = reduce_one(b_.getInt32(0));
    } else {
      for (int64_t j = 0; j < slots_of(rt); ++j) {
        llvm::Value* base = linear(multi_index(element_index(rt, j), rt.shape), kept);
        g.slots.push_back(when_value(valid(rt, j), reg_type(rt.element()), llvm::UndefValue::get(reg_type(rt.element())),
                                        [&] { return reduce_one(base); }));
      }
    }
    barrier();
    define(op, g);
  }

  /// Stages a 2-D 16- or 8-bit float tensor in shared memory in its memory format (what MMA
  /// consumes), transposed if asked, with each stored row padded by 8 elements so that the 8
  /// rows a fragment load touches fall in different banks. Returns the array; its row length
  /// is `padded_row(...)`.
  static int64_t padded_row(int64_t n) { return n + 8; }
  llvm::Value* stage_narrow(const ir::Value* v, int64_t base, bool transpose,
                            const std::function<llvm::Value*(llvm::Value*)>& bits = nullptr) {
    const ir::Type& t = v->type;
    int64_t rows = t.shape[0], cols = t.shape[1];
    int64_t stored_rows = transpose ? cols : rows, row_len = padded_row(transpose ? rows : cols);
    llvm::Value* arr = scratch(base, stored_rows * row_len * ir::dtype_bytes(t.dtype));
    llvm::Type* mt = mem_type(t.dtype);
    auto i = [&](int64_t x) { return b_.getInt32(static_cast<int32_t>(x)); };
    for (int64_t j = 0; j < slots_of(t); ++j)
      when(valid(t, j), [&] {
        llvm::Value* e = element_index(t, j);
        llvm::Value* r = b_.CreateUDiv(e, i(cols));
        llvm::Value* c = b_.CreateURem(e, i(cols));
        llvm::Value* at = transpose ? b_.CreateAdd(b_.CreateMul(c, i(row_len)), r) : b_.CreateAdd(b_.CreateMul(r, i(row_len)), c);
        llvm::Value* x = to_mem(element(v, j), t.dtype);
        b_.CreateStore(bits ? bits(x) : x, b_.CreateGEP(mt, arr, at));
      });
    return arr;
  }

  /// A variable for loops to carry: an alloca in the entry block, holding `init` from here on
  /// (a register after mem2reg).
  llvm::Value* local(llvm::Type* t, llvm::Value* init) {
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::Value* slot = entry.CreateAlloca(t);
    b_.CreateStore(init, slot);
    return slot;
  }

  /// A counted loop `for (i = start; i < n; i += step)` with the body emitted by `body(i)`; i has
  /// the type of `start` (i32 unless given otherwise).
  void counted_loop(llvm::Value* start, llvm::Value* n, int64_t step, const std::function<void(llvm::Value*)>& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* body_bb = llvm::BasicBlock::Create(ctx_, "loop.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.end", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(start->getType(), 2);
    i->addIncoming(start, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, n), body_bb, exit);
    b_.SetInsertPoint(body_bb);
    body(i);
    i->addIncoming(b_.CreateAdd(i, llvm::ConstantInt::get(start->getType(), step)), b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
  }


  // ---- pipelined dot loops
  // A loop whose carried accumulator is `dot(load(A), load(B), acc)` keeps its operand tiles in
  // `stages` shared-memory buffers filled by cp.async, `stages - 1` iterations ahead of the
  // tensor cores, which read them with ldmatrix. Tiles are stored row by row in 16-byte chunks,
  // swizzled so that the eight rows an ldmatrix reads fall in different banks.
  struct PipeOperand {
    const ir::Op* load;
    int64_t rows, cols, offset;  // offset: within a stage buffer
    /// Where the tile is not known to be 16-byte aligned and contiguous in memory (the generic
    /// variant): element loads into registers at the start of an iteration, stored to shared
    /// memory before its barrier, instead of cp.async.
    bool staged = false;
    bool contiguous = false;  // staged: the elements of a chunk are adjacent in memory
    bool chunk_mask = false;  // staged: one mask value holds for the elements of a chunk
    /// Stored transposed ([cols][rows]): f8 B tiles, whose fragments need K-adjacent bytes that
    /// ldmatrix cannot transpose (staged only).
    bool transposed = false;
    bool vector_rows = false;  // transposed: its rows can be read 16 bytes at a time
    /// wgmma operands: the tile in column blocks of 128 bytes, each block's rows contiguous
    /// (128-byte swizzle atoms of 8 rows; see blocked_swizzled).
    bool blocked = false;
    /// B given as trans(load of B^T): the tile loaded is [N][K], stored like A (K-major), and
    /// wgmma reads it untransposed (the only form f8 wgmma takes). wgmma pipelines only.
    const ir::Op* trans = nullptr;  // the trans op, which the pipeline does instead
    bool k_major() const { return trans != nullptr; }
    int64_t esize = 2;  // bytes per element: 2 (f16, bf16) or 1 (f8)
    /// Copied by TMA (Pipeline::tma): tensor map `map` (tma_recipes_), one box per 128 bytes of
    /// a row; tile element (i, j) is the tensor's (row0 + i, col0 + j), where for the iteration
    /// copied row0 = row_start + row_offset and col0 = col_start + col_offset (a null start: 0).
    int map = -1;
    const ir::Value* row_start = nullptr;
    const ir::Value* col_start = nullptr;
    int64_t row_offset = 0, col_offset = 0;
    const ir::Value* base = nullptr;  // TMA: the base pointer (through the waits that order the copies)
    int64_t per_chunk() const { return 16 / esize; }  // elements per 16-byte chunk
    int64_t row_bytes() const { return (transposed ? rows : cols) * esize; }
    int64_t bytes() const { return rows * cols * esize; }
  };
  /// A chunk loaded into registers, waiting for its store to shared memory: four words, or for
  /// a transposed tile a word per column of its block.
  struct StagedChunk {
    llvm::Value* ok;
    llvm::Value* dst;
    llvm::Value* words[4];
    std::vector<std::pair<llvm::Value*, llvm::Value*>> stores;  // transposed: (address, word)
  };
  struct Pipeline {
    const ir::Op* loop;
    const ir::Op* dot;
    PipeOperand a, b;
    int stages;
    int64_t stage_bytes;
    /// sm_90a: the dot is wgmma.mma_async of each warpgroup (m64 x the tile's N) reading both
    /// tiles from shared memory; the loop prefetches `stages - 2` ahead, so that a stage is
    /// rewritten only after the wgmma groups that read it have completed (wait_group 1).
    bool wgmma = false;
    /// wgmma pipelines whose tiles TMA copies: one thread issues a stage's copies, which complete
    /// on the stage's mbarrier (at `bars`, 8 bytes per stage) that the others wait on.
    bool tma = false;
    int64_t bars = 0;
    /// Warp specialized (see WarpSpec): the producer warpgroup issues the copies; consumers wait
    /// on the `full` mbarriers (at `bars`) and arrive on the `empty` ones once a stage is read.
    bool ws = false;
    llvm::Value* iteration = nullptr;  // the current iteration of this run of the loop, from 0
    /// How many iterations the loop's copies run ahead of its dot.
    int ahead() const { return wgmma ? stages - 2 : stages - 1; }
    int64_t base = 0;  // of the first buffer in dynamic shared memory
    llvm::Value* read_stage = nullptr;  // the stage the current iteration's dot reads
    llvm::Value* next_stage = nullptr;  // the next iteration's
    std::vector<llvm::Value*> frags{};      // the current iteration's first fragments (loop-carried)
    std::vector<llvm::Value*> next_frags{};  // the next iteration's, once the dot has loaded them
    std::vector<StagedChunk> in_registers{};  // staged operands' chunks not yet in shared memory
  };

  static bool is_zero(const ir::Value* v) {
    const ir::Op* d = v->def;
    while (d && (d->code == OpCode::Splat || d->code == OpCode::Broadcast || d->code == OpCode::ExpandDims)) d = d->operands[0]->def;
    if (!d || d->code != OpCode::Constant) return false;
    const ir::Attr& a = d->attrs.at("value");
    return std::holds_alternative<int64_t>(a) ? std::get<int64_t>(a) == 0 : std::get<double>(a) == 0.0 && !std::signbit(std::get<double>(a));
  }

  /// Whether `block` (or a region in it) writes memory: then loads of later iterations may not
  /// be moved ahead of it.
  static bool writes_memory(const ir::Block& block) {
    for (const auto& op : block.ops) {
      if ((op->info().flags & ir::MEM) && op->code != OpCode::Load) return true;
      for (const auto& r : op->regions)
        if (writes_memory(*r)) return true;
    }
    return false;
  }

  std::optional<Pipeline> match_pipeline(const ir::Op& loop) {
    if (!target_->mma_sync()) return std::nullopt;
    const ir::Block& body = *loop.regions[0];
    if (writes_memory(body)) return std::nullopt;
    const ir::Op& yield = *body.terminator();
    const ir::Op* step = loop.operands[2]->def;
    if (!step || step->code != OpCode::Constant || std::get<int64_t>(step->attrs.at("value")) <= 0) return std::nullopt;
    auto uses = ir::count_uses(body);
    for (size_t i = 0; i < yield.operands.size(); ++i) {
      const ir::Op* dot = yield.operands[i]->def;
      if (!dot || dot->code != OpCode::Dot || dot->parent != &body || !mma_eligible(*dot) ||
          dot->operands[2] != body.args[i + 1].get())
        continue;
      const int64_t esize = ir::dtype_bytes(dot->operands[0]->type.dtype);
      MmaTiles m = mma_tiles(dot->results[0]->type);
      if (!m.warps_n) continue;
      auto operand = [&](int k) -> std::optional<PipeOperand> {
        const ir::Value* v = dot->operands[k];
        const ir::Op* trans = nullptr;
        if (k == 1 && v->def && v->def->code == OpCode::Trans && v->def->parent == &body && uses[v] == 1) {
          trans = v->def;
          v = v->def->operands[0];
        }
        const ir::Op* ld = v->def;
        if (!ld || ld->code != OpCode::Load || ld->parent != &body || uses[v] != 1) return std::nullopt;
        if (ld->operands.size() > 2 && !is_zero(ld->operands[2])) return std::nullopt;
        const ir::Value* mask = ld->operands.size() > 1 ? ld->operands[1] : nullptr;
        if (!loop_recomputable(ld->operands[0], body) || (mask && !loop_recomputable(mask, body))) return std::nullopt;
        PipeOperand o{ld, v->type.shape[0], v->type.shape[1], 0};
        o.esize = esize;
        o.trans = trans;
        o.transposed = esize == 1 && k == 1 && !trans;
        o.vector_rows = o.transposed && axis_.vectorizable(ld->operands[0], mask, 16);
        if (o.transposed || !axis_.vectorizable(ld->operands[0], mask, o.per_chunk())) {
          o.staged = true;
          o.contiguous = axis_.of(ld->operands[0]).contiguity % o.per_chunk() == 0;
          o.chunk_mask = !mask || axis_.of(mask).constancy % o.per_chunk() == 0;
        }
        return o;
      };
      auto a = operand(0), b = operand(1);
      if (!a || !b) continue;
      Pipeline p{&loop, dot, *a, *b, 0, 0};
      // The accumulator of a wgmma is in flight until the next iteration's wait: nothing else in
      // the body may read it.
      p.wgmma = wgmma_eligible(p) && uses[dot->results[0].get()] == 1 && uses[body.args[i + 1].get()] == 1;
      if (p.wgmma) p.a.blocked = p.b.blocked = true;
      if (p.b.k_major() && !p.wgmma) continue;  // (other dots stage a transposed B themselves)
      const int min_stages = p.wgmma ? 3 : 2;
      const int64_t limit = p.wgmma ? kWgmmaSmemBytes : kPipelineSmemBytes;
      p.stages = std::max(min_stages, opts_.num_stages);
      p.b.offset = a->bytes();
      p.stage_bytes = p.b.offset + b->bytes();
      while (p.stages > min_stages && p.stages * p.stage_bytes > limit) --p.stages;
      if (p.stages * p.stage_bytes > limit) continue;
      return p;
    }
    return std::nullopt;
  }
  static constexpr int64_t kPipelineSmemBytes = 160 * 1024;  // of the 227 KB a CTA may have
  static constexpr int64_t kWgmmaSmemBytes = 208 * 1024;

  /// wgmma.mma_async takes the pipeline's dot on sm_90a where both tiles come whole by cp.async
  /// or TMA (16-bit, or f8 with B K-major), each warpgroup's share of the tile is m64 x N (M =
  /// 16 x warps: the accumulator layout of mma_tiles, one warp per 16 rows), N is a multiple of
  /// 64 up to 256 and K a multiple of 128 bytes (the 128-byte swizzle of the descriptors).
  bool wgmma_eligible(const Pipeline& p) const {
    if (!target_->hopper() || p.a.staged || p.b.staged || threads_ % 128) return false;
    if (p.a.esize != 2 && !(p.a.esize == 1 && p.b.k_major())) return false;  // f8: both K-major
    const int64_t M = p.a.rows, K = p.a.cols, N = p.b.k_major() ? p.b.rows : p.b.cols;
    return M == 16 * (threads_ / 32) && N % 64 == 0 && N <= 256 && (K * p.a.esize) % 128 == 0;
  }
  /// The shapes of the dots that wgmma pipelines make: mma_tiles gives them the wgmma layout,
  /// decided before lowering so that every value of the shape agrees.
  void find_wgmma_loops() {
    f_.walk([&](const ir::Op& op) {
      if (op.code != OpCode::For) return;
      if (auto p = match_pipeline(op); p && p->wgmma) {
        const ir::Type& t = p->dot->results[0]->type;
        wgmma_shapes_.insert({t.shape[0], t.shape[1]});
        if (!opts_.tma) return;
        auto a = tma_operand(p->a), b = tma_operand(p->b);
        if (!a || !b) return;
        for (auto* o : {&*a, &*b}) {
          o->op.map = static_cast<int>(tma_recipes_.size());
          tma_recipes_.push_back(o->recipe);
        }
        tma_loops_[&op] = {a->op, b->op};
      }
    });
    if (tma_loops_.size() == 1) {  // (asked for by the options, or by the loop: tl::LoopHints)
      const auto& [loop, ops] = *tma_loops_.begin();
      if (opts_.warp_specialize || loop->attrs.count("warp_specialize")) plan_warp_specialization(*loop, ops.first, ops.second);
    }
  }

  // ---- TMA operands
  static const ir::Value* through(const ir::Value* v, std::initializer_list<OpCode> codes) {
    while (v->def && std::find(codes.begin(), codes.end(), v->def->code) != codes.end()) v = v->def->operands[0];
    return v;
  }
  /// A 2-D integer tensor that counts along one axis: v[i][j] = start + offset + (i or j).
  struct TileIndex {
    const ir::Value* start = nullptr;  // a scalar, or null for 0
    int64_t offset = 0;
    int axis = 0;
    bool operator==(const TileIndex&) const = default;
  };
  static std::optional<TileIndex> tile_index(const ir::Value* v) {
    v = through(v, {OpCode::Broadcast});
    if (!v->def || v->def->code != OpCode::ExpandDims || v->type.shape.size() != 2) return std::nullopt;
    TileIndex t;
    t.axis = std::get<int64_t>(v->def->attrs.at("axis")) == 1 ? 0 : 1;  // [n, 1] counts along rows
    const ir::Value* x = v->def->operands[0];
    auto arange = [&](const ir::Value* r) {
      if (!r->def || r->def->code != OpCode::Arange) return false;
      t.offset = std::get<int64_t>(r->def->attrs.at("start"));
      return true;
    };
    if (arange(x)) return t;
    if (!x->def || x->def->code != OpCode::Add) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const ir::Value* s = x->def->operands[k];
      if (s->def && s->def->code == OpCode::Splat && arange(x->def->operands[1 - k])) {
        t.start = s->def->operands[0];
        return t;
      }
    }
    return std::nullopt;
  }
  /// A size the host knows at launch: a runtime parameter (through hints and widening casts:
  /// the launch reads the parameter's value) or a positive constant.
  std::optional<runtime::TmaRecipe::Dim> host_size(const ir::Value* v) const {
    for (;;) {
      if (v->def && v->def->code == OpCode::Hint) v = v->def->operands[0];
      else if (v->def && v->def->code == OpCode::Cast && !v->type.is_float() && !v->def->operands[0]->type.is_float() &&
               ir::dtype_bytes(v->def->operands[0]->type.dtype) <= ir::dtype_bytes(v->type.dtype) &&
               v->def->operands[0]->type.dtype != DType::i1)
        v = v->def->operands[0];
      else break;
    }
    if (!v->def && v->owner == &f_.body && !v->type.is_tensor() && !v->type.is_ptr && !v->type.is_float())
      return runtime::TmaRecipe::Dim{static_cast<int>(v->index), 0};
    if (v->def && v->def->code == OpCode::Constant && std::holds_alternative<int64_t>(v->def->attrs.at("value")) &&
        std::get<int64_t>(v->def->attrs.at("value")) > 0)
      return runtime::TmaRecipe::Dim{-1, std::get<int64_t>(v->def->attrs.at("value"))};
    return std::nullopt;
  }
  struct TmaMatch {
    PipeOperand op;
    runtime::TmaRecipe recipe;
  };
  /// Whether TMA can copy the operand's tiles: its address is `base + row * stride + col` and
  /// its mask `row < rows & col < cols` (in any order and grouping), where the base pointer is a
  /// 16-byte aligned parameter, stride, rows and cols parameters or constants (the row stride a
  /// multiple of 16 bytes), and row and col count up from scalars that are never negative along
  /// the tile's two axes. TMA reads zeros where the mask is off, as the load would give (and
  /// for negative coordinates too, where the load would read memory: hence the last rule).
  std::optional<TmaMatch> tma_operand(const PipeOperand& o) {
    if (o.staged || o.transposed || o.rows > 256 || (o.cols * o.esize) % 128) return std::nullopt;
    const ir::Op& ld = *o.load;
    if (ld.operands.size() < 2) return std::nullopt;
    // The address: a splat base and offset terms, each an index times an optional stride.
    const ir::Value* base = nullptr;
    std::vector<std::pair<const ir::Value*, const ir::Value*>> terms;  // (index, stride or null)
    std::function<bool(const ir::Value*)> offsets = [&](const ir::Value* v) {
      v = through(v, {OpCode::Broadcast});
      if (v->def && v->def->code == OpCode::Add) return offsets(v->def->operands[0]) && offsets(v->def->operands[1]);
      if (v->def && v->def->code == OpCode::Mul)
        for (int k = 0; k < 2; ++k) {
          const ir::Value* s = through(v->def->operands[k], {OpCode::Broadcast});
          if (s->def && s->def->code == OpCode::Splat) {
            terms.emplace_back(v->def->operands[1 - k], s->def->operands[0]);
            return true;
          }
        }
      terms.emplace_back(v, nullptr);
      return true;
    };
    std::function<bool(const ir::Value*)> address = [&](const ir::Value* v) {
      v = through(v, {OpCode::Broadcast});
      if (v->def && v->def->code == OpCode::AddPtr) return address(v->def->operands[0]) && offsets(v->def->operands[1]);
      if (v->def && v->def->code == OpCode::Splat && !base) {
        base = v->def->operands[0];
        return true;
      }
      return false;
    };
    if (!address(ld.operands[0]) || !base || terms.size() != 2) return std::nullopt;
    std::optional<TileIndex> row, col;
    const ir::Value* stride = nullptr;
    for (auto& [index, by] : terms) {
      auto t = tile_index(index);
      if (!t) return std::nullopt;
      if (t->axis == 0 && by && !row) row = t, stride = by;
      else if (t->axis == 1 && !by && !col) col = t;
      else return std::nullopt;
    }
    if (!row || !col) return std::nullopt;
    for (const TileIndex* t : {&*row, &*col})
      if (t->offset < 0 || (t->start && !nonneg(t->start))) return std::nullopt;
    // The mask: one bound per axis, on the same indices.
    std::optional<runtime::TmaRecipe::Dim> rows, cols;
    std::function<bool(const ir::Value*)> bounds = [&](const ir::Value* v) {
      v = through(v, {OpCode::Broadcast});
      if (!v->def) return false;
      if (v->def->code == OpCode::And) return bounds(v->def->operands[0]) && bounds(v->def->operands[1]);
      if (v->def->code != OpCode::Cmp || std::get<std::string>(v->def->attrs.at("pred")) != "lt") return false;
      auto t = tile_index(v->def->operands[0]);
      const ir::Value* bound = through(v->def->operands[1], {OpCode::Broadcast});
      if (!t || !bound->def || bound->def->code != OpCode::Splat) return false;
      auto size = host_size(bound->def->operands[0]);
      auto* slot = *t == *row ? &rows : *t == *col ? &cols : nullptr;
      if (!size || !slot || *slot) return false;
      *slot = size;
      return true;
    };
    if (!bounds(ld.operands[1]) || !rows || !cols) return std::nullopt;
    // The base: a pointer parameter, 16-byte aligned; the stride a multiple of 16 bytes.
    TmaMatch m{o, {}};
    const ir::Value* p = base;
    while (p->def && p->def->code == OpCode::ConsumeToken) p = p->def->operands[0];  // (see the prologue's fence)
    if (axis_.of(p).divisibility % 16) return std::nullopt;
    p = through(p, {OpCode::Hint});
    if (p->def || p->owner != &f_.body || !p->type.is_ptr) return std::nullopt;
    auto st = host_size(stride);
    if (!st || (st->param < 0 ? st->value * o.esize % 16 : axis_.of(stride).divisibility * o.esize % 16)) return std::nullopt;
    m.recipe.pointer = static_cast<int>(p->index);
    m.recipe.dtype = o.load->results[0]->type.dtype;
    m.recipe.cols = *cols, m.recipe.rows = *rows, m.recipe.stride = *st;
    m.recipe.box_cols = 128 / o.esize, m.recipe.box_rows = o.rows;
    m.op.base = base;
    m.op.row_start = row->start, m.op.row_offset = row->offset;
    m.op.col_start = col->start, m.op.col_offset = col->offset;
    return m;
  }
  /// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows stored in
  /// column blocks of 128 bytes (block after block, each `rows` x 128 bytes), with the 128-byte
  /// swizzle of wgmma descriptors and TMA: the chunk index XOR the row within its 8-row atom.
  llvm::Value* blocked_swizzled(llvm::Value* row, llvm::Value* chunk, int64_t rows) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(chunk, c(7)), b_.CreateAnd(row, c(7)));
    return b_.CreateAdd(b_.CreateAdd(b_.CreateMul(b_.CreateLShr(chunk, 3), c(rows * 128)), b_.CreateMul(row, c(128))),
                        b_.CreateMul(in_line, c(16)));
  }

  /// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile with rows of
  /// `row_bytes`: within each 128-byte line the chunk index is XORed with the row (rows of 128
  /// bytes or more) or with the line (shorter rows, several to a line).
  llvm::Value* swizzled(llvm::Value* row, llvm::Value* chunk, int64_t row_bytes) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    if (row_bytes >= 128) {
      llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(chunk, c(7)), b_.CreateAnd(row, c(7)));
      return b_.CreateAdd(b_.CreateAdd(b_.CreateMul(row, c(row_bytes)), b_.CreateMul(b_.CreateLShr(chunk, 3), c(128))),
                          b_.CreateMul(in_line, c(16)));
    }
    llvm::Value* o = b_.CreateAdd(b_.CreateMul(row, c(row_bytes)), b_.CreateMul(chunk, c(16)));
    llvm::Value* line = b_.CreateLShr(o, 7);
    llvm::Value* in_line = b_.CreateXor(b_.CreateAnd(b_.CreateLShr(o, 4), c(7)), b_.CreateAnd(line, c(7)));
    return b_.CreateAdd(b_.CreateMul(line, c(128)), b_.CreateMul(in_line, c(16)));
  }
  llvm::Value* stage_base(const Pipeline& p, llvm::Value* stage) {
    return b_.CreateGEP(b_.getInt8Ty(), smem_,
                        b_.CreateAdd(b_.getInt32(static_cast<int32_t>(p.base)),
                                     b_.CreateMul(stage, b_.getInt32(static_cast<int32_t>(p.stage_bytes)))));
  }

  /// Stores the staged operands' chunks loaded by the last pipe_issue into shared memory.
  void pipe_store_staged(Pipeline& p) {
    auto* v4 = llvm::FixedVectorType::get(b_.getInt32Ty(), 4);
    for (const StagedChunk& sc : p.in_registers)
      when(sc.ok, [&] {
        if (!sc.stores.empty()) {
          for (auto& [at, word] : sc.stores) b_.CreateStore(word, at);
          return;
        }
        llvm::Value* v = llvm::PoisonValue::get(v4);
        for (unsigned w = 0; w < 4; ++w) v = b_.CreateInsertElement(v, sc.words[w], uint64_t{w});
        b_.CreateAlignedStore(v, sc.dst, llvm::Align(16));
      });
    p.in_registers.clear();
  }

  /// A transposed (f8) tile through registers: each thread takes blocks of 4 rows x 16 columns,
  /// reads the rows (16 bytes at once where the analysis allows), and makes one 32-bit word per
  /// column of the 4 bytes that sit together in the transposed tile.
  void issue_transposed(Pipeline& p, const PipeOperand& o, llvm::Value* base, llvm::Value* live) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    const ir::Value* ptr = o.load->operands[0];
    const ir::Value* mask = o.load->operands.size() > 1 ? o.load->operands[1] : nullptr;
    llvm::Type* i8 = b_.getInt8Ty();
    auto* v16 = llvm::FixedVectorType::get(i8, 16);
    const int64_t per_row = o.cols / 16, blocks = (o.rows / 4) * per_row;
    for (int64_t t = 0; t * threads_ < blocks; ++t) {
      llvm::Value* q = b_.CreateAdd(tid_, c(t * threads_));
      llvm::Value* ok = (t + 1) * threads_ <= blocks ? b_.getTrue() : b_.CreateICmpSLT(q, c(blocks));
      llvm::Value* qs = b_.CreateSelect(ok, q, c(0));
      llvm::Value* k0 = b_.CreateMul(b_.CreateUDiv(qs, c(per_row)), c(4));
      llvm::Value* n0 = b_.CreateMul(b_.CreateURem(qs, c(per_row)), c(16));
      llvm::Value* bytes[4][16];
      for (int r = 0; r < 4; ++r) {
        llvm::Value* e = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(k0, c(r)), c(o.cols)), n0);
        llvm::Value* on = b_.CreateAnd(ok, live);
        if (o.vector_rows) {
          if (mask) on = b_.CreateAnd(on, recompute(mask, e));
          llvm::Value* row = when_value(on, v16, llvm::Constant::getNullValue(v16),
                                        [&] { return b_.CreateAlignedLoad(v16, recompute(ptr, e), llvm::Align(16)); });
          for (int n = 0; n < 16; ++n) bytes[r][n] = b_.CreateExtractElement(row, uint64_t(n));
          continue;
        }
        for (int n = 0; n < 16; ++n) {
          llvm::Value* en = b_.CreateAdd(e, c(n));
          llvm::Value* on_n = mask ? b_.CreateAnd(on, recompute(mask, en)) : on;
          llvm::Value* src = recompute(ptr, en);
          bytes[r][n] = when_value(on_n, i8, b_.getInt8(0), [&] { return b_.CreateLoad(i8, src); });
        }
      }
      StagedChunk sc{ok, nullptr, {}, {}};
      llvm::Value* in_chunk = b_.CreateAnd(k0, c(15));
      for (int n = 0; n < 16; ++n) {
        llvm::Value* word = b_.getInt32(0);
        for (int r = 0; r < 4; ++r)
          word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(bytes[r][n], b_.getInt32Ty()), static_cast<uint64_t>(8 * r)));
        llvm::Value* at = b_.CreateAdd(c(o.offset), b_.CreateAdd(swizzled(b_.CreateAdd(n0, c(n)), b_.CreateLShr(k0, 4), o.row_bytes()),
                                                                  in_chunk));
        sc.stores.emplace_back(b_.CreateGEP(i8, base, at), word);
      }
      p.in_registers.push_back(sc);
    }
  }

  /// Starts the copies of iteration `j`'s operand tiles into buffer `stage` (zeros where masked
  /// off or past the end of the loop) and commits them as one group; staged operands are loaded
  /// into registers, for pipe_store_staged.

  void pipe_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j, llvm::Value* stage) {
    llvm::Value* iv = prefetch_iteration(p, iv0, step, j);
    llvm::Value* live = b_.CreateICmpSLT(iv, hi);
    llvm::Value* base = stage_base(p, stage);
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    for (const PipeOperand* o : {&p.a, &p.b}) {
      if (o->transposed) {
        issue_transposed(p, *o, base, live);
        continue;
      }
      const int64_t per = o->per_chunk();
      int64_t chunks = o->rows * o->cols / per;
      for (int64_t t = 0; t * threads_ < chunks; ++t) {
        llvm::Value* q = b_.CreateAdd(tid_, c(t * threads_));
        llvm::Value* ok = (t + 1) * threads_ <= chunks ? b_.getTrue() : b_.CreateICmpSLT(q, c(chunks));
        // The chunk's first element and its place in the buffer (chunk 0 where this thread has none).
        llvm::Value* e = b_.CreateMul(b_.CreateSelect(ok, q, c(0)), c(per));
        llvm::Value* row = b_.CreateUDiv(e, c(o->cols));
        llvm::Value* chunk = b_.CreateUDiv(b_.CreateURem(e, c(o->cols)), c(per));
        llvm::Value* at = o->blocked ? blocked_swizzled(row, chunk, o->rows) : swizzled(row, chunk, o->row_bytes());
        llvm::Value* dst = b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(o->offset), at));
        if (!o->staged) {
          when(ok, [&] {
            llvm::Value* src = recompute(o->load->operands[0], e);
            llvm::Value* on = live;
            if (o->load->operands.size() > 1) on = b_.CreateAnd(on, recompute(o->load->operands[1], e));
            cp_async_16(dst, b_.CreateAddrSpaceCast(src, b_.getPtrTy(1)), b_.CreateSelect(on, c(16), c(0)));
          });
          continue;
        }
        // Element loads into registers (zero where masked off), packed into words; the store to
        // shared memory waits for pipe_store_staged, late in the iteration.
        StagedChunk sc{ok, dst, {}, {}};
        llvm::Type* et = b_.getIntNTy(static_cast<unsigned>(8 * o->esize));
        llvm::Value* first = o->contiguous ? recompute(o->load->operands[0], e) : nullptr;
        llvm::Value* chunk_on = o->chunk_mask && o->load->operands.size() > 1 ? recompute(o->load->operands[1], e) : nullptr;
        std::vector<llvm::Value*> elems;
        for (int64_t k = 0; k < per; ++k) {
          llvm::Value* ek = b_.CreateAdd(e, c(k));
          llvm::Value* on = b_.CreateAnd(ok, live);
          if (o->load->operands.size() > 1) on = b_.CreateAnd(on, chunk_on ? chunk_on : recompute(o->load->operands[1], ek));
          llvm::Value* src = first ? b_.CreateConstGEP1_64(et, first, k) : recompute(o->load->operands[0], ek);
          elems.push_back(when_value(on, et, llvm::ConstantInt::get(et, 0), [&] { return b_.CreateLoad(et, src); }));
        }
        const int64_t per_word = 4 / o->esize;
        for (int64_t w = 0; w < 4; ++w) {
          llvm::Value* word = b_.getInt32(0);
          for (int64_t i = 0; i < per_word; ++i)
            word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(elems[w * per_word + i], b_.getInt32Ty()),
                                                  static_cast<uint64_t>(8 * o->esize * i)));
          sc.words[w] = word;
        }
        p.in_registers.push_back(sc);
      }
    }
    end_prefetch();
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {});
  }
  /// Iteration `j`'s induction variable, set for recompute() of the loop body's values for that
  /// iteration until end_prefetch.
  llvm::Value* prefetch_iteration(const Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* j) {
    const ir::Block& body = *p.loop->regions[0];
    llvm::Value* iv = b_.CreateAdd(iv0, b_.CreateMul(b_.CreateZExtOrTrunc(j, iv0->getType()), step));
    subst_[body.args[0].get()] = iv;
    subst_body_ = &body;
    subst_iteration_ = j;
    return iv;
  }
  void end_prefetch() {
    subst_.clear();
    subst_body_ = nullptr;
    subst_iteration_ = nullptr;
  }

  /// cp.async.cg of 16 bytes (`size` of them read, the rest zero-filled) to a shared address.
  /// Inline assembly: LLVM 19 selects the intrinsic only where shared and global addresses have
  /// the same width, and ours are 32 and 64 bits. It clobbers memory, so that loads and stores
  /// keep their order around it.
  void cp_async_16(llvm::Value* dst, llvm::Value* src, llvm::Value* size) {
    ptx(b_.getVoidTy(), "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r", {b_.CreatePtrToInt(dst, b_.getInt32Ty()), src, size});
  }

  // ---- TMA copies completing on mbarriers (sm_90a)
  llvm::Value* shared_u32(llvm::Value* p) { return b_.CreatePtrToInt(p, b_.getInt32Ty()); }
  llvm::Value* stage_bar(const Pipeline& p, llvm::Value* stage) {
    return b_.CreateGEP(b_.getInt8Ty(), smem_, b_.CreateAdd(b_.getInt32(static_cast<int32_t>(p.bars)), b_.CreateMul(stage, b_.getInt32(8))));
  }
  void mbar_init(llvm::Value* bar, int count) {
    ptx(b_.getVoidTy(), "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", {shared_u32(bar), b_.getInt32(count)});
  }
  /// Arrives on `bar`, which then also waits for `bytes` of asynchronous copies.
  void mbar_expect(llvm::Value* bar, int64_t bytes) {
    ptx(b_.getVoidTy(), "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
        {shared_u32(bar), b_.getInt32(static_cast<int32_t>(bytes))});
  }
  /// Waits for phase `parity` of the mbarrier at `bar`: one try_wait, then a spin under a
  /// timeout, twice the world's (a wait upstream of the pipeline, for a signal, then gives up
  /// first and names its signal) or, in kernels without a world, kPipelineTimeoutNs. A pipeline
  /// stuck that long is a bug to report, not a hang.
  void mbar_wait(llvm::Value* bar, llvm::Value* parity) {
    auto ready = [&] {
      llvm::Value* ok = ptx(b_.getInt32Ty(),
                            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\nselp.u32 $0, 1, 0, p;\n}",
                            "=r,r,r", {shared_u32(bar), parity});
      return b_.CreateICmpNE(ok, b_.getInt32(0));
    };
    auto* slow = llvm::BasicBlock::Create(ctx_, "mbar.slow", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "mbar.done", fn_);
    b_.CreateCondBr(ready(), done, slow, llvm::MDBuilder(ctx_).createBranchWeights(1 << 10, 1));
    b_.SetInsertPoint(slow);
    constexpr int64_t kPipelineTimeoutNs = int64_t(100) * 1000 * 1000 * 1000;
    llvm::Value* timeout = world_ ? b_.CreateShl(world_field(offsetof(runtime::DeviceWorld, timeout_ns), b_.getInt64Ty()), 1)
                                  : b_.getInt64(kPipelineTimeoutNs);
    spin_until(ready, runtime::DeviceFailure::pipeline_timeout,
               [&] { return std::array<llvm::Value*, 3>{bar, parity, b_.getInt32(0)}; }, timeout);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
  /// Thread 0 starts the TMA copies of iteration `j`'s tiles into buffer `stage` (none past the
  /// end of the loop); they complete on the stage's mbarrier, which expects their bytes.
  void tma_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j, llvm::Value* stage) {
    llvm::Value* iv = prefetch_iteration(p, iv0, step, j);
    when(b_.CreateAnd(is_thread0(), b_.CreateICmpSLT(iv, hi)), [&] { tma_copy(p, stage); });
    end_prefetch();
  }
  /// The copies of the iteration being prefetched (prefetch_iteration) into buffer `stage`,
  /// whose mbarrier this thread arrives on, expecting their bytes.
  void tma_copy(Pipeline& p, llvm::Value* stage) {
    auto coord = [&](const ir::Value* start, int64_t offset) {
      llvm::Value* o = b_.getInt32(static_cast<int32_t>(offset));
      return start ? b_.CreateAdd(b_.CreateSExtOrTrunc(recompute_scalar(start), b_.getInt32Ty()), o) : o;
    };
    llvm::Value* bar = shared_u32(stage_bar(p, stage));
    mbar_expect(stage_bar(p, stage), p.stage_bytes);
    llvm::Value* base = stage_base(p, stage);
    for (const PipeOperand* o : {&p.a, &p.b}) {
      llvm::Value* row0 = coord(o->row_start, o->row_offset);
      llvm::Value* col0 = coord(o->col_start, o->col_offset);
      const int64_t box_cols = 128 / o->esize;
      for (int64_t k = 0; k < o->cols / box_cols; ++k) {
        llvm::Value* dst = b_.CreateConstGEP1_64(b_.getInt8Ty(), base, o->offset + k * o->rows * 128);
        ptx(b_.getVoidTy(),
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];",
            "r,l,r,r,r",
            {shared_u32(dst), fn_->getArg(first_map_ + static_cast<unsigned>(o->map)),
             b_.CreateAdd(col0, b_.getInt32(static_cast<int32_t>(k * box_cols))), row0, bar});
      }
    }
  }

  // ---- warp specialization (sm_90a, GpuOptions::warp_specialize)
  // The program gets a producer warpgroup after its `threads_` consumer threads. One producer
  // thread runs the kernel's producer slice: the scalar ops, waits and control flow that the
  // copies of the TMA loop need (see plan_warp_specialization), and for each iteration of each
  // run of the loop, waits until its next buffer is free (the buffer's `empty` mbarrier) and
  // issues the iteration's copies into it (completing on its `full` mbarrier). The buffers and
  // mbarriers stay put for the whole kernel, and the producer and the consumers count the same
  // iterations (stage and parity in locals), so the producer runs ahead across runs of the
  // loop: a persistent kernel's next tile loads under this tile's epilogue. The consumers wait
  // on `full`, and every consumer thread arrives on `empty` once the wgmma group that read the
  // buffer has completed (wait_group 1 in the next iteration, wait_group 0 after the loop); no
  // barrier in the loop. Their other barriers are named barrier 1, of the consumers only.
  struct WarpSpec {
    const ir::Op* loop = nullptr;
    std::set<const ir::Op*> ops;    // the producer's: the slice, the control flow around it, the loop
    std::set<const ir::Op*> loops;  // of those, loops whose carried values the producer computes too
    int stages = 0;
    int64_t stage_bytes = 0, base = 0, full = 0, empty = 0, end = 0;
    llvm::Value* stage = nullptr;  // locals: the next iteration's buffer and its parity
    llvm::Value* phase = nullptr;
  };
  llvm::Value* next_of(llvm::Value* s, int stages) {
    llvm::Value* n = b_.CreateAdd(s, b_.getInt32(1));
    return b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(stages)), b_.getInt32(0), n);
  }
  /// The parity of the stage after `next_stage`'s predecessor: it flips where the stages wrap.
  llvm::Value* next_phase(llvm::Value* next_stage, llvm::Value* phase) {
    return b_.CreateSelect(b_.CreateICmpEQ(next_stage, b_.getInt32(0)), b_.CreateXor(phase, b_.getInt32(1)), phase);
  }
  llvm::Value* prev_of(llvm::Value* s, int stages) {
    return b_.CreateSelect(b_.CreateICmpEQ(s, b_.getInt32(0)), b_.getInt32(stages - 1), b_.CreateSub(s, b_.getInt32(1)));
  }
  llvm::Value* empty_bar(llvm::Value* stage) {
    return b_.CreateGEP(b_.getInt8Ty(), smem_, b_.CreateAdd(b_.getInt32(static_cast<int32_t>(ws_->empty)), b_.CreateMul(stage, b_.getInt32(8))));
  }
  /// This thread arrives on buffer `stage`'s empty mbarrier if `cond` (no branch: predicated).
  void empty_arrive(llvm::Value* stage, llvm::Value* cond) {
    ptx(b_.getVoidTy(), "{\n.reg .pred p;\nsetp.ne.u32 p, $1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}", "r,r",
        {shared_u32(empty_bar(stage)), b_.CreateZExt(cond, b_.getInt32Ty())});
  }

  /// Whether `v` takes its value from a wait's result (a token passed on by consume_token does not).
  bool from_wait(const ir::Value* v, int depth = 0) {
    if (depth > 64) return true;
    if (auto it = from_wait_.find(v); it != from_wait_.end()) return it->second;
    from_wait_[v] = false;  // (a loop's carried value reaching itself)
    bool r = false;
    if (!v->def) {
      const ir::Op* f = v->owner ? v->owner->parent : nullptr;
      if (f && f->code == OpCode::For)
        r = v->index == 0 ? from_wait(f->operands[0], depth + 1) || from_wait(f->operands[2], depth + 1)
                          : from_wait(f->operands[2 + v->index], depth + 1) ||
                                from_wait(f->regions[0]->terminator()->operands[v->index - 1], depth + 1);
      else r = f != nullptr;  // (other regions' arguments: not followed)
    } else if (v->def->code == OpCode::Wait) {
      r = true;
    } else if (v->def->code == OpCode::ConsumeToken) {
      r = from_wait(v->def->operands[0], depth + 1);
    } else if (v->def->code == OpCode::For) {
      const size_t i = v->index;
      r = from_wait(v->def->operands[3 + i], depth + 1) || from_wait(v->def->regions[0]->terminator()->operands[i], depth + 1);
    } else {
      for (const ir::Value* o : v->def->operands) r = r || from_wait(o, depth + 1);
      r = r || !v->def->regions.empty();
    }
    return from_wait_[v] = r;
  }

  /// Warp specialization for the kernel's TMA loop `loop` where the producer can compute what
  /// its copies need: the loop's bounds, the scalars the copies' coordinates are recomputed
  /// from, the base pointers (through the waits their tokens carry), and the conditions and
  /// bounds of the control flow around all of these, each made only of scalar ops that move
  /// no data (pure ops, waits, symm_at) and of loops carrying scalars. The producer and the
  /// consumers must count the same iterations: no bound, coordinate or condition may come from
  /// a wait's result (each side reads its own; a wait orders the copies through its token
  /// only). The copies must not need ordering after anything the consumers do first: nothing
  /// before the loop (in it and around it) writes memory or orders it but the producer's own
  /// waits. (What the kernel writes after the loop, a persistent kernel's epilogue, is assumed
  /// not to be what the loop's next run reads, as for any GEMM whose output is not its input.)
  /// Sets ws_ and reserves the buffers and mbarriers at the start of shared memory.
  void plan_warp_specialization(const ir::Op& loop, const PipeOperand& a, const PipeOperand& b) {
    if (threads_ + 128 > 1024 || !ws_allowed_) return;
    WarpSpec w;
    w.loop = &loop;
    bool ok = true;
    std::vector<const ir::Value*> work;
    std::vector<const ir::Value*> counted;  // what decides the iterations and the coordinates
    const ir::Block& body = *loop.regions[0];
    std::function<void(const ir::Value*)> outer = [&](const ir::Value* v) {  // what recompute_scalar reads
      if (!v->def && v->owner == &body) {
        if (v->index == 0) return;
        CarriedStep c = carried_step(v);
        if (!c.init) ok = false;
        else outer(c.init), outer(c.inc);
      } else if (v->def && v->def->parent == &body) {
        for (const ir::Value* o : v->def->operands) outer(o);
      } else {
        work.push_back(v);
        counted.push_back(v);
      }
    };
    for (const PipeOperand* o : {&a, &b}) {
      for (const ir::Value* s : {o->row_start, o->col_start})
        if (s) outer(s);
      work.push_back(o->base);
    }
    std::function<void(const ir::Block*)> enclose = [&](const ir::Block* blk) {  // the control flow around blk
      for (; blk && blk->parent; blk = blk->parent->parent) {
        const ir::Op* c = blk->parent;
        if (!w.ops.insert(c).second) return;  // (and its own)
        if (c->code == OpCode::For) work.insert(work.end(), {c->operands[0], c->operands[1], c->operands[2]});
        else if (c->code == OpCode::If) work.push_back(c->operands[0]);
        else ok = false;
        if (c->code == OpCode::For) counted.insert(counted.end(), {c->operands[0], c->operands[1], c->operands[2]});
        else if (c->code == OpCode::If) counted.push_back(c->operands[0]);
      }
    };
    auto carrying = [&](const ir::Op* f) {  // a loop whose carried values the producer needs
      if (f == &loop || f->code != OpCode::For) return void(ok = false);
      if (!w.loops.insert(f).second) return;
      w.ops.insert(f);
      for (const ir::Value* v : f->operands) work.push_back(v);
      for (const ir::Value* v : f->regions[0]->terminator()->operands) work.push_back(v);
      enclose(f->parent);
    };
    w.ops.insert(&loop);
    enclose(loop.parent);
    work.insert(work.end(), {loop.operands[0], loop.operands[1], loop.operands[2]});
    counted.insert(counted.end(), {loop.operands[0], loop.operands[1], loop.operands[2]});
    std::set<const ir::Value*> seen;
    while (ok && !work.empty()) {
      const ir::Value* v = work.back();
      work.pop_back();
      if (!seen.insert(v).second) continue;
      if (v->type.is_tensor()) ok = false;
      else if (!v->def) {  // a parameter, or a loop's induction variable or carried value
        if (v->owner == &f_.body) continue;
        const ir::Op* f = v->owner->parent;
        if (v->index > 0) carrying(f);
        else if (f == &loop || f->code != OpCode::For) ok = false;
        else enclose(v->owner);
      } else if (v->def->code == OpCode::For) {
        carrying(v->def);
      } else if (!v->def->regions.empty() ||
                 !(v->def->is_pure() || v->def->code == OpCode::Wait || v->def->code == OpCode::SymmAt)) {
        ok = false;
      } else if (w.ops.insert(v->def).second) {
        for (const ir::Value* o : v->def->operands) work.push_back(o);
        enclose(v->def->parent);
      }
    }
    for (const ir::Value* v : counted)
      if (ok && from_wait(v)) ok = false;
    // What runs before the loop, around it: no memory written or ordered but by the producer's waits.
    std::function<bool(const ir::Op&)> orders = [&](const ir::Op& op) {
      if ((op.info().flags & ir::MEM) && op.code != OpCode::Load && op.code != OpCode::SymmAt &&
          !(op.code == OpCode::Wait && w.ops.count(&op)))
        return true;
      for (const auto& r : op.regions)
        for (const auto& inner : r->ops)
          if (orders(*inner)) return true;
      return false;
    };
    for (const ir::Op* around = &loop; ok && around; around = around->parent->parent) {
      for (const auto& op : around->parent->ops) {
        if (op.get() == around) break;
        if (orders(*op)) ok = false;
      }
    }
    if (!ok) return;
    auto p = match_pipeline(loop);
    w.stages = p->stages;
    w.stage_bytes = p->stage_bytes;
    w.full = w.stages * w.stage_bytes;  // (base 0: 1024-byte aligned)
    w.empty = w.full + 8 * w.stages;
    w.end = w.empty + 8 * w.stages;
    smem_bytes_ = std::max(smem_bytes_, w.end);
    smem_floor_ = (w.end + 127) / 128 * 128;
    ws_ = std::move(w);
    find_producer_only_waits(a, b);
  }

  /// The waits of the producer slice that only order its copies: their results reach nothing
  /// but the pointers of the TMA loop's A and B loads (through loops carrying them,
  /// consume_token and pure ops). The consumers skip them: their tiles come through the full
  /// mbarriers, after the producer's own wait (ag_gemm's signal waits: a spin and three
  /// barriers per tile less on the consumers' side).
  void find_producer_only_waits(const PipeOperand& a, const PipeOperand& b) {
    std::map<const ir::Value*, std::vector<std::pair<const ir::Op*, size_t>>> users;
    std::function<void(const ir::Block&)> walk = [&](const ir::Block& blk) {
      for (const auto& op : blk.ops) {
        for (size_t i = 0; i < op->operands.size(); ++i) users[op->operands[i]].push_back({op.get(), i});
        for (const auto& r : op->regions) walk(*r);
      }
    };
    walk(f_.body);
    std::set<const ir::Value*> visiting;
    std::function<bool(const ir::Value*)> to_copies = [&](const ir::Value* v) {
      if (!visiting.insert(v).second) return true;  // (a loop's carried value reaching itself)
      for (auto [u, i] : users[v]) {
        if (u == a.load || u == b.load) {
          if (i != 0) return false;  // (a mask or other value: the consumers' too)
        } else if (u->code == OpCode::Yield && u->parent->parent && u->parent->parent->code == OpCode::For) {
          const ir::Op* f = u->parent->parent;
          if (!to_copies(f->results[i].get()) || !to_copies(u->parent->args[i + 1].get())) return false;
        } else if (u->code == OpCode::For && i >= 3) {
          if (!to_copies(u->results[i - 3].get()) || !to_copies(u->regions[0]->args[i - 2].get())) return false;
        } else if ((u->is_pure() || u->code == OpCode::ConsumeToken) && u->regions.empty() && u->results.size() == 1) {
          if (!to_copies(u->results[0].get())) return false;
        } else {
          return false;
        }
      }
      return true;
    };
    for (const ir::Op* op : ws_->ops)
      if (op->code == OpCode::Wait && to_copies(op->results[0].get())) producer_only_waits_.insert(op);
  }

  /// Kernel entry, warp specialized: thread 0 sets up the mbarriers, everyone meets, and the
  /// producer warpgroup gives registers to the consumers (setmaxnreg, with two consumer
  /// warpgroups: 40 and 232 a thread, as CUTLASS's kernels of 384 threads), runs the producer
  /// slice on one thread and returns. The consumers go on to the kernel's body.
  void emit_warp_specialized_entry() {
    ws_->stage = local(b_.getInt32Ty(), b_.getInt32(0));
    ws_->phase = local(b_.getInt32Ty(), b_.getInt32(0));
    when(is_thread0(), [&] {
      for (int s = 0; s < ws_->stages; ++s) {
        mbar_init(b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, ws_->full + 8 * s), 1);
        mbar_init(b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_, ws_->empty + 8 * s), threads_);
      }
      ptx_void("fence.mbarrier_init.release.cluster;");
    });
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});  // (every thread: both sides)
    const bool realloc = threads_ == 256;
    auto* producer = llvm::BasicBlock::Create(ctx_, "producer", fn_);
    auto* consumer = llvm::BasicBlock::Create(ctx_, "consumer", fn_);
    b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(threads_)), producer, consumer);
    b_.SetInsertPoint(producer);
    if (realloc) ptx_void("setmaxnreg.dec.sync.aligned.u32 40;");
    when(b_.CreateICmpEQ(tid_, b_.getInt32(threads_)), [&] {
      auto outer_vals = vals_;
      producer_ = true;
      emit_producer_block(f_.body);
      producer_ = false;
      vals_ = std::move(outer_vals);  // (the consumers' code is not dominated by the producer's)
    });
    b_.CreateRetVoid();
    b_.SetInsertPoint(consumer);
    if (realloc) ptx_void("setmaxnreg.inc.sync.aligned.u32 232;");
  }

  void emit_producer_block(const ir::Block& block) {
    for (auto& op : block.ops) {
      if (!ws_->ops.count(op.get())) continue;
      if (op.get() == ws_->loop) producer_loop(*op);
      else if (op->code == OpCode::For) producer_for(*op);
      else if (op->code == OpCode::If) producer_if(*op);
      else emit(*op);
    }
  }
  /// A loop around the producer's work, or one whose carried scalars it needs.
  void producer_for(const ir::Op& op) {
    const ir::Block& body = *op.regions[0];
    const bool carries = ws_->loops.count(&op) > 0;
    std::vector<ir::Type> types;
    std::vector<GVal> init;
    if (carries)
      for (size_t i = 3; i < op.operands.size(); ++i) types.push_back(op.operands[i]->type), init.push_back(val(op.operands[i]));
    LoopBlocks l = open_loop("producer", val(op.operands[0]).scalar, types, init);
    enter_body(l, val(op.operands[1]).scalar);
    vals_[body.args[0].get()] = GVal{l.iv, {}};
    for (size_t i = 0; i < l.carried.size(); ++i) vals_[body.args[i + 1].get()] = l.carried[i];
    emit_producer_block(body);
    close_loop(l, val(op.operands[2]).scalar, carries ? values_of(*body.terminator(), 0) : std::vector<GVal>{});
    for (size_t i = 0; i < l.carried.size(); ++i) vals_[op.results[i].get()] = l.carried[i];
  }
  /// A condition around the producer's work (its results are the consumers' only).
  void producer_if(const ir::Op& op) {
    auto* then_bb = llvm::BasicBlock::Create(ctx_, "producer.then", fn_);
    auto* else_bb = llvm::BasicBlock::Create(ctx_, "producer.else", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "producer.join", fn_);
    b_.CreateCondBr(val(op.operands[0]).scalar, then_bb, else_bb);
    for (int r = 0; r < 2; ++r) {
      b_.SetInsertPoint(r == 0 ? then_bb : else_bb);
      emit_producer_block(*op.regions[r]);
      b_.CreateBr(join);
    }
    b_.SetInsertPoint(join);
  }
  /// The TMA loop, on the producer's side: per iteration, wait until the next buffer is free,
  /// then copy the iteration's tiles into it.
  void producer_loop(const ir::Op& loop) {
    Pipeline p = *match_pipeline(loop);
    p.tma = p.ws = true;
    p.a = tma_loops_.at(&loop).first;
    p.b = tma_loops_.at(&loop).second;
    p.base = ws_->base;
    p.bars = ws_->full;
    llvm::Value* lo = val(loop.operands[0]).scalar;
    llvm::Value* hi = val(loop.operands[1]).scalar;
    llvm::Value* step = val(loop.operands[2]).scalar;
    // What the kernel wrote or a wait acquired before (generic proxy) is ordered before the copies.
    ptx_void("fence.proxy.async.global;");
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "producer.copies", fn_);
    auto* body_bb = llvm::BasicBlock::Create(ctx_, "producer.copy", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "producer.copied", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* j = b_.CreatePHI(b_.getInt32Ty(), 2, "iteration");
    j->addIncoming(b_.getInt32(0), pre);
    llvm::Value* iv = prefetch_iteration(p, lo, step, j);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), body_bb, exit);
    b_.SetInsertPoint(body_bb);
    llvm::Value* stage = b_.CreateLoad(b_.getInt32Ty(), ws_->stage);
    llvm::Value* phase = b_.CreateLoad(b_.getInt32Ty(), ws_->phase);
    // (a buffer's first use waits for the phase before its first: complete at once)
    mbar_wait(empty_bar(stage), b_.CreateXor(phase, b_.getInt32(1)));
    tma_copy(p, stage);
    llvm::Value* next = next_of(stage, p.stages);
    b_.CreateStore(next, ws_->stage);
    b_.CreateStore(next_phase(next, phase), ws_->phase);
    j->addIncoming(b_.CreateAdd(j, b_.getInt32(1)), b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    end_prefetch();
  }

  static const char* ptx_type(DType d) {
    return d == DType::bf16 ? "bf16" : d == DType::f16 ? "f16" : d == DType::f8e4m3 ? "e4m3" : "e5m2";
  }
  /// One mma.sync: m16n8k16 for 16-bit inputs, m16n8k32 for f8.
  llvm::Value* mma_sync(DType da, DType db, llvm::Value* const a[4], llvm::Value* b0, llvm::Value* b1, llvm::Value* const acc[4]) {
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* f32 = b_.getFloatTy();
    auto* ty = llvm::FunctionType::get(llvm::StructType::get(ctx_, {f32, f32, f32, f32}),
                                       {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
    auto* asm_ = llvm::InlineAsm::get(ty,
                                      str_cat("mma.sync.aligned.m16n8k", ir::dtype_bytes(da) == 1 ? 32 : 16, ".row.col.f32.",
                                              ptx_type(da), ".", ptx_type(db),
                                              ".f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"),
                                      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", /*side effects: keeps its place around barriers*/ true);
    return b_.CreateCall(ty, asm_, {a[0], a[1], a[2], a[3], b0, b1, acc[0], acc[1], acc[2], acc[3]});
  }

  /// This warp's A and B fragments for columns [16 ks, 16 ks + 16) of K from a stage buffer:
  /// ldmatrix.x4 per 16 rows of A (its four 8x8 blocks), ldmatrix.x4.trans per 16 columns of B
  /// (two n8 tiles). A's come first, four registers each, then B's.
  std::vector<llvm::Value*> pipe_fragments(const Pipeline& p, const MmaTiles& m, llvm::Value* stage, int64_t ks) {
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    llvm::Value* base = stage_base(p, stage);
    llvm::Value* lane = b_.CreateAnd(tid_, c(31));
    llvm::Value* lane16 = b_.CreateAnd(lane, c(15));
    llvm::Value* half = b_.CreateLShr(lane, 4);
    std::vector<llvm::Value*> out;
    auto x4 = [&](llvm::Intrinsic::ID id, const PipeOperand& o, llvm::Value* row, llvm::Value* chunk) {
      llvm::Value* at = b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(o.offset), swizzled(row, chunk, o.row_bytes())));
      llvm::Value* r = b_.CreateIntrinsic(id, {at->getType()}, {at});
      for (unsigned k = 0; k < 4; ++k) out.push_back(b_.CreateExtractValue(r, k));
    };
    llvm::Value* wm = b_.CreateUDiv(warp_id(), c(m.warps_n));
    llvm::Value* wn = b_.CreateURem(warp_id(), c(m.warps_n));
    for (int64_t im = 0; im < m.wtm / 16; ++im)
      x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, p.a,
         b_.CreateAdd(b_.CreateMul(wm, c(m.wtm)), b_.CreateAdd(c(im * 16), lane16)), b_.CreateAdd(c(ks * 2), half));
    for (int64_t jn = 0; jn < m.wtn / 16; ++jn) {
      if (p.b.transposed) {  // B^T rows n, K bytes: lanes 0-7 and 8-15 the two K chunks of n-tile 2jn, 16-31 of 2jn+1
        llvm::Value* n = b_.CreateAdd(b_.CreateMul(wn, c(m.wtn)),
                                      b_.CreateAdd(c(jn * 16), b_.CreateAdd(b_.CreateAnd(lane, c(7)), b_.CreateMul(half, c(8)))));
        x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, p.b, n,
           b_.CreateAdd(c(ks * 2), b_.CreateAnd(b_.CreateLShr(lane, 3), c(1))));
        continue;
      }
      x4(llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16, p.b, b_.CreateAdd(c(ks * 16), lane16),
         b_.CreateAdd(b_.CreateMul(wn, c(m.wtn / 8)), b_.CreateAdd(c(jn * 2), half)));
    }
    return out;
  }
  /// Waits for the next iteration's tiles, and (once every thread is past this iteration's
  /// reads) loads its first fragments, which the loop carries.
  void pipe_advance(Pipeline& p, const MmaTiles& m, llvm::Value* next_stage) {
    pipe_store_staged(p);  // (a buffer no thread reads before the barrier below)
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(p.stages - 2)});
    barrier();
    p.next_frags = pipe_fragments(p, m, next_stage, 0);
  }

  /// A wgmma matrix descriptor for the tile at shared address `at`: 128-byte swizzle, `lbo` and
  /// `sbo` the byte strides between column blocks and between 8-row atoms (PTX ISA, "Matrix
  /// Descriptor Format").
  llvm::Value* wgmma_desc(llvm::Value* at, int64_t lbo, int64_t sbo) {
    const uint64_t fixed = (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) | (uint64_t(1) << 62);
    llvm::Value* addr = b_.CreateAnd(b_.CreateLShr(b_.CreatePtrToInt(at, b_.getInt32Ty()), 4), b_.getInt32(0x3FFF));
    return b_.CreateOr(b_.CreateZExt(addr, b_.getInt64Ty()), b_.getInt64(fixed));
  }
  /// Inline PTX that reads and writes the f32 registers of `acc` in place ($0.. are outputs, the
  /// inputs tied to them), with `more` operands after them (constraints `more_cons`, each with
  /// its leading comma).
  void ptx_on_acc(GVal& acc, const std::string& text, const std::string& more_cons, const std::vector<llvm::Value*>& more) {
    const size_t n = acc.slots.size();
    std::string cons;
    for (size_t i = 0; i < n; ++i) cons += str_cat(i ? "," : "", "=f");
    for (size_t i = 0; i < n; ++i) cons += str_cat(",", i);
    std::vector<llvm::Value*> args = acc.slots;
    args.insert(args.end(), more.begin(), more.end());
    llvm::Value* r = ptx(llvm::StructType::get(ctx_, std::vector<llvm::Type*>(n, b_.getFloatTy())), text, cons + more_cons, args);
    for (size_t i = 0; i < n; ++i) acc.slots[i] = b_.CreateExtractValue(r, static_cast<unsigned>(i));
  }
  /// wgmma.wait_group with the accumulator passed through it, so that nothing reads the
  /// registers before the wgmma that writes them has completed.
  void wgmma_wait(GVal& acc, int pending) { ptx_on_acc(acc, str_cat("wgmma.wait_group.sync.aligned ", pending, ";"), "", {}); }
  /// The dot of a wgmma pipeline: each warpgroup issues K/16 wgmma.m64nNk16 on its 64 rows of
  /// A and all of B (both from the stage buffer through descriptors), chained on the
  /// accumulator, commits them as a group, and waits until the previous iteration's group has
  /// completed (this one stays in flight through the next iteration's barrier and prefetch).
  void pipe_dot_wgmma(Pipeline& p, const ir::Op& op) {
    DType da = op.operands[0]->type.dtype;
    MmaTiles m = mma_tiles(op.results[0]->type);
    GVal acc = mma_from(op.operands[2]);
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    const int64_t N = m.N, n = acc.slots.size();
    llvm::Value* base = stage_base(p, p.read_stage);
    llvm::Value* group = b_.CreateLShr(tid_, 7);
    llvm::Value* a_tile = b_.CreateGEP(b_.getInt8Ty(), base, b_.CreateAdd(c(p.a.offset), b_.CreateMul(group, c(64 * 128))));
    llvm::Value* b_tile = b_.CreateGEP(b_.getInt8Ty(), base, c(p.b.offset));
    std::string regs;
    for (int64_t i = 0; i < n; ++i) regs += str_cat(i ? ", " : "", "$", i);
    // 32 bytes of K per instruction: k16 of 16-bit types, k32 of f8 (whose operands are both
    // K-major: no transpose flags). B N-major is read transposed (the last flag).
    const bool f8 = p.a.esize == 1;
    const std::string wgmma = str_cat("wgmma.mma_async.sync.aligned.m64n", N, f8 ? "k32" : "k16", ".f32.", ptx_type(da), ".",
                                      ptx_type(op.operands[1]->type.dtype), " {", regs, "}, $", 2 * n, ", $", 2 * n + 1,
                                      f8 ? ", 1, 1, 1;" : p.b.k_major() ? ", 1, 1, 1, 0, 0;" : ", 1, 1, 1, 0, 1;");
    ptx_void("wgmma.fence.sync.aligned;");
    for (int64_t ks = 0; ks < p.a.cols * p.a.esize / 32; ++ks) {
      // K-major (A, and B^T): 32 bytes per step within a 128-byte block, the next block rows * 128 on.
      auto k_major_at = [&](llvm::Value* tile, const PipeOperand& o) {
        return b_.CreateConstGEP1_64(b_.getInt8Ty(), tile, (ks / 4) * o.rows * 128 + (ks % 4) * 32);
      };
      llvm::Value* a_desc = wgmma_desc(k_major_at(a_tile, p.a), 16, 1024);
      // B N-major: 16 rows of 128 bytes per k16.
      llvm::Value* b_desc = p.b.k_major() ? wgmma_desc(k_major_at(b_tile, p.b), 16, 1024)
                                        : wgmma_desc(b_.CreateConstGEP1_64(b_.getInt8Ty(), b_tile, ks * 16 * 128), p.b.rows * 128, 1024);
      ptx_on_acc(acc, wgmma, ",l,l", {a_desc, b_desc});
    }
    ptx_void("wgmma.commit_group.sync.aligned;");
    ptx_void("wgmma.wait_group.sync.aligned 1;");
    // Warp specialized: the previous iteration's group has completed, and its buffer is free.
    if (p.ws) empty_arrive(prev_of(p.read_stage, p.stages), b_.CreateICmpNE(p.iteration, b_.getInt32(0)));
    define(op, acc);
  }

  /// The dot of a pipelined loop. Fragments of the first 16 columns of K come from the previous
  /// iteration; the others are loaded up front; before the last mma.sync step the warp waits for
  /// the next tiles and loads the next iteration's first fragments, so that the barrier and the
  /// loads overlap tensor-core work.
  void pipe_dot(Pipeline& p, const ir::Op& op) {
    const ir::Type& rt = op.results[0]->type;
    DType da = op.operands[0]->type.dtype, db = op.operands[1]->type.dtype;
    MmaTiles m = mma_tiles(rt);
    GVal acc = mma_from(op.operands[2]);
    int64_t tm = m.wtm / 16, tn = m.wtn / 8, steps = p.a.cols / (32 / p.a.esize);  // K per mma: 32 bytes
    std::vector<std::vector<llvm::Value*>> frags{p.frags};
    for (int64_t ks = 1; ks < steps; ++ks) frags.push_back(pipe_fragments(p, m, p.read_stage, ks));
    for (int64_t ks = 0; ks < steps; ++ks) {
      if (ks == steps - 1) pipe_advance(p, m, p.next_stage);
      const auto& f = frags[ks];
      for (int64_t im = 0; im < tm; ++im)
        for (int64_t in = 0; in < tn; ++in) {
          llvm::Value** slots = &acc.slots[(im * tn + in) * 4];
          const int64_t bi = tm * 4 + (in / 2) * 4 + (in % 2) * 2;
          llvm::Value* r = mma_sync(da, db, &f[im * 4], f[bi], f[bi + 1], slots);
          for (unsigned k = 0; k < 4; ++k) slots[k] = b_.CreateExtractValue(r, k);
        }
    }
    define(op, acc);
  }

  /// dot on tensor cores outside pipelined loops (see mma_eligible; f32 accumulator): A and B
  /// are staged in shared memory (B transposed), each warp walks its 16x8 output tiles issuing
  /// mma.sync.m16n8k16 (m16n8k32 for f8) over K; the result stays in the MMA layout.
  bool emit_dot_mma(const ir::Op& op) {
    const ir::Type& at = op.operands[0]->type;
    const ir::Type& rt = op.results[0]->type;
    int64_t M = at.shape[0], K = at.shape[1];
    if (!target_->mma_sync() || !mma_eligible(op)) return false;
    const int64_t eb = ir::dtype_bytes(at.dtype);  // 2, or 1 for f8
    const int64_t per_reg = 4 / eb, kstep = 8 * per_reg;  // elements per 32-bit register; K per mma
    int64_t a_bytes = (M * padded_row(K) * eb + 15) / 16 * 16;
    // The accumulator enters in the MMA layout (carried by a loop) or is converted once.
    GVal acc_in = mma_from(op.operands[2]);
    llvm::Value* a = stage_narrow(op.operands[0], 0, false);    // A[m][k], rows padded
    llvm::Value* bb = stage_narrow(op.operands[1], a_bytes, true);  // B^T[n][k], rows padded
    barrier();
    llvm::Type* i16 = b_.getIntNTy(static_cast<unsigned>(8 * eb));  // an element in memory
    llvm::Type* i32 = b_.getInt32Ty();
    llvm::Type* f32 = b_.getFloatTy();
    llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
    llvm::Value* group = b_.CreateLShr(lane, 2);
    llvm::Value* tig = b_.CreateAnd(lane, b_.getInt32(3));
    auto i = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    // Adjacent elements of a row of A (2 of 16 bits, or 4 of 8), as one 32-bit register.
    auto a_pair = [&](llvm::Value* row, llvm::Value* col) {
      return b_.CreateAlignedLoad(i32, b_.CreateGEP(i16, a, b_.CreateAdd(b_.CreateMul(row, i(padded_row(K))), col)),
                                  llvm::Align(4));
    };
    // B[k][n], B[k+1][n], ...: adjacent in the transposed copy, one 32-bit load (low first).
    auto b_pair = [&](llvm::Value* k, llvm::Value* n) {
      return b_.CreateAlignedLoad(i32, b_.CreateGEP(i16, bb, b_.CreateAdd(b_.CreateMul(n, i(padded_row(K))), k)),
                                  llvm::Align(4));
    };
    MmaTiles m = mma_tiles(rt);
    GVal out;
    out.mma = true;
    for (int64_t ti = 0; ti < m.per_warp; ++ti) {
      llvm::Value* slots[4];
      for (int r = 0; r < 4; ++r) slots[r] = local(f32, acc_in.slots[ti * 4 + r]);
      when(tile_ok(m, ti), [&] {
        llvm::Value* tile = tile_of(m, ti);
        llvm::Value* row0 = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(tile, i(m.tiles_n)), i(16)), group);
        llvm::Value* row1 = b_.CreateAdd(row0, i(8));
        llvm::Value* n_b = b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, i(m.tiles_n)), i(8)), group);
        counted_loop(i(0), i(K), static_cast<int>(kstep), [&](llvm::Value* k0) {
          llvm::Value* ka = b_.CreateAdd(k0, b_.CreateMul(tig, i(per_reg)));
          llvm::Value* kb = b_.CreateAdd(ka, i(kstep / 2));
          llvm::Value* a_regs[4] = {a_pair(row0, ka), a_pair(row1, ka), a_pair(row0, kb), a_pair(row1, kb)};
          llvm::Value* acc[4];
          for (int r = 0; r < 4; ++r) acc[r] = b_.CreateLoad(f32, slots[r]);
          llvm::Value* d = mma_sync(at.dtype, op.operands[1]->type.dtype, a_regs, b_pair(ka, n_b), b_pair(kb, n_b), acc);
          for (int r = 0; r < 4; ++r) b_.CreateStore(b_.CreateExtractValue(d, r), slots[r]);
        });
      });
      for (int r = 0; r < 4; ++r) out.slots.push_back(b_.CreateLoad(f32, slots[r]));
    }
    barrier();  // A and B may be restaged by the next op
    define(op, out);
    return true;
  }

  /// dot on AMD's matrix cores (see mma_tiles): A and B are staged in LDS in the bits MFMA takes
  /// (GpuTarget::mfma_operand; B transposed), each wavefront walks its tiles issuing an MFMA per
  /// K step; lane l's operands are 8 bytes of row (column) l % S of A (B), the (l / S)-th 8 bytes
  /// of the step's K. The result stays in the MFMA layout.
  bool emit_dot_mfma(const ir::Op& op) {
    const ir::Type& at = op.operands[0]->type;
    const ir::Type& rt = op.results[0]->type;
    if (!target_->mfma_tile(rt.shape[0], rt.shape[1]) || !mma_eligible(op)) return false;
    MmaTiles m = mma_tiles(rt);
    const DType da = at.dtype, db = op.operands[1]->type.dtype;
    const int64_t M = at.shape[0], K = at.shape[1], eb = ir::dtype_bytes(da);
    const int64_t per_lane = 8 / eb, kstep = mfma_k(m.tile, da);
    auto c = [&](int64_t v) { return b_.getInt32(static_cast<int32_t>(v)); };
    // The product falls short by `scale` (see mfma_product_scale): the accumulator is divided by
    // it going in, multiplied coming out.
    const double scale = target_->mfma_product_scale(da, db);
    GVal acc_in = mma_from(op.operands[2]);
    const int64_t a_bytes = (M * padded_row(K) * eb + 15) / 16 * 16;
    auto operand_bits = [&](DType d) { return [this, d](llvm::Value* x) { return target_->mfma_operand(x, d); }; };
    llvm::Value* a = stage_narrow(op.operands[0], 0, false, operand_bits(da));        // A[m][k], rows padded
    llvm::Value* bb = stage_narrow(op.operands[1], a_bytes, true, operand_bits(db));  // B^T[n][k], rows padded
    barrier();
    auto* acc_t = llvm::FixedVectorType::get(b_.getFloatTy(), static_cast<unsigned>(m.regs));
    llvm::Value* lane = b_.CreateURem(tid_, c(64));
    llvm::Value* k_lane = b_.CreateMul(b_.CreateUDiv(lane, c(m.tile)), c(per_lane));
    auto load = [&](llvm::Value* arr, llvm::Value* row, llvm::Value* k) {
      llvm::Value* at = b_.CreateMul(b_.CreateAdd(b_.CreateMul(row, c(padded_row(K))), b_.CreateAdd(k, k_lane)), c(eb));
      return b_.CreateAlignedLoad(b_.getInt64Ty(), b_.CreateGEP(b_.getInt8Ty(), arr, at), llvm::Align(8));
    };
    auto scaled = [&](llvm::Value* x, double f) { return f == 1.0 ? x : b_.CreateFMul(x, llvm::ConstantFP::get(b_.getFloatTy(), f)); };
    GVal out;
    out.mma = true;
    for (int64_t ti = 0; ti < m.per_warp; ++ti) {
      llvm::Value* init = llvm::PoisonValue::get(acc_t);
      for (int r = 0; r < m.regs; ++r)
        init = b_.CreateInsertElement(init, scaled(acc_in.slots[ti * m.regs + r], 1.0 / scale), uint64_t(r));
      llvm::Value* acc = local(acc_t, init);
      when(tile_ok(m, ti), [&] {
        llvm::Value* tile = tile_of(m, ti);
        llvm::Value* row = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(tile, c(m.tiles_n)), c(m.tile)), b_.CreateURem(lane, c(m.tile)));
        llvm::Value* col = b_.CreateAdd(b_.CreateMul(b_.CreateURem(tile, c(m.tiles_n)), c(m.tile)), b_.CreateURem(lane, c(m.tile)));
        counted_loop(c(0), c(K), kstep, [&](llvm::Value* k0) {
          b_.CreateStore(target_->mfma(da, db, m.tile, load(a, row, k0), load(bb, col, k0), b_.CreateLoad(acc_t, acc)), acc);
        });
      });
      llvm::Value* result = b_.CreateLoad(acc_t, acc);
      for (int r = 0; r < m.regs; ++r) out.slots.push_back(scaled(b_.CreateExtractElement(result, uint64_t(r)), scale));
    }
    barrier();  // A and B may be restaged by the next op
    define(op, out);
    return true;
  }

  /// dot: both operands staged; each thread accumulates its output elements with FMAs.
  void emit_dot(const ir::Op& op) {
    if (auto it = pipe_dots_.find(&op); it != pipe_dots_.end())
      return it->second->wgmma ? pipe_dot_wgmma(*it->second, op) : pipe_dot(*it->second, op);
    if (emit_dot_mma(op) || emit_dot_mfma(op)) return;
    const ir::Type& at = op.operands[0]->type;
    const ir::Type& bt = op.operands[1]->type;
    const ir::Type& rt = op.results[0]->type;
    int64_t K = at.shape[1], N = rt.shape[1];
    llvm::Value* a = stage(op.operands[0], 0);
    int64_t b_off = (at.numel() * elem_bytes(at) + 15) / 16 * 16;
    llvm::Value* bb = stage(op.operands[1], b_off);
    barrier();
    GVal g;
    llvm::Type* f32 = b_.getFloatTy();
    for (int64_t j = 0; j < slots_of(rt); ++j) {
      llvm::Value* e = element_index(rt, j);
      llvm::Value* m = b_.CreateUDiv(e, b_.getInt32(static_cast<int32_t>(N)));
      llvm::Value* n = b_.CreateURem(e, b_.getInt32(static_cast<int32_t>(N)));
      llvm::Value* init = element(op.operands[2], j);
      g.slots.push_back(when_value(valid(rt, j), f32, init, [&] {
        llvm::Value* acc = local(f32, init);
        counted_loop(b_.getInt32(0), b_.getInt32(static_cast<int32_t>(K)), 1, [&](llvm::Value* k) {
          llvm::Value* av = staged_load(a, at, b_.CreateAdd(b_.CreateMul(m, b_.getInt32(static_cast<int32_t>(K))), k));
          llvm::Value* bv = staged_load(bb, bt, b_.CreateAdd(b_.CreateMul(k, b_.getInt32(static_cast<int32_t>(N))), n));
          if (av->getType()->isDoubleTy()) av = b_.CreateFPTrunc(av, f32), bv = b_.CreateFPTrunc(bv, f32);
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {f32}, {av, bv, b_.CreateLoad(f32, acc)}), acc);
        });
        return b_.CreateLoad(f32, acc);
      }));
    }
    barrier();
    define(op, g);
  }

  // ---- control flow: scalars are uniform, so branches are taken by the whole CTA.
  /// Phis in `header` for every scalar and every slot of the carried values.
  std::vector<GVal> carried_phis(const std::vector<ir::Type>& types, const std::vector<GVal>& init, llvm::BasicBlock* header,
                                 llvm::BasicBlock* pre) {
    llvm::IRBuilder<> hb(header, header->begin());
    std::vector<GVal> out;
    for (size_t i = 0; i < types.size(); ++i) {
      GVal g;
      llvm::Type* t = reg_type(types[i].element());
      if (!types[i].is_tensor()) {
        auto* phi = hb.CreatePHI(t, 2);
        phi->addIncoming(init[i].scalar, pre);
        g.scalar = phi;
      } else {
        g.mma = init[i].mma;
        for (size_t j = 0; j < init[i].slots.size(); ++j) {
          auto* phi = hb.CreatePHI(t, 2);
          phi->addIncoming(init[i].slots[j], pre);
          g.slots.push_back(phi);
        }
      }
      out.push_back(g);
    }
    return out;
  }
  void close_phis(const std::vector<GVal>& phis, const std::vector<GVal>& next, llvm::BasicBlock* latch) {
    for (size_t i = 0; i < phis.size(); ++i) {
      if (phis[i].scalar) llvm::cast<llvm::PHINode>(phis[i].scalar)->addIncoming(next[i].scalar, latch);
      for (size_t j = 0; j < phis[i].slots.size(); ++j)
        llvm::cast<llvm::PHINode>(phis[i].slots[j])->addIncoming(next[i].slots[j], latch);
    }
  }
  std::vector<GVal> values_of(const ir::Op& term, size_t skip) {
    std::vector<GVal> out;
    for (size_t i = skip; i < term.operands.size(); ++i) out.push_back(val(term.operands[i]));
    converted_.clear();  // conversions made here belong to this point of the region only
    return out;
  }

  /// A loop's blocks: the header, with the induction variable and the carried values as phis,
  /// the body and the exit. open_loop branches from where the builder is to the header and
  /// leaves the builder there (for phis of the caller's own); enter_body tests iv < hi and
  /// moves to the body; close_loop, at the body's end (the latch), steps iv, takes the next
  /// carried values (`more(latch)`: the caller's phis), goes back and moves to the exit.
  struct LoopBlocks {
    llvm::BasicBlock* pre;
    llvm::BasicBlock* header;
    llvm::BasicBlock* body;
    llvm::BasicBlock* exit;
    llvm::PHINode* iv;
    std::vector<GVal> carried;
  };
  LoopBlocks open_loop(const std::string& name, llvm::Value* lo, const std::vector<ir::Type>& types,
                       const std::vector<GVal>& init) {
    LoopBlocks l{b_.GetInsertBlock(), llvm::BasicBlock::Create(ctx_, name + ".header", fn_),
                 llvm::BasicBlock::Create(ctx_, name + ".body", fn_), llvm::BasicBlock::Create(ctx_, name + ".end", fn_), nullptr, {}};
    b_.CreateBr(l.header);
    l.carried = carried_phis(types, init, l.header, l.pre);
    b_.SetInsertPoint(l.header);
    l.iv = b_.CreatePHI(lo->getType(), 2, "iv");
    l.iv->addIncoming(lo, l.pre);
    return l;
  }
  void enter_body(const LoopBlocks& l, llvm::Value* hi) {
    b_.CreateCondBr(b_.CreateICmpSLT(l.iv, hi), l.body, l.exit);
    b_.SetInsertPoint(l.body);
  }
  void close_loop(const LoopBlocks& l, llvm::Value* step, const std::vector<GVal>& next,
                  const std::function<void(llvm::BasicBlock*)>& more = {}) {
    llvm::Value* iv_next = b_.CreateAdd(l.iv, step);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    l.iv->addIncoming(iv_next, latch);
    if (more) more(latch);
    close_phis(l.carried, next, latch);
    b_.CreateBr(l.header);
    b_.SetInsertPoint(l.exit);
  }

  void emit_for(const ir::Op& op) {
    const ir::Block& body = *op.regions[0];
    std::vector<ir::Type> types;
    std::vector<GVal> init;
    // A carried value that the body's last word makes with an MMA dot stays in the MMA layout,
    // as does one already in it that the body updates by arithmetic done in it (an epilogue's
    // sum of loaded tiles: s + load(...)).
    const ir::Op& yield = *body.terminator();
    std::vector<bool> as_mma;
    for (size_t i = 3; i < op.operands.size(); ++i) {
      const ir::Op* def = yield.operands[i - 3]->def;
      const ir::Value* init = op.operands[i];
      as_mma.push_back(def && ((def->code == OpCode::Dot && mma_eligible(*def)) ||
                               (vals_.count(init) && raw(init).mma && updates_in_mma(*def, body.args[i - 2].get()))));
    }
    for (size_t i = 3; i < op.operands.size(); ++i) {
      types.push_back(op.operands[i]->type);
      init.push_back(as_mma[i - 3] ? mma_from(op.operands[i]) : val(op.operands[i]));
    }
    converted_.clear();
    llvm::Value* lo = val(op.operands[0]).scalar;
    llvm::Value* hi = val(op.operands[1]).scalar;
    llvm::Value* step = val(op.operands[2]).scalar;
    std::optional<Pipeline> pipe = match_pipeline(op);
    TD_ASSERT(!ws_ || ws_->loop != &op || pipe, "the warp-specialized loop lost its pipeline");
    int64_t outer_floor = smem_floor_;
    if (pipe) {
      if (auto it = tma_loops_.find(&op); pipe->wgmma && it != tma_loops_.end()) {
        pipe->tma = true;
        pipe->a = it->second.first;
        pipe->b = it->second.second;
      }
      pipe->ws = ws_ && ws_->loop == &op;
    }
    if (pipe && pipe->ws) {  // buffers and mbarriers set up at the kernel's start; no prologue
      TD_ASSERT(pipe->tma && pipe->stages == ws_->stages && pipe->stage_bytes == ws_->stage_bytes, "the warp-specialized loop changed");
      pipe->base = ws_->base;
      pipe->bars = ws_->full;
    } else if (pipe) {
      // wgmma's swizzle atoms (and descriptors' base offset 0) need 1024-byte aligned stages.
      const int64_t align = pipe->wgmma ? 1024 : 128;
      pipe->base = (smem_floor_ + align - 1) / align * align;
      pipe->bars = pipe->base + pipe->stages * pipe->stage_bytes;
      const int64_t end = pipe->bars + (pipe->tma ? 8 * pipe->stages : 0);
      smem_bytes_ = std::max(smem_bytes_, end);
      smem_floor_ = (end + 127) / 128 * 128;
      // The buffers may have been written as scratch (generic proxy) by any thread, which TMA
      // (async proxy) now overwrites; and may still be read by an earlier op.
      if (pipe->tma) ptx_void("fence.proxy.async.shared::cta;");
      barrier();
      if (pipe->tma) {
        when(is_thread0(), [&] {
          for (int s = 0; s < pipe->stages; ++s) mbar_init(stage_bar(*pipe, b_.getInt32(s)), 1);
          ptx_void("fence.mbarrier_init.release.cluster;");
          // What the kernel wrote or a wait acquired before the loop (generic proxy, made
          // visible to this thread by the barrier) is ordered before the copies (async proxy).
          ptx_void("fence.proxy.async.global;");
        });
        barrier();
      }
      for (int s = 0; s < pipe->ahead(); ++s) {
        if (pipe->tma) {
          tma_issue(*pipe, lo, step, hi, b_.getInt32(s), b_.getInt32(s));
          continue;
        }
        pipe_issue(*pipe, lo, step, hi, b_.getInt32(s), b_.getInt32(s));
        pipe_store_staged(*pipe);
      }
      if (!pipe->wgmma) pipe_advance(*pipe, mma_tiles(pipe->dot->results[0]->type), b_.getInt32(0));
    }
    if (pipe) {
      pipe_dots_[pipe->dot] = &*pipe;
      deferred_loads_.insert(pipe->a.load);
      deferred_loads_.insert(pipe->b.load);
      if (pipe->b.trans) deferred_loads_.insert(pipe->b.trans);
    }
    // The buffer and parity of the first iteration: 0, or where warp specialized those after the
    // loop's last run (the producer and the consumers count the same iterations).
    llvm::Value* stage0 = b_.getInt32(0);
    llvm::Value* phase0 = b_.getInt32(0);
    if (pipe && pipe->ws) {
      stage0 = b_.CreateLoad(b_.getInt32Ty(), ws_->stage);
      phase0 = b_.CreateLoad(b_.getInt32Ty(), ws_->phase);
    }
    LoopBlocks l = open_loop("for", lo, types, init);
    llvm::BasicBlock* pre = l.pre;
    std::vector<GVal>& phis = l.carried;
    llvm::PHINode* iv = l.iv;
    llvm::PHINode* count = b_.CreatePHI(b_.getInt32Ty(), 2, "iteration");
    count->addIncoming(b_.getInt32(0), pre);
    llvm::PHINode* stage = nullptr;  // count % stages, carried (no division in the loop)
    llvm::PHINode* phase = nullptr;  // TMA: count / stages % 2, the parity of the stage's mbarrier
    if (pipe) {
      stage = b_.CreatePHI(b_.getInt32Ty(), 2, "stage");
      stage->addIncoming(stage0, pre);
    }
    if (pipe && pipe->tma) {
      phase = b_.CreatePHI(b_.getInt32Ty(), 2, "phase");
      phase->addIncoming(phase0, pre);
    }
    std::vector<llvm::PHINode*> frag_phis;
    if (pipe) {
      for (llvm::Value* f : pipe->next_frags) {
        frag_phis.push_back(b_.CreatePHI(f->getType(), 2, "fragment"));
        frag_phis.back()->addIncoming(f, pre);
      }
      pipe->frags.assign(frag_phis.begin(), frag_phis.end());
    }
    enter_body(l, hi);
    if (pipe && pipe->ws) {
      mbar_wait(stage_bar(*pipe, stage), phase);  // this iteration's tiles have landed
      pipe->read_stage = stage;
      pipe->next_stage = next_of(stage, pipe->stages);
      pipe->iteration = count;
    } else if (pipe) {
      if (pipe->wgmma) {
        // This iteration's tiles have landed (each thread's copies, made visible to the async
        // proxy, then everyone's; TMA copies are waited for below). Past the barrier, every
        // warpgroup has completed the wgmma group of two iterations back (wait_group 1 after
        // the last one), whose stage the prefetch below overwrites.
        if (!pipe->tma) {
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(pipe->ahead() - 1)});
          ptx_void("fence.proxy.async.shared::cta;");
        }
        barrier();
      }
      // Iteration count + ahead goes to stage (stage + ahead) % stages: for mma.sync the one the
      // previous iteration read (every thread is past that iteration's barrier, see pipe_dot),
      // for wgmma the one of two iterations back.
      auto plus = [&](int64_t k) {
        llvm::Value* sum = b_.CreateAdd(stage, b_.getInt32(static_cast<int32_t>(k)));
        return b_.CreateSelect(b_.CreateICmpSGE(sum, b_.getInt32(pipe->stages)),
                               b_.CreateSub(sum, b_.getInt32(pipe->stages)), sum);
      };
      if (pipe->tma) {
        tma_issue(*pipe, lo, step, hi, b_.CreateAdd(count, b_.getInt32(pipe->ahead())), plus(pipe->ahead()));
        mbar_wait(stage_bar(*pipe, stage), phase);
      } else {
        pipe_issue(*pipe, lo, step, hi, b_.CreateAdd(count, b_.getInt32(pipe->ahead())), plus(pipe->ahead()));
      }
      pipe->read_stage = stage;
      pipe->next_stage = plus(1);
    }
    vals_[body.args[0].get()] = GVal{iv, {}};
    for (size_t i = 0; i < phis.size(); ++i) vals_[body.args[i + 1].get()] = phis[i];
    emit_block(body);
    std::vector<GVal> next;
    for (size_t i = 0; i < yield.operands.size(); ++i)
      next.push_back(as_mma[i] ? mma_from(yield.operands[i]) : val(yield.operands[i]));
    converted_.clear();
    close_loop(l, step, next, [&](llvm::BasicBlock* latch) {
      count->addIncoming(b_.CreateAdd(count, b_.getInt32(1)), latch);
      if (stage) stage->addIncoming(pipe->next_stage, latch);
      if (phase) phase->addIncoming(next_phase(pipe->next_stage, phase), latch);
      for (size_t k = 0; k < frag_phis.size(); ++k) frag_phis[k]->addIncoming(pipe->next_frags[k], latch);
    });
    if (pipe && pipe->wgmma)  // the last wgmma group completes before its result is read
      for (size_t i = 0; i < phis.size(); ++i)
        if (yield.operands[i]->def == pipe->dot) wgmma_wait(phis[i], 0);
    if (pipe && pipe->ws) {
      // The last iteration's group has completed (above): its buffer is free.
      empty_arrive(prev_of(stage, pipe->stages), b_.CreateICmpNE(count, b_.getInt32(0)));
      b_.CreateStore(stage, ws_->stage);
      b_.CreateStore(phase, ws_->phase);
      pipe_dots_.erase(pipe->dot);
    } else if (pipe) {
      if (!pipe->tma) b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b_.getInt32(0)});
      barrier();  // the buffers become scratch again
      if (pipe->tma) {  // (every copy issued has been waited for: none goes past the loop's end)
        when(is_thread0(), [&] {
          for (int s = 0; s < pipe->stages; ++s) ptx(b_.getVoidTy(), "mbarrier.inval.shared::cta.b64 [$0];", "r", {shared_u32(stage_bar(*pipe, b_.getInt32(s)))});
        });
        barrier();
      }
      pipe_dots_.erase(pipe->dot);
      smem_floor_ = outer_floor;
    }
    for (size_t i = 0; i < phis.size(); ++i) vals_[op.results[i].get()] = phis[i];
  }

  void emit_if(const ir::Op& op) {
    auto* then_bb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
    auto* else_bb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
    b_.CreateCondBr(val(op.operands[0]).scalar, then_bb, else_bb);
    std::vector<std::pair<std::vector<GVal>, llvm::BasicBlock*>> incoming;
    for (int r = 0; r < 2; ++r) {
      b_.SetInsertPoint(r == 0 ? then_bb : else_bb);
      emit_block(*op.regions[r]);
      incoming.emplace_back(values_of(*op.regions[r]->terminator(), 0), b_.GetInsertBlock());
      b_.CreateBr(join);
    }
    b_.SetInsertPoint(join);
    for (size_t i = 0; i < op.results.size(); ++i) {
      const ir::Type& t = op.results[i]->type;
      GVal g;
      auto merge = [&](std::function<llvm::Value*(const GVal&)> pick) {
        llvm::PHINode* phi = b_.CreatePHI(reg_type(t.element()), 2);
        for (auto& [vals, bb] : incoming) phi->addIncoming(pick(vals[i]), bb);
        return phi;
      };
      if (!t.is_tensor()) g.scalar = merge([](const GVal& v) { return v.scalar; });
      else
        for (int64_t j = 0; j < slots_of(t); ++j) g.slots.push_back(merge([j](const GVal& v) { return v.slots[j]; }));
      vals_[op.results[i].get()] = g;
    }
  }

  void emit_while(const ir::Op& op) {
    const ir::Block& before = *op.regions[0];
    const ir::Block& after = *op.regions[1];
    std::vector<ir::Type> types;
    std::vector<GVal> init;
    for (auto* v : op.operands) {
      types.push_back(v->type);
      init.push_back(val(v));
    }
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "while.cond", fn_);
    auto* body_bb = llvm::BasicBlock::Create(ctx_, "while.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "while.end", fn_);
    b_.CreateBr(header);
    auto phis = carried_phis(types, init, header, pre);
    b_.SetInsertPoint(header);
    for (size_t i = 0; i < phis.size(); ++i) vals_[before.args[i].get()] = phis[i];
    emit_block(before);
    const ir::Op& cond = *before.terminator();
    auto forwarded = values_of(cond, 1);
    b_.CreateCondBr(val(cond.operands[0]).scalar, body_bb, exit);
    b_.SetInsertPoint(body_bb);
    for (size_t i = 0; i < forwarded.size(); ++i) vals_[after.args[i].get()] = forwarded[i];
    emit_block(after);
    auto next = values_of(*after.terminator(), 0);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    close_phis(phis, next, latch);
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    for (size_t i = 0; i < forwarded.size(); ++i) vals_[op.results[i].get()] = forwarded[i];
  }

  const ir::Function& f_;
  llvm::LLVMContext& ctx_;
  GpuOptions opts_;
  std::unique_ptr<llvm::Module> module_;
  std::unique_ptr<GpuTarget> target_;
  int threads_;
  llvm::Function* fn_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  int64_t max_vec_ = 4;  // vec_of's widest vector (8 for kernels of 16-bit memory)
  llvm::Value* world_ = nullptr;  // the DeviceWorld parameter of kernels with distributed ops
  std::map<const ir::Value*, int> uses_;
  llvm::Value* tid_ = nullptr;
  int64_t smem_bytes_ = 0;
  int64_t smem_floor_ = 0;  // scratch() starts here
  AxisAnalysis axis_;
  std::map<const ir::Op*, Pipeline*> pipe_dots_;  // dots of the pipelined loops being lowered
  std::set<std::pair<int64_t, int64_t>> wgmma_shapes_;  // see find_wgmma_loops
  std::vector<runtime::TmaRecipe> tma_recipes_;        // the kernel's tensor maps, in parameter order
  std::map<const ir::Op*, std::pair<PipeOperand, PipeOperand>> tma_loops_;  // wgmma loops copying by TMA
  unsigned first_map_ = 0;                             // the first tensor map's parameter
  std::optional<WarpSpec> ws_;                         // warp specialized (see WarpSpec)
  bool ws_allowed_ = true;                             // (false: lowered again without, see lower_nvptx)
  std::map<const ir::Value*, bool> from_wait_;
  bool producer_ = false;                              // emitting the producer's code
  std::set<const ir::Op*> producer_only_waits_;        // see find_producer_only_waits
  std::set<const ir::Op*> mma_loads_;             // loads that their user does in the MMA layout
  std::set<const ir::Op*> deferred_loads_;        // loads (and B's trans) that pipelines do instead
  std::map<const ir::Value*, llvm::Value*> subst_;  // recompute(): values for the iteration prefetched
  const ir::Block* subst_body_ = nullptr;            // recompute(): the body whose scalars are recomputed
  llvm::Value* subst_iteration_ = nullptr;           // recompute(): the iteration (from 0) prefetched
  std::map<const ir::Value*, GVal> vals_;
  std::map<const ir::Value*, GVal> converted_;  // MMA values seen in the cyclic layout by this op
};

}  // namespace

GpuModule lower_gpu(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make) {
  GpuLowering lowering(f, ctx, opts, make);
  GpuModule m = lowering.run();
  // Warp specialization keeps the loop's buffers for the whole kernel, under the scratch of
  // everything else (an epilogue that stages its tile): where that exceeds what a program may
  // have (227 KiB on sm_90), the kernel is lowered again without it.
  constexpr int64_t kMaxSharedBytes = 227 * 1024;
  if (lowering.warp_specialized() && m.shared_bytes > kMaxSharedBytes) {
    GpuLowering plain(f, ctx, opts, make);
    plain.without_warp_specialization();
    return plain.run();
  }
  return m;
}

}  // namespace tiledist::codegen
