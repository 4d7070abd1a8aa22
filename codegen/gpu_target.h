// What a GPU target gives the GPU lowering (codegen/gpu_ir/): its facts (warp size, the
// matrix units it has) and the few instructions whose form differs between vendors: special
// registers, the program's barrier, math functions, warp shuffles, the clock, and the memory
// model's ordered loads, stores, atomics and fences. codegen/nvptx.cpp and codegen/amdgcn.cpp
// implement it; everything else (layouts, loads and stores, reductions, control flow, the
// distributed ops) is shared.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "ir/ir.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "support/matrix_instrs.h"

namespace tiledist::codegen {

class GpuTarget {
 public:
  GpuTarget(llvm::IRBuilder<>& b, llvm::Module& m) : b_(b), module_(m) {}
  virtual ~GpuTarget() = default;

  // ---- facts
  /// Threads that run in lockstep (a warp, a wavefront).
  virtual int warp_size() const = 0;
  /// NVIDIA tensor cores: mma.sync, ldmatrix and cp.async pipelines (sm_80 and later).
  virtual bool mma_sync() const { return false; }
  /// Hopper: wgmma, TMA, mbarriers, setmaxnreg (sm_90a).
  virtual bool hopper() const { return false; }
  /// The target's first matrix instruction on `unit` (support/matrix_instrs.h), or null.
  virtual const MatrixInstr* matrix_instr(MatrixUnit unit) const { return nullptr; }
  /// f32 -> bf16 in one instruction (cvt.rn.bf16.f32, sm_80 and later), through LLVM's fptrunc.
  virtual bool bf16_convert() const { return false; }
  /// AMD's matrix cores: the side of the square MFMA tile an M x N accumulator is made of (32,
  /// else 16), or 0 where there is none; and whether they take A and B of these dtypes.
  virtual int64_t mfma_tile(int64_t M, int64_t N) const { return 0; }
  virtual bool mfma_takes(ir::DType a, ir::DType b) const { return false; }
  /// One MFMA of tile side `side`: `a` and `b` are this lane's 8 bytes of A and B (4 16-bit or 8
  /// f8 elements along K, as mfma_operand made them), `acc` its side * side / 64 accumulator
  /// registers; K is 256 / side for 16-bit operands, 512 / side for f8.
  virtual llvm::Value* mfma(ir::DType da, ir::DType db, int64_t side, llvm::Value* a, llvm::Value* b,
                            llvm::Value* acc) {
    TD_ASSERT(false, "MFMA on a target without it");
    return nullptr;
  }
  /// The bits an operand element of dtype `d` is staged as for MFMA (its memory bits: `bits`),
  /// and how much the MFMA's product of such operands falls short of the true one (a power of
  /// two, undone on the accumulator).
  virtual llvm::Value* mfma_operand(llvm::Value* bits, ir::DType d) { return bits; }
  virtual double mfma_product_scale(ir::DType a, ir::DType b) const { return 1.0; }
  /// The kernel's shared memory `smem` (an unsized array in address space 3, which the lowering
  /// addresses) once its size `bytes` is known: NVIDIA's stays dynamic shared memory, which the
  /// launch sizes (beyond 48 KiB it must be); AMD's LDS becomes a static array of that size (the
  /// code object states it, and a launch gives no dynamic size).
  virtual void size_shared_memory(llvm::GlobalVariable* smem, int64_t bytes) {}

  // ---- the kernel
  virtual const char* triple() const = 0;
  /// The LLVM type of a kernel parameter whose value has type `t` in the lowering.
  virtual llvm::Type* param_type(llvm::Type* t) { return t; }
  /// Makes `fn` a kernel of `threads` threads per program; parameters [first_map, first_map +
  /// maps) are TMA tensor maps passed by value (NVPTX only).
  virtual void define_kernel(llvm::Function* fn, int threads, unsigned first_map, unsigned maps) = 0;
  /// A parameter's value as the lowering uses it (pointers: generic).
  virtual llvm::Value* param(llvm::Argument* a) { return a; }

