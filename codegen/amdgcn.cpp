// AMDGCN: what AMD GPUs (CDNA: gfx90a, gfx942; wave64) give the GPU lowering
// (codegen/gpu_ir/). Kernels take global pointers (address space 1) and use them as generic
// ones (LLVM's address-space inference turns their accesses back into global ones); the
// memory model is LLVM's own atomics and fences with AMDGPU's sync scopes (workgroup, agent,
// system), which the backend lowers with the cache maintenance each needs; math functions are
// the ROCm device libraries' (ocml), linked in by the JIT (jit/amdgpu.cpp).
//
// Written and checked without an AMD GPU: the ISA and the code object are checked on the CPU
// machine; nothing here has run on one.
#include "codegen/gpu_target.h"
#include "llvm/IR/IntrinsicsAMDGPU.h"
#include "support/support.h"

namespace tiledist::codegen {

namespace {

class AmdgcnTarget : public GpuTarget {
 public:
  AmdgcnTarget(llvm::IRBuilder<>& b, llvm::Module& m, const GpuOptions& opts) : GpuTarget(b, m), arch_(opts.arch) {
    TD_ASSERT(!opts.data_layout.empty(),
              "the AMDGCN lowering needs the target's data layout (allocas live in address space 5)");
  }

  int warp_size() const override { return 64; }
  void size_shared_memory(llvm::GlobalVariable* smem, int64_t bytes) override {
    if (bytes <= 0) return;
    auto* type = llvm::ArrayType::get(b_.getInt8Ty(), static_cast<uint64_t>(bytes));
    auto* fixed =
        new llvm::GlobalVariable(module_, type, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(type),
                                 "tiledist_smem.static", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    fixed->setAlignment(smem->getAlign());
    smem->replaceAllUsesWith(fixed);
    smem->eraseFromParent();
    fixed->setName("tiledist_smem");
  }

  const MatrixInstr* matrix_instr(MatrixUnit unit) const override { return tiledist::matrix_instr(arch_, unit); }
  int64_t mfma_tile(int64_t M, int64_t N) const override {  // (the arch's MFMA tiles, the larger first)
    for (const MatrixInstr& i : matrix_instrs(arch_))
      if (i.unit == MatrixUnit::mfma && M % i.m == 0 && N % i.n == 0) return i.m;
    return 0;
  }
  bool mfma_takes(ir::DType a, ir::DType b) const override {
    if (a == b && (a == ir::DType::bf16 || a == ir::DType::f16)) return true;
    const MatrixInstr* mfma = matrix_instr(MatrixUnit::mfma);
    return mfma && mfma->f8 && f8(a) && f8(b);  // (gfx90a has no f8 MFMA)
  }
  /// v_mfma_f32_32x32x8_{bf16,f16}, v_mfma_f32_16x16x16_{bf16,f16} (gfx90a spells the bf16 ones
  /// with _1k), and on gfx942 v_mfma_f32_32x32x16_{fp8,bf8}_{fp8,bf8} and their 16x16x32.
  llvm::Value* mfma(ir::DType da, ir::DType db, int64_t side, llvm::Value* a, llvm::Value* b,
                    llvm::Value* acc) override {
    using ir::DType;
    const bool big = side == 32;
    llvm::Intrinsic::ID id;
    if (f8(da)) {
      static const llvm::Intrinsic::ID ids[2][2][2] = {
          // [32x32][a is e5m2][b is e5m2]
          {{llvm::Intrinsic::amdgcn_mfma_f32_16x16x32_fp8_fp8, llvm::Intrinsic::amdgcn_mfma_f32_16x16x32_fp8_bf8},
           {llvm::Intrinsic::amdgcn_mfma_f32_16x16x32_bf8_fp8, llvm::Intrinsic::amdgcn_mfma_f32_16x16x32_bf8_bf8}},
          {{llvm::Intrinsic::amdgcn_mfma_f32_32x32x16_fp8_fp8, llvm::Intrinsic::amdgcn_mfma_f32_32x32x16_fp8_bf8},
           {llvm::Intrinsic::amdgcn_mfma_f32_32x32x16_bf8_fp8, llvm::Intrinsic::amdgcn_mfma_f32_32x32x16_bf8_bf8}}};
      id = ids[big][da == DType::f8e5m2][db == DType::f8e5m2];
    } else {
      const bool bf16 = da == DType::bf16;
      id = big ? (bf16 ? llvm::Intrinsic::amdgcn_mfma_f32_32x32x8bf16_1k : llvm::Intrinsic::amdgcn_mfma_f32_32x32x8f16)
               : (bf16 ? llvm::Intrinsic::amdgcn_mfma_f32_16x16x16bf16_1k
                       : llvm::Intrinsic::amdgcn_mfma_f32_16x16x16f16);
      auto* four = llvm::FixedVectorType::get(bf16 ? b_.getInt16Ty() : b_.getHalfTy(), 4);
      a = b_.CreateBitCast(a, four), b = b_.CreateBitCast(b, four);
    }
    return b_.CreateIntrinsic(id, {}, {a, b, acc, b_.getInt32(0), b_.getInt32(0), b_.getInt32(0)});
  }
  /// gfx942's f8 formats are the "FNUZ" ones: one more exponent bias than OCP's e4m3 and e5m2
  /// (which tiledist's f8 dtypes are), no infinities, no negative zero, NaN 0x80. OCP bits read
  /// as FNUZ are half the value, so the product is a quarter; -0 becomes +0, and NaN (and e5m2's
  /// infinities, which FNUZ lacks) become NaN.
  llvm::Value* mfma_operand(llvm::Value* bits, ir::DType d) override {
    if (!f8(d)) return bits;
    llvm::Value* magnitude = b_.CreateAnd(bits, b_.getInt8(0x7F));
    llvm::Value* not_finite = d == ir::DType::f8e4m3 ? b_.CreateICmpEQ(magnitude, b_.getInt8(0x7F))
                                                     : b_.CreateICmpUGE(magnitude, b_.getInt8(0x7C));
    llvm::Value* r = b_.CreateSelect(b_.CreateICmpEQ(bits, b_.getInt8(static_cast<int8_t>(0x80))), b_.getInt8(0), bits);
    return b_.CreateSelect(not_finite, b_.getInt8(static_cast<int8_t>(0x80)), r);
  }
  double mfma_product_scale(ir::DType a, ir::DType b) const override { return f8(a) ? 4.0 : 1.0; }

  const char* triple() const override { return "amdgcn-amd-amdhsa"; }
  llvm::Type* param_type(llvm::Type* t) override {
    return t->isPointerTy() && t->getPointerAddressSpace() == 0 ? b_.getPtrTy(1) : t;
  }
  void define_kernel(llvm::Function* fn, int threads, unsigned, unsigned maps) override {
    TD_ASSERT(maps == 0, "TMA tensor maps on an AMD GPU");
    fn->setCallingConv(llvm::CallingConv::AMDGPU_KERNEL);
    fn->addFnAttr("amdgpu-flat-work-group-size", str_cat("1,", threads));
    // Every launch is of whole programs: the backend may assume the grid is a multiple of them.
    fn->addFnAttr("uniform-work-group-size", "true");
  }
  llvm::Value* param(llvm::Argument* a) override {
    if (!a->getType()->isPointerTy() || a->getType()->getPointerAddressSpace() != 1) return a;
    return b_.CreateAddrSpaceCast(a, b_.getPtrTy());
  }

  llvm::Value* thread_id() override { return b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_workitem_id_x, {}, {}); }
  llvm::Value* program_id(int axis) override {
    static const llvm::Intrinsic::ID ids[] = {llvm::Intrinsic::amdgcn_workgroup_id_x,
                                              llvm::Intrinsic::amdgcn_workgroup_id_y,
                                              llvm::Intrinsic::amdgcn_workgroup_id_z};
    return b_.CreateIntrinsic(ids[axis], {}, {});
  }
  /// From the HSA dispatch packet: the grid's size in threads over the workgroup's, rounded up
  /// (hsa_kernel_dispatch_packet_t: u16 workgroup_size_x at byte 4, u32 grid_size_x at 12).
  llvm::Value* num_programs(int axis) override {
    llvm::Value* packet = b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_dispatch_ptr, {}, {});
    auto field = [&](int64_t offset, llvm::Type* t) {
      auto* ld = b_.CreateAlignedLoad(t, b_.CreateConstGEP1_64(b_.getInt8Ty(), packet, offset),
                                      llvm::Align(t->getPrimitiveSizeInBits() / 8));
      ld->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(module_.getContext(), {}));
      return ld;
    };
    llvm::Value* group = b_.CreateZExt(field(4 + 2 * axis, b_.getInt16Ty()), b_.getInt32Ty());
    llvm::Value* grid = field(12 + 4 * axis, b_.getInt32Ty());
    return b_.CreateUDiv(b_.CreateAdd(grid, b_.CreateSub(group, b_.getInt32(1))), group);
  }
  /// s_barrier between workgroup-scope fences (what HIP's __syncthreads is): LDS and global
  /// writes before it are visible to the workgroup after it.
  void barrier() override {
    llvm::SyncScope::ID wg = module_.getContext().getOrInsertSyncScopeID("workgroup");
    b_.CreateFence(llvm::AtomicOrdering::Release, wg);
    b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_s_barrier, {}, {});
    b_.CreateFence(llvm::AtomicOrdering::Acquire, wg);
  }

  /// ocml's functions, for f32 and f64 alike.
  llvm::Value* math(ir::OpCode code, llvm::Value* x) override {
    using ir::OpCode;
    const char* name = code == OpCode::Exp     ? "exp"
                       : code == OpCode::Exp2  ? "exp2"
                       : code == OpCode::Log   ? "log"
                       : code == OpCode::Log2  ? "log2"
                       : code == OpCode::Sqrt  ? "sqrt"
                       : code == OpCode::Rsqrt ? "rsqrt"
                       : code == OpCode::Sin   ? "sin"
                       : code == OpCode::Cos   ? "cos"
                       : code == OpCode::Floor ? "floor"
                       : code == OpCode::Ceil  ? "ceil"
                                               : "erf";
    llvm::Type* t = x->getType();
    auto fn = module_.getOrInsertFunction(str_cat("__ocml_", name, t->isDoubleTy() ? "_f64" : "_f32"),
                                          llvm::FunctionType::get(t, {t}, false));
    return b_.CreateCall(fn, {x});
  }

  /// ds_bpermute: each lane reads the lane whose byte address it gives (the lane index times 4).
  llvm::Value* shuffle_xor(llvm::Value* v, int mask) override {
    llvm::Value* lo = b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_mbcnt_lo, {}, {b_.getInt32(-1), b_.getInt32(0)});
    llvm::Value* lane = b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_mbcnt_hi, {}, {b_.getInt32(-1), lo});
    llvm::Value* address = b_.CreateShl(b_.CreateXor(lane, b_.getInt32(mask)), 2);
    const bool fl = v->getType()->isFloatTy();
    llvm::Value* bits = fl ? b_.CreateBitCast(v, b_.getInt32Ty()) : v;
    llvm::Value* r = b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_ds_bpermute, {}, {address, bits});
    return fl ? b_.CreateBitCast(r, b_.getFloatTy()) : r;
  }
  /// s_memrealtime: a constant 100 MHz clock on gfx90a and gfx942.
  llvm::Value* nanoseconds() override {
    return b_.CreateMul(b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_s_memrealtime, {}, {}), b_.getInt64(10));
  }

  /// s_endpgm: the wavefront ends and the kernel completes. (A trap would make the HIP runtime
  /// abort the process before the host could read the failure record; the launch reads it.)
  void give_up() override { b_.CreateIntrinsic(llvm::Intrinsic::amdgcn_endpgm, {}, {}); }

  llvm::Value* load(llvm::Type* t, llvm::Value* p, ir::MemOrder order, ir::MemScope scope) override {
    auto* ld = b_.CreateAlignedLoad(t, global_ptr(p), llvm::Align(t->getPrimitiveSizeInBits() / 8), /*volatile*/ true);
    ld->setAtomic(ordering(order), sync_scope(scope));
    return ld;
  }
  void store(llvm::Value* p, llvm::Value* v, ir::MemOrder order, ir::MemScope scope) override {
    auto* st = b_.CreateAlignedStore(v, global_ptr(p), llvm::Align(v->getType()->getPrimitiveSizeInBits() / 8),
                                     /*volatile*/ true);
    st->setAtomic(ordering(order), sync_scope(scope));
  }
  void fence(ir::MemOrder order, ir::MemScope scope) override {
    if (order != ir::MemOrder::relaxed) b_.CreateFence(ordering(order), sync_scope(scope));
  }
  llvm::Value* atomic(std::optional<ir::RmwKind> kind, ir::DType d, llvm::Value* p, llvm::Value* v,
                      llvm::Value* desired, ir::MemOrder order, ir::MemScope scope, bool) override {
    return llvm_atomic(b_, kind, d, global_ptr(p), v, desired, ordering(order), sync_scope(scope));
  }

 private:
  /// AMDGPU's scopes: a workgroup (cta), the agent (gpu), the system (sys: other GPUs and the host).
  llvm::SyncScope::ID sync_scope(ir::MemScope scope) {
    if (scope == ir::MemScope::sys) return llvm::SyncScope::System;
    return module_.getContext().getOrInsertSyncScopeID(scope == ir::MemScope::cta ? "workgroup" : "agent");
  }

  static bool f8(ir::DType d) { return d == ir::DType::f8e4m3 || d == ir::DType::f8e5m2; }

  std::string arch_;
};

std::unique_ptr<GpuTarget> make_amdgcn(llvm::IRBuilder<>& b, llvm::Module& m, const GpuOptions& opts) {
  return std::make_unique<AmdgcnTarget>(b, m, opts);
}

}  // namespace

GpuModule lower_amdgcn(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts) {
  return lower_gpu(f, ctx, opts, make_amdgcn);
}

}  // namespace tiledist::codegen