  // ---- registers, barrier, math
  virtual llvm::Value* thread_id() = 0;
  virtual llvm::Value* program_id(int axis) = 0;
  virtual llvm::Value* num_programs(int axis) = 0;
  /// Every thread of the program meets here; shared memory written before is visible after.
  virtual void barrier() = 0;
  /// exp, exp2, log, log2, sqrt, rsqrt, sin, cos, floor, ceil, erf of an f32 (or f64) value.
  virtual llvm::Value* math(ir::OpCode code, llvm::Value* x) = 0;
  /// |x| of an f32.
  virtual llvm::Value* fabs(llvm::Value* x) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  /// An f8 value (`bits`, i8, of format `d`) as an f32, by a table of the format's 256 codes
  /// (codegen/gpu_f8.cpp).
  llvm::Value* f8_from_bits(llvm::Value* bits, ir::DType d);
  /// An f32 rounded to format `d`'s bits (i8): to nearest even, finite overflow saturating (as
  /// the host conversion does): the target's instruction where it has one (f8_convert), else a
  /// binary search of the table of its non-negative finite values for the largest at most |v|,
  /// then that code or the next.
  llvm::Value* f8_to_bits(llvm::Value* v, ir::DType d);
  /// f8_to_bits in the target's own instruction, or null where it has none.
  virtual llvm::Value* f8_convert(llvm::Value* v, ir::DType d) { return nullptr; }
  /// Two f32s' f8_to_bits in one of the target's instructions ({a's, b's}), or {null, null}
  /// where it has none.
  virtual std::pair<llvm::Value*, llvm::Value*> f8_convert_pair(llvm::Value* a, llvm::Value* b, ir::DType d) {
    return {nullptr, nullptr};
  }
  /// `v` (an f32 or i32) of the lane whose index is this lane's xor `mask`.
  virtual llvm::Value* shuffle_xor(llvm::Value* v, int mask) = 0;
  /// A clock in nanoseconds (for timeouts, and the profiler's records).
  virtual llvm::Value* nanoseconds() = 0;
  /// The multiprocessor the thread runs on (an i32; the profiler's records), 0 where unknown.
  virtual llvm::Value* processor_id() { return b_.getInt32(0); }
  /// Ends the program of a thread that gave up, its failure record filled (an unreachable
  /// follows): a trap where the host is told by the launch's error.
  virtual void give_up() { b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {}); }

  // ---- the memory model, on global memory, in the order and scope a kernel names
  virtual llvm::Value* load(llvm::Type* t, llvm::Value* p, ir::MemOrder order, ir::MemScope scope) = 0;
  virtual void store(llvm::Value* p, llvm::Value* v, ir::MemOrder order, ir::MemScope scope) = 0;
  virtual void fence(ir::MemOrder order, ir::MemScope scope) = 0;
  /// The line holding global address `p` fetched into L2, ahead of loads (a hint; none where
  /// the target has no such instruction).
  virtual void prefetch_l2(llvm::Value* p) {}
  /// One atomic: a read-modify-write of `kind` (v the operand), or where `kind` is none a
  /// compare-and-swap (v the expected value, `desired` the new one), on a value of dtype `d`;
  /// returns the old value unless `result_used` is false (then it may return undef).
  virtual llvm::Value* atomic(std::optional<ir::RmwKind> kind, ir::DType d, llvm::Value* p, llvm::Value* v,
                              llvm::Value* desired, ir::MemOrder order, ir::MemScope scope, bool result_used) = 0;

 protected:
  /// `p` as a global-memory pointer (address space 1 on both vendors).
  llvm::Value* global_ptr(llvm::Value* p) { return b_.CreateAddrSpaceCast(p, b_.getPtrTy(1)); }

  llvm::IRBuilder<>& b_;
  llvm::Module& module_;
};

/// Inline assembly with side effects that clobbers memory: it keeps its place among loads,
/// stores and barriers.
inline llvm::Value* inline_asm(llvm::IRBuilder<>& b, llvm::Type* ret, const std::string& text, std::string constraints,
                               const std::vector<llvm::Value*>& args) {
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) types.push_back(a->getType());
  auto* ty = llvm::FunctionType::get(ret, types, false);
  constraints += constraints.empty() ? "~{memory}" : ",~{memory}";
  return b.CreateCall(ty, llvm::InlineAsm::get(ty, text, constraints, true), args);
}

/// A wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format") of the tile at the 32-bit
/// shared address `addr`: address >> 4 in bits 0-13, LBO >> 4 from bit 16, SBO >> 4 from bit 32,
/// the 128-byte swizzle in bits 62-63. The GPU lowering's wgmma dots take it.
inline llvm::Value* wgmma_descriptor(llvm::IRBuilder<>& b, llvm::Value* addr, int64_t lbo, int64_t sbo) {
  const uint64_t fixed = (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) | (uint64_t(1) << 62);
  llvm::Value* a = b.CreateAnd(b.CreateLShr(addr, 4), b.getInt32(0x3FFF));
  return b.CreateOr(b.CreateZExt(a, b.getInt64Ty()), b.getInt64(fixed));
}

using MakeGpuTarget = std::unique_ptr<GpuTarget> (*)(llvm::IRBuilder<>& b, llvm::Module& m, const GpuOptions& opts);

/// The GPU lowering (codegen/gpu_ir/), for the target `make` gives: runs the GPU passes on a
/// copy of `f` (the optimized IR) and lowers their output, in the target's own form of the GPU
/// IR or, where that is refused (sm_90a: wgmma's), the next (sm_89's mma.sync); throws Error
/// naming the kernel and what no form takes.
GpuModule lower_gpu(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make);

/// With $TILEDIST_EXPLAIN set, says on stderr why a kernel's compile took the path it did (the
/// GPU IR's sm_90a form refused, sm_89's instead); nothing otherwise. (Compiles only: a kernel found in the cache is
/// not compiled again.)
void explain(const std::string& kernel, const std::string& what);

}  // namespace tiledist::codegen
